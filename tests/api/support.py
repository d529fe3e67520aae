"""Shared helpers of the REST suites (DESIGN §5): raw HTTP, the HELLO over REST, the error document, "nothing written".

Every body the server sends is checked against the bundle's normative schema
where one applies (``error``, ``event``, ``websocket-frame``, ``membership``),
through ``tests.protocol.normative`` (no check without the bundle).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.http import HttpResponse
from django.test import Client

from missions.models import ActionReceipt, AgentSession, Group, GroupEvent, OrganizationEvent
from mwportal.protocol import handshake
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey
from tests.protocol.normative import normative_errors, normative_problems

API = "/api/v0.1"
CHALLENGE = f"{API}/sessions/challenge"
SESSIONS = f"{API}/sessions"
COMMANDS = f"{API}/commands"
MEMBERSHIPS = f"{API}/memberships"
CATALOGUE = f"{API}/catalogue"
SCHEMA = f"{API}/schema/"
ERROR_STATUSES = {400, 401, 403, 404, 405, 409, 410, 413, 415, 422, 429}


def http() -> Client:
    """A test client that answers a crash with a 500 instead of raising, as a server would."""
    return Client(raise_request_exception=False)


def post_raw(client: Client, url: str, data: bytes | str, content_type: str = "application/json") -> HttpResponse:
    return client.post(url, data=data, content_type=content_type)  # type: ignore[return-value]


def post_json(client: Client, url: str, value: Any) -> HttpResponse:
    return post_raw(client, url, json.dumps(value))


def wire(group: str) -> str:
    """A Group ID as the wire writes it (tests hold bare UUIDs)."""
    return group if group.startswith("urn:") else urn(group)


def events_url(group: str, query: str = "") -> str:
    return f"{API}/groups/{wire(group)}/events" + (f"?{query}" if query else "")


def snapshot_url(group: str, sequence: int) -> str:
    return f"{API}/groups/{wire(group)}/snapshots/{sequence}"


def key_url(key_id: str) -> str:
    return f"{API}/keys/{key_id}"


def bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def show(response: HttpResponse) -> str:
    return f"{response.status_code} {response.content[:500]!r}"


def normative(name: str, document: Any) -> Any:
    """``document``, after asserting that the bundle's ``name`` schema accepts it."""
    problems = normative_problems(name, document)
    assert problems == [], (name, problems, document)
    return document


DOCUMENT_MEMBERS = {
    *("code", "message", "retryable", "occurredAt", "fatal", "relatedFrameId", "relatedActionId", "groupId"),
    *("expectedRevision", "currentRevision", "retryAfterMs", "snapshotArtifactHash", "details"),
}


def error_of(response: HttpResponse, status: int, code: str) -> dict[str, Any]:
    """Assert that the body is the bare normative error document (§19; DESIGN
    §5) with ``status`` and ``code``, as JSON. Returns the document with
    ``details`` defaulted to ``{}`` and without ``occurredAt`` (a clock
    reading, checked here), so that two answers compare by what they say."""
    assert response.status_code == status, show(response)
    assert response["Content-Type"].startswith("application/json"), response.headers
    error = response.json()
    assert {"code", "message", "retryable", "occurredAt"} <= set(error) <= DOCUMENT_MEMBERS, error
    assert error["code"] == code, error
    # §19: only RATE_LIMITED, BACKPRESSURE and INTERNAL_ERROR may be retried unchanged.
    assert error["retryable"] is (code in ("RATE_LIMITED", "BACKPRESSURE", "INTERNAL_ERROR")), error
    assert isinstance(error["message"], str) and error["message"], error
    assert "fatal" not in error, error  # REST has no connection to close
    assert normative_errors(error) == [], error
    return {"details": {}, **{k: v for k, v in error.items() if k != "occurredAt"}}


def malformed_naming(response: HttpResponse, field: str) -> dict[str, Any]:
    """400 SCHEMA_VALIDATION_FAILED whose details (or message) name ``field``."""
    error = error_of(response, 400, "SCHEMA_VALIDATION_FAILED")
    assert field in error["message"] or field in str(error["details"].get("field", "")), error
    return error


def unreadable_body(response: HttpResponse) -> dict[str, Any]:
    """400 PROTOCOL_VIOLATION: not one strict JSON value (§17.4, §6.4), before any schema."""
    return error_of(response, 400, "PROTOCOL_VIOLATION")


# --- the HELLO over REST ------------------------------------------------------------------------


def challenge(client: Client, agent: AgentKey) -> tuple[handshake.ClientHandshake, dict[str, Any]]:
    """Phases 1-2: the client's handshake and the server's ``HELLO/server_challenge``."""
    hc = handshake.ClientHandshake(agent.urn, agent.key)
    response = post_json(client, CHALLENGE, hc.start())
    assert response.status_code == 200, show(response)
    return hc, normative("websocket-frame", response.json())


def hello(client: Client, agent: AgentKey) -> dict[str, Any]:
    """The four phases over REST; the ``HELLO/server_accept`` frame (its token opens REST reads)."""
    hc, server_challenge = challenge(client, agent)
    response = post_json(client, SESSIONS, hc.receive_challenge(server_challenge))
    assert response.status_code == 201, show(response)
    accepted = normative("websocket-frame", response.json())
    hc.receive_accept(accepted)
    return accepted  # type: ignore[no-any-return]


# --- nothing written ------------------------------------------------------------------------------


def state() -> tuple[Any, ...]:
    return (
        GroupEvent.objects.count(),
        OrganizationEvent.objects.count(),
        ActionReceipt.objects.count(),
        AgentSession.objects.count(),
        list(Group.objects.order_by("id").values_list("id", "last_sequence", "revision", "head_hash")),
    )


@contextmanager
def nothing_written() -> Iterator[None]:
    """No Event, receipt or session row was added and no Group head moved."""
    before = state()
    yield
    assert state() == before
