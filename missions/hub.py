"""The per-process Event hub that feeds WebSocket subscribers (spec 16; DESIGN §5).

One hub runs per daphne process (per event loop). It is the asyncio layer
over the feed core (``missions.feed``): one ``Feed`` per Group with local
subscribers, holding the head it has seen, a short cache of the latest
Events and each subscriber's position, deciding what is read and what is
sent. The hub carries those decisions out with the readers
(``missions.readers``), the wake sources (``missions.wake_sources``, the
channel layer, local notices, the periodic head check) and the subscribers'
own send callbacks.

A head move is learnt from the channel layer (a commit's head notice), from
this machine's commit notices (``missions.local_notices``) or from a
periodic check of the heads of all local Groups (one query for all of them,
so Events committed by a Celery worker or a management command arrive even
with the in-memory layer). A notice that carries the Events which continue
the feed, by sequence and hash chain, is acted on at once
(``Hub.notice_now``; with the Redis layer as the layer's reader hands it
over); anything else makes the hub read the new Events **once** (see
``readers.LiveReader``). Either way it hands them to every subscriber at the
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
import hashlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from mwportal.protocol import jcs

from . import delivery, local_notices
from .delivery import AGENT_CHANNEL_PREFIX, AGENT_NOTICES, carried_event, group_channel, register_serving_loop
from .feed import Cursor, Event, Feed, Notice, Read
from .local_notices import database_file
from .readers import LiveReader, read_after, read_head, wire_carried
from .wake_sources import FileChanges, immediate_notices

__all__ = ["Event", "Hub", "Subscription", "get_hub"]

log = logging.getLogger(__name__)

WRITE_RECHECKS = (0.0002, 0.001, 0.004)  # seconds; see Hub._poll
WRITE_CHECK_SPACING = 0.002
# With local commit notices, a database write is checked this much later,
# once: commits announced by a notice are delivered by then, and the writes
# of that time share the check (at most one per this period).
NOTICED_WRITE_CHECK_DELAY = 0.1
# A subscriber woken for Events whose rows are not visible to it yet tries again this much later.
NOT_VISIBLE_YET = 0.05


@dataclass(eq=False)
class Subscription(Cursor):
    """One subscriber's place in one Group (``Cursor``) and how to send it a batch.

    ``deliver`` returns False to end the subscription (the subscriber lost its
    Membership, say). ``deliver_now``, when given, sends a batch without
    waiting for anything, or answers None when it cannot (then ``deliver``
    does it). ``on_pause`` is called when the subscription reaches its
    window (``Cursor.window``) and is paused: the subscriber says so to its
    client (BACKPRESSURE, spec 17.3) and later ``Hub.resume``s it, unless an
    acknowledgement (``Hub.acknowledge``) does first.
    """

    deliver: Callable[[list[Event]], Awaitable[bool]] = field(kw_only=True)
    deliver_now: Callable[[list[Event]], bool | None] | None = field(default=None, kw_only=True)
    on_pause: Callable[[Subscription], None] | None = field(default=None, kw_only=True)
    wake: asyncio.Event = field(default_factory=asyncio.Event, kw_only=True)
    task: asyncio.Task[None] | None = field(default=None, kw_only=True)
    # Held while a batch is delivered, by the subscriber's task or by the
    # hub's inline fan-out (``Cursor.sending`` says so to the feed): one
    # deliverer at a time keeps the order.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, kw_only=True)


@dataclass(eq=False)
class _Live:
    """A Group's feed core and what waits on it in this event loop."""

    feed: Feed[Subscription]
    # Serializes the reads toward the head.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Set once the head was read; later subscribers wait for it.
    ready: asyncio.Event = field(default_factory=asyncio.Event)


AgentCallback = Callable[[int, dict[str, tuple[list[str], int]]], Awaitable[None]]
# Takes an Agent's notice from a local commit (``agent.membership``, ``agent.session``).
AgentNoticeHandler = Callable[[dict[str, Any]], Awaitable[None]]


