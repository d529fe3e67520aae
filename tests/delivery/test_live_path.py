"""The live path: "head moved" through the channel layer, with the periodic
head check pushed out of the way (DESIGN §3 step 7, §4)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

from tests.conftest import AgentKey
from tests.delivery.conftest import Client, Daphne, in_db_thread
from tests.delivery.test_agent_socket import POLICY, churn, head, policy_payload

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def head_poll_seconds() -> float:
    return 60.0  # far longer than the test waits: only the layer can deliver


def test_a_command_over_the_socket_reaches_subscribers_through_the_in_process_layer(
    daphne: Daphne, org: dict[str, str], worker: AgentKey, planner: AgentKey
) -> None:
    g = org["admin_group"]
    start = head(g)

    async def scenario() -> tuple[list[int], float]:
        watcher = await Client.open(daphne, worker)
        await watcher.subscribe(g, start)
        await asyncio.sleep(0.5)
        sender = await Client.open(daphne, planner)
        command = await in_db_thread(lambda: planner.command(POLICY, g, policy_payload()))
        began = time.monotonic()
        await sender.command(command)
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
    settings.MWP_LOCAL_NOTICES = False  # this process sends no local notice: only Redis can deliver
    commits_of_this_process_reach_a_subscriber(daphne, mission["group"], owner, worker)


def commits_of_this_process_reach_a_subscriber(daphne: Daphne, g: str, owner: AgentKey, worker: AgentKey) -> None:
    """Three commits made in the test's process, not daphne's, reach a
    subscriber of daphne's in order and within seconds."""
    start = head(g)

    async def scenario() -> tuple[list[int], float]:
        watcher = await Client.open(daphne, worker)
        await watcher.subscribe(g, start)
        await asyncio.sleep(0.5)
        began = time.monotonic()
        top = await in_db_thread(churn, owner, g, worker, 3)
        got = [e["sequence"] for e in await watcher.events(g, top, timeout=10)]
        elapsed = time.monotonic() - began
        await watcher.close()
        return got, elapsed

    got, elapsed = asyncio.run(scenario())
    assert got == list(range(start + 1, head(g) + 1))
    assert len(got) >= 3
    assert elapsed < 5


def test_the_live_read_gives_each_event_as_the_log_stores_it(
    mission: dict[str, str], owner: AgentKey, worker: AgentKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub's live read and head check (an asynchronous connection of its
    own on PostgreSQL, a read-only connection of its own on SQLite) yield the
    same signed Event documents as the ORM's ``as_wire`` (PROTOCOL §15.2),
    EVENT frames around the stored text itself, the stored chain links, and
    the same heads."""
    import json

    from missions.models import GroupEvent
    from missions.readers import LiveReader, read_after
    from tests.delivery.conftest import check_frame

    g = mission["group"]
    start = head(g)
    churn(owner, g, worker, 3)

    import uuid

    import missions.readers as readers

    async def no_thread(*args: Any) -> Any:
        raise AssertionError("read through the thread pool")

    monkeypatch.setattr(readers, "_read_in_thread", no_thread)
    monkeypatch.setattr(readers, "_heads_in_thread", no_thread)

    async def read() -> tuple[list[Any], dict[str, int]]:
        reader = LiveReader()
        try:
            return await reader.read(g, start - 1, 100), await reader.heads([g, str(uuid.uuid4())])
        finally:
            await reader.close()

    live, heads = asyncio.run(read())
    assert heads == {g: head(g)}
    rows = list(GroupEvent.objects.filter(group_id=g, sequence__gt=start - 1).order_by("sequence"))
    assert [dict(e) for e in live] == [row.as_wire() for row in rows]
    assert [(e.prev_hash, e.hash) for e in live] == [(row.prev_hash, row.hash) for row in rows]

    def frame_less_id(text: str) -> dict[str, Any]:
        return {k: v for k, v in json.loads(text).items() if k != "frameId"}

    again = read_after(g, start - 1, 100)
    assert [frame_less_id(e.frame) for e in live] == [frame_less_id(e.frame) for e in again]  # type: ignore[attr-defined]
    for event, row in zip(live, rows, strict=True):
        check_frame(json.loads(event.frame))
        assert event.frame.endswith(',"event":' + row.document + "}")  # the signed bytes, untouched


@pytest.mark.skipif(not os.environ.get("MWP_REDIS_URL"), reason="needs MWP_REDIS_URL (the Redis channel layer)")
def test_the_committing_thread_publishes_where_the_redis_layer_listens() -> None:
    """The synchronous publisher writes on the layer's own group channel and in
    its serialization: a channel added to the Group through the layer receives
    the notice as the layer's own ``group_send`` would deliver it."""
    import uuid

    from channels.layers import get_channel_layer

    from missions.delivery import group_channel, redis_publisher

    publisher = redis_publisher()
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
    monkeypatch.setattr(delivery, "redis_publisher", lambda: down)
    monkeypatch.setattr(delivery, "_joined_here", lambda: lambda _group: True)  # as if a hub here followed g1
    handed: list[tuple[str, int, Any]] = []
    monkeypatch.setattr(delivery._notifier, "head", lambda *head: handed.append(head))
    events = [{"group": "g1", "sequence": 3}]
    delivery.notify_commit(delivery.prepare_commit([("g1", 3, events)], []))
    assert handed == [("g1", 3, events)]
    assert down.down_until > time.monotonic()
    assert not down.publish([("x", b"")])  # still resting: no new attempt


