"""The Worker runtime's exceptions.

Exception tree::

    WorkerError               every refusal of the Worker library
    ├── MalformedEvent        not a Group Event document (§15.2), or a payload the
    │                         catalogue refuses for its kind
    ├── SignatureRefused      the Group Authority's signature does not verify (§6.4)
    ├── ChainBroken           a different Event claims a sequence already applied, or an
    │                         Event ID applied at another position
    ├── ProjectionError       the Event is authentic but names what the projection lacks
    │                         (a WorkItem Event before its ``work.authorized``)
    ├── SnapshotRefused       a snapshot failed verification (``check`` says which) or
    │                         is behind the durable Cursor
    ├── StoreMismatch         the store file belongs to another Agent or schema
    ├── StoreLocked           another process has the store file open
    ├── Refused               the Group Authority refused a Command (``code`` of §19)
    ├── BudgetExceeded        a slot would overrun its Work Contract budget (checked locally)
    ├── PermanentFailure      raised by a handler: fail the WorkItem now, no retry
    └── Fatal                 the runtime cannot go on (the key is refused, bad config)

    SlotStopped (BaseException, like asyncio.CancelledError, so a handler's
    ``except Exception`` cannot swallow it): raised inside a handler when its
    execution ends at the runtime's request
    ├── Preempted             the slot checkpointed and paused (MWP-WRK-015)
    ├── Blocked               the slot checkpointed and blocked (MWP-WRK-017)
    └── LeaseLost             the Execution Lease is no longer this slot's (MWP-WRK-013/-014)

When ``Store.apply()`` raises, nothing of the refused Event was written; Events
applied before it in the same call (a filled gap) stay applied and are listed
in ``applied``.
"""

from __future__ import annotations


class WorkerError(Exception):
    """Base of every error the Worker library raises on purpose."""


class MalformedEvent(WorkerError):
    """The object is not a Group Event document (§15.2), or its payload is not
    one the catalogue accepts for its kind."""


class SignatureRefused(WorkerError):
    """The Event's signature does not verify against the Group Authority's key
    in the Registry (§6.4, profile ``event``): refused, not applied."""


class ChainBroken(WorkerError):
    """The Event does not continue its Group's log (another Event at an applied
    position, an Event ID seen elsewhere; MWP-EVT-005): refused, not applied.

    ``applied`` lists the sequences that were applied in the same ``apply()``
    call before the break was found (a buffered Event that turned out bad).
    """

    def __init__(self, group: str, sequence: int, reason: str, applied: list[int] | None = None):
        super().__init__(f"group {group} sequence {sequence}: {reason}")
        self.group = group
        self.sequence = sequence
        self.reason = reason
        self.applied: list[int] = list(applied or [])


class ProjectionError(WorkerError):
    """An authentic Event that the projection cannot fold (it lacks the aggregate)."""


class SnapshotRefused(WorkerError):
    """A snapshot was not restored; ``check`` names the failed check."""

    def __init__(self, check: str, message: str):
        super().__init__(f"{check}: {message}")
        self.check = check


class StoreMismatch(WorkerError):
    """The SQLite file was made for another Agent or another schema version."""


class StoreLocked(WorkerError):
    """Another process holds the store file (one writer per file)."""


class Refused(WorkerError):
    """The Group Authority refused a Command; ``code`` is its error code (one of
    the 27 of spec §19) and ``reason`` the document's ``details.reason``, the
    finer case the code covers, when it has one."""

    def __init__(self, code: str, message: str, reason: str | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.reason = reason


class BudgetExceeded(WorkerError):
    """A slot's usage would pass a Work Contract budget (spec 10.1, 11.4)."""

    def __init__(self, dimension: str, limit: float, total: float):
        super().__init__(f"budget {dimension}: {total} would pass {limit}")
        self.dimension = dimension
        self.limit = limit
        self.total = total


class PermanentFailure(WorkerError):
    """Raised by a handler: the WorkItem fails now with this summary; no retry."""


class Fatal(WorkerError):
    """The runtime cannot continue (the portal refuses the key, the config is wrong)."""


class SlotStopped(BaseException):  # noqa: N818 (a control-flow signal like CancelledError, not an error)
    """The slot's execution ended at the runtime's request; the handler must return."""


class Preempted(SlotStopped):
    """Checkpointed and paused: the WorkItem is back in its Group queue (MWP-WRK-015)."""


class Blocked(SlotStopped):
    """Checkpointed and blocked with a required resolution (MWP-WRK-017)."""


class LeaseLost(SlotStopped):
    """The Execution Lease ended elsewhere (revoked, expired, fenced): stop without
    further lease-bound Commands (MWP-WRK-013, MWP-WRK-014)."""
