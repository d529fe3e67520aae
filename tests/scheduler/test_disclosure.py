"""Schedule disclosure (spec 11.2; MWP-WRK-012): an estimated start window,
completion, confidence, capacity status and calculation time, with nothing of
another Group in it."""

from __future__ import annotations

import json
import re
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from mwworker.fairness import Item
from mwworker.picker import FairScheduler
from mwworker.scheduler import SchedulerCore

from .helpers import T0, row, weighted

ME = "0000aaaa-0000-4000-8000-000000000001"
OTHER_IDS = st.uuids().map(str)
# Distinctive titles: a leak must not be confused with a JSON key that happens to contain "a".
TITLES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=4, max_size=24).map(lambda t: f"secret-{t}")


def disclose(others: list[tuple[str, str, int]], mine: int, slots: int) -> tuple[str, dict[str, object]]:
    """Queue ``mine`` items in my Group and each other Group's items; disclose my last one."""
    sched = FairScheduler(policy=weighted({ME: 2, **{g: 1 for g, _, _ in others}}))
    rows = [row(ME, f"{ME[:8]}-item-{i}", goal=f"my task {i}") for i in range(mine)]
    for gid, title, count in others:
        rows += [row(gid, f"{gid}-{i}", goal=f"{title} {i}") for i in range(count)]
    sched.pick(rows, running={}, free_slots=0, capabilities=frozenset(), now=T0)
    body = sched.disclose(rows[mine - 1].workitem, T0, slots=slots, service_seconds=600)
    return json.dumps(body, sort_keys=True), body


@settings(max_examples=60, deadline=None)
@given(
    others=st.lists(
        st.tuples(OTHER_IDS, TITLES, st.integers(1, 40)), min_size=1, max_size=30, unique_by=lambda t: t[0]
    ),
    renamed=st.lists(st.tuples(OTHER_IDS, TITLES, st.integers(1, 40)), min_size=30, max_size=30),
    mine=st.integers(1, 10),
    slots=st.integers(1, 8),
)
def test_a_disclosure_carries_nothing_of_another_group_MWP_WRK_012(
    others: list[tuple[str, str, int]], renamed: list[tuple[str, str, int]], mine: int, slots: int
) -> None:
    text, body = disclose(others, mine, slots)
    assert set(body) == {
        "estimated_start_window", "estimated_completion", "confidence", "capacity_status", "calculated_at"
    }  # fmt: skip
    for gid, title, _ in others:
        assert gid not in text and gid[:8] not in text
        assert title not in text
    # The only number is the confidence: no count, rank or position of any Group.
    numbers = [v for v in re.findall(r"(?<![\d:T-])-?\d+(?:\.\d+)?(?![\d:Z-])", text)]
    assert numbers == [str(body["confidence"])]
    # Renaming other Groups, retitling their work and changing how much they have
    # queued (same number of Groups, same weights) changes nothing in it.
    twins = [(gid, title, count) for (gid, title, count) in renamed[: len(others)]]
    twins = [(f"{i:08d}-9999-4999-8999-{gid[-12:]}", title, count) for i, (gid, title, count) in enumerate(twins)]
    assert disclose(twins, mine, slots)[0] == text


def test_the_window_widens_with_the_items_ahead_in_my_group() -> None:
    core = SchedulerCore(weighted({"mine": 1, "other": 1}))
    for i in range(10):
        core.upsert(Item(f"m{i}", "mine", float(i)))
        core.upsert(Item(f"o{i}", "other", float(i)))
    now = T0.timestamp()
    first = core.disclose("m0", now, slots=2, service_seconds=600)
    last = core.disclose("m9", now, slots=2, service_seconds=600)
    assert first.start_earliest <= now + 60
    assert first.capacity_status == "available"
    assert last.start_latest > first.start_latest
    assert last.completion >= last.start_latest + 600
    assert 0 < last.confidence <= 1


def test_a_gated_item_discloses_capacity_status_gated() -> None:
    core = SchedulerCore(weighted({"mine": 1}))
    core.upsert(Item("waiting", "mine", 0.0, approved=False))
    d = core.disclose("waiting", T0.timestamp(), slots=1, service_seconds=60)
    assert d.capacity_status == "gated" and d.confidence == 0.0
    assert d.as_json()["calculated_at"] == T0.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_calculation_time_is_the_injected_clock() -> None:
    core = SchedulerCore(weighted({"mine": 1}))
    core.upsert(Item("x", "mine", 0.0))
    later = T0 + timedelta(hours=3)
    assert core.disclose("x", later.timestamp(), slots=1, service_seconds=60).calculated_at == later.timestamp()
