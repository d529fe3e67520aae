"""The runtime's ``Picker`` over real ``WorkRow``s (``FairScheduler``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import timedelta

from mwworker.picker import FairScheduler, Picker
from mwworker.projection import WorkRow

from .helpers import T0, row, weighted

CAPS = frozenset({("py", "3")})


def run(sched: FairScheduler, rows: list[WorkRow], n: int, *, slots: int = 1) -> list[WorkRow]:
    """Start ``n`` items one after the other, each finishing before the next pick."""
    queue = list(rows)
    started = []
    for k in range(n):
        now = T0 + timedelta(seconds=k)
        picked = sched.pick(queue, running={}, free_slots=slots, capabilities=CAPS, now=now)
        if picked is None:
            break
        sched.dispatched(picked, now)
        queue.remove(picked)
        started.append(picked)
    return started


def test_fair_scheduler_satisfies_the_picker_protocol() -> None:
    picker: Picker = FairScheduler()
    assert picker.pick([], running={}, free_slots=1, capabilities=CAPS, now=T0) is None


def test_it_shares_by_policy_weight_over_real_rows_MWP_WRK_010() -> None:
    sched = FairScheduler(policy=weighted({"g-heavy": 3, "g-light": 1}))
    rows = [row("g-heavy", f"h{i}", urgency="low") for i in range(40)]
    rows += [row("g-light", f"l{i}", urgency="critical", business_impact="critical") for i in range(40)]
    started = run(sched, rows, 40)
    assert Counter(r.group_id for r in started) == Counter({"g-heavy": 30, "g-light": 10})


def test_it_skips_rows_behind_an_approval_gate_or_a_missing_capability() -> None:
    sched = FairScheduler(policy=weighted({"g": 1}))
    gated = row("g", "needs-approval", risk={"class": "high", "requires_execution_approval": True})
    gpu = row("g", "needs-gpu", capabilities=[{"id": "cuda", "version": "12"}])
    plain = row("g", "plain", capabilities=[{"id": "py", "version": "3"}], urgency="low")
    assert not gated.execution_approved
    picked = sched.pick([gated, gpu, plain], running={}, free_slots=1, capabilities=CAPS, now=T0)
    assert picked is plain
    sched.dispatched(plain, T0)
    assert sched.pick([gated, gpu], running={"g": 1}, free_slots=1, capabilities=CAPS, now=T0) is None
    # approval.execution_granted folds into a new row: eligible at the next pick.
    opened = replace(gated, execution_approved=True, approved_contract_revision=1, updated_sequence=9)
    assert sched.pick([opened, gpu], running={"g": 1}, free_slots=1, capabilities=CAPS, now=T0) is opened


def test_running_counts_from_the_runtime_enforce_the_quota() -> None:
    sched = FairScheduler(policy=weighted({"g": 8, "h": 1}, quotas={"g": 1}))
    rows = [row("g", "g1"), row("g", "g2"), row("h", "h1")]
    first = sched.pick(rows, running={}, free_slots=2, capabilities=CAPS, now=T0)
    assert first is not None and first.group_id == "g"
    sched.dispatched(first, T0)
    rest = [r for r in rows if r is not first]
    second = sched.pick(rest, running={"g": 1}, free_slots=1, capabilities=CAPS, now=T0)
    assert second is not None and second.workitem == "h1"


def test_rows_that_left_the_candidates_are_forgotten() -> None:
    sched = FairScheduler(policy=weighted({"g": 1}))
    a, b = row("g", "a", urgency="critical"), row("g", "b", urgency="low")
    assert sched.pick([a, b], running={}, free_slots=1, capabilities=CAPS, now=T0) is a
    # "a" was cancelled: it is no longer a candidate.
    assert sched.pick([b], running={}, free_slots=1, capabilities=CAPS, now=T0) is b
    assert "a" not in sched.core


def test_a_contract_revision_with_a_new_urgency_reorders_at_once() -> None:
    sched = FairScheduler(policy=weighted({"g": 1}))
    a, b = row("g", "a"), row("g", "b")
    assert sched.pick([a, b], running={}, free_slots=1, capabilities=CAPS, now=T0) is a
    b2 = row("g", "b", seq=5, urgency="critical")
    assert sched.pick([a, b2], running={}, free_slots=1, capabilities=CAPS, now=T0) is b2


def test_set_policy_reorders_the_next_pick() -> None:
    sched = FairScheduler(policy=weighted({"a": 1, "b": 1}))
    rows = [row("a", f"a{i}") for i in range(5)] + [row("b", f"b{i}") for i in range(5)]
    first = sched.pick(rows, running={}, free_slots=1, capabilities=CAPS, now=T0)
    assert first is not None and first.group_id == "a"
    sched.set_policy(weighted({"a": 1, "b": 8}, quotas={"a": 1}))
    assert sched.pick(rows, running={"a": 1}, free_slots=1, capabilities=CAPS, now=T0).group_id == "b"  # type: ignore[union-attr]


def test_deadline_and_start_by_are_read_from_the_row() -> None:
    sched = FairScheduler(policy=weighted({"g": 1}))
    later = row("g", "later", deadline="2026-01-03T00:00:00Z")
    soon = replace(row("g", "soon"), start_by="2026-01-01T00:05:00Z")
    assert sched.pick([later, soon], running={}, free_slots=1, capabilities=CAPS, now=T0) is soon
