"""Load shedding on the write path (issue 16 item 9, "Done when": past
saturation, answer BACKPRESSURE with retryAfterMs, never a 500).

Against a real daphne whose bound is one Command in flight: the test holds the
Mission Group's row lock (PostgreSQL) or the database's write lock (SQLite),
so a first Command sits inside ``accept()``; a second one must then be
answered ``429 BACKPRESSURE`` at once, with ``retryAfterMs`` and
``Retry-After``, writing nothing, and pass when retried unchanged below the
bound. Then the ASGI gate (it sheds before Django), the middleware's sync
path (WSGI), and the accounting when Django cancels a request whose client
went away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from missions.backpressure import BackpressureASGI, BackpressureMiddleware, process_gate
from missions.models import ActionReceipt, Group
from mwportal.protocol import catalogue
from mwportal.protocol.command import format_timestamp
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey
from tests.delivery.conftest import Daphne, daphne  # noqa: F401  (daphne: the real-server fixture)

RETRY_AFTER_MS = 1500


@pytest.fixture
def head_poll_seconds() -> float:
    return 1.0


@pytest.fixture
def wait_ms() -> int:
    return 0


@pytest.fixture
def daphne_env(wait_ms: int) -> dict[str, str | None]:
    return {
        "MWP_MAX_INFLIGHT_COMMANDS": "1",
        "MWP_BACKPRESSURE_WAIT_MS": str(wait_ms),
        "MWP_BACKPRESSURE_RETRY_AFTER_MS": str(RETRY_AFTER_MS),
    }


def post(server: Daphne, path: str, body: bytes, timeout: float = 20) -> tuple[int, dict[str, str], Any]:
    status, headers, raw = server.http("POST", path, body, {"Content-Type": "application/json"}, timeout)
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = raw[:2000]  # not JSON: shown by the failing assertion
    return status, headers, payload


def post_command(server: Daphne, envelope: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    return post(server, "/api/v0.1/commands", json.dumps(envelope).encode())


def hold_the_slot(server: Daphne, envelope: dict[str, Any], results: dict[str, Any]) -> threading.Thread:
    """Send ``envelope`` from a thread until it holds the one slot; that thread.

    Probes with an empty Command body tell: one is answered 400 PROTOCOL_VIOLATION
    without any database work while the slot is free, 429 once the held
    Command took it. A probe that came first may have had the Command shed;
    it wrote nothing, so it is sent again."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        sender = threading.Thread(target=lambda: results.update(held=post_command(server, envelope)))
        sender.start()
        time.sleep(0.1)
        while sender.is_alive() and time.monotonic() < deadline:
            status, _, _ = post(server, "/api/v0.1/commands", b"{}")
            if status == 429:
                return sender
            assert status == 400, status
            time.sleep(0.05)
        sender.join()
        assert results["held"][0] == 429, results["held"]
    raise AssertionError("the held Command never took the one slot")


def authorize(coordinator: AgentKey, group: str) -> dict[str, Any]:
    """A signed ``work.propose`` of ``group`` (the catalogue's example contract, a fresh proposal)."""
    contract = {
        **catalogue.command("work.propose").examples[0]["contract"],
        "deadline": format_timestamp(datetime.now(UTC) + timedelta(days=7)),
    }
    return coordinator.command("work.propose", group, {"proposalId": urn(str(uuid.uuid4())), "contract": contract})


@contextlib.contextmanager
def command_inside_accept(
    server: Daphne, group: str, envelope: dict[str, Any], results: dict[str, Any]
) -> Iterator[threading.Thread]:
    """``envelope`` (a Command of ``group``) holding the one slot, waiting
    inside ``accept()`` until the block ends; yields its sender thread."""
    with transaction.atomic():
        # PostgreSQL: the Group row accept() locks first. SQLite: atomic() begins
        # IMMEDIATE, which takes the database's write lock. Either way a Command
        # of this Group waits inside accept() until the test's transaction ends.
        Group.objects.select_for_update().get(id=group)
        yield hold_the_slot(server, envelope, results)


