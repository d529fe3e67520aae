"""A sans-I/O client session for the agent WebSocket ``/ws/v1/agent`` (DESIGN §4).

The session does no I/O and keeps no clock: the runtime hands it every text
frame it receives and sends whatever it has queued::

    session = ClientSession()
    session.hello(token)
    for group, sequence in store.ack_positions().items():
        session.subscribe(group, after=sequence)      # resume from the durable Cursor
    await ws.send_many(session.frames_to_send())
    async for text in ws:
        for event in session.feed(text):
            ...                                       # EventReceived -> Store.apply, ...
        await ws.send_many(session.frames_to_send())

Frames queued before the server's ``welcome`` (``subscribe``, ``ack``,
``command``, ``presence``) are held and released when it arrives: the server
answers anything but ``hello`` with AUTH_STALE_SESSION until then.

What ``feed()`` returns, one protocol event per frame:

=====================  =====================================================
``Welcome``            ``welcome {agent, session_epoch}``
``EventReceived``      ``event {event}`` with an Event of the DESIGN §4 shape
``ReceiptReceived``    ``receipt {receipt}`` answering a ``command``
``CommandRefused``     ``error`` whose ``ref`` is a pending Command's action ID
``SubscriptionRefused`` ``error`` whose ``ref`` is a Group being subscribed
``ServerError``        any other ``error {code, message, ref}``
``CursorTooOld``       ``cursor_too_old {group, snapshot}``: restore, then subscribe again
``MembershipChanged``  ``membership {group, roles, membership_epoch, active}``
``BadFrame``           a frame this client cannot read; the session carries on
=====================  =====================================================

``connection_lost(code, reason)`` ends the session and returns ``Closed``;
Commands still unanswered then are *in doubt* (``in_doubt()``): resend the
same envelopes, with the same action IDs, on the next connection, and the
server answers each with its original receipt if it was accepted
(MWP-EVT-003).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mwportal.protocol import CanonicalizationError, loads_strict

from .errors import MalformedEvent
from .events import Event, check_event

# Close codes of missions/consumers.py.
CLOSE_SESSION_REPLACED = 4001
CLOSE_UNAUTHENTICATED = 4003
CLOSE_POLICY = 4008


@dataclass(frozen=True, slots=True)
class Welcome:
    agent: str
    session_epoch: int


@dataclass(frozen=True, slots=True)
class EventReceived:
    group: str
    event: Event


@dataclass(frozen=True, slots=True)
class ReceiptReceived:
    action_id: str
    receipt: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CommandRefused:
    action_id: str
    code: str
    message: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SubscriptionRefused:
    group: str
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class ServerError:
    code: str
    message: str
    ref: Any


@dataclass(frozen=True, slots=True)
class CursorTooOld:
    """The Cursor is outside the online log: restore ``snapshot`` (a reference:
    group, sequence, hash, signature, url), then subscribe after its sequence."""

    group: str
    snapshot: dict[str, Any]


@dataclass(frozen=True, slots=True)
class MembershipChanged:
    group: str
    roles: tuple[str, ...]
    membership_epoch: int | None
    active: bool


@dataclass(frozen=True, slots=True)
class BadFrame:
    reason: str
    frame: str  # the first 200 characters, for the log


@dataclass(frozen=True, slots=True)
class Closed:
    code: int | None
    reason: str
    session_replaced: bool  # 4001: another session of this Agent took over (MWP-WRK-014)
    unauthenticated: bool  # 4003: the token is not current; open a new session first


ProtocolEvent = (
    Welcome
    | EventReceived
    | ReceiptReceived
    | CommandRefused
    | SubscriptionRefused
    | ServerError
    | CursorTooOld
    | MembershipChanged
    | BadFrame
    | Closed
)


class SessionClosed(Exception):
    """A frame was queued on a session whose connection is gone."""


def _frame(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class ClientSession:
    """One connection's worth of protocol state: ``idle`` -> ``greeting``
    (hello sent) -> ``open`` (welcome received) -> ``closed``."""

    def __init__(self) -> None:
        self.state = "idle"
        self.agent: str | None = None
        self.session_epoch: int | None = None
        self._outgoing: list[str] = []
        self._held: list[str] = []
        # Groups asked for and not refused, with the position asked from.
        self.subscriptions: dict[str, int] = {}
        self._pending: dict[str, dict[str, Any]] = {}
        self._acked: dict[str, int] = {}

    # --- what the client sends --------------------------------------------------

    def frames_to_send(self) -> list[str]:
        """Text frames to write, in order; the queue is emptied."""
        out, self._outgoing = self._outgoing, []
        return out

    def _queue(self, obj: dict[str, Any], *, hold: bool = True) -> None:
        if self.state == "closed":
            raise SessionClosed("the connection is closed; start a new ClientSession")
        text = _frame(obj)
        if hold and self.state != "open":
            self._held.append(text)
        else:
            self._outgoing.append(text)

    def hello(self, token: str) -> None:
        """Authenticate with the bearer token of ``POST /api/v1/sessions``."""
        if self.state != "idle":
            raise ValueError(f"hello is the first frame of a session (state is {self.state})")
        self._queue({"op": "hello", "token": token}, hold=False)
        self.state = "greeting"

    def subscribe(self, group: str, after: int) -> None:
        """Stream ``group`` from ``after`` (the durable Cursor); the server replays
        what follows it, possibly with duplicates around a disconnect (spec 16)."""
        if after < 0:
            raise ValueError("after must be non-negative")
        self.subscriptions[group] = after
        # ``ref`` names the Group, so a refusal comes back naming it.
        self._queue({"op": "subscribe", "group": group, "after": after, "ref": group})

    def unsubscribe(self, group: str) -> None:
        self.subscriptions.pop(group, None)
        self._queue({"op": "unsubscribe", "group": group})

    def ack(self, positions: Mapping[str, int]) -> None:
        """ACK the highest contiguous durable Cursors (``Store.ack_positions()``).

        Only Cursors that moved since the last ACK go out; nothing is sent when
        none did. An ACK permits delivery cleanup, never history deletion.
        """
        cursors: list[dict[str, Any]] = [
            {"group": g, "sequence": s} for g, s in sorted(positions.items()) if s > self._acked.get(g, 0)
        ]
        if not cursors:
            return
        self._acked.update({c["group"]: c["sequence"] for c in cursors})
        self._queue({"op": "ack", "cursors": cursors})

    def command(self, envelope: dict[str, Any]) -> None:
        """Send a signed Command envelope; its answer is a ``ReceiptReceived``
        or a ``CommandRefused`` naming its action ID."""
        action_id = envelope.get("action_id")
        if not isinstance(action_id, str):
            raise ValueError("the envelope needs its action_id")
        self._pending[action_id] = envelope
        # ``ref`` makes even a SCHEMA_VALIDATION_FAILED refusal name the Command it refuses.
        self._queue({"op": "command", "envelope": envelope, "ref": action_id})

    def presence(self, capacity: Mapping[str, int]) -> None:
        """Report current capacity (spec 11.1: Presence), e.g. ``{"slots": 2, "free": 1}``."""
        self._queue({"op": "presence", "capacity": dict(capacity)})

    def in_doubt(self) -> list[dict[str, Any]]:
        """Commands sent and not yet answered, oldest first."""
        return list(self._pending.values())

    # --- what the server sends -------------------------------------------------

    def feed(self, frame_text: str | bytes) -> list[ProtocolEvent]:
        """Parse one received text frame into protocol events (usually one)."""
        preview = frame_text[:200] if isinstance(frame_text, str) else frame_text[:200].decode("utf-8", "replace")
        try:
            frame = loads_strict(frame_text)
        except CanonicalizationError as exc:
            return [BadFrame(f"not JSON: {exc}", preview)]
        if not isinstance(frame, dict) or not isinstance(frame.get("op"), str):
            return [BadFrame("a frame is a JSON object with an op", preview)]
        handler = _HANDLERS.get(frame["op"])
        if handler is None:
            return [BadFrame(f"unknown op {frame['op'][:40]!r}", preview)]
        try:
            return handler(self, frame)
        except (KeyError, TypeError, ValueError, MalformedEvent) as exc:
            return [BadFrame(f"{frame['op']}: {exc}", preview)]

    def _on_welcome(self, frame: dict[str, Any]) -> list[ProtocolEvent]:
        agent, epoch = frame["agent"], frame["session_epoch"]
        if not isinstance(agent, str) or isinstance(epoch, bool) or not isinstance(epoch, int):
            raise ValueError("welcome needs agent and an integer session_epoch")
        self.agent, self.session_epoch = agent, epoch
        if self.state == "greeting":
            self.state = "open"
            self._outgoing += self._held
            self._held = []
        return [Welcome(agent, epoch)]

    def _on_event(self, frame: dict[str, Any]) -> list[ProtocolEvent]:
        event = check_event(frame["event"])
        return [EventReceived(event["group"], event)]

    def _on_receipt(self, frame: dict[str, Any]) -> list[ProtocolEvent]:
        receipt = frame["receipt"]
        if not isinstance(receipt, dict) or not isinstance(receipt.get("action_id"), str):
            raise ValueError("receipt needs an object with its action_id")
        self._pending.pop(receipt["action_id"], None)
        return [ReceiptReceived(receipt["action_id"], receipt)]

    def _on_error(self, frame: dict[str, Any]) -> list[ProtocolEvent]:
        code, message, ref = str(frame.get("code")), str(frame.get("message", "")), frame.get("ref")
        if isinstance(ref, str) and ref in self._pending:
            del self._pending[ref]
            return [CommandRefused(ref, code, message, error_reason(frame))]
        if isinstance(ref, str) and ref in self.subscriptions:
            del self.subscriptions[ref]
            return [SubscriptionRefused(ref, code, message)]
        return [ServerError(code, message, ref)]

    def _on_cursor_too_old(self, frame: dict[str, Any]) -> list[ProtocolEvent]:
        group, snapshot = frame["group"], frame["snapshot"]
        if not isinstance(group, str) or not isinstance(snapshot, dict):
            raise ValueError("cursor_too_old needs group and a snapshot reference")
        self.subscriptions.pop(group, None)  # the server did not subscribe us
        return [CursorTooOld(group, snapshot)]

    def _on_membership(self, frame: dict[str, Any]) -> list[ProtocolEvent]:
        group, roles, epoch, active = frame["group"], frame["roles"], frame["membership_epoch"], frame["active"]
        if not isinstance(group, str) or not isinstance(roles, list) or not isinstance(active, bool):
            raise ValueError("membership needs group, roles and active")
        if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int)):
            raise ValueError("membership_epoch must be an integer")
        if not active:
            self.subscriptions.pop(group, None)  # the server stopped the stream
        return [MembershipChanged(group, tuple(str(r) for r in roles), epoch, active)]

    def connection_lost(self, code: int | None = None, reason: str = "") -> list[ProtocolEvent]:
        """The transport closed; the session is over (start a new one to reconnect)."""
        self.state = "closed"
        self._outgoing, self._held = [], []
        return [
            Closed(
                code=code,
                reason=reason,
                session_replaced=code == CLOSE_SESSION_REPLACED,
                unauthenticated=code == CLOSE_UNAUTHENTICATED,
            )
        ]


_HANDLERS = {
    "welcome": ClientSession._on_welcome,
    "event": ClientSession._on_event,
    "receipt": ClientSession._on_receipt,
    "error": ClientSession._on_error,
    "cursor_too_old": ClientSession._on_cursor_too_old,
    "membership": ClientSession._on_membership,
}


def error_reason(document: dict[str, Any]) -> str | None:
    """``details.reason`` of an error document, when it has one."""
    details = document.get("details")
    reason = details.get("reason") if isinstance(details, dict) else None
    return reason if isinstance(reason, str) else None
