"""A sans-I/O client session of the MWP 0.1 WebSocket binding ``/mwp/0.1`` (PROTOCOL §17; DESIGN §5).

The session does no I/O; the clock is injected. The runtime hands it every
text message it receives and sends whatever it has queued::

    session = ClientSession(agent_id, key)
    session.hello()                                       # HELLO/client_init
    await ws.send_many(session.frames_to_send())
    async for text in ws:
        for event in session.feed(text):
            ...                                           # Welcome -> subscribe; EventReceived -> Store.apply
        await ws.send_many(session.frames_to_send())

HELLO is the four phases of §6.3 (``mwportal.protocol.handshake.ClientHandshake``:
the challenge is checked to be this handshake's transcript before the Agent
signs it). Frames queued before ``HELLO/server_accept`` (SUBSCRIBE, ACK,
COMMAND, PING) are held and released when it arrives.

What ``feed()`` returns:

======================  ====================================================
``Welcome``             ``HELLO/server_accept``: session token, Session Epoch
``EventReceived``       ``EVENT``: the Event document and its exact bytes
``CommandAccepted``     after the ``EventReceived`` whose ``cause`` names a
                        pending Command's ``actionId`` (§5: a WebSocket has
                        no receipt frame)
``CommandRefused``      ``ERROR`` naming a pending Command (``relatedActionId``)
``Backpressure``        ``ERROR BACKPRESSURE`` for a Group (§17.3): the Group
                        is paused; ``resume(group, after)`` after ``retry_after_ms``
``CursorTooOld``        ``ERROR CURSOR_TOO_OLD`` for a Group (§16): restore the
                        snapshot, then ``subscribe`` again
``SubscriptionRefused`` ``ERROR`` answering a SUBSCRIBE (``relatedFrameId``),
                        e.g. ``GROUP_NOT_FOUND``
``HelloRefused``        ``ERROR`` during the handshake (the key is refused)
``Pong``                a ``PING`` echoing this session's nonce
``ServerError``         any other ``ERROR``
``BadFrame``            a message this client cannot read; the session carries on
======================  ====================================================

A server ``PING`` is answered at once with a ``PING`` echoing its nonce
(``replyToNonce``), carrying the latest Presence Record (§6.2, §17.3).

``connection_lost(code, reason)`` ends the session; Commands still unanswered
then are *in doubt* (``in_doubt()``): send the same documents, with the same
action IDs, again (§19: an unchanged retry keeps its Action ID and signed
content), and the Group Authority answers each with its original outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from mwportal.protocol import frames
from mwportal.protocol.errors import ProtocolError
from mwportal.protocol.handshake import ClientHandshake, SigningKey

from .errors import MalformedEvent
from .events import Event, check_event


@dataclass(frozen=True, slots=True)
class Welcome:
    session_token: str
    session_epoch: int
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class EventReceived:
    group: str
    event: Event
    data: bytes  # the Event's bytes as they arrived


@dataclass(frozen=True, slots=True)
class CommandAccepted:
    action_id: str  # urn:uuid:
    event: Event  # the first Event whose cause is the Command


@dataclass(frozen=True, slots=True)
class CommandRefused:
    action_id: str
    code: str
    message: str
    reason: str | None = None
    error: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Backpressure:
    group: str
    retry_after_ms: int
    action_id: str | None = None  # the Command held back, when the refusal named one


@dataclass(frozen=True, slots=True)
class CursorTooOld:
    """The Cursor is outside the online log: restore the signed snapshot the
    error document references (``snapshotArtifactHash``, ``details``), then
    subscribe after its sequence (§16)."""

    group: str
    error: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SubscriptionRefused:
    group: str
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class HelloRefused:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Pong:
    nonce: str


@dataclass(frozen=True, slots=True)
class ServerError:
    code: str
    message: str
    error: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class BadFrame:
    reason: str
    frame: str  # the first 200 characters, for the log


@dataclass(frozen=True, slots=True)
class Closed:
    code: int | None
    reason: str
    session_replaced: bool  # the server fenced this session (AUTH_STALE_SESSION)


ProtocolEvent = (
    Welcome
    | EventReceived
    | CommandAccepted
    | CommandRefused
    | Backpressure
    | CursorTooOld
    | SubscriptionRefused
    | HelloRefused
    | Pong
    | ServerError
    | BadFrame
    | Closed
)


class SessionClosed(Exception):
    """A frame was queued on a session whose connection is gone."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


def error_reason(document: Mapping[str, Any]) -> str | None:
    """``details.reason`` of an error document, when it has one."""
    details = document.get("details")
    reason = details.get("reason") if isinstance(details, dict) else None
    return reason if isinstance(reason, str) else None


