"""Admission control for the write path: shed load with BACKPRESSURE, never a 500.

Past saturation a daphne process used to take every Command it was offered:
Django runs each sync view in a thread of its own under ASGI, so the threads,
their PostgreSQL connections and the latency all grew without bound until
the server ran out of connections and answered HTML 500s (issue 16 item 9).

``BackpressureMiddleware`` bounds, per process, how many requests that run
``accept()`` (``POST /api/v1/commands`` and ``POST /api/v1/sessions``) are in
flight at once: at most ``MWP_MAX_INFLIGHT_COMMANDS``, each further one waits
at most ``MWP_BACKPRESSURE_WAIT_MS`` for a slot, and one that gets none is
answered at once ``503 BACKPRESSURE`` with ``retryAfterMs`` and
``Retry-After`` (spec §19: retryable; the sender retries unchanged, same
Action ID), before any database work. The bound's default follows the
connection pool when one is configured (``OPTIONS["pool"]["max_size"]``), so
admitted Commands never queue on the pool; otherwise ``DEFAULT_LIMIT``.

Under ASGI the middleware runs on the event loop: a shed request costs no
thread and no connection, and a waiting one only a future. A slot is held
until the view's thread has finished, even when the client went away and
Django cancelled the request, because that thread still holds its database
connection. Reads and WebSocket frames are not bounded here.

Put it first in ``MIDDLEWARE``: nothing before it runs for a shed request.

Exception tree: none of its own; misconfiguration raises Django's
``ImproperlyConfigured`` at start-up.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, JsonResponse

from mwportal.protocol import ErrorCode, ProtocolError

# Without a connection pool: enough to keep two cores busy with Commands that
# spend part of their time waiting on the database, few enough that a
# process's threads and connections stay small (issue 16 item 9).
DEFAULT_LIMIT = 8
# How long a request may wait for a slot: a short burst is absorbed, a
# sustained overload is shed before clients time out.
DEFAULT_WAIT_MS = 50
# What a shed sender is told to wait before retrying.
DEFAULT_RETRY_AFTER_MS = 1000
# A shed request is not logged one by one (thousands a second past
# saturation); one warning at most this often says how many were shed.
LOG_EVERY_S = 1.0
# The requests that run accept(): (method, path).
GUARDED = frozenset({("POST", "/api/v1/commands"), ("POST", "/api/v1/sessions")})


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
    """The connection pool's size when there is one: an admitted Command then
    always finds a connection; else ``DEFAULT_LIMIT``."""
    pool = settings.DATABASES.get("default", {}).get("OPTIONS", {}).get("pool")
    if isinstance(pool, dict) and isinstance(pool.get("max_size"), int) and pool["max_size"] > 0:
        return int(pool["max_size"])
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


def backpressure_response(retry_after_ms: int, limit: int) -> HttpResponse:
    """The 503 BACKPRESSURE document (DESIGN §4 error shape) with Retry-After."""
    err = ProtocolError(
        ErrorCode.BACKPRESSURE,
        f"this server has {limit} Commands in flight; retry the same Command after {retry_after_ms} ms",
        {"limit": limit},
        retry_after_ms=retry_after_ms,
    )
    response = JsonResponse(err.as_dict(), status=err.http_status)
    response["Retry-After"] = err.retry_after_header() or "1"
    return response


class BackpressureMiddleware:
    """Bounds the requests that run ``accept()`` in flight in this process;
    answers 503 BACKPRESSURE past the bound (see the module docstring)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]):
        self.get_response = get_response
        self.limit = _setting("MWP_MAX_INFLIGHT_COMMANDS", default_limit(), 1)
        wait_ms = _setting("MWP_BACKPRESSURE_WAIT_MS", DEFAULT_WAIT_MS, 0)
        self.retry_after_ms = _setting("MWP_BACKPRESSURE_RETRY_AFTER_MS", DEFAULT_RETRY_AFTER_MS, 1)
        self.admission = Admission(self.limit, wait_ms / 1000)
        self._shed_since_log = 0
        self._logged_at = 0.0
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def shed(self) -> HttpResponse:
        response = backpressure_response(self.retry_after_ms, self.limit)
        # Django logs every 5xx at ERROR; shedding is the server working as
        # intended, and logging each one would cost the CPU it saves. Its
        # flag (django.utils.log.log_response) marks this one as logged.
        response._has_been_logged = True  # type: ignore[attr-defined]
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
        return response

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        if (request.method, request.path_info) not in GUARDED:
            return self.get_response(request)
        if not self.admission.enter():
            return self.shed()
        try:
            return self.get_response(request)
        finally:
            self.admission.release()

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        get_response: Callable[[HttpRequest], Awaitable[HttpResponse]] = self.get_response
        if (request.method, request.path_info) not in GUARDED:
            return await get_response(request)
        if not await self.admission.enter_async():
            return self.shed()
        # Django cancels a request whose client disconnected, but a sync
        # view's thread runs on, holding its connection: the slot is given
        # back when the work itself is done, not when the await is cancelled.
        work = asyncio.ensure_future(get_response(request))
        try:
            return await asyncio.shield(work)
        finally:
            if work.done():
                self.admission.release()
            else:
                work.add_done_callback(self._release_after)

    def _release_after(self, work: asyncio.Future[HttpResponse]) -> None:
        self.admission.release()
        if not work.cancelled():
            work.exception()  # retrieved: the client is gone, nobody else will
