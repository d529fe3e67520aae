"""Commit notices between the processes of one machine (missions.local_notices).

A commit sends each Group's head notice, with its Events, straight to every
hub serving the same database on this machine, ahead of the channel layer.
It only ever saves latency: a notice that cannot be sent, or that does not
continue a hub's feed, leaves delivery to the layer, the database watch and
the periodic head check (spec 16: each Group in sequence order; DESIGN §4)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import stat
import time
from typing import Any

import pytest

from missions import local_notices
from missions.delivery import (
    MAX_CARRIED_BYTES,
    head_notice,
    local_notice,
    membership_notice,
    notice_bytes,
    session_notice,
)
from missions.hub import Hub, get_hub
from tests.conftest import AgentKey, group_revision
from tests.delivery.conftest import Client, Daphne, in_db_thread
from tests.delivery.test_agent_socket import head
from tests.delivery.test_carried_events import Following, Recorder, until
from tests.delivery.test_live_path import commits_of_this_process_reach_a_subscriber


@pytest.fixture
def notice_dir(tmp_path: Any, settings: Any) -> str:
    path = tmp_path / "notices"
    settings.MWP_LOCAL_NOTICES = True
    settings.MWP_NOTICE_DIR = str(path)
    found = local_notices.directory()
    assert found == str(path)
    return found


def _received(receiver: local_notices.Receiver) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    receiver.handle = got.append
    return got


def test_the_directory_is_made_private_and_one_that_is_not_turns_notices_off(
    tmp_path: Any, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Only the service's own user may send a hub a notice: the directory is
    created with mode 0700, and one that others can enter is refused."""
    settings.MWP_LOCAL_NOTICES = True
    settings.MWP_NOTICE_DIR = str(tmp_path / "fresh")
    made = local_notices.directory()
    assert made is not None
    assert stat.S_IMODE(os.lstat(made).st_mode) == 0o700

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    settings.MWP_NOTICE_DIR = str(shared)
    with caplog.at_level(logging.WARNING, logger="missions.local_notices"):
        assert local_notices.directory() is None
    assert "not a directory private to this user" in caplog.text

    settings.MWP_LOCAL_NOTICES = False
    settings.MWP_NOTICE_DIR = str(tmp_path / "fresh")
    assert local_notices.directory() is None


def test_a_notice_reaches_every_hub_socket_and_a_gone_hub_is_cleared(notice_dir: str) -> None:
    async def scenario() -> tuple[list[Any], list[Any], set[str], list[str]]:
        loop = asyncio.get_running_loop()
        first = local_notices.Receiver(notice_dir, lambda m: None)
        second = local_notices.Receiver(notice_dir, lambda m: None)
        assert first.start(loop) and second.start(loop)
        got_first, got_second = _received(first), _received(second)
        # A hub killed without removing its socket: bound once, then closed.
        gone = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        gone.bind(os.path.join(notice_dir, "1-dead" + local_notices.SUFFIX))
        gone.close()
        sender = local_notices.Sender(notice_dir)
        assert len(sender.hubs()) == 3
        took = sender.send([notice_bytes(head_notice("g", 7, None), local_notices.encode)])
        for _ in range(50):
            if got_first and got_second:
                break
            await asyncio.sleep(0.01)
        left = sorted(os.listdir(notice_dir))
        first.stop(loop)
        second.stop(loop)
        return got_first, got_second, took, left

    got_first, got_second, took, left = asyncio.run(scenario())
    expected = {"type": "group.head", "group": "g", "sequence": 7, "events": None}
    assert got_first == [expected] and got_second == [expected]
    assert took == set(left) and len(left) == 2  # both live hubs, by name
    assert "1-dead.sock" not in left  # the dead hub's socket was removed


