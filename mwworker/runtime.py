"""The Worker runtime: asyncio over the sans-I/O session and the local store (DESIGN §6; STYLE §7).

``Worker`` connects to ``/mwp/0.1`` with its Agent key (the DESIGN §4 key
file), completes the four-phase HELLO (§6.3), learns its Groups (``GET
/api/v0.1/memberships``) and subscribes every Group from its durable Cursor
(``afterSequence``). Every Event is verified against the Group Authority's
key (``GET /api/v0.1/keys/{keyId}``) and goes through ``Store.apply`` (the
apply cycle of DESIGN §6); the highest contiguous durable Cursors are ACKed
(§16). PING carries the Presence Record (§6.2). BACKPRESSURE pauses one
Group and resumes it after ``retryAfterMs`` (§17.3). CURSOR_TOO_OLD fetches
the signed snapshot, which ``Store.restore_snapshot`` verifies before
restoring; replay resumes strictly after it.

The Worker is one object composed of rooms, a module each, over the state
they share (``state``): ``connection`` (the socket and the session),
``commands`` (signed Command documents, their outcomes, catching up),
``offline`` (buffering and reconciliation), ``admission`` (which offers to
take, what may start), ``leases`` (taking, renewing and citing the Execution
Lease) and ``slots`` (running one WorkItem in isolation). This module
composes them and runs the reactor.

What the projection asks for (the store's outbox intents) the reactor does
after commit: answer offers through admission control (§10.3), stop a slot
whose lease ended elsewhere. It then fills free slots with what the
``Picker`` chooses among this Worker's queued WorkItems.

A slot runs one WorkItem under an Execution Lease (``work.start``; the lease
comes in the ``work.started`` Event), renews it before it expires, and cites
it (``ownershipEpoch``, ``executionLeaseId``) on every checkpoint, block,
submission and failure (§11.3). The handler sees a ``SlotContext`` holding
only its own Mission's data, contract, lease, checkpoints, budget and
side-effect key namespace (MWP-WRK-011); everything it asks of the runtime
travels over the slot's own request channel.

A checkpoint releases the lease (§10.2: ``active`` -> ``work.checkpoint`` ->
``queued``), so a slot that checkpoints without a preemption request starts
again at once under a new lease; with one, it pauses there: the five steps
of §11.3 (MWP-WRK-015). Blocking is the same safe sequence ending in
``work.blocked`` (MWP-WRK-017). Failures: a handler's exception becomes
``work.fail`` with failure Evidence, marked retryable while the Work
Contract's retry policy allows (``retry_decision``). The WorkItem is then
``failed`` (§10.2); the Organization's retry policy re-offers it to this Worker
after the backoff (``work.offer`` from ``failed``), and the Worker accepts and
runs the next attempt (MWP-WRK-018).

Reconnection follows websockets' habit: a retry rule (``should_retry``) and a
capped, jittered backoff generator (``backoff``). Commands unanswered when a
connection drops are in doubt: ``POST /api/v0.1/commands`` with the same
document answers each from its receipt (§19). A new Session Epoch fences the
old one (§6.3): every slot stops and the WorkItems wait in their queues.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection

from .commands import REFRESH_AFTER_SECONDS
from .config import Identity
from .connection import Connection, backoff, should_retry
from .context import Capability, Handler, utcnow
from .events import EventVerifier, KeyCache
from .offline import OFFLINE_GRACE_SECONDS
from .picker import FairScheduler, Picker
from .projection import OutboxRow
from .protocol import ClientSession
from .rest import _Http
from .slots import Slots
from .state import _Slot
from .store import Store

log = logging.getLogger("mwworker")


class Worker(Slots, Connection):
    """The reference Worker. Register capabilities, then ``await worker.run()``.

    ::

        worker = Worker(portal="http://127.0.0.1:8000", identity=Identity.from_key_file("k.json"),
                        store="worker.sqlite3", slots=2)

        @worker.capability("summarize", "1.0")
        async def summarize(ctx: SlotContext) -> Result:
            ...
            await ctx.checkpoint({"done": n}, phase="drafting")
            return Result(evidence=[ctx.evidence(["complete"], result="pass", method="test", summary="ok")])

        await worker.run()        # until worker.stop()
    """

    def __init__(
        self,
        *,
        portal: str,
        identity: Identity,
        store: Store | str | Path,
        slots: int = 2,
        picker: Picker | None = None,
        queue_limit: int | None = None,
        renew_fraction: float = 0.5,
        reconnect: Callable[[], Iterator[float]] = backoff,
        offline_grace_seconds: float = OFFLINE_GRACE_SECONDS,
        refresh_after_seconds: float = REFRESH_AFTER_SECONDS,
        presence_ttl_seconds: float = 60.0,
    ):
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self.portal = portal.rstrip("/")
        self.identity = identity
        self.me = identity.agent_id
        # The Group Authority's keys, as the Registry serves them: every Event
        # is verified against them before it is applied (DESIGN §6).
        self.keys = KeyCache(identity.organization)
        verifier = EventVerifier(self.keys)
        if isinstance(store, Store):
            store.verifier = verifier
            self.store = store
        else:
            self.store = Store(store, agent=identity.agent_id, verifier=verifier)
        self.slots = slots
        # The cross-Group Scheduler (weighted fair, anti-starvation; spec 11.1).
        self.picker: Picker = picker if picker is not None else FairScheduler()
        self.queue_limit = queue_limit if queue_limit is not None else 4 * slots
        self.renew_fraction = renew_fraction
        self._reconnect = reconnect
        self._http = _Http(self.portal)
        self.capabilities: dict[tuple[str, str], Capability] = {}
        self._running: dict[str, _Slot] = {}  # workitem -> slot
        # (group, item) -> (updated_sequence, when): a refused start waits for
        # the row to change, or START_RETRY_SECONDS (the cause may be another row).
        self._start_refused: dict[tuple[str, str], tuple[int, datetime]] = {}
        self._accepted: set[tuple[str, str]] = set()  # offers accepted whose Event is not applied yet
        self._token: str | None = None
        self.session_epoch: int | None = None
        self._session: ClientSession | None = None
        self._ws: ClientConnection | None = None
        self._send_lock = asyncio.Lock()
        self._pending: dict[str, tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]] = {}
        self._in_doubt: dict[str, bool] = {}  # actionId -> unanswered when a connection dropped
        self.presence_ttl = timedelta(seconds=presence_ttl_seconds)
        self._last_pong = 0.0
        self._connected = asyncio.Event()
        # Buffered progress is reconciled before anything else is sent after a
        # reconnect (spec 11.5); set while nothing waits to be reconciled.
        self._reconciled = asyncio.Event()
        self._reconciled.set()
        self._disconnected_at: datetime | None = None
        self.offline_grace = timedelta(seconds=offline_grace_seconds)
        self.refresh_after_seconds = refresh_after_seconds
        # Catching up (issue 16 item 12): per connection, the head of each
        # Group read after the welcome, and the Groups whose durable Cursor
        # has reached it. Nothing bound to ownership (work.start, every
        # lease-bound Command) goes out for a Group before it is caught up:
        # a restarted Worker's store may still show a WorkItem as it was
        # before its own lease revocation, and acting on that is what earned
        # REVISION_CONFLICT after a restart.
        self._connection = 0
        self._heads: dict[str, int] = {}
        self._synced: set[str] = set()
        self._head_reads: set[str] = set()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._stopping = False
        self._stop_event = asyncio.Event()
        self._policy_revision: int | None = None
        self._next_due: datetime | None = None
        self._last_ack = 0.0
        self._tasks: set[asyncio.Task[Any]] = set()
        self.log: list[tuple[str, str, str]] = []  # (kind, workitem, detail): what the runtime did, for status/tests

    def capability(
        self, id: str, version: str, *, estimate: Mapping[str, float] | None = None, duration_seconds: float = 0.0
    ) -> Callable[[Handler], Handler]:
        """Register an async handler for capability ``id`` at ``version``.

        ``estimate`` (usage per WorkItem) and ``duration_seconds`` feed
        admission control's budget and deadline checks.
        """

        def register(fn: Handler) -> Handler:
            self.capabilities[(id, version)] = Capability(id, version, fn, dict(estimate or {}), duration_seconds)
            return fn

        return register

    @property
    def running(self) -> dict[str, str]:
        """WorkItem -> Group of the slots in use."""
        return {w: s.group for w, s in self._running.items()}

    def lease_of(self, workitem: str) -> str | None:
        slot = self._running.get(workitem)
        return slot.lease_id if slot else None

    def renewals_of(self, workitem: str) -> int:
        slot = self._running.get(workitem)
        return slot.renewals if slot else 0

    def request_preemption(self, workitem: str) -> bool:
        """Step 1 of spec 11.3's preemption: ask the slot to pause at its next
        checkpoint. False when no slot runs that WorkItem."""
        slot = self._running.get(workitem)
        if slot is None:
            return False
        slot.preempt = True
        return True

    def stop(self, drain_seconds: float = 10.0) -> None:
        """Graceful stop: running slots pause at their next checkpoint (or are
        cancelled after ``drain_seconds``), then the connection closes and
        ``run()`` returns."""
        if self._stopping:
            return
        self._stopping = True
        self._stop_event.set()
        for slot in self._running.values():
            slot.preempt = True
        self._wake.set()
        # Called from the Worker's event loop (a signal handler, a task); from
        # another thread use ``loop.call_soon_threadsafe(worker.stop)``.
        self._spawn(self._shutdown(drain_seconds))

    async def _shutdown(self, drain_seconds: float) -> None:
        await self._drain(drain_seconds, tasks_too=False)
        ws = self._ws
        if ws is not None:
            # The closing handshake is a courtesy; do not wait long for it.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ws.close(), 2)
            ws.transport.abort()

    async def run(self) -> None:
        """Connect, and reconnect with backoff, until ``stop()``."""
        reactor = asyncio.create_task(self._reactor())
        delays = self._reconnect()
        try:
            while not self._stopping:
                try:
                    welcomed = await self._connect_once()
                except Exception as exc:
                    if not should_retry(exc):
                        raise
                    log.warning("connection failed: %s", exc)
                    welcomed = False
                if welcomed:
                    delays = self._reconnect()  # a session that got in starts the backoff over
                if self._stopping:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop_event.wait(), next(delays))
        finally:
            reactor.cancel()
            await self._drain()

    async def _drain(self, timeout: float = 10.0, *, tasks_too: bool = True) -> None:
        tasks = [s.task for s in self._running.values() if s.task is not None]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if tasks_too:
            current = asyncio.current_task()
            others = [t for t in self._tasks if t is not current]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

    def close(self) -> None:
        self.store.close()

    async def _reactor(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._next_timer())
            self._wake.clear()
            if not self._connected.is_set():
                continue
            # Nothing may end this loop but cancellation: a failure here is
            # logged and the next wake-up tries again (a reactor that died
            # silently would leave queued work unstarted until the Worker stops).
            try:
                self._ack(asyncio.get_running_loop().time())
                await self._flush()
                await self._handle_intents()
                if not self._stopping:
                    await self._fill_slots()
            except Exception:
                log.exception("reactor")

    def _next_timer(self) -> float:
        """Seconds until the reactor must look again without an Event: the
        earliest end of a retry backoff among this Worker's queued rows (at most 5)."""
        if self._next_due is None:
            return 5.0
        return min(5.0, max(0.05, (self._next_due - utcnow()).total_seconds()))

    async def _handle_intents(self) -> None:
        for intent in await asyncio.to_thread(self.store.pending_outbox):
            result = await self._handle_intent(intent)
            if result is not None:
                await asyncio.to_thread(self.store.complete_outbox, intent.intent_id, result)

    async def _handle_intent(self, intent: OutboxRow) -> dict[str, Any] | None:
        """Act on one intent; its result, or None to try again later."""
        if intent.kind == "work.stop":
            payload = json.loads(intent.payload)
            slot = self._running.get(intent.workitem or "")
            if slot is not None and slot.lease_id == payload.get("lease_id"):  # the fold's intent body
                self._stop_slot(slot, str(payload.get("reason")))
                return {"stopped": True}
            return {"stopped": False}
        if intent.kind == "schedule.disclose":
            # The catalogue has no schedule-disclosure Command yet: the intent is done, nothing sent.
            return {"disclosed": False, "reason": "no disclosure Command in the catalogue"}
        if intent.kind == "offer.respond":
            return await self._respond_to_offer(intent)
        return {"ignored": intent.kind}
