"""The live path's feed core (missions.feed), by plain calls: no event loop, no database.

The hub turns every await into an input of the core (a notice, a read's
rows, a batch sent); here the test plays the hub and the database, and so
can try every order in which those inputs arrive (spec 16: each Group in
sequence order, every Event, none twice; DESIGN §5: delivery reads the
database after each subscriber's position, notices only say "head moved")."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from missions.feed import Cursor, Feed, Notice, Read


def _events(first: int, last: int, prev: str | None = None) -> list[dict[str, Any]]:
    """Events ``first``..``last`` of Group "g", each naming the hash before it."""
    out = []
    for sequence in range(first, last + 1):
        before = prev if prev is not None and sequence == first else f"h{sequence - 1}"
        out.append({"group": "g", "sequence": sequence, "prev_hash": before, "hash": f"h{sequence}"})
    return out


def _sequences(events: list[dict[str, Any]] | None) -> list[int] | None:
    return None if events is None else [e["sequence"] for e in events]


def _feed_at(head: int, cursors: int = 1, cache_size: int = 1000) -> tuple[Feed[Cursor], list[Cursor]]:
    """A feed that has seen (and cached) Events 1..head, with subscribers at the head."""
    feed: Feed[Cursor] = Feed("g", cache_size=cache_size)
    feed.open(0)
    feed.take(_events(1, head))
    subscribers = [Cursor("g", head) for _ in range(cursors)]
    for cursor in subscribers:
        feed.add(cursor)
    return feed, subscribers


def test_it_takes_carried_events_that_continue_the_feed_and_sends_them_to_everyone_at_the_head() -> None:
    feed, (first, second) = _feed_at(3, cursors=2)
    carried = _events(4, 5)
    assert feed.head_notice(5, carried) is Notice.CARRIED
    assert feed.take(carried)
    assert feed.head == 5
    sends, wakes = feed.fan_out()
    assert wakes == []
    assert sorted((id(s.cursor), _sequences(s.events)) for s in sends) == sorted(
        [(id(first), [4, 5]), (id(second), [4, 5])]
    )
    for send in sends:
        assert send.cursor.delivered(send.events, True)
    assert (first.position, second.position) == (5, 5)
    assert feed.fan_out() == ([], [])  # nothing new: nothing sent twice


@pytest.mark.parametrize(
    "case", ["gap", "late_duplicate_start", "broken_chain", "no_events", "short_of_the_head", "not_a_list", "empty"]
)
def test_anything_that_does_not_continue_the_feed_is_read_after_the_head(case: str) -> None:
    """Spec 16 (sequence order, nothing skipped): such a notice costs a read
    after the feed's own head, never a gap or a repeat."""
    feed, _ = _feed_at(3)
    log = _events(1, 6)
    carried: Any = {
        "gap": log[4:],  # 5..6 while the feed is at 3: the notice of 4 is late or lost
        "late_duplicate_start": log[2:],  # 3..6: starts at an Event the feed has
        "broken_chain": [log[3], {**log[4], "prev_hash": "f" * 64}, log[5]],
        "no_events": None,  # a commit too big to carry its Events
        "short_of_the_head": log[3:5],  # says head 6, carries 4..5
        "not_a_list": {"sequence": 4},
        "empty": [],
    }[case]
    assert feed.head_notice(6, carried) is Notice.READ
    assert feed.read_to(6) == Read("g", 3, feed.batch)
    assert feed.read_done(log[3:], 6) is None  # there: no further read
    assert (feed.head, feed.reading) == (6, False)


