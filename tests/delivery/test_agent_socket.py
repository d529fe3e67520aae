"""``/ws/v1/agent`` against a real daphne with real ``websockets`` clients (spec 16)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed

from missions.models import AgentCursor, Group, GroupEvent
from tests.conftest import AgentKey, group_revision
from tests.delivery.conftest import Client, Daphne, in_db_thread
from tests.protocol.normative import normative_errors

pytestmark = pytest.mark.django_db(transaction=True)


def churn(owner: AgentKey, group: str, member: AgentKey, n: int) -> int:
    """Append ``n`` Events (role changes of ``member``); the new head."""
    for i in range(n):
        roles = ["worker"] if i % 2 else ["worker", "reviewer"]
        owner.send(
            "membership.set_roles",
            group,
            {"agent": member.id, "roles": roles},
            target={"kind": "group", "id": group, "revision": group_revision(group)},
        )
    return Group.objects.get(id=group).last_sequence


def head(group: str) -> int:
    return Group.objects.get(id=group).last_sequence


@pytest.mark.parametrize("where", ["zero", "middle", "head"])
def test_subscribe_replays_then_follows_live_in_order(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey, where: str
) -> None:
    g = mission["group"]
    top = churn(owner, g, worker, 12)
    after = {"zero": 0, "middle": top // 2, "head": top}[where]

    async def scenario() -> list[int]:
        client = await Client.open(daphne, worker.extra["token"])
        await client.send({"op": "subscribe", "group": g, "after": after})
        got = await client.events(g, top) if after < top else []
        new_top = await in_db_thread(churn, owner, g, worker, 3)
        got += await client.events(g, new_top)
        await client.close()
        return [e["sequence"] for e in got]

    sequences = asyncio.run(scenario())
    assert sequences == list(range(after + 1, head(g) + 1))


def test_events_arrive_exactly_as_stored(daphne: Daphne, mission: dict[str, str], worker: AgentKey) -> None:
    g = mission["group"]
    top = head(g)

    async def scenario() -> list[dict[str, Any]]:
        client = await Client.open(daphne, worker.extra["token"])
        await client.send({"op": "subscribe", "group": g, "after": 0})
        got = await client.events(g, top)
        await client.close()
        return got

    got = asyncio.run(scenario())
    assert got == [e.as_wire() for e in GroupEvent.objects.filter(group_id=g).order_by("sequence")]


def test_restart_mid_stream_then_resume_from_acked_cursor_loses_nothing_MWP_WRK_030(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]
    stop = threading.Event()
    produced: list[int] = []

    def producer() -> None:
        from django.db import connection

        try:
            while not stop.is_set():
                produced.append(churn(owner, g, worker, 1))
        finally:
            connection.close()

    async def scenario() -> tuple[list[int], list[int], int]:
        client = await Client.open(daphne, worker.extra["token"])
        await client.send({"op": "subscribe", "group": g, "after": 0})
        first: list[int] = []
        acked = 0
        try:
            while len(first) < 25:
                frame = await client.recv()
                if frame["op"] == "event":
                    first.append(frame["event"]["sequence"])
                    if len(first) % 5 == 0:
                        acked = first[-1]
                        await client.send({"op": "ack", "cursors": [{"group": g, "sequence": acked}]})
            await asyncio.sleep(0.3)  # let the last ack land
            await in_db_thread(daphne.restart)  # kill -9 mid-stream
        finally:
            await client.ws.close()
        stored = await in_db_thread(lambda: AgentCursor.objects.get(agent_id=worker.id, group_id=g).sequence)
        client = await Client.open(daphne, worker.extra["token"])
        await client.send({"op": "subscribe", "group": g, "after": stored})
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
    assert stored >= 20  # the acked cursor survived the restart
    assert second == list(range(stored + 1, head(g) + 1))  # every Event, in order
    duplicates = set(first) & set(second)
    assert all(s > stored for s in duplicates)  # only around the disconnect
    assert head(g) > len(first)


def test_two_groups_on_one_connection_and_no_foreign_events(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey, worker2: AgentKey
) -> None:
    g1 = mission["group"]
    g2 = str(uuid.uuid4())
    owner.send("mission.create", g2, {"mission": str(uuid.uuid4()), "title": "Other", "objective": "x"})
    owner.send(
        "membership.add",
        g2,
        {"agent": worker.id, "roles": ["worker"]},
        target={"kind": "group", "id": g2, "revision": group_revision(g2)},
    )
    g3 = str(uuid.uuid4())  # worker is no member of this one
    owner.send("mission.create", g3, {"mission": str(uuid.uuid4()), "title": "Secret", "objective": "x"})
    g2_head = head(g2)

    async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
        client = await Client.open(daphne, worker.extra["token"])
        await client.send({"op": "subscribe", "group": g3, "after": 0})
        refused = await client.recv()
        await client.send({"op": "subscribe", "group": g2, "after": 0})
        frames: list[dict[str, Any]] = [{"op": "event", "event": e} for e in await client.events(g2, g2_head)]
        await client.send({"op": "subscribe", "group": g1, "after": 0})
        # Remove the worker from g2, then keep writing to both Groups.
        await in_db_thread(
            lambda: owner.send(
                "membership.remove",
                g2,
                {"agent": worker.id},
                target={"kind": "group", "id": g2, "revision": group_revision(g2)},
            )
        )
        await in_db_thread(churn, owner, g2, owner, 0)
        await in_db_thread(
            lambda: owner.send(
                "membership.add",
                g2,
                {"agent": worker2.id, "roles": ["worker"]},
                target={"kind": "group", "id": g2, "revision": group_revision(g2)},
            )
        )
        top1 = await in_db_thread(churn, owner, g1, worker2, 3)
        deadline = asyncio.get_running_loop().time() + 15
        while asyncio.get_running_loop().time() < deadline:
            try:
                frame = await client.recv(timeout=1.0)
            except TimeoutError:
                if any(f.get("event", {}).get("sequence") == top1 and f["event"]["group"] == g1 for f in frames):
                    break
                continue
            frames.append(frame)
        await client.close()
        events = [f["event"] for f in frames if f["op"] == "event"]
        memberships = [f for f in frames if f["op"] == "membership"]
        return refused, events, memberships

    refused, events, memberships = asyncio.run(scenario())
    assert (refused["op"], refused["code"]) == ("error", "GROUP_NOT_FOUND")  # unseen = absent (issue 16 item 8)
    assert {e["group"] for e in events} <= {g1, g2}
    removal = GroupEvent.objects.get(group_id=g2, type="membership.removed").sequence
    assert [e["sequence"] for e in events if e["group"] == g2] == list(range(1, removal))
    assert [e["sequence"] for e in events if e["group"] == g1] == list(range(1, head(g1) + 1))
    assert {"op": "membership", "group": g2, "roles": [], "active": False}.items() <= memberships[0].items()


def test_bad_frames_get_errors_and_the_connection_stays_up(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]

    async def scenario() -> tuple[list[dict[str, Any]], list[int]]:
        client = await Client.open(daphne, worker.extra["token"])
        await client.send({"op": "subscribe", "group": g, "after": head_now})
        errors = []
        for raw in [
            "{not json",
            json_dumps({"op": "teleport"}),
            json_dumps([1, 2]),
            json_dumps({"op": "subscribe", "group": "nope"}),
            "x" * (1024 * 1024 + 1),
            json_dumps({"op": "ack", "cursors": [{"group": g, "sequence": 10**6}]}),
        ]:
            await client.ws.send(raw)
            errors.append(await client.recv())
        top = await in_db_thread(churn, owner, g, worker, 2)
        got = [e["sequence"] for e in await client.events(g, top)]
        await client.close()
        return errors, got

    head_now = head(g)
    errors, got = asyncio.run(scenario())
    assert [e["op"] for e in errors] == ["error"] * 6
    # Framing (not JSON, no op, unknown op, too large) is PROTOCOL_VIOLATION;
    # a frame member's value is SCHEMA_VALIDATION_FAILED (§6.4, §17.4).
    assert [e["code"] for e in errors] == [
        *("PROTOCOL_VIOLATION", "PROTOCOL_VIOLATION", "PROTOCOL_VIOLATION", "SCHEMA_VALIDATION_FAILED"),
        *("PROTOCOL_VIOLATION", "SCHEMA_VALIDATION_FAILED"),
    ]
    for e in errors:  # the error object inside the frame is the §19 document
        assert normative_errors({k: v for k, v in e.items() if k not in ("op", "ref")}) == [], e
    assert "unknown op" in errors[1]["message"]
    assert "over 1048576 bytes" in errors[4]["message"]
    assert got == [head_now + 1, head_now + 2]


def test_too_many_bad_frames_close_the_connection(daphne: Daphne, worker: AgentKey) -> None:
    async def scenario() -> tuple[int | None, str]:
        client = await Client.open(daphne, worker.extra["token"])
        last = ""
        try:
            for _ in range(50):
                await client.ws.send("{bad")
            while True:
                last = (await client.recv())["message"]
        except ConnectionClosed as closed:
            return (closed.rcvd.code if closed.rcvd else None), last
        return None, last

    code, reason = asyncio.run(scenario())
    assert code == 4008
    assert "more than 20 bad frames" in reason


def test_commands_over_the_socket_answer_with_receipts_and_errors(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]
    good = owner.envelope(
        "membership.set_roles",
        g,
        {"agent": worker.id, "roles": ["reviewer"]},
        target={"kind": "group", "id": g, "revision": group_revision(g)},
    )
    stale = owner.envelope(
        "membership.set_roles",
        g,
        {"agent": worker.id, "roles": ["worker"]},
        target={"kind": "group", "id": g, "revision": 1},
    )

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        client = await Client.open(daphne, owner.extra["token"])
        await client.send({"op": "command", "envelope": good})
        receipt = await client.recv()
        await client.send({"op": "command", "envelope": stale})
        error = await client.recv()
        await client.close()
        return receipt, error

    receipt, error = asyncio.run(scenario())
    assert receipt["op"] == "receipt" and receipt["receipt"]["action_id"] == good["action_id"]
    assert (error["op"], error["code"], error["ref"]) == ("error", "REVISION_CONFLICT", stale["action_id"])


def test_a_replaced_session_closes_the_connection_MWP_WRK_014(daphne: Daphne, worker: AgentKey) -> None:
    async def scenario() -> int | None:
        client = await Client.open(daphne, worker.extra["token"])
        await in_db_thread(worker.open_session)
        try:
            while True:
                await client.recv(timeout=10)
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None

    assert asyncio.run(scenario()) == 4001


def test_hello_with_a_stale_token_is_refused(daphne: Daphne, worker: AgentKey) -> None:
    token = worker.extra["token"]
    worker.open_session()

    async def scenario() -> tuple[dict[str, Any], int | None]:
        client = await Client.open(daphne)
        await client.send({"op": "hello", "token": token})
        error = await client.recv()
        try:
            await client.recv()
        except ConnectionClosed as closed:
            return error, closed.rcvd.code if closed.rcvd else None
        return error, None

    error, code = asyncio.run(scenario())
    assert (error["code"], code) == ("AUTH_STALE_SESSION", 4003)


def json_dumps(value: Any) -> str:
    import json

    return json.dumps(value)
