"""``/mwp/0.1`` against a real daphne with real ``websockets`` clients (PROTOCOL §6.3, §16, §17).

Every frame the server sends is checked against the bundle's
``websocket-frame.schema.json`` by the client (``tests.delivery.conftest``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed

from missions.keyregistry import DjangoRegistry
from missions.models import AgentCursor, AgentPresence, Group, GroupEvent, Organization
from mwportal.protocol import frames
from mwportal.protocol.command import Key
from mwportal.protocol.eventdoc import verify_event
from mwportal.protocol.handshake import ClientHandshake
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey, add_member, group_revision
from tests.delivery.conftest import Client, Daphne, in_db_thread, new_mission
from tests.protocol.normative import require_bundle

pytestmark = pytest.mark.django_db(transaction=True)

POLICY = "ext.mwportal.scheduling.priority_policy_set"


@pytest.fixture(autouse=True)
def _bundle() -> None:
    require_bundle()


def churn(owner: AgentKey, group: str, member: AgentKey, n: int, start: int = 0) -> int:
    """``n`` role changes of ``member`` (each appends Events; ``start`` odd
    begins with the smaller set); the new head."""
    for i in range(start, start + n):
        roles = ["worker"] if i % 2 else ["worker", "reviewer"]
        owner.send(
            "membership.change",
            group,
            {"principal": member.actor, "roles": roles},
            expected_revision=group_revision(group),
        )
    return head(group)


def head(group: str) -> int:
    return Group.objects.get(id=group).last_sequence


def policy_payload(weight: int = 1) -> dict[str, Any]:
    """The payload of ``POLICY``: the Organization's priority policy."""
    return {"policy": {"classes": {"normal": weight}, "default_class": "normal"}}


def policy(agent: AgentKey, group: str, weight: int = 1, **kw: Any) -> dict[str, Any]:
    """A simple signed Agent Command of an Organization admin, in the administrative Group."""
    return agent.command(POLICY, group, policy_payload(weight), **kw)


