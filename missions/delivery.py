"""After-commit notifications through the channel layer (DESIGN §3 step 7).

The layer says "head moved" (or "your Membership changed", "your session
was replaced"). A head notice also carries the Events that the commit
appended, exactly as its transaction wrote them (``MAX_CARRIED_BYTES`` at
most; a larger commit sends the head alone). A hub uses them only when they
continue, by sequence and hash chain, the last Event it holds for that Group
(each Event as ``carried_event`` puts it, the stored signed document and its
row's chain links; or the signed document alone, whose links the hub computes
from its head, ``missions.hub._linked``);
anything else (a notice lost, late, out of order, or without Events) makes it
read the database after its head. So order and completeness never depend on
the layer, only latency does; the carried Events spare the live path a
database round trip per commit (DESIGN §4 has the hub read; see
``missions.hub``).

With the Redis pub/sub layer (``MWP_REDIS_URL``) the committing thread
publishes a commit's notices itself, in one round trip through a
synchronous Redis client (``_RedisPublisher``), on the channel names and in
the serialization of that layer, so every process's layer receives them as
its own ``group_send``. They are serialized inside the transaction
(``prepare_commit``), so after COMMIT only the write is left. Handing them
to a thread with an event loop instead costs a thread wake-up (about 0.3 ms)
and an asyncio round trip on the live path. A failed publish is logged and the notices go through the notifier
thread below for the next few seconds.

Before either, every notice goes straight to the hubs of this machine
(``missions.local_notices``): one datagram hop, ahead of the layer's; a hub
hands an Agent's notices to that Agent's connections in its process
(``Hub.listen_agent``). With Redis, each hub also enters a registry
(``_RedisPublisher.announce``), and a commit's notices are published only
when a listening hub did not take them from its socket (``notify_commit``).

Otherwise (the in-memory layer; or when Redis is failing) sending happens on
one long-lived notifier thread with its own event loop: ``notify_commit()`` only
hands the message over, so a Command's thread never builds an event loop per
message (``async_to_sync`` would, at about half a millisecond each). Head
notices of one Group are coalesced (their Events kept while they run on).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer

from . import local_notices

log = logging.getLogger(__name__)


def group_channel(group_id: str) -> str:
    return f"mwp.group.{group_id}"


AGENT_CHANNEL_PREFIX = "mwp.agent."
# The notices for an Agent's connections (``membership_notice``, ``session_notice``).
AGENT_NOTICES = frozenset({"agent.membership", "agent.session"})


def agent_channel(agent_id: str) -> str:
    return f"{AGENT_CHANNEL_PREFIX}{agent_id}"


class _Notifier:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.serving_loop: asyncio.AbstractEventLoop | None = None
        # Group -> (head, the Events up to it when they are known to run on
        # without a gap since the first notice queued, else None).
        self.pending_heads: dict[str, tuple[int, list[dict[str, Any]] | None]] = {}
        self.pending_notices: list[tuple[str, dict[str, Any]]] = []
        self.draining = False

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self.lock:
            serving = self.serving_loop
            if serving is not None and serving.is_running():
                # In a daphne process, send on daphne's own loop: the
                # in-memory layer's queues belong to that loop.
                return serving
            if self.loop is None or self.loop.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                threading.Thread(target=run, name="mwp-notifier", daemon=True).start()
                ready.wait()
                self.loop = loop
            return self.loop

    def send(self, channel_group: str, message: dict[str, Any]) -> None:
        with self.lock:
            self.pending_notices.append((channel_group, message))
        self._start_drain()

    def head(self, group_id: str, sequence: int, events: list[dict[str, Any]] | None) -> None:
        with self.lock:
            known = self.pending_heads.get(group_id)
            if known is not None:
                # Heads of one Group coalesce; their Events only while they
                # run on (commits can reach this point out of order).
                known_seq, known_events = known
                if known_events and events and events[0]["sequence"] == known_seq + 1:
                    events = known_events + events
                else:
                    events = None
                sequence = max(sequence, known_seq)
            self.pending_heads[group_id] = (sequence, events)
        self._start_drain()

    def _start_drain(self) -> None:
        with self.lock:
            if self.draining:
                return  # the drain under way sends what was just queued
            self.draining = True
        loop = self._ensure_loop()
        loop.call_soon_threadsafe(lambda: loop.create_task(self._drain()))

    async def _drain(self) -> None:
        # One wake-up of the loop sends every head that moved and every
        # notice queued since the last one: under load many Commands share a
        # wake-up (and a Group's heads coalesce), so a Command costs the
        # committing thread a dict update and a list append.
        try:
            while True:
                with self.lock:
                    heads, self.pending_heads = self.pending_heads, {}
                    notices, self.pending_notices = self.pending_notices, []
                    if not heads and not notices:
                        self.draining = False
                        return
                await asyncio.gather(
                    *(self._send(group_channel(g), head_notice(g, seq, events)) for g, (seq, events) in heads.items()),
                    *(self._send(channel_group, message) for channel_group, message in notices),
                )
        except BaseException:
            # A loop shutting down cancels the drain: the next head starts a
            # new one (what was pending is re-sent by it or by the periodic
            # head check).
            with self.lock:
                self.draining = False
            raise

    async def _send(self, channel_group: str, message: dict[str, Any]) -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            await layer.group_send(channel_group, message)
        except Exception:  # a lost notice costs latency only; the periodic head check recovers it
            log.warning("could not notify the channel layer group %s", channel_group, exc_info=True)


_notifier = _Notifier()

PUBSUB_BACKEND = "channels_redis.pubsub.RedisPubSubChannelLayer"


class _RedisPublisher:
    """Publishes notices from the calling thread, as the Redis pub/sub layer's
    ``group_send`` would (``<prefix>__group__<group>``, the layer's serializer)."""

    RETRY_AFTER = 5.0  # seconds on the notifier thread after a failed publish
    # The hub registry: every hub of this database says every HUB_REFRESH
    # seconds that it listens (``announce``); one silent for HUB_TTL is
    # gone. A committer reads it at most once per REGISTRY_CACHE seconds.
    HUB_REFRESH = 5.0
    HUB_TTL = 15.0
    REGISTRY_CACHE = 1.0

    def __init__(self, address: str, prefix: str, serialize: Any) -> None:
        import redis

        self.client = redis.Redis.from_url(address, socket_connect_timeout=0.5, socket_timeout=0.5)
        self.prefix = prefix
        self.serialize = serialize
        self.down_until = 0.0
        digest = local_notices.database_digest()
        self.registry = None if digest is None else f"{prefix}:mwp:hubs:{digest}"
        self.listening: frozenset[str] | None = None
        self.listening_read = 0.0

    def announce(self, hub: str) -> None:
        """Say that ``hub`` (its local notice socket's name, or a name no
        directory holds when it has none) follows this database's Groups."""
        if self.registry is None:
            return
        now = time.time()
        pipe = self.client.pipeline(transaction=False)
        pipe.zadd(self.registry, {hub: now})
        pipe.zremrangebyscore(self.registry, "-inf", now - self.HUB_TTL)
        pipe.expire(self.registry, int(self.HUB_TTL * 4))
        pipe.execute()

    def withdraw(self, hub: str) -> None:
        if self.registry is not None:
            self.client.zrem(self.registry, hub)

    def listening_elsewhere(self, reached: set[str]) -> bool:
        """Whether a hub that did not take this commit's local notices
        (another machine's, one whose queue was full) listens on Redis; True
        when that cannot be known."""
        if self.registry is None:
            return True
        now = time.monotonic()
        if self.listening is None or now - self.listening_read > self.REGISTRY_CACHE:
            try:
                names = self.client.zrangebyscore(self.registry, time.time() - self.HUB_TTL, "+inf")
            except Exception:
                log.warning("could not read the hub registry; head notices go through Redis", exc_info=True)
                return True
            self.listening = frozenset(n.decode() if isinstance(n, bytes) else str(n) for n in names)
            self.listening_read = now
        return not self.listening <= reached

    def payloads(self, messages: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, bytes]]:
        """Each message's Redis channel and bytes; a head notice whose Events
        make it bigger than ``MAX_CARRIED_BYTES`` goes without them."""
        return [(f"{self.prefix}__group__{group}", notice_bytes(m, self.serialize)) for group, m in messages]

    def publish(self, payloads: list[tuple[str, bytes]]) -> bool:
        """True when Redis took them all; False to send them another way."""
        if time.monotonic() < self.down_until:
            return False
        try:
            if len(payloads) == 1:  # the common case: one Group, no other notice
                self.client.publish(*payloads[0])
            else:
                pipe = self.client.pipeline(transaction=False)
                for channel, data in payloads:
                    pipe.publish(channel, data)
                pipe.execute()
        except Exception:
            log.warning("could not publish to Redis; using the notifier thread for a while", exc_info=True)
            self.down_until = time.monotonic() + self.RETRY_AFTER
            return False
        return True


