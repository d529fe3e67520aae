"""The per-process Event hub that feeds WebSocket subscribers (spec 16; DESIGN §4).

One hub runs per daphne process (per event loop). For every Group with local
subscribers it keeps the head it has seen and a short cache of the latest
Events. A head move is learnt from the channel layer (a commit's head notice)
or from a periodic check of the heads of all local Groups (one query for all
of them, so Events committed by a Celery worker or a management command
arrive even with the in-memory layer). A notice that carries the Events which
continue the hub's feed, by sequence and hash chain, is acted on at once
(``Hub.notice_now``; with the Redis layer as the layer's reader hands it
over, see ``immediate_notices``); anything else makes the hub read the new
Events **once** (on PostgreSQL over an asynchronous connection of its own,
see ``_LiveReader``). Either way it hands them to every subscriber at the
head at once, each frame encoded once (and, under daphne, framed once and
written at once: see ``missions.direct_send``): one commit never turns into
one database read per subscriber, nor into a task switch per subscriber.

A subscriber behind the cache (a replay from an old cursor) reads the
database itself, in batches, until it reaches the cache. Delivery per Group is
strictly in sequence order; at-least-once (a reconnect may repeat Events
around the disconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import itertools
import json
import logging
import os
import sqlite3
import struct
import sys
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.request import pathname2url

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection, connections

from mwportal.protocol import format_time

from . import delivery, local_notices
from .delivery import AGENT_CHANNEL_PREFIX, AGENT_NOTICES, group_channel, register_serving_loop
from .local_notices import database_file
from .models import Agent, Group, GroupEvent, Membership

log = logging.getLogger(__name__)

CACHE_EVENTS = 1000
REPLAY_BATCH = 500
WRITE_RECHECKS = (0.0002, 0.001, 0.004)  # seconds; see Hub._poll
WRITE_CHECK_SPACING = 0.002
# With local commit notices, a database write is checked this much later,
# once: commits announced by a notice are delivered by then, and the writes
# of that time share the check (at most one per this period).
NOTICED_WRITE_CHECK_DELAY = 0.1

Event = dict[str, Any]


class WireEvent(dict[str, Any]):
    """An Event as on the wire, with its ``event`` frame encoded once: a
    hundred subscribers of one Group send the same text, not a hundred
    encodings of it."""

    __slots__ = ("frame", "prepared")
    frame: str
    prepared: Any  # the frame framed once for daphne's connections (missions.direct_send), or None


def _wire(wire: dict[str, Any]) -> WireEvent:
    event = WireEvent(wire)
    event.frame = json.dumps({"op": "event", "event": event}, separators=(",", ":"))
    event.prepared = None
    return event


def _read_after(group_id: str, after: int, limit: int) -> list[Event]:
    rows = GroupEvent.objects.filter(group_id=group_id, sequence__gt=after).order_by("sequence")[:limit]
    return [_wire(row.as_wire()) for row in rows]


# Off PostgreSQL, the live path's reads run on a small pool of their own
# rather than on the one thread that every synchronous call of this process
# shares (commands, the agent check, replays): a burst of those never delays
# the read that all subscribers of a Group wait for.
_read_in_thread = database_sync_to_async(_read_after, thread_sensitive=False)

_LIVE_SQL = (
    "SELECT event_id, group_id, sequence, type, aggregate_kind, aggregate_id, aggregate_revision, actor,"
    f" action_id, occurred_at, body, prev_hash, hash FROM {GroupEvent._meta.db_table}"
    " WHERE group_id = %s AND sequence > %s ORDER BY sequence LIMIT %s"
)


_HEADS_SQL = f"SELECT id, last_sequence FROM {Group._meta.db_table} WHERE id = ANY(%s::uuid[])"
_AGENTS_SQL = f"SELECT id, session_epoch FROM {Agent._meta.db_table} WHERE id = ANY(%s::uuid[])"
_MEMBERSHIPS_SQL = (
    f"SELECT agent_id, group_id, roles, epoch FROM {Membership._meta.db_table}"
    " WHERE agent_id = ANY(%s::uuid[]) AND active"
)


_LIVE_SQL_LITE = _LIVE_SQL.replace("%s", "?")
_HEADS_SQL_LITE = f"SELECT id, last_sequence FROM {Group._meta.db_table} WHERE id IN ({{}})"


@functools.lru_cache(maxsize=65536)
def _lite_id(group_id: str) -> str:
    """A Group ID as Django's SQLite backend stores UUIDs (32 hex digits);
    the head check names every local Group at every check."""
    return uuid.UUID(group_id).hex


def _open_lite() -> sqlite3.Connection | None:
    """The hub's own read-only connection to the embedded database file."""
    path = database_file()
    if path is None:
        return None
    try:
        return sqlite3.connect(f"file:{pathname2url(path)}?mode=ro", uri=True, timeout=0, check_same_thread=False)
    except sqlite3.Error:
        return None


