"""The Worker runtime: asyncio over the sans-I/O session and the local store (DESIGN §5; STYLE §7).

``Worker`` connects with its agent key, opens a session (``POST
/api/v1/sessions``), says ``hello``, learns its Groups (``GET
/api/v1/memberships`` and ``membership`` frames) and subscribes every Group
from its durable Cursor. Every Event goes through ``Store.apply`` (the apply
cycle of the persistence guide) and the highest contiguous durable Cursors are
ACKed (MWP-WRK-029/-030). ``cursor_too_old`` fetches the signed snapshot,
which ``Store.restore_snapshot`` verifies before restoring; replay resumes
strictly after it.

What the projection asks for (the store's outbox intents) the reactor does
after commit: answer offers through admission control (spec 10.3), stop a
slot whose lease ended elsewhere. It then fills free slots with what the
``Picker`` chooses among this Worker's queued WorkItems.

A slot runs one WorkItem under an Execution Lease (``work.start``; the Lease
ID, expiry and capability token come in the receipt's ``grants``), renews the
lease before it expires, and names the current Lease ID on every checkpoint,
block, submission and failure (MWP-WRK-013). The handler sees a
``SlotContext`` holding only its own Mission's data, contract, token,
checkpoints, budget and side-effect key namespace (MWP-WRK-011); everything
it asks of the runtime travels over the slot's own request channel, so the
context holds no reference to the Worker, the store or another slot (within
one Python process, nothing stops code from walking the event loop's own
machinery; the isolation test walks the context's references up to it).

A checkpoint releases the lease (spec 10.2: ``active`` -> ``work.checkpoint``
-> ``queued``), so a slot that checkpoints without a preemption request
starts again at once under a new Lease ID and token (``ctx.lease_id`` and
``ctx.token`` follow); with one, it pauses there: the five steps of spec
11.3 (MWP-WRK-015). Blocking is the same safe sequence ending in
``work.blocked`` (MWP-WRK-017).

Failures: a handler's exception becomes ``work.fail`` with Evidence, marked
retryable while the Work Contract's attempts, deadline and cost allow
(``retry_decision``); the Group Authority then queues the next attempt after
the backoff and the runtime starts it when the backoff ends (MWP-WRK-018).
External operations go through ``SlotContext.side_effect``: a deterministic
idempotency key, the intent durable before dispatch, the receipt kept, an
uncertain outcome reconciled before a retry (MWP-WRK-031).

Reconnection follows websockets' habit: a retry rule (``should_retry``) and a
capped, jittered backoff generator (``backoff``). A lost connection keeps the
session: in-flight Commands are sent again with the same action IDs (the
server answers a repeat with its stored receipt, MWP-EVT-003). A replaced
session (close 4001) revoked every lease on the server (MWP-WRK-014): every
slot stops and the WorkItems wait in their queues for the new session.

Catching up (issue 16 item 12): after every welcome, nothing bound to
ownership (``work.start``, renewals, checkpoints, blocks, submissions,
failures) goes out for a Group until its durable Cursor has reached the
Group's head, read after that welcome (``GET /api/v1/groups/{id}/events``).
A restarted Worker's store may still show a WorkItem as it was before the
restart's own lease revocation; starting from that earned REVISION_CONFLICT.

A Command refused ``AUTH_INVALID_SIGNATURE`` that was signed a while ago (a resend
after a long disconnect outlives the server's ``issued_at`` freshness window)
is sent once more as a new Command, with a new action ID, a current
``issued_at`` and a new signature (spec §19); a second refusal stands.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import random
import urllib.error
import urllib.request
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from mwportal.protocol import attempt_key, format_time, make_envelope, parse_time, signed

from .errors import (
    Blocked,
    BudgetExceeded,
    ChainBroken,
    Fatal,
    LeaseLost,
    MalformedEvent,
    PermanentFailure,
    Preempted,
    ProjectionError,
    Refused,
    SlotStopped,
    SnapshotRefused,
    WorkerError,
)
from .projection import GroupMeta, OutboxRow, WorkRow
from .protocol import (
    BadFrame,
    ClientSession,
    Closed,
    CommandRefused,
    CursorTooOld,
    EventReceived,
    MembershipChanged,
    ProtocolEvent,
    ReceiptReceived,
    ServerError,
    SubscriptionRefused,
    Welcome,
    error_reason,
)
from .scheduler import FairScheduler, Picker
from .store import Store

log = logging.getLogger("mwworker")

DECLINE_REASONS = ("capacity", "deadline", "capability", "authorization", "dependency", "budget")
BUDGET_DIMENSIONS = ("financial", "tokens", "tool_calls", "compute_seconds", "wall_clock_seconds", "side_effects")
# Refusals that mean "this lease is not yours any more": the slot stops, no further lease-bound Command.
START_RETRY_SECONDS = 5.0  # a refused work.start is tried again after this, if its row did not change
ACK_INTERVAL = 0.2  # seconds between ACK frames while a replay streams in
HEAD_RETRY_SECONDS = 1.0  # a Group head that could not be read is asked again after this
# A Command refused AUTH_INVALID_SIGNATURE when signed longer ago than this is sent
# once more as a new Command (spec §19): the server's freshness window is the
# Organization's (900 s by default), and a resend after a long disconnect
# outlives it. A Command signed just now is not stale: its refusal stands.
REFRESH_AFTER_SECONDS = 60.0
# The critical extension of progress buffered while the Group service is
# unreachable, and how long after its lease the Worker may go on buffering
# (the Group Authority's MWP_OFFLINE_GRACE_SECONDS must be at least this).
OFFLINE_EXTENSION = "urn:missionweaveprotocol:extension:bounded-offline-execution"
OFFLINE_GRACE_SECONDS = 600.0
LEASE_GONE = frozenset({"WORK_LEASE_EXPIRED", "WORK_STALE_OWNERSHIP", "AUTH_STALE_SESSION", "INVALID_STATE_TRANSITION"})
# INVALID_STATE_TRANSITION also covers refusals that leave the lease standing
# (the Evidence or the dependencies are not there yet): not a lost lease.
LEASE_KEPT_REASONS = frozenset({"evidence_required", "dependency_unmet"})


def lease_gone(exc: Refused) -> bool:
    """The refusal says this Worker no longer holds the lease it used."""
    return exc.code in LEASE_GONE and exc.reason not in LEASE_KEPT_REASONS


_DEP_SATISFIED = {
    "verified": frozenset({"verified"}),
    "submitted": frozenset({"submitted", "verified"}),
    "terminal": frozenset({"verified", "failed", "cancelled"}),
}
_DEP_IMPOSSIBLE = {  # states from which the policy can no longer be met without a new offer
    "verified": frozenset({"cancelled"}),
    "submitted": frozenset({"cancelled"}),
    "terminal": frozenset(),
}


def utcnow() -> datetime:
    return datetime.now(UTC)


# --- identity and configuration ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Identity:
    """The Worker's Agent: the key file of DESIGN §4 as ``mwp create-agent`` writes it."""

    agent_id: str
    organization: str
    private_key: str
    public_key: str = ""

    @classmethod
    def from_key_file(cls, path: str | Path) -> Identity:
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            raise Fatal(f"cannot read the key file {p}: {exc}") from None
        if not isinstance(data, dict) or not all(
            isinstance(data.get(k), str) for k in ("agent_id", "organization", "private_key")
        ):
            raise Fatal(f"{p}: a key file holds agent_id, organization, private_key and public_key")
        if p.stat().st_mode & 0o077:
            log.warning("key file %s is readable by others; it should be mode 0600", p)
        return cls(data["agent_id"], data["organization"], data["private_key"], str(data.get("public_key", "")))


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """``worker.toml``::

    [worker]
    portal = "http://127.0.0.1:8000"
    key_file = "wanda.json"          # relative paths are relative to the config file
    store = "wanda.sqlite3"
    capabilities = "mwworker.demo"   # a module with register(worker)
    slots = 2
    queue_limit = 8                  # optional: admission capacity (default 4 x slots)
    server_public_key = "..."        # optional: pin the snapshot-signing key
    """

    portal: str
    key_file: Path
    store: Path
    capabilities: str | None = None
    slots: int = 2
    queue_limit: int | None = None
    server_public_key: str | None = None

    @classmethod
    def load(cls, path: str | Path) -> WorkerConfig:
        import tomllib

        p = Path(path)
        try:
            raw = tomllib.loads(p.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise Fatal(f"cannot read {p}: {exc}") from None
        section = raw.get("worker", raw)
        unknown = set(section) - {"portal", "key_file", "store", "capabilities", "slots", "queue_limit",
                                  "server_public_key"}  # fmt: skip
        if unknown:
            raise Fatal(f"{p}: unknown settings {sorted(unknown)}")
        for name in ("portal", "key_file", "store"):
            if not isinstance(section.get(name), str):
                raise Fatal(f"{p}: [worker] {name} is required (a string)")
        slots = section.get("slots", 2)
        if not isinstance(slots, int) or not 1 <= slots <= 1024:
            raise Fatal(f"{p}: slots must be an integer from 1 to 1024")
        base = p.parent
        return cls(
            portal=section["portal"].rstrip("/"),
            key_file=(base / section["key_file"]).resolve(),
            store=(base / section["store"]).resolve(),
            capabilities=section.get("capabilities"),
            slots=slots,
            queue_limit=section.get("queue_limit"),
            server_public_key=section.get("server_public_key"),
        )


# --- the retry rule and the backoff generator (websockets' habit) -------------------


def backoff(
    initial: float = 0.5, factor: float = 2.0, cap: float = 30.0, rng: Callable[[], float] = random.random
) -> Iterator[float]:
    """Reconnect delays: exponential from ``initial`` by ``factor`` up to
    ``cap``, each jittered into [d/2, d] so a fleet does not reconnect in step."""
    delay = initial
    while True:
        yield delay * (0.5 + 0.5 * rng())
        delay = min(delay * factor, cap)


def should_retry(exc: BaseException) -> bool:
    """The retry rule: transport failures and refused handshakes are
    transient; a ``Fatal`` (the key is refused, bad config) is not."""
    if isinstance(exc, Fatal):
        return False
    return isinstance(exc, OSError | ConnectionClosed | InvalidHandshake | TimeoutError | Refused | WorkerError)


def renew_delay(lease_seconds: float, *, fraction: float = 0.5, margin: float = 1.0) -> float:
    """Seconds after a grant at which to renew a lease of ``lease_seconds``:
    at ``fraction`` of it, and at least ``margin`` seconds before it ends."""
    return max(0.0, min(lease_seconds * fraction, lease_seconds - margin))


# --- picking the next WorkItem ----------------------------------------------------


def required_capabilities(row: WorkRow) -> frozenset[tuple[str, str]]:
    """The ``(id, version)`` pairs the row's Work Contract requires."""
    contract = json.loads(row.contract)
    caps = contract.get("capabilities") if isinstance(contract, dict) else None
    return frozenset((str(c.get("id")), str(c.get("version"))) for c in caps or [] if isinstance(c, dict))


class FifoPicker:
    """Oldest first: the order in which a WorkItem entered this Worker's queue
    (a checkpointed, preempted or unblocked WorkItem re-enters at the back).
    Skips WorkItems whose execution Approval is missing or whose capabilities
    this Worker lacks. Ignores the priority policy: weighted fairness is the
    cross-Group Scheduler's job."""

    def __init__(self) -> None:
        self._order: dict[tuple[str, str, int], int] = {}
        self._next = 0
        self.policy: Mapping[str, Any] = {}

    def _rank(self, row: WorkRow) -> int:
        key = (row.group_id, row.workitem, row.updated_sequence)
        if key not in self._order:
            self._order[key] = self._next
            self._next += 1
        return self._order[key]

    def pick(
        self,
        candidates: Sequence[WorkRow],
        *,
        running: Mapping[str, int],
        free_slots: int,
        capabilities: frozenset[tuple[str, str]],
        now: datetime,
    ) -> WorkRow | None:
        if free_slots <= 0:
            return None
        # Rank every candidate in a stable order, so first sight is deterministic.
        eligible = [
            r
            for r in sorted(candidates, key=lambda r: (r.group_id, r.updated_sequence, r.workitem))
            if r.execution_approved and required_capabilities(r) <= capabilities
        ]
        if not eligible:
            return None
        return min(eligible, key=self._rank)

    def dispatched(self, row: WorkRow, now: datetime) -> None:
        self._order.pop((row.group_id, row.workitem, row.updated_sequence), None)

    def set_policy(self, policy: Mapping[str, Any]) -> None:
        self.policy = policy


# --- admission control and retries (pure) -----------------------------------------


@dataclass(frozen=True, slots=True)
class Decline:
    """A structured decline reason (spec 10.3; DESIGN §4a ``work.decline_offer``)."""

    reason: str
    detail: str


Handler = Callable[["SlotContext"], Coroutine[Any, Any, "Result"]]


@dataclass(frozen=True, slots=True)
class Capability:
    """A registered handler and what admission control needs to know of it."""

    id: str
    version: str
    handler: Handler
    estimate: Mapping[str, float] = field(default_factory=dict)  # expected usage per WorkItem
    duration_seconds: float = 0.0  # expected run time, for deadlines


def admit(
    row: WorkRow,
    *,
    capabilities: Mapping[tuple[str, str], Capability],
    committed: int,
    queue_limit: int,
    my_roles: Sequence[str],
    member: bool,
    dependency_states: Mapping[str, str | None],
    now: datetime,
) -> Decline | None:
    """``None`` when this Worker can make a credible commitment to ``row``,
    else why not (spec 10.3: capacity, deadline, capability, authorization,
    dependency or budget). Pure: every input is an argument.

    ``committed`` counts WorkItems this Worker owns and has not finished
    (queued, active or blocked); ``dependency_states`` maps each dependency
    to its state in the Group's projection (None: unknown here).
    """
    contract = json.loads(row.contract)
    if not member or "worker" not in my_roles:
        return Decline("authorization", "this Agent holds no active worker Membership in the Group")
    needed = required_capabilities(row)
    missing = sorted(needed - set(capabilities))
    if missing:
        return Decline("capability", "missing capabilities: " + ", ".join(f"{i}@{v}" for i, v in missing))
    for dep in contract.get("dependencies") or []:
        state = dependency_states.get(str(dep.get("workitem")))
        if state is not None and state in _DEP_IMPOSSIBLE.get(str(dep.get("policy")), frozenset()):
            return Decline("dependency", f"dependency {dep.get('workitem')} is {state}; its policy cannot hold")
    duration = max((capabilities[c].duration_seconds for c in needed), default=0.0)
    deadline = contract.get("deadline")
    if isinstance(deadline, str) and parse_time(deadline, "deadline") <= now + timedelta(seconds=duration):
        return Decline("deadline", f"cannot finish before the deadline {deadline}")
    budgets = contract.get("budgets") if isinstance(contract.get("budgets"), dict) else {}
    usage = json.loads(row.usage) if row.usage else {}
    for cap in needed:
        for dim, expected in capabilities[cap].estimate.items():
            limit = budgets.get(dim)
            if limit is not None and usage.get(dim, 0) + expected > limit:
                return Decline("budget", f"expected {dim} {expected} exceeds the budget left")
    retry = contract.get("retry") if isinstance(contract.get("retry"), dict) else {}
    if row.needs_new_attempt and row.attempt >= int(retry.get("max_attempts", 1)):
        return Decline("budget", "every attempt of the retry policy is used")
    if committed >= queue_limit:
        return Decline("capacity", f"{committed} WorkItems already committed (limit {queue_limit})")
    return None


@dataclass(frozen=True, slots=True)
class RetryDecision:
    retry: bool
    reason: str
    not_before: datetime | None = None


def retry_decision(
    contract: Mapping[str, Any], *, attempt: int, usage: Mapping[str, float], now: datetime
) -> RetryDecision:
    """Whether a failed attempt may be retried within the Work Contract's
    attempts, deadline and cost (spec 11.4; MWP-WRK-018), and not before when
    (the backoff: ``backoff_seconds * backoff_multiplier ** (attempt - 1)``,
    as the Group Authority computes it)."""
    retry: Mapping[str, Any] = contract["retry"] if isinstance(contract.get("retry"), dict) else {}
    max_attempts = int(retry.get("max_attempts", 1))
    if attempt >= max_attempts:
        return RetryDecision(False, f"all {max_attempts} attempts are used")
    deadline = retry.get("deadline")
    if isinstance(deadline, str) and parse_time(deadline, "retry.deadline") <= now:
        return RetryDecision(False, "the retry deadline has passed")
    max_cost = retry.get("max_cost")
    if max_cost is not None and usage.get("financial", 0) >= max_cost:
        return RetryDecision(False, "the retry cost limit is reached")
    delay = float(retry.get("backoff_seconds", 0)) * float(retry.get("backoff_multiplier", 1)) ** max(attempt - 1, 0)
    not_before = now + timedelta(seconds=delay)
    if isinstance(deadline, str) and parse_time(deadline, "retry.deadline") <= not_before:
        return RetryDecision(False, "the backoff would end after the retry deadline")
    return RetryDecision(True, f"attempt {attempt} failed; retrying after {delay:g} s", not_before)


# --- what a handler sees ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Result:
    """A handler's outcome: Evidence mapped to every acceptance criterion, and Artifacts."""

    evidence: list[dict[str, Any]]
    artifacts: list[str] = field(default_factory=list)


_PAUSED = "paused"


class _Port:
    """The slot's request channel to the runtime: a queue, nothing else. The
    runtime serves each slot's queue for that slot only, so a context cannot
    act for another slot."""

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: asyncio.Queue[tuple[str, dict[str, Any], asyncio.Future[Any]]] = asyncio.Queue()

    async def call(self, op: str, **args: Any) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._queue.put((op, args, fut))
        return await fut


def _progress(phase: str, milestones: Sequence[str], next_checkpoint: str | None, blockers: Sequence[str],
              estimate: Mapping[str, Any] | None, evidence: Sequence[str]) -> dict[str, Any]:  # fmt: skip
    """The structured progress of spec 11.4 (no percentages)."""
    return {
        "phase": phase,
        "milestones": list(milestones),
        "next_checkpoint": next_checkpoint,
        "blockers": list(blockers),
        "estimate": dict(estimate) if estimate is not None else None,
        "evidence": list(evidence),
    }


class SlotContext:
    """What one WorkItem's handler may see and do (MWP-WRK-011).

    Holds only its own Mission's data (``mission``), the Work Contract
    (``contract``), the capability token bound to the current lease
    (``token``), the checkpoints accepted for this WorkItem
    (``checkpoints``, ``resume_state``), its budget (``charge``) and its
    side-effect key namespace (``idempotency_key``, ``side_effect``).
    Everything else goes through the slot's own request channel.
    """

    __slots__ = (
        "agent", "group", "workitem", "mission", "contract", "ownership_epoch", "attempt", "checkpoints",
        "resume_state", "_token", "_lease_id", "_port", "_usage", "_spent",
    )  # fmt: skip

    def __init__(
        self,
        *,
        agent: str,
        group: str,
        workitem: str,
        mission: Mapping[str, Any],
        contract: Mapping[str, Any],
        ownership_epoch: int,
        attempt: int,
        checkpoints: Sequence[Mapping[str, Any]],
        usage: Mapping[str, float],
        token: str,
        lease_id: str,
        port: _Port,
    ):
        self.agent = agent
        self.group = group
        self.workitem = workitem
        self.mission: Mapping[str, Any] = MappingProxyType(dict(mission))
        self.contract: Mapping[str, Any] = MappingProxyType(json.loads(json.dumps(contract)))
        self.ownership_epoch = ownership_epoch
        self.attempt = attempt
        self.checkpoints: tuple[Mapping[str, Any], ...] = tuple(MappingProxyType(dict(c)) for c in checkpoints)
        # Resumption restores the last accepted checkpoint (spec 11.3, 11.5).
        self.resume_state: Mapping[str, Any] | None = self.checkpoints[-1] if self.checkpoints else None
        self._token = token
        self._lease_id = lease_id
        self._port = port
        self._usage = dict(usage)  # the WorkItem's usage totals as the Group log tells
        self._spent: dict[str, float] = {}  # this slot's usage not yet reported

    @property
    def token(self) -> str:
        """The capability token bound to the current Execution Lease (rotated on renewal)."""
        return self._token

    @property
    def lease_id(self) -> str:
        return self._lease_id

    def _rebind(self, lease_id: str, token: str) -> None:
        self._lease_id, self._token = lease_id, token

    # --- budgets and side effects ----------------------------------------------

    def budget_left(self, dimension: str) -> float | None:
        """What is left of a budget dimension (None: no limit)."""
        budgets = self.contract.get("budgets") or {}
        limit = budgets.get(dimension)
        if limit is None:
            return None
        return float(limit) - self._usage.get(dimension, 0) - self._spent.get(dimension, 0)

    def charge(self, **usage: float) -> None:
        """Count usage against the contract's budgets; ``BudgetExceeded`` (and
        nothing counted) when a dimension would pass its limit. The total is
        reported with the next checkpoint, block or submission."""
        for dim, value in usage.items():
            if dim not in BUDGET_DIMENSIONS or value < 0:
                raise ValueError(f"{dim}: not a budget dimension or negative")
            left = self.budget_left(dim)
            if left is not None and value > left:
                limit = float((self.contract.get("budgets") or {})[dim])
                raise BudgetExceeded(dim, limit, limit - left + value)
        for dim, value in usage.items():
            self._spent[dim] = self._spent.get(dim, 0) + value

    def use_tool(self, tool: str) -> None:
        """Count one call of ``tool``: it must be among the contract's allowed
        tools (``PermissionError`` otherwise) and fit the tool-call budget
        (``BudgetExceeded``)."""
        allowed = (self.contract.get("allowed") or {}).get("tools") or ()
        if tool not in allowed:
            raise PermissionError(f"the Work Contract does not allow the tool {tool!r}")
        self.charge(tool_calls=1)

    def _take_usage(self) -> dict[str, float]:
        spent = {k: v for k, v in self._spent.items() if v}
        for dim, value in spent.items():
            self._usage[dim] = self._usage.get(dim, 0) + value
        self._spent = {}
        return spent

    def idempotency_key(self, operation: str) -> str:
        """The stable key of an external operation (spec 16; MWP-WRK-031):
        Mission ID, WorkItem ID, Ownership Epoch and the operation's logical ID."""
        return attempt_key(str(self.mission["id"]), self.workitem, self.ownership_epoch, operation)

    async def side_effect(
        self,
        operation: str,
        dispatch: Callable[[str], Awaitable[Any]],
        *,
        reconcile: Callable[[str], Awaitable[Any]] | None = None,
    ) -> Any:
        """Run an external operation at most once per key as far as this Worker can tell.

        ``dispatch(key)`` performs it with the idempotency key and returns its
        receipt (JSON). The intent is durable before dispatch; the receipt is
        kept, and a repeat returns it without dispatching. An earlier attempt
        whose outcome is unknown (it raised, or the process died) is first
        reconciled with ``reconcile(key)``, which returns the receipt if the
        operation happened and None if not; without it the operation is
        dispatched again under the same key, for the remote side to deduplicate.
        """
        key = self.idempotency_key(operation)
        known = await self._port.call("effect.lookup", key=key)
        if known is not None:
            status, receipt, _attempts = known
            if status == "done":
                return receipt
            if reconcile is not None:
                found = await reconcile(key)
                if found is not None:
                    await self._port.call("effect.settle", key=key, status="done", receipt=found)
                    return found
        else:
            self.charge(side_effects=1)  # a new external operation counts once, not per retry
        await self._port.call("effect.intent", key=key, name=operation)
        try:
            receipt = await dispatch(key)
        except BaseException:
            await asyncio.shield(self._port.call("effect.settle", key=key, status="uncertain", receipt=None))
            raise
        await self._port.call("effect.settle", key=key, status="done", receipt=receipt)
        return receipt

    # --- progress, preemption and blocking -----------------------------------------

    async def checkpoint(
        self,
        state: Mapping[str, Any],
        *,
        phase: str,
        milestones: Sequence[str] = (),
        next_checkpoint: str | None = None,
        estimate: Mapping[str, Any] | None = None,
        evidence: Sequence[str] = (),
    ) -> None:
        """A safe, idempotent point: ``state`` is durable in the Group log when this returns.

        A checkpoint releases the Execution Lease (spec 10.2). If preemption was
        requested, the slot pauses here: the five steps of spec 11.3
        (MWP-WRK-015) end with ``Preempted`` raised into the handler and the
        WorkItem back in its Group queue. Otherwise the slot starts again under
        a new lease and the handler continues.
        """
        progress = _progress(phase, milestones, next_checkpoint, [], estimate, evidence)
        outcome = await self._port.call("checkpoint", state=dict(state), progress=progress, usage=self._take_usage())
        if outcome == _PAUSED:
            raise Preempted(f"{self.workitem} paused at checkpoint")

    async def block(
        self,
        resolution_required: str,
        state: Mapping[str, Any],
        *,
        phase: str,
        blockers: Sequence[str] = (),
        milestones: Sequence[str] = (),
    ) -> NoReturn:
        """Checkpoint, emit ``work.blocked`` with the required resolution, release
        the slot (spec 11.4; MWP-WRK-017). Raises ``Blocked``; the WorkItem
        resumes from this checkpoint once a Coordinator unblocks it."""
        progress = _progress(phase, milestones, None, list(blockers) or [resolution_required], None, [])
        await self._port.call(
            "block", state=dict(state), progress=progress, usage=self._take_usage(), resolution=resolution_required
        )
        raise Blocked(resolution_required)

    async def put_artifact(self, data: bytes, media_type: str = "application/octet-stream") -> str:
        """Store bytes as an Artifact of this Mission's Group; its SHA-256."""
        return str(await self._port.call("artifact", data=data, media_type=media_type))

    def evidence(
        self, criteria: Sequence[str], *, result: str, method: str, summary: str, artifacts: Sequence[str] = ()
    ) -> dict[str, Any]:
        """An Evidence record (spec 13.2) produced by this Worker about this WorkItem."""
        return {
            "subject": self.workitem,
            "criteria": list(criteria),
            "method": method,
            "result": result,
            "producer": self.agent,
            "timestamp": format_time(utcnow()),
            "artifacts": list(artifacts),
            "summary": summary,
        }


# --- the runtime --------------------------------------------------------------------


@dataclass
class _Slot:
    group: str
    workitem: str
    ownership_epoch: int
    revision: int
    lease_id: str | None = None
    token: str = ""
    lease_seconds: float = 0.0
    lease_expires_at: datetime | None = None
    attempt: int = 0
    preempt: bool = False
    ctx: SlotContext | None = None
    task: asyncio.Task[None] | None = None
    handler_task: asyncio.Task[Result] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    renewals: int = 0
    stopped: str | None = None  # why the slot was stopped from outside


class _Http:
    """A few JSON calls to the portal, on a thread (the stdlib client blocks)."""

    def __init__(self, base: str):
        self.base = base.rstrip("/")
        self.chunk_max: int | None = None  # the portal's, once a resumable upload told it

    async def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        body: Any = None,
        data: bytes | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        return await asyncio.to_thread(self._call, method, path, token, body, data, content_type)

    def _call(
        self,
        method: str,
        path: str,
        token: str | None,
        body: Any,
        data: bytes | None,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        url = path if path.startswith(("http://", "https://")) else self.base + path
        if body is not None:
            data = json.dumps(body).encode("utf-8")
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (the configured portal URL)
        if data is not None:
            request.add_header("Content-Type", content_type)
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, {"code": "HTTP", "message": raw[:200].decode("utf-8", "replace")}

    async def put_artifact(self, token: str | None, group: str, data: bytes, media_type: str) -> str:
        return await asyncio.to_thread(self.put_artifact_blocking, token, group, data, media_type)

    def put_artifact_blocking(self, token: str | None, group: str, data: bytes, media_type: str) -> str:
        """Upload ``data`` as an Artifact of ``group``; its SHA-256.

        Up to the portal's ``chunk_max`` (until known: ``SINGLE_UPLOAD_BYTES``)
        in one request; larger through the resumable upload, a chunk per
        request (under daphne a request body sits whole in the portal's
        memory), resuming from the portal's offset after a lost answer.
        """
        if len(data) <= (self.chunk_max or SINGLE_UPLOAD_BYTES):
            status, payload = self._call("POST", f"/api/v1/artifacts?group={group}", token, None, data, media_type)
            if status != 201:
                raise _error_of(status, payload)
            return str(payload["sha256"])
        sha = hashlib.sha256(data).hexdigest()
        status, payload = self._call(
            "POST", f"/api/v1/artifacts/uploads?group={group}", token, None, b"", media_type,
            {"Upload-Length": str(len(data))},
        )  # fmt: skip
        if status != 201:
            raise _error_of(status, payload)
        self.chunk_max = chunk_max = int(payload["chunk_max"])
        url = f"/api/v1/artifacts/uploads/{payload['upload']}"
        offset, tries = 0, 0
        while offset < len(data):
            chunk = data[offset : offset + chunk_max]
            try:
                status, payload = self._call(
                    "PATCH", url, token, None, chunk, "application/offset+octet-stream", {"Upload-Offset": str(offset)}
                )
            except OSError:  # the answer was lost: ask the portal where to resume
                tries += 1
                if tries > UPLOAD_RETRIES:
                    raise
                status, payload = self._call("GET", url, token, None, None, "application/json")
                if status != 200:
                    raise _error_of(status, payload) from None
                offset = int(payload["offset"])
                continue
            if status == 204:
                offset += len(chunk)
            elif status == 409 and (resume := _resume_offset(payload)) is not None and resume != offset:
                offset = resume
            else:
                raise _error_of(status, payload)
        status, payload = self._call("POST", f"{url}/complete?sha256={sha}", token, None, b"", "application/json")
        if status != 201:
            raise _error_of(status, payload)
        return str(payload["sha256"])


SINGLE_UPLOAD_BYTES = 1024 * 1024  # one request up to this before the portal's chunk_max is known
UPLOAD_RETRIES = 5


def _resume_offset(payload: Any) -> int | None:
    details = payload.get("details") if isinstance(payload, dict) else None
    offset = details.get("offset") if isinstance(details, dict) else None
    return offset if isinstance(offset, int) else None


def _error_of(status: int, payload: Any) -> Refused:
    """The refusal an error document (the bare §19 document of every REST error) describes."""
    if isinstance(payload, dict) and isinstance(payload.get("code"), str):
        return Refused(payload["code"], str(payload.get("message", "")), error_reason(payload))
    return Refused("HTTP", f"status {status}")


class Worker:
    """The reference Worker. Register capabilities, then ``await worker.run()``.

    ::

        worker = Worker(portal="http://127.0.0.1:8000", identity=Identity.from_key_file("k.json"),
                        store="worker.sqlite3", slots=2)

        @worker.capability("summarize", "1.0")
        async def summarize(ctx: SlotContext) -> Result:
            ...
            await ctx.checkpoint({"done": n}, phase="drafting")
            return Result(evidence=[ctx.evidence(["complete"], result="pass", method="test", summary="ok")])

        await worker.run()        # until worker.stop()
    """

    def __init__(
        self,
        *,
        portal: str,
        identity: Identity,
        store: Store | str | Path,
        slots: int = 2,
        picker: Picker | None = None,
        queue_limit: int | None = None,
        server_public_key: str | None = None,
        renew_fraction: float = 0.5,
        reconnect: Callable[[], Iterator[float]] = backoff,
        offline_grace_seconds: float = OFFLINE_GRACE_SECONDS,
        refresh_after_seconds: float = REFRESH_AFTER_SECONDS,
    ):
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self.portal = portal.rstrip("/")
        self.identity = identity
        self.me = identity.agent_id
        self.store = store if isinstance(store, Store) else Store(store, agent=identity.agent_id)
        self.slots = slots
        # The cross-Group Scheduler (weighted fair, anti-starvation; spec 11.1).
        self.picker: Picker = picker if picker is not None else FairScheduler()
        self.queue_limit = queue_limit if queue_limit is not None else 4 * slots
        self.renew_fraction = renew_fraction
        self._server_key = server_public_key
        self._reconnect = reconnect
        self._http = _Http(self.portal)
        self.capabilities: dict[tuple[str, str], Capability] = {}
        self._running: dict[str, _Slot] = {}  # workitem -> slot
        # (group, item) -> (updated_sequence, when): a refused start waits for
        # the row to change, or START_RETRY_SECONDS (the cause may be another row).
        self._start_refused: dict[tuple[str, str], tuple[int, datetime]] = {}
        self._accepted: set[tuple[str, str]] = set()  # offers accepted whose Event is not applied yet
        self._token: str | None = None
        self.session_epoch: int | None = None
        self._session: ClientSession | None = None
        self._ws: ClientConnection | None = None
        self._send_lock = asyncio.Lock()
        self._pending: dict[str, tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]] = {}
        self._connected = asyncio.Event()
        # Buffered progress is reconciled before anything else is sent after a
        # reconnect (spec 11.5); set while nothing waits to be reconciled.
        self._reconciled = asyncio.Event()
        self._reconciled.set()
        self._disconnected_at: datetime | None = None
        self.offline_grace = timedelta(seconds=offline_grace_seconds)
        self.refresh_after_seconds = refresh_after_seconds
        # Catching up (issue 16 item 12): per connection, the head of each
        # Group read after the welcome, and the Groups whose durable Cursor
        # has reached it. Nothing bound to ownership (work.start, every
        # lease-bound Command) goes out for a Group before it is caught up:
        # a restarted Worker's store may still show a WorkItem as it was
        # before its own lease revocation, and acting on that is what earned
        # REVISION_CONFLICT after a restart.
        self._connection = 0
        self._heads: dict[str, int] = {}
        self._synced: set[str] = set()
        self._head_reads: set[str] = set()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._stopping = False
        self._stop_event = asyncio.Event()
        self._admin_group: str | None = None
        self._policy_revision: int | None = None
        self._card_published = False
        self._next_due: datetime | None = None
        self._last_ack = 0.0
        self._tasks: set[asyncio.Task[Any]] = set()
        self.log: list[tuple[str, str, str]] = []  # (kind, workitem, detail): what the runtime did, for status/tests

    # --- registration ----------------------------------------------------------------

    def capability(
        self, id: str, version: str, *, estimate: Mapping[str, float] | None = None, duration_seconds: float = 0.0
    ) -> Callable[[Handler], Handler]:
        """Register an async handler for capability ``id`` at ``version``.

        ``estimate`` (usage per WorkItem) and ``duration_seconds`` feed
        admission control's budget and deadline checks.
        """

        def register(fn: Handler) -> Handler:
            self.capabilities[(id, version)] = Capability(id, version, fn, dict(estimate or {}), duration_seconds)
            return fn

        return register

    # --- public state ----------------------------------------------------------------

    @property
    def running(self) -> dict[str, str]:
        """WorkItem -> Group of the slots in use."""
        return {w: s.group for w, s in self._running.items()}

    def lease_of(self, workitem: str) -> str | None:
        slot = self._running.get(workitem)
        return slot.lease_id if slot else None

    def renewals_of(self, workitem: str) -> int:
        slot = self._running.get(workitem)
        return slot.renewals if slot else 0

    def request_preemption(self, workitem: str) -> bool:
        """Step 1 of spec 11.3's preemption: ask the slot to pause at its next
        checkpoint. False when no slot runs that WorkItem."""
        slot = self._running.get(workitem)
        if slot is None:
            return False
        slot.preempt = True
        return True

    def stop(self, drain_seconds: float = 10.0) -> None:
        """Graceful stop: running slots pause at their next checkpoint (or are
        cancelled after ``drain_seconds``), then the connection closes and
        ``run()`` returns."""
        if self._stopping:
            return
        self._stopping = True
        self._stop_event.set()
        for slot in self._running.values():
            slot.preempt = True
        self._wake.set()
        # Called from the Worker's event loop (a signal handler, a task); from
        # another thread use ``loop.call_soon_threadsafe(worker.stop)``.
        self._spawn(self._shutdown(drain_seconds))

    async def _shutdown(self, drain_seconds: float) -> None:
        await self._drain(drain_seconds, tasks_too=False)
        ws = self._ws
        if ws is not None:
            # The closing handshake is a courtesy; do not wait long for it.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ws.close(), 2)
            ws.transport.abort()

    async def until(self, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
        """Wait until ``predicate()`` holds (checked after every change); TimeoutError otherwise."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError("condition not reached")
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(left, 0.5))

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # --- the connection ----------------------------------------------------------------

    async def run(self) -> None:
        """Connect, and reconnect with backoff, until ``stop()``."""
        reactor = asyncio.create_task(self._reactor())
        delays = self._reconnect()
        try:
            while not self._stopping:
                try:
                    welcomed = await self._connect_once()
                except Exception as exc:
                    if not should_retry(exc):
                        raise
                    log.warning("connection failed: %s", exc)
                    welcomed = False
                if welcomed:
                    delays = self._reconnect()  # a session that got in starts the backoff over
                if self._stopping:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop_event.wait(), next(delays))
        finally:
            reactor.cancel()
            await self._drain()

    async def _drain(self, timeout: float = 10.0, *, tasks_too: bool = True) -> None:
        tasks = [s.task for s in self._running.values() if s.task is not None]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if tasks_too:
            current = asyncio.current_task()
            others = [t for t in self._tasks if t is not current]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

    def close(self) -> None:
        self.store.close()

    async def _open_session(self) -> None:
        request = signed(
            self.identity.private_key,
            {"agent": self.me, "issued_at": format_time(utcnow()), "nonce": uuid.uuid4().hex},
        )
        status, payload = await self._http.call("POST", "/api/v1/sessions", body=request)
        if status != 201:
            err = _error_of(status, payload)
            if err.code in (
                "AUTH_INVALID_SIGNATURE",
                "SCHEMA_VALIDATION_FAILED",
                "PROTOCOL_VIOLATION",
                "GROUP_NOT_FOUND",
            ):
                raise Fatal(f"the portal refused this Agent's session: {err}")
            raise err
        self._token = str(payload["token"])
        self.session_epoch = int(payload["session_epoch"])

    def _ws_url(self) -> str:
        if self.portal.startswith("https://"):
            return "wss://" + self.portal[len("https://") :] + "/ws/v1/agent"
        return "ws://" + self.portal.removeprefix("http://") + "/ws/v1/agent"

    async def _connect_once(self) -> bool:
        """One connection: True when the server welcomed it."""
        if self._token is None:
            await self._open_session()
        assert self._token is not None
        welcomed = False
        try:
            ws = await connect(self._ws_url(), max_size=16 * 1024 * 1024, open_timeout=10)
        except InvalidURI as exc:
            raise Fatal(f"bad portal URL: {exc}") from None
        session = ClientSession()
        self._ws, self._session = ws, session
        closed: Closed | None = None
        try:
            session.hello(self._token)
            await self._flush()
            async for frame in ws:
                for event in session.feed(frame):
                    if isinstance(event, Welcome):
                        welcomed = True
                    await self._on_protocol_event(event)
                await self._flush()
        except ConnectionClosed:
            pass
        finally:
            if self._connected.is_set():
                self._disconnected_at = utcnow()
            self._connected.clear()
            self._reconciled.clear()
            code = ws.close_code
            reason = ws.close_reason or ""
            with contextlib.suppress(Exception, TimeoutError):
                await asyncio.wait_for(ws.close(), 2)
            for event in session.connection_lost(code, reason):
                if isinstance(event, Closed):
                    closed = event
            self._ws, self._session = None, None
        if closed is not None:
            self._on_closed(closed)
        return welcomed

    def _on_closed(self, closed: Closed) -> None:
        log.info("connection closed (%s %s)", closed.code, closed.reason)
        if closed.session_replaced or closed.unauthenticated:
            # A replaced session revoked every lease of this Agent (MWP-WRK-014):
            # stop every slot; the WorkItems wait in their queues.
            self._session_lost()

    def _fail_pending(self, error: Exception) -> None:
        for _env, fut in self._pending.values():
            if not fut.done():
                fut.set_exception(error)
        self._pending.clear()

    async def _flush(self) -> None:
        session, ws = self._session, self._ws
        if session is None or ws is None:
            return
        async with self._send_lock:
            try:
                for frame in session.frames_to_send():
                    await ws.send(frame)
            except ConnectionClosed:
                # The connection loop sees the close and reconnects; the next
                # session sends the in-flight Commands again and acks anew.
                return

    async def _on_protocol_event(self, event: ProtocolEvent) -> None:
        if isinstance(event, Welcome):
            await self._on_welcome(event)
        elif isinstance(event, EventReceived):
            await self._on_event(event)
        elif isinstance(event, ReceiptReceived):
            pending = self._pending.pop(event.action_id, None)
            if pending is not None and not pending[1].done():
                pending[1].set_result(event.receipt)
        elif isinstance(event, CommandRefused):
            pending = self._pending.pop(event.action_id, None)
            if pending is not None and not pending[1].done():
                pending[1].set_exception(Refused(event.code, event.message, event.reason))
        elif isinstance(event, CursorTooOld):
            await self._restore(event.group, event.snapshot)
        elif isinstance(event, MembershipChanged):
            self._on_membership(event)
        elif isinstance(event, SubscriptionRefused | ServerError | BadFrame):
            log.warning("server: %s", event)

    async def _on_welcome(self, welcome: Welcome) -> None:
        assert self._session is not None
        if self.session_epoch is not None and welcome.session_epoch != self.session_epoch:
            self._fail_pending(Refused("AUTH_STALE_SESSION", "a new session"))
        self.session_epoch = welcome.session_epoch
        # Whatever happened while disconnected (a replaced session's lease
        # revocations above all) is behind every head read from now on.
        self._connection += 1
        self._heads.clear()
        self._synced.clear()
        self._head_reads.clear()
        # In-flight Commands of this session go again with their action IDs (MWP-EVT-003).
        for envelope, fut in list(self._pending.values()):
            if not fut.done():
                self._session.command(envelope)
        self._connected.set()
        self._spawn(self._reconcile())
        self._spawn(self._after_welcome(self._session))
        self._wake.set()  # the reactor asks for the heads of the Groups it has work in

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _after_welcome(self, session: ClientSession) -> None:
        """Learn the Groups, subscribe each from its durable Cursor, publish the card, report presence."""
        status, payload = await self._http.call("GET", "/api/v1/memberships", token=self._token)
        if status != 200 or session is not self._session:
            log.warning("memberships: %s", payload)
            return
        groups = [str(m["group"]) for m in payload.get("memberships", [])]
        self._admin_group = payload.get("admin_group")
        if self._admin_group:
            groups.insert(0, self._admin_group)
        for group in groups:
            if group not in session.subscriptions:
                session.subscribe(group, after=self.store.cursor(group).sequence)
        self._presence(session)
        await self._flush()
        if self._admin_group:
            self._policy_changed(self._admin_group)  # the policy this store already knows
        if not self._card_published and self._admin_group:
            await self._publish_card()

    async def _publish_card(self) -> None:
        # The card lists one version per capability ID: the highest registered.
        latest = dict(sorted(self.capabilities))
        body = {"capabilities": [{"id": i, "version": v} for i, v in sorted(latest.items())],
                "max_concurrency": self.slots}  # fmt: skip
        assert self._admin_group is not None
        try:
            await self._command("agent_card.publish", self._admin_group, body)
            self._card_published = True
        except Refused as exc:
            log.warning("agent card not published: %s", exc)

    def _presence(self, session: ClientSession | None = None) -> None:
        session = session or self._session
        if session is None or session.state == "closed":
            return
        free = max(self.slots - len(self._running), 0)
        session.presence({"slots": self.slots, "free": free, "running": len(self._running)})

    def _on_membership(self, change: MembershipChanged) -> None:
        session = self._session
        if session is None:
            return
        if change.active and change.group not in session.subscriptions:
            session.subscribe(change.group, after=self.store.cursor(change.group).sequence)
        if not change.active:
            for slot in list(self._running.values()):
                if slot.group == change.group:
                    self._stop_slot(slot, "membership removed")
        self._wake.set()

    async def _on_event(self, received: EventReceived) -> None:
        try:
            await asyncio.to_thread(self.store.apply, received.event)
        except (MalformedEvent, ChainBroken, ProjectionError) as exc:
            # Nothing of the refused Event was written: ask again from the durable Cursor.
            log.warning("event refused (%s); resubscribing %s", exc, received.group)
            if self._session is not None:
                self._session.subscribe(received.group, after=self.store.cursor(received.group).sequence)
            return
        # ACK the highest contiguous durable Cursors (MWP-WRK-030), at most
        # every ACK_INTERVAL while Events stream in; the reactor ACKs the rest.
        now = asyncio.get_running_loop().time()
        if now - self._last_ack >= ACK_INTERVAL:
            self._ack(now)
        if received.group == self._admin_group:
            self._policy_changed(received.group)
        self._wake.set()
        self._notify()

    def _ack(self, now: float) -> None:
        if self._session is not None and self._session.state != "closed":
            self._session.ack(self.store.ack_positions())
            self._last_ack = now

    def _policy_changed(self, group: str) -> None:
        meta = self.store.meta(group)
        if meta is None or meta.priority_policy is None or meta.policy_revision == self._policy_revision:
            return
        self._policy_revision = meta.policy_revision
        policy = json.loads(meta.priority_policy)
        if isinstance(policy, dict):
            self.picker.set_policy(policy)

    async def _restore(self, group: str, reference: Mapping[str, Any]) -> None:
        """CURSOR_TOO_OLD: fetch, verify and restore the signed snapshot; replay after it (spec 16)."""
        url = str(reference.get("url") or f"/api/v1/groups/{group}/snapshots/{reference.get('sequence')}")
        status, document = await self._http.call("GET", url, token=self._token)
        if status != 200:
            log.warning("snapshot of %s: %s", group, document)
            return
        if self._server_key is None:
            status, key = await self._http.call("GET", "/api/v1/server-key")
            if status != 200:
                return
            self._server_key = str(key["public_key"])
        try:
            await asyncio.to_thread(
                self.store.restore_snapshot, document, self._server_key, self.identity.organization, group
            )
        except SnapshotRefused as exc:
            log.error("snapshot of %s refused (%s): not restored", group, exc)
            return
        self.log.append(("snapshot.restored", group, str(document.get("sequence"))))
        if group == self._admin_group:
            self._policy_changed(group)
        if self._session is not None:
            self._session.subscribe(group, after=self.store.cursor(group).sequence)
        self._wake.set()
        self._notify()

    # --- catching up before acting on ownership (issue 16 item 12) ---------------------

    def _caught_up(self, group: str) -> bool:
        """Whether ``group``'s durable Cursor has reached the head read on this
        connection. The first ask on a connection sends for that head."""
        if group in self._synced:
            return True
        head = self._heads.get(group)
        if head is None:
            self._read_head(group)
            return False
        if self.store.cursor(group).sequence < head:
            return False
        self._synced.add(group)
        return True

    def _read_head(self, group: str) -> None:
        if group in self._head_reads or not self._connected.is_set():
            return
        self._head_reads.add(group)
        self._spawn(self._fetch_head(group, self._connection))

    async def _fetch_head(self, group: str, connection: int) -> None:
        """Read ``group``'s head after this connection's welcome (the ``head``
        of ``GET /api/v1/groups/{id}/events``). Read after the session was
        opened, it includes the Events of everything the server did when it
        opened (a replaced session's lease revocations, MWP-WRK-014). Tried
        again while this connection lasts; given up when the Group refuses
        this Agent (it is not a member: nothing ownership-bound can go out)."""
        after = self.store.cursor(group).sequence
        while connection == self._connection and not self._stopping:
            path = f"/api/v1/groups/{group}/events?after={after}&limit=1"
            try:
                status, payload = await self._http.call("GET", path, token=self._token)
            except OSError as exc:
                status, payload = 0, {"code": "HTTP", "message": str(exc)}
            if connection != self._connection:
                return
            if status == 200 and isinstance(payload, dict) and isinstance(payload.get("head"), int):
                self._heads[group] = payload["head"]
                self._wake.set()
                self._notify()
                return
            details = payload.get("details") if isinstance(payload, dict) else None
            snapshot = details.get("snapshot") if isinstance(details, dict) else None
            if status == 410 and isinstance(snapshot, dict) and isinstance(snapshot.get("sequence"), int):
                after = max(after, snapshot["sequence"])  # outside the online window: ask after the snapshot
                continue
            err = _error_of(status, payload)
            if err.code in ("MEMBERSHIP_REQUIRED", "GROUP_NOT_FOUND", "AUTH_FORBIDDEN"):
                log.info("head of %s: %s; nothing ownership-bound goes out there", group, err)
                return
            log.warning("head of %s: %s; asking again", group, err)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_event.wait(), HEAD_RETRY_SECONDS)

    async def _catch_up(self, group: str, slot: _Slot | None = None) -> bool:
        """Wait until ``group`` is caught up on the current connection (a
        reconnect while waiting moves the head along). False when ``slot``
        was stopped meanwhile: its lease ended, nothing lease-bound goes out."""
        while not self._caught_up(group):
            if slot is not None and slot.stopped is not None:
                return False
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), 0.5)
        return True

    # --- Commands --------------------------------------------------------------------

    async def _command(
        self,
        type_: str,
        group: str,
        body: dict[str, Any],
        *,
        target: dict[str, Any] | None = None,
        ownership_epoch: int | None = None,
        lease_id: str | None = None,
    ) -> dict[str, Any]:
        """Sign and send a Command over the agent socket; its receipt, or ``Refused``."""
        await self._connected.wait()
        await self._reconciled.wait()
        if ownership_epoch is not None:
            # Ownership-bound (work.start and every lease-bound Command): not
            # before the Group is caught up (issue 16 item 12). The callers
            # waited already and read their target after; this holds the
            # rule when a reconnect came in between.
            await self._catch_up(group)
        assert self.session_epoch is not None
        envelope = make_envelope(
            type=type_, actor=self.me, group=group, body=body, session_epoch=self.session_epoch,
            private_key=self.identity.private_key, target=target, ownership_epoch=ownership_epoch, lease_id=lease_id,
        )  # fmt: skip
        return await self._send(envelope)

    async def _send(self, envelope: dict[str, Any], *, refresh: bool = True) -> dict[str, Any]:
        """Send ``envelope`` (again on every reconnect, unchanged) until it is answered.

        An ``AUTH_INVALID_SIGNATURE`` refusal of a Command signed more than
        ``refresh_after_seconds`` ago may be its ``issued_at`` freshness (the
        wire does not say which check failed, spec §8): it is then sent once
        as a new Command (spec §19), with a new action ID, a current
        ``issued_at`` and a new signature. That cannot apply anything twice:
        the server answers a known action ID from its receipt before it
        checks freshness. A second refusal is the caller's.
        """
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[envelope["action_id"]] = (envelope, fut)
        if self._session is not None and self._session.state != "closed":
            self._session.command(envelope)
            await self._flush()
        try:
            return await fut
        except Refused as exc:
            if exc.code == "AUTH_STALE_SESSION" and self.session_epoch == envelope["session_epoch"]:
                self._session_lost()
            if refresh and exc.code == "AUTH_INVALID_SIGNATURE" and self._signed_long_ago(envelope):
                fresh = self._refreshed(envelope)
                log.info("%s %s refused as stale; sent again as %s", envelope["type"], envelope["action_id"],
                         fresh["action_id"])  # fmt: skip
                self.log.append(("command.refreshed", envelope["type"], fresh["action_id"]))
                return await self._send(fresh, refresh=False)
            raise
        finally:
            self._pending.pop(envelope["action_id"], None)

    def _signed_long_ago(self, envelope: Mapping[str, Any]) -> bool:
        issued = parse_time(envelope["issued_at"], "issued_at")  # this Worker's own envelope
        return (utcnow() - issued).total_seconds() > self.refresh_after_seconds

    def _refreshed(self, envelope: Mapping[str, Any]) -> dict[str, Any]:
        """The same Command as a new one: new action ID, current ``issued_at``, new signature (spec §19)."""
        return self._resigned(envelope, action_id=str(uuid.uuid4()))

    def _resigned(self, envelope: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
        """``envelope`` with ``changes``, a current ``issued_at`` and this Worker's new signature."""
        kept = {k: v for k, v in envelope.items() if k not in ("signature", "issued_at", *changes)}
        return signed(self.identity.private_key, {**kept, **changes, "issued_at": format_time(utcnow())})

    # --- bounded offline execution (spec 11.5; MWP-WRK-020..022) ----------------------

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def _offline_binding(self, slot: _Slot, usage: Mapping[str, float], now: datetime) -> dict[str, Any]:
        """The critical bounded-offline-execution binding of progress made now,
        while the Group service is unreachable; ``LeaseLost`` once the lease and
        its grace are over (no progress may be buffered then)."""
        if slot.lease_id is None or slot.lease_expires_at is None:
            raise LeaseLost("offline without a lease")
        grace_deadline = slot.lease_expires_at + self.offline_grace
        if now > grace_deadline:
            raise LeaseLost("offline past the lease's grace window")
        assert self.session_epoch is not None
        return {
            "critical": True, "agent": self.me, "group": slot.group, "workitem": slot.workitem,
            "session_epoch": self.session_epoch, "ownership_epoch": slot.ownership_epoch, "lease_id": slot.lease_id,
            "disconnected_at": format_time(self._disconnected_at or now), "buffered_at": format_time(now),
            "grace_deadline": format_time(grace_deadline), "lease_expires_at": format_time(slot.lease_expires_at),
            "usage_delta": dict(usage),
        }  # fmt: skip

    async def _buffer_checkpoint(self, slot: _Slot, body: dict[str, Any]) -> None:
        """Persist a checkpoint made offline with its binding (MWP-WRK-021).
        The usage travels in the binding's delta, not in the body."""
        usage = body.pop("usage", None) or {}
        binding = self._offline_binding(slot, usage, utcnow())
        assert self.session_epoch is not None
        envelope = make_envelope(
            type="work.checkpoint", actor=self.me, group=slot.group, body=body, session_epoch=self.session_epoch,
            private_key=self.identity.private_key, target={"kind": "workitem", "id": slot.workitem},
            ownership_epoch=slot.ownership_epoch, lease_id=slot.lease_id, extensions={OFFLINE_EXTENSION: binding},
        )  # fmt: skip
        await asyncio.to_thread(self.store.buffer_command, slot.group, slot.workitem, envelope, binding)
        self.log.append(("buffered", slot.workitem, slot.lease_id or ""))

    async def _reconcile(self) -> None:
        """Send every buffered Command, rebased and re-signed under the current
        session with its binding kept (MWP-WRK-021), before anything else; the
        Group Authority charges the offline usage and applies the checkpoint
        in one transaction (MWP-WRK-022). A refusal drops the Command (its
        progress is not authoritative); a lost connection keeps it."""
        buffered = await asyncio.to_thread(self.store.buffered_commands)
        for command_id, old, _binding in buffered:
            assert self.session_epoch is not None
            envelope = self._resigned(old, session_epoch=self.session_epoch)
            try:
                await self._send(envelope)
                self.log.append(("reconciled", str(old["target"]["id"]), ""))
            except Refused as exc:
                if exc.code == "AUTH_STALE_SESSION":
                    return  # reconnecting under a new session; reconciled then
                if exc.code != "ACTION_ID_COLLISION":  # a collision: an earlier send was accepted
                    log.warning("buffered %s refused: %s", old["type"], exc)
                    self.log.append(("reconcile.refused", str(old["target"]["id"]), exc.code))
            await asyncio.to_thread(self.store.drop_buffered_command, command_id)
        self._disconnected_at = None
        self._reconciled.set()

    def _session_lost(self) -> None:
        """The server says this session is no longer current (another runtime of
        this Agent opened one): its leases are revoked (MWP-WRK-014). Stop every
        slot and reconnect under a new session."""
        if self._token is None:
            return
        self._token = None
        self._fail_pending(Refused("AUTH_STALE_SESSION", "the session was replaced"))
        for slot in list(self._running.values()):
            self._stop_slot(slot, "session replaced")
        ws = self._ws
        if ws is not None:
            ws.transport.abort()

    # --- the reactor: intents, admission, slots ----------------------------------------------

    async def _reactor(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._next_timer())
            self._wake.clear()
            if not self._connected.is_set():
                continue
            # Nothing may end this loop but cancellation: a failure here is
            # logged and the next wake-up tries again (a reactor that died
            # silently would leave queued work unstarted until the Worker stops).
            try:
                self._ack(asyncio.get_running_loop().time())
                await self._flush()
                await self._handle_intents()
                if not self._stopping:
                    await self._fill_slots()
            except Exception:
                log.exception("reactor")

    def _next_timer(self) -> float:
        """Seconds until the reactor must look again without an Event: the
        earliest end of a retry backoff among this Worker's queued rows (at most 5)."""
        if self._next_due is None:
            return 5.0
        return min(5.0, max(0.05, (self._next_due - utcnow()).total_seconds()))

    async def _handle_intents(self) -> None:
        for intent in await asyncio.to_thread(self.store.pending_outbox):
            result = await self._handle_intent(intent)
            if result is not None:
                await asyncio.to_thread(self.store.complete_outbox, intent.intent_id, result)

    async def _handle_intent(self, intent: OutboxRow) -> dict[str, Any] | None:
        """Act on one intent; its result, or None to try again later."""
        if intent.kind == "work.stop":
            payload = json.loads(intent.payload)
            slot = self._running.get(intent.workitem or "")
            if slot is not None and slot.lease_id == payload.get("lease_id"):
                self._stop_slot(slot, str(payload.get("reason")))
                return {"stopped": True}
            return {"stopped": False}
        if intent.kind == "schedule.disclose":
            return {"disclosed": False, "reason": "no disclosure Command in the catalogue"}
        if intent.kind == "offer.respond":
            return await self._respond_to_offer(intent)
        return {"ignored": intent.kind}

    def _committed(self) -> int:
        """WorkItems this Worker owns and has not finished, plus acceptances in flight."""
        owned = set()
        for group in self.store.groups():
            for row in self.store.queue(group):
                if row.owner == self.me and row.state in ("queued", "active", "blocked"):
                    owned.add((group, row.workitem))
        self._accepted -= {k for k in self._accepted if k in owned or self._settled(k)}
        return len(owned | self._accepted)

    def _settled(self, key: tuple[str, str]) -> bool:
        row = self.store.row(*key)
        return row is None or row.state != "offered"

    def _admission(self, row: WorkRow, meta: GroupMeta | None, now: datetime) -> Decline | None:
        rows = {r.workitem: r.state for r in self.store.queue(row.group_id)}
        deps = json.loads(row.dependencies) if row.dependencies else []
        roles = json.loads(meta.my_roles) if meta is not None and meta.my_roles else []
        return admit(
            row,
            capabilities=self.capabilities,
            committed=self._committed(),
            queue_limit=self.queue_limit,
            my_roles=roles,
            member=bool(meta and meta.my_active),
            dependency_states={str(d["workitem"]): rows.get(str(d["workitem"])) for d in deps},
            now=now,
        )

    async def _respond_to_offer(self, intent: OutboxRow) -> dict[str, Any] | None:
        row = self.store.row(intent.group_id, intent.workitem or "")
        now = utcnow()
        if row is None or row.state != "offered" or self.me not in json.loads(row.offered_to or "[]"):
            return {"answered": False, "reason": "the offer is no longer open"}
        if row.offer_expires_at is not None and parse_time(row.offer_expires_at, "offer") <= now:
            return {"answered": False, "reason": "the offer expired"}
        decline = self._admission(row, self.store.meta(row.group_id), now)
        target = {"kind": "workitem", "id": row.workitem, "revision": row.revision}
        try:
            if decline is None:
                receipt = await self._command("work.accept_offer", row.group_id, {}, target=target)
                self._accepted.add((row.group_id, row.workitem))
                self.log.append(("offer.accepted", row.workitem, ""))
                return {"accepted": True, "receipt": receipt["action_id"]}
            await self._command(
                "work.decline_offer", row.group_id, {"reason": decline.reason, "detail": decline.detail}, target=target
            )
            self.log.append(("offer.declined", row.workitem, decline.reason))
            return {"accepted": False, "reason": decline.reason}
        except Refused as exc:
            if exc.code == "REVISION_CONFLICT":
                return None  # an Event is on its way; answer once it is applied
            return {"answered": False, "refused": exc.code}

    def _candidates(self, now: datetime) -> list[WorkRow]:
        """This Worker's queued WorkItems it may start: owned, queued, not in a
        slot, past any retry backoff, with the dependencies known here met."""
        out = []
        self._next_due = None
        for group in self.store.groups():
            meta = self.store.meta(group)
            if meta is None or meta.kind != "mission" or meta.mission_status != "active" or not meta.my_active:
                continue
            rows = self.store.queue(group)
            states = {r.workitem: r.state for r in rows}
            for row in rows:
                if row.owner != self.me or row.state != "queued" or row.workitem in self._running:
                    continue
                refused = self._start_refused.get((group, row.workitem))
                if (
                    refused is not None
                    and refused[0] == row.updated_sequence
                    and (now - refused[1]).total_seconds() < START_RETRY_SECONDS
                ):
                    continue
                if row.retry_not_before is not None:
                    not_before = parse_time(row.retry_not_before, "retry")
                    if not_before > now:
                        # Backing off (spec 11.4): wake the reactor when it ends.
                        if self._next_due is None or not_before < self._next_due:
                            self._next_due = not_before
                        continue
                deps = json.loads(row.dependencies) if row.dependencies else []
                if any(states.get(d["workitem"]) not in _DEP_SATISFIED[d["policy"]] for d in deps):
                    continue
                out.append(row)
        return out

    async def _fill_slots(self) -> None:
        while len(self._running) < self.slots and self._connected.is_set():
            now = utcnow()
            # A Group not caught up to its head yet may still show a WorkItem
            # as it was before this Worker's own lease revocation (issue 16
            # item 12): its rows wait; the head's arrival wakes the reactor.
            candidates = [r for r in await asyncio.to_thread(self._candidates, now) if self._caught_up(r.group_id)]
            running: dict[str, int] = {}
            for slot in self._running.values():
                running[slot.group] = running.get(slot.group, 0) + 1
            row = self.picker.pick(
                candidates,
                running=running,
                free_slots=self.slots - len(self._running),
                capabilities=frozenset(self.capabilities),
                now=now,
            )
            if row is None:
                return
            self.picker.dispatched(row, now)
            await self._start(row)

    async def _start(self, row: WorkRow) -> None:
        """``work.start`` under a new Execution Lease, then run the handler in a slot."""
        # The attempt this start makes: the Group Authority counts a new one
        # when the last execution ended without a checkpoint (spec 11.4).
        attempt = row.attempt + 1 if row.needs_new_attempt else row.attempt
        slot = _Slot(group=row.group_id, workitem=row.workitem, ownership_epoch=row.ownership_epoch,
                     revision=row.revision, attempt=attempt)  # fmt: skip
        self._running[row.workitem] = slot
        try:
            await self._start_lease(slot)
        except Refused as exc:
            del self._running[row.workitem]
            if exc.code != "AUTH_STALE_SESSION":  # the next session may start it
                self._start_refused[(row.group_id, row.workitem)] = (row.updated_sequence, utcnow())
            self.log.append(("start.refused", row.workitem, exc.code))
            log.info("work.start of %s refused: %s", row.workitem, exc)
            return
        self._presence()
        await self._flush()
        slot.task = asyncio.create_task(self._run_slot(slot, row))
        self._notify()

    async def _start_lease(self, slot: _Slot) -> None:
        if not self._caught_up(slot.group):
            # The revision the caller knew may be older than the Group's head:
            # wait for it, then start from what the caught-up store says.
            if not await self._catch_up(slot.group, slot):
                raise Refused("WORK_LEASE_EXPIRED", f"{slot.workitem} stopped while its Group caught up", "stale_lease")
            row = await asyncio.to_thread(self.store.row, slot.group, slot.workitem)
            if (
                row is None or row.state != "queued" or row.owner != self.me
                or row.ownership_epoch != slot.ownership_epoch
            ):  # fmt: skip
                raise Refused("WORK_STALE_OWNERSHIP", f"{slot.workitem} is no longer this Worker's to start")
            slot.revision = row.revision
        target = {"kind": "workitem", "id": slot.workitem, "revision": slot.revision}
        receipt = await self._command("work.start", slot.group, {}, target=target,
                                      ownership_epoch=slot.ownership_epoch)  # fmt: skip
        self._take_grants(slot, receipt)
        slot.revision = int(receipt["aggregate"]["revision"])
        self.log.append(("started", slot.workitem, str(slot.lease_id)))

    def _take_grants(self, slot: _Slot, receipt: Mapping[str, Any]) -> None:
        grants = receipt.get("grants") or {}
        slot.lease_id = str(grants["lease_id"])
        slot.token = str(grants["capability_token"])
        accepted = parse_time(receipt["accepted_at"], "accepted_at")
        slot.lease_expires_at = parse_time(grants["lease_expires_at"], "lease_expires_at")
        slot.lease_seconds = (slot.lease_expires_at - accepted).total_seconds()
        if slot.ctx is not None:
            slot.ctx._rebind(slot.lease_id, slot.token)

    def _stop_slot(self, slot: _Slot, reason: str) -> None:
        """The lease ended elsewhere: cancel the handler; nothing lease-bound is sent after."""
        slot.stopped = reason
        slot.lease_id = None
        if slot.handler_task is not None and not slot.handler_task.done():
            slot.handler_task.cancel()
        elif slot.task is not None and not slot.task.done() and slot.handler_task is None:
            slot.task.cancel()

    # --- one slot -----------------------------------------------------------------------

    def _context(self, slot: _Slot, row: WorkRow, port: _Port) -> SlotContext:
        meta = self.store.meta(slot.group)
        mission = {
            "id": meta.mission if meta else None,
            "group": slot.group,
            "title": meta.mission_title if meta else None,
            "objective": meta.mission_objective if meta else None,
        }
        checkpoints = [json.loads(c.state) for c in self.store.checkpoints(slot.group, slot.workitem) if c.state]
        return SlotContext(
            agent=self.me, group=slot.group, workitem=slot.workitem, mission=mission,
            contract=json.loads(row.contract), ownership_epoch=slot.ownership_epoch, attempt=slot.attempt,
            checkpoints=checkpoints, usage=json.loads(row.usage or "{}"), token=slot.token,
            lease_id=slot.lease_id or "", port=port,
        )  # fmt: skip

    def _handler_for(self, row: WorkRow) -> Capability | None:
        for cap in sorted(required_capabilities(row)):
            if cap in self.capabilities:
                return self.capabilities[cap]
        return None

    async def _run_slot(self, slot: _Slot, row: WorkRow) -> None:
        port = _Port()
        renewer = asyncio.create_task(self._renew_loop(slot))
        outcome = "ended"
        try:
            cap = self._handler_for(row)
            slot.ctx = ctx = await asyncio.to_thread(self._context, slot, row, port)
            if cap is None:
                await self._fail(slot, ctx, "no handler for the contract's capabilities", retryable=False)
                outcome = "failed"
                return
            handler: asyncio.Task[Result] = asyncio.create_task(cap.handler(ctx))
            slot.handler_task = handler
            outcome = await self._serve(slot, ctx, port, handler)
        except asyncio.CancelledError:
            # _stop_slot cancels a slot still setting up (no handler yet):
            # its lease ended elsewhere, so the slot stopped.
            if slot.stopped is not None:
                outcome = "stopped"
            raise
        finally:
            renewer.cancel()
            with contextlib.suppress(BaseException):
                await renewer
            self._running.pop(slot.workitem, None)
            self.log.append((outcome, slot.workitem, slot.stopped or ""))
            self._presence()
            with contextlib.suppress(Exception):
                await self._flush()
            self._wake.set()
            self._notify()

    async def _serve(self, slot: _Slot, ctx: SlotContext, port: _Port, handler: asyncio.Task[Result]) -> str:
        """Serve the slot's requests until its handler returns; what became of it."""
        queue = port._queue
        while True:
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({handler, getter}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                op, args, fut = getter.result()
                try:
                    fut.set_result(await self._serve_one(slot, ctx, op, args))
                except LeaseLost as exc:
                    # The handler gets LeaseLost at its await and must return;
                    # nothing lease-bound is sent for this slot any more.
                    slot.stopped = slot.stopped or str(exc)
                    slot.lease_id = None
                    if not fut.done():
                        fut.set_exception(LeaseLost(str(exc)))
                except (Exception, SlotStopped) as exc:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            getter.cancel()
            return await self._finish(slot, ctx, handler)

    async def _finish(self, slot: _Slot, ctx: SlotContext, handler: asyncio.Task[Result]) -> str:
        try:
            result = handler.result()
        except asyncio.CancelledError:
            return "stopped"
        except Preempted:
            return "preempted"
        except Blocked:
            return "blocked"
        except LeaseLost:
            return "stopped"
        except PermanentFailure as exc:
            await self._fail(slot, ctx, f"{exc}", retryable=False)
            return "failed"
        except BudgetExceeded as exc:
            await self._fail(slot, ctx, f"budget exceeded: {exc}", retryable=False)
            return "failed"
        except Exception as exc:
            summary = f"{type(exc).__name__}: {exc}"
            decision = retry_decision(ctx.contract, attempt=slot.attempt, usage=ctx._usage, now=utcnow())
            await self._fail(slot, ctx, summary, retryable=decision.retry)
            return "retrying" if decision.retry else "failed"
        if slot.stopped is not None or slot.lease_id is None:
            return "stopped"
        if not isinstance(result, Result):
            await self._fail(slot, ctx, "the handler returned no Result", retryable=False)
            return "failed"
        body: dict[str, Any] = {"artifacts": list(result.artifacts), "evidence": list(result.evidence)}
        usage = ctx._take_usage()
        if usage:
            body["usage"] = usage
        try:
            await self._lease_command(slot, "work.submit", body)
        except LeaseLost:
            return "stopped"
        except Refused as exc:
            await self._fail(slot, ctx, f"submission refused: {exc.code} {exc.message}", retryable=False)
            return "failed"
        return "submitted"

    async def _fail(self, slot: _Slot, ctx: SlotContext, summary: str, *, retryable: bool) -> None:
        """``work.fail`` with Evidence under the current lease; the Group Authority
        turns a retryable failure within the retry budget into another attempt."""
        if slot.lease_id is None or slot.stopped is not None:
            return
        criteria = [str(c["id"]) for c in ctx.contract.get("acceptance_criteria") or []]
        evidence = [ctx.evidence(criteria, result="fail", method="other", summary=summary[:2000])]
        body: dict[str, Any] = {"evidence": evidence, "retryable": retryable}
        with contextlib.suppress(LeaseLost, Refused):
            await self._lease_command(slot, "work.fail", body, revision=True)

    async def _lease_command(
        self, slot: _Slot, type_: str, body: dict[str, Any], *, revision: bool = False
    ) -> dict[str, Any]:
        """A Command naming the slot's current Lease ID (MWP-WRK-013); ``LeaseLost``
        when the Group Authority says the lease is not ours any more."""
        async with slot.lock:
            # Caught up first (issue 16 item 12): a revocation still in the
            # replay stops the slot here instead of earning a refusal.
            if not await self._catch_up(slot.group, slot) or slot.lease_id is None:
                raise LeaseLost("no current lease")
            lease_id = slot.lease_id
            target = {"kind": "workitem", "id": slot.workitem, "revision": slot.revision if revision else None}
            if not revision:
                del target["revision"]
            try:
                receipt = await self._command(type_, slot.group, body, target=target,
                                              ownership_epoch=slot.ownership_epoch, lease_id=lease_id)  # fmt: skip
            except Refused as exc:
                if lease_gone(exc):
                    slot.lease_id = None
                    raise LeaseLost(f"{type_}: {exc.code}") from exc
                raise
            slot.revision = int(receipt["aggregate"]["revision"])
            return receipt

    async def _renew_loop(self, slot: _Slot) -> None:
        """Renew before expiry; a refusal means the lease is gone: stop the slot."""
        while True:
            if slot.lease_id is None or slot.lease_seconds <= 0:
                await asyncio.sleep(0.05)
                continue
            lease = slot.lease_id
            await asyncio.sleep(renew_delay(slot.lease_seconds, fraction=self.renew_fraction))
            if slot.lease_id != lease:
                continue  # a checkpoint moved the slot to a new lease meanwhile
            async with slot.lock:
                if not await self._catch_up(slot.group, slot):
                    return  # stopped while its Group caught up (issue 16 item 12)
                if slot.lease_id != lease:
                    continue
                target = {"kind": "workitem", "id": slot.workitem}
                try:
                    receipt = await self._command("work.renew_lease", slot.group, {}, target=target,
                                                  ownership_epoch=slot.ownership_epoch, lease_id=lease)  # fmt: skip
                except Refused as exc:
                    log.info("renewal of %s refused: %s", slot.workitem, exc)
                    self._stop_slot(slot, f"renewal refused: {exc.code}")
                    return
                self._take_grants(slot, receipt)
                slot.renewals += 1
                self.log.append(("renewed", slot.workitem, str(slot.renewals)))
            self._notify()

    async def _serve_one(self, slot: _Slot, ctx: SlotContext, op: str, args: dict[str, Any]) -> Any:
        if op == "checkpoint":
            return await self._checkpoint(slot, args)
        if op == "block":
            body = {"checkpoint": args["state"], "progress": args["progress"],
                    "resolution_required": args["resolution"]}  # fmt: skip
            if args["usage"]:
                body["usage"] = args["usage"]
            await self._lease_command(slot, "work.block", body)
            slot.lease_id = None
            self.log.append(("blocked", slot.workitem, args["resolution"]))
            return None
        if op == "effect.lookup":
            return await asyncio.to_thread(self.store.side_effect, args["key"])
        if op == "effect.intent":
            if self._disconnected_at is not None:
                # No externally visible action offline (spec 11.5): the effect
                # waits for the reconnect and the reconciliation, and only
                # goes ahead if the lease survived them.
                await self._connected.wait()
                await self._reconciled.wait()
                if slot.lease_id is None or slot.stopped is not None:
                    raise LeaseLost("the lease did not survive the disconnection")
            # The intent is durable before dispatch (persistence guide, "External side effects").
            return await asyncio.to_thread(
                self.store.side_effect_intent, args["key"], group=slot.group, workitem=slot.workitem,
                ownership_epoch=slot.ownership_epoch, name=args["name"],
            )  # fmt: skip
        if op == "effect.settle":
            return await asyncio.to_thread(self.store.side_effect_settle, args["key"], args["status"], args["receipt"])
        if op == "artifact":
            return await self._http.put_artifact(self._token, slot.group, args["data"], args["media_type"])
        raise ValueError(f"unknown slot request {op}")

    async def _checkpoint(self, slot: _Slot, args: dict[str, Any]) -> str:
        """Checkpoint under the current lease; then pause (preemption) or start again."""
        body = {"checkpoint": args["state"], "progress": args["progress"]}
        if args["usage"]:
            body["usage"] = args["usage"]
        if self._disconnected_at is not None and not self._connected.is_set():
            # The Group service is unreachable: the progress is buffered with
            # its binding and the slot pauses; no new lease is taken offline
            # (spec 11.5). It is reconciled on reconnect.
            async with slot.lock:
                await self._buffer_checkpoint(slot, body)
            slot.lease_id = None
            return _PAUSED
        await self._lease_command(slot, "work.checkpoint", body)
        # The checkpoint released the lease (spec 10.2): the WorkItem is queued again.
        slot.lease_id = None
        self.log.append(("checkpointed", slot.workitem, ""))
        if slot.preempt or self._stopping:
            # Steps 2-4 of spec 11.3 done (safe point, checkpoint emitted, pause);
            # the slot is released when the handler returns, and the WorkItem
            # waits in its Group queue (step 5).
            return _PAUSED
        try:
            await self._start_lease(slot)
        except Refused as exc:
            self.log.append(("restart.refused", slot.workitem, exc.code))
            return _PAUSED
        return "continue"
