"""Quotas, Approval, capability, risk and backoff gates (spec 10.1, 11.1)."""

from __future__ import annotations

from mwworker.fairness import Item
from mwworker.scheduler import SchedulerCore

from .helpers import weighted


def test_a_groups_quota_caps_its_concurrent_slots() -> None:
    core = SchedulerCore(weighted({"big": 8, "small": 1}, quotas={"big": 2}))
    for i in range(50):
        core.upsert(Item(f"b{i}", "big", 0.0))
        core.upsert(Item(f"s{i}", "small", 0.0))
    started = []
    for _ in range(6):  # six slots, never released
        item = core.select(0.0, free_slots=6 - len(started))
        assert item is not None
        core.dispatch(item.key, 0.0)
        started.append(item.group)
    assert started.count("big") == 2
    assert core.group_state("big")["running"] == 2
    core.finished("big")  # one slot of "big" frees: it may take exactly one more
    nxt = core.select(0.0)
    assert nxt is not None and nxt.group == "big"


def test_runtime_running_counts_drive_the_quota() -> None:
    core = SchedulerCore(weighted({"g": 1, "h": 1}, quotas={"g": 1}))
    core.upsert(Item("g1", "g", 0.0))
    core.upsert(Item("h1", "h", 5.0))
    core.sync_running({"g": 1})
    assert core.select(10.0).key == "h1"  # type: ignore[union-attr]
    core.sync_running({})
    core.upsert(Item("h1", "h", 5.0))
    assert {core.select(10.0).key} <= {"g1", "h1"}  # type: ignore[union-attr]
    assert "g1" in {i.key for i in core.projected_order()}


def test_an_item_behind_an_unmet_approval_gate_is_never_picked_until_it_opens() -> None:
    core = SchedulerCore(weighted({"g": 1, "h": 1}))
    core.upsert(Item("risky", "g", 0.0, urgency=3, impact=3, approved=False))
    for i in range(5):
        core.upsert(Item(f"h{i}", "h", 0.0))
    seen = []
    for _ in range(5):
        item = core.select(1.0)
        assert item is not None
        seen.append(item.key)
        core.dispatch(item.key, 1.0)
        core.finished(item.group)
    assert "risky" not in seen
    assert core.select(2.0) is None
    core.upsert(Item("risky", "g", 0.0, urgency=3, impact=3, approved=True))  # approval.execution_granted
    assert core.select(2.0).key == "risky"  # type: ignore[union-attr]


def test_a_missing_capability_gates_until_the_worker_has_it() -> None:
    core = SchedulerCore(weighted({"g": 1}), capabilities=[("py", "3")])
    core.upsert(Item("gpu", "g", 0.0, requires=frozenset({("cuda", "12")})))
    core.upsert(Item("ok", "g", 50.0, requires=frozenset({("py", "3")})))
    assert core.select(60.0).key == "ok"  # type: ignore[union-attr]
    core.dispatch("ok", 60.0)
    assert core.select(61.0) is None
    assert core.explain(61.0)[0].gates == ("capability",)
    core.set_capabilities([("py", "3"), ("cuda", "12")])
    assert core.select(61.0).key == "gpu"  # type: ignore[union-attr]


def test_retry_backoff_opens_with_the_clock() -> None:
    core = SchedulerCore(weighted({"g": 1}))
    core.upsert(Item("retry", "g", 0.0, not_before=100.0), now=10.0)
    assert core.select(99.0) is None
    assert core.select(100.0).key == "retry"  # type: ignore[union-attr]


def test_risk_above_the_workers_ceiling_is_never_picked() -> None:
    core = SchedulerCore(weighted({"g": 1}), risk_ceiling=1)
    core.upsert(Item("critical-risk", "g", 0.0, risk=3))
    assert core.select(0.0) is None
    core.upsert(Item("medium-risk", "g", 1.0, risk=1))
    assert core.select(1.0).key == "medium-risk"  # type: ignore[union-attr]


def test_no_free_slot_no_pick() -> None:
    core = SchedulerCore(weighted({"g": 1}))
    core.upsert(Item("a", "g", 0.0))
    assert core.select(0.0, free_slots=0) is None