@pytest.mark.parametrize("where", ["zero", "middle", "head"])
def test_hello_then_subscribe_replays_then_follows_live_in_order_spec_6_3_16(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey, where: str
) -> None:
    g = mission["group"]
    top = churn(owner, g, worker, 12)
    after = {"zero": 0, "middle": top // 2, "head": top}[where]
    epoch_before = worker.session_epoch

    async def scenario() -> list[int]:
        client = await Client.open(daphne, worker)
        await client.subscribe(g, after)
        got = await client.events(g, top) if after < top else []
        new_top = await in_db_thread(churn, owner, g, worker, 3)
        got += await client.events(g, new_top)
        await client.close()
        return [e["sequence"] for e in got]

    sequences = asyncio.run(scenario())
    assert sequences == list(range(after + 1, head(g) + 1))
    assert worker.session_epoch == epoch_before + 1  # HELLO issued a new Session Epoch (§6.3)


def test_events_are_the_stored_signed_documents_and_verify_spec_15_2(
    daphne: Daphne, mission: dict[str, str], org: dict[str, str], worker: AgentKey
) -> None:
    g = mission["group"]
    top = head(g)

    async def scenario() -> list[dict[str, Any]]:
        client = await Client.open(daphne, worker)
        await client.subscribe(g, 0)
        got = await client.events(g, top)
        await client.close()
        return got

    got = asyncio.run(scenario())
    stored = list(GroupEvent.objects.filter(group_id=g).order_by("sequence"))
    assert got == [e.as_wire() for e in stored]
    registry = DjangoRegistry(Organization.objects.get(id=org["id"]))
    for event, row in zip(got, stored, strict=True):
        verify_event(json.dumps(event).encode(), registry)  # the Group Authority's signature holds
        assert json.loads(row.document) == event


def test_restart_mid_stream_then_resume_from_acked_cursor_loses_nothing_spec_16(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]
    stop = threading.Event()

    def producer() -> None:
        from django.db import connection

        try:
            flips = 0
            while not stop.is_set():
                churn(owner, g, worker, 1, start=flips)
                flips += 1
        finally:
            connection.close()

    async def scenario() -> tuple[list[int], list[int], int]:
        client = await Client.open(daphne, worker)
        await client.subscribe(g, 0)
        first: list[int] = []
        try:
            while len(first) < 25:
                frame = await client.recv()
                if frame["frameType"] == "EVENT":
                    first.append(frame["event"]["sequence"])
                    if len(first) % 5 == 0:
                        await client.send(frames.ack([(urn(g), first[-1])]))
            # Frames are handled in order: once the PING is answered, the ACKs are stored.
            await client.send(frames.ping())
            while (await client.recv())["frameType"] != "PING":
                pass
            await in_db_thread(daphne.restart)  # kill -9 mid-stream
        finally:
            await client.ws.close()
        stored = await in_db_thread(lambda: AgentCursor.objects.get(agent_id=worker.id, group_id=g).sequence)
        client = await Client.open(daphne, worker)
        await client.subscribe(g, stored)
        await asyncio.sleep(1.0)
        stop.set()
        await asyncio.sleep(0.3)
        final = await in_db_thread(head, g)
        second = [e["sequence"] for e in await client.events(g, final)]
        await client.close()
        return first, second, stored

    thread = threading.Thread(target=producer)
    thread.start()
    try:
        first, second, stored = asyncio.run(scenario())
    finally:
        stop.set()
        thread.join()
    assert first == list(range(1, len(first) + 1))
    assert stored >= 20  # the acknowledged Cursor survived the restart
    assert second == list(range(stored + 1, head(g) + 1))  # every Event, in order
    assert all(s > stored for s in set(first) & set(second))  # duplicates only around the disconnect


def test_an_unseen_group_is_group_not_found_exactly_like_an_absent_one_spec_17_2(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey
) -> None:
    secret = new_mission(owner, coordinator, "Secret")  # worker is no member of this one
    absent = str(uuid.uuid4())

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        client = await Client.open(daphne, worker)
        unseen_frame = await client.subscribe(secret, 0)
        unseen = await client.error()
        absent_frame = await client.subscribe(absent, 0)
        missing = await client.error()
        await client.close()
        return unseen_frame, unseen, absent_frame, missing

    unseen_frame, unseen, absent_frame, missing = asyncio.run(scenario())
    assert unseen["code"] == "GROUP_NOT_FOUND"
    assert (unseen["groupId"], missing["groupId"]) == (urn(secret), urn(absent))
    assert (unseen["relatedFrameId"], missing["relatedFrameId"]) == (unseen_frame["frameId"], absent_frame["frameId"])

    def same(doc: dict[str, Any]) -> str:
        # What the client sent or what time it is aside, nothing differs.
        rest = {k: v for k, v in doc.items() if k not in ("groupId", "relatedFrameId", "occurredAt")}
        return json.dumps(rest, sort_keys=True)

    assert same(unseen) == same(missing)


def test_two_groups_on_one_connection_and_an_ended_membership_stops_spec_17_2(
    daphne: Daphne,
    mission: dict[str, str],
    owner: AgentKey,
    coordinator: AgentKey,
    worker: AgentKey,
    worker2: AgentKey,
) -> None:
    g1 = mission["group"]
    g2 = new_mission(owner, coordinator, "Other")
    add_member(owner, g2, worker, ["worker"])
    g2_head = head(g2)

    async def scenario() -> list[dict[str, Any]]:
        client = await Client.open(daphne, worker)
        await client.send(frames.subscribe([(urn(g2), 0), (urn(g1), 0)]))
        seen = await client.events(g2, g2_head)
        await in_db_thread(
            lambda: owner.send("membership.end", g2, {"principal": worker.actor}, expected_revision=group_revision(g2))
        )
        await in_db_thread(lambda: add_member(owner, g2, worker2, ["worker"]))  # after the end: not for worker
        top1 = await in_db_thread(churn, owner, g1, worker, 3)
        deadline = asyncio.get_running_loop().time() + 15
        while asyncio.get_running_loop().time() < deadline:
            try:
                frame = await client.recv(timeout=1.0)
            except TimeoutError:
                if any(e.get("sequence") == top1 and e.get("groupId") == urn(g1) for e in seen):
                    break
                continue
            if frame["frameType"] == "EVENT":
                seen.append(frame["event"])
        await client.close()
        return seen

    seen = asyncio.run(scenario())
    assert {e["groupId"] for e in seen} == {urn(g1), urn(g2)}
    ended = GroupEvent.objects.get(group_id=g2, type="membership.ended").sequence
    # g2 up to and including the Event that ended the Membership, nothing after.
    assert [e["sequence"] for e in seen if e["groupId"] == urn(g2)] == list(range(1, ended + 1))
    assert [e["sequence"] for e in seen if e["groupId"] == urn(g1)] == list(range(1, head(g1) + 1))


def test_bad_frames_get_errors_and_the_connection_stays_up_spec_17_1(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]
    head_now = head(g)
    sub = frames.subscribe([(urn(g), 0)])

    async def scenario() -> tuple[list[dict[str, Any]], list[int]]:
        client = await Client.open(daphne, worker)
        await client.subscribe(g, head_now)
        bad: list[str | bytes] = [
            "{not json",
            json.dumps({**frames.ping(), "frameType": "TELEPORT"}),
            json.dumps([1, 2]),
            '{"frameType": "PING", "frameType": "PING"}',
            json.dumps({**sub, "groups": [{"groupId": "nope", "afterSequence": 0}]}),
            "x" * (1024 * 1024 + 1),
            json.dumps(frames.ack([(urn(g), 10**6)])),
            b"\x00\x01binary",
        ]
        errors = []
        for raw in bad:
            await client.ws.send(raw)
            errors.append(await client.error())
        top = await in_db_thread(churn, owner, g, worker, 2)
        got = [e["sequence"] for e in await client.events(g, top)]
        await client.close()
        return errors, got

    errors, got = asyncio.run(scenario())
    # Framing (not JSON, duplicate members, too large, binary) is PROTOCOL_VIOLATION;
    # a frame that is JSON but not a frame shape is SCHEMA_VALIDATION_FAILED (§17.1, §17.4).
    assert [e["code"] for e in errors] == [
        "PROTOCOL_VIOLATION",
        "SCHEMA_VALIDATION_FAILED",
        "SCHEMA_VALIDATION_FAILED",
        "PROTOCOL_VIOLATION",
        "SCHEMA_VALIDATION_FAILED",
        "PROTOCOL_VIOLATION",
        "SCHEMA_VALIDATION_FAILED",
        "PROTOCOL_VIOLATION",
    ]
    assert errors[3]["details"]["reason"] == "duplicate-member"
    assert errors[5]["details"]["reason"] == "frame-too-large"
    assert errors[7]["details"]["reason"] == "binary-message"
    assert got == list(range(head_now + 1, head(g) + 1))  # the subscription lived through all of it


def test_too_many_bad_frames_close_the_connection(daphne: Daphne, worker: AgentKey) -> None:
    async def scenario() -> tuple[int | None, str]:
        client = await Client.open(daphne, worker)
        last = ""
        try:
            for _ in range(50):
                await client.ws.send("{bad")
            while True:
                last = (await client.recv())["error"]["message"]
        except ConnectionClosed as closed:
            return (closed.rcvd.code if closed.rcvd else None), last

    code, reason = asyncio.run(scenario())
    assert code == 4008
    assert "more than 20 bad frames" in reason


def test_a_command_is_answered_by_its_event_or_by_an_error_naming_it_spec_17(
    daphne: Daphne, org: dict[str, str], planner: AgentKey
) -> None:
    """DESIGN §5: a WebSocket has no receipt frame; the EVENT whose ``cause``
    is the Command says it was accepted, an ERROR with ``relatedActionId`` that it was not."""
    admin = org["admin_group"]

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        client = await Client.open(daphne, planner)
        await client.subscribe(admin, await in_db_thread(head, admin))
        good = await in_db_thread(policy, planner, admin)
        await client.command(good)
        frame = await client.recv()
        bad = await in_db_thread(lambda: planner.command(POLICY, admin, {"policy": 7}))
        sent = await client.command(bad)
        error = await client.error()
        await client.close()
        return good, frame, bad, sent, error

    good, frame, bad, sent, error = asyncio.run(scenario())
    assert frame["frameType"] == "EVENT"
    assert frame["event"]["cause"] == {"type": "command", "id": good["actionId"]}
    assert frame["event"]["kind"] == "ext.mwportal.scheduling.priority_policy_changed"
    assert (error["code"], error["relatedActionId"]) == ("SCHEMA_VALIDATION_FAILED", bad["actionId"])
    assert error["relatedFrameId"] == sent["frameId"]
    assert error["details"]["field"] == "/payload/policy"


def test_a_new_session_epoch_fences_the_old_socket_and_its_commands_spec_6_3(
    daphne: Daphne, org: dict[str, str], planner: AgentKey
) -> None:
    admin = org["admin_group"]

    async def scenario() -> tuple[list[dict[str, Any]], int | None, int, int, dict[str, Any], dict[str, Any]]:
        first = await Client.open(daphne, planner)
        old_epoch = planner.session_epoch
        second = await Client.open(daphne, planner)
        new_epoch = planner.session_epoch
        fenced, code = await first.until_closed()
        stale = await in_db_thread(lambda: policy(planner, admin, session_epoch=old_epoch))
        await second.command(stale)
        error = await second.error()
        ping = frames.ping()
        await second.send(ping)
        pong = await second.recv()
        await second.close()
        return fenced, code, old_epoch, new_epoch, {"stale": stale, "error": error}, {"ping": ping, "pong": pong}

    fenced, code, old_epoch, new_epoch, command, liveness = asyncio.run(scenario())
    assert new_epoch == old_epoch + 1
    assert [f["error"]["code"] for f in fenced] == ["AUTH_STALE_SESSION"]
    assert fenced[0]["error"]["fatal"] is True
    assert code == 4001
    # The old epoch's Command is fenced on a live socket too.
    assert (command["error"]["code"], command["error"]["relatedActionId"]) == (
        "AUTH_STALE_SESSION",
        command["stale"]["actionId"],
    )
    assert liveness["pong"]["replyToNonce"] == liveness["ping"]["nonce"]  # still up


@pytest.mark.parametrize("who", ["wrong-key", "unknown-agent", "another-agents-key"])
def test_a_hello_that_does_not_prove_the_key_is_refused_alike_spec_6_3(
    daphne: Daphne, worker: AgentKey, worker2: AgentKey, who: str
) -> None:
    agent_id, key = {
        "wrong-key": (worker.urn, Key(worker.key.key_id, Key.generate().seed)),
        "unknown-agent": (urn(uuid.uuid4()), Key.generate()),
        "another-agents-key": (worker.urn, worker2.key),
    }[who]
    epoch = worker.session_epoch

    async def scenario() -> tuple[list[dict[str, Any]], int | None]:
        client = await Client.open(daphne)
        handshake = ClientHandshake(agent_id, key)
        await client.send(handshake.start())
        await client.send(handshake.receive_challenge(await client.recv()))
        return await client.until_closed()

    got, code = asyncio.run(scenario())
    assert [(f["error"]["code"], f["error"]["message"]) for f in got] == [
        ("AUTH_INVALID_SIGNATURE", "the HELLO challenge signature could not be verified")
    ]
    assert code == 4003
    assert Group.objects.exists() and worker.session_epoch == epoch  # no session was opened


def test_a_ping_is_answered_with_its_nonce_and_its_presence_stored_spec_17_3(daphne: Daphne, worker: AgentKey) -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        client = await Client.open(daphne, worker)
        presence = {
            "agentId": worker.urn,
            "sessionEpoch": worker.session_epoch,
            "status": "online",
            "capacity": {"maxSlots": 4, "activeSlots": 1, "availableSlots": 3, "queuedItems": 0},
            "capabilityAvailability": [],
            "lastHeartbeat": "2026-01-01T00:00:00Z",
            "expiresAt": "2026-01-01T00:01:00Z",
        }
        ping = frames.ping(presence=presence)
        await client.send(ping)
        pong = await client.recv()
        stored = await in_db_thread(lambda: AgentPresence.objects.get(agent_id=worker.id).capacity)
        stale = frames.ping(presence={**presence, "sessionEpoch": worker.session_epoch + 5})
        await client.send(stale)
        refused = await client.error()
        await client.close()
        return ping, pong, stored, refused

    ping, pong, stored, refused = asyncio.run(scenario())
    assert pong["frameType"] == "PING" and pong["replyToNonce"] == ping["nonce"]
    assert pong["nonce"] != ping["nonce"]
    assert stored == {"maxSlots": 4, "activeSlots": 1, "availableSlots": 3, "queuedItems": 0}
    assert refused["code"] == "AUTH_STALE_SESSION"


def test_an_attention_filter_changes_live_delivery_only_spec_17_2(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]

    async def scenario() -> tuple[list[dict[str, Any]], int]:
        client = await Client.open(daphne, worker)
        await client.subscribe(g, 0, {"eventKinds": ["membership.changed"]})
        top = await in_db_thread(churn, owner, g, worker, 3)
        got = await client.events(g, top)
        # The filter left Events out of delivery, not out of the Cursor: ACK the head.
        await client.send(frames.ack([(urn(g), top)]))
        await client.send(frames.ping())
        await client.recv()  # frames are handled in order: the ACK is stored
        await client.close()
        return got, top

    got, top = asyncio.run(scenario())
    kinds = list(GroupEvent.objects.filter(group_id=g).order_by("sequence").values_list("type", flat=True))
    assert "mission.created" in kinds  # the history keeps everything
    assert {e["kind"] for e in got} == {"membership.changed"}
    assert [e["sequence"] for e in got] == [s for s, k in enumerate(kinds, start=1) if k == "membership.changed"]
    assert AgentCursor.objects.get(agent_id=worker.id, group_id=g).sequence == top


@pytest.mark.parametrize("order", ["response-first", "init-twice", "subscribe-first"])
def test_a_hello_out_of_order_is_refused_spec_6_3(daphne: Daphne, worker: AgentKey, order: str) -> None:
    """The four phases come in their order; anything else before
    ``server_accept`` is refused (a HELLO out of turn ends the connection)."""

    async def scenario() -> tuple[list[dict[str, Any]], int | None]:
        client = await Client.open(daphne)
        handshake = ClientHandshake(worker.urn, worker.key)
        init = handshake.start()
        if order == "response-first":
            await client.send(frames.hello_client_response(worker.urn, worker.key.key_id, init["clientNonce"],
                                                           frames.new_nonce(), frames.new_nonce(64)))  # fmt: skip
        elif order == "init-twice":
            await client.send(init)
            assert (await client.recv())["phase"] == "server_challenge"
            await client.send(ClientHandshake(worker.urn, worker.key).start())
        else:
            await client.subscribe(str(uuid.uuid4()), 0)
            got = [await client.recv()]
            await client.close()
            return got, None
        return await client.until_closed()

    got, code = asyncio.run(scenario())
    errors = [f["error"] for f in got]
    if order == "subscribe-first":
        assert [e["code"] for e in errors] == ["AUTH_REQUIRED"]  # answered; the HELLO may still come
        return
    assert [(e["code"], e["details"]["reason"]) for e in errors] == [("PROTOCOL_VIOLATION", "hello-out-of-order")]
    assert code == 4003
