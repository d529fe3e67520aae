"""What the rooms of the Worker share: the state ``Worker.__init__`` sets, and the slot record.

The runtime is one object composed of rooms (``commands``, ``offline``,
``connection``, ``leases``, ``admission``, ``slots``), each a class of
methods over this state; ``WorkerState`` names that state once so each room
is type-checked against it. The rooms stack without cycles: a room calls
only methods of the rooms it inherits from, and those here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from websockets.asyncio.client import ClientConnection

from .config import Identity
from .context import Capability, Result, SlotContext
from .events import KeyCache
from .picker import Picker
from .protocol import ClientSession
from .rest import _Http
from .store import Store


@dataclass
class _Slot:
    group: str
    workitem: str
    ownership_epoch: int
    revision: int
    lease_id: str | None = None
    lease: dict[str, Any] | None = None  # the current Execution Lease (lease.schema.json)
    lease_seconds: float = 0.0
    lease_expires_at: datetime | None = None
    attempt: int = 0
    preempt: bool = False
    ctx: SlotContext | None = None
    task: asyncio.Task[None] | None = None
    handler_task: asyncio.Task[Result] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    renewals: int = 0
    artifacts: dict[str, tuple[int, str]] = field(default_factory=dict)  # content hash -> (size, media type)
    stopped: str | None = None  # why the slot was stopped from outside


class WorkerState:
    """The Worker's state, as ``Worker.__init__`` sets it."""

    portal: str
    identity: Identity
    me: str
    store: Store
    slots: int
    picker: Picker
    queue_limit: int
    renew_fraction: float
    _reconnect: Callable[[], Iterator[float]]
    _http: _Http
    capabilities: dict[tuple[str, str], Capability]
    _running: dict[str, _Slot]
    _start_refused: dict[tuple[str, str], tuple[int, datetime]]
    _accepted: set[tuple[str, str]]
    _token: str | None
    session_epoch: int | None
    _session: ClientSession | None
    _ws: ClientConnection | None
    _send_lock: asyncio.Lock
    _pending: dict[str, tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]]
    _in_doubt: dict[str, bool]
    presence_ttl: timedelta
    _connected: asyncio.Event
    _reconciled: asyncio.Event
    _disconnected_at: datetime | None
    offline_grace: timedelta
    refresh_after_seconds: float
    _connection: int
    _heads: dict[str, int]
    _synced: set[str]
    _head_reads: set[str]
    _wake: asyncio.Event
    _changed: asyncio.Event
    _stopping: bool
    _stop_event: asyncio.Event
    _policy_revision: int | None
    _last_pong: float
    keys: KeyCache
    _next_due: datetime | None
    _last_ack: float
    _tasks: set[asyncio.Task[Any]]
    log: list[tuple[str, str, str]]

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def until(self, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
        """Wait until ``predicate()`` holds (checked after every change); TimeoutError otherwise."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError("condition not reached")
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(left, 0.5))

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _stop_slot(self, slot: _Slot, reason: str) -> None:
        """The lease ended elsewhere: cancel the handler; nothing lease-bound is sent after."""
        slot.stopped = reason
        slot.lease_id = None
        if slot.handler_task is not None and not slot.handler_task.done():
            slot.handler_task.cancel()
        elif slot.task is not None and not slot.task.done() and slot.handler_task is None:
            slot.task.cancel()
