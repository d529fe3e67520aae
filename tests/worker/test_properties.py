"""Delivery-order independence of the projection (PROTOCOL §16: at-least-once,
per-Group order restored by the Worker), by Hypothesis.

Whatever the interleaving across Groups, the duplicates, the reordering
within a window, the restarts (waiting Events lost, the server replaying from
the durable Cursor with some overlap) and the rebuilds in between, the final
projection is the one in-order delivery gives, byte for byte.
"""

from __future__ import annotations

import random
import tempfile
from functools import lru_cache
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mwworker import Store
from tests.worker.streams import ME, Event, generate, resume_delivery, verifier

VERIFIER = verifier(5)  # the Group Authority of the stream below


@lru_cache(maxsize=1)
def stream() -> list[Event]:
    """600 Events over 4 Groups (the administrative one and three Missions)."""
    return generate(5, 600, groups=4)[1]


@lru_cache(maxsize=1)
def reference() -> str:
    store = Store(":memory:", agent=ME, verifier=VERIFIER)
    for e in stream():
        store.apply(e)
    dump = store.projection_dump()
    store.close()
    return dump


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    dup_rate=st.floats(0, 0.5),
    swap_rate=st.floats(0, 0.6),
    window=st.integers(1, 40),
)
def test_shuffled_and_duplicated_delivery_gives_the_same_projection(
    seed: int, dup_rate: float, swap_rate: float, window: int
) -> None:
    rng = random.Random(seed)
    frames = resume_delivery(stream(), {}, rng, overlap=0, dup_rate=dup_rate, swap_rate=swap_rate, window=window)
    store = Store(":memory:", agent=ME, verifier=VERIFIER)
    applied = sum(len(store.apply(e)) for e in frames)
    assert applied == len(stream())  # each Event applied exactly once
    assert store.projection_dump() == reference()
    store.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), restarts=st.lists(st.floats(0, 1), max_size=4), rebuild_at=st.floats(0, 1))
def test_restarts_and_rebuilds_in_between_give_the_same_projection(
    seed: int, restarts: list[float], rebuild_at: float
) -> None:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.sqlite3"
        store = Store(path, agent=ME, verifier=VERIFIER, synchronous="NORMAL", audit=True)
        frames = resume_delivery(stream(), {}, rng)
        cut_points = sorted(int(r * len(frames)) for r in restarts)
        rebuild_point = int(rebuild_at * len(frames))
        i = 0
        while True:
            stop = cut_points.pop(0) if cut_points else len(frames)
            for e in frames[i:stop]:
                store.apply(e)
                i += 1
                if i == rebuild_point:
                    before = store.projection_dump()
                    store.rebuild()
                    assert store.projection_dump() == before
            if stop >= len(frames):
                break
            # Crash-restart: the waiting Events are gone; the server replays after each Cursor.
            store.close()
            store = Store(path, agent=ME, verifier=VERIFIER, synchronous="NORMAL", audit=True)
            frames, i = resume_delivery(stream(), store.ack_positions(), rng), 0
            cut_points = [max(0, c - stop) for c in cut_points]
        assert store.projection_dump() == reference()
        assert store._conn.execute("SELECT max(applied) FROM apply_audit").fetchone() == (1,)
        store.close()


class DeliveryMachine(RuleBasedStateMachine):
    """Frames arrive in any order, again and again; the Worker restarts and
    rebuilds. The Cursor never passes a gap, and ends where in-order delivery ends."""

    @initialize(seed=st.integers(0, 2**32 - 1))
    def start(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.tmp = tempfile.TemporaryDirectory()
        self.path = Path(self.tmp.name) / "w.sqlite3"
        self.store = Store(self.path, agent=ME, verifier=VERIFIER, synchronous="NORMAL")
        self.delivered: set[str] = set()
        self.by_group: dict[str, list[Event]] = {}
        for e in stream():
            self.by_group.setdefault(e["groupId"], []).append(e)

    def teardown(self) -> None:
        if hasattr(self, "store"):
            self.store.close()
            self.tmp.cleanup()

    def _deliver(self, event: Event) -> None:
        self.delivered.add(event["eventId"])
        self.store.apply(event)

    @rule(data=st.data())
    def next_in_order(self, data: st.DataObject) -> None:
        group = data.draw(st.sampled_from(sorted(self.by_group)))
        after = self.store.cursor(group).sequence
        events = self.by_group[group]
        for e in events[after : after + data.draw(st.integers(1, 60))]:
            self._deliver(e)

    @rule(data=st.data())
    def out_of_order(self, data: st.DataObject) -> None:
        group = data.draw(st.sampled_from(sorted(self.by_group)))
        events = self.by_group[group]
        self._deliver(events[data.draw(st.integers(0, len(events) - 1))])

    @precondition(lambda self: bool(self.delivered))
    @rule()
    def duplicate(self) -> None:
        event = self.rng.choice([e for e in stream() if e["eventId"] in self.delivered])
        self._deliver(event)

    @rule()
    def restart(self) -> None:
        self.store.close()
        self.store = Store(self.path, agent=ME, verifier=VERIFIER, synchronous="NORMAL")

    @rule()
    def rebuild(self) -> None:
        before = self.store.projection_dump()
        self.store.rebuild()
        assert self.store.projection_dump() == before

    @invariant()
    def the_cursor_never_passes_a_gap(self) -> None:
        if not hasattr(self, "store"):
            return
        for group, cursor in self.store.ack_positions().items():
            events = self.by_group[group]
            assert all(e["eventId"] in self.delivered for e in events[:cursor])
            assert self.store.cursor(group).last_event_id == events[cursor - 1]["eventId"]
            buffered = self.store.buffered(group)
            assert all(s > cursor + 1 for s in buffered)

    @rule()
    def deliver_everything(self) -> None:
        for e in stream():
            self._deliver(e)
        assert self.store.projection_dump() == reference()


TestDeliveryMachine = DeliveryMachine.TestCase
TestDeliveryMachine.settings = settings(max_examples=20, stateful_step_count=25, deadline=None)
