"""A database failure inside a WebSocket frame answers INTERNAL_ERROR (issue 16 item 10, PROTOCOL §19).

The failure is injected where the database driver is called (Django's
cursor wrapper), so everything above it, ``accept()``, the ORM and the
consumer, runs as it does in production. A daphne subprocess cannot be
made to fail that way from the test, so this is the one WebSocket test that
runs the application in-process, through channels' ``WebsocketCommunicator``
and the real routing.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import InterfaceError, OperationalError
from django.db.backends import utils as db_utils

from missions.routing import websocket_urlpatterns
from missions.ws_limits import INTERNAL_ERROR_RETRY_AFTER_MS
from mwportal.protocol import frames
from mwportal.protocol.handshake import ClientHandshake
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey
from tests.delivery.conftest import AGENT_PATH, check_frame
from tests.delivery.test_agent_socket import POLICY, head, policy_payload

pytestmark = pytest.mark.django_db(transaction=True)


class Fault:
    """Make every statement whose SQL contains ``sql`` fail as the driver would."""

    def __init__(self) -> None:
        self.sql: str | None = None
        self.error: Exception = OperationalError("server closed the connection unexpectedly")
        self.hits = 0


@pytest.fixture
def fault(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fault]:
    state = Fault()
    real = db_utils.CursorWrapper._execute  # type: ignore[attr-defined]  # not in django-stubs: the driver call

    def execute(self: Any, sql: str, params: Any, *args: Any) -> Any:
        if state.sql is not None and state.sql in sql:
            state.hits += 1
            raise state.error
        return real(self, sql, params, *args)

    monkeypatch.setattr(db_utils.CursorWrapper, "_execute", execute)
    yield state


class Socket:
    """An in-process ``/mwp/0.1`` connection through the real routing; every
    frame received is checked against the bundle's frame schema."""

    def __init__(self, ws: WebsocketCommunicator) -> None:
        self.ws = ws

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send_to(text_data=json.dumps(frame))

    async def recv(self) -> dict[str, Any]:
        frame: dict[str, Any] = json.loads(await self.ws.receive_from(timeout=10))
        check_frame(frame)
        return frame

    async def close(self) -> None:
        await self.ws.disconnect()


async def open_agent(agent: AgentKey) -> Socket:
    ws = WebsocketCommunicator(URLRouter(websocket_urlpatterns), AGENT_PATH)
    connected, _ = await ws.connect()
    assert connected
    socket = Socket(ws)
    handshake = ClientHandshake(agent.urn, agent.key)
    await socket.send(handshake.start())
    await socket.send(handshake.receive_challenge(await socket.recv()))
    agent.session_epoch = handshake.receive_accept(await socket.recv()).session_epoch
    return socket


def assert_internal_error(frame: dict[str, Any], **related: str) -> None:
    assert frame["frameType"] == "ERROR", frame
    assert {**frame["error"], "occurredAt": "-"} == {
        "code": "INTERNAL_ERROR",
        "message": "the server failed and changed nothing; try again",
        "retryable": True,
        "retryAfterMs": INTERNAL_ERROR_RETRY_AFTER_MS,
        "occurredAt": "-",
        **related,
    }


def _presence(agent: AgentKey) -> dict[str, Any]:
    return {
        "agentId": agent.urn,
        "sessionEpoch": agent.session_epoch,
        "status": "online",
        "capacity": {"maxSlots": 1, "activeSlots": 0, "availableSlots": 1, "queuedItems": 0},
        "capabilityAvailability": [],
        "lastHeartbeat": "2026-01-01T00:00:00Z",
        "expiresAt": "2026-01-01T00:01:00Z",
    }