def test_the_first_carried_link_is_checked_against_the_head_hash_the_feed_opened_with() -> None:
    """Spec 16: a notice's first Event must name the head's hash. A feed
    opened from a read that gave the head's hash checks that link at once;
    one that knows its head only by number reads instead of trusting it."""
    known: Feed[Cursor] = Feed("g")
    known.open(3, "h3")
    assert known.head_notice(5, _events(4, 5, prev="forged")) is Notice.READ
    assert known.head_notice(5, _events(4, 5)) is Notice.CARRIED

    unknown: Feed[Cursor] = Feed("g")
    unknown.open(3)
    assert unknown.head_notice(5, _events(4, 5, prev="forged")) is Notice.READ
    assert unknown.head_notice(5, _events(4, 5)) is Notice.READ
    assert unknown.read_to(5) == Read("g", 3, unknown.batch)
    assert unknown.read_done(_events(4, 5), 5) is None
    # Now the cache holds the head's hash.
    assert unknown.head_notice(6, _events(6, 6)) is Notice.CARRIED
    assert unknown.head_notice(6, _events(6, 6, prev="forged")) is Notice.READ


def test_an_old_notice_changes_nothing() -> None:
    feed, (cursor,) = _feed_at(4)
    assert feed.head_notice(3, _events(3, 3)) is Notice.OLD_NEWS
    assert feed.head_notice(4, None) is Notice.OLD_NEWS
    assert feed.read_to(4) is None
    assert feed.fan_out() == ([], [])
    assert (feed.head, cursor.position) == (4, 4)


def test_before_its_head_is_read_a_feed_takes_notices_as_old_news() -> None:
    """The first head read comes after any notice that arrived while it ran, so it counts them."""
    feed: Feed[Cursor] = Feed("g")
    waiting = Cursor("g", 0)
    feed.add(waiting)
    assert feed.head_notice(2, _events(1, 2)) is Notice.OLD_NEWS
    assert feed.open(2) == [waiting]
    assert feed.head == 2 and feed.opened


def test_while_a_read_is_under_way_a_notice_waits_for_it() -> None:
    """A notice's Events could land ahead of the read's rows; the read's lock-holder reads on instead."""
    feed, _ = _feed_at(3)
    assert feed.read_to(5) == Read("g", 3, feed.batch)
    assert feed.head_notice(5, _events(4, 5)) is Notice.READ
    assert feed.read_done(_events(4, 5), 5) is None
    assert not feed.reading
    feed.read_to(7)
    feed.read_failed()
    assert feed.head_notice(6, _events(6, 6)) is Notice.CARRIED


def test_reads_go_on_in_batches_until_the_head_and_stop_when_rows_are_not_visible_yet() -> None:
    feed: Feed[Cursor] = Feed("g", batch=2)
    feed.open(0)
    assert feed.read_to(5) == Read("g", 0, 2)
    assert feed.read_done(_events(1, 2), 5) == Read("g", 2, 2)
    assert feed.read_done(_events(3, 4), 5) == Read("g", 4, 2)
    assert feed.read_done([], 5) is None  # 5 committed but not visible to this read yet
    assert (feed.head, feed.reading) == (4, False)


def test_it_takes_only_events_that_continue_its_head() -> None:
    feed, _ = _feed_at(3)
    assert not feed.take(_events(2, 3))  # old
    assert not feed.take(_events(5, 6))  # past a gap
    assert feed.take(_events(2, 5) + _events(7, 7))  # the old part skipped, cut at the gap
    assert (feed.head, _sequences(list(feed.cache))) == (5, [1, 2, 3, 4, 5])


def test_a_subscriber_that_is_sending_or_behind_the_cache_is_woken_not_sent_to() -> None:
    feed, (busy, at_head) = _feed_at(6, cursors=2, cache_size=3)
    behind = Cursor("g", 1)  # the cache holds 4..6
    feed.add(behind)
    busy.position, busy.sending = 5, True
    at_head.position = 5
    sends, wakes = feed.fan_out()
    assert [(s.cursor, _sequences(s.events)) for s in sends] == [(at_head, [6])]
    assert {id(c) for c in wakes} == {id(busy), id(behind)}


def test_a_subscriber_catches_up_from_the_cache_or_by_a_replay_read() -> None:
    feed, _ = _feed_at(6, cache_size=3)
    assert feed.next_for(Cursor("g", 6)) is None  # at the head: it waits to be woken
    assert _sequences(feed.next_for(Cursor("g", 4))) == [5, 6]  # type: ignore[arg-type]
    assert _sequences(feed.next_for(Cursor("g", 3))) == [4, 5, 6]  # type: ignore[arg-type]
    assert feed.next_for(Cursor("g", 2)) == Read("g", 2, feed.batch)  # behind the cache (4..6)


