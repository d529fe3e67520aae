"""WebSocket consumers (DESIGN §4): ``/ws/v1/agent`` and ``/ws/v1/ui/groups/{id}``.

Frames are JSON objects with an ``op``. A bad frame (malformed JSON, unknown
``op``, over 1 MiB, a subscribe to a foreign Group) gets an ``error`` frame
and changes nothing else: the connection and its other subscriptions stay up.
More than ``MAX_BAD_FRAMES`` bad frames within ``BAD_FRAME_WINDOW`` seconds
close the connection with code 4008 (policy violation, in the
application range) and a reason.

Commands arrive through ``accept()`` like every other write; reads come from
the database through the per-process hub (``missions/hub.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.utils import timezone

from mwportal.protocol import (
    CanonicalizationError,
    ErrorCode,
    ProtocolError,
    loads_strict,
    parse_envelope,
    parse_uuid,
)

from .access import access_group
from .auth import agent_for_token
from .authority import Auth, Command, accept
from .delivery import agent_channel
from .direct_send import direct_sender
from .hub import Event, Subscription, agents_current, get_hub
from .models import Agent, AgentCursor, AgentPresence, Group, Membership
from .snapshots import snapshot_for_cursor

log = logging.getLogger(__name__)

MAX_FRAME_BYTES = 1024 * 1024
MAX_BAD_FRAMES = 20
BAD_FRAME_WINDOW = 10.0
# Application close codes must be 1000 or 3000-4999 (RFC 6455 §7.4.2; autobahn
# refuses 1008 from an application): 4008 mirrors 1008 "policy violation".
CLOSE_POLICY = 4008
CLOSE_SESSION_REPLACED = 4001
CLOSE_UNAUTHENTICATED = 4003


class FrameError(Exception):
    def __init__(self, code: ErrorCode | str, message: str, ref: Any = None):
        super().__init__(message)
        self.code, self.message, self.ref = str(code), message, ref


def _subscribe_check(agent: Agent, group_id: str, after: int) -> tuple[Group, dict[str, Any] | None, dict[str, Any]]:
    """Membership (NOT_A_MEMBER) and the online window (CURSOR_TOO_OLD) of a subscribe."""
    group = access_group(agent, group_id)
    if after > group.last_sequence:
        raise ProtocolError(
            ErrorCode.MALFORMED, f"after: {after} is beyond the head {group.last_sequence}", {"field": "after"}
        )
    snap = snapshot_for_cursor(group, after)
    membership = Membership.objects.filter(group=group, agent=agent, active=True).first()
    info = {"roles": membership.roles if membership else [], "membership_epoch": membership.epoch if membership
            else None}  # fmt: skip
    return group, (snap.reference() if snap is not None else None), info


def _store_ack(agent_id: str, group_id: str, sequence: int) -> None:
    """Keep the highest acknowledged cursor; acknowledgement never deletes history (MWP-WRK-030)."""
    head = Group.objects.filter(id=group_id).values_list("last_sequence", flat=True).first()
    if head is None:
        raise ProtocolError(ErrorCode.NOT_FOUND, f"group {group_id} does not exist")
    if sequence > head:
        raise ProtocolError(
            ErrorCode.MALFORMED, f"sequence: {sequence} is beyond the head {head}", {"field": "sequence"}
        )
    cursor, created = AgentCursor.objects.get_or_create(
        agent_id=agent_id, group_id=group_id, defaults={"sequence": sequence, "updated_at": timezone.now()}
    )
    if not created and sequence > cursor.sequence:
        AgentCursor.objects.filter(pk=cursor.pk, sequence__lt=sequence).update(
            sequence=sequence, updated_at=timezone.now()
        )


def _store_presence(agent_id: str, capacity: dict[str, Any], connected: bool) -> None:
    AgentPresence.objects.update_or_create(
        agent_id=agent_id, defaults={"capacity": capacity, "connected": connected, "updated_at": timezone.now()}
    )


class _EventStream(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """What both consumers share: JSON frames, bad-frame accounting, hub subscriptions."""

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

    async def send_json(self, frame: dict[str, Any]) -> None:
        if self.closing:
            return
        async with self.send_lock:
            await self.send(text_data=json.dumps(frame, separators=(",", ":")))

    async def error(self, code: str, message: str, ref: Any = None) -> None:
        await self.send_json({"op": "error", "code": code, "message": message, "ref": ref})

    async def bad_frame(self, code: str, message: str, ref: Any = None) -> None:
        await self.error(code, message, ref)
        now = time.monotonic()
        self.bad_frames.append(now)
        while self.bad_frames and self.bad_frames[0] < now - BAD_FRAME_WINDOW:
            self.bad_frames.popleft()
        if len(self.bad_frames) > MAX_BAD_FRAMES:
            reason = f"closing: more than {MAX_BAD_FRAMES} bad frames in {BAD_FRAME_WINDOW:.0f} s"
            # daphne drops the reason of a close frame, so it travels in a
            # last error frame just before the close code.
            await self.error("MALFORMED", reason)
            await self.close(code=CLOSE_POLICY, reason=reason)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        raw = text_data if text_data is not None else bytes_data
        if raw is None or self.closing:
            return
        size = len(raw.encode("utf-8", "surrogatepass")) if isinstance(raw, str) else len(raw)
        if size > MAX_FRAME_BYTES:
            await self.bad_frame("MALFORMED", f"frame: over {MAX_FRAME_BYTES} bytes")
            return
        try:
            frame = loads_strict(raw)
        except CanonicalizationError as exc:
            await self.bad_frame("MALFORMED", f"frame: {exc}")
            return
        if not isinstance(frame, dict) or not isinstance(frame.get("op"), str):
            await self.bad_frame("MALFORMED", "frame: must be a JSON object with an op")
            return
        handler = getattr(self, "op_" + frame["op"], None) if frame["op"].isidentifier() else None
        if handler is None:
            await self.bad_frame("MALFORMED", f"op: unknown op {frame['op'][:40]!r}", frame.get("ref"))
            return
        try:
            await handler(frame)
        except FrameError as exc:
            await self.bad_frame(exc.code, exc.message, exc.ref)
        except ProtocolError as exc:
            await self.bad_frame(str(exc.code), exc.message, frame.get("ref"))

    async def start_stream(self, agent: Agent, group_id: str, after: int, ref: Any = None) -> None:
        """Subscribe to a Group from ``after``; CURSOR_TOO_OLD when that is outside the online window."""
        try:
            group, snapshot, _ = await database_sync_to_async(_subscribe_check)(agent, group_id, after)
        except ProtocolError as exc:
            raise FrameError(exc.code, exc.message, ref or group_id) from None
        if snapshot is not None:
            await self.send_json({"op": "cursor_too_old", "group": group_id, "snapshot": snapshot})
            return
        hub = await get_hub()
        old = self.subscriptions.pop(group_id, None)
        if old is not None:
            await hub.unsubscribe(old)
        agent_id = str(agent.id)

        async def deliver(events: list[Event]) -> bool:
            for event in events:
                if event["type"] == "membership.removed" and event["body"].get("agent") == agent_id:
                    # Not a member from this Event on: stop at once.
                    self.subscriptions.pop(group_id, None)
                    await self.send_json(
                        {
                            "op": "membership",
                            "group": group_id,
                            "roles": [],
                            "membership_epoch": event["body"].get("membership_epoch"),
                            "active": False,
                        }
                    )
                    return False
                frame = getattr(event, "frame", None)
                if frame is None:
                    await self.send_json({"op": "event", "event": event})
                elif not self.closing and (self.direct is None or not self.direct.send(event)):
                    await self.send(text_data=frame)
            return True

        def deliver_now(events: list[Event]) -> bool | None:
            # The live path's common case, without a task switch: Events
            # framed once, sent straight to daphne's open connection.
            # Anything else (a removal of this agent, a closing or non-daphne
            # connection) is deliver()'s.
            direct = self.direct
            if self.closing or direct is None or not direct.is_open():
                return None
            for event in events:
                if getattr(event, "frame", None) is None or (
                    event["type"] == "membership.removed" and event["body"].get("agent") == agent_id
                ):
                    return None
            for event in events:
                direct.send(event)
            return True

        self.subscriptions[group_id] = await hub.subscribe(str(group.id), after, deliver, deliver_now)

    async def stop_stream(self, group_id: str) -> None:
        sub = self.subscriptions.pop(group_id, None)
        if sub is not None:
            await (await get_hub()).unsubscribe(sub)


def _after(frame: dict[str, Any]) -> int:
    after = frame.get("after", 0)
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise FrameError("MALFORMED", "after: must be a non-negative integer", frame.get("group"))
    return after


class AgentConsumer(_EventStream):
    """``/ws/v1/agent``: ``hello``, then any number of ``subscribe``s, ``ack``,
    ``command`` and ``presence`` frames on one connection."""

    async def connect(self) -> None:
        self.session_epoch = 0
        self.memberships: dict[str, tuple[list[str], int]] = {}
        # The highest Membership epoch known per Group, removals included: a
        # notice can come twice (from this machine's commit and through the
        # channel layer), and the second copy may follow a newer notice.
        self.epochs: dict[str, int] = {}
        await super().connect()

    async def disconnect(self, code: int) -> None:
        if self.agent is not None:
            hub = await get_hub()
            hub.unwatch_agent(str(self.agent.id), self._check_current)
            hub.unlisten_agent(str(self.agent.id), self._agent_notice)
            if self.channel_layer is not None:
                await self.channel_layer.group_discard(agent_channel(str(self.agent.id)), self.channel_name)
            with contextlib.suppress(Exception):
                await database_sync_to_async(_store_presence)(str(self.agent.id), {}, False)
        await super().disconnect(code)

    def require_hello(self) -> Agent:
        if self.agent is None:
            raise FrameError(ErrorCode.STALE_SESSION, "send hello with the session token first")
        return self.agent

    async def op_hello(self, frame: dict[str, Any]) -> None:
        token = frame.get("token")
        if not isinstance(token, str) or not token:
            raise FrameError("MALFORMED", "token: is required")
        try:
            agent, epoch = await database_sync_to_async(agent_for_token)(token)
        except ProtocolError as exc:
            await self.error(str(exc.code), exc.message)
            await self.close(code=CLOSE_UNAUTHENTICATED, reason="the session token is not current")
            return
        self.agent, self.session_epoch = agent, epoch
        if self.channel_layer is not None:
            await self.channel_layer.group_add(agent_channel(str(agent.id)), self.channel_name)
        current = await database_sync_to_async(agents_current)([str(agent.id)])
        self.memberships = current[str(agent.id)][1]
        self.epochs = {group_id: e for group_id, (_roles, e) in self.memberships.items()}
        await self.send_json({"op": "welcome", "agent": str(agent.id), "session_epoch": epoch})
        hub = await get_hub()
        hub.watch_agent(str(agent.id), self._check_current)
        hub.listen_agent(str(agent.id), self._agent_notice)

    async def op_subscribe(self, frame: dict[str, Any]) -> None:
        agent = self.require_hello()
        group_id = parse_uuid(frame.get("group"), "group")
        await self.start_stream(agent, group_id, _after(frame), frame.get("ref"))

    async def op_unsubscribe(self, frame: dict[str, Any]) -> None:
        self.require_hello()
        await self.stop_stream(parse_uuid(frame.get("group"), "group"))

    async def op_ack(self, frame: dict[str, Any]) -> None:
        agent = self.require_hello()
        cursors = frame.get("cursors")
        if not isinstance(cursors, list) or not cursors:
            raise FrameError("MALFORMED", "cursors: must be a non-empty list of {group, sequence}")
        for i, cursor in enumerate(cursors):
            if not isinstance(cursor, dict) or set(cursor) != {"group", "sequence"}:
                raise FrameError("MALFORMED", f"cursors.{i}: needs exactly group and sequence")
            seq = cursor["sequence"]
            if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
                raise FrameError("MALFORMED", f"cursors.{i}.sequence: must be a non-negative integer")
            group_id = parse_uuid(cursor["group"], f"cursors.{i}.group")
            await database_sync_to_async(access_group)(agent, group_id)
            await database_sync_to_async(_store_ack)(str(agent.id), group_id, seq)

    async def op_command(self, frame: dict[str, Any]) -> None:
        self.require_hello()
        envelope = parse_envelope(frame.get("envelope"))
        try:
            receipt = await database_sync_to_async(accept)(Command(envelope, Auth.SIGNED))
        except ProtocolError as exc:
            # A refused Command is an answer, not a bad frame.
            await self.error(str(exc.code), exc.message, envelope.action_id)
            return
        await self.send_json({"op": "receipt", "receipt": receipt})

    async def op_presence(self, frame: dict[str, Any]) -> None:
        agent = self.require_hello()
        capacity = frame.get("capacity")
        if not isinstance(capacity, dict) or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in capacity.values()
        ):
            raise FrameError("MALFORMED", "capacity: must be an object of non-negative integers")
        await database_sync_to_async(_store_presence)(str(agent.id), capacity, True)

    # --- notices from accept() through the channel layer ------------------

    async def agent_membership(self, message: dict[str, Any]) -> None:
        await self._membership_changed(
            message["group"], message["roles"], message["membership_epoch"], message["active"]
        )

    async def agent_session(self, message: dict[str, Any]) -> None:
        # A newer session fences this one (MWP-WRK-014); an older epoch's
        # notice is old news.
        if message["session_epoch"] > self.session_epoch:
            await self.close(code=CLOSE_SESSION_REPLACED, reason="session replaced")

    async def _agent_notice(self, message: dict[str, Any]) -> None:
        """The hub's hand-over of a notice from a commit on this machine."""
        if message.get("type") == "agent.membership":
            await self.agent_membership(message)
        elif message.get("type") == "agent.session":
            await self.agent_session(message)

    async def _membership_changed(
        self, group_id: str, roles: list[str], epoch: int, active: bool, *, checked: bool = False
    ) -> None:
        """``checked``: read from the database by the agent check, which
        knows no removal's epoch; a notice older than one already taken is
        ignored."""
        seen = self.epochs.get(group_id, 0)
        if epoch < seen and not checked:
            return
        self.epochs[group_id] = max(seen, epoch)
        known = self.memberships.get(group_id)
        if active and known == (roles, epoch):
            return
        if not active and known is None:
            return
        if active:
            self.memberships[group_id] = (roles, epoch)
        else:
            self.memberships.pop(group_id, None)
            await self.stop_stream(group_id)
        await self.send_json(
            {"op": "membership", "group": group_id, "roles": roles, "membership_epoch": epoch, "active": active}
        )

    async def _check_current(self, epoch: int, memberships: dict[str, tuple[list[str], int]]) -> None:
        """The hub's periodic agent check: a replaced session closes the
        connection; Membership changes become ``membership`` frames."""
        if epoch != self.session_epoch:
            await self.close(code=CLOSE_SESSION_REPLACED, reason="session replaced")
            return
        for group_id in set(self.memberships) - set(memberships):
            await self._membership_changed(group_id, [], 0, False, checked=True)
        for group_id, (roles, e) in memberships.items():
            await self._membership_changed(group_id, roles, e, True, checked=True)


