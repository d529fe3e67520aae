"""WebSocket consumers (PROTOCOL §17, DESIGN §5): what the two routes share, and the browser's live view.

- ``/mwp/0.1`` is the Agents' binding (``missions.agent_socket.AgentConsumer``).
- ``/ws/ui/groups/{id}`` is the browser's live view of one Group
  (``GroupUIConsumer``, below), by Django session and Membership.

Both send only MWP 0.1 frames (``mwportal.protocol.frames``): EVENT frames
around the stored signed Event documents (``GroupEvent.document``, exactly
the bytes the Group Authority signed) and ERROR frames around the normative
error document (§19). A bad frame (not one strict JSON text, not one of the
frame shapes, a binary message, §17.1) gets an ERROR and changes nothing
else: the connection and its other subscriptions stay up. More than
``MAX_BAD_FRAMES`` bad frames within ``BAD_FRAME_WINDOW`` seconds close the
connection with code 4008 (policy violation, in the application range) after
a last ERROR saying why.

A failure inside the server (the database down, the connection pool
exhausted) answers INTERNAL_ERROR, ``retryable: true`` with ``retryAfterMs``,
and leaves the connection up; it does not count as a bad frame, and its
traceback goes to the log, never to the client.

Reads come from the database through the per-process hub
(``missions/hub.py``): delivery reads after each subscriber's position.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from mwportal.protocol import ErrorCode, ProtocolError, frames
from mwportal.protocol.ids import bare, urn

from .access import access_group, replay_floor
from .api.groups import cursor_too_old
from .direct_send import direct_sender
from .feed import Event
from .hub import Subscription, get_hub
from .models import Agent, Group
from .snapshots import snapshot_for_cursor
from .ws_limits import INTERNAL_ERROR_RETRY_AFTER_MS

log = logging.getLogger(__name__)

MAX_FRAME_BYTES = 1024 * 1024
MAX_BAD_FRAMES = 20
BAD_FRAME_WINDOW = 10.0
# Application close codes must be 1000 or 3000-4999 (RFC 6455 §7.4.2; autobahn
# refuses 1008 from an application): 4008 mirrors 1008 "policy violation".
CLOSE_POLICY = 4008
CLOSE_SESSION_REPLACED = 4001
CLOSE_UNAUTHENTICATED = 4003
# 4011 mirrors 1011 "internal error" in the application range.
CLOSE_INTERNAL = 4011
# How many Events the browser's view starts with when it names no position.
UI_BACKLOG = 50


def internal_error(**related: Any) -> ProtocolError:
    """What a client hears of a failure inside the server: retry later, nothing
    more (the traceback is logged by the caller, never sent)."""
    return ProtocolError(
        ErrorCode.INTERNAL_ERROR,
        "the server failed and changed nothing; try again",
        retry_after_ms=INTERNAL_ERROR_RETRY_AFTER_MS,
        **related,
    )


def subscribe_check(agent: Agent, group_id: str, after: int) -> Group:
    """Membership (GROUP_NOT_FOUND, the same answer as for an absent Group,
    §17.2) and the online window (CURSOR_TOO_OLD) of one subscription."""
    group = access_group(agent, group_id)
    if after > group.last_sequence:
        raise ProtocolError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"afterSequence: {after} is beyond the Group's head {group.last_sequence}",
            details={"field": "/afterSequence", "reason": "beyond-head"},
        )
    snap = snapshot_for_cursor(group, after)
    if snap is not None:
        # The same document as the REST page's (DESIGN §5), naming the Group.
        err = cursor_too_old(snap, after)
        err.group_id = urn(group_id)
        raise err
    return group


def ends_membership(event: Event, agent_urn: str) -> bool:
    """Whether ``event`` ends the Membership of the Agent ``agent_urn``: the
    last Event that Agent gets of the Group."""
    if event.get("kind") != "membership.ended":
        return False
    principal = event.get("payload", {}).get("principal")
    return isinstance(principal, dict) and principal.get("id") == agent_urn


class EventStream(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """What both consumers share: frames out, bad-frame accounting, hub subscriptions."""

    agent: Agent | None = None

    async def connect(self) -> None:
        self.closing = False
        self.subscriptions: dict[str, Subscription] = {}
        self.bad_frames: deque[float] = deque()
        self.send_lock = asyncio.Lock()
        self.direct = direct_sender(self.base_send)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        hub = await get_hub()
        for sub in list(self.subscriptions.values()):
            await hub.unsubscribe(sub)
        self.subscriptions.clear()

    async def close(self, code: int | None = None, reason: str | None = None) -> None:
        self.closing = True
        await super().close(code=code, reason=reason)

    async def send_frame(self, frame: dict[str, Any]) -> None:
        if self.closing:
            return
        async with self.send_lock:
            await self.send(text_data=frames.encode(frame))

    async def send_error(
        self,
        err: ProtocolError,
        *,
        related_frame_id: str | None = None,
        related_action_id: str | None = None,
        group_id: str | None = None,
    ) -> None:
        """An ERROR frame around ``err``'s normative error document (§19)."""
        await self.send_frame(frames.error_frame(err, related_action_id, group_id, related_frame_id=related_frame_id))

    async def bad_frame(self, err: ProtocolError, **related: Any) -> None:
        """ERROR for a frame the peer got wrong; past the bound, the connection closes."""
        await self.send_error(err, **related)
        now = time.monotonic()
        self.bad_frames.append(now)
        while self.bad_frames and self.bad_frames[0] < now - BAD_FRAME_WINDOW:
            self.bad_frames.popleft()
        if len(self.bad_frames) > MAX_BAD_FRAMES:
            reason = f"closing: more than {MAX_BAD_FRAMES} bad frames in {BAD_FRAME_WINDOW:.0f} s"
            # daphne drops the reason of a close frame, so it travels in a
            # last ERROR frame just before the close code.
            await self.send_error(ProtocolError(ErrorCode.PROTOCOL_VIOLATION, reason, fatal=True))
            await self.close(code=CLOSE_POLICY, reason=reason)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.closing:
            return
        if text_data is None:
            # §17.1: a binary message never carries a protocol object.
            if bytes_data is not None:
                await self.bad_frame(_error_of(frames.refuse_binary()))
            return
        if len(text_data) > MAX_FRAME_BYTES or len(text_data.encode("utf-8", "surrogatepass")) > MAX_FRAME_BYTES:
            err = ProtocolError(
                ErrorCode.PROTOCOL_VIOLATION,
                f"a frame is at most {MAX_FRAME_BYTES} bytes",
                details={"reason": "frame-too-large"},
            )
            await self.bad_frame(err)
            return
        try:
            frame = frames.parse(text_data)
        except ProtocolError as exc:
            await self.bad_frame(exc)
            return
        await self.receive_frame(frame)

    async def receive_frame(self, frame: frames.Frame) -> None:
        raise NotImplementedError  # each route says what it takes

    async def start_stream(
        self,
        agent: Agent,
        group_id: str,
        after: int,
        *,
        window: int | None = None,
        wants: Callable[[Event], bool] | None = None,
        on_pause: Callable[[Subscription], None] | None = None,
    ) -> None:
        """Follow ``group_id`` (bare) from ``after``; raises the ProtocolError
        that refuses it (GROUP_NOT_FOUND, CURSOR_TOO_OLD, INTERNAL_ERROR)."""
        try:
            group = await database_sync_to_async(subscribe_check)(agent, group_id, after)
        except ProtocolError:
            raise
        except Exception:
            log.exception("subscribe to %s failed inside the server", group_id)
            raise internal_error() from None
        hub = await get_hub()
        old = self.subscriptions.pop(group_id, None)
        if old is not None:
            await hub.unsubscribe(old)
        agent_urn = urn(str(agent.id))

        async def deliver(events: list[Event]) -> bool:
            for event in events:
                if ends_membership(event, agent_urn):
                    # The Agent learns its Membership ended; nothing after.
                    await self._send_event(event)
                    self.subscriptions.pop(group_id, None)
                    return False
                if wants is None or wants(event):
                    await self._send_event(event)
            return True

        def deliver_now(events: list[Event]) -> bool | None:
            # The live path's common case, without a task switch: Events
            # framed once, sent straight to daphne's open connection.
            # Anything else (the end of this Agent's Membership, a closing or
            # non-daphne connection) is deliver()'s.
            direct = self.direct
            if self.closing or direct is None or not direct.is_open():
                return None
            if any(getattr(e, "frame", None) is None or ends_membership(e, agent_urn) for e in events):
                return None
            for event in events:
                if wants is None or wants(event):
                    direct.send(event)
            return True

        try:
            self.subscriptions[group_id] = await hub.subscribe(
                str(group.id), after, deliver, deliver_now, window=window, wants=wants, on_pause=on_pause
            )
        except Exception:
            log.exception("subscribe to %s failed inside the server", group_id)
            raise internal_error() from None

    async def _send_event(self, event: Event) -> None:
        text = getattr(event, "frame", None)
        if self.closing:
            return
        if text is None:
            await self.send_frame(frames.event(event))
        elif self.direct is None or not self.direct.send(event):
            async with self.send_lock:
                await self.send(text_data=text)

    async def stop_stream(self, group_id: str) -> None:
        sub = self.subscriptions.pop(group_id, None)
        if sub is not None:
            await (await get_hub()).unsubscribe(sub)