def test_a_batch_is_trimmed_to_what_the_subscriber_has_not_had() -> None:
    cursor = Cursor("g", 4)
    assert _sequences(cursor.unsent(_events(3, 6))) == [5, 6]
    assert cursor.unsent(_events(1, 4)) == []
    assert cursor.delivered(_events(5, 6), True) and cursor.position == 6


def test_a_subscriber_that_refuses_a_batch_is_closed_and_skipped() -> None:
    feed, (cursor,) = _feed_at(2)
    assert not cursor.delivered(_events(3, 3), False)
    assert cursor.closed and cursor.position == 2
    feed.take(_events(3, 3))
    assert feed.fan_out() == ([], [])
    assert feed.remove(cursor)  # the last one: the hub stops following the Group


# --- every interleaving --------------------------------------------------------


class _Driver:
    """Plays the hub and the database around one ``Feed``: each of the hub's
    awaits (a read toward the head, a subscriber's replay, a send) is split
    into steps that the test orders, and each delivery is checked as it
    happens: a batch must start right after what that subscriber had."""

    def __init__(self, cache_size: int, batch: int) -> None:
        self.log: list[dict[str, Any]] = []  # committed
        self.visible = 0  # committed and visible to reads
        self.feed: Feed[Cursor] = Feed("g", cache_size=cache_size, batch=batch)
        self.feed.open(0)
        self.notices: list[tuple[int, list[dict[str, Any]]]] = []
        self.moves: deque[int] = deque()  # head moves waiting for the feed's lock
        self.read: Read | None = None
        self.read_sequence = 0
        self.cursors: list[Cursor] = []
        self.start: dict[int, int] = {}
        self.got: dict[int, list[int]] = {}
        self.declines: dict[int, bool] = {}
        self.fetched: dict[int, list[dict[str, Any]]] = {}  # a subscriber's next batch, before its lock
        self.in_flight: dict[int, list[dict[str, Any]]] = {}  # being sent, under its lock

    def db_read(self, read: Read) -> list[dict[str, Any]]:
        return [dict(e) for e in self.log[read.after : self.visible][: read.limit]]

    def deliver(self, cursor: Cursor, events: list[dict[str, Any]]) -> None:
        got = self.got[id(cursor)]
        last = got[-1] if got else self.start[id(cursor)]
        assert _sequences(events) == list(range(last + 1, last + 1 + len(events)))
        assert events == self.log[last : last + len(events)]  # as committed, not as a notice altered them
        got.extend(_sequences(events) or [])
        assert cursor.delivered(events, True)

    def fan_out(self, after_read: bool) -> None:
        sends, _ = self.feed.fan_out()
        for cursor, events in sends:
            if not self.declines[id(cursor)]:
                self.deliver(cursor, events)
            elif after_read and not cursor.sending:
                # head_moved's asynchronous deliver of what deliver_now declined.
                later = self.feed.cached_after(cursor.position)
                if later:
                    self.deliver(cursor, later)
        self.check_cache()

    def check_cache(self) -> None:
        cached = _sequences(list(self.feed.cache)) or []
        if cached:
            assert cached == list(range(cached[0], cached[0] + len(cached)))
            assert cached[-1] == self.feed.head

    def step(self, op: str, n: int) -> None:
        feed = self.feed
        if op == "commit":
            first = len(self.log) + 1
            self.log += _events(first, first + n % 4)
            self.notices.append((len(self.log), [dict(e) for e in self.log[first - 1 :]]))
            if n % 2:
                self.visible = len(self.log)
        elif op == "visible":
            self.visible = len(self.log)
        elif op in ("notice", "drop") and self.notices:
            sequence, carried = self.notices.pop(n % len(self.notices))
            if op == "drop":
                return
            mode = (n // 7) % 4
            events: Any = carried
            if mode == 1:
                events = None
            elif mode == 2 and len(carried) > 1:
                # A link of the chain broken (the first Event's link is
                # checked only against a cached Event: after the first head
                # read the cache is empty).
                events = [carried[0], {**carried[1], "prev_hash": "x"}, *carried[2:]]
            elif mode == 3:
                events = carried[:-1]
            verdict = feed.head_notice(sequence, events)
            if verdict is Notice.CARRIED:
                feed.take(events)
                self.fan_out(after_read=False)
            elif verdict is Notice.READ:
                self.moves.append(sequence)
        elif op == "check":
            if self.visible > feed.head:
                self.moves.append(self.visible)
        elif op == "lock" and self.read is None and self.moves:
            self.read_sequence = self.moves.popleft()
            self.read = feed.read_to(self.read_sequence)
            if self.read is None:
                self.fan_out(after_read=True)
        elif op == "rows" and self.read is not None:
            self.read = feed.read_done(self.db_read(self.read), self.read_sequence)
            if self.read is None:
                self.fan_out(after_read=True)
        elif op == "subscribe":
            cursor = Cursor("g", n % (len(self.log) + 1))
            self.cursors.append(cursor)
            self.start[id(cursor)], self.got[id(cursor)] = cursor.position, []
            self.declines[id(cursor)] = n % 3 == 0
            feed.add(cursor)
        elif self.cursors:
            self.subscriber_step(op, self.cursors[n % len(self.cursors)])

    def subscriber_step(self, op: str, cursor: Cursor) -> None:
        key = id(cursor)
        if op == "fetch" and key not in self.fetched and key not in self.in_flight:
            step = self.feed.next_for(cursor)
            if step is not None:
                self.fetched[key] = self.db_read(step) if isinstance(step, Read) else step
        elif op == "lock_send" and key in self.fetched:
            batch = cursor.unsent(self.fetched.pop(key))
            if batch:
                cursor.sending = True
                self.in_flight[key] = batch
        elif op == "sent" and key in self.in_flight:
            self.deliver(cursor, self.in_flight.pop(key))
            cursor.sending = False

    def settle(self) -> None:
        """Everything becomes visible, the head check runs, every await completes."""
        self.visible = len(self.log)
        for _ in range(10 * (len(self.log) + 10)):
            if self.read is not None:
                self.step("rows", 0)
            elif self.moves:
                self.step("lock", 0)
            elif self.feed.head < self.visible:
                self.step("check", 0)
            for i in range(len(self.cursors)):
                for op in ("sent", "lock_send", "fetch"):
                    self.step(op, i)
            if (
                self.read is None
                and not self.moves
                and self.feed.head == len(self.log)
                and not self.fetched
                and not self.in_flight
                and all(self.feed.caught_up(c) for c in self.cursors)
            ):
                return
        raise AssertionError("the feed did not settle")


# Weighted toward what makes a feed move (commits, their notices, reads).
_OPS = ["commit"] * 3 + ["notice"] * 3 + ["rows"] * 2 + ["visible", "drop", "check", "lock", "subscribe"]
_OPS += ["fetch", "lock_send", "sent"] * 2


@settings(max_examples=400, deadline=None)
@given(
    cache_size=st.integers(1, 5),
    batch=st.integers(1, 4),
    ops=st.lists(st.tuples(st.sampled_from(_OPS), st.integers(0, 50)), min_size=10, max_size=100),
)
def test_it_gives_every_subscriber_every_event_once_in_order_whatever_the_interleaving(
    cache_size: int, batch: int, ops: list[tuple[str, int]]
) -> None:
    """Spec 16, against the simplest model: subscriber s, subscribed after
    a, ends with exactly a+1..head, each delivery continuing the last;
    whatever order notices (late, lost, altered, without Events), head
    checks, reads (in batches, with rows not visible yet), replays and
    sends come in."""
    driver = _Driver(cache_size, batch)
    driver.step("subscribe", 0)
    for op, n in ops:
        driver.step(op, n)
    driver.settle()
    for cursor in driver.cursors:
        start = driver.start[id(cursor)]
        assert driver.got[id(cursor)] == list(range(start + 1, len(driver.log) + 1))
