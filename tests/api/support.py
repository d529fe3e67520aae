"""Shared helpers of the REST suites: raw HTTP, the error shape, "nothing written"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from django.http import HttpResponse
from django.test import Client

from missions.models import ActionReceipt, AgentSession, Group, GroupEvent
from mwportal.protocol import format_time, signed
from tests.conftest import AgentKey
from tests.protocol.normative import normative_errors

SESSIONS = "/api/v1/sessions"
COMMANDS = "/api/v1/commands"
ERROR_STATUSES = {400, 401, 403, 404, 409, 410, 422}


def http() -> Client:
    """A test client that answers a crash with a 500 instead of raising, as a server would."""
    return Client(raise_request_exception=False)


def post_raw(client: Client, url: str, data: bytes | str, content_type: str = "application/json") -> HttpResponse:
    return client.post(url, data=data, content_type=content_type)  # type: ignore[return-value]


def post_json(client: Client, url: str, value: Any) -> HttpResponse:
    return post_raw(client, url, json.dumps(value))


def events_url(group: str, query: str = "") -> str:
    return f"/api/v1/groups/{group}/events" + (f"?{query}" if query else "")


def bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def show(response: HttpResponse) -> str:
    return f"{response.status_code} {response.content[:500]!r}"


def error_of(response: HttpResponse, status: int, code: str) -> dict[str, Any]:
    """Assert that the body is the bare normative error document (§19; DESIGN
    v2 §5) with ``status`` and ``code``. Returns the document with ``details``
    defaulted to ``{}`` when it has none and without ``occurredAt`` (a clock
    reading, checked here), so that two answers compare by what they say."""
    assert response.status_code == status, show(response)
    error = response.json()
    assert {"code", "message", "retryable", "occurredAt"} <= set(error) <= DOCUMENT_MEMBERS, error
    assert error["code"] == code, error
    # spec §19: RATE_LIMITED, BACKPRESSURE and INTERNAL_ERROR may be retried unchanged.
    assert error["retryable"] is (code in ("RATE_LIMITED", "BACKPRESSURE", "INTERNAL_ERROR")), error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error.get("details", {}), dict), error
    assert normative_errors(error) == [], error
    return {"details": {}, **{k: v for k, v in error.items() if k != "occurredAt"}}


DOCUMENT_MEMBERS = {
    *("code", "message", "retryable", "occurredAt", "fatal", "relatedFrameId", "relatedActionId", "groupId"),
    *("expectedRevision", "currentRevision", "retryAfterMs", "snapshotArtifactHash", "details"),
}


def malformed_naming(response: HttpResponse, field: str) -> dict[str, Any]:
    """400 SCHEMA_VALIDATION_FAILED whose message (and details, when it says) names ``field``."""
    error = error_of(response, 400, "SCHEMA_VALIDATION_FAILED")
    assert field in error["message"], error
    if "field" in error["details"]:
        assert error["details"]["field"] == field, error
    return error


def session_request(
    agent: AgentKey, *, issued_at: datetime | None = None, nonce: str | None = None, key: str | None = None
) -> dict[str, Any]:
    import uuid

    return signed(
        key or agent.private_key,
        {
            "agent": agent.id,
            "issued_at": format_time(issued_at or datetime.now(UTC)),
            "nonce": nonce or uuid.uuid4().hex,
        },
    )


def state() -> tuple[Any, ...]:
    return (
        GroupEvent.objects.count(),
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


def unreadable_body(response: HttpResponse) -> dict[str, Any]:
    """400 PROTOCOL_VIOLATION naming ``body``: not one strict JSON value, or
    too large to read (framing, §17.4), before any schema is consulted."""
    error = error_of(response, 400, "PROTOCOL_VIOLATION")
    assert "body" in error["message"] and error["details"] == {"field": "body"}, error
    return error