@pytest.mark.django_db(transaction=True)
def test_it_sheds_a_command_past_the_bound_with_backpressure(
    daphne: Daphne,  # noqa: F811  (the fixture imported above)
    coordinator: AgentKey,
    mission: dict[str, str],
) -> None:
    held_group = mission["group"]
    held, shed = authorize(coordinator, held_group), authorize(coordinator, held_group)
    results: dict[str, Any] = {}
    with command_inside_accept(daphne, held_group, held, results) as sender:
        started = time.monotonic()
        status, headers, payload = post_command(daphne, shed)
        elapsed = time.monotonic() - started
        still_held = sender.is_alive()
    sender.join(30)

    assert status == 429, (status, payload)
    error = payload
    assert error["code"] == "BACKPRESSURE", error
    assert error["retryable"] is True, error
    assert error["retryAfterMs"] == RETRY_AFTER_MS, error
    assert headers["retry-after"] == "2", headers  # whole seconds, rounded up
    assert headers["content-type"].startswith("application/json"), headers
    # Shed at once, while the first Command was still inside accept().
    assert still_held
    assert elapsed < 2.0, elapsed
    assert results["held"][0] == 201, results["held"]
    # Nothing was written for the shed Command; retried unchanged below the
    # bound (same Action ID, same signature), it passes.
    assert not ActionReceipt.objects.filter(action_id=shed["actionId"].removeprefix("urn:uuid:")).exists()
    status, _, receipt = post_command(daphne, shed)
    assert status == 201, receipt
    assert receipt["actionId"] == shed["actionId"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("wait_ms", [5000])
def test_it_lets_a_command_wait_briefly_for_a_slot(
    daphne: Daphne,  # noqa: F811  (the fixture imported above)
    coordinator: AgentKey,
    mission: dict[str, str],
) -> None:
    """Within MWP_BACKPRESSURE_WAIT_MS a Command queues for the slot instead of being shed."""
    held_group = mission["group"]
    held, waiting = authorize(coordinator, held_group), authorize(coordinator, held_group)
    results: dict[str, Any] = {}
    second = threading.Thread(target=lambda: results.update(waiting=post_command(daphne, waiting)))
    # The last probe waits the 5 s and is shed.
    with command_inside_accept(daphne, held_group, held, results) as first:
        second.start()
        time.sleep(0.5)
        assert second.is_alive()  # waiting for the slot, neither shed nor answered
    first.join(30)
    second.join(30)
    assert results["held"][0] == 201, results["held"]
    assert results["waiting"][0] == 201, results["waiting"]


# --- the middleware itself: the sync path, and cancelled requests -----------------


def command_request() -> HttpRequest:
    return RequestFactory().post("/api/v0.1/commands", data=b"{}", content_type="application/json")


def test_it_sheds_on_the_sync_path_and_leaves_reads_alone(settings: Any) -> None:
    settings.MWP_MAX_INFLIGHT_COMMANDS = 1
    settings.MWP_BACKPRESSURE_WAIT_MS = 0
    entered, release = threading.Event(), threading.Event()

    def view(request: HttpRequest) -> HttpResponse:
        if request.method == "POST":
            entered.set()
            release.wait(10)
        return HttpResponse(status=201)

    middleware = BackpressureMiddleware(view)
    holder = threading.Thread(target=middleware, args=(command_request(),))
    holder.start()
    assert entered.wait(10)
    shed = middleware(command_request())
    read = middleware(RequestFactory().get("/api/v0.1/commands"))
    release.set()
    holder.join(10)
    assert shed.status_code == 429
    assert json.loads(shed.content)["code"] == "BACKPRESSURE"
    assert shed["Retry-After"] == "1"
    assert read.status_code == 201
    assert middleware(command_request()).status_code == 201  # below the bound again


def test_it_holds_the_slot_until_a_cancelled_requests_work_is_done(settings: Any) -> None:
    """Django cancels a request whose client went away, but its sync view's
    thread runs on with its database connection: the slot must stay taken."""
    settings.MWP_MAX_INFLIGHT_COMMANDS = 1
    settings.MWP_BACKPRESSURE_WAIT_MS = 0

    async def scenario() -> None:
        entered, release = asyncio.Event(), asyncio.Event()

        async def work() -> HttpResponse:  # what sync_to_async(view) is to the middleware
            entered.set()
            await release.wait()
            return HttpResponse(status=201)

        async def view(request: HttpRequest) -> HttpResponse:
            # A shielded inner task, like the view's thread: cancelling the
            # request does not stop it.
            running.append(asyncio.ensure_future(work()))
            return await asyncio.shield(running[-1])

        running: list[asyncio.Future[HttpResponse]] = []
        middleware = BackpressureMiddleware(view)
        request_task = asyncio.ensure_future(middleware(command_request()))
        await entered.wait()
        request_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request_task
        assert middleware.admission.in_flight == 1
        assert (await middleware(command_request())).status_code == 429
        release.set()
        await running[0]
        for _ in range(10):  # the view resumes, then the middleware's done-callback runs
            await asyncio.sleep(0)
        assert middleware.admission.in_flight == 0
        assert (await middleware(command_request())).status_code == 201

    asyncio.run(scenario())


def asgi_scope(method: str = "POST", path: str = "/api/v0.1/commands") -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "root_path": "", "headers": [], "query_string": b""}