def test_a_stopped_hub_removes_its_socket_and_the_sender_sees_the_change(notice_dir: str) -> None:
    async def scenario() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        sender = local_notices.Sender(notice_dir)
        assert sender.hubs() == ()
        receiver = local_notices.Receiver(notice_dir, lambda m: None)
        assert receiver.start(loop)
        during = len(sender.hubs())
        receiver.stop(loop)
        return during, len(sender.hubs())

    assert asyncio.run(scenario()) == (1, 0)
    assert os.listdir(notice_dir) == []


def test_a_full_hub_queue_drops_the_notice_without_failing_the_commit(notice_dir: str) -> None:
    """A hub that does not read (busy, or stuck) never blocks nor fails a
    committing thread: what does not fit is dropped, and that hub learns of
    the commit from the layer or the head check instead."""
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(os.path.join(notice_dir, "2-stuck" + local_notices.SUFFIX))
    try:
        sender = local_notices.Sender(notice_dir)
        data = notice_bytes(head_notice("g", 1, [{"pad": "x" * 30_000}]), local_notices.encode)
        results = [sender.send([data]) for _ in range(400)]
        assert results[0] == {"2-stuck.sock"}
        assert set() in results  # the queue filled up; sending went on without raising
    finally:
        receiver.close()


def test_an_oversized_notice_goes_without_its_events() -> None:
    big = head_notice("g", 3, [{"sequence": 3, "body": {"blob": "x" * (MAX_CARRIED_BYTES + 1)}}])
    data = notice_bytes(big, local_notices.encode)
    assert len(data) < 200
    assert json.loads(data) == {"type": "group.head", "group": "g", "sequence": 3, "events": None}
    small = head_notice("g", 3, [{"sequence": 3}])
    assert json.loads(notice_bytes(small, local_notices.encode)) == small


def test_a_commits_notices_go_in_as_few_datagrams_as_hold_them_and_arrive_in_order(notice_dir: str) -> None:
    """One datagram per commit in the common case (one send per hub, one
    wake-up of it); notices that would make a datagram too big start the
    next one; the hub gets each notice, in order."""
    big = [b"x" * 3000 for _ in range(3)]  # as the hub sees them these are malformed; the sizes count here
    assert local_notices.pack([b"{}", b'{"a":1}']) == [b'[{},{"a":1}]']
    assert local_notices.pack([]) == []
    notices = [notice_bytes(head_notice("g", seq, [{"sequence": seq, "pad": "y" * 30_000}]), local_notices.encode)
               for seq in range(1, 8)]  # fmt: skip
    notices.append(local_notices.encode(local_notice(*session_notice("a", 2))))
    datagrams = local_notices.pack(notices)
    assert len(datagrams) == 4 and all(len(d) <= local_notices.MAX_DATAGRAM for d in datagrams)
    assert len(local_notices.pack(big)) == 1

    async def scenario() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        receiver = local_notices.Receiver(notice_dir, lambda m: None)
        assert receiver.start(loop)
        got = _received(receiver)
        assert local_notices.Sender(notice_dir).send(datagrams) == {receiver.name}
        for _ in range(100):
            if len(got) == len(notices):
                break
            await asyncio.sleep(0.01)
        receiver.stop(loop)
        return got

    got = asyncio.run(scenario())
    assert [m.get("sequence", m["type"]) for m in got] == [1, 2, 3, 4, 5, 6, 7, "agent.session"]


