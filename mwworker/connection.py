"""The Agent socket ``/mwp/0.1``: the session, one connection's frames, and what the server's frames change.

One connection (§17.1): HELLO in four phases (the key file's key signs the
challenge), then SUBSCRIBE every Group this Agent is a member of (``GET
/api/v0.1/memberships``, asked again every ``MEMBERSHIP_POLL_SECONDS``) from
its durable Cursor (``afterSequence``). Every EVENT is verified against the
Group Authority's key (``GET /api/v0.1/keys/{keyId}``, cached in
``KeyCache``) and applied by ``Store.apply``; the highest contiguous durable
Cursors are ACKed. PING carries the Presence Record and answers the
server's. BACKPRESSURE pauses one Group: its Commands wait, and after
``retryAfterMs`` it is subscribed again from its Cursor; the other Groups
flow on. CURSOR_TOO_OLD fetches, verifies and restores the signed snapshot,
then subscribes after it.

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
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from mwportal.protocol import jcs

from .context import utcnow
from .errors import (
    ChainBroken,
    Fatal,
    MalformedEvent,
    ProjectionError,
    Refused,
    SignatureRefused,
    SnapshotRefused,
    WorkerError,
)
from .events import key_id_of
from .offline import Offline
from .protocol import (
    Backpressure,
    BadFrame,
    ClientSession,
    Closed,
    CommandAccepted,
    CommandRefused,
    CursorTooOld,
    EventReceived,
    HelloRefused,
    Pong,
    ProtocolEvent,
    ServerError,
    SubscriptionRefused,
    Welcome,
)
from .rest import _error_of

log = logging.getLogger("mwworker")

ACK_INTERVAL = 0.2  # seconds between ACK frames while a replay streams in
PRESENCE_INTERVAL = 20.0  # seconds between PINGs with the Presence Record
MEMBERSHIP_POLL_SECONDS = 5.0  # how often the Worker asks for Groups it was added to
ENDPOINT = "/mwp/0.1"


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
    """One connection at a time: HELLO, subscriptions, Events, Commands' outcomes, snapshots."""

    def _ws_url(self) -> str:
        if self.portal.startswith("https://"):
            return "wss://" + self.portal[len("https://") :] + ENDPOINT
        return "ws://" + self.portal.removeprefix("http://") + ENDPOINT

    async def _connect_once(self) -> bool:
        """One connection: True when the server accepted the HELLO."""
        welcomed = False
        try:
            ws = await connect(self._ws_url(), max_size=16 * 1024 * 1024, open_timeout=10)
        except InvalidURI as exc:
            raise Fatal(f"bad portal URL: {exc}") from None
        session = ClientSession(self.me, self.identity.key, clock=utcnow)
        self._ws, self._session = ws, session
        closed: Closed | None = None
        try:
            session.hello()
            await self._flush()
            async for frame in ws:
                if isinstance(frame, bytes):
                    continue  # §17.1: a binary message carries no protocol object
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
            for action in self._pending:
                self._in_doubt[action] = True  # answered on the next connection (§19)
            self._ws, self._session = None, None
        if closed is not None:
            log.info("connection closed (%s %s)", closed.code, closed.reason)
        return welcomed

    async def _on_protocol_event(self, event: ProtocolEvent) -> None:
        if isinstance(event, Welcome):
            await self._on_welcome(event)
        elif isinstance(event, EventReceived):
            await self._on_event(event)
        elif isinstance(event, CommandAccepted):
            self._answer(event.action_id, result=event.event)
        elif isinstance(event, CommandRefused):
            self._answer(event.action_id, error=Refused(event.code, event.message, event.reason))
        elif isinstance(event, Backpressure):
            self._on_backpressure(event)
        elif isinstance(event, CursorTooOld):
            await self._restore(event.group, event.error)
        elif isinstance(event, HelloRefused):
            if event.code in ("AUTH_INVALID_SIGNATURE", "UNSUPPORTED_VERSION"):
                raise Fatal(f"the portal refused this Agent's HELLO: {event.code} {event.message}")
            log.warning("HELLO refused: %s", event)
        elif isinstance(event, ServerError):
            if event.code == "AUTH_STALE_SESSION":
                self._session_lost()  # another runtime of this Agent took over (§6.3)
            else:
                log.warning("server: %s %s", event.code, event.message)
        elif isinstance(event, SubscriptionRefused | BadFrame):
            log.warning("server: %s", event)
        elif isinstance(event, Pong):
            self._last_pong = asyncio.get_running_loop().time()

    def _answer(self, action_id: str, *, result: dict[str, Any] | None = None, error: Exception | None = None) -> None:
        pending = self._pending.get(action_id)
        if pending is None or pending[1].done():
            return
        if error is not None:
            pending[1].set_exception(error)
        else:
            pending[1].set_result(result or {})

    async def _on_welcome(self, welcome: Welcome) -> None:
        assert self._session is not None
        if self.session_epoch is not None and welcome.session_epoch != self.session_epoch:
            # A new Session Epoch fences the old one (§6.3): its leases are
            # revoked, and Commands signed under it are stale.
            for slot in list(self._running.values()):
                self._stop_slot(slot, "new session")
        self.session_epoch = welcome.session_epoch
        self._token = welcome.session_token
        # Whatever happened while disconnected (a replaced session's lease
        # revocations above all) is behind every head read from now on.
        self._connection += 1
        self._heads.clear()
        self._synced.clear()
        self._head_reads.clear()
        self._connected.set()
        self._spawn(self._resolve_in_doubt())
        self._spawn(self._reconcile())
        self._spawn(self._memberships(self._session))
        self._wake.set()  # the reactor asks for the heads of the Groups it has work in

    async def _memberships(self, session: ClientSession) -> None:
        """Subscribe every Group this Agent is a member of from its durable Cursor,
        asking again while the connection lasts (an Agent added to a Group
        learns it here: it receives nothing from a Group it is not subscribed to)."""
        while session is self._session and session.state == "open":
            status, payload = await self._http.call("GET", "/api/v0.1/memberships", token=self._token)
            if session is not self._session:
                return
            if status == 200 and isinstance(payload, dict):
                groups = sorted({str(m["groupId"]) for m in payload.get("memberships", [])
                                 if isinstance(m, dict) and m.get("state") != "ended"})  # fmt: skip
                for group in groups:
                    if group not in session.subscriptions and group not in session.paused:
                        session.subscribe(group, after=self.store.cursor(group).sequence)
                self._presence(session)
                await self._flush()
                self._policy_changed()
            else:
                log.warning("memberships: %s", payload)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_event.wait(), MEMBERSHIP_POLL_SECONDS)

    async def _ensure_key(self, key_id: str) -> bool:
        """The Registry's binding of ``key_id`` in the key cache (``GET /api/v0.1/keys/{keyId}``)."""
        if self.keys.knows(key_id):
            return True
        status, binding = await self._http.call("GET", f"/api/v0.1/keys/{key_id}")
        if status != 200 or not isinstance(binding, dict):
            log.error("key %s: %s", key_id, binding)
            return False
        try:
            self.keys.add(binding)
        except SignatureRefused as exc:
            log.error("key %s refused: %s", key_id, exc)
            return False
        return True

    async def _on_event(self, received: EventReceived) -> None:
        event = received.event
        if not await self._ensure_key(key_id_of(event)):
            log.error("Event %s of %s: its signing key is unknown; not applied", event.get("eventId"), received.group)
            self.log.append(("event.refused", received.group, "unknown signing key"))
            return
        try:
            await asyncio.to_thread(self.store.apply, event)
        except (SignatureRefused, MalformedEvent, ChainBroken, ProjectionError) as exc:
            # Nothing of the refused Event was written: the durable Cursor still
            # stands before it, and the next subscription replays from there.
            log.warning("Event refused (%s) in %s", exc, received.group)
            self.log.append(("event.refused", received.group, type(exc).__name__))
            return
        # ACK the highest contiguous durable Cursors (§16), at most every
        # ACK_INTERVAL while Events stream in; the reactor ACKs the rest.
        now = asyncio.get_running_loop().time()
        if now - self._last_ack >= ACK_INTERVAL:
            self._ack(now)
        meta = self.store.meta(received.group)
        if meta is not None and meta.kind == "admin":
            self._policy_changed()
        if meta is not None and not meta.my_active and meta.my_roles is not None:
            for slot in list(self._running.values()):
                if slot.group == received.group:
                    self._stop_slot(slot, "membership ended")
        self._wake.set()
        self._notify()

    def _ack(self, now: float) -> None:
        if self._session is not None and self._session.state == "open":
            self._session.ack(self.store.ack_positions())
            self._last_ack = now

    def _on_backpressure(self, pause: Backpressure) -> None:
        """§17.3: the server paused one Group; resume it after ``retryAfterMs``."""
        log.info("backpressure on %s: retry after %d ms", pause.group, pause.retry_after_ms)
        self.log.append(("backpressure", pause.group, str(pause.retry_after_ms)))
        session = self._session
        self._spawn(self._resume_later(session, pause.group, pause.retry_after_ms / 1000))

    async def _resume_later(self, session: ClientSession | None, group: str, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_event.wait(), delay)
        if session is None or session is not self._session or session.state != "open":
            return  # a new connection subscribes every Group anyway
        session.resume(group, after=self.store.cursor(group).sequence)
        await self._flush()

    def _policy_changed(self) -> None:
        """The Organization priority policy, from the administrative Group's projection."""
        for group in self.store.groups():
            meta = self.store.meta(group)
            if meta is None or meta.kind != "admin" or meta.priority_policy is None:
                continue
            if meta.policy_revision == self._policy_revision:
                return
            self._policy_revision = meta.policy_revision
            policy = json.loads(meta.priority_policy)
            if isinstance(policy, dict):
                self.picker.set_policy(policy)
            return

    async def _restore(self, group: str, error: Mapping[str, Any]) -> None:
        """CURSOR_TOO_OLD: fetch, verify and restore the signed snapshot; replay after it (§16).

        ``details.snapshot.href`` answers ``{"snapshot": <Group Snapshot>,
        "state": <its state>}`` whose JCS bytes hash to ``snapshotArtifactHash``.
        """
        details = error.get("details")
        reference = details.get("snapshot") if isinstance(details, dict) else None
        href = reference.get("href") if isinstance(reference, dict) else None
        if not isinstance(href, str):
            log.error("CURSOR_TOO_OLD for %s without a snapshot reference: not restored", group)
            return
        status, body = await self._http.call("GET", href, token=self._token)
        if status != 200 or not isinstance(body, dict):
            log.warning("snapshot of %s: %s", group, _error_of(status, body))
            return
        try:
            if jcs.sha256_hash(jcs.canonicalize(body)) != error.get("snapshotArtifactHash"):
                raise SnapshotRefused("snapshotArtifactHash", "the snapshot is not the one the error names")
            document = body.get("snapshot")
            if not isinstance(document, dict) or not isinstance(document.get("signature"), dict):
                raise SnapshotRefused("schema", "the snapshot response holds no signed Group Snapshot")
            if not await self._ensure_key(str(document["signature"].get("keyId"))):
                raise SnapshotRefused("key-resolution", "the snapshot's signing key is unknown")
            state = jcs.canonicalize(body.get("state"))
            await asyncio.to_thread(self.store.restore_snapshot, document, state, group)
        except (SnapshotRefused, jcs.DataModelError) as exc:
            log.error("snapshot of %s refused (%s): not restored", group, exc)
            return
        self.log.append(("snapshot.restored", group, str(document.get("throughSequence"))))
        self._policy_changed()
        if self._session is not None and self._session.state == "open":
            self._session.subscribe(group, after=self.store.cursor(group).sequence)
        self._wake.set()
        self._notify()