@pytest.mark.parametrize(
    "error",
    [OperationalError("server closed the connection unexpectedly"), InterfaceError("connection already closed")],
    ids=["operational", "interface"],
)
def test_it_answers_internal_error_to_a_command_when_the_database_fails(
    fault: Fault, org: dict[str, str], planner: AgentKey, error: Exception
) -> None:
    """issue 16 item 10: a database error inside accept() killed the connection."""
    admin = org["admin_group"]
    fault.error = error
    top = head(admin)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        ws = await open_agent(planner)
        await ws.send(frames.subscribe([(urn(admin), top)]))
        await ws.send(frames.ping())
        assert (await ws.recv())["frameType"] == "PING"  # frames are handled in order: subscribed
        document = await database_sync_to_async(planner.command)(POLICY, admin, policy_payload())
        fault.sql = "missions_group"
        sent = frames.command(document)
        await ws.send(sent)
        failed = await ws.recv()
        # The same Command, once the database is back, is accepted on the
        # same connection: nothing was half-done and the socket stayed up.
        fault.sql = None
        await ws.send(frames.command(document))
        accepted = await ws.recv()
        await ws.close()
        return document, sent, failed, accepted

    document, sent, failed, accepted = asyncio.run(scenario())
    assert fault.hits > 0
    assert_internal_error(failed, relatedActionId=document["actionId"], relatedFrameId=sent["frameId"])
    assert accepted["frameType"] == "EVENT"
    assert accepted["event"]["cause"]["id"] == document["actionId"]
    assert head(admin) == top + 1


def test_it_answers_internal_error_to_a_subscribe_and_a_ping_when_the_database_fails(
    fault: Fault, mission: dict[str, str], worker: AgentKey
) -> None:
    """issue 16 item 10, on the read side: SUBSCRIBE and PING with presence."""
    g = mission["group"]
    top = head(g)

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
        ws = await open_agent(worker)
        fault.sql = "missions_membership"
        subscribe = frames.subscribe([(urn(g), top - 1)])
        await ws.send(subscribe)
        failed_subscribe = await ws.recv()
        fault.sql = "missions_agentpresence"
        ping = frames.ping(presence=_presence(worker))
        await ws.send(ping)
        failed_ping = await ws.recv()
        fault.sql = None
        await ws.send(frames.subscribe([(urn(g), top - 1)]))
        event = await ws.recv()
        await ws.close()
        return [subscribe, failed_subscribe], [ping, failed_ping], event

    (subscribe, failed_subscribe), (ping, failed_ping), event = asyncio.run(scenario())
    assert_internal_error(failed_subscribe, relatedFrameId=subscribe["frameId"], groupId=urn(g))
    assert_internal_error(failed_ping, relatedFrameId=ping["frameId"])
    assert (event["frameType"], event["event"]["sequence"]) == ("EVENT", top)


def test_it_does_not_count_internal_errors_as_bad_frames(fault: Fault, worker: AgentKey) -> None:
    """An outage longer than the bad-frame bound (20 in 10 s) must not close Agents' connections."""

    async def scenario() -> list[str]:
        ws = await open_agent(worker)
        fault.sql = "missions_group"
        codes = []
        for _ in range(30):
            await ws.send(frames.subscribe([(urn(uuid.uuid4()), 0)]))
            codes.append((await ws.recv())["error"]["code"])
        fault.sql = None
        await ws.send(frames.ping())
        codes.append((await ws.recv())["frameType"])
        await ws.close()
        return codes

    assert asyncio.run(scenario()) == ["INTERNAL_ERROR"] * 30 + ["PING"]


def test_it_recovers_a_subscribe_whose_head_read_failed(
    fault: Fault, mission: dict[str, str], worker: AgentKey
) -> None:
    """issue 16 item 10: the hub's first read of a Group's head failing left a
    half-made feed that every later subscribe to that Group waited on forever."""
    g = mission["group"]
    top = head(g)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        ws = await open_agent(worker)
        # Only the hub's head read (missions/readers.py read_head), not the membership check.
        fault.sql = '"missions_group"."head_hash" AS "head_hash" FROM "missions_group" WHERE'
        subscribe = frames.subscribe([(urn(g), top - 1)])
        await ws.send(subscribe)
        failed = await ws.recv()
        fault.sql = None
        await ws.send(frames.subscribe([(urn(g), top - 1)]))
        event = await ws.recv()
        await ws.close()
        return subscribe, failed, event

    subscribe, failed, event = asyncio.run(scenario())
    assert fault.hits > 0
    assert_internal_error(failed, relatedFrameId=subscribe["frameId"], groupId=urn(g))
    assert (event["frameType"], event["event"]["sequence"]) == ("EVENT", top)