def _wire_lite(r: Any) -> WireEvent:
    """An Event from a row of ``_LIVE_SQL_LITE``: the columns as Django's
    SQLite backend stores them (UUIDs as 32 hex digits, times as naive UTC
    text, JSON as text), put as ``GroupEvent.as_wire`` puts them."""
    occurred_at = datetime.fromisoformat(r[9]).replace(tzinfo=UTC)
    return _wire_row(
        (uuid.UUID(r[0]), uuid.UUID(r[1]), *r[2:8], uuid.UUID(r[8]), occurred_at, json.loads(r[10]), r[11], r[12])
    )


def _wire_row(r: Any) -> WireEvent:
    """An Event from a row of ``_LIVE_SQL``, as ``GroupEvent.as_wire`` puts it."""
    aggregate = {"kind": r[4], "id": r[5], "revision": r[6]}
    return _wire(
        {
            "event_id": str(r[0]),
            "group": str(r[1]),
            "sequence": r[2],
            "type": r[3],
            "aggregate": aggregate,
            "actor": r[7],
            "action_id": str(r[8]),
            "occurred_at": format_time(r[9]),
            "body": r[10],
            "prev_hash": r[11],
            "hash": r[12],
        }
    )


class _LiveReader:
    """The live path's read of a Group's new Events (the one read per commit
    that all local subscribers of the Group share).

    On PostgreSQL it runs on the event loop itself, over one asynchronous
    psycopg connection of this hub: no hop to a thread and back, no ORM
    query compilation; the read is a prepared statement on the Events'
    (group, sequence) index. Any error drops that connection and the read
    falls back to the thread pool (the next read opens a new connection).

    On the embedded SQLite it runs on the event loop too, over a read-only
    connection of its own that never waits for a lock (WAL readers do not
    wait for the writer; should SQLite ever answer "busy", that read goes
    through the thread pool). A read of a few indexed rows takes tens of
    microseconds, less than the hop to a thread would.
    """

    def __init__(self) -> None:
        self.conn: Any = None
        self.lock = asyncio.Lock()
        self.native = connection.vendor == "postgresql"
        self.lite = _open_lite()

    async def read(self, group_id: str, after: int, limit: int) -> list[Event]:
        rows = await self._native("live read", _LIVE_SQL, (group_id, after, limit))
        if rows is not None:
            return [_wire_row(r) for r in rows]
        rows = self._lite(_LIVE_SQL_LITE, (_lite_id(group_id), after, limit))
        if rows is not None:
            return [_wire_lite(r) for r in rows]
        events: list[Event] = await _read_in_thread(group_id, after, limit)
        return events

    async def heads(self, group_ids: list[str]) -> dict[str, int]:
        """The heads of ``group_ids`` (the periodic head check), on the same
        connection: the check never holds the interpreter lock in a thread
        while a live notice waits."""
        rows = await self._native("head check", _HEADS_SQL, (group_ids,))
        if rows is not None:
            return {str(g): s for g, s in rows}
        stored = {_lite_id(g): g for g in group_ids}
        rows = self._lite(_HEADS_SQL_LITE.format(",".join("?" * len(stored))), tuple(stored))
        if rows is not None:
            return {stored[g]: s for g, s in rows}
        heads: dict[str, int] = await _heads_in_thread(group_ids)
        return heads

    async def agents(self, agent_ids: list[str]) -> dict[str, tuple[int, dict[str, tuple[list[str], int]]]]:
        """``agents_current(agent_ids)`` (the periodic agent check), on
        PostgreSQL over the same connection, for the reason of ``heads``."""
        agents = await self._native("agent check", _AGENTS_SQL, (agent_ids,))
        memberships = await self._native("agent check", _MEMBERSHIPS_SQL, (agent_ids,)) if agents is not None else None
        if agents is not None and memberships is not None:
            return _agents_from(agents, memberships)
        current: dict[str, tuple[int, dict[str, tuple[list[str], int]]]]
        current = await database_sync_to_async(agents_current)(agent_ids)
        return current

    async def _native(self, what: str, sql: str, params: tuple[Any, ...]) -> list[Any] | None:
        """Rows over the asynchronous PostgreSQL connection; None off
        PostgreSQL or on error (which drops the connection: the caller goes
        through the thread pool, the next call connects again)."""
        if not self.native:
            return None
        try:
            return await self._fetch(sql, params)
        except Exception:
            log.warning("the %s failed; going through the thread pool", what, exc_info=True)
            await self.close()
            return None

    def _lite(self, sql: str, params: tuple[Any, ...]) -> list[Any] | None:
        """Rows over the read-only SQLite connection; None without one, or
        when SQLite answers busy (the caller goes through the thread pool)."""
        if self.lite is None:
            return None
        try:
            return self.lite.execute(sql, params).fetchall()
        except sqlite3.OperationalError:
            return None

    async def _fetch(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        import psycopg

        async with self.lock:
            if self.conn is None or self.conn.closed:
                db = connections["default"].settings_dict
                self.conn = await psycopg.AsyncConnection.connect(
                    dbname=db["NAME"], user=db["USER"] or None, password=db["PASSWORD"] or None,
                    host=db["HOST"] or None, port=db["PORT"] or None, autocommit=True,
                    prepare_threshold=0,
                )  # fmt: skip
            cur = await self.conn.execute(sql, params)
            rows: list[Any] = await cur.fetchall()
        return rows

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()


def _heads(group_ids: list[str]) -> dict[str, int]:
    return {str(g): s for g, s in Group.objects.filter(id__in=group_ids).values_list("id", "last_sequence")}


# Like the live reads, on a pool of its own (see _read_in_thread).
_heads_in_thread = database_sync_to_async(_heads, thread_sensitive=False)


def _continuing(feed: _Feed, after: int, carried: list[Event] | None) -> list[WireEvent] | None:
    """``carried`` as wire Events when they take ``feed`` on from ``after``
    (its last Event) without a gap, each naming the hash before it; None
    when the database must be read instead (no Events carried, a notice that
    came late or out of order, or anything that does not chain)."""
    if not carried:
        return None
    expected = after + 1
    prev = feed.cache[-1]["hash"] if feed.cache else None
    for event in carried:
        if not isinstance(event, dict) or event.get("sequence") != expected:
            return None
        if prev is not None and event.get("prev_hash") != prev:
            return None
        prev = event.get("hash")
        expected += 1
    return [_wire(event) for event in carried]


@dataclass(eq=False)
class Subscription:
    """One subscriber's position in one Group; ``deliver`` sends a batch of Events.

    ``deliver`` returns False to end the subscription (the subscriber lost its
    Membership, say). ``deliver_now``, when given, sends a batch without
    waiting for anything, or answers None when it cannot (then ``deliver``
    does it).
    """

    group_id: str
    position: int
    deliver: Callable[[list[Event]], Awaitable[bool]]
    deliver_now: Callable[[list[Event]], bool | None] | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    closed: bool = False
    # Held while a batch is delivered, by the subscriber's task or by the
    # hub's inline fan-out: one deliverer at a time keeps the order.
    sending: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(eq=False)
class _Feed:
    group_id: str
    head: int = 0
    cache: deque[Event] = field(default_factory=lambda: deque(maxlen=CACHE_EVENTS))
    subscribers: set[Subscription] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Set once the head was read; later subscribers wait for it.
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def cached_after(self, position: int) -> list[Event] | None:
        """Events after ``position`` from the cache, or None when the cache does not reach back."""
        if not self.cache:
            return [] if position >= self.head else None
        first = self.cache[0]["sequence"]
        if position + 1 < first:
            return None
        # The cache holds consecutive sequences: index, do not scan.
        return list(itertools.islice(self.cache, max(position + 1 - first, 0), None))


AgentCallback = Callable[[int, dict[str, tuple[list[str], int]]], Awaitable[None]]
# Takes an Agent's notice from a local commit (``agent.membership``, ``agent.session``).
AgentNoticeHandler = Callable[[dict[str, Any]], Awaitable[None]]


def agents_current(agent_ids: list[str]) -> dict[str, tuple[int, dict[str, tuple[list[str], int]]]]:
    """Session Epoch and active Memberships of many Agents in two queries."""
    agents = Agent.objects.filter(id__in=agent_ids).values_list("id", "session_epoch")
    rows = Membership.objects.filter(agent_id__in=agent_ids, active=True).values_list(
        "agent_id", "group_id", "roles", "epoch"
    )
    return _agents_from(agents, rows)


def _agents_from(agents: Any, memberships: Any) -> dict[str, tuple[int, dict[str, tuple[list[str], int]]]]:
    out: dict[str, tuple[int, dict[str, tuple[list[str], int]]]] = {str(a): (epoch, {}) for a, epoch in agents}
    for agent_id, group_id, roles, epoch in memberships:
        out[str(agent_id)][1][str(group_id)] = (roles, epoch)
    return out


class Hub:
    def __init__(self) -> None:
        self.feeds: dict[str, _Feed] = {}
        self.agents: dict[str, set[AgentCallback]] = {}
        self.agent_listeners: dict[str, set[AgentNoticeHandler]] = {}
        # Agents' notices from local commits, handed over one at a time, in
        # the order they came.
        self.agent_notices: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.layer = get_channel_layer()
        self.channel: str | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: set[asyncio.Future[None]] = set()
        self.reader = _LiveReader()
        # Set when the embedded database was written (FileChanges): the
        # head check runs at once instead of at its next period.
        self.db_written = asyncio.Event()
        self.watcher: FileChanges | None = None
        self.notices: local_notices.Receiver | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.registry_name: str | None = None  # in the Redis hub registry (missions.delivery)

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        register_serving_loop(self.loop)
        self._receive_local_notices()
        if self.layer is not None:
            # The default prefix: channels_redis serves a process's own
            # channels through one receive loop per prefix.
            self.channel = await self.layer.new_channel()
            immediate_notices(self.layer, self.channel, self.notice_now)
            self._tasks.append(asyncio.create_task(self._listen()))
        publisher = delivery.redis_publisher()
        if publisher is not None:
            # Listening on Redis: say so, or committers that reach this hub's
            # socket no more would not publish heads there.
            self.registry_name = self.notices.name if self.notices is not None else f"{uuid.uuid4().hex}.remote"
            await self._announce(publisher)
            self._tasks.append(asyncio.create_task(self._keep_announcing(publisher)))
        self._watch_database()
        self._tasks.append(asyncio.create_task(self._poll()))
        self._tasks.append(asyncio.create_task(self._watch_agents()))
        self._tasks.append(asyncio.create_task(self._hand_over_agent_notices()))

    async def _announce(self, publisher: Any) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(None, publisher.announce, self.registry_name)
        except Exception:
            log.warning("could not enter the hub registry", exc_info=True)

    async def _keep_announcing(self, publisher: Any) -> None:
        while True:
            await asyncio.sleep(publisher.HUB_REFRESH)
            await self._announce(publisher)

    def _receive_local_notices(self) -> None:
        path = local_notices.directory()
        if path is None:
            return
        receiver = local_notices.Receiver(path, self._on_notice)
        if receiver.start(asyncio.get_running_loop()):
            self.notices = receiver

    def _watch_database(self) -> None:
        path = database_file()
        if path is None or not settings.MWP_DATABASE_WATCH:
            return
        base = os.path.basename(path)
        watcher = FileChanges(os.path.dirname(path), {base, base + "-wal"}, self.db_written.set)
        if watcher.start(asyncio.get_running_loop()):
            self.watcher = watcher

    # --- connected Agents ----------------------------------------------------

    def watch_agent(self, agent_id: str, callback: AgentCallback) -> None:
        """Call ``callback(session_epoch, memberships)`` at every agent check."""
        self.agents.setdefault(agent_id, set()).add(callback)

    def unwatch_agent(self, agent_id: str, callback: AgentCallback) -> None:
        _discard(self.agents, agent_id, callback)

    def listen_agent(self, agent_id: str, handler: AgentNoticeHandler) -> None:
        """Hand ``handler`` the Agent's notices of commits on this machine
        (``missions.delivery.local_notice``) as they arrive. The channel
        layer still brings those of other machines; a notice may come both
        ways, so handlers take a notice they already had as old news."""
        self.agent_listeners.setdefault(agent_id, set()).add(handler)

    def unlisten_agent(self, agent_id: str, handler: AgentNoticeHandler) -> None:
        _discard(self.agent_listeners, agent_id, handler)

    def _agent_notice(self, message: dict[str, Any]) -> None:
        to = message.get("to")
        if not isinstance(to, str) or not to.startswith(AGENT_CHANNEL_PREFIX):
            log.warning("a local notice for no Agent was dropped: %r", message.get("type"))
            return
        agent_id = to[len(AGENT_CHANNEL_PREFIX) :]
        if agent_id in self.agent_listeners:
            self.agent_notices.put_nowait((agent_id, message))

    async def _hand_over_agent_notices(self) -> None:
        while True:
            agent_id, message = await self.agent_notices.get()
            for handler in list(self.agent_listeners.get(agent_id, ())):
                try:
                    await handler(message)
                except Exception:
                    log.warning("an Agent's notice handler failed", exc_info=True)

    async def _watch_agents(self) -> None:
        """Catch what the channel layer could not tell us (another process's
        change with the in-memory layer, a lost notice): one check for every
        connected Agent of this process, two queries, every few seconds."""
        interval = max(settings.MWP_HEAD_POLL_SECONDS * 5, 1.0)
        while True:
            await asyncio.sleep(interval)
            if not self.agents:
                continue
            try:
                current = await self.reader.agents(list(self.agents))
            except Exception:
                log.warning("the agent check failed", exc_info=True)
                continue
            for agent_id, (epoch, memberships) in current.items():
                for callback in list(self.agents.get(agent_id, ())):
                    try:
                        await callback(epoch, memberships)
                    except Exception:
                        log.warning("an agent check callback failed", exc_info=True)

    # --- subscriptions ---------------------------------------------------

    async def subscribe(
        self,
        group_id: str,
        after: int,
        deliver: Callable[[list[Event]], Awaitable[bool]],
        deliver_now: Callable[[list[Event]], bool | None] | None = None,
    ) -> Subscription:
        feed = self.feeds.get(group_id)
        if feed is None:
            feed = self.feeds[group_id] = _Feed(group_id)
            try:
                if self.layer is not None and self.channel is not None:
                    await self.layer.group_add(group_channel(group_id), self.channel)
                heads = await database_sync_to_async(_heads)([group_id])
            except BaseException:
                # A feed whose head was never read must not stay: every later
                # subscribe would wait for it forever (issue 16 item 10).
                # Those already waiting start afresh.
                if self.feeds.get(group_id) is feed:
                    del self.feeds[group_id]
                feed.ready.set()
                raise
            feed.head = max(feed.head, heads.get(group_id, 0))
            feed.ready.set()
            # Subscribers that joined while the head was read wake up now.
            for other in feed.subscribers:
                other.wake.set()
        else:
            await feed.ready.wait()
            if self.feeds.get(group_id) is not feed:
                return await self.subscribe(group_id, after, deliver, deliver_now)
        sub = Subscription(group_id, after, deliver, deliver_now)
        feed.subscribers.add(sub)
        sub.task = asyncio.create_task(self._run(feed, sub))
        return sub

    async def unsubscribe(self, sub: Subscription) -> None:
        sub.closed = True
        feed = self.feeds.get(sub.group_id)
        if feed is not None:
            feed.subscribers.discard(sub)
            if not feed.subscribers:
                del self.feeds[sub.group_id]
                if self.layer is not None and self.channel is not None:
                    await self.layer.group_discard(group_channel(sub.group_id), self.channel)
        if sub.task is not None and sub.task is not asyncio.current_task():
            sub.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sub.task

    async def _run(self, feed: _Feed, sub: Subscription) -> None:
        """Deliver everything after the subscriber's position, then follow the head."""
        try:
            while not sub.closed:
                if sub.position >= feed.head:
                    sub.wake.clear()
                    if sub.position >= feed.head:
                        await sub.wake.wait()
                    continue
                batch = feed.cached_after(sub.position)
                if batch is None:  # behind the cache: replay from the database
                    batch = await database_sync_to_async(_read_after)(feed.group_id, sub.position, REPLAY_BATCH)
                async with sub.sending:
                    batch = [e for e in batch if e["sequence"] > sub.position]
                    if batch and not await self._deliver(sub, batch):
                        return
                if not batch:
                    await asyncio.sleep(0.05)  # the head moved but the rows are not visible yet
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("delivery to a subscriber of %s failed", feed.group_id)

    async def _deliver(self, sub: Subscription, batch: list[Event]) -> bool:
        """Send ``batch`` (the caller holds ``sub.sending``); False when the
        subscription ended: the subscriber said so (it lost its Membership,
        say) or sending failed (its connection broke; its Agent subscribes
        again when it is back). One subscriber's failure never holds up the
        other subscribers of the Group, which the inline fan-out serves in
        the same task."""
        try:
            kept = await sub.deliver(batch)
        except Exception:
            log.exception("delivery to a subscriber of %s failed", sub.group_id)
            kept = False
        return self._delivered(sub, batch, kept)

    def _delivered(self, sub: Subscription, batch: list[Event], kept: bool) -> bool:
        if not kept:
            sub.closed = True
            self._spawn(self.unsubscribe(sub))
            return False
        sub.position = batch[-1]["sequence"]
        return True

    def _fan_out_now(self, feed: _Feed) -> list[Subscription]:
        """Hand the feed's new Events to every subscriber at the head whose
        ``deliver_now`` can send them at once, one after the other without a
        task switch. Subscribers that are behind, or sending already, are
        woken and catch up on their own; the rest (``deliver_now`` declined)
        are returned for the asynchronous ``deliver``."""
        later = []
        for sub in list(feed.subscribers):
            if sub.closed:
                continue
            if sub.sending.locked():
                sub.wake.set()
                continue
            batch = feed.cached_after(sub.position)
            if batch is None:
                sub.wake.set()
                continue
            if not batch:
                continue
            kept = None
            if sub.deliver_now is not None:
                try:
                    kept = sub.deliver_now(batch)
                except Exception:
                    log.exception("delivery to a subscriber of %s failed", sub.group_id)
                    kept = False
            if kept is None:
                later.append(sub)
            else:
                self._delivered(sub, batch, kept)
        return later

    # --- head moves ------------------------------------------------------

    async def head_moved(self, group_id: str, sequence: int) -> None:
        """The head of ``group_id`` is at least ``sequence``: read what is new."""
        feed = self.feeds.get(group_id)
        if feed is None or not feed.ready.is_set() or sequence <= feed.head:
            return
        async with feed.lock:
            # Read the new Events once for every local subscriber.
            while feed.head < sequence:
                after = feed.cache[-1]["sequence"] if feed.cache else feed.head
                rows = await self.reader.read(group_id, after, REPLAY_BATCH)
                if not rows:
                    break
                feed.cache.extend(rows)
                feed.head = rows[-1]["sequence"]
        # Subscribers at the head get the new Events right here, one after the
        # other in this task (a send hands the frame to the server and does
        # not wait for the peer): no task switch per subscriber. One that is
        # sending already, or is behind, is woken and catches up on its own.
        for sub in self._fan_out_now(feed):
            if sub.closed:
                continue
            if sub.sending.locked():
                sub.wake.set()
                continue
            async with sub.sending:
                batch = feed.cached_after(sub.position)
                if batch is None:
                    sub.wake.set()
                elif batch:
                    await self._deliver(sub, batch)

    async def _listen(self) -> None:
        assert self.layer is not None and self.channel is not None
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("the channel layer failed; relying on the head check", exc_info=True)
                await asyncio.sleep(1)
                continue
            try:
                self._on_notice(message)
            except Exception:
                log.exception("a malformed channel-layer message: %r", message)

    def _on_notice(self, message: dict[str, Any]) -> None:
        if message.get("type") in AGENT_NOTICES:
            self._agent_notice(message)
        elif message.get("type") == "group.head" and not self.notice_now(message):
            # A read: each Group's runs on its own (the feed's lock keeps one
            # Group's reads in order), so the next notice is received while
            # this one is read: notices of many Groups do not queue behind
            # each other's reads.
            self._spawn(self.head_moved(str(message["group"]), int(message["sequence"])))

    def notice_now(self, message: dict[str, Any]) -> bool:
        """Act on a head notice at once when that needs no database read: the
        notice carries the Events that continue the feed (or it is old news).
        False when it was not such a notice; ``head_moved`` then reads."""
        if message.get("type") != "group.head":
            return False
        group_id, sequence = str(message["group"]), int(message["sequence"])
        feed = self.feeds.get(group_id)
        if feed is None or not feed.ready.is_set() or sequence <= feed.head:
            # Old news; or the feed's head is being read, which happens after
            # this commit (the notice comes after it), so it counts it.
            return True
        carried = message.get("events")
        if not isinstance(carried, list) or feed.lock.locked():
            return False
        after = feed.cache[-1]["sequence"] if feed.cache else feed.head
        rows = _continuing(feed, after, carried)
        if rows is None or rows[-1]["sequence"] != sequence:
            return False
        feed.cache.extend(rows)
        feed.head = sequence
        for sub in self._fan_out_now(feed):
            sub.wake.set()
        return True

    def release(self) -> None:
        """Give up the notice socket, the hub registry entry and the file watch
        (the loop has closed)."""
        if self.loop is None:
            return
        publisher = delivery.redis_publisher()
        if publisher is not None and self.registry_name is not None:
            try:
                publisher.withdraw(self.registry_name)
            except Exception:
                log.warning("could not leave the hub registry", exc_info=True)
            self.registry_name = None
        if self.notices is not None:
            self.notices.stop(self.loop)
            self.notices = None
        if self.watcher is not None:
            self.watcher.stop(self.loop)
            self.watcher = None

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _poll(self) -> None:
        """The periodic head check; with the embedded database also as soon
        as any process wrote it. A write is seen a moment before its commit
        becomes visible, so a check that finds nothing new is repeated a
        little later (``WRITE_RECHECKS``). A write seen during these checks
        starts a new round after them: a round never takes a later write for
        its own. Rounds are spaced by ``WRITE_CHECK_SPACING``, which bounds
        the checks a stream of writes causes."""
        interval = settings.MWP_HEAD_POLL_SECONDS
        while True:
            written = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.db_written.wait(), interval)
                written = True
            self.db_written.clear()
            if written and self.notices is not None:
                # A commit that sent a local notice is delivered before
                # this check; it finds the commits of a process that did
                # not (or whose notice was dropped).
                await asyncio.sleep(NOTICED_WRITE_CHECK_DELAY)
                await self._check_heads()
                continue
            moved = await self._check_heads()
            if not written:
                continue
            for delay in WRITE_RECHECKS:
                if moved:
                    break
                await asyncio.sleep(delay)
                moved = await self._check_heads()
            await asyncio.sleep(WRITE_CHECK_SPACING)

    async def _check_heads(self) -> bool:
        """Read every local Group's head; True when one moved."""
        if not self.feeds:
            return False
        try:
            heads = await self.reader.heads(list(self.feeds))
        except Exception:
            log.warning("the head check failed", exc_info=True)
            return False
        moved = False
        for group_id, sequence in heads.items():
            feed = self.feeds.get(group_id)
            if feed is not None and sequence > feed.head:
                moved = True
                await self.head_moved(group_id, sequence)
        return moved


