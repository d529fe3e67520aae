"""The Worker runtime's exceptions.

Exception tree::

    WorkerError               every refusal of the Worker library
    ├── MalformedEvent        not an Event of DESIGN §4 (a member missing or of the wrong type)
    ├── ChainBroken           the Event does not continue the Group's hash chain, or a
    │                         different Event claims a sequence already applied
    ├── ProjectionError       the Event is authentic but names what the projection lacks
    │                         (a WorkItem Event before its ``work.authorized``)
    ├── SnapshotRefused       a snapshot failed verification (``check`` says which) or
    │                         is behind the durable Cursor
    ├── StoreMismatch         the store file belongs to another Agent or schema
    └── StoreLocked           another process has the store file open

When ``Store.apply()`` raises, nothing of the refused Event was written; Events
applied before it in the same call (a filled gap) stay applied and are listed
in ``applied``.
"""

from __future__ import annotations


class WorkerError(Exception):
    """Base of every error the Worker library raises on purpose."""


class MalformedEvent(WorkerError):
    """The object is not an Event of DESIGN §4."""


class ChainBroken(WorkerError):
    """The Event breaks its Group's hash chain (MWP-EVT-005): refused, not applied.

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
