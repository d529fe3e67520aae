"""Which offers to take and which queued WorkItems may start (spec 10.3, 11.4).

The policy is pure (``admit``, ``retry_decision``, ``FifoPicker``): every
input is an argument. ``Admission`` feeds it from the store and answers
offers with ``work.accept_offer`` or a structured ``ext.mwportal.work.offer_decline``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from mwportal.protocol.catalogue import PROJECT

from .commands import Commands
from .context import BUDGET_DIMENSIONS, Capability, budget_limit, utcnow
from .errors import Refused
from .projection import GroupMeta, OutboxRow, WorkRow

DECLINE_REASONS = ("capacity", "deadline", "capability", "authorization", "dependency", "budget")


START_RETRY_SECONDS = 5.0  # a refused work.start is tried again after this, if its row did not change


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


def required_capabilities(row: WorkRow) -> frozenset[tuple[str, str]]:
    """The ``(id, version)`` pairs the row's Work Contract requires."""
    contract = json.loads(row.contract)
    caps = contract.get("requiredCapabilities") if isinstance(contract, dict) else None
    return frozenset((str(c.get("id")), str(c.get("version"))) for c in caps or [] if isinstance(c, dict))


def parse_time(value: str, what: str) -> datetime:
    """An RFC 3339 UTC timestamp (``...Z``) of a projection column."""
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{what}: not a timestamp: {value!r}") from None


def _duration_seconds(value: Any) -> float:
    """An ISO 8601 duration of the Work Contract (``PT5M``, ``P1DT2H``) in seconds."""
    import re

    m = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", str(value or ""))
    if m is None:
        return 0.0
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


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


@dataclass(frozen=True, slots=True)
class Decline:
    """A structured decline reason (spec 10.3; DESIGN §4a ``work.decline_offer``)."""

    reason: str
    detail: str


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
    # The roles that execute under offers and leases: workers, and reviewers for the
    # review WorkItems the portal's review pipeline offers them (§13.2); the offer is the gate.
    if not member or not {"worker", "reviewer"} & set(my_roles):
        return Decline("authorization", "this Agent holds no active worker or reviewer Membership in the Group")
    needed = required_capabilities(row)
    missing = sorted(needed - set(capabilities))
    if missing:
        return Decline("capability", "missing capabilities: " + ", ".join(f"{i}@{v}" for i, v in missing))
    for dep in json.loads(row.dependencies or "[]"):
        state = dependency_states.get(str(dep.get("workitem")))
        if state is not None and state in _DEP_IMPOSSIBLE.get(str(dep.get("policy")), frozenset()):
            return Decline("dependency", f"dependency {dep.get('workitem')} is {state}; its policy cannot hold")
    duration = max((capabilities[c].duration_seconds for c in needed), default=0.0)
    deadline = contract.get("deadline")
    if isinstance(deadline, str) and parse_time(deadline, "deadline") <= now + timedelta(seconds=duration):
        return Decline("deadline", f"cannot finish before the deadline {deadline}")
    usage = json.loads(row.usage) if row.usage else {}
    for cap in needed:
        for dim, expected in capabilities[cap].estimate.items():
            limit = budget_limit(contract, dim) if dim in BUDGET_DIMENSIONS else None
            if limit is not None and usage.get(dim, 0) + expected > limit:
                return Decline("budget", f"expected {dim} {expected} exceeds the budget left")
    retry = contract.get("retryPolicy") if isinstance(contract.get("retryPolicy"), dict) else {}
    if row.needs_new_attempt and row.attempt >= int(retry.get("maxAttempts", 1)):
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
    """Whether a failed attempt may be retried within the Work Contract's retry
    policy, deadline and budget (§11.4; MWP-WRK-018), and not before when:
    ``backoff`` ``none`` at once, ``fixed`` after ``maxDelay``, ``exponential``
    after ``2 ** (attempt - 1)`` seconds capped at ``maxDelay``."""
    retry: Mapping[str, Any] = contract["retryPolicy"] if isinstance(contract.get("retryPolicy"), dict) else {}
    max_attempts = int(retry.get("maxAttempts", 1))
    if attempt >= max_attempts:
        return RetryDecision(False, f"all {max_attempts} attempts are used")
    deadline = contract.get("deadline")
    if isinstance(deadline, str) and parse_time(deadline, "deadline") <= now:
        return RetryDecision(False, "the deadline has passed")
    limit = budget_limit(contract, "financialMicrounits")
    if limit is not None and usage.get("financialMicrounits", 0) >= limit:
        return RetryDecision(False, "the financial budget is used")
    cap = _duration_seconds(retry.get("maxDelay"))
    backoff = retry.get("backoff", "none")
    delay = 0.0 if backoff == "none" else cap if backoff == "fixed" else min(cap, 2.0 ** max(attempt - 1, 0))
    not_before = now + timedelta(seconds=delay)
    if isinstance(deadline, str) and parse_time(deadline, "deadline") <= not_before:
        return RetryDecision(False, "the backoff would end after the deadline")
    return RetryDecision(True, f"attempt {attempt} failed; retrying after {delay:g} s", not_before)


class Admission(Commands):
    """Answering offers and listing the WorkItems this Worker may start."""

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
        try:
            if decline is None:
                event = await self._command("work.accept_offer", row.group_id, {"workItemId": row.workitem},
                                            workitem=row.workitem)  # fmt: skip
                self._accepted.add((row.group_id, row.workitem))
                self.log.append(("offer.accepted", row.workitem, ""))
                return {"accepted": True, "event": event.get("eventId")}
            payload = {"workItemId": row.workitem, "reason": decline.reason, "detail": decline.detail[:2000]}
            await self._command(f"{PROJECT}.work.offer_decline", row.group_id, payload, workitem=row.workitem)
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
