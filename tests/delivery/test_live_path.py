"""The live path: "head moved" through the channel layer, with the periodic
head check pushed out of the way (DESIGN §3 step 7, §4)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

from tests.conftest import AgentKey, group_revision
from tests.delivery.conftest import Client, Daphne, in_db_thread
from tests.delivery.test_agent_socket import churn, head

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def head_poll_seconds() -> float:
    return 60.0  # far longer than the test waits: only the layer can deliver


def test_a_command_over_the_socket_reaches_subscribers_through_the_in_process_layer(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]
    start = head(g)
    envelope = owner.envelope(
        "membership.set_roles",
        g,
        {"agent": worker.id, "roles": ["reviewer"]},
        target={"kind": "group", "id": g, "revision": group_revision(g)},
    )

    async def scenario() -> tuple[list[int], float]:
        watcher = await Client.open(daphne, worker.extra["token"])
        await watcher.send({"op": "subscribe", "group": g, "after": start})
        await asyncio.sleep(0.5)
        sender = await Client.open(daphne, owner.extra["token"])
        began = time.monotonic()
        await sender.send({"op": "command", "envelope": envelope})
        got = [e["sequence"] for e in await watcher.events(g, start + 1, timeout=10)]
        elapsed = time.monotonic() - began
        await watcher.close()
        await sender.close()
        return got, elapsed

    got, elapsed = asyncio.run(scenario())
    assert got == [start + 1]
    assert elapsed < 5


@pytest.mark.skipif(not os.environ.get("MWP_REDIS_URL"), reason="needs MWP_REDIS_URL (the Redis channel layer)")
def test_a_commit_in_another_process_arrives_through_redis(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey, settings: Any
) -> None:
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"].startswith("channels_redis.")
    g = mission["group"]
    start = head(g)

    async def scenario() -> tuple[list[int], float]:
        watcher = await Client.open(daphne, worker.extra["token"])
        await watcher.send({"op": "subscribe", "group": g, "after": start})
        await asyncio.sleep(0.5)
        began = time.monotonic()
        top = await in_db_thread(churn, owner, g, worker, 3)  # commits in this (test) process
        got = [e["sequence"] for e in await watcher.events(g, top, timeout=10)]
        elapsed = time.monotonic() - began
        await watcher.close()
        return got, elapsed

    got, elapsed = asyncio.run(scenario())
    assert got == list(range(start + 1, start + 4))
    assert elapsed < 5


def test_the_live_read_gives_each_event_as_the_log_stores_it(
    mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    """The hub's live read (an asynchronous connection of its own on
    PostgreSQL, the thread pool elsewhere) yields the same wire Events and
    frames as the ORM's ``as_wire``, so the hash chain a Worker checks holds."""
    from missions.hub import _LiveReader, _read_after
    from missions.models import GroupEvent
    from mwportal.protocol.chain import event_hash

    g = mission["group"]
    start = head(g)
    churn(owner, g, worker, 3)

    async def read() -> list[Any]:
        reader = _LiveReader()
        try:
            return await reader.read(g, start - 1, 100)
        finally:
            await reader.close()

    live = asyncio.run(read())
    expected = [e.as_wire() for e in GroupEvent.objects.filter(group_id=g, sequence__gt=start - 1).order_by("sequence")]
    assert [dict(e) for e in live] == expected
    assert [e.frame for e in live] == [e.frame for e in _read_after(g, start - 1, 100)]
    for event in live:
        assert event_hash(event["prev_hash"], event) == event["hash"]


@pytest.mark.skipif(not os.environ.get("MWP_REDIS_URL"), reason="needs MWP_REDIS_URL (the Redis channel layer)")
def test_the_committing_thread_publishes_where_the_redis_layer_listens() -> None:
    """The synchronous publisher writes on the layer's own group channel and in
    its serialization: a channel added to the Group through the layer receives
    the notice as the layer's own ``group_send`` would deliver it."""
    import uuid

    from channels.layers import get_channel_layer

    from missions.delivery import _redis_publisher, group_channel

    publisher = _redis_publisher()
    assert publisher is not None
    g = str(uuid.uuid4())
    event = {"group": g, "sequence": 7, "type": "membership.roles_set", "body": {"roles": ["worker"]}}
    notice = {"type": "group.head", "group": g, "sequence": 7, "events": [event]}

    async def scenario() -> dict[str, Any]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(group_channel(g), channel)
        try:
            assert publisher.publish(publisher.payloads([(group_channel(g), notice)]))
            return dict(await asyncio.wait_for(layer.receive(channel), 5))
        finally:
            await layer.group_discard(group_channel(g), channel)

    assert asyncio.run(scenario()) == notice


def test_a_failed_publish_hands_the_notices_to_the_notifier_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis unreachable: the commit is not refused and its notices still go
    out (through the notifier thread, which logs its own failures), and the
    committing thread stops trying Redis for a while."""
    import missions.delivery as delivery

    down = delivery._RedisPublisher("redis://127.0.0.1:1/0", "asgi", lambda message: b"")
    monkeypatch.setattr(delivery, "_redis_publisher", lambda: down)
    handed: list[tuple[str, int, Any]] = []
    monkeypatch.setattr(delivery._notifier, "head", lambda *head: handed.append(head))
    events = [{"group": "g1", "sequence": 3}]
    delivery.notify_commit(delivery.prepare_commit([("g1", 3, events)], []))
    assert handed == [("g1", 3, events)]
    assert down.down_until > time.monotonic()
    assert not down.publish([("x", b"")])  # still resting: no new attempt
