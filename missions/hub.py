"""The per-process Event hub that feeds WebSocket subscribers (spec 16; DESIGN §4).

One hub runs per daphne process (per event loop). For every Group with local
subscribers it keeps the head it has seen and a short cache of the latest
Events. A head move is learnt from the channel layer ("head moved" after a
commit) or from a periodic check of the heads of all local Groups (one query
for all of them, so Events committed by a Celery worker or a management
command arrive even with the in-memory layer). Either way the hub reads the
new Events **once** (on PostgreSQL over an asynchronous connection of its
own, see ``_LiveReader``) and hands them to every subscriber at the head in
the same task, each frame encoded once (and, under daphne, framed once: see
``missions.direct_send``): one commit never turns into one database read per
subscriber, nor into a task switch per subscriber.

A subscriber behind the cache (a replay from an old cursor) reads the
database itself, in batches, until it reaches the cache. Delivery per Group is
strictly in sequence order; at-least-once (a reconnect may repeat Events
around the disconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection, connections

from mwportal.protocol import format_time

from .delivery import group_channel, register_serving_loop
from .models import Group, GroupEvent

log = logging.getLogger(__name__)

CACHE_EVENTS = 1000
REPLAY_BATCH = 500

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
    Elsewhere (SQLite) it is the thread pool's read.
    """

    def __init__(self) -> None:
        self.conn: Any = None
        self.lock = asyncio.Lock()
        self.native = connection.vendor == "postgresql"

    async def read(self, group_id: str, after: int, limit: int) -> list[Event]:
        if self.native:
            try:
                return await self._read_native(group_id, after, limit)
            except Exception:
                log.warning("the live read failed; reading through the thread pool", exc_info=True)
                await self.close()
        events: list[Event] = await _read_in_thread(group_id, after, limit)
        return events

    async def _read_native(self, group_id: str, after: int, limit: int) -> list[Event]:
        import psycopg

        async with self.lock:
            if self.conn is None or self.conn.closed:
                db = connections["default"].settings_dict
                self.conn = await psycopg.AsyncConnection.connect(
                    dbname=db["NAME"], user=db["USER"] or None, password=db["PASSWORD"] or None,
                    host=db["HOST"] or None, port=db["PORT"] or None, autocommit=True,
                    prepare_threshold=0,
                )  # fmt: skip
            cur = await self.conn.execute(_LIVE_SQL, (group_id, after, limit))
            rows = await cur.fetchall()
        return [_wire_row(r) for r in rows]

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()


def _heads(group_ids: list[str]) -> dict[str, int]:
    return {str(g): s for g, s in Group.objects.filter(id__in=group_ids).values_list("id", "last_sequence")}


@dataclass(eq=False)
class Subscription:
    """One subscriber's position in one Group; ``deliver`` sends a batch of Events.

    ``deliver`` returns False to end the subscription (the subscriber lost its
    Membership, say).
    """

    group_id: str
    position: int
    deliver: Callable[[list[Event]], Awaitable[bool]]
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


def agents_current(agent_ids: list[str]) -> dict[str, tuple[int, dict[str, tuple[list[str], int]]]]:
    """Session Epoch and active Memberships of many Agents in two queries."""
    from .models import Agent, Membership

    out: dict[str, tuple[int, dict[str, tuple[list[str], int]]]] = {
        str(a): (epoch, {}) for a, epoch in Agent.objects.filter(id__in=agent_ids).values_list("id", "session_epoch")
    }
    rows = Membership.objects.filter(agent_id__in=agent_ids, active=True).values_list(
        "agent_id", "group_id", "roles", "epoch"
    )
    for agent_id, group_id, roles, epoch in rows:
        out[str(agent_id)][1][str(group_id)] = (roles, epoch)
    return out


class Hub:
    def __init__(self) -> None:
        self.feeds: dict[str, _Feed] = {}
        self.agents: dict[str, set[AgentCallback]] = {}
        self.layer = get_channel_layer()
        self.channel: str | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: set[asyncio.Future[None]] = set()
        self.reader = _LiveReader()

    async def start(self) -> None:
        register_serving_loop(asyncio.get_running_loop())
        if self.layer is not None:
            # The default prefix: channels_redis serves a process's own
            # channels through one receive loop per prefix.
            self.channel = await self.layer.new_channel()
            self._tasks.append(asyncio.create_task(self._listen()))
        self._tasks.append(asyncio.create_task(self._poll()))
        self._tasks.append(asyncio.create_task(self._watch_agents()))

    # --- connected Agents ----------------------------------------------------

    def watch_agent(self, agent_id: str, callback: AgentCallback) -> None:
        """Call ``callback(session_epoch, memberships)`` at every agent check."""
        self.agents.setdefault(agent_id, set()).add(callback)

    def unwatch_agent(self, agent_id: str, callback: AgentCallback) -> None:
        callbacks = self.agents.get(agent_id)
        if callbacks is not None:
            callbacks.discard(callback)
            if not callbacks:
                del self.agents[agent_id]

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
                current = await database_sync_to_async(agents_current)(list(self.agents))
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
        self, group_id: str, after: int, deliver: Callable[[list[Event]], Awaitable[bool]]
    ) -> Subscription:
        feed = self.feeds.get(group_id)
        if feed is None:
            feed = self.feeds[group_id] = _Feed(group_id)
            if self.layer is not None and self.channel is not None:
                await self.layer.group_add(group_channel(group_id), self.channel)
            heads = await database_sync_to_async(_heads)([group_id])
            feed.head = max(feed.head, heads.get(group_id, 0))
            feed.ready.set()
            # Subscribers that joined while the head was read wake up now.
            for other in feed.subscribers:
                other.wake.set()
        else:
            await feed.ready.wait()
        sub = Subscription(group_id, after, deliver)
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
        if not kept:
            sub.closed = True
            self._spawn(self.unsubscribe(sub))
            return False
        sub.position = batch[-1]["sequence"]
        return True

    # --- head moves ------------------------------------------------------

    async def head_moved(self, group_id: str, sequence: int) -> None:
        feed = self.feeds.get(group_id)
        if feed is None or sequence <= feed.head:
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
        for sub in list(feed.subscribers):
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
            if message.get("type") == "group.head":
                # Each Group's read runs on its own (the feed's lock keeps one
                # Group's reads in order), so the next notice is received
                # while this one is read: notices of many Groups do not queue
                # behind each other's reads.
                self._spawn(self.head_moved(str(message["group"]), int(message["sequence"])))

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _poll(self) -> None:
        interval = settings.MWP_HEAD_POLL_SECONDS
        while True:
            await asyncio.sleep(interval)
            if not self.feeds:
                continue
            try:
                heads = await database_sync_to_async(_heads)(list(self.feeds))
            except Exception:
                log.warning("the head check failed", exc_info=True)
                continue
            for group_id, sequence in heads.items():
                await self.head_moved(group_id, sequence)


_hubs: dict[int, Hub] = {}


async def get_hub() -> Hub:
    """The hub of the running event loop, started on first use."""
    loop = asyncio.get_running_loop()
    hub = _hubs.get(id(loop))
    if hub is None:
        hub = _hubs[id(loop)] = Hub()
        await hub.start()
    return hub
