"""Priority and policy changes reorder queued work at once; running work is only
asked to preempt, cooperatively (spec 11.3)."""

from __future__ import annotations

from mwworker.fairness import Item
from mwworker.preemption import RunningItem, fair_slots, preemption_requests
from mwworker.scheduler import SchedulerCore

from .helpers import policy, weighted


def test_a_policy_change_reorders_the_next_pick_MWP_WRK_015() -> None:
    classes = {"low": 1, "high": 8}
    core = SchedulerCore(policy(classes, {"b": {"class": "low"}, "a": {"class": "low"}}))
    for g in "ba":  # "b" arrives first: it wins ties
        for i in range(20):
            core.upsert(Item(f"{g}{i}", g, 0.0))

    def dispatch_next() -> str:
        item = core.select(0.0)
        assert item is not None
        core.dispatch(item.key, 0.0)
        core.finished(item.group)
        return item.group

    assert [dispatch_next(), dispatch_next()] == ["b", "a"]
    assert core.select(0.0).group == "b"  # type: ignore[union-attr]
    # The Organization raises "a" to the high class: it is next at once, and takes 8 of the next 9.
    core.set_policy(policy(classes, {"a": {"class": "high"}, "b": {"class": "low"}}))
    picks = [dispatch_next() for _ in range(9)]
    assert picks[0] == "a"
    assert picks.count("a") == 8


def test_a_policy_change_of_quota_applies_to_the_next_pick() -> None:
    core = SchedulerCore(weighted({"g": 1}))
    core.upsert(Item("g1", "g", 0.0))
    core.set_running("g", 1)
    assert core.select(0.0) is not None
    core.set_policy(weighted({"g": 1}, quotas={"g": 1}))
    assert core.select(0.0) is None


def test_an_urgency_change_reorders_the_group_at_once() -> None:
    core = SchedulerCore(weighted({"g": 1}))
    core.upsert(Item("x", "g", 0.0))
    core.upsert(Item("y", "g", 1.0))
    assert core.select(2.0).key == "x"  # type: ignore[union-attr]
    core.upsert(Item("y", "g", 1.0, urgency=3, impact=3))  # a new contract revision
    assert core.select(2.0).key == "y"  # type: ignore[union-attr]


def test_fair_slots_water_fills_by_weight_and_demand() -> None:
    share = fair_slots({"a": 10, "b": 10, "c": 1}, {"a": 1, "b": 3, "c": 4}, 8)
    assert share["c"] == 1
    assert abs(share["a"] - 7 / 4) < 1e-9 and abs(share["b"] - 21 / 4) < 1e-9


def test_preemption_is_requested_from_the_group_above_its_share_MWP_WRK_015() -> None:
    core = SchedulerCore(weighted({"hog": 1, "late": 1}))
    running = [RunningItem(f"h{i}", "hog", float(i)) for i in range(4)]
    core.set_running("hog", 4)
    assert preemption_requests(core, running, slots=4, now=10.0) == []  # nobody waits
    for i in range(3):
        core.upsert(Item(f"l{i}", "late", 5.0))
    asks = preemption_requests(core, running, slots=4, now=10.0)
    # Fair share is 2 + 2: the two most recently started items of "hog" are asked to yield.
    assert [(a.key, a.reason) for a in asks] == [("h3", "fair_share"), ("h2", "fair_share")]


def test_preemption_is_not_requested_while_a_slot_is_free() -> None:
    core = SchedulerCore(weighted({"hog": 1, "late": 1}))
    core.upsert(Item("l0", "late", 5.0))
    running = [RunningItem(f"h{i}", "hog", float(i)) for i in range(3)]
    assert preemption_requests(core, running, slots=4, now=10.0) == []


def test_a_lowered_quota_asks_the_excess_to_preempt_MWP_WRK_015() -> None:
    core = SchedulerCore(weighted({"g": 1}, quotas={"g": 1}))
    running = [RunningItem("first", "g", 1.0), RunningItem("second", "g", 2.0)]
    asks = preemption_requests(core, running, slots=8, now=10.0)
    assert [(a.key, a.reason) for a in asks] == [("second", "quota")]


def test_preemption_respects_weights() -> None:
    # Weights 3:1 over 4 slots: "light" is entitled to 1 slot and already has it.
    core = SchedulerCore(weighted({"heavy": 3, "light": 1}))
    running = [RunningItem("h0", "heavy", 0.0), RunningItem("h1", "heavy", 1.0), RunningItem("h2", "heavy", 2.0)]
    running.append(RunningItem("l0", "light", 3.0))
    core.upsert(Item("l1", "light", 4.0))
    assert preemption_requests(core, running, slots=4, now=10.0) == []
