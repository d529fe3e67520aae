"""Admission control for the write path: shed load with BACKPRESSURE, never a 500.

Past saturation a daphne process used to take every Command it was offered:
Django runs each sync view in a thread of its own under ASGI, so the threads,
their PostgreSQL connections and the latency all grew without bound until
the server ran out of connections and answered HTML 500s (issue 16 item 9).

This module bounds, per process, how many requests that run
``accept()`` (``POST /api/v0.1/commands``, ``POST /api/v0.1/sessions`` and its challenge) are in
flight at once: at most ``MWP_MAX_INFLIGHT_COMMANDS``, each further one waits
at most ``MWP_BACKPRESSURE_WAIT_MS`` for a slot, and one that gets none is
answered at once ``429 BACKPRESSURE`` with ``retryAfterMs`` and
``Retry-After`` (spec §19: retryable; the sender retries unchanged, same
Action ID), before any database work. The bound's default follows the
connection pool when one is configured: ``OPTIONS["pool"]["max_size"]``
(``MWP_DB_POOL_MAX``) less ``POOL_RESERVE`` for reads, so admitted Commands
do not queue on the pool; otherwise ``DEFAULT_LIMIT``.

Two pieces share the process's bound (``process_gate()``):

- ``BackpressureASGI`` wraps Django's ASGI application (``mwportal/asgi.py``)
  and sheds on the event loop before Django sees the request: a shed request
  costs no thread (Django sends ``request_started`` from a thread of its own
  for every request), no request object and no database connection, and a
  waiting one only a future;
- ``BackpressureMiddleware``, first in ``MIDDLEWARE``, takes over the slot
  the gate admitted the request with and holds it until the view's thread has
  finished, even when the client went away and Django cancelled the request,
  because that thread still holds its database connection. Without the gate
  (WSGI, or a bare Django ASGI handler) it admits and sheds by itself.

Reads are not bounded here; the Agents' WebSocket (``missions.agent_socket``) takes
its COMMAND frames through the same ``process_gate()``.

Exception tree: none of its own; misconfiguration raises Django's
``ImproperlyConfigured`` at start-up.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse

from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.errors import occurred_at_text

# Without a connection pool: enough to keep two cores busy with Commands that
# spend part of their time waiting on the database, few enough that a
# process's threads and connections stay small (issue 16 item 9).
DEFAULT_LIMIT = 8
# Connections of a process's pool left to everything that is not a Command.
POOL_RESERVE = 2
# How long a request may wait for a slot: a short burst is absorbed, a
# sustained overload is shed before clients time out.
DEFAULT_WAIT_MS = 50
# What a shed sender is told to wait before retrying.
DEFAULT_RETRY_AFTER_MS = 1000
# A shed request is not logged one by one (thousands a second past
# saturation); one warning at most this often says how many were shed.
LOG_EVERY_S = 1.0
# The requests that run accept(): (method, path).
GUARDED = frozenset(
    {("POST", "/api/v0.1/commands"), ("POST", "/api/v0.1/sessions"), ("POST", "/api/v0.1/sessions/challenge")}
)


log = logging.getLogger(__name__)


def _setting(name: str, default: int, minimum: int) -> int:
    """An integer from settings (tests override these) or else the environment."""
    value: Any = getattr(settings, name, None)
    if value is None:
        value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ImproperlyConfigured(f"{name} must be an integer, not {value!r}") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {number}")
    return number


def default_limit() -> int:
    """With a connection pool, its size less ``POOL_RESERVE``: admitted
    Commands then find a connection without waiting out the pool's timeout
    (which would answer INTERNAL_ERROR), and reads, the hub and WebSocket
    consumers still find one; else ``DEFAULT_LIMIT``."""
    pool = settings.DATABASES.get("default", {}).get("OPTIONS", {}).get("pool")
    if isinstance(pool, dict) and isinstance(pool.get("max_size"), int) and pool["max_size"] > 0:
        return max(1, int(pool["max_size"]) - POOL_RESERVE)
    return DEFAULT_LIMIT


@dataclass(eq=False)
class _Waiter:
    """One request waiting for a slot: woken through ``event`` (a thread) or
    ``future`` on ``loop`` (a coroutine). ``granted`` is set under the lock
    when a releasing request hands its slot over."""

    event: threading.Event | None = None
    loop: asyncio.AbstractEventLoop | None = None
    future: asyncio.Future[None] | None = None
    granted: bool = field(default=False)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Admission:
    """At most ``limit`` holders at once; a newcomer waits at most ``wait_s``
    for a slot, first come first served. Safe across threads and event loops:
    a slot freed by one is handed straight to the oldest waiter, so a request
    arriving later never overtakes one already waiting."""

    def __init__(self, limit: int, wait_s: float):
        self.limit = limit
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._held = 0
        self._waiters: deque[_Waiter] = deque()

    @property
    def in_flight(self) -> int:
        return self._held

    def _try_enter(self, waiter: _Waiter | None) -> bool:
        """Take a free slot now, or queue ``waiter`` (when given); True if taken."""
        with self._lock:
            if self._held < self.limit and not self._waiters:
                self._held += 1
                return True
            if waiter is not None:
                self._waiters.append(waiter)
            return False

    def _withdraw(self, waiter: _Waiter) -> bool:
        """Stop waiting; True if a slot was handed over meanwhile (the caller holds it)."""
        with self._lock:
            if waiter.granted:
                return True
            self._waiters.remove(waiter)
            return False

    def release(self) -> None:
        with self._lock:
            if not self._waiters:
                self._held -= 1
                return
            # The slot passes to the oldest waiter; the count stays the same.
            waiter = self._waiters.popleft()
            waiter.granted = True
        if waiter.event is not None:
            waiter.event.set()
        elif waiter.loop is not None and waiter.future is not None:
            waiter.loop.call_soon_threadsafe(_wake, waiter.future)

    def enter(self) -> bool:
        """Take a slot, waiting at most ``wait_s`` (blocking this thread); True if taken."""
        if self.wait_s <= 0:
            return self._try_enter(None)
        waiter = _Waiter(event=threading.Event())
        if self._try_enter(waiter):
            return True
        assert waiter.event is not None
        waiter.event.wait(self.wait_s)
        return self._withdraw(waiter)

    async def enter_async(self) -> bool:
        """Take a slot, waiting at most ``wait_s`` without blocking the loop; True if taken."""
        if self.wait_s <= 0:
            return self._try_enter(None)
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop=loop, future=loop.create_future())
        if self._try_enter(waiter):
            return True
        assert waiter.future is not None
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), self.wait_s)
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            # The client went away while waiting: give back a slot handed over meanwhile.
            if self._withdraw(waiter):
                self.release()
            raise
        return self._withdraw(waiter)


class Gate:
    """The process's bound: its ``Admission``, what a shed sender is told, and
    the once-a-second report of how many were shed."""

    def __init__(self, limit: int, wait_ms: int, retry_after_ms: int):
        self.limit, self.wait_ms, self.retry_after_ms = limit, wait_ms, retry_after_ms
        self.admission = Admission(limit, wait_ms / 1000)
        self._shed_since_log = 0
        self._logged_at = 0.0
        # The shed answer is the same for every request this Gate sheds: built
        # once here, not per request past saturation, where the CPU is short.
        err = ProtocolError(
            ErrorCode.BACKPRESSURE,
            f"this server has {limit} Commands in flight; retry the same Command after {retry_after_ms} ms",
            details={"limit": limit},
            retry_after_ms=retry_after_ms,
        )
        self.shed_status = err.http_status
        # Only occurredAt differs between two shed answers (a fixed-width
        # timestamp): the bytes around it are built here once.
        stamp = occurred_at_text(datetime.now(UTC))
        head, tail = json.dumps(err.as_dict() | {"occurredAt": stamp}).encode().split(stamp.encode())
        self._shed_head, self._shed_tail = head, tail
        self.shed_retry_after = err.retry_after_header() or "1"

    def shed_body(self) -> bytes:
        """The BACKPRESSURE document, stamped now."""
        return self._shed_head + occurred_at_text(datetime.now(UTC)).encode() + self._shed_tail

    def count_shed(self) -> None:
        # Unlocked on the sync path: a lost increment only miscounts a log line.
        self._shed_since_log += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            log.warning(
                "backpressure: shed %d Command request(s) since the last report (%d in flight allowed)",
                self._shed_since_log,
                self.limit,
            )
            self._shed_since_log, self._logged_at = 0, now


_gate: Gate | None = None
_gate_lock = threading.Lock()


def process_gate() -> Gate:
    """This process's ``Gate``, from the settings as they are now (a test that
    changes them gets a new one; a server reads them once)."""
    global _gate
    config = (
        _setting("MWP_MAX_INFLIGHT_COMMANDS", default_limit(), 1),
        _setting("MWP_BACKPRESSURE_WAIT_MS", DEFAULT_WAIT_MS, 0),
        _setting("MWP_BACKPRESSURE_RETRY_AFTER_MS", DEFAULT_RETRY_AFTER_MS, 1),
    )
    with _gate_lock:
        if _gate is None or (_gate.limit, _gate.wait_ms, _gate.retry_after_ms) != config:
            _gate = Gate(*config)
        return _gate


class Slot:
    """One admitted request's slot, released once, by whoever holds it last:
    the ASGI gate, or the Django middleware once it has taken it over."""

    def __init__(self, admission: Admission):
        self._admission = admission
        self._released = False
        self._lock = threading.Lock()
        self.taken_over = False

    def release(self) -> None:
        # Locked: with a sync middleware chain the middleware releases from
        # Django's thread while the gate may release on the event loop (a
        # request cancelled before the chain reached the middleware).
        with self._lock:
            if self._released:
                return
            self._released = True
        self._admission.release()


SLOT_KEY = "mwp.backpressure_slot"


class BackpressureASGI:
    """The gate in front of Django under ASGI: a shed request never reaches
    Django, so it costs no thread (Django sends ``request_started`` from a
    thread of its own for every request) and no request object. An admitted
    request carries its ``Slot`` in the scope for ``BackpressureMiddleware``
    to hold until the view's work is done."""

    def __init__(self, app: Callable[..., Awaitable[None]]):
        self.app = app
        self.gate: Gate | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or (scope["method"], _path_info(scope)) not in GUARDED:
            await self.app(scope, receive, send)
            return
        if self.gate is None:  # settings are ready by the first request
            self.gate = process_gate()
        gate = self.gate
        if not await gate.admission.enter_async():
            gate.count_shed()
            body = gate.shed_body()
            await send({"type": "http.response.start", "status": gate.shed_status, "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", gate.shed_retry_after.encode()),
            ]})  # fmt: skip
            await send({"type": "http.response.body", "body": body})
            return
        slot = Slot(gate.admission)
        try:
            await self.app({**scope, SLOT_KEY: slot}, receive, send)
        finally:
            if not slot.taken_over:
                slot.release()