def _error_of(frame: dict[str, Any]) -> ProtocolError:
    """The ProtocolError of a built ERROR frame (to send it through ``bad_frame``)."""
    doc = frame["error"]
    return ProtocolError(doc["code"], doc["message"], details=doc.get("details"))


def _person_agent(user: Any) -> Agent | None:
    if user is None or not user.is_authenticated:
        return None
    return Agent.objects.filter(user_id=user.pk).first()


def _route_group(value: str) -> str:
    """The route's Group ID, bare UUID or ``urn:uuid:``; SCHEMA_VALIDATION_FAILED otherwise."""
    if value.startswith("urn:"):
        return bare(value, "groupId")
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        parsed = None
    if parsed is None or str(parsed) != value.lower() or len(value) != 36:
        return bare(value, "groupId")  # refuses it, naming the member
    return str(parsed)


def _head(group_id: str) -> int:
    return Group.objects.filter(id=group_id).values_list("last_sequence", flat=True).first() or 0


class GroupUIConsumer(EventStream):
    """``/ws/ui/groups/{id}``: the browser's live view of one Group,
    authenticated by the Django session and permitted by Membership. Sends
    EVENT frames carrying the stored signed Event documents from
    ``?afterSequence=N`` (default: the last ``UI_BACKLOG`` Events); a refusal
    is one ERROR frame, then the close."""

    async def connect(self) -> None:
        await super().connect()
        try:
            await self._start()
        except ProtocolError as exc:
            # A refusal closes as policy (the page does not retry); a failure
            # inside the server closes as internal, and the page retries.
            await self.send_error(exc, group_id=exc.group_id)
            internal = exc.code == ErrorCode.INTERNAL_ERROR
            await self.close(code=CLOSE_INTERNAL if internal else CLOSE_POLICY, reason=str(exc.code))
        except Exception:
            log.exception("the UI stream failed inside the server")
            await self.send_error(internal_error())
            await self.close(code=CLOSE_INTERNAL, reason=str(ErrorCode.INTERNAL_ERROR))

    async def _start(self) -> None:
        agent = await database_sync_to_async(_person_agent)(self.scope.get("user"))
        if agent is None:
            await self.send_error(ProtocolError(ErrorCode.AUTH_REQUIRED, "sign in to the portal first", fatal=True))
            await self.close(code=CLOSE_UNAUTHENTICATED, reason="not signed in")
            return
        self.agent = agent
        group_id = _route_group(self.scope["url_route"]["kwargs"]["group_id"])
        query = dict(
            part.split("=", 1) for part in self.scope.get("query_string", b"").decode().split("&") if "=" in part
        )
        if "afterSequence" in query:
            text = query["afterSequence"]
            if not text.isdigit() or len(text) > 16:
                raise ProtocolError(
                    ErrorCode.SCHEMA_VALIDATION_FAILED,
                    "afterSequence: must be a non-negative integer",
                    details={"field": "afterSequence", "reason": "not-a-sequence"},
                )
            after = int(text)
        else:
            after = max(await database_sync_to_async(_head)(group_id) - UI_BACKLOG, 0)
        # §8: a person whose visibility starts later replays from there, as an Agent does.
        after = max(after, await database_sync_to_async(replay_floor)(agent, group_id))
        await self.start_stream(agent, group_id, after)

    async def receive_frame(self, frame: frames.Frame) -> None:
        await self.bad_frame(
            ProtocolError(
                ErrorCode.PROTOCOL_VIOLATION,
                "this stream is read-only; issue Commands through the portal",
                details={"reason": "read-only-stream"},
            ),
            related_frame_id=frame.frame_id,
        )
