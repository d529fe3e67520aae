"""Head notices that carry the committed Events (missions.delivery, missions.hub).

A commit's notice brings the signed Event documents it appended; a hub takes
them only when they continue, by sequence and hash chain, the last Event it
holds for the Group (it computes their links from its head's hash), and reads
the database otherwise. So a lost, late, reordered or
altered notice costs latency, never order or completeness (spec 16: each
Group in sequence order; DESIGN §4)."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest

from missions.delivery import head_notice
from missions.feed import Feed, Notice
from missions.hub import Hub, Subscription
from mwportal.protocol import GENESIS_HASH, event_hash
from tests.conftest import AgentKey, group_revision
from tests.delivery.conftest import in_db_thread
from tests.delivery.test_agent_socket import POLICY, head, policy_payload


def _chain(group: str, first: int, count: int, prev: str) -> list[dict[str, Any]]:
    """``count`` Events of ``group`` from sequence ``first``, hash-chained from ``prev``."""
    events = []
    for sequence in range(first, first + count):
        event: dict[str, Any] = {"group": group, "sequence": sequence, "type": "membership.roles_set",
                                 "body": {"roles": ["worker"]}, "prev_hash": prev}  # fmt: skip
        prev = event["hash"] = event_hash(prev, event)
        events.append(event)
    return events


class Recorder:
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


class Following:
    """A hub (not started: no channel layer, no head check, no local
    notices) whose subscribers follow a real Group, with each of its live
    reads recorded; commits made through it reach the hub only as the test
    hands their notices over."""

    def __init__(self, g: str, monkeypatch: pytest.MonkeyPatch) -> None:
        import missions.authority as authority

        self.g = g
        self.hub = Hub()
        self.subscriptions: list[Subscription] = []
        self.reads: list[int] = []
        self.heads: list[Any] = []  # (group, head, events) of each commit, as its notice would carry them
        monkeypatch.setattr(authority, "notify_commit", lambda prepared: self.heads.extend(prepared.heads))
        live_read = self.hub.reader.read

        async def read(group_id: str, after: int, limit: int) -> list[Any]:
            self.reads.append(after)
            return await live_read(group_id, after, limit)

        self.hub.reader.read = read  # type: ignore[method-assign]

    async def subscribe(self, after: int, *subs: Any) -> list[Subscription]:
        made = [await self.hub.subscribe(self.g, after, s.deliver, getattr(s, "deliver_now", None)) for s in subs]
        self.subscriptions += made
        return made

    async def commit(self, planner: AgentKey, n: int) -> list[dict[str, Any]]:
        """``n`` commits of one Event each (``planner``'s priority policy, in
        the administrative Group); their Events as the notices carry them."""

        def run() -> None:
            for weight in range(1, n + 1):
                planner.send(POLICY, self.g, policy_payload(weight))

        await in_db_thread(run)
        return [event for _, _, events in self.heads[-n:] for event in events]

    def notice(self, events: list[dict[str, Any]] | None, sequence: int) -> dict[str, Any]:
        return head_notice(self.g, sequence, events)

    async def close(self) -> None:
        for sub in self.subscriptions:
            await self.hub.unsubscribe(sub)
        await self.hub.reader.close()


async def until(done: Any, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not within the time")


@pytest.mark.django_db(transaction=True)
def test_events_that_continue_the_feed_are_sent_at_once_without_a_read(
    org: dict[str, str], planner: AgentKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = org["admin_group"]
    top = head(g)
    following = Following(g, monkeypatch)
    recorders = [Recorder(), Recorder()]

    async def scenario() -> None:
        await following.subscribe(top, *recorders)
        carried = await following.commit(planner, 2)
        assert following.hub.notice_now(following.notice(carried, top + 2))
        await following.close()

    asyncio.run(scenario())
    assert following.reads == []
    for recorder in recorders:
        assert recorder.got == [("now", top + 1), ("now", top + 2)]


@pytest.mark.django_db(transaction=True)
def test_a_notice_that_does_not_continue_the_feed_makes_the_hub_read_after_its_head(
    org: dict[str, str], planner: AgentKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spec 16 (sequence order, nothing skipped): the hub reads after its own
    head, once, and delivers every Event once, in order (which notices do not
    continue the feed: tests/delivery/test_feed.py)."""
    g = org["admin_group"]
    top = head(g)
    following = Following(g, monkeypatch)
    recorder = Recorder()

    async def scenario() -> None:
        await following.subscribe(top, recorder)
        carried = await following.commit(planner, 3)
        gap = following.notice(carried[1:], top + 3)  # the notice of the first commit is late or lost
        assert not following.hub.notice_now(gap)
        await following.hub.head_moved(g, top + 3)
        await following.close()

    asyncio.run(scenario())
    assert following.reads == [top]
    assert recorder.got == [("now", top + 1), ("now", top + 2), ("now", top + 3)]


