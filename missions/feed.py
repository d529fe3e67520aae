"""The live path's feed core: one Group's Events and its subscribers' places, with no I/O.

The hub (``missions.hub``) drives a ``Feed`` per Group it follows, the way
websockets drives its protocol core: the feed is told what happened (the
head moved, a read gave these rows, a notice carried these Events, this
batch was sent) and answers what to do next (read the Group after n, send
these Events to that subscriber, wake that one), and never waits, reads or
sends itself. So everything that decides order and completeness (spec 16:
each Group in sequence order, nothing skipped) is here, and is tested by
plain calls (``tests/delivery/test_feed.py``), without an event loop or a
database.

Invariants the feed keeps:

- its cache holds consecutive sequences ending at ``head``, so a subscriber
  at or after the cache's first Event is served from memory; one further
  behind is told to read (a replay), in batches;
- it takes only Events that continue ``head`` (``take``): a late, repeated or
  gapped batch never enters the cache;
- a subscriber's position moves only by a batch that starts right after it
  (``Cursor.unsent`` trims a batch to what is new), so each subscriber gets
  every Event once, in order;
- a subscriber with a ``window`` (spec 17.3: bounded buffering per Group) has
  at most that many Events sent and not yet acknowledged (``Cursor.ack``);
  at the bound it is paused, only in this Group, until an acknowledgement
  (or ``Cursor.resume``) makes room, and the feed neither sends to it nor
  wakes it meanwhile. Events its ``wants`` filter leaves out move its
  position without taking room (spec 17.2: a filter changes live delivery).

Events are the stored signed Event documents (``WireEvent``, a dict of the
document) with the hash chain of their rows beside them: the chain is how a
carried Event is checked to continue the feed, and it is not part of the
document.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

CACHE_EVENTS = 1000
REPLAY_BATCH = 500
# The redaction tombstones (``missions.withholding``): one clears the cache.
TOMBSTONES = frozenset({"message.redacted", "ext.mwportal.audit.event_redacted"})

Event = dict[str, Any]


class WireEvent(dict[str, Any]):
    """A stored Event as the wire carries it: the signed Event document (the
    dict), the hash chain of its row (``prev_hash``, ``hash``), and its
    ``EVENT`` frame encoded once (``frame``), so a hundred subscribers of one
    Group send the same text, not a hundred encodings of it; ``prepared`` is
    that frame framed once for daphne's connections (``missions.direct_send``)."""

    __slots__ = ("frame", "hash", "prepared", "prev_hash")
    frame: str
    hash: str | None
    prev_hash: str | None
    prepared: Any


def _link(event: Any, name: str) -> Any:
    """An Event's ``prev_hash`` or ``hash``: beside the document of a
    ``WireEvent``, a member of a carried notice's entry."""
    if isinstance(event, WireEvent):
        return getattr(event, name, None)
    return event.get(name) if isinstance(event, dict) else None