def _discard(registry: dict[str, set[Any]], key: str, member: Any) -> None:
    """Take ``member`` out of ``registry[key]``, and the key with its last member."""
    members = registry.get(key)
    if members is not None:
        members.discard(member)
        if not members:
            del registry[key]


class _ImmediateQueue(asyncio.Queue[Any]):
    """The hub's channel queue in the Redis pub/sub layer: a message the hub
    can act on at once (``Hub.notice_now``) is handled as the layer's reader
    hands it over, without waiting for the hub's receive loop to be
    scheduled; any other is queued for it as usual."""

    def __init__(self, deserialize: Callable[[bytes], dict[str, Any]], handle: Callable[[dict[str, Any]], bool]):
        super().__init__()
        self.deserialize = deserialize
        self.handle = handle

    def put_nowait(self, item: Any) -> None:
        try:
            handled = self.handle(self.deserialize(item))
        except Exception:
            log.exception("an immediate head notice failed; the hub's receive loop takes it")
            handled = False
        if not handled:
            super().put_nowait(item)


def immediate_notices(layer: Any, channel: str, handle: Callable[[dict[str, Any]], bool]) -> bool:
    """Let ``handle`` take ``channel``'s messages as they arrive, when
    ``layer`` is channels_redis's pub/sub layer (which queues each received
    message on the channel's ``asyncio.Queue`` with ``put_nowait``); True
    when installed. Other layers keep their own queues."""
    from channels_redis.pubsub import RedisPubSubChannelLayer

    if not isinstance(layer, RedisPubSubChannelLayer):
        return False
    queues = layer.channels  # this event loop's layer: channel name -> queue
    if type(queues.get(channel)) is not asyncio.Queue:
        return False
    queues[channel] = _ImmediateQueue(layer.deserialize, handle)
    return True