@pytest.mark.django_db(transaction=True)
def test_an_old_notice_changes_nothing(mission: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    g = mission["group"]
    top = head(g)
    following = Following(g, monkeypatch)
    recorder = Recorder()

    async def scenario() -> None:
        await following.subscribe(top, recorder)
        assert following.hub.notice_now(following.notice(None, top))  # handled: nothing new
        assert following.hub.notice_now(following.notice(None, top + 1) | {"group": str(uuid.uuid4())})
        await following.hub.head_moved(g, top)
        await following.close()

    asyncio.run(scenario())
    assert following.reads == []
    assert recorder.got == []


@pytest.mark.django_db(transaction=True)
def test_a_subscriber_that_cannot_send_at_once_gets_the_events_from_its_own_task(
    org: dict[str, str], planner: AgentKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deliver_now declines (a closing connection, a removal of its agent):
    the subscriber's asynchronous deliver sends the same Events, in order."""
    g = org["admin_group"]
    top = head(g)
    following = Following(g, monkeypatch)
    quick, slow = Recorder(), Recorder(now=False)

    async def scenario() -> None:
        await following.subscribe(top, quick, slow)
        carried = await following.commit(planner, 2)
        assert following.hub.notice_now(following.notice(carried, top + 2))
        await until(lambda: len(slow.got) == 2)
        await following.close()

    asyncio.run(scenario())
    assert quick.got == [("now", top + 1), ("now", top + 2)]
    assert slow.got == [("async", top + 1), ("async", top + 2)]


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
    would give: the stored signed Event documents (PROTOCOL §15.2), and the
    links the hub computes for them from its head are the stored chain
    (``missions.hub._linked``, DESIGN §3)."""
    import missions.authority as authority
    from missions.delivery import carried_event
    from missions.hub import _linked
    from missions.models import GroupEvent

    heads: list[Any] = []
    monkeypatch.setattr(authority, "notify_commit", lambda prepared: heads.extend(prepared.heads))
    g = mission["group"]
    before = head(g)
    receipt = owner.send(
        "membership.change",
        g,
        {"principal": worker.actor, "roles": ["worker", "reviewer"]},
        expected_revision=group_revision(g),
    )
    sequences = [e["sequence"] for e in receipt["events"]]
    ((group, top, events),) = heads
    assert (group, top) == (g, sequences[-1])
    rows = list(GroupEvent.objects.filter(group_id=g, sequence__in=sequences).order_by("sequence"))
    # The core carries the stored text with its chain links (no JCS encoding left to the hub).
    assert events == [carried_event(row.sequence, row.document, row.prev_hash, row.hash) for row in rows]
    feed: Feed[Subscription] = Feed(g)
    feed.open(before, GroupEvent.objects.get(group_id=g, sequence=before).hash)
    assert feed.head_notice(top, events) is Notice.CARRIED
    # A notice carrying the bare signed documents instead is linked by the hub to the same chain.
    entries = _linked(feed, [row.as_wire() for row in rows])
    assert [(e["prev_hash"], e["hash"], e["document"]) for e in entries] == [
        (row.prev_hash, row.hash, row.document) for row in rows
    ]


@pytest.mark.django_db(transaction=True)
def test_a_refused_command_sends_no_notice(
    mission: dict[str, str], owner: AgentKey, worker: AgentKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    import missions.authority as authority
    from mwportal.protocol import ProtocolError

    heads: list[Any] = []
    monkeypatch.setattr(authority, "notify_commit", lambda prepared: heads.extend(prepared.heads))
    g = mission["group"]
    with pytest.raises(ProtocolError):
        owner.send(
            "membership.change",
            g,
            {"principal": worker.actor, "roles": ["reviewer"]},
            expected_revision=group_revision(g) + 5,
        )
    assert heads == []


@pytest.mark.skipif(not os.environ.get("MWP_REDIS_URL"), reason="needs MWP_REDIS_URL (the Redis channel layer)")
def test_with_the_redis_layer_the_hub_takes_notices_as_the_layer_receives_them() -> None:
    """The hub's channel queue hands a notice it can act on straight to it
    (no wait for its receive loop); any other message is queued as usual."""
    from channels.layers import get_channel_layer

    from missions.delivery import group_channel, redis_publisher
    from missions.wake_sources import immediate_notices

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