def test_a_malformed_datagram_is_dropped_and_the_next_notice_still_taken(
    notice_dir: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> list[Any]:
        loop = asyncio.get_running_loop()
        receiver = local_notices.Receiver(notice_dir, lambda m: None)
        assert receiver.start(loop)
        got = _received(receiver)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as raw:
            raw.sendto(b"\xff not json", receiver.path)
            raw.sendto(b"[1, 2]", receiver.path)
            raw.sendto(notice_bytes(head_notice("g", 2, None), local_notices.encode), receiver.path)
        for _ in range(50):
            if got:
                break
            await asyncio.sleep(0.01)
        receiver.stop(loop)
        return got

    with caplog.at_level(logging.WARNING, logger="missions.local_notices"):
        got = asyncio.run(scenario())
    assert [m["sequence"] for m in got] == [2]
    assert "malformed commit notice" in caplog.text and "not an object" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_a_hub_takes_carried_events_from_its_socket_without_a_read(
    notice_dir: str, org: dict[str, str], planner: AgentKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub's socket feeds the same check as the layer's notices: Events
    that continue the feed are sent at once, with no database read; one that
    leaves a gap makes the hub read after its head."""
    g = org["admin_group"]
    top = head(g)
    following = Following(g, monkeypatch)
    recorder = Recorder()

    async def scenario() -> None:
        hub = following.hub
        hub.loop = asyncio.get_running_loop()
        hub._receive_local_notices()
        assert hub.notices is not None
        await following.subscribe(top, recorder)
        carried = await following.commit(planner, 2)
        sender = local_notices.Sender(notice_dir)
        continuing = following.notice(carried[:1], top + 1)
        sender.send([notice_bytes(continuing, local_notices.encode)])
        await until(lambda: len(recorder.got) == 1)
        assert following.reads == []
        sender.send([notice_bytes(following.notice(None, top + 2), local_notices.encode)])  # the head alone: a read
        await until(lambda: len(recorder.got) == 2)
        await following.close()
        hub.release()

    asyncio.run(scenario())
    assert recorder.got == [("now", top + 1), ("now", top + 2)]
    assert following.reads == [top + 1]


def test_the_hub_of_a_closed_loop_gives_up_its_socket(notice_dir: str) -> None:
    async def start() -> Hub:
        return await get_hub()

    first = asyncio.run(start())
    assert first.notices is not None
    path = first.notices.path
    assert os.path.exists(path)
    second = asyncio.run(start())  # a new loop: the old loop's hub is released
    assert second is not first
    assert first.notices is None and not os.path.exists(path)
    second.release()


def test_a_hub_hands_an_agents_notices_to_its_connections_in_order(notice_dir: str) -> None:
    """An Agent's notices from a commit on this machine come through the
    socket too, and the hub hands them to that Agent's connections in this
    process, one at a time in the order they came; no one else's."""
    got: list[tuple[str, Any]] = []

    async def first(message: dict[str, Any]) -> None:
        got.append(("first", message.get("membership_epoch", message.get("session_epoch"))))
        await asyncio.sleep(0.01)  # a handler that waits does not let the next notice overtake it

    async def second(message: dict[str, Any]) -> None:
        got.append(("second", message.get("membership_epoch", message.get("session_epoch"))))

    async def scenario() -> None:
        hub = Hub()
        hub.loop = asyncio.get_running_loop()
        hub._receive_local_notices()
        handing = asyncio.create_task(hub._hand_over_agent_notices())
        hub.listen_agent("a", first)
        hub.listen_agent("a", second)
        hub.listen_agent("b", second)
        hub.unlisten_agent("b", second)
        sender = local_notices.Sender(notice_dir)
        notices = [membership_notice("g", "a", ["worker"], 2, True), membership_notice("g", "b", [], 3, False),
                   session_notice("a", 7), membership_notice("g", "a", [], 4, False)]  # fmt: skip
        assert sender.send([local_notices.encode(local_notice(*n)) for n in notices])
        for _ in range(100):
            if len(got) == 6:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        handing.cancel()
        hub.release()

    asyncio.run(scenario())
    assert [epoch for who, epoch in got if who == "first"] == [2, 7, 4]
    assert sorted(got) == sorted([(w, e) for e in (2, 7, 4) for w in ("first", "second")])


def test_a_connection_takes_an_agent_notice_it_already_had_as_old_news() -> None:
    """A notice may come twice (from this machine's socket and through the
    channel layer), the second copy after a newer notice: a late removal does
    not stop a subscription made after a re-admission, and an older session
    does not close the connection (PROTOCOL §6.3)."""
    from missions.agent_socket import AgentConsumer

    consumer = AgentConsumer()
    consumer.session_epoch = 3
    consumer.epochs = {"g": 2}
    consumer.closing = False
    stopped: list[str] = []
    sent: list[dict[str, Any]] = []
    closed: list[int] = []

    async def stop_stream(group_id: str) -> None:
        stopped.append(group_id)

    async def send_frame(frame: dict[str, Any]) -> None:
        sent.append(frame)

    async def close(code: int | None = None, reason: str | None = None) -> None:
        closed.append(code or 0)

    consumer.stop_stream = stop_stream  # type: ignore[method-assign]
    consumer.send_frame = send_frame  # type: ignore[method-assign]
    consumer.close = close  # type: ignore[method-assign]

    def notice(roles: list[str], epoch: int, active: bool) -> dict[str, Any]:
        return local_notice(*membership_notice("g", "a", roles, epoch, active))

    async def scenario() -> None:
        await consumer._agent_notice(notice(["worker"], 3, True))
        await consumer._agent_notice(notice([], 1, False))  # an old removal, late
        assert stopped == []
        await consumer._agent_notice(notice([], 4, False))
        assert stopped == ["g"]
        await consumer._agent_notice(notice(["worker"], 5, True))  # admitted again (and subscribed again)
        await consumer._agent_notice(notice([], 4, False))  # the removal's second copy
        assert stopped == ["g"]
        await consumer._agent_notice(local_notice(*session_notice("a", 2)))  # an older session's
        await consumer._agent_notice(local_notice(*session_notice("a", 3)))  # its own
        assert closed == []
        await consumer._agent_notice(local_notice(*session_notice("a", 4)))  # a newer session

    asyncio.run(scenario())
    assert [f["error"]["code"] for f in sent] == ["AUTH_STALE_SESSION"]
    assert closed == [4001]


@pytest.fixture
def head_poll_seconds() -> float:
    return 60.0  # far longer than the test waits


@pytest.fixture
def daphne_env() -> dict[str, str | None]:
    # The in-memory layer and no database watch: daphne can hear of this
    # process's commits only through its notice socket (or in 60 s).
    return {"MWP_REDIS_URL": None, "MWP_DATABASE_WATCH": "0"}


@pytest.mark.django_db(transaction=True)
def test_a_commit_in_another_process_arrives_through_the_local_notice(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey, settings: Any
) -> None:
    """Commits of the test's process (as a Celery task's or a management
    command's would be) reach daphne's subscriber with no channel layer
    between the processes, no file watch and no periodic check in time."""
    settings.MWP_LOCAL_NOTICES = True
    settings.MWP_NOTICE_DIR = ""
    assert local_notices.directory() is not None
    commits_of_this_process_reach_a_subscriber(daphne, mission["group"], owner, worker)


@pytest.mark.django_db(transaction=True)
def test_a_membership_end_and_a_new_session_in_another_process_reach_the_connection_at_once(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey, settings: Any
) -> None:
    """The end of an Agent's Membership, then a new session, committed in
    the test's process (as a Celery task's or a management command's would
    be) reach that Agent's connection to daphne at once: the EVENT ending
    the Membership, then AUTH_STALE_SESSION and the close of the replaced
    session (PROTOCOL §6.3), with no channel layer between the processes and
    the agent check minutes away."""
    settings.MWP_LOCAL_NOTICES = True
    settings.MWP_NOTICE_DIR = ""
    g = mission["group"]

    def end() -> None:
        owner.send("membership.end", g, {"principal": worker.actor}, expected_revision=group_revision(g))

    async def scenario() -> tuple[dict[str, Any], float, list[dict[str, Any]], int | None, float]:
        client = await Client.open(daphne, worker)
        await client.subscribe(g, await in_db_thread(head, g))
        began = time.monotonic()
        await in_db_thread(end)
        frame = await client.recv(timeout=10)
        changed = time.monotonic() - began
        began = time.monotonic()
        await in_db_thread(worker.open_session)
        got, code = await client.until_closed()
        return frame, changed, got, code, time.monotonic() - began

    frame, changed, got, code, replaced = asyncio.run(scenario())
    assert (frame["event"]["kind"], frame["event"]["payload"]["principal"]) == ("membership.ended", worker.actor)
    assert [f["error"]["code"] for f in got] == ["AUTH_STALE_SESSION"]
    assert code == 4001
    assert changed < 5 and replaced < 5


needs_redis = pytest.mark.skipif(not os.environ.get("MWP_REDIS_URL"), reason="needs MWP_REDIS_URL (the Redis layer)")


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The Redis publisher, on a hub registry of this test's own."""
    import uuid

    from missions import delivery

    publisher = delivery.redis_publisher()
    assert publisher is not None
    monkeypatch.setattr(publisher, "registry", f"test:mwp:hubs:{uuid.uuid4().hex}")
    monkeypatch.setattr(publisher, "listening", None)
    yield publisher
    publisher.client.delete(publisher.registry)
    publisher.listening = None


def _fresh(publisher: Any) -> Any:
    publisher.listening = None  # read the registry again, not its cached copy
    return publisher


@needs_redis
def test_the_hub_registry_says_whether_a_hub_the_local_notices_missed_listens(registry: Any) -> None:
    registry.announce("a.sock")
    assert not _fresh(registry).listening_elsewhere({"a.sock"})
    registry.announce("b.remote")  # a hub on another machine
    assert _fresh(registry).listening_elsewhere({"a.sock"})
    registry.withdraw("b.remote")
    assert not _fresh(registry).listening_elsewhere({"a.sock"})
    assert _fresh(registry).listening_elsewhere(set())  # a's queue was full: it did not take the notice


@needs_redis
@pytest.mark.parametrize("case", ["all local", "one elsewhere", "queue full", "registry unreadable"])
def test_with_redis_notices_are_published_unless_every_listening_hub_took_them_locally(
    registry: Any, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """A commit's notices (heads and Agents') go through Redis only when a hub
    that is listening did not take them from its socket: on one machine,
    waking Redis would only compete with the delivery."""
    from missions import delivery

    class _Sender:
        def send(self, datagrams: list[bytes]) -> set[str]:
            return set() if case == "queue full" else {"a.sock"}

    published: list[list[tuple[str, bytes]]] = []
    monkeypatch.setattr(registry, "publish", lambda payloads: published.append(payloads) or True)
    registry.announce("a.sock")
    if case == "one elsewhere":
        registry.announce("b.remote")
    if case == "registry unreadable":

        def down(*args: Any) -> Any:
            raise ConnectionError("Redis is unreachable")

        monkeypatch.setattr(registry.client, "zrangebyscore", down)
    prepared = delivery.CommitNotices(
        heads=[("g", 1, None)],
        notices=[("mwp.agent.x", {"type": "agent.session", "session_epoch": 2})],
        payloads=[("head", b"h"), ("agent", b"a")],
        local=[b"{}", b"{}"],
        sender=_Sender(),  # type: ignore[arg-type]
    )
    delivery.notify_commit(prepared)
    if case == "all local":
        assert published == []
    else:
        assert published == [[("head", b"h"), ("agent", b"a")]]


@needs_redis
def test_a_hub_enters_the_registry_when_it_starts_and_leaves_when_released(notice_dir: str) -> None:
    from missions import delivery

    publisher = delivery.redis_publisher()
    assert publisher is not None

    async def start() -> Hub:
        return await get_hub()

    def listed() -> set[str]:
        return {n.decode() for n in publisher.client.zrange(publisher.registry, 0, -1)}

    hub = asyncio.run(start())
    assert hub.notices is not None and hub.registry_name == hub.notices.name
    assert hub.registry_name in listed()
    name = hub.registry_name
    hub.release()
    assert name not in listed()