def test_the_in_memory_layer_is_told_only_of_groups_joined_in_this_process(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The in-memory layer reaches this process's consumers only: a commit
    of a Group no consumer here follows (a Celery worker's commit) wakes no
    notifier thread; one that is followed here is handed to it."""
    import uuid

    from channels.layers import InMemoryChannelLayer, get_channel_layer

    import missions.delivery as delivery

    settings.MWP_LOCAL_NOTICES = False
    layer = get_channel_layer()
    if not isinstance(layer, InMemoryChannelLayer):
        pytest.skip("the in-memory layer only")
    monkeypatch.setattr(delivery, "redis_publisher", lambda: None)
    handed: list[tuple[str, int, Any]] = []
    monkeypatch.setattr(delivery._notifier, "head", lambda *head: handed.append(head))
    followed, unfollowed = str(uuid.uuid4()), str(uuid.uuid4())
    asyncio.run(layer.group_add(delivery.group_channel(followed), "hub.channel!x"))
    try:
        delivery.notify_commit(delivery.prepare_commit([(unfollowed, 1, None), (followed, 4, None)], []))
    finally:
        asyncio.run(layer.group_discard(delivery.group_channel(followed), "hub.channel!x"))
    assert handed == [(followed, 4, None)]


def test_file_changes_report_writes_to_the_watched_names_only(tmp_path: Any) -> None:
    """The hub's watch on the embedded database (Linux inotify)."""
    import sys

    from missions.wake_sources import FileChanges

    if not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux's")
    (tmp_path / "db.sqlite3-wal").write_bytes(b"")
    (tmp_path / "other").write_bytes(b"")

    async def scenario() -> list[str]:
        seen: list[str] = []
        changed = asyncio.Event()

        def on_change() -> None:
            seen.append("db")
            changed.set()

        loop = asyncio.get_running_loop()
        watcher = FileChanges(str(tmp_path), {"db.sqlite3", "db.sqlite3-wal"}, on_change)
        assert watcher.start(loop)
        try:
            with open(tmp_path / "other", "ab") as f:
                f.write(b"x")
            await asyncio.sleep(0.2)
            assert seen == []
            with open(tmp_path / "db.sqlite3-wal", "ab") as f:
                f.write(b"x")
            await asyncio.wait_for(changed.wait(), 5)
        finally:
            watcher.stop(loop)
        return seen

    assert asyncio.run(scenario()) == ["db"]


def test_a_commit_in_another_process_arrives_through_the_database_watch(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey, settings: Any
) -> None:
    """Embedded default (SQLite, in-memory layer): a commit of another process
    (here the test's, as a Celery task's would be) cannot reach daphne's
    layer; daphne's hub sees the database written and checks the heads at
    once, long before its periodic check (60 s here)."""
    import sys

    from django.db import connection

    if connection.vendor != "sqlite" or settings.CHANNEL_LAYERS["default"]["BACKEND"].startswith("channels_redis."):
        pytest.skip("the embedded default only")
    if not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux's")
    settings.MWP_LOCAL_NOTICES = False  # this process sends no local notice: only the watch can deliver
    commits_of_this_process_reach_a_subscriber(daphne, mission["group"], owner, worker)