@functools.cache
def redis_publisher() -> _RedisPublisher | None:
    """The synchronous publisher when the default layer is Redis pub/sub with one host."""
    from django.conf import settings

    config: dict[str, Any] = settings.CHANNEL_LAYERS.get("default", {})
    options: dict[str, Any] = config.get("CONFIG", {})
    hosts = options.get("hosts") or []
    layer = get_channel_layer()
    if config.get("BACKEND") != PUBSUB_BACKEND or len(hosts) != 1 or layer is None:
        return None
    address = hosts[0].get("address") if isinstance(hosts[0], dict) else hosts[0]
    if not isinstance(address, str):
        return None
    return _RedisPublisher(address, options.get("prefix", "asgi"), layer.serialize)


def register_serving_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Called by the hub of a serving process (daphne) with its event loop."""
    _notifier.serving_loop = loop


# A head notice carries its Events up to this size (serialized); a bigger
# commit's notice carries the head alone and hubs read the Events.
MAX_CARRIED_BYTES = 64 * 1024


def notice_bytes(message: dict[str, Any], serialize: Callable[[dict[str, Any]], bytes]) -> bytes:
    """``message`` serialized; a head notice whose Events make it bigger
    than ``MAX_CARRIED_BYTES`` goes without them (hubs then read them)."""
    data = serialize(message)
    if len(data) > MAX_CARRIED_BYTES and message.get("events"):
        data = serialize({**message, "events": None})
    return data


# A Group's new head after a commit, with the Events that commit appended to
# it, each as ``carried_event`` makes it.
CommittedHead = tuple[str, int, list[dict[str, Any]]]


def carried_event(sequence: int, document: str, prev_hash: str, hash_: str) -> dict[str, Any]:
    """One Event as a head notice carries it: its sequence, its signed
    document as stored (the JCS text of ``GroupEvent.document``) and its
    row's chain links, by which a hub checks that it continues its feed
    (``missions.feed.Feed.head_notice``; the links are not in the document).
    A notice may carry the signed documents alone instead (the hub links them
    itself, at the cost of one JCS encoding each); anything else costs the hub
    a read, never an Event."""
    return {"sequence": sequence, "document": document, "prev_hash": prev_hash, "hash": hash_}


def head_notice(group_id: str, sequence: int, events: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {"type": "group.head", "group": group_id, "sequence": sequence, "events": events}


@dataclass
class CommitNotices:
    """What one commit tells the channel layer: each Group's new head with
    the Events the commit appended to it, then its other notices; with the
    Redis pub/sub layer also their bytes on the wire, made ready before
    COMMIT so that sending them after it is one write."""

    heads: list[CommittedHead]
    notices: list[tuple[str, dict[str, Any]]]
    payloads: list[tuple[str, bytes]] | None = None
    # The head notices, then the other notices, packed in datagrams for the
    # hubs of this machine (``missions.local_notices.pack``), when there are
    # any, and their sender.
    local: list[bytes] | None = None
    sender: local_notices.Sender | None = None


def prepare_commit(heads: list[CommittedHead], notices: list[tuple[str, dict[str, Any]]]) -> CommitNotices:
    """Called inside the transaction; ``notify_commit`` sends after COMMIT."""
    prepared = CommitNotices(heads, notices)
    publisher = redis_publisher()
    if publisher is not None:
        messages = [(group_channel(g), head_notice(g, seq, events)) for g, seq, events in heads]
        prepared.payloads = publisher.payloads(messages + notices)
    sender = local_notices.sender()
    if sender is not None and (heads or notices) and sender.hubs():
        prepared.sender = sender
        prepared.local = local_notices.pack(
            [notice_bytes(head_notice(*head), local_notices.encode) for head in heads]
            + [local_notices.encode(local_notice(channel_group, message)) for channel_group, message in notices]
        )
    return prepared


def local_notice(channel_group: str, message: dict[str, Any]) -> dict[str, Any]:
    """An Agent's notice as a datagram to the hubs of this machine: the
    message, with the channel-layer group it is for."""
    return {**message, "to": channel_group}


def notify_commit(prepared: CommitNotices) -> None:
    """Send a committed transaction's notices (``prepare_commit``): straight
    to the hubs of this machine first, then through the channel layer. With
    Redis, they are published only when a hub that the local ones did not
    reach is listening (the hub registry): on one machine, a second copy of
    every notice would only compete for the processor with the delivery of
    the first, and so would waking Redis to carry it."""
    reached: set[str] | None = None
    if prepared.sender is not None and prepared.local:
        reached = prepared.sender.send(prepared.local)
    publisher = redis_publisher()
    if publisher is not None and prepared.payloads is not None:
        if reached is not None and not publisher.listening_elsewhere(reached):
            return  # every listening hub has them all
        if not prepared.payloads or publisher.publish(prepared.payloads):
            return
    joined = _joined_here()
    for group_id, sequence, events in prepared.heads:
        if joined(group_channel(group_id)):
            _notifier.head(group_id, sequence, events)
    for channel_group, message in prepared.notices:
        if joined(channel_group):
            _notifier.send(channel_group, message)


def _joined_here() -> Callable[[str], bool]:
    """Whether sending to a channel-layer group can reach anyone. The
    in-memory layer reaches only this process's consumers: a group none of
    them has joined (a Celery worker's, a management command's commits)
    needs no wake-up of the notifier thread, whose work would only compete
    for the processor with the processes that deliver."""
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        groups: dict[str, Any] = layer.groups
        return groups.__contains__
    return lambda _group: True


def membership_notice(
    group_id: str, agent_id: str, roles: list[str], epoch: int, active: bool
) -> tuple[str, dict[str, Any]]:
    message = {"type": "agent.membership", "group": group_id, "roles": roles, "membership_epoch": epoch,
               "active": active}  # fmt: skip
    return agent_channel(agent_id), message


def session_notice(agent_id: str, epoch: int) -> tuple[str, dict[str, Any]]:
    return agent_channel(agent_id), {"type": "agent.session", "session_epoch": epoch}