class FileChanges:
    """Calls ``on_change`` when a file named in ``names`` in ``directory`` is
    written (Linux inotify, through the C library; no polling).

    The hub watches the embedded SQLite database with it: every commit, in
    any process, writes its write-ahead log, so a commit of a Celery task or
    a management command is noticed as it happens, not at the next periodic
    head check. ``start`` answers False where inotify is not available; the
    periodic check then stays the only way (DESIGN §4)."""

    IN_MODIFY = 0x2
    _HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name

    def __init__(self, directory: str, names: set[str], on_change: Callable[[], None]) -> None:
        self.directory = directory
        self.names = {os.fsencode(n) for n in names}
        self.on_change = on_change
        self.fd = -1

    def start(self, loop: asyncio.AbstractEventLoop) -> bool:
        if not sys.platform.startswith("linux"):
            return False
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return False
            if libc.inotify_add_watch(fd, os.fsencode(self.directory), self.IN_MODIFY) < 0:
                os.close(fd)
                return False
        except (OSError, AttributeError):
            return False
        self.fd = fd
        loop.add_reader(fd, self._readable)
        return True

    def _readable(self) -> None:
        changed = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            offset = 0
            while offset + self._HEADER.size <= len(data):
                _, _, _, length = self._HEADER.unpack_from(data, offset)
                start = offset + self._HEADER.size
                name = data[start : start + length].rstrip(b"\0")
                changed = changed or name in self.names
                offset = start + length
        if changed:
            self.on_change()

    def stop(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.fd >= 0:
            if not loop.is_closed():
                loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1


_hubs: dict[int, Hub] = {}


async def get_hub() -> Hub:
    """The hub of the running event loop, started on first use. The hubs of
    loops that have closed (a test's ``asyncio.run``) give up their sockets
    and file watch here; a hub holds its loop, so a loop's id is not reused
    while its hub is listed."""
    loop = asyncio.get_running_loop()
    for key, old in list(_hubs.items()):
        if old.loop is not None and old.loop.is_closed():
            old.release()
            del _hubs[key]
    hub = _hubs.get(id(loop))
    if hub is None:
        hub = _hubs[id(loop)] = Hub()
        await hub.start()
    return hub