@dataclass(eq=False)
class Cursor:
    """One subscriber's place in one Group: the last sequence it was sent."""

    group_id: str
    position: int
    # Ended: the subscriber said so, or sending to it failed.
    closed: bool = field(default=False, kw_only=True)
    # A batch is on its way to it; the feed does not hand it another meanwhile.
    sending: bool = field(default=False, kw_only=True)
    # At most this many Events sent and not acknowledged (None: no bound).
    window: int | None = field(default=None, kw_only=True)
    # Which Events the subscriber wants sent (None: all); the rest only move its position.
    wants: Callable[[Event], bool] | None = field(default=None, kw_only=True)
    # The sequences sent and not yet acknowledged, oldest first.
    in_flight: deque[int] = field(default_factory=deque, kw_only=True)
    # At the window's bound: nothing is sent until ``ack`` or ``resume`` makes room.
    paused: bool = field(default=False, kw_only=True)
    # The subscriber has acknowledged on this subscription: its ACKs, not a
    # timer, make room in its window.
    acknowledged: bool = field(default=False, kw_only=True)

    def unsent(self, events: list[Event]) -> list[Event]:
        """``events`` (consecutive) less those already sent, and, under a
        window, cut before the first wanted Event there is no room for."""
        if events and events[0]["sequence"] <= self.position:
            events = [e for e in events if e["sequence"] > self.position]
        if self.window is None or not events:
            return events
        room = self.window - len(self.in_flight)
        if room <= 0:
            return []
        for i, event in enumerate(events):
            if self.wants is None or self.wants(event):
                if room == 0:
                    return events[:i]
                room -= 1
        return events

    def delivered(self, events: list[Event], kept: bool) -> bool:
        """``events`` (from ``unsent``) were sent; ``kept`` False ends the
        subscription. Answers whether it goes on."""
        if not kept:
            self.closed = True
            return False
        if events:
            self.position = events[-1]["sequence"]
            if self.window is not None:
                self.in_flight.extend(e["sequence"] for e in events if self.wants is None or self.wants(e))
                if len(self.in_flight) >= self.window:
                    self.paused = True
        return True

    def ack(self, sequence: int) -> bool:
        """The subscriber has processed everything through ``sequence``; True
        when that ends a pause (at most half the window is left in flight, so
        a pause is not lifted and taken again at every acknowledgement)."""
        self.acknowledged = True
        while self.in_flight and self.in_flight[0] <= sequence:
            self.in_flight.popleft()
        if self.paused and self.window is not None and len(self.in_flight) <= self.window // 2:
            self.paused = False
            return True
        return False

    def resume(self) -> bool:
        """Lift a pause without an acknowledgement (the connection has taken
        everything sent, the retry time passed): the window starts afresh.
        True when it was paused."""
        was = self.paused
        self.in_flight.clear()
        self.paused = False
        return was


class Read(NamedTuple):
    """Read the Group's Events after ``after``, in sequence order, at most ``limit``."""

    group_id: str
    after: int
    limit: int


C = TypeVar("C", bound=Cursor)


class Send(NamedTuple, Generic[C]):
    """Send ``events`` to ``cursor``'s subscriber now, then report ``Cursor.delivered``."""

    cursor: C
    events: list[Event]


class Notice(enum.Enum):
    """What a head notice asks of the hub."""

    OLD_NEWS = "old news"  # nothing: the feed has it, or is not open yet (its head read counts it)
    CARRIED = "carried"  # the notice's Events continue the feed: ``take`` them
    READ = "read"  # the database must be read after the head


