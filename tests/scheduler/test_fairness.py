"""Weighted fairness across Groups (spec 11.1; MWP-WRK-009, MWP-WRK-010)."""

from __future__ import annotations

from collections import Counter

from mwworker.fairness import Item, starvation_bound
from mwworker.scheduler import SchedulerCore

from .helpers import GapLog, weighted


def saturate(core: SchedulerCore, groups: dict[str, int], items: int, *, urgency: dict[str, int] | None = None) -> None:
    for g in groups:
        for i in range(items):
            core.upsert(Item(f"{g}-{i}", g, 0.0, urgency=(urgency or {}).get(g, 1)))


def run(core: SchedulerCore, dispatches: int, log: GapLog | None = None) -> list[str]:
    order = []
    for _ in range(dispatches):
        item = core.select(0.0)
        assert item is not None
        core.dispatch(item.key, 0.0)
        core.finished(item.group)
        if log is not None:
            log.served(core, item.group)
        order.append(item.group)
    return order


def test_saturated_shares_follow_weights_1_2_4_8_MWP_WRK_010() -> None:
    weights = {"a": 1, "b": 2, "c": 4, "d": 8}
    core = SchedulerCore(weighted(weights))
    saturate(core, weights, 2000)
    order = run(core, 3000)
    counts = Counter(order)
    total = sum(weights.values())
    for g, w in weights.items():
        share = counts[g] / len(order)
        assert abs(share - w / total) <= 0.05 * (w / total), (g, share)


def test_lag_behind_the_weighted_share_stays_under_two_items() -> None:
    weights = {"a": 1, "b": 2, "c": 4, "d": 8}
    core = SchedulerCore(weighted(weights))
    saturate(core, weights, 1000)  # every Group stays backlogged for all 1,000 dispatches
    served: Counter[str] = Counter()
    worst = 0.0
    for k, g in enumerate(run(core, 1000), start=1):
        served[g] += 1
        worst = max(worst, max(k * w / 15 - served[h] for h, w in weights.items()))
    assert worst <= 2


def test_critical_urgency_does_not_push_a_group_past_its_weight_MWP_WRK_009() -> None:
    # Group "flood" queues only critical/critical items; "quiet" only low ones.
    core = SchedulerCore(weighted({"flood": 1, "quiet": 1}))
    for i in range(300):
        core.upsert(Item(f"f{i}", "flood", float(i), urgency=3, impact=3))
        core.upsert(Item(f"q{i}", "quiet", float(i), urgency=0, impact=0))
    counts = Counter(run(core, 200))
    assert counts["flood"] == counts["quiet"] == 100


def test_a_flood_of_critical_items_cannot_push_another_group_past_the_bound_MWP_WRK_009() -> None:
    weights = {"flood": 8, "victim": 1}
    core = SchedulerCore(weighted(weights))
    log = GapLog()
    core.upsert(Item("v0", "victim", 0.0, urgency=0, impact=0))
    log.observe(core)
    for i in range(500):
        core.upsert(Item(f"f{i}", "flood", 0.0, urgency=3, impact=3, deadline=1.0))
        log.observe(core)
    for i in range(1, 50):
        core.upsert(Item(f"v{i}", "victim", 0.0, urgency=0, impact=0))
    run(core, 400, log)
    victim_gaps = [gap for g, gap, bound in log.gaps if g == "victim"]
    assert victim_gaps and max(victim_gaps) <= starvation_bound([8], 1) == 9
    assert all(gap <= bound for _, gap, bound in log.gaps)


def test_it_is_not_highest_priority_first_MWP_WRK_010() -> None:
    # A strict priority queue would serve every critical item of "hot" before any of "cold".
    core = SchedulerCore(weighted({"hot": 8, "cold": 1}))
    for i in range(100):
        core.upsert(Item(f"h{i}", "hot", 0.0, urgency=3, impact=3))
        core.upsert(Item(f"c{i}", "cold", 0.0, urgency=0, impact=0))
    first = run(core, 20)
    assert "cold" in first[:10]


def test_urgency_reorders_inside_the_group_MWP_WRK_009() -> None:
    core = SchedulerCore(weighted({"g": 1}))
    core.upsert(Item("old-low", "g", 0.0, urgency=0, impact=0))
    core.upsert(Item("new-critical", "g", 10.0, urgency=3, impact=3))
    assert core.select(10.0).key == "new-critical"  # type: ignore[union-attr]


def test_aging_lets_an_old_low_item_pass_new_critical_ones() -> None:
    # aging_seconds=300: a low/low item outranks items arriving > 6*300 s later.
    core = SchedulerCore(weighted({"g": 1}))
    core.upsert(Item("old-low", "g", 0.0, urgency=0, impact=0))
    for i in range(20):
        core.upsert(Item(f"crit{i}", "g", 1801.0 + i, urgency=3, impact=3))
    assert core.select(2000.0).key == "old-low"  # type: ignore[union-attr]


def test_deadline_orders_inside_the_group() -> None:
    core = SchedulerCore(weighted({"g": 1}))
    core.upsert(Item("late", "g", 0.0, urgency=1, impact=1, deadline=5000.0))
    core.upsert(Item("soon", "g", 0.0, urgency=1, impact=1, deadline=100.0))
    assert core.select(0.0).key == "soon"  # type: ignore[union-attr]


def test_an_idle_group_banks_no_credit() -> None:
    core = SchedulerCore(weighted({"busy": 1, "idle": 1}))
    for i in range(100):
        core.upsert(Item(f"b{i}", "busy", 0.0))
    run(core, 50)
    for i in range(100):
        core.upsert(Item(f"i{i}", "idle", 0.0))
    # The returning Group alternates with the busy one instead of taking 50 in a row.
    assert Counter(run(core, 20)) == Counter({"busy": 10, "idle": 10})
