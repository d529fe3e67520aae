"""The agent socket: the session, one connection's frames, and what the server's events change.

Reconnection follows websockets' habit: a retry rule (``should_retry``) and
a capped, jittered backoff generator (``backoff``); ``Worker.run`` loops
over ``_connect_once`` with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from mwportal.protocol import format_time, signed

from .context import utcnow
from .errors import ChainBroken, Fatal, MalformedEvent, ProjectionError, Refused, SnapshotRefused, WorkerError
from .offline import Offline
from .protocol import (
    BadFrame,
    ClientSession,
    Closed,
    CommandRefused,
    CursorTooOld,
    EventReceived,
    MembershipChanged,
    ProtocolEvent,
    ReceiptReceived,
    ServerError,
    SubscriptionRefused,
    Welcome,
)
from .rest import _error_of

log = logging.getLogger("mwworker")

ACK_INTERVAL = 0.2  # seconds between ACK frames while a replay streams in


def backoff(
    initial: float = 0.5, factor: float = 2.0, cap: float = 30.0, rng: Callable[[], float] = random.random
) -> Iterator[float]:
    """Reconnect delays: exponential from ``initial`` by ``factor`` up to
    ``cap``, each jittered into [d/2, d] so a fleet does not reconnect in step."""
    delay = initial
    while True:
        yield delay * (0.5 + 0.5 * rng())
        delay = min(delay * factor, cap)


def should_retry(exc: BaseException) -> bool:
    """The retry rule: transport failures and refused handshakes are
    transient; a ``Fatal`` (the key is refused, bad config) is not."""
    if isinstance(exc, Fatal):
        return False
    return isinstance(exc, OSError | ConnectionClosed | InvalidHandshake | TimeoutError | Refused | WorkerError)


class Connection(Offline):
    """One connection at a time: hello, welcome, Events, receipts, memberships, snapshots."""

    async def _open_session(self) -> None:
        request = signed(
            self.identity.private_key,
            {"agent": self.me, "issued_at": format_time(utcnow()), "nonce": uuid.uuid4().hex},
        )
        status, payload = await self._http.call("POST", "/api/v1/sessions", body=request)
        if status != 201:
            err = _error_of(status, payload)
            if err.code in (
                "AUTH_INVALID_SIGNATURE",
                "SCHEMA_VALIDATION_FAILED",
                "PROTOCOL_VIOLATION",
                "GROUP_NOT_FOUND",
            ):
                raise Fatal(f"the portal refused this Agent's session: {err}")
            raise err
        self._token = str(payload["token"])
        self.session_epoch = int(payload["session_epoch"])

    def _ws_url(self) -> str:
        if self.portal.startswith("https://"):
            return "wss://" + self.portal[len("https://") :] + "/ws/v1/agent"
        return "ws://" + self.portal.removeprefix("http://") + "/ws/v1/agent"

    async def _connect_once(self) -> bool:
        """One connection: True when the server welcomed it."""
        if self._token is None:
            await self._open_session()
        assert self._token is not None
        welcomed = False
        try:
            ws = await connect(self._ws_url(), max_size=16 * 1024 * 1024, open_timeout=10)
        except InvalidURI as exc:
            raise Fatal(f"bad portal URL: {exc}") from None
        session = ClientSession()
        self._ws, self._session = ws, session
        closed: Closed | None = None
        try:
            session.hello(self._token)
            await self._flush()
            async for frame in ws:
                for event in session.feed(frame):
                    if isinstance(event, Welcome):
                        welcomed = True
                    await self._on_protocol_event(event)
                await self._flush()
        except ConnectionClosed:
            pass
        finally:
            if self._connected.is_set():
                self._disconnected_at = utcnow()
            self._connected.clear()
            self._reconciled.clear()
            code = ws.close_code
            reason = ws.close_reason or ""
            with contextlib.suppress(Exception, TimeoutError):
                await asyncio.wait_for(ws.close(), 2)
            for event in session.connection_lost(code, reason):
                if isinstance(event, Closed):
                    closed = event
            self._ws, self._session = None, None
        if closed is not None:
            self._on_closed(closed)
        return welcomed

    def _on_closed(self, closed: Closed) -> None:
        log.info("connection closed (%s %s)", closed.code, closed.reason)
        if closed.session_replaced or closed.unauthenticated:
            # A replaced session revoked every lease of this Agent (MWP-WRK-014):
            # stop every slot; the WorkItems wait in their queues.
            self._session_lost()

    async def _on_protocol_event(self, event: ProtocolEvent) -> None:
        if isinstance(event, Welcome):
            await self._on_welcome(event)
        elif isinstance(event, EventReceived):
            await self._on_event(event)
        elif isinstance(event, ReceiptReceived):
            pending = self._pending.pop(event.action_id, None)
            if pending is not None and not pending[1].done():
                pending[1].set_result(event.receipt)
        elif isinstance(event, CommandRefused):
            pending = self._pending.pop(event.action_id, None)
            if pending is not None and not pending[1].done():
                pending[1].set_exception(Refused(event.code, event.message, event.reason))
        elif isinstance(event, CursorTooOld):
            await self._restore(event.group, event.snapshot)
        elif isinstance(event, MembershipChanged):
            self._on_membership(event)
        elif isinstance(event, SubscriptionRefused | ServerError | BadFrame):
            log.warning("server: %s", event)

    async def _on_welcome(self, welcome: Welcome) -> None:
        assert self._session is not None
        if self.session_epoch is not None and welcome.session_epoch != self.session_epoch:
            self._fail_pending(Refused("AUTH_STALE_SESSION", "a new session"))
        self.session_epoch = welcome.session_epoch
        # Whatever happened while disconnected (a replaced session's lease
        # revocations above all) is behind every head read from now on.
        self._connection += 1
        self._heads.clear()
        self._synced.clear()
        self._head_reads.clear()
        # In-flight Commands of this session go again with their action IDs (MWP-EVT-003).
        for envelope, fut in list(self._pending.values()):
            if not fut.done():
                self._session.command(envelope)
        self._connected.set()
        self._spawn(self._reconcile())
        self._spawn(self._after_welcome(self._session))
        self._wake.set()  # the reactor asks for the heads of the Groups it has work in

    async def _after_welcome(self, session: ClientSession) -> None:
        """Learn the Groups, subscribe each from its durable Cursor, publish the card, report presence."""
        status, payload = await self._http.call("GET", "/api/v1/memberships", token=self._token)
        if status != 200 or session is not self._session:
            log.warning("memberships: %s", payload)
            return
        groups = [str(m["group"]) for m in payload.get("memberships", [])]
        self._admin_group = payload.get("admin_group")
        if self._admin_group:
            groups.insert(0, self._admin_group)
        for group in groups:
            if group not in session.subscriptions:
                session.subscribe(group, after=self.store.cursor(group).sequence)
        self._presence(session)
        await self._flush()
        if self._admin_group:
            self._policy_changed(self._admin_group)  # the policy this store already knows
        if not self._card_published and self._admin_group:
            await self._publish_card()

    async def _publish_card(self) -> None:
        # The card lists one version per capability ID: the highest registered.
        latest = dict(sorted(self.capabilities))
        body = {"capabilities": [{"id": i, "version": v} for i, v in sorted(latest.items())],
                "max_concurrency": self.slots}  # fmt: skip
        assert self._admin_group is not None
        try:
            await self._command("agent_card.publish", self._admin_group, body)
            self._card_published = True
        except Refused as exc:
            log.warning("agent card not published: %s", exc)

    def _on_membership(self, change: MembershipChanged) -> None:
        session = self._session
        if session is None:
            return
        if change.active and change.group not in session.subscriptions:
            session.subscribe(change.group, after=self.store.cursor(change.group).sequence)
        if not change.active:
            for slot in list(self._running.values()):
                if slot.group == change.group:
                    self._stop_slot(slot, "membership removed")
        self._wake.set()

    async def _on_event(self, received: EventReceived) -> None:
        try:
            await asyncio.to_thread(self.store.apply, received.event)
        except (MalformedEvent, ChainBroken, ProjectionError) as exc:
            # Nothing of the refused Event was written: ask again from the durable Cursor.
            log.warning("event refused (%s); resubscribing %s", exc, received.group)
            if self._session is not None:
                self._session.subscribe(received.group, after=self.store.cursor(received.group).sequence)
            return
        # ACK the highest contiguous durable Cursors (MWP-WRK-030), at most
        # every ACK_INTERVAL while Events stream in; the reactor ACKs the rest.
        now = asyncio.get_running_loop().time()
        if now - self._last_ack >= ACK_INTERVAL:
            self._ack(now)
        if received.group == self._admin_group:
            self._policy_changed(received.group)
        self._wake.set()
        self._notify()

    def _ack(self, now: float) -> None:
        if self._session is not None and self._session.state != "closed":
            self._session.ack(self.store.ack_positions())
            self._last_ack = now

    def _policy_changed(self, group: str) -> None:
        meta = self.store.meta(group)
        if meta is None or meta.priority_policy is None or meta.policy_revision == self._policy_revision:
            return
        self._policy_revision = meta.policy_revision
        policy = json.loads(meta.priority_policy)
        if isinstance(policy, dict):
            self.picker.set_policy(policy)

    async def _restore(self, group: str, reference: Mapping[str, Any]) -> None:
        """CURSOR_TOO_OLD: fetch, verify and restore the signed snapshot; replay after it (spec 16)."""
        url = str(reference.get("url") or f"/api/v1/groups/{group}/snapshots/{reference.get('sequence')}")
        status, document = await self._http.call("GET", url, token=self._token)
        if status != 200:
            log.warning("snapshot of %s: %s", group, document)
            return
        if self._server_key is None:
            status, key = await self._http.call("GET", "/api/v1/server-key")
            if status != 200:
                return
            self._server_key = str(key["public_key"])
        try:
            await asyncio.to_thread(
                self.store.restore_snapshot, document, self._server_key, self.identity.organization, group
            )
        except SnapshotRefused as exc:
            log.error("snapshot of %s refused (%s): not restored", group, exc)
            return
        self.log.append(("snapshot.restored", group, str(document.get("sequence"))))
        if group == self._admin_group:
            self._policy_changed(group)
        if self._session is not None:
            self._session.subscribe(group, after=self.store.cursor(group).sequence)
        self._wake.set()
        self._notify()
