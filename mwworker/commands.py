"""Sending Commands over the session, and catching up before anything ownership-bound goes out.

A Command goes out once connected and reconciled, is sent again unchanged on
every reconnect until answered (MWP-EVT-003), and one refused as stale
after a long disconnect goes once more as a new Command (spec §19). Nothing
bound to ownership goes out for a Group before its durable Cursor reached
the head read after the welcome (issue 16 item 12).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from websockets.exceptions import ConnectionClosed

from mwportal.protocol import format_time, make_envelope, parse_time, signed

from .context import utcnow
from .errors import Refused
from .protocol import ClientSession
from .rest import _error_of
from .state import WorkerState, _Slot

log = logging.getLogger("mwworker")

HEAD_RETRY_SECONDS = 1.0  # a Group head that could not be read is asked again after this


# A Command refused AUTH_INVALID_SIGNATURE when signed longer ago than this is sent
# once more as a new Command (spec §19): the server's freshness window is the
# Organization's (900 s by default), and a resend after a long disconnect
# outlives it. A Command signed just now is not stale: its refusal stands.
REFRESH_AFTER_SECONDS = 60.0


class Commands(WorkerState):
    """The session's outgoing side: frames, Commands, catching up, a lost session."""

    async def _flush(self) -> None:
        session, ws = self._session, self._ws
        if session is None or ws is None:
            return
        async with self._send_lock:
            try:
                for frame in session.frames_to_send():
                    await ws.send(frame)
            except ConnectionClosed:
                # The connection loop sees the close and reconnects; the next
                # session sends the in-flight Commands again and acks anew.
                return

    def _fail_pending(self, error: Exception) -> None:
        for _env, fut in self._pending.values():
            if not fut.done():
                fut.set_exception(error)
        self._pending.clear()

    def _presence(self, session: ClientSession | None = None) -> None:
        session = session or self._session
        if session is None or session.state == "closed":
            return
        free = max(self.slots - len(self._running), 0)
        session.presence({"slots": self.slots, "free": free, "running": len(self._running)})

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def _caught_up(self, group: str) -> bool:
        """Whether ``group``'s durable Cursor has reached the head read on this
        connection. The first ask on a connection sends for that head."""
        if group in self._synced:
            return True
        head = self._heads.get(group)
        if head is None:
            self._read_head(group)
            return False
        if self.store.cursor(group).sequence < head:
            return False
        self._synced.add(group)
        return True

    def _read_head(self, group: str) -> None:
        if group in self._head_reads or not self._connected.is_set():
            return
        self._head_reads.add(group)
        self._spawn(self._fetch_head(group, self._connection))

    async def _fetch_head(self, group: str, connection: int) -> None:
        """Read ``group``'s head after this connection's welcome (the ``head``
        of ``GET /api/v1/groups/{id}/events``). Read after the session was
        opened, it includes the Events of everything the server did when it
        opened (a replaced session's lease revocations, MWP-WRK-014). Tried
        again while this connection lasts; given up when the Group refuses
        this Agent (it is not a member: nothing ownership-bound can go out)."""
        after = self.store.cursor(group).sequence
        while connection == self._connection and not self._stopping:
            path = f"/api/v1/groups/{group}/events?after={after}&limit=1"
            try:
                status, payload = await self._http.call("GET", path, token=self._token)
            except OSError as exc:
                status, payload = 0, {"code": "HTTP", "message": str(exc)}
            if connection != self._connection:
                return
            if status == 200 and isinstance(payload, dict) and isinstance(payload.get("head"), int):
                self._heads[group] = payload["head"]
                self._wake.set()
                self._notify()
                return
            details = payload.get("details") if isinstance(payload, dict) else None
            snapshot = details.get("snapshot") if isinstance(details, dict) else None
            if status == 410 and isinstance(snapshot, dict) and isinstance(snapshot.get("sequence"), int):
                after = max(after, snapshot["sequence"])  # outside the online window: ask after the snapshot
                continue
            err = _error_of(status, payload)
            if err.code in ("MEMBERSHIP_REQUIRED", "GROUP_NOT_FOUND", "AUTH_FORBIDDEN"):
                log.info("head of %s: %s; nothing ownership-bound goes out there", group, err)
                return
            log.warning("head of %s: %s; asking again", group, err)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_event.wait(), HEAD_RETRY_SECONDS)

    async def _catch_up(self, group: str, slot: _Slot | None = None) -> bool:
        """Wait until ``group`` is caught up on the current connection (a
        reconnect while waiting moves the head along). False when ``slot``
        was stopped meanwhile: its lease ended, nothing lease-bound goes out."""
        while not self._caught_up(group):
            if slot is not None and slot.stopped is not None:
                return False
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), 0.5)
        return True

    async def _command(
        self,
        type_: str,
        group: str,
        body: dict[str, Any],
        *,
        target: dict[str, Any] | None = None,
        ownership_epoch: int | None = None,
        lease_id: str | None = None,
    ) -> dict[str, Any]:
        """Sign and send a Command over the agent socket; its receipt, or ``Refused``."""
        await self._connected.wait()
        await self._reconciled.wait()
        if ownership_epoch is not None:
            # Ownership-bound (work.start and every lease-bound Command): not
            # before the Group is caught up (issue 16 item 12). The callers
            # waited already and read their target after; this holds the
            # rule when a reconnect came in between.
            await self._catch_up(group)
        assert self.session_epoch is not None
        envelope = make_envelope(
            type=type_, actor=self.me, group=group, body=body, session_epoch=self.session_epoch,
            private_key=self.identity.private_key, target=target, ownership_epoch=ownership_epoch, lease_id=lease_id,
        )  # fmt: skip
        return await self._send(envelope)

    async def _send(self, envelope: dict[str, Any], *, refresh: bool = True) -> dict[str, Any]:
        """Send ``envelope`` (again on every reconnect, unchanged) until it is answered.

        An ``AUTH_INVALID_SIGNATURE`` refusal of a Command signed more than
        ``refresh_after_seconds`` ago may be its ``issued_at`` freshness (the
        wire does not say which check failed, spec §8): it is then sent once
        as a new Command (spec §19), with a new action ID, a current
        ``issued_at`` and a new signature. That cannot apply anything twice:
        the server answers a known action ID from its receipt before it
        checks freshness. A second refusal is the caller's.
        """
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[envelope["action_id"]] = (envelope, fut)
        if self._session is not None and self._session.state != "closed":
            self._session.command(envelope)
            await self._flush()
        try:
            return await fut
        except Refused as exc:
            if exc.code == "AUTH_STALE_SESSION" and self.session_epoch == envelope["session_epoch"]:
                self._session_lost()
            if refresh and exc.code == "AUTH_INVALID_SIGNATURE" and self._signed_long_ago(envelope):
                fresh = self._refreshed(envelope)
                log.info("%s %s refused as stale; sent again as %s", envelope["type"], envelope["action_id"],
                         fresh["action_id"])  # fmt: skip
                self.log.append(("command.refreshed", envelope["type"], fresh["action_id"]))
                return await self._send(fresh, refresh=False)
            raise
        finally:
            self._pending.pop(envelope["action_id"], None)

    def _signed_long_ago(self, envelope: Mapping[str, Any]) -> bool:
        issued = parse_time(envelope["issued_at"], "issued_at")  # this Worker's own envelope
        return (utcnow() - issued).total_seconds() > self.refresh_after_seconds

    def _refreshed(self, envelope: Mapping[str, Any]) -> dict[str, Any]:
        """The same Command as a new one: new action ID, current ``issued_at``, new signature (spec §19)."""
        return self._resigned(envelope, action_id=str(uuid.uuid4()))

    def _resigned(self, envelope: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
        """``envelope`` with ``changes``, a current ``issued_at`` and this Worker's new signature."""
        kept = {k: v for k, v in envelope.items() if k not in ("signature", "issued_at", *changes)}
        return signed(self.identity.private_key, {**kept, **changes, "issued_at": format_time(utcnow())})

    def _session_lost(self) -> None:
        """The server says this session is no longer current (another runtime of
        this Agent opened one): its leases are revoked (MWP-WRK-014). Stop every
        slot and reconnect under a new session."""
        if self._token is None:
            return
        self._token = None
        self._fail_pending(Refused("AUTH_STALE_SESSION", "the session was replaced"))
        for slot in list(self._running.values()):
            self._stop_slot(slot, "session replaced")
        ws = self._ws
        if ws is not None:
            ws.transport.abort()
