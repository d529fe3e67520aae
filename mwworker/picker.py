"""The runtime's ``Picker`` over ``WorkRow``: a ``SchedulerCore`` fed by diffing the candidates."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from .fairness import IMPACT, RISK, URGENCY, Item
from .preemption import PreemptRequest, RunningItem, preemption_requests
from .projection import WorkRow
from .scheduler import SchedulerCore


class Picker(Protocol):
    """Chooses which queued WorkItem a Worker starts next; the runtime
    (``mwworker.slots``) calls it with this Worker's startable rows, its slots in use per Group and
    its capabilities (``FairScheduler`` is the default)."""

    def pick(
        self,
        candidates: Sequence[WorkRow],
        *,
        running: Mapping[str, int],
        free_slots: int,
        capabilities: frozenset[tuple[str, str]],
        now: datetime,
    ) -> WorkRow | None: ...

    def dispatched(self, row: WorkRow, now: datetime) -> None: ...

    def set_policy(self, policy: Mapping[str, Any]) -> None: ...


def parse_time(value: str | None) -> float | None:
    """An RFC 3339 UTC timestamp (``...Z``) as POSIX seconds; None when absent or unreadable."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def item_from_row(row: WorkRow, *, enqueued_at: float, service_estimate: float = 0.0) -> Item:
    """The Scheduler's view of a ``WorkRow`` (the contract's scheduling fields)."""
    requires: set[tuple[str, str]] = set()
    title = None
    try:
        contract = json.loads(row.contract) if row.contract else {}
    except ValueError:
        contract = {}
    if isinstance(contract, dict):
        for cap in contract.get("requiredCapabilities") or []:
            if isinstance(cap, dict) and isinstance(cap.get("id"), str) and isinstance(cap.get("version"), str):
                requires.add((cap["id"], cap["version"]))
        goal = contract.get("goal")
        title = goal if isinstance(goal, str) else None
    return Item(
        key=row.workitem,
        group=row.group_id,
        enqueued_at=enqueued_at,
        urgency=URGENCY.get(row.urgency or "normal", 1),
        impact=IMPACT.get(row.business_impact or "medium", 1),
        deadline=parse_time(row.deadline),
        start_by=parse_time(row.start_by),
        requires=frozenset(requires),
        approved=bool(row.execution_approved) or not row.requires_approval,
        not_before=parse_time(row.retry_not_before),
        risk=RISK.get(row.risk_class or "low", 0),
        service_estimate=service_estimate,
        title=title,
    )


def _stamp(row: WorkRow) -> tuple[int, int, bool, str | None]:
    return (row.updated_sequence, row.revision, row.execution_approved, row.retry_not_before)


@dataclass
class FairScheduler:
    """The runtime's ``Picker``: a ``SchedulerCore`` fed by diffing the candidates.

    ``pick`` looks each candidate up by WorkItem ID and re-keys only the rows
    that changed (same object: skipped; else compared on ``(updated_sequence,
    revision, execution_approved, retry_not_before)``): one dict lookup per
    candidate, then the core's O(log n) choice. ``enqueued_at`` is when
    this Scheduler first saw the row (the projection does not record when an
    item was queued), so age restarts with the process.
    """

    policy: Mapping[str, Any] | None = None
    risk_ceiling: int | None = None
    service_estimate: float = 0.0
    core: SchedulerCore = field(init=False)
    _first_seen: dict[str, float] = field(init=False, default_factory=dict)
    _rows: dict[str, WorkRow] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.core = SchedulerCore(self.policy, risk_ceiling=self.risk_ceiling)

    def set_policy(self, policy: Mapping[str, Any]) -> None:
        self.policy = policy
        self.core.set_policy(policy)

    def _sync(self, candidates: Sequence[WorkRow], capabilities: frozenset[tuple[str, str]], now: float) -> None:
        core = self.core
        if core.capabilities != capabilities:
            core.set_capabilities(capabilities)
        rows = self._rows
        before = len(rows)
        still_there = 0
        for row in candidates:
            key = row.workitem
            known = rows.get(key)
            if known is row:  # the runtime passed the same row object: nothing to look at
                still_there += 1
                continue
            if known is not None:
                still_there += 1
                if _stamp(known) == _stamp(row):
                    rows[key] = row
                    continue
            rows[key] = row
            first = self._first_seen.setdefault(key, now)
            core.upsert(item_from_row(row, enqueued_at=first, service_estimate=self.service_estimate), now)
        if still_there < before:  # some rows left the candidates (started elsewhere, cancelled, ...)
            present = {row.workitem for row in candidates}
            for key in [k for k in rows if k not in present]:
                del rows[key]
                self._first_seen.pop(key, None)
                if key in core:
                    core.remove(key)

    def pick(
        self,
        candidates: Sequence[WorkRow],
        *,
        running: Mapping[str, int],
        free_slots: int,
        capabilities: frozenset[tuple[str, str]],
        now: datetime,
    ) -> WorkRow | None:
        ts = now.timestamp()
        self._sync(candidates, capabilities, ts)
        self.core.sync_running(running)
        item = self.core.select(ts, free_slots)
        return None if item is None else self._rows[item.key]

    def dispatched(self, row: WorkRow, now: datetime) -> None:
        key = row.workitem
        if key in self.core and key not in self.core._gated:
            self.core.dispatch(key, now.timestamp())
        elif key in self.core:
            self.core.remove(key)
        self._rows.pop(key, None)
        self._first_seen.pop(key, None)

    def disclose(self, workitem: str, now: datetime, *, slots: int, service_seconds: float) -> dict[str, Any]:
        """The disclosure body for one of the candidates last passed to ``pick``."""
        return self.core.disclose(workitem, now.timestamp(), slots=slots, service_seconds=service_seconds).as_json()

    def preemptions(
        self, running: Sequence[tuple[WorkRow, datetime]], *, slots: int, now: datetime
    ) -> list[PreemptRequest]:
        """``preemption_requests`` over (row, started_at) pairs of the slots in use."""
        items = [RunningItem(r.workitem, r.group_id, started.timestamp()) for r, started in running]
        return preemption_requests(self.core, items, slots=slots, now=now.timestamp())
