"""Sending Commands over the session, and catching up before anything ownership-bound goes out.

Every Command is a normative signed Command document
(``mwportal.protocol.command.build_command``, §15.1) carrying this Agent's
Session Epoch and its Membership Epoch in the Group; a compare-and-set kind
(the catalogue says which, §15.3) carries ``expectedRevision``, the
WorkItem's revision in the caught-up store. It goes out as a COMMAND frame
once connected and reconciled; the WebSocket has no receipt (DESIGN §5), so
its answer is the EVENT whose ``cause`` names its ``actionId`` (applied to
the store first) or an ERROR naming it (``relatedActionId``).

A Command still unanswered when a connection drops is in doubt: on the next
connection it goes to ``POST /api/v0.1/commands`` unchanged (§19: same
Action ID, same signed content), whose receipt says what became of it
(``replayed: true`` when it had been accepted). A Command refused as stale
(``AUTH_INVALID_SIGNATURE`` long after it was signed: its freshness) goes once
more as a new Command with a new Action ID (§19). A compare-and-set Command
refused ``REVISION_CONFLICT`` while its WorkItem's row is behind is sent again,
as a new Command, once the row moved. Nothing bound to ownership goes out for
a Group before its durable Cursor reached the head read after the HELLO
(issue 16 item 12).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from websockets.exceptions import ConnectionClosed

from mwportal.protocol import catalogue
from mwportal.protocol.command import build_command, format_timestamp
from mwportal.protocol.ids import bare

from .context import utcnow
from .errors import Refused
from .protocol import ClientSession
from .rest import _error_of
from .state import WorkerState, _Slot

log = logging.getLogger("mwworker")

HEAD_RETRY_SECONDS = 1.0  # a Group head that could not be read is asked again after this
CONFLICT_WAIT_SECONDS = 3.0  # how long a REVISION_CONFLICT waits for its row to move


# A Command refused AUTH_INVALID_SIGNATURE when signed longer ago than this is sent
# once more as a new Command (§19): the Group Authority's freshness window is
# MWP_COMMAND_FRESHNESS_SECONDS (300 by default), and a resend after a long
# disconnect outlives it. A Command signed just now is not stale: its refusal stands.
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
        for _doc, fut in self._pending.values():
            if not fut.done():
                fut.set_exception(error)
        self._pending.clear()

    def _presence_record(self) -> dict[str, Any]:
        """This Worker's Presence Record (§6.2): capacity, never another Group's data."""
        now = utcnow()
        active = len(self._running)
        return {
            "agentId": self.me,
            "sessionEpoch": self.session_epoch or 1,
            "status": "draining" if self._stopping else ("busy" if active >= self.slots else "online"),
            "capacity": {"maxSlots": self.slots, "activeSlots": active,
                         "availableSlots": max(self.slots - active, 0), "queuedItems": self._queued_count()},
            "capabilityAvailability": [{"capability": {"id": i, "version": v}, "status": "available"}
                                       for i, v in sorted(self.capabilities)],
            "lastHeartbeat": format_timestamp(now),
            "expiresAt": format_timestamp(now + self.presence_ttl),
        }  # fmt: skip

    def _queued_count(self) -> int:
        return sum(
            1 for g in self.store.groups() for r in self.store.queue(g) if r.owner == self.me and r.state == "queued"
        )

    def _presence(self, session: ClientSession | None = None) -> None:
        """A PING carrying the Presence Record (§17.3)."""
        session = session or self._session
        if session is None or session.state == "closed":
            return
        session.ping(self._presence_record())

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
        """Read ``group``'s head after this connection's HELLO (``headSequence`` of
        ``GET /api/v0.1/groups/{groupId}/events``). Read after the session was
        opened, it includes the Events of everything the server did when it
        opened (a replaced session's lease revocations, §11.3). Tried again
        while this connection lasts; given up when the Group refuses this
        Agent (nothing ownership-bound can go out there)."""
        after = self.store.cursor(group).sequence
        while connection == self._connection and not self._stopping:
            path = f"/api/v0.1/groups/{group}/events?afterSequence={after}&limit=1"
            try:
                status, payload = await self._http.call("GET", path, token=self._token)
            except OSError as exc:
                status, payload = 0, {"code": "HTTP", "message": str(exc)}
            if connection != self._connection:
                return
            if status == 200 and isinstance(payload, dict) and isinstance(payload.get("headSequence"), int):
                self._heads[group] = payload["headSequence"]
                self._wake.set()
                self._notify()
                return
            details = payload.get("details") if isinstance(payload, dict) else None
            snapshot = details.get("snapshot") if isinstance(details, dict) else None
            through = snapshot.get("throughSequence") if isinstance(snapshot, dict) else None
            if status == 410 and isinstance(through, int):
                after = max(after, through)  # outside the online window: ask after the snapshot
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

    def _revision(self, group: str, workitem: str | None) -> int | None:
        row = self.store.row(group, workitem) if workitem else None
        return row.revision if row is not None else None

    def _document(self, kind: str, group: str, payload: dict[str, Any], workitem: str | None) -> dict[str, Any]:
        """The signed Command document (§15.1) of ``kind`` in ``group``."""
        meta = self.store.meta(group)
        expected = self._revision(group, workitem) if catalogue.command(kind).compare_and_set else None
        assert self.identity.key.principal is not None
        return build_command(
            kind, actor=self.identity.key.principal, key=self.identity.key, payload=payload,
            group=bare(group, "groupId"), session_epoch=self.session_epoch,
            membership_epoch=meta.my_membership_epoch if meta is not None else None,
            expected_revision=expected, work_item_id=bare(workitem, "workItemId") if workitem else None,
        )  # fmt: skip

    async def _command(
        self, kind: str, group: str, payload: dict[str, Any], *, workitem: str | None = None, owned: bool = False
    ) -> dict[str, Any]:
        """Sign and send a Command; the first Event it caused (applied to the store), or ``Refused``.

        ``owned``: the Command is bound to ownership (``work.start`` and every
        lease-bound Command) and waits until the Group is caught up.
        """
        catalogue.validate_payload(kind, payload)  # a payload the catalogue refuses is this Worker's bug
        await self._connected.wait()
        await self._reconciled.wait()
        if owned:
            # The callers waited already and read their row after; this holds
            # the rule when a reconnect came in between (issue 16 item 12).
            await self._catch_up(group)
        refreshed = False
        while True:
            document = self._document(kind, group, payload, workitem)
            try:
                return await self._send(document)
            except Refused as exc:
                if exc.code == "REVISION_CONFLICT" and await self._row_moved(group, workitem, document):
                    continue  # our own earlier Event was still on its way: again, as a new Command
                if exc.code == "AUTH_INVALID_SIGNATURE" and not refreshed and self._signed_long_ago(document):
                    refreshed = True
                    log.info("%s %s refused as stale; sent again as a new Command", kind, document["actionId"])
                    self.log.append(("command.refreshed", kind, document["actionId"]))
                    continue
                raise

    async def _row_moved(self, group: str, workitem: str | None, document: Mapping[str, Any]) -> bool:
        """After REVISION_CONFLICT: whether the row's revision moves past the one sent (soon)."""
        sent = document.get("expectedRevision")
        if workitem is None or sent is None:
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONFLICT_WAIT_SECONDS
        while loop.time() < deadline:
            if self._revision(group, workitem) != sent:
                return True
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), 0.2)
        return False

    async def _send(self, document: dict[str, Any]) -> dict[str, Any]:
        """Send ``document`` until it is answered: the Event it caused, or ``Refused``.

        While the connection is down it waits; a connection that drops with
        it unanswered hands it to ``_resolve_in_doubt`` on the next one.
        """
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        action = document["actionId"]
        self._pending[action] = (document, fut)
        if self._session is not None and self._session.state != "closed":
            self._session.command(document)
            await self._flush()
        try:
            return await fut
        except Refused as exc:
            if exc.code == "AUTH_STALE_SESSION" and self.session_epoch == document.get("sessionEpoch"):
                self._session_lost()
            raise
        finally:
            self._pending.pop(action, None)

    async def _resolve_in_doubt(self) -> None:
        """Commands unanswered when the last connection dropped, unchanged to
        ``POST /api/v0.1/commands`` (§19): the receipt says whether each was
        accepted (``replayed``) and with which Events; a refusal is final."""
        for action, (document, fut) in list(self._pending.items()):
            if fut.done() or not self._in_doubt.get(action):
                continue
            self._in_doubt.pop(action, None)
            try:
                # No bearer token is needed (the signature authenticates), but the session's is sent.
                status, receipt = await self._http.call("POST", "/api/v0.1/commands", body=document, token=self._token)
            except OSError:
                self._in_doubt[action] = True
                continue
            if fut.done():
                continue
            if status in (200, 201) and isinstance(receipt, dict):
                fut.set_result(await self._event_of(document, receipt))
            else:
                fut.set_exception(_error_of(status, receipt))

    async def _event_of(self, document: Mapping[str, Any], receipt: Mapping[str, Any]) -> dict[str, Any]:
        """The first Event a receipt lists, once the store has applied it (it
        arrives over the subscription); its inbox document."""
        events = receipt.get("events") or []
        if not events or not isinstance(document.get("groupId"), str):
            return {"kind": None, "cause": {"type": "command", "id": document["actionId"]}, "payload": {}}
        group, sequence = str(document["groupId"]), int(events[0]["sequence"])
        await self.until(lambda: self.store.cursor(group).sequence >= sequence, timeout=30.0)
        for event in self.store.inbox(group, sequence - 1):
            return event
        return {"kind": events[0].get("kind"), "sequence": sequence, "payload": {}}

    def _signed_long_ago(self, document: Mapping[str, Any]) -> bool:
        issued = datetime.fromisoformat(str(document["issuedAt"]).replace("Z", "+00:00"))
        return (utcnow() - issued).total_seconds() > self.refresh_after_seconds

    def _session_lost(self) -> None:
        """The server says this session is no longer current (another runtime of
        this Agent opened one): its leases are revoked (§11.3). Stop every
        slot and reconnect under a new session."""
        if self.session_epoch is None:
            return
        self.session_epoch = None
        self._fail_pending(Refused("AUTH_STALE_SESSION", "the session was replaced"))
        for slot in list(self._running.values()):
            self._stop_slot(slot, "session replaced")
        ws = self._ws
        if ws is not None:
            ws.transport.abort()
