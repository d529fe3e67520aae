"""A failure inside the server answers the INTERNAL_ERROR document (issue 16
item 10; spec §19 "Authority failed without accepting the transition"), on
the REST binding under /api/v0.1/.

Every REST route answers a database error (an outage, a broken connection,
an exhausted pool) and any other unexpected exception with
the error document ``{"code": "INTERNAL_ERROR", "retryable": true, "retryAfterMs", ...}``
and a ``Retry-After`` header instead of Django's HTML page; the traceback is
logged once, server-side, and nothing of it reaches the client. Failures are
injected at the database cursor (``connection.execute_wrapper``), so every
route is failed where a real outage would fail it.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import DatabaseError, InterfaceError, OperationalError, connection
from django.http import HttpResponse
from django.test import Client

from mwportal.protocol import handshake
from mwportal.protocol.ids import urn
from tests.api.support import (
    CHALLENGE,
    COMMANDS,
    SESSIONS,
    bearer,
    challenge,
    error_of,
    events_url,
    http,
    post_json,
    show,
)
from tests.api.test_commands import create_mission
from tests.conftest import AgentKey

# What the injected failure says: a real driver error can name the host, the
# user, even a password; none of it may reach the client.
LEAK = "connection to server at 10.0.0.7 failed: password=hunter2"


def internal_error(response: HttpResponse) -> dict[str, Any]:
    """500 INTERNAL_ERROR, retryable, with retryAfterMs and Retry-After, as JSON, leaking nothing."""
    assert response["Content-Type"].startswith("application/json"), show(response)
    error = error_of(response, 500, "INTERNAL_ERROR")
    assert error["retryable"] is True
    assert isinstance(error["retryAfterMs"], int) and error["retryAfterMs"] > 0, error
    assert int(response["Retry-After"]) == -(-error["retryAfterMs"] // 1000), response.headers
    body = response.content.decode()
    for secret in ("hunter2", "10.0.0.7", "Traceback", "OperationalError"):
        assert secret not in body, body
    return error


@contextmanager
def database_fails(exc: BaseException | None = None) -> Iterator[list[str]]:
    """Every query raises ``exc`` (an OperationalError by default) before it
    reaches the database; yields the SQL that was attempted."""
    attempted: list[str] = []

    def fail(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        attempted.append(sql)
        raise exc if exc is not None else OperationalError(LEAK)

    with connection.execute_wrapper(fail):
        yield attempted


# --- every route of the OpenAPI schema --------------------------------------

PATH_VALUES = {"sha256": "ab" * 32, "sequence": "1"}
# Served from memory, never the database.
NO_DATABASE = {("get", "/api/v0.1/catalogue"), ("post", CHALLENGE)}


def operations() -> list[tuple[str, str]]:
    """(method, path template) of every operation the schema documents, so a
    route added later is failed here too. Built at collection time; the
    generator reads the URLconf, never a table."""
    from missions.api.openapi import openapi_document

    document = openapi_document()
    return sorted(
        (method, path)
        for path, item in document["paths"].items()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    )


OPERATIONS = operations()


def request_for(
    method: str, template: str, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey
) -> dict[str, Any]:
    """A request that reaches the database: valid-looking path values, and a
    valid bearer token (looked up first) or a valid signed body."""
    values = {
        **PATH_VALUES,
        "groupId": urn(mission["group"]),
        "group_id": mission["group"],
        "keyId": worker.key.key_id,
    }
    path = re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), str(uuid.uuid4())), template)
    if path == COMMANDS:
        return {"path": path, "data": create_mission(owner, coordinator)}
    if path == SESSIONS:
        hc, frame = challenge(http(), worker)
        return {"path": path, "data": hc.receive_challenge(frame)}
    if path == CHALLENGE:
        return {"path": path, "data": handshake.ClientHandshake(worker.urn, worker.key).start()}
    return {"path": path, "query": {"group": mission["group"]}, "headers": bearer(worker.extra["token"])}


def send(client: Client, method: str, request: dict[str, Any]) -> HttpResponse:
    if "data" in request:
        return post_json(client, request["path"], request["data"])
    call = getattr(client, method)
    url = request["path"] + "?" + "&".join(f"{k}={v}" for k, v in request["query"].items())
    extra = {"content_type": "application/octet-stream", "data": b"x"} if method in {"post", "patch", "put"} else {}
    return call(url, **extra, **request["headers"])  # type: ignore[no-any-return]


def test_the_schema_documents_the_routes_this_suite_fails() -> None:
    # A route added later is failed too; this only guards against an empty list.
    assert ("post", COMMANDS) in OPERATIONS and ("get", "/api/v0.1/groups/{groupId}/events") in OPERATIONS
    assert ("post", SESSIONS) in OPERATIONS and ("get", "/api/v0.1/keys/{keyId}") in OPERATIONS


@pytest.mark.parametrize(("method", "template"), OPERATIONS, ids=[f"{m.upper()} {p}" for m, p in OPERATIONS])
def test_every_route_answers_a_database_outage_with_internal_error_spec_19(
    method: str, template: str, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey
) -> None:
    request = request_for(method, template, mission, owner, coordinator, worker)
    with database_fails() as attempted:
        response = send(http(), method, request)
    if (method, template) in NO_DATABASE:
        assert not attempted and response.status_code == 200, show(response)
        return
    assert attempted, f"{method} {template} answered without the database: {show(response)}"
    internal_error(response)


# --- what fails, and what is logged -----------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        OperationalError("server closed the connection unexpectedly " + LEAK),
        InterfaceError("connection already closed " + LEAK),
        DatabaseError("could not serialize access " + LEAK),
        RuntimeError("a bug " + LEAK),
    ],
    ids=["OperationalError", "InterfaceError", "DatabaseError", "unexpected"],
)
def test_a_read_answers_every_failure_with_internal_error(
    exc: BaseException, mission: dict[str, str], worker: AgentKey
) -> None:
    with database_fails(exc):
        response = http().get(events_url(mission["group"]), **bearer(worker.extra["token"]))
    internal_error(response)


def test_a_pool_timeout_answers_internal_error(mission: dict[str, str], worker: AgentKey) -> None:
    # MWP_DB_POOL_TIMEOUT passed with every pooled connection checked out.
    psycopg_pool = pytest.importorskip("psycopg_pool")
    with database_fails(psycopg_pool.PoolTimeout("couldn't get a connection after 3.00 sec " + LEAK)):
        response = http().get(events_url(mission["group"]), **bearer(worker.extra["token"]))
    internal_error(response)


def test_a_command_whose_accept_fails_answers_internal_error_and_writes_nothing_spec_19(
    monkeypatch: pytest.MonkeyPatch, owner: AgentKey, coordinator: AgentKey
) -> None:
    import missions.api.commands

    def accept_document(data: bytes) -> Any:
        raise OperationalError("terminating connection due to administrator command " + LEAK)

    monkeypatch.setattr(missions.api.commands, "accept_document", accept_document)
    document = create_mission(owner, coordinator)
    error = internal_error(post_json(http(), COMMANDS, document))
    assert error["details"] == {}
    # The same Command retried unchanged once the database is back is accepted.
    monkeypatch.undo()
    assert post_json(http(), COMMANDS, document).status_code == 201


def test_the_traceback_is_logged_once_server_side(
    caplog: pytest.LogCaptureFixture, mission: dict[str, str], worker: AgentKey
) -> None:
    caplog.set_level(logging.INFO)
    with database_fails():
        response = http().get(events_url(mission["group"]), **bearer(worker.extra["token"]))
    internal_error(response)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [(r.name, r.getMessage()) for r in errors]
    (record,) = errors
    assert record.exc_info is not None and isinstance(record.exc_info[1], OperationalError)
    assert mission["group"] in record.getMessage()  # the path, to find the request


def test_a_refusal_is_still_its_own_code_and_not_logged_as_an_error(
    caplog: pytest.LogCaptureFixture, mission: dict[str, str]
) -> None:
    caplog.set_level(logging.INFO)
    error_of(http().get(events_url(mission["group"])), 401, "AUTH_REQUIRED")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# --- outside DRF: Django's handler500 -----------------------------------------


def test_a_failure_in_a_plain_django_view_under_api_answers_internal_error(
    monkeypatch: pytest.MonkeyPatch, db: None
) -> None:
    import workitems.views

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug " + LEAK)

    monkeypatch.setattr(workitems.views, "JsonResponse", broken)
    internal_error(http().get("/api/v0.1/schema/work-contract.json"))


def test_a_portal_page_failure_keeps_an_html_page(db: None, org: dict[str, str]) -> None:
    from django.contrib.auth.models import User

    client = http()
    client.force_login(User.objects.create_user("pat", password="x" * 12))
    with database_fails():
        response = client.get("/")
    assert response.status_code == 500, show(response)
    assert response["Content-Type"].startswith("text/html"), response.headers
    assert "hunter2" not in response.content.decode()
