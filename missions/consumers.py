"""WebSocket consumers (DESIGN §4): ``/ws/v1/agent`` and ``/ws/v1/ui/groups/{id}``.

Frames are JSON objects with an ``op``. A bad frame (malformed JSON, unknown
``op``, over 1 MiB, a subscribe to a foreign Group) gets an ``error`` frame
and changes nothing else: the connection and its other subscriptions stay up.
More than ``MAX_BAD_FRAMES`` bad frames within ``BAD_FRAME_WINDOW`` seconds
close the connection with code 4008 (policy violation, in the
application range) and a reason.

Every ``error`` frame carries ``code``, ``message``, ``ref`` and
``retryable``, and ``retryAfterMs`` when the client should wait before it
sends the same frame again (spec §19). What a connection may do is bounded
(issue 16 item 8; the settings are in ``missions/ws_limits.py``):

- the Agents' route: a connection that has not said ``hello`` within
  ``MWP_WS_HELLO_TIMEOUT_SECONDS`` is closed (4003), and no address holds
  more than ``MWP_WS_MAX_UNAUTHENTICATED_PER_ADDRESS`` such connections in
  one daphne process (the next is told RATE_LIMITED and closed, 4008);
- a connection is one Agent, fixed by its first successful ``hello``: a
  second ``hello`` is refused (AUTH_FORBIDDEN) and closes the connection (4008),
  rather than being ignored, because a client that sends one is confused
  about whom it speaks for and every frame after it would be misread; a
  client with another session opens another connection. A ``command`` whose
  envelope actor is not that Agent is refused (AUTH_FORBIDDEN, ``ref`` its action
  ID), so a connection cannot relay another Agent's signed Commands;
- subscribes and unsubscribes, and presence frames, each draw on a
  per-connection token bucket, and a connection follows at most
  ``MWP_WS_MAX_SUBSCRIPTIONS`` Groups; past either, RATE_LIMITED (with
  ``retryAfterMs`` for a rate). A refusal counts as a bad frame, so a client
  that keeps sending past them meets the bad-frame bound and is closed.

A failure inside the server (the database down, the connection pool
exhausted) answers INTERNAL_ERROR, ``retryable: true`` with
``retryAfterMs``, and leaves the connection up; it does not count as a bad
frame, and its traceback goes to the log, never to the client.

Commands arrive through ``accept()`` like every other write; reads come from
the database through the per-process hub (``missions/hub.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
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
from .hub import Event, Subscription, get_hub
from .models import Agent, AgentCursor, AgentPresence, Group, Membership
from .readers import agents_current
from .snapshots import snapshot_for_cursor
from .ws_limits import INTERNAL_ERROR_RETRY_AFTER_MS, Limits, TokenBucket, client_address, unauthenticated

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


class FrameError(Exception):
    def __init__(
        self,
        code: ErrorCode | str,
        message: str,
        ref: Any = None,
        *,
        retry_after_ms: int | None = None,
        details: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.code, self.message, self.ref = ErrorCode(code), message, ref
        self.retry_after_ms, self.details = retry_after_ms, details


def internal_error(ref: Any = None) -> FrameError:
    """What a client hears of a failure inside the server: retry later, nothing
    more (the traceback is logged by the caller, never sent)."""
    return FrameError(
        ErrorCode.INTERNAL_ERROR,
        "the server failed and changed nothing; try again",
        ref,
        retry_after_ms=INTERNAL_ERROR_RETRY_AFTER_MS,
    )


def _subscribe_check(agent: Agent, group_id: str, after: int) -> tuple[Group, dict[str, Any] | None, dict[str, Any]]:
    """Membership (GROUP_NOT_FOUND) and the online window (CURSOR_TOO_OLD) of a subscribe."""
    group = access_group(agent, group_id)
    if after > group.last_sequence:
        raise ProtocolError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"after: {after} is beyond the head {group.last_sequence}",
            details={"field": "after"},
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
        raise ProtocolError(ErrorCode.GROUP_NOT_FOUND, f"group {group_id} does not exist")
    if sequence > head:
        raise ProtocolError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"sequence: {sequence} is beyond the head {head}",
            details={"field": "sequence"},
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

    async def error(
        self,
        code: str,
        message: str,
        ref: Any = None,
        retry_after_ms: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        """An ``error`` frame: the frame's ``op`` and ``ref`` around the
        normative error document (§19); issue 18 gives it the MWP frame."""
        document = ProtocolError(code, message, details=details, retry_after_ms=retry_after_ms).document()
        await self.send_json({"op": "error", "ref": ref, **document})

    async def bad_frame(
        self,
        code: str,
        message: str,
        ref: Any = None,
        retry_after_ms: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        await self.error(code, message, ref, retry_after_ms, details)
        now = time.monotonic()
        self.bad_frames.append(now)
        while self.bad_frames and self.bad_frames[0] < now - BAD_FRAME_WINDOW:
            self.bad_frames.popleft()
        if len(self.bad_frames) > MAX_BAD_FRAMES:
            reason = f"closing: more than {MAX_BAD_FRAMES} bad frames in {BAD_FRAME_WINDOW:.0f} s"
            # daphne drops the reason of a close frame, so it travels in a
            # last error frame just before the close code.
            await self.error(ErrorCode.PROTOCOL_VIOLATION, reason)
            await self.close(code=CLOSE_POLICY, reason=reason)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        raw = text_data if text_data is not None else bytes_data
        if raw is None or self.closing:
            return
        size = len(raw.encode("utf-8", "surrogatepass")) if isinstance(raw, str) else len(raw)
        if size > MAX_FRAME_BYTES:
            await self.bad_frame(ErrorCode.PROTOCOL_VIOLATION, f"frame: over {MAX_FRAME_BYTES} bytes")
            return
        try:
            frame = loads_strict(raw)
        except CanonicalizationError as exc:
            await self.bad_frame(ErrorCode.PROTOCOL_VIOLATION, f"frame: {exc}")
            return
        if not isinstance(frame, dict) or not isinstance(frame.get("op"), str):
            await self.bad_frame(ErrorCode.PROTOCOL_VIOLATION, "frame: must be a JSON object with an op")
            return
        handler = getattr(self, "op_" + frame["op"], None) if frame["op"].isidentifier() else None
        if handler is None:
            await self.bad_frame(ErrorCode.PROTOCOL_VIOLATION, f"op: unknown op {frame['op'][:40]!r}", frame.get("ref"))
            return
        try:
            await handler(frame)
        except FrameError as exc:
            if exc.code == ErrorCode.INTERNAL_ERROR:
                await self.error(exc.code, exc.message, exc.ref, exc.retry_after_ms, exc.details)
            else:
                await self.bad_frame(exc.code, exc.message, exc.ref, exc.retry_after_ms, exc.details)
        except ProtocolError as exc:
            await self.bad_frame(exc.code, exc.message, frame.get("ref"), exc.retry_after_ms, exc.details)
        except Exception:
            # A database outage, an exhausted pool, a bug: the client may try
            # again; the connection and its subscriptions stay up.
            log.exception("%s frame failed inside the server", frame["op"][:40])
            failure = internal_error(frame.get("ref"))
            await self.error(failure.code, failure.message, failure.ref, failure.retry_after_ms)

    async def start_stream(self, agent: Agent, group_id: str, after: int, ref: Any = None) -> None:
        """Subscribe to a Group from ``after``; CURSOR_TOO_OLD when that is outside the online window."""
        try:
            group, snapshot, _ = await database_sync_to_async(_subscribe_check)(agent, group_id, after)
        except ProtocolError as exc:
            raise FrameError(exc.code, exc.message, ref or group_id, details=exc.details) from None
        except Exception:
            log.exception("subscribe to %s failed inside the server", group_id)
            raise internal_error(ref or group_id) from None
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

        try:
            self.subscriptions[group_id] = await hub.subscribe(str(group.id), after, deliver, deliver_now)
        except Exception:
            log.exception("subscribe to %s failed inside the server", group_id)
            raise internal_error(ref or group_id) from None

    async def stop_stream(self, group_id: str) -> None:
        sub = self.subscriptions.pop(group_id, None)
        if sub is not None:
            await (await get_hub()).unsubscribe(sub)


def _after(frame: dict[str, Any]) -> int:
    after = frame.get("after", 0)
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise FrameError(
            ErrorCode.SCHEMA_VALIDATION_FAILED, "after: must be a non-negative integer", frame.get("group")
        )
    return after


class AgentConsumer(_EventStream):
    """``/ws/v1/agent``: ``hello``, then any number of ``subscribe``s, ``ack``,
    ``command`` and ``presence`` frames on one connection."""

    # Until connect() has run: a connection that failed there holds no slot.
    counted = False
    hello_timer: asyncio.TimerHandle | None = None
    hello_task: asyncio.Future[None] | None = None

    async def connect(self) -> None:
        self.session_epoch = 0
        self.memberships: dict[str, tuple[list[str], int]] = {}
        # The highest Membership epoch known per Group, removals included: a
        # notice can come twice (from this machine's commit and through the
        # channel layer), and the second copy may follow a newer notice.
        self.epochs: dict[str, int] = {}
        self.hello_seen = False
        self.limits = Limits.from_settings()
        now = time.monotonic()
        self.subscribe_bucket = TokenBucket(self.limits.subscribe_rate, self.limits.subscribe_burst, now)
        self.presence_bucket = TokenBucket(self.limits.presence_rate, self.limits.presence_burst, now)
        self.address = client_address(self.scope)
        self.counted = unauthenticated.admit(self.address, self.limits.max_unauthenticated)
        await super().connect()
        if not self.counted:
            # Accepted first so the client learns why; nothing else happens on it.
            await self.error(
                ErrorCode.RATE_LIMITED,
                f"more than {self.limits.max_unauthenticated} connections from {self.address} are waiting"
                " for their hello",
                retry_after_ms=math.ceil(self.limits.hello_timeout * 1000),
            )
            await self.close(code=CLOSE_POLICY, reason="too many unauthenticated connections")
            return
        self.hello_timer = asyncio.get_running_loop().call_later(self.limits.hello_timeout, self._hello_due)

    def _hello_due(self) -> None:
        self.hello_timer = None
        # Held on the consumer: the loop keeps only a weak reference to a task.
        self.hello_task = asyncio.ensure_future(self._hello_timed_out())

    def _authenticated(self) -> None:
        """The connection is past hello: it no longer counts against its address."""
        if self.hello_timer is not None:
            self.hello_timer.cancel()
            self.hello_timer = None
        if self.counted:
            self.counted = False
            unauthenticated.release(self.address)

    async def _hello_timed_out(self) -> None:
        if self.agent is not None or self.closing:
            return
        await self.error(ErrorCode.AUTH_REQUIRED, f"no hello within {self.limits.hello_timeout:g} s")
        await self.close(code=CLOSE_UNAUTHENTICATED, reason="no hello")

    async def disconnect(self, code: int) -> None:
        self._authenticated()
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
            raise FrameError(ErrorCode.AUTH_REQUIRED, "send hello with the session token first")
        return self.agent

    async def op_hello(self, frame: dict[str, Any]) -> None:
        """Bind the connection to the token's Agent, once.

        A second hello, valid or not, is refused and closes the connection:
        it would otherwise switch the identity that every later frame, and
        every subscription already open, runs under. Frames are handled one
        at a time, so nothing else runs between the check and the binding."""
        if self.hello_seen:
            reason = "hello: this connection already said hello; open a new one for another session"
            await self.error(ErrorCode.AUTH_FORBIDDEN, reason, frame.get("ref"))
            await self.close(code=CLOSE_POLICY, reason="a second hello")
            return
        token = frame.get("token")
        if not isinstance(token, str) or not token:
            raise FrameError(ErrorCode.SCHEMA_VALIDATION_FAILED, "token: is required")
        try:
            agent, epoch = await database_sync_to_async(agent_for_token)(token)
        except ProtocolError as exc:
            await self.error(exc.code, exc.message, details=exc.details)
            await self.close(code=CLOSE_UNAUTHENTICATED, reason="the session token is not current")
            return
        # Everything that can fail inside the server comes before the
        # connection takes the identity, so an INTERNAL_ERROR leaves it
        # unauthenticated and a retried hello starts afresh.
        current = await database_sync_to_async(agents_current)([str(agent.id)])
        if self.channel_layer is not None:
            await self.channel_layer.group_add(agent_channel(str(agent.id)), self.channel_name)
        self.hello_seen = True
        self._authenticated()
        self.agent, self.session_epoch = agent, epoch
        self.memberships = current[str(agent.id)][1]
        self.epochs = {group_id: e for group_id, (_roles, e) in self.memberships.items()}
        await self.send_json({"op": "welcome", "agent": str(agent.id), "session_epoch": epoch})
        hub = await get_hub()
        hub.watch_agent(str(agent.id), self._check_current)
        hub.listen_agent(str(agent.id), self._agent_notice)

    def _draw(self, bucket: TokenBucket, what: str, ref: Any) -> None:
        wait_ms = bucket.take(time.monotonic())
        if wait_ms:
            raise FrameError(ErrorCode.RATE_LIMITED, f"{what}: too many; retry after {wait_ms} ms", ref,
                             retry_after_ms=wait_ms)  # fmt: skip

    async def op_subscribe(self, frame: dict[str, Any]) -> None:
        agent = self.require_hello()
        group_id = parse_uuid(frame.get("group"), "group")
        after = _after(frame)
        ref = frame.get("ref") or group_id
        self._draw(self.subscribe_bucket, "subscribe", ref)
        if group_id not in self.subscriptions and len(self.subscriptions) >= self.limits.max_subscriptions:
            raise FrameError(
                ErrorCode.RATE_LIMITED,
                f"subscribe: this connection follows {len(self.subscriptions)} Groups, the most it may;"
                " unsubscribe from one first",
                ref,
            )
        await self.start_stream(agent, group_id, after, frame.get("ref"))

    async def op_unsubscribe(self, frame: dict[str, Any]) -> None:
        self.require_hello()
        group_id = parse_uuid(frame.get("group"), "group")
        self._draw(self.subscribe_bucket, "unsubscribe", frame.get("ref") or group_id)
        await self.stop_stream(group_id)

    async def op_ack(self, frame: dict[str, Any]) -> None:
        agent = self.require_hello()
        cursors = frame.get("cursors")
        if not isinstance(cursors, list) or not cursors:
            raise FrameError(
                ErrorCode.SCHEMA_VALIDATION_FAILED, "cursors: must be a non-empty list of {group, sequence}"
            )
        for i, cursor in enumerate(cursors):
            if not isinstance(cursor, dict) or set(cursor) != {"group", "sequence"}:
                raise FrameError(ErrorCode.SCHEMA_VALIDATION_FAILED, f"cursors.{i}: needs exactly group and sequence")
            seq = cursor["sequence"]
            if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
                raise FrameError(
                    ErrorCode.SCHEMA_VALIDATION_FAILED, f"cursors.{i}.sequence: must be a non-negative integer"
                )
            group_id = parse_uuid(cursor["group"], f"cursors.{i}.group")
            await database_sync_to_async(access_group)(agent, group_id)
            await database_sync_to_async(_store_ack)(str(agent.id), group_id, seq)

    async def op_command(self, frame: dict[str, Any]) -> None:
        agent = self.require_hello()
        envelope = parse_envelope(frame.get("envelope"))
        if envelope.actor != str(agent.id):
            # The connection speaks for the Agent of its hello only: another
            # Agent's signed envelope, captured or handed over, is not this
            # connection's to submit.
            raise FrameError(
                ErrorCode.AUTH_FORBIDDEN,
                f"actor: this connection is Agent {agent.id}; it cannot send Commands of {envelope.actor}",
                envelope.action_id,
            )
        try:
            receipt = await database_sync_to_async(accept)(Command(envelope, Auth.SIGNED))
        except ProtocolError as exc:
            # A refused Command is an answer, not a bad frame.
            await self.error(exc.code, exc.message, envelope.action_id, exc.retry_after_ms, exc.details)
            return
        except Exception:
            # accept() is one transaction: failing, it accepted nothing.
            log.exception("command %s failed inside the server", envelope.action_id)
            raise internal_error(envelope.action_id) from None
        await self.send_json({"op": "receipt", "receipt": receipt})

    async def op_presence(self, frame: dict[str, Any]) -> None:
        agent = self.require_hello()
        capacity = frame.get("capacity")
        if not isinstance(capacity, dict) or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in capacity.values()
        ):
            raise FrameError(ErrorCode.SCHEMA_VALIDATION_FAILED, "capacity: must be an object of non-negative integers")
        self._draw(self.presence_bucket, "presence", frame.get("ref"))
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
        try:
            await self._start()
        except FrameError as exc:
            # A refusal closes as policy (the page does not retry); a failure
            # inside the server closes as internal, and the page retries.
            await self.error(exc.code, exc.message, exc.ref, exc.retry_after_ms, exc.details)
            internal = exc.code == ErrorCode.INTERNAL_ERROR
            await self.close(code=CLOSE_INTERNAL if internal else CLOSE_POLICY, reason=exc.code)
        except (ProtocolError, ValueError) as exc:
            code = str(getattr(exc, "code", ErrorCode.SCHEMA_VALIDATION_FAILED))
            await self.error(code, getattr(exc, "message", str(exc)), details=getattr(exc, "details", None))
            await self.close(code=CLOSE_POLICY, reason=code)
        except Exception:
            log.exception("the UI stream failed inside the server")
            failure = internal_error()
            await self.error(failure.code, failure.message, None, failure.retry_after_ms)
            await self.close(code=CLOSE_INTERNAL, reason=failure.code)

    async def _start(self) -> None:
        agent = await database_sync_to_async(_person_agent)(self.scope.get("user"))
        if agent is None:
            await self.error(ErrorCode.AUTH_REQUIRED, "sign in to the portal first")
            await self.close(code=CLOSE_UNAUTHENTICATED, reason="not signed in")
            return
        self.agent = agent
        group_id = parse_uuid(self.scope["url_route"]["kwargs"]["group_id"], "group")
        query = dict(
            part.split("=", 1) for part in self.scope.get("query_string", b"").decode().split("&") if "=" in part
        )
        head = await database_sync_to_async(
            lambda: Group.objects.filter(id=group_id).values_list("last_sequence", flat=True).first()
        )()
        after = int(query["after"]) if "after" in query else max((head or 0) - 50, 0)
        await self.start_stream(agent, group_id, max(after, 0))

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        await self.bad_frame(
            ErrorCode.PROTOCOL_VIOLATION, "this stream is read-only; issue Commands through the portal"
        )
