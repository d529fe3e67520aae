"""Head notices that carry the committed Events (missions.delivery, missions.hub).

A commit's notice brings the Events it appended; a hub takes them only when
they continue, by sequence and hash chain, the last Event it holds for the
Group, and reads the database otherwise. So a lost, late, reordered or
altered notice costs latency, never order or completeness (spec 16: each
Group in sequence order; DESIGN §4)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from missions.hub import Hub, Subscription, _Feed, _wire
from mwportal.protocol import GENESIS_HASH, event_hash
from tests.conftest import AgentKey, group_revision


def _chain(group: str, first: int, count: int, prev: str) -> list[dict[str, Any]]:
    """``count`` Events of ``group`` from sequence ``first``, hash-chained from ``prev``."""
    events = []
    for sequence in range(first, first + count):
        event: dict[str, Any] = {"group": group, "sequence": sequence, "type": "membership.roles_set",
                                 "body": {"roles": ["worker"]}, "prev_hash": prev}  # fmt: skip
        prev = event["hash"] = event_hash(prev, event)
        events.append(event)
    return events


class _Recorder:
    """A subscriber: what it received, and through which path."""

    def __init__(self, now: bool = True) -> None:
        self.now = now
        self.got: list[tuple[str, int]] = []

    async def deliver(self, batch: list[Any]) -> bool:
        self.got += [("async", e["sequence"]) for e in batch]
        return True

    def deliver_now(self, batch: list[Any]) -> bool | None:
        if not self.now:
            return None
        self.got += [("now", e["sequence"]) for e in batch]
        return True


def _hub_with_feed(log: list[dict[str, Any]], subscribers: list[_Recorder]) -> tuple[Hub, list[int]]:
    """A hub following Group "g" whose Events so far are ``log`` (all
    cached, subscribers at the head), with a database read that serves
    ``log`` and records each ``after`` it was asked for."""
    hub = Hub()
    head = log[-1]["sequence"] if log else 0
    feed = hub.feeds["g"] = _Feed("g", head=head)
    feed.cache.extend(_wire(e) for e in log)
    feed.ready.set()
    for recorder in subscribers:
        feed.subscribers.add(Subscription("g", head, recorder.deliver, recorder.deliver_now))
    reads: list[int] = []

    async def read(group_id: str, after: int, limit: int) -> list[Any]:
        reads.append(after)
        return [_wire(e) for e in log if e["sequence"] > after][:limit]

    hub.reader.read = read  # type: ignore[method-assign]
    return hub, reads


def _notice(events: list[dict[str, Any]] | None, sequence: int) -> dict[str, Any]:
    return {"type": "group.head", "group": "g", "sequence": sequence, "events": events}


async def _settle(hub: Hub) -> None:
    for _ in range(20):
        await asyncio.sleep(0)
    if hub._pending:
        await asyncio.gather(*hub._pending)


def test_events_that_continue_the_feed_are_sent_at_once_without_a_read() -> None:
    log = _chain("g", 1, 5, GENESIS_HASH)
    recorders = [_Recorder(), _Recorder()]

    async def scenario() -> list[int]:
        hub, reads = _hub_with_feed(log[:3], recorders)
        assert hub.notice_now(_notice(log[3:], 5))
        return reads

    assert asyncio.run(scenario()) == []
    for recorder in recorders:
        assert recorder.got == [("now", 4), ("now", 5)]


@pytest.mark.parametrize(
    "case", ["gap", "late_duplicate_start", "broken_chain", "no_events", "short_of_the_head", "not_a_list"]
)
def test_anything_that_does_not_continue_the_feed_is_read_from_the_database(case: str) -> None:
    """Spec 16 (sequence order, nothing skipped): the hub reads after its own
    head and delivers every Event once, in order."""
    log = _chain("g", 1, 6, GENESIS_HASH)
    carried: Any = {
        "gap": log[4:],  # 5..6 while the feed is at 3: the notice of 4 is late or lost
        "late_duplicate_start": log[2:],  # 3..6: starts at an Event the feed has
        "broken_chain": [log[3], {**log[4], "prev_hash": "f" * 64}, log[5]],
        "no_events": None,  # a commit too big to carry its Events
        "short_of_the_head": log[3:5],  # says head 6, carries 4..5
        "not_a_list": {"sequence": 4},
    }[case]
    recorder = _Recorder()

    async def scenario() -> list[int]:
        hub, reads = _hub_with_feed(log, [recorder])
        feed = hub.feeds["g"]
        # The feed is at 3 (4..6 committed but not yet seen by this hub).
        feed.head = 3
        while feed.cache[-1]["sequence"] > 3:
            feed.cache.pop()
        for sub in feed.subscribers:
            sub.position = 3
        assert not hub.notice_now(_notice(carried, 6))
        hub._on_notice(_notice(carried, 6))
        await _settle(hub)
        return reads

    assert asyncio.run(scenario()) == [3]
    assert [s for _, s in recorder.got] == [4, 5, 6]


def test_an_old_notice_changes_nothing() -> None:
    log = _chain("g", 1, 4, GENESIS_HASH)
    recorder = _Recorder()

    async def scenario() -> list[int]:
        hub, reads = _hub_with_feed(log, [recorder])
        assert hub.notice_now(_notice(log[2:3], 3))  # handled: nothing new
        await _settle(hub)
        return reads

    assert asyncio.run(scenario()) == []
    assert recorder.got == []


def test_a_subscriber_that_cannot_send_at_once_gets_the_events_from_its_own_task() -> None:
    """deliver_now declines (a closing connection, a removal of its agent):
    the subscriber's asynchronous deliver sends the same Events, in order."""
    log = _chain("g", 1, 4, GENESIS_HASH)
    quick, slow = _Recorder(), _Recorder(now=False)

    async def scenario() -> None:
        hub, _ = _hub_with_feed(log[:2], [quick, slow])
        for sub in hub.feeds["g"].subscribers:
            sub.task = asyncio.create_task(hub._run(hub.feeds["g"], sub))
        await asyncio.sleep(0)
        assert hub.notice_now(_notice(log[2:], 4))
        await _settle(hub)
        for sub in list(hub.feeds["g"].subscribers):
            await hub.unsubscribe(sub)

    asyncio.run(scenario())
    assert quick.got == [("now", 3), ("now", 4)]
    assert slow.got == [("async", 3), ("async", 4)]