class ClientSession:
    """One connection's protocol state: ``idle`` -> ``greeting`` (HELLO under
    way) -> ``open`` (accepted) -> ``closed``."""

    def __init__(self, agent_id: str, key: SigningKey, *, clock: Callable[[], datetime] = _utcnow) -> None:
        self.agent_id = agent_id
        self.state = "idle"
        self.session_token: str | None = None
        self.session_epoch: int | None = None
        self._clock = clock
        self._handshake = ClientHandshake(agent_id, key)
        self._outgoing: list[str] = []
        self._held: list[str] = []
        # Groups asked for and not refused, with the position asked from.
        self.subscriptions: dict[str, int] = {}
        self._subscribe_frames: dict[str, list[str]] = {}  # SUBSCRIBE frameId -> its Groups
        self._pending: dict[str, dict[str, Any]] = {}  # actionId -> Command document
        self._acked: dict[str, int] = {}
        # Groups paused by BACKPRESSURE: until when, and the Commands held for them.
        self.paused: dict[str, datetime] = {}
        self._held_commands: dict[str, list[dict[str, Any]]] = {}
        self._nonces: set[str] = set()
        self._presence: dict[str, Any] | None = None

    # --- what the client sends --------------------------------------------------

    def frames_to_send(self) -> list[str]:
        """Text frames to write, in order; the queue is emptied."""
        out, self._outgoing = self._outgoing, []
        return out

    def _queue(self, frame: dict[str, Any], *, hold: bool = True) -> None:
        if self.state == "closed":
            raise SessionClosed("the connection is closed; start a new ClientSession")
        text = frames.encode(frame)
        if hold and self.state != "open":
            self._held.append(text)
        else:
            self._outgoing.append(text)

    def hello(self) -> None:
        """Phase 1 of HELLO (§6.3): ``HELLO/client_init``."""
        if self.state != "idle":
            raise ValueError(f"HELLO is the first frame of a session (state is {self.state})")
        self._queue(self._handshake.start(), hold=False)
        self.state = "greeting"

    def subscribe(self, group: str, after: int, attention: Mapping[str, Any] | None = None) -> None:
        """Stream ``group`` after ``after`` (its durable Cursor, §16 ``afterSequence``);
        the server replays what follows, possibly with duplicates."""
        if after < 0:
            raise ValueError("afterSequence must be non-negative")
        self.subscriptions[group] = after
        frame = frames.subscribe([(group, after)], attention={group: attention} if attention else None)
        self._subscribe_frames[frame["frameId"]] = [group]
        self._queue(frame)

    def ack(self, positions: Mapping[str, int]) -> None:
        """ACK the highest contiguous durable Cursors (§16; ``Store.ack_positions()``).

        Only Cursors that moved since the last ACK go out; nothing is sent when
        none did. An ACK permits delivery cleanup, never history deletion.
        """
        moved = [(g, s) for g, s in sorted(positions.items()) if s > self._acked.get(g, 0)]
        if not moved:
            return
        self._acked.update(moved)
        self._queue(frames.ack(moved, self._clock()))

    def command(self, document: dict[str, Any]) -> None:
        """Send a signed Command document; its answer is a ``CommandAccepted``
        or a ``CommandRefused`` naming its ``actionId``. A Command for a Group
        paused by BACKPRESSURE waits until the Group is resumed."""
        action_id = document.get("actionId")
        if not isinstance(action_id, str):
            raise ValueError("the Command document needs its actionId")
        self._pending[action_id] = document
        group = document.get("groupId")
        if isinstance(group, str) and group in self.paused:
            self._held_commands.setdefault(group, []).append(document)
            return
        self._queue(frames.command(document))

    def ping(self, presence: Mapping[str, Any] | None = None) -> str:
        """A PING (liveness, §17.3) carrying ``presence`` (a Presence Record, §6.2); its nonce."""
        if presence is not None:
            self._presence = dict(presence)
        frame = frames.ping(self._clock(), presence=self._presence)
        self._nonces.add(frame["nonce"])
        self._queue(frame)
        return str(frame["nonce"])

    def resume(self, group: str, after: int) -> None:
        """End a Group's BACKPRESSURE pause: subscribe again after ``after`` and send
        the Commands held for it, unchanged (same Action IDs, §19)."""
        self.paused.pop(group, None)
        self.subscribe(group, after)
        for document in self._held_commands.pop(group, []):
            if document["actionId"] in self._pending:
                self._queue(frames.command(document))

    def in_doubt(self) -> list[dict[str, Any]]:
        """Commands sent and not yet answered, oldest first."""
        return list(self._pending.values())

    # --- what the server sends -------------------------------------------------

    def feed(self, text: str | bytes) -> list[ProtocolEvent]:
        """Parse one received text message into protocol events."""
        preview = text[:200] if isinstance(text, str) else text[:200].decode("utf-8", "replace")
        try:
            frame = frames.parse(text)
        except ProtocolError as exc:
            return [BadFrame(f"{exc.code}: {exc.message}", preview)]
        try:
            if frame.type == "HELLO":
                return self._on_hello(frame)
            if frame.type == "EVENT":
                return self._on_event(frame)
            if frame.type == "ERROR":
                return self._on_error(frame.doc["error"])
            if frame.type == "PING":
                return self._on_ping(frame.doc)
        except ProtocolError as exc:
            return [BadFrame(f"{exc.code}: {exc.message}", preview)]
        except MalformedEvent as exc:
            return [BadFrame(f"EVENT: {exc}", preview)]
        return [BadFrame(f"a server does not send {frame.type}", preview)]

    def _on_hello(self, frame: frames.Frame) -> list[ProtocolEvent]:
        try:
            if frame.phase == "server_challenge":
                self._queue(self._handshake.receive_challenge(frame), hold=False)
                return []
            accepted = self._handshake.receive_accept(frame)
        except ProtocolError as exc:
            # Not this handshake's challenge, or out of order: nothing is signed, the session is over.
            self.state = "closed"
            return [HelloRefused(str(exc.code), exc.message)]
        self.session_token, self.session_epoch = accepted.session_token, accepted.session_epoch
        self.state = "open"
        self._outgoing += self._held
        self._held = []
        return [Welcome(accepted.session_token, accepted.session_epoch, accepted.expires_at)]

    def _on_event(self, frame: frames.Frame) -> list[ProtocolEvent]:
        event = check_event(frame.doc["event"])
        out: list[ProtocolEvent] = [EventReceived(event["groupId"], event, frame.nested or b"")]
        cause = event.get("cause")
        if isinstance(cause, dict) and cause.get("type") == "command" and cause.get("id") in self._pending:
            action_id = str(cause["id"])
            del self._pending[action_id]
            out.append(CommandAccepted(action_id, event))
        return out

    def _on_error(self, error: dict[str, Any]) -> list[ProtocolEvent]:
        code, message = str(error.get("code")), str(error.get("message", ""))
        group, action = error.get("groupId"), error.get("relatedActionId")
        if self.state == "greeting":
            return [HelloRefused(code, message)]
        if code == "BACKPRESSURE" and isinstance(group, str):
            wait = error.get("retryAfterMs")
            wait = wait if isinstance(wait, int) and not isinstance(wait, bool) and wait >= 0 else 1000
            self.paused[group] = self._clock() + timedelta(milliseconds=wait)
            self.subscriptions.pop(group, None)  # the server stopped the Group's delivery
            held = None
            if isinstance(action, str) and action in self._pending:
                held = action
                self._held_commands.setdefault(group, []).append(self._pending[action])
            return [Backpressure(group, wait, held)]
        if isinstance(action, str) and action in self._pending:
            del self._pending[action]
            return [CommandRefused(action, code, message, error_reason(error), error)]
        if code == "CURSOR_TOO_OLD" and isinstance(group, str):
            self.subscriptions.pop(group, None)  # the server did not subscribe us
            return [CursorTooOld(group, error)]
        related = error.get("relatedFrameId")
        if isinstance(related, str) and related in self._subscribe_frames:
            refused = self._subscribe_frames.pop(related)
            for g in refused:
                self.subscriptions.pop(g, None)
            return [SubscriptionRefused(g, code, message) for g in refused]
        return [ServerError(code, message, error)]

    def _on_ping(self, doc: dict[str, Any]) -> list[ProtocolEvent]:
        reply_to = doc.get("replyToNonce")
        if isinstance(reply_to, str):
            # A reply is never answered (two peers echoing each other's replies would never stop).
            if reply_to in self._nonces:
                self._nonces.discard(reply_to)
                return [Pong(reply_to)]
            return []
        # The peer's liveness probe: echo its nonce (§17.3) with the latest presence.
        self._queue(frames.ping(self._clock(), reply_to_nonce=doc["nonce"], presence=self._presence))
        return []

    def connection_lost(self, code: int | None = None, reason: str = "") -> list[ProtocolEvent]:
        """The transport closed; the session is over (start a new one to reconnect)."""
        self.state = "closed"
        self._outgoing, self._held = [], []
        return [Closed(code=code, reason=reason, session_replaced=False)]
