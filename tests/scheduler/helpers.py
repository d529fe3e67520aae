"""Builders for the Scheduler tests: real ``WorkRow``s, policies and a replay
harness that drives ``SchedulerCore`` and records every gap between two
dispatches of a Group together with the Groups that competed in it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mwworker.fairness import starvation_bound
from mwworker.projection import WorkRow
from mwworker.scheduler import SchedulerCore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def policy(classes: dict[str, float], groups: dict[str, dict[str, Any]], aging: float = 300) -> dict[str, Any]:
    return {"classes": classes, "default_class": next(iter(classes)), "groups": groups, "aging_seconds": aging}


def weighted(weights: dict[str, float], quotas: dict[str, int] | None = None) -> dict[str, Any]:
    """A policy giving each Group its own class of the given weight."""
    classes = {f"w{g}": w for g, w in weights.items()}
    groups: dict[str, dict[str, Any]] = {g: {"class": f"w{g}"} for g in weights}
    for g, q in (quotas or {}).items():
        groups[g]["quota"] = q
    return policy(classes, groups)


def contract(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "goal": "do the thing", "capabilities": [], "deadline": None, "urgency": "normal",
        "business_impact": "medium", "risk": {"class": "low", "requires_execution_approval": False},
    }  # fmt: skip
    base.update(overrides)
    return base


def row(group: str, workitem: str, *, seq: int = 1, **c: Any) -> WorkRow:
    """A queued ``WorkRow`` as the projection folds it from ``work.offer.accepted``."""
    approved = c.pop("approved", None)  # approval.execution.granted already folded in
    con = contract(**c)
    # The Work Contract names its capabilities ``requiredCapabilities`` (work-contract.schema.json).
    con["requiredCapabilities"] = con.pop("capabilities")
    risk = con["risk"]
    requires = bool(risk.get("requires_execution_approval"))
    return WorkRow(
        group_id=group, workitem=workitem, state="queued", revision=seq, contract=json.dumps(con, sort_keys=True),
        contract_revision=1, accepted_contract_revision=1, approved_contract_revision=1 if approved else None,
        requires_approval=requires, execution_approved=(not requires) or bool(approved), deadline=con["deadline"],
        urgency=con["urgency"], business_impact=con["business_impact"], risk_class=risk["class"], dependencies="[]",
        owner="me", ownership_epoch=1, start_by=None, attempt=0, needs_new_attempt=False, retry_not_before=None,
        lease_id=None, lease_expires_at=None, checkpoint_count=0, usage="{}", offered_to="[]",
        offer_expires_at=None, child_mission=None, child_group=None, child_failure_policy=None,
        resolution_required=None, late_results=0, updated_sequence=seq,
    )  # fmt: skip


@dataclass
class GapLog:
    """Every completed or still-open wait of a schedulable Group, in dispatches."""

    gaps: list[tuple[str, int, int]] = field(default_factory=list)  # (group, gap, bound)
    spans: dict[str, tuple[int, dict[str, float]]] = field(default_factory=dict)
    invariant_breaks: list[str] = field(default_factory=list)

    def observe(self, core: SchedulerCore) -> None:
        """Call after every change: open spans for newly schedulable Groups, check (i) and (ii)."""
        active = core.active_weights()
        for g in [g for g in self.spans if g not in active]:
            del self.spans[g]
        for g, w in active.items():
            if g in self.spans:
                self.spans[g][1].update(active)
            else:
                self.spans[g] = (core.dispatches, dict(active))
            start = core.group_state(g)["start"]
            if not core.vtime - 1e-9 <= start <= core.vtime + 1 / w + 1e-9:
                self.invariant_breaks.append(f"{g}: S={start} V={core.vtime} w={w}")

    def served(self, core: SchedulerCore, group: str) -> None:
        """Call right after ``core.dispatch`` of an item of ``group``."""
        k0, seen = self.spans[group]
        others = [w for h, w in seen.items() if h != group]
        self.gaps.append((group, core.dispatches - 1 - k0, starvation_bound(others, seen[group])))
        self.spans.pop(group)
        self.observe(core)

    def open_gaps(self, core: SchedulerCore) -> list[tuple[str, int, int]]:
        return [
            (g, core.dispatches - k0, starvation_bound([w for h, w in seen.items() if h != g], seen[g]))
            for g, (k0, seen) in self.spans.items()
        ]