def _person_agent(user: Any) -> Agent | None:
    if user is None or not user.is_authenticated:
        return None
    return Agent.objects.filter(user_id=user.pk).first()


class GroupUIConsumer(_EventStream):
    """``/ws/v1/ui/groups/{id}``: the browser's live view of one Group,
    authenticated by the Django session and permitted by Membership. Streams
    from ``?after=N`` (default: the last 50 Events)."""

    async def connect(self) -> None:
        await super().connect()
        agent = await database_sync_to_async(_person_agent)(self.scope.get("user"))
        if agent is None:
            await self.error("STALE_SESSION", "sign in to the portal first")
            await self.close(code=CLOSE_UNAUTHENTICATED, reason="not signed in")
            return
        self.agent = agent
        group_id = self.scope["url_route"]["kwargs"]["group_id"]
        query = dict(
            part.split("=", 1) for part in self.scope.get("query_string", b"").decode().split("&") if "=" in part
        )
        try:
            group_id = parse_uuid(group_id, "group")
            head = await database_sync_to_async(
                lambda: Group.objects.filter(id=group_id).values_list("last_sequence", flat=True).first()
            )()
            after = int(query["after"]) if "after" in query else max((head or 0) - 50, 0)
            await self.start_stream(agent, group_id, max(after, 0))
        except (FrameError, ProtocolError, ValueError) as exc:
            code = getattr(exc, "code", "MALFORMED")
            await self.error(str(code), getattr(exc, "message", str(exc)))
            await self.close(code=CLOSE_POLICY, reason=str(code))

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        await self.bad_frame("MALFORMED", "this stream is read-only; issue Commands through the portal")