class Hub:
    """This event loop's live path: it drives a ``Feed`` per followed Group
    and watches the connected Agents' sessions and Memberships."""

    def __init__(self) -> None:
        self.feeds: dict[str, _Live] = {}
        self.agents: dict[str, set[AgentCallback]] = {}
        self.agent_listeners: dict[str, set[AgentNoticeHandler]] = {}
        # Agents' notices from local commits, handed over one at a time, in
        # the order they came.
        self.agent_notices: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.layer = get_channel_layer()
        self.channel: str | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: set[asyncio.Future[None]] = set()
        self.reader = LiveReader()
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
        *,
        window: int | None = None,
        wants: Callable[[Event], bool] | None = None,
        on_pause: Callable[[Subscription], None] | None = None,
    ) -> Subscription:
        """Deliver ``group_id``'s Events after ``after``, then follow its head;
        ``window``, ``wants`` and ``on_pause`` as ``Cursor`` and ``Subscription`` say."""
        live = self.feeds.get(group_id)
        if live is None:
            live = self.feeds[group_id] = _Live(Feed(group_id))
            try:
                if self.layer is not None and self.channel is not None:
                    await self.layer.group_add(group_channel(group_id), self.channel)
                head, head_hash = await database_sync_to_async(read_head)(group_id)
            except BaseException:
                # A feed whose head was never read must not stay: every later
                # subscribe would wait for it forever (issue 16 item 10).
                # Those already waiting start afresh.
                if self.feeds.get(group_id) is live:
                    del self.feeds[group_id]
                live.ready.set()
                raise
            woken = live.feed.open(head, head_hash)
            live.ready.set()
            for other in woken:
                other.wake.set()
        else:
            await live.ready.wait()
            if self.feeds.get(group_id) is not live:
                return await self.subscribe(
                    group_id, after, deliver, deliver_now, window=window, wants=wants, on_pause=on_pause
                )
        sub = Subscription(
            group_id, after, deliver=deliver, deliver_now=deliver_now, window=window, wants=wants, on_pause=on_pause
        )
        live.feed.add(sub)
        sub.task = asyncio.create_task(self._run(live.feed, sub))
        return sub

    def acknowledge(self, sub: Subscription, sequence: int) -> None:
        """The subscriber's client processed ``sub``'s Group through ``sequence``
        (an ACK): room in its window, and the end of a pause when there is enough."""
        if sub.ack(sequence):
            sub.wake.set()

    def resume(self, sub: Subscription) -> None:
        """End ``sub``'s pause without an acknowledgement (its retry time passed)."""
        if sub.resume():
            sub.wake.set()

    async def unsubscribe(self, sub: Subscription) -> None:
        sub.closed = True
        live = self.feeds.get(sub.group_id)
        if live is not None and live.feed.remove(sub):
            del self.feeds[sub.group_id]
            if self.layer is not None and self.channel is not None:
                await self.layer.group_discard(group_channel(sub.group_id), self.channel)
        if sub.task is not None and sub.task is not asyncio.current_task():
            sub.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sub.task

    async def _run(self, feed: Feed[Subscription], sub: Subscription) -> None:
        """Deliver everything after the subscriber's position, then follow the head."""
        try:
            while not sub.closed:
                step = feed.next_for(sub)
                if step is None:
                    sub.wake.clear()
                    if feed.caught_up(sub):
                        await sub.wake.wait()
                    continue
                if isinstance(step, Read):  # behind the cache: replay from the database
                    events: list[Event] = await database_sync_to_async(read_after)(*step)
                else:
                    events = step
                async with sub.lock:
                    sub.sending = True
                    try:
                        batch = sub.unsent(events)
                        if batch and not await self._deliver(sub, batch):
                            return
                    finally:
                        sub.sending = False
                if not batch:
                    await asyncio.sleep(NOT_VISIBLE_YET)  # the head moved but the rows are not visible yet
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("delivery to a subscriber of %s failed", feed.group_id)

    async def _deliver(self, sub: Subscription, batch: list[Event]) -> bool:
        """Send ``batch`` (the caller holds ``sub.lock``); False when the
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
        was_paused = sub.paused
        if sub.delivered(batch, kept):
            if sub.paused and not was_paused and sub.on_pause is not None:
                try:
                    sub.on_pause(sub)
                except Exception:
                    log.exception("the pause of a subscriber of %s failed", sub.group_id)
            return True
        self._spawn(self.unsubscribe(sub))
        return False

    def _fan_out_now(self, feed: Feed[Subscription]) -> list[Subscription]:
        """Carry out the feed's fan-out: each subscriber whose ``deliver_now``
        can send its Events at once gets them here, one after the other
        without a task switch; those to wake are woken and catch up on their
        own; the rest (``deliver_now`` declined) are returned for the
        asynchronous ``deliver``."""
        sends, wakes = feed.fan_out()
        for sub in wakes:
            sub.wake.set()
        later = []
        for sub, batch in sends:
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
        live = self.feeds.get(group_id)
        if live is None or not live.feed.opened or sequence <= live.feed.head:
            return
        feed = live.feed
        async with live.lock:
            # Read the new Events once for every local subscriber.
            read = feed.read_to(sequence)
            try:
                while read is not None:
                    read = feed.read_done(await self.reader.read(*read), sequence)
            except BaseException:
                feed.read_failed()
                raise
        # Subscribers at the head get the new Events right here, one after the
        # other in this task (a send hands the frame to the server and does
        # not wait for the peer): no task switch per subscriber. One that is
        # sending already, or is behind, is woken and catches up on its own.
        for sub in self._fan_out_now(feed):
            if sub.closed or sub.paused:
                continue
            if sub.lock.locked():
                sub.wake.set()
                continue
            async with sub.lock:
                sub.sending = True
                try:
                    batch = feed.cached_after(sub.position)
                    if batch is None:
                        sub.wake.set()
                    elif batch := sub.unsent(batch):
                        await self._deliver(sub, batch)
                finally:
                    sub.sending = False

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
        live = self.feeds.get(group_id)
        if live is None:
            return True  # old news: no one here follows the Group
        carried = _linked(live.feed, message.get("events"))
        verdict = live.feed.head_notice(sequence, carried)
        if verdict is Notice.READ:
            return False
        if verdict is Notice.CARRIED:
            assert isinstance(carried, list)
            try:
                events: list[Event] = [wire_carried(entry) for entry in carried]
            except (KeyError, TypeError, ValueError):
                return False  # not the entries delivery.carried_event makes: read instead
            live.feed.take(events)
            for sub in self._fan_out_now(live.feed):
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
            live = self.feeds.get(group_id)
            if live is not None and sequence > live.feed.head:
                moved = True
                await self.head_moved(group_id, sequence)
        return moved


def _linked(feed: Feed[Subscription], carried: Any) -> Any:
    """A notice's Events as ``delivery.carried_event`` entries. Entries that
    are signed Event documents alone get their chain links computed here
    (``hash = sha256(prev_hash || JCS(document))``, from the hash of the
    feed's head), when they start right after the feed's head; anything else
    is returned as it came (the feed then reads, or takes it as old news)."""
    if not isinstance(carried, list) or not carried or not all(isinstance(e, dict) for e in carried):
        return carried
    if "document" in carried[0] or carried[0].get("sequence") != feed.head + 1:
        return carried
    prev = feed.link_hash()
    if prev is None:
        return carried
    entries = []
    try:
        for document in carried:
            text = jcs.canonicalize(document)
            link = hashlib.sha256(prev.encode("ascii") + text).hexdigest()
            entries.append(carried_event(document["sequence"], text.decode("utf-8"), prev, link))
            prev = link
    except (KeyError, TypeError, ValueError):
        return carried
    return entries


def _discard(registry: dict[str, set[Any]], key: str, member: Any) -> None:
    """Take ``member`` out of ``registry[key]``, and the key with its last member."""
    members = registry.get(key)
    if members is not None:
        members.discard(member)
        if not members:
            del registry[key]


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
