"""A database failure inside a WebSocket frame answers INTERNAL_ERROR (issue 16 item 10).

The failure is injected where the database driver is called (Django's
cursor wrapper), so everything above it, ``accept()``, the ORM and the
consumer, runs as it does in production. A daphne subprocess cannot be
made to fail that way from the test, so this is the one WebSocket test that
runs the application in-process, through channels' ``WebsocketCommunicator``
and the real routing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import InterfaceError, OperationalError
from django.db.backends import utils as db_utils

from missions.routing import websocket_urlpatterns
from missions.ws_limits import INTERNAL_ERROR_RETRY_AFTER_MS
from tests.conftest import AgentKey, nothing_written
from tests.delivery.conftest import set_roles_envelope
from tests.delivery.test_agent_socket import head
from tests.protocol.normative import normative_errors

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


async def open_agent(token: str) -> WebsocketCommunicator:
    ws = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/v1/agent")
    connected, _ = await ws.connect()
    assert connected
    await ws.send_json_to({"op": "hello", "token": token})
    assert (await ws.receive_json_from(timeout=10))["op"] == "welcome"
    return ws


def assert_internal_error(frame: dict[str, Any], ref: str) -> None:
    document = {k: v for k, v in frame.items() if k not in ("op", "ref")}
    assert normative_errors(document) == [], frame  # §19 inside the frame
    assert {**frame, "occurredAt": "-"} == {
        "op": "error",
        "code": "INTERNAL_ERROR",
        "message": "the server failed and changed nothing; try again",
        "ref": ref,
        "retryable": True,
        "retryAfterMs": INTERNAL_ERROR_RETRY_AFTER_MS,
        "occurredAt": "-",
    }


@pytest.mark.parametrize(
    "error",
    [OperationalError("server closed the connection unexpectedly"), InterfaceError("connection already closed")],
    ids=["operational", "interface"],
)
def test_it_answers_internal_error_to_a_command_when_the_database_fails(
    fault: Fault, mission: dict[str, str], owner: AgentKey, worker: AgentKey, error: Exception
) -> None:
    """issue 16 item 10: a database error inside accept() killed the connection."""
    g = mission["group"]
    envelope = set_roles_envelope(owner, g, worker, ["worker", "reviewer"])
    fault.error = error

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        ws = await open_agent(owner.extra["token"])
        fault.sql = "missions_group"
        await ws.send_json_to({"op": "command", "envelope": envelope})
        failed = await ws.receive_json_from(timeout=10)
        # The same envelope, once the database is back, is accepted on the
        # same connection: nothing was half-done and the socket stayed up.
        fault.sql = None
        await ws.send_json_to({"op": "command", "envelope": envelope})
        retried = await ws.receive_json_from(timeout=10)
        await ws.disconnect()
        return failed, retried

    top = head(g)
    failed, retried = asyncio.run(scenario())
    assert fault.hits > 0
    assert_internal_error(failed, envelope["action_id"])
    assert retried["op"] == "receipt"
    assert retried["receipt"]["action_id"] == envelope["action_id"]
    assert head(g) == top + 1


def test_it_answers_internal_error_to_a_subscribe_and_a_presence_when_the_database_fails(
    fault: Fault, mission: dict[str, str], worker: AgentKey
) -> None:
    """issue 16 item 10, on the read side: subscribe and presence."""
    g = mission["group"]
    top = head(g)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        ws = await open_agent(worker.extra["token"])
        fault.sql = "missions_membership"
        await ws.send_json_to({"op": "subscribe", "group": g, "after": top - 1, "ref": "s1"})
        subscribe = await ws.receive_json_from(timeout=10)
        fault.sql = "missions_agentpresence"
        await ws.send_json_to({"op": "presence", "capacity": {"free": 1}, "ref": "p1"})
        presence = await ws.receive_json_from(timeout=10)
        fault.sql = None
        await ws.send_json_to({"op": "subscribe", "group": g, "after": top - 1})
        event = await ws.receive_json_from(timeout=10)
        await ws.disconnect()
        return subscribe, presence, event

    with nothing_written():
        subscribe, presence, event = asyncio.run(scenario())
    assert_internal_error(subscribe, "s1")
    assert_internal_error(presence, "p1")
    assert (event["op"], event["event"]["sequence"]) == ("event", top)


def test_it_does_not_count_internal_errors_as_bad_frames(fault: Fault, worker: AgentKey) -> None:
    """An outage longer than the bad-frame bound (20 in 10 s) must not close Agents' connections."""

    async def scenario() -> list[str]:
        ws = await open_agent(worker.extra["token"])
        fault.sql = "missions_group"
        codes = []
        for _ in range(30):
            await ws.send_json_to({"op": "subscribe", "group": str(uuid.uuid4()), "after": 0})
            codes.append((await ws.receive_json_from(timeout=10))["code"])
        fault.sql = None
        await ws.send_json_to({"op": "ack", "cursors": []})
        codes.append((await ws.receive_json_from(timeout=10))["code"])
        await ws.disconnect()
        return codes

    assert asyncio.run(scenario()) == ["INTERNAL_ERROR"] * 30 + ["SCHEMA_VALIDATION_FAILED"]


def test_it_recovers_a_subscribe_whose_head_read_failed(
    fault: Fault, mission: dict[str, str], worker: AgentKey
) -> None:
    """issue 16 item 10: the hub's first read of a Group's head failing left a
    half-made feed that every later subscribe to that Group waited on forever."""
    g = mission["group"]
    top = head(g)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        ws = await open_agent(worker.extra["token"])
        # Only the hub's head read (missions/readers.py read_head), not the membership check.
        fault.sql = '"missions_group"."head_hash" AS "head_hash" FROM "missions_group" WHERE'
        await ws.send_json_to({"op": "subscribe", "group": g, "after": top - 1})
        failed = await ws.receive_json_from(timeout=10)
        fault.sql = None
        await ws.send_json_to({"op": "subscribe", "group": g, "after": top - 1})
        event = await ws.receive_json_from(timeout=10)
        await ws.disconnect()
        return failed, event

    failed, event = asyncio.run(scenario())
    assert fault.hits > 0
    assert_internal_error(failed, g)
    assert (event["op"], event["event"]["sequence"]) == ("event", top)