def test_the_notifier_thread_coalesces_heads_and_keeps_events_only_while_they_run_on() -> None:
    from missions.delivery import _Notifier

    log = _chain("g", 1, 6, GENESIS_HASH)
    notifier = _Notifier()
    notifier._start_drain = lambda: None  # type: ignore[method-assign]  # inspect what is pending
    notifier.head("g", 2, log[0:2])
    notifier.head("g", 3, log[2:3])
    assert notifier.pending_heads["g"] == (3, log[0:3])
    notifier.head("g", 6, log[4:6])  # 5 and 6 while 4 has not been queued: keep the head only
    assert notifier.pending_heads["g"] == (6, None)
    notifier.head("g", 4, log[3:4])  # late: the head stays at 6
    assert notifier.pending_heads["g"] == (6, None)


def test_an_oversized_commit_sends_its_head_without_its_events() -> None:
    from missions.delivery import MAX_CARRIED_BYTES, _RedisPublisher, head_notice

    published: list[bytes] = []

    class _Client:
        def publish(self, channel: str, data: bytes) -> None:
            published.append(data)

    publisher = _RedisPublisher.__new__(_RedisPublisher)
    publisher.client, publisher.prefix, publisher.down_until = _Client(), "asgi", 0.0
    publisher.serialize = lambda message: repr(message).encode()
    small = _chain("g", 1, 1, GENESIS_HASH)
    big = [{**small[0], "body": {"text": "x" * MAX_CARRIED_BYTES}}]
    assert publisher.publish(publisher.payloads([("mwp.group.g", head_notice("g", 1, small))]))
    assert publisher.publish(publisher.payloads([("mwp.group.g", head_notice("g", 1, big))]))
    assert published[0] == repr(head_notice("g", 1, small)).encode()
    assert published[1] == repr(head_notice("g", 1, None)).encode()


@pytest.mark.django_db(transaction=True)
def test_a_commit_notice_carries_its_events_as_the_log_stores_them(
    mission: dict[str, str], owner: AgentKey, worker: AgentKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the hub may deliver without reading is exactly what a read
    would give: the same wire Events, hash-chained (DESIGN §4)."""
    import missions.authority as authority
    from missions.models import GroupEvent

    heads: list[Any] = []
    monkeypatch.setattr(authority, "_notify", lambda prepared: heads.extend(prepared.heads))
    g = mission["group"]
    receipt = owner.send(
        "membership.set_roles",
        g,
        {"agent": worker.id, "roles": ["worker", "reviewer"]},
        target={"kind": "group", "id": g, "revision": group_revision(g)},
    )
    sequences = [e["sequence"] for e in receipt["events"]]
    ((group, head, events),) = heads
    assert (group, head) == (g, sequences[-1])
    stored = [e.as_wire() for e in GroupEvent.objects.filter(group_id=g, sequence__in=sequences).order_by("sequence")]
    assert events == stored
    for event in events:
        assert event_hash(event["prev_hash"], event) == event["hash"]


@pytest.mark.django_db(transaction=True)
def test_a_refused_command_sends_no_notice(
    mission: dict[str, str], owner: AgentKey, worker: AgentKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    import missions.authority as authority
    from mwportal.protocol import ProtocolError

    heads: list[Any] = []
    monkeypatch.setattr(authority, "_notify", lambda prepared: heads.extend(prepared.heads))
    g = mission["group"]
    with pytest.raises(ProtocolError):
        owner.send(
            "membership.set_roles",
            g,
            {"agent": worker.id, "roles": ["reviewer"]},
            target={"kind": "group", "id": g, "revision": group_revision(g) + 5},
        )
    assert heads == []


@pytest.mark.skipif(not os.environ.get("MWP_REDIS_URL"), reason="needs MWP_REDIS_URL (the Redis channel layer)")
def test_with_the_redis_layer_the_hub_takes_notices_as_the_layer_receives_them() -> None:
    """The hub's channel queue hands a notice it can act on straight to it
    (no wait for its receive loop); any other message is queued as usual."""
    import uuid

    from channels.layers import get_channel_layer

    from missions.delivery import group_channel, redis_publisher
    from missions.hub import immediate_notices

    publisher = redis_publisher()
    assert publisher is not None
    g = str(uuid.uuid4())
    taken: list[dict[str, Any]] = []

    def handle(message: dict[str, Any]) -> bool:
        taken.append(message)
        return message.get("sequence") == 1

    async def scenario() -> dict[str, Any]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        assert immediate_notices(layer, channel, handle)
        await layer.group_add(group_channel(g), channel)
        try:
            for sequence in (1, 2):
                notice = {"type": "group.head", "group": g, "sequence": sequence}
                assert publisher.publish(publisher.payloads([(group_channel(g), notice)]))
            return dict(await asyncio.wait_for(layer.receive(channel), 5))
        finally:
            await layer.group_discard(group_channel(g), channel)

    queued = asyncio.run(scenario())
    assert queued["sequence"] == 2  # declined by the handler: queued for the receive loop
    assert [m["sequence"] for m in taken] == [1, 2]