async def call_asgi(app: Any, scope: dict[str, Any]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def test_it_sheds_before_django_under_asgi(settings: Any) -> None:
    """Past the bound the gate answers itself: the application behind it
    (Django: a request object and a thread for request_started) never runs."""
    settings.MWP_MAX_INFLIGHT_COMMANDS = 1
    settings.MWP_BACKPRESSURE_WAIT_MS = 0

    async def scenario() -> None:
        calls: list[str] = []
        release = asyncio.Event()

        async def django(scope: dict[str, Any], receive: Any, send: Any) -> None:
            calls.append(f"{scope['method']} {scope['path']}")
            if len(calls) == 1:
                await release.wait()
            await send({"type": "http.response.start", "status": 201, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})

        gate = BackpressureASGI(django)
        held = asyncio.ensure_future(call_asgi(gate, asgi_scope()))
        while not calls:
            await asyncio.sleep(0)
        shed = await call_asgi(gate, asgi_scope())
        read = await call_asgi(gate, asgi_scope("GET", "/api/v0.1/memberships"))
        release.set()
        assert (await held)[0]["status"] == 201
        assert calls == ["POST /api/v0.1/commands", "GET /api/v0.1/memberships"]  # the shed one never got through
        start, body = shed
        assert start["status"] == 429
        headers = dict(start["headers"])
        assert headers[b"retry-after"] == b"1"
        assert int(headers[b"content-length"]) == len(body["body"])
        error = json.loads(body["body"])
        assert error["code"] == "BACKPRESSURE"
        assert error["retryable"] is True
        assert error["retryAfterMs"] == 1000
        assert read[0]["status"] == 201
        assert (await call_asgi(gate, asgi_scope()))[0]["status"] == 201  # below the bound again
        assert process_gate().admission.in_flight == 0

    asyncio.run(scenario())


def test_it_keeps_the_gates_slot_until_the_views_work_is_done(settings: Any) -> None:
    """Behind the gate the middleware holds the gate's slot; Django cancelling
    the request (client gone) does not give it back while the view runs on."""
    settings.MWP_MAX_INFLIGHT_COMMANDS = 1
    settings.MWP_BACKPRESSURE_WAIT_MS = 0

    async def scenario() -> None:
        entered, release = asyncio.Event(), asyncio.Event()
        running: list[asyncio.Future[HttpResponse]] = []

        async def work() -> HttpResponse:
            entered.set()
            await release.wait()
            return HttpResponse(status=201)

        async def view(request: HttpRequest) -> HttpResponse:
            running.append(asyncio.ensure_future(work()))
            return await asyncio.shield(running[-1])  # like sync_to_async's thread: runs on when cancelled

        middleware = BackpressureMiddleware(view)

        async def django(scope: dict[str, Any], receive: Any, send: Any) -> None:
            request = command_request()
            request.scope = scope  # type: ignore[attr-defined]  # what ASGIRequest carries
            response = await middleware(request)
            await send({"type": "http.response.start", "status": response.status_code, "headers": []})
            await send({"type": "http.response.body", "body": response.content})

        gate = BackpressureASGI(django)
        admission = process_gate().admission
        request_task = asyncio.ensure_future(call_asgi(gate, asgi_scope()))
        await entered.wait()
        request_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request_task
        assert admission.in_flight == 1
        assert (await call_asgi(gate, asgi_scope()))[0]["status"] == 429
        release.set()
        await running[0]
        for _ in range(10):  # the view resumes, then the middleware's done-callback runs
            await asyncio.sleep(0)
        assert admission.in_flight == 0
        assert (await call_asgi(gate, asgi_scope()))[0]["status"] == 201
        assert admission.in_flight == 0  # released once, not twice

    asyncio.run(scenario())


@pytest.mark.parametrize(("value", "problem"), [("many", "must be an integer"), ("0", "must be at least 1")])
def test_it_refuses_a_bad_bound_clearly(settings: Any, value: str, problem: str) -> None:
    from django.core.exceptions import ImproperlyConfigured

    settings.MWP_MAX_INFLIGHT_COMMANDS = value
    with pytest.raises(ImproperlyConfigured, match=f"MWP_MAX_INFLIGHT_COMMANDS {problem}"):
        process_gate()