class Feed(Generic[C]):
    """One Group's live feed in one process."""

    def __init__(self, group_id: str, head: int = 0, cache_size: int = CACHE_EVENTS, batch: int = REPLAY_BATCH) -> None:
        self.group_id = group_id
        self.head = head
        # The hash of the head Event while the cache is empty (from the read
        # that opened the feed); after that the cache's last Event has it.
        self.head_hash: str | None = None
        self.cache: deque[Event] = deque(maxlen=cache_size)
        self.batch = batch
        self.cursors: set[C] = set()
        # The head was read once; until then notices are old news (the
        # first read comes after them).
        self.opened = False
        # A read toward the head is under way: a notice's Events could
        # land before that read's rows, so notices wait for it.
        self.reading = False

    # --- subscribers ---------------------------------------------------------

    def open(self, head: int, head_hash: str | None = None) -> list[C]:
        """The Group's head as first read (its sequence, and the hash of the
        head Event when known); the subscribers to wake."""
        if head > self.head:
            self.head = head
            self.head_hash = head_hash
        self.opened = True
        return list(self.cursors)

    def add(self, cursor: C) -> None:
        self.cursors.add(cursor)

    def remove(self, cursor: C) -> bool:
        """Forget ``cursor``; True when no subscriber is left."""
        cursor.closed = True
        self.cursors.discard(cursor)
        return not self.cursors

    def caught_up(self, cursor: Cursor) -> bool:
        """Nothing for ``cursor`` until the head moves (or its pause ends)."""
        return cursor.paused or cursor.position >= self.head

    def cached_after(self, position: int) -> list[Event] | None:
        """Events after ``position`` from the cache, or None when the cache does not reach back."""
        if not self.cache:
            return [] if position >= self.head else None
        first = self.cache[0]["sequence"]
        if position + 1 < first:
            return None
        # The cache holds consecutive sequences: index, do not scan.
        return list(itertools.islice(self.cache, max(position + 1 - first, 0), None))

    def next_for(self, cursor: Cursor) -> list[Event] | Read | None:
        """A subscriber's own next step: None when it is at the head (it
        waits to be woken), its next Events from the cache, or the replay
        read that brings it toward the cache."""
        if cursor.paused or cursor.position >= self.head:
            return None
        events = self.cached_after(cursor.position)
        if events is None:
            return Read(self.group_id, cursor.position, self.batch)
        return cursor.unsent(events)

    def fan_out(self) -> tuple[list[Send[C]], list[C]]:
        """What each subscriber gets after the head moved: the Events to send
        at once to those the cache serves, and the subscribers to wake (one
        that is sending already, or is behind the cache, catches up on its
        own). A paused subscriber gets neither."""
        sends: list[Send[C]] = []
        wakes: list[C] = []
        for cursor in list(self.cursors):
            if cursor.closed or cursor.paused:
                continue
            if cursor.sending:
                wakes.append(cursor)
                continue
            events = self.cached_after(cursor.position)
            if events is None:
                wakes.append(cursor)
            elif events:
                batch = cursor.unsent(events)
                if batch:
                    sends.append(Send(cursor, batch))
        return sends, wakes

    # --- head moves ----------------------------------------------------------

    def read_to(self, sequence: int) -> Read | None:
        """The read that brings the feed toward ``sequence``; None when it is there."""
        if sequence <= self.head:
            self.reading = False
            return None
        self.reading = True
        return Read(self.group_id, self.head, self.batch)

    def read_done(self, rows: list[Event], sequence: int) -> Read | None:
        """Take what ``read_to``'s read gave; the next read toward
        ``sequence``, or None: there, or the rows are not visible yet (the
        next notice or head check reads again)."""
        if not self.take(rows):
            self.reading = False
            return None
        return self.read_to(sequence)

    def read_failed(self) -> None:
        self.reading = False

    def head_notice(self, sequence: int, events: object) -> Notice:
        """A notice that the head is at least ``sequence``, carrying ``events``
        (what the commit appended, or None): whether they may be taken as
        they are, by sequence and hash chain, or the database must be read
        (a notice that came late, out of order, altered or without its
        Events costs a read, never order)."""
        if not self.opened or sequence <= self.head:
            return Notice.OLD_NEWS
        if self.reading or not isinstance(events, list) or not events:
            return Notice.READ
        last = events[-1]
        if not isinstance(last, dict) or last.get("sequence") != sequence:
            return Notice.READ
        return Notice.CARRIED if self._continues(events) else Notice.READ

    def link_hash(self) -> str | None:
        """The chain hash of the head Event, when the feed knows it."""
        return _link(self.cache[-1], "hash") if self.cache else self.head_hash

    def _continues(self, events: list[Any]) -> bool:
        expected = self.head + 1
        prev = self.link_hash()
        if prev is None and self.head > 0:
            # The head's hash is unknown, so the first carried link cannot be
            # checked: read instead (spec 16: never take an altered chain).
            return False
        for event in events:
            if not isinstance(event, dict) or event.get("sequence") != expected:
                return False
            if prev is not None and _link(event, "prev_hash") != prev:
                return False
            prev = _link(event, "hash")
            if prev is None:
                return False
            expected += 1
        return True

    def take(self, events: list[Event]) -> bool:
        """Add the Events that continue the head (the rest of ``events`` is
        old or past a gap); True when the head moved."""
        fresh = list(self._continuation(events))
        if not fresh:
            return False
        self.cache.extend(fresh)
        self.head = fresh[-1]["sequence"]
        if any(event.get("kind") in TOMBSTONES for event in fresh):
            # A redaction withdrew content the cache may hold: from here on the
            # subscribers behind the head read the database, which serves the
            # withheld form (``missions.withholding``, §7.4).
            self.head_hash = self.link_hash()
            self.cache.clear()
        return True

    def _continuation(self, events: list[Event]) -> Iterator[Event]:
        expected = self.head + 1
        for event in events:
            sequence = event["sequence"]
            if sequence < expected:
                continue
            if sequence != expected:
                return
            yield event
            expected += 1