def _path_info(scope: dict[str, Any]) -> str:
    """The path as Django's ``path_info`` sees it (without ``root_path``)."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "") or ""
    return path.removeprefix(root) if root and path.startswith(root) else path


def backpressure_response(gate: Gate) -> HttpResponse:
    """The 429 BACKPRESSURE error document (§19) with Retry-After."""
    response = HttpResponse(gate.shed_body(), status=gate.shed_status, content_type="application/json")
    response["Retry-After"] = gate.shed_retry_after
    # Set here because a shed request skips CommonMiddleware, which would.
    response["Content-Length"] = str(len(response.content))
    # Django logs every 5xx at ERROR; shedding is the server working as
    # intended, and logging each one would cost the CPU it saves. Its flag
    # (django.utils.log.log_response) marks this one as logged; the gate
    # reports the count once a second instead.
    response._has_been_logged = True  # type: ignore[attr-defined]
    gate.count_shed()
    return response


class BackpressureMiddleware:
    """Bounds the requests that run ``accept()`` in flight in this process;
    answers 429 BACKPRESSURE past the bound (see the module docstring). Under
    ASGI behind ``BackpressureASGI`` it holds the slot the gate admitted the
    request with; without it (WSGI, a bare ASGI handler) it admits itself."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]):
        self.get_response = get_response
        self.gate = process_gate()
        self.limit = self.gate.limit
        self.admission = self.gate.admission
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        if (request.method, request.path_info) not in GUARDED:
            return self.get_response(request)
        # Under ASGI with a sync-only middleware further in, Django runs the
        # whole chain in one thread: the gate's slot is held here until that
        # thread is done with the view.
        slot: Slot | None = getattr(request, "scope", {}).get(SLOT_KEY)
        if slot is None:
            if not self.admission.enter():
                return backpressure_response(self.gate)
            slot = Slot(self.admission)
        slot.taken_over = True
        try:
            return self.get_response(request)
        finally:
            slot.release()

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        get_response: Callable[[HttpRequest], Awaitable[HttpResponse]] = self.get_response
        if (request.method, request.path_info) not in GUARDED:
            return await get_response(request)
        slot: Slot | None = getattr(request, "scope", {}).get(SLOT_KEY)
        if slot is None:
            if not await self.admission.enter_async():
                return backpressure_response(self.gate)
            slot = Slot(self.admission)
        slot.taken_over = True
        # Django cancels a request whose client disconnected, but a sync
        # view's thread runs on, holding its connection: the slot is given
        # back when the work itself is done, not when the await is cancelled.
        work = asyncio.ensure_future(get_response(request))
        try:
            return await asyncio.shield(work)
        finally:
            if work.done():
                slot.release()
            else:
                work.add_done_callback(lambda done: _release_after(slot, done))


def _release_after(slot: Slot, work: asyncio.Future[HttpResponse]) -> None:
    slot.release()
    if not work.cancelled():
        work.exception()  # retrieved: the client is gone, nobody else will
