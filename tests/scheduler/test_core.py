"""Internals the other tests lean on: the in-Group order code and dry runs."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from mwworker.fairness import MAX_LEVEL, Item
from mwworker.scheduler import SchedulerCore, _code

from .helpers import weighted

TIMES = st.integers(-(10**9), 10**10).map(lambda ms: ms / 1000)  # millisecond instants, 1938..2286


@given(
    a=st.tuples(TIMES, st.integers(0, MAX_LEVEL), TIMES, st.integers(0, 2**40 - 1)),
    b=st.tuples(TIMES, st.integers(0, MAX_LEVEL), TIMES, st.integers(0, 2**40 - 1)),
)
def test_the_order_code_sorts_like_the_order_tuple(
    a: tuple[float, int, float, int], b: tuple[float, int, float, int]
) -> None:
    def key(t: tuple[float, int, float, int]) -> tuple[int, int, int, int]:
        return (math.floor(t[0] * 1000 + 1e-6), -t[1], math.floor(t[2] * 1000 + 1e-6), t[3])

    if key(a) != key(b):
        assert (_code(*a) < _code(*b)) == (key(a) < key(b))


def test_a_dry_run_changes_nothing() -> None:
    core = SchedulerCore(weighted({"a": 1, "b": 2}, quotas={"b": 1}))
    for i in range(5):
        core.upsert(Item(f"a{i}", "a", float(i)))
        core.upsert(Item(f"b{i}", "b", float(i)))
    before = ([core.group_state(g) for g in ("a", "b")], core.vtime, len(core))
    order = [i.key for i in core.projected_order()]
    assert ([core.group_state(g) for g in ("a", "b")], core.vtime, len(core)) == before
    # Equal start tags: the heavier "b" first; quota 1 and no slot released: then "a" alone.
    assert order == ["b0", "a0", "a1", "a2", "a3", "a4"]
    # The dry run predicts what the live core then does.
    live = []
    while (item := core.select(0.0)) is not None:
        core.dispatch(item.key, 0.0)
        live.append(item.key)
    assert live == order
