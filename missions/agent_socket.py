"""The Agents' WebSocket binding ``/mwp/0.1`` (PROTOCOL §17, §6.3, §16; DESIGN §5).

One connection is one Agent and multiplexes all its Groups:

- **HELLO** in four phases (``mwportal.protocol.handshake.ServerHandshake``):
  ``client_init`` -> ``server_challenge`` -> ``client_response`` (the Agent's
  Ed25519 signature over the challenge transcript, its key resolved in its
  Organization's Registry, as the REST binding resolves it) ->
  ``server_accept`` with a session token (``missions.auth``) and a new
  Session Epoch, issued by the control plane's
  ``ext.missionweaveprotocol.identity.session_open`` Command
  (``missions.commands.open_session``). Epoch n + 1 fences n: every other
  connection of that Agent at n or lower is told AUTH_STALE_SESSION and
  closed (4001), and a Command that still carries n is refused
  AUTH_STALE_SESSION by the authority, on a live socket too. A refused HELLO
  is one ERROR (``fatal``), then the close (4003). A second HELLO after
  acceptance is refused (AUTH_FORBIDDEN) and closes the connection (4008).
- **SUBSCRIBE**: per Group, ``afterSequence`` and an attention filter
  (``attention_filter``; it changes what is sent live, not authorization nor
  history). A Group the Agent may not read is GROUP_NOT_FOUND, the same
  document as for a Group that does not exist (§17.2). Subscribing to a
  Group again replaces its subscription.
- **COMMAND**: the embedded document's exact bytes go to
  ``accept_document`` (the six stages, then the transaction). Success has
  no frame of its own (DESIGN §5): the client sees the EVENT whose
  ``cause.id`` is its ``actionId``; a refusal is an ERROR with
  ``relatedActionId``. A Command whose actor is not this connection's Agent
  is refused (AUTH_FORBIDDEN), so a connection cannot relay another Agent's
  signed Commands. Commands share the process's bound on Commands in flight
  with the REST binding (``missions.backpressure``): past it, an ERROR
  BACKPRESSURE with ``retryAfterMs`` and ``relatedActionId``, before any
  database work.
- **EVENT**: the stored signed Event documents, read from the database after
  the subscriber's position (``missions.hub``).
- **ACK**: the highest contiguous sequence per Group; stored as the Agent's
  Cursor (never deleting history) and making room in the Group's window.
- **PING**: answered with a PING whose ``replyToNonce`` is the nonce; a
  Presence Record it carries (for this Agent and this Session Epoch) is
  stored.
- **BACKPRESSURE** (§17.3): each Group of a connection may have at most
  ``MWP_WS_GROUP_WINDOW`` Events sent and not acknowledged. At the bound that
  Group alone is paused and the client gets an ERROR with code BACKPRESSURE,
  ``groupId`` and ``retryAfterMs`` (also in ``details``); an ACK that
  leaves at most half the window in flight resumes it. A client that has
  not acknowledged anything on that subscription is resumed after
  ``retryAfterMs`` instead, once its connection has taken everything
  written to it (so a client that never ACKs gets a window per retry
  time). Other Groups on the connection go on meanwhile.

What a connection may do is bounded (``missions.ws_limits``): the HELLO
timeout (4003), the unauthenticated connections per address (RATE_LIMITED,
4008), a token bucket for SUBSCRIBE and one for PING (RATE_LIMITED with
``retryAfterMs``), and the number of Groups one connection follows. A
refusal counts as a bad frame (``missions.consumers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from channels.db import database_sync_to_async
from django.utils import timezone

from mwportal.protocol import ErrorCode, ProtocolError, frames
from mwportal.protocol.handshake import ServerHandshake
from mwportal.protocol.ids import bare, urn
from mwportal.protocol.values import is_absolute_uri

from .access import access_group, replay_floor
from .api.sessions import agent_key_resolver
from .auth import session_expires_at
from .authority import accept_document
from .backpressure import process_gate
from .commands import open_session
from .consumers import CLOSE_POLICY, CLOSE_SESSION_REPLACED, CLOSE_UNAUTHENTICATED, EventStream, internal_error
from .delivery import agent_channel
from .feed import Event
from .hub import Subscription, get_hub
from .models import Agent, AgentCursor, AgentPresence, Group
from .ws_limits import Limits, TokenBucket, client_address, unauthenticated

log = logging.getLogger(__name__)

# A paused Group is resumed by its retry time only when the connection holds
# no more than this many bytes the client has not read yet.
DRAINED_BYTES = 64 * 1024


def _usable(value: Any) -> str | None:
    return value if isinstance(value, str) and len(value) <= 512 and is_absolute_uri(value) else None


def _mentions(payload: dict[str, Any]) -> set[str]:
    message = payload.get("message")
    source = message if isinstance(message, dict) else payload
    mentions = source.get("mentions")
    if not isinstance(mentions, list):
        return set()
    return {m["id"] if isinstance(m, dict) else m for m in mentions if isinstance(m, str | dict)} - {None}


# The Group's important announcements (§8): its Mission's lifecycle and its archival.
ANNOUNCEMENT_PREFIXES = ("mission.", "group.archived")


def is_announcement(event: Event, payload: dict[str, Any], agent_urn: str) -> bool:
    """An Event every Worker asking for announcements is sent live (§8): the Mission's lifecycle
    (created, Coordinator assigned, submitted, approved, cancelled, terminated...), the Group's
    archival, and what is addressed to the subscriber itself (a change of its own Membership,
    an offer naming it as a candidate)."""
    kind = str(event.get("kind", ""))
    if kind.startswith(ANNOUNCEMENT_PREFIXES):
        return True
    if kind in ("membership.changed", "membership.ended"):
        member = payload.get("membership", {}).get("member") or payload.get("principal") or {}
        return isinstance(member, dict) and member.get("id") == agent_urn
    if kind == "work.offer.created":
        return agent_urn in payload.get("candidateAgentIds", [])
    return False


def attention_filter(attention: dict[str, Any] | None, agent_urn: str) -> Callable[[Event], bool] | None:
    """The live delivery a SUBSCRIBE's ``attention`` asks for (§8, §17.2):
    an Event is sent when it is an announcement the client asked for (``is_announcement``), or
    when it passes every filter given (``eventKinds``, ``conversationIds``,
    ``workItemIds``, ``mentionsOnly``). None: everything. Authorization and
    the durable history do not change; the Events left out only move the
    subscription's position (the client reads them on demand)."""
    if not attention:
        return None
    kinds = set(attention["eventKinds"]) if "eventKinds" in attention else None
    conversations = set(attention["conversationIds"]) if "conversationIds" in attention else None
    work_items = set(attention["workItemIds"]) if "workItemIds" in attention else None
    mentions_only = attention.get("mentionsOnly") is True
    announcements = attention.get("announcements") is True

    def wants(event: Event) -> bool:
        payload = event.get("payload")
        payload = payload if isinstance(payload, dict) else {}
        if announcements and is_announcement(event, payload, agent_urn):
            return True
        if kinds is not None and event.get("kind") not in kinds:
            return False
        if conversations is not None and event.get("conversationId") not in conversations:
            return False
        if work_items is not None and event.get("workItemId") not in work_items:
            return False
        return not mentions_only or agent_urn in _mentions(payload)

    return wants


def _store_acks(agent: Agent, acks: list[tuple[str, int]]) -> None:
    """Keep the highest acknowledged Cursor per Group; an ACK never deletes history (§16)."""
    for i, (group_id, sequence) in enumerate(acks):
        group = access_group(agent, group_id)
        if sequence > group.last_sequence:
            raise ProtocolError(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                f"/acknowledgements/{i}/sequence: {sequence} is beyond the Group's head {group.last_sequence}",
                details={"field": f"/acknowledgements/{i}/sequence", "reason": "beyond-head"},
                group_id=urn(group_id),
            )
        now = timezone.now()
        cursor, created = AgentCursor.objects.get_or_create(
            agent_id=agent.id, group_id=group_id, defaults={"sequence": sequence, "updated_at": now}
        )
        if not created and sequence > cursor.sequence:
            AgentCursor.objects.filter(pk=cursor.pk, sequence__lt=sequence).update(sequence=sequence, updated_at=now)


def _store_presence(agent_id: str, capacity: dict[str, Any], connected: bool) -> None:
    AgentPresence.objects.update_or_create(
        agent_id=agent_id, defaults={"capacity": capacity, "connected": connected, "updated_at": timezone.now()}
    )


def _agent_row(agent_id: str) -> Agent:
    return Agent.objects.get(id=agent_id)


class AgentConsumer(EventStream):
    """``/mwp/0.1``: HELLO, then SUBSCRIBE, COMMAND, ACK and PING frames on one connection."""

    # Until connect() has run: a connection that failed there holds no slot.
    counted = False
    hello_timer: asyncio.TimerHandle | None = None

    async def connect(self) -> None:
        self.session_epoch = 0
        self.agent_urn = ""
        self.handshake: ServerHandshake | None = None
        self.accepted = False
        self.suspects: set[str] = set()
        # The newest Membership Epoch heard of per Group (agent_membership).
        self.epochs: dict[str, int] = {}
        self.limits = Limits.from_settings()
        now = time.monotonic()
        self.subscribe_bucket = TokenBucket(self.limits.subscribe_rate, self.limits.subscribe_burst, now)
        self.presence_bucket = TokenBucket(self.limits.presence_rate, self.limits.presence_burst, now)
        self.pause_timers: dict[int, asyncio.TimerHandle] = {}
        self.tasks: set[asyncio.Future[None]] = set()
        self.address = client_address(self.scope)
        self.counted = unauthenticated.admit(self.address, self.limits.max_unauthenticated)
        await super().connect()
        if not self.counted:
            # Accepted first so the client learns why; nothing else happens on it.
            err = ProtocolError(
                ErrorCode.RATE_LIMITED,
                f"more than {self.limits.max_unauthenticated} connections from {self.address} are waiting"
                " to complete their HELLO",
                retry_after_ms=math.ceil(self.limits.hello_timeout * 1000),
                fatal=True,
            )
            await self.send_error(err)
            await self.close(code=CLOSE_POLICY, reason="too many unauthenticated connections")
            return
        self.hello_timer = asyncio.get_running_loop().call_later(self.limits.hello_timeout, self._hello_due)

    def _spawn(self, coro: Any) -> None:
        # Held on the consumer: the loop keeps only a weak reference to a task.
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _hello_due(self) -> None:
        self.hello_timer = None
        self._spawn(self._hello_timed_out())

    def _authenticated(self) -> None:
        """The connection is past HELLO: it no longer counts against its address."""
        if self.hello_timer is not None:
            self.hello_timer.cancel()
            self.hello_timer = None
        if self.counted:
            self.counted = False
            unauthenticated.release(self.address)

    async def _hello_timed_out(self) -> None:
        if self.accepted or self.closing:
            return
        err = ProtocolError(
            ErrorCode.AUTH_REQUIRED, f"no completed HELLO within {self.limits.hello_timeout:g} s", fatal=True
        )
        await self.send_error(err)
        await self.close(code=CLOSE_UNAUTHENTICATED, reason="no HELLO")

    async def disconnect(self, code: int) -> None:
        self._authenticated()
        for timer in self.pause_timers.values():
            timer.cancel()
        self.pause_timers.clear()
        if self.agent is not None:
            agent_id = str(self.agent.id)
            hub = await get_hub()
            hub.unwatch_agent(agent_id, self._check_current)
            hub.unlisten_agent(agent_id, self._agent_notice)
            if self.channel_layer is not None:
                await self.channel_layer.group_discard(agent_channel(agent_id), self.channel_name)
            with contextlib.suppress(Exception):
                await database_sync_to_async(_store_presence)(agent_id, {}, False)
        await super().disconnect(code)

    # --- frames in ------------------------------------------------------------------------

    async def receive_frame(self, frame: frames.Frame) -> None:
        related: dict[str, Any] = {"related_frame_id": frame.frame_id}
        try:
            if frame.type == "HELLO":
                await self.on_hello(frame)
            elif not self.accepted:
                raise ProtocolError(ErrorCode.AUTH_REQUIRED, "complete the HELLO handshake first")
            elif frame.type == "SUBSCRIBE":
                await self.on_subscribe(frame)
            elif frame.type == "COMMAND":
                related["related_action_id"] = _usable(frame.doc["command"].get("actionId"))
                await self.on_command(frame, related["related_action_id"])
            elif frame.type == "ACK":
                await self.on_ack(frame)
            elif frame.type == "PING":
                await self.on_ping(frame)
            elif frame.type == "ERROR":
                # The client's report of something it refused: nothing to answer.
                log.info("a client reported %s: %s", frame.doc["error"]["code"], frame.doc["error"]["message"][:200])
            else:
                raise ProtocolError(
                    ErrorCode.PROTOCOL_VIOLATION,
                    f"a client does not send {frame.type} frames",
                    details={"reason": "unexpected-frame", "frameType": frame.type},
                )
        except ProtocolError as exc:
            if exc.code == ErrorCode.INTERNAL_ERROR:
                await self.send_error(exc, **related)
            else:
                await self.bad_frame(exc, group_id=exc.group_id, **related)
        except Exception:
            # A database outage, an exhausted pool, a bug: the client may try
            # again; the connection and its subscriptions stay up.
            log.exception("%s frame failed inside the server", frame.type)
            await self.send_error(internal_error(), **related)

    # --- HELLO ----------------------------------------------------------------------------

    async def on_hello(self, frame: frames.Frame) -> None:
        """The four phases of §6.3; any refusal ends the connection."""
        if self.accepted:
            err = ProtocolError(
                ErrorCode.AUTH_FORBIDDEN,
                "HELLO: this connection is authenticated already; open a new one for another session",
                details={"reason": "second-hello"},
                fatal=True,
            )
            await self.send_error(err, related_frame_id=frame.frame_id)
            await self.close(code=CLOSE_POLICY, reason="a second HELLO")
            return
        now = datetime.now(UTC)
        try:
            if frame.phase == "client_init" and self.handshake is None:
                agent_urn = str(frame.doc["agentId"])
                self.handshake = ServerHandshake(agent_key_resolver(agent_urn))
                self.agent_urn = agent_urn
                await self.send_frame(self.handshake.receive_client_init(frame, now))
                return
            if self.handshake is None:
                raise ProtocolError(
                    ErrorCode.PROTOCOL_VIOLATION,
                    f"expected HELLO/client_init, not HELLO/{frame.phase}",
                    details={"reason": "hello-out-of-order"},
                    fatal=True,
                )
            handshake = self.handshake
            if frame.phase == "client_response":
                auth = await database_sync_to_async(handshake.receive_client_response)(frame, now)
                await self._accept_session(bare(auth.agent_id, "agentId"), handshake)
                return
            # Anything else out of turn: the handshake says so and fails.
            handshake.receive_client_init(frame, now)
        except ProtocolError as exc:
            if exc.code == ErrorCode.INTERNAL_ERROR:
                raise
            await self.send_error(exc, related_frame_id=frame.frame_id)
            await self.close(code=CLOSE_UNAUTHENTICATED, reason=f"HELLO refused: {exc.code}")

    async def _accept_session(self, agent_id: str, handshake: ServerHandshake) -> None:
        """Phase 4: a new Session Epoch (fencing every older one), then ``server_accept``."""
        try:
            agent = await database_sync_to_async(_agent_row)(agent_id)
            token, epoch = await database_sync_to_async(open_session)(agent_id)
        except ProtocolError:
            raise
        except Exception:
            log.exception("opening a session for %s failed inside the server", agent_id)
            # The handshake is used up: the client starts again on a new connection.
            await self.send_error(internal_error(fatal=True))
            await self.close(code=CLOSE_UNAUTHENTICATED, reason="the session could not be opened")
            return
        if self.channel_layer is not None:
            await self.channel_layer.group_add(agent_channel(agent_id), self.channel_name)
        self.agent, self.session_epoch, self.accepted = agent, epoch, True
        self._authenticated()
        hub = await get_hub()
        hub.watch_agent(agent_id, self._check_current)
        hub.listen_agent(agent_id, self._agent_notice)
        await self.send_frame(handshake.accept_frame(token, epoch, session_expires_at(datetime.now(UTC))))

    # --- SUBSCRIBE ------------------------------------------------------------------------

    def _draw(self, bucket: TokenBucket, what: str) -> None:
        wait_ms = bucket.take(time.monotonic())
        if wait_ms:
            raise ProtocolError(ErrorCode.RATE_LIMITED, f"{what}: too many; retry after {wait_ms} ms",
                                retry_after_ms=wait_ms)  # fmt: skip

    async def on_subscribe(self, frame: frames.Frame) -> None:
        assert self.agent is not None
        self._draw(self.subscribe_bucket, "SUBSCRIBE")
        entries: list[dict[str, Any]] = frame.doc["groups"]
        ids = [entry["groupId"] for entry in entries]
        if len(set(ids)) != len(ids):
            raise ProtocolError(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                "/groups: names a Group more than once",
                details={"field": "/groups", "reason": "duplicate-group"},
            )
        wanted: list[tuple[str, dict[str, Any]]] = []
        for i, entry in enumerate(entries):
            wanted.append((bare(entry["groupId"], f"/groups/{i}/groupId"), entry))
        new = sum(1 for group_id, _ in wanted if group_id not in self.subscriptions)
        if len(self.subscriptions) + new > self.limits.max_subscriptions:
            raise ProtocolError(
                ErrorCode.RATE_LIMITED,
                f"SUBSCRIBE: this connection follows {len(self.subscriptions)} Groups and may follow"
                f" {self.limits.max_subscriptions}",
                details={"reason": "too-many-groups", "maxGroups": self.limits.max_subscriptions},
            )
        for group_id, entry in wanted:
            try:
                # §8: replay starts at the member's visibility start, whatever afterSequence asks.
                try:
                    floor = await database_sync_to_async(replay_floor)(self.agent, group_id)
                except Exception:
                    log.exception("the visibility start of %s could not be read", group_id)
                    raise internal_error() from None
                await self.start_stream(
                    self.agent,
                    group_id,
                    max(entry["afterSequence"], floor),
                    window=self.limits.group_window,
                    wants=attention_filter(entry.get("attention"), self.agent_urn),
                    on_pause=self._paused,
                )
            except ProtocolError as exc:
                # Each Group is answered on its own; the others subscribe.
                if exc.code == ErrorCode.INTERNAL_ERROR:
                    await self.send_error(exc, related_frame_id=frame.frame_id, group_id=entry["groupId"])
                else:
                    await self.bad_frame(exc, related_frame_id=frame.frame_id, group_id=entry["groupId"])

    # --- BACKPRESSURE ---------------------------------------------------------------------

    def _paused(self, sub: Subscription) -> None:
        """The hub paused ``sub`` at its window: tell the client, and look again after the retry time."""
        retry_ms = self.limits.backpressure_retry_ms
        self._spawn(self.send_frame(frames.backpressure_frame(urn(sub.group_id), retry_ms)))
        self._arm_retry(sub)

    def _arm_retry(self, sub: Subscription) -> None:
        old = self.pause_timers.pop(id(sub), None)
        if old is not None:
            old.cancel()
        delay = self.limits.backpressure_retry_ms / 1000
        self.pause_timers[id(sub)] = asyncio.get_running_loop().call_later(delay, self._retry, sub)

    def _retry(self, sub: Subscription) -> None:
        self.pause_timers.pop(id(sub), None)
        if sub.closed or not sub.paused or self.closing or sub.acknowledged:
            return  # an acknowledging client's ACKs lift its pause, no timer (bounded buffering)
        direct = self.direct
        if direct is not None and direct.is_open() and direct.buffered() > DRAINED_BYTES:
            self._arm_retry(sub)  # the client has not read what it was sent: stay paused
            return
        self._spawn(self._resume(sub))

    async def _resume(self, sub: Subscription) -> None:
        (await get_hub()).resume(sub)

    # --- COMMAND, ACK, PING ---------------------------------------------------------------

    async def on_command(self, frame: frames.Frame, action_id: str | None) -> None:
        actor = frame.doc["command"].get("actor")
        if not isinstance(actor, dict) or actor.get("type") != "agent" or actor.get("id") != self.agent_urn:
            # The connection speaks for the Agent of its HELLO only: another
            # Principal's signed Command, captured or handed over, is not this
            # connection's to submit.
            raise ProtocolError(
                ErrorCode.AUTH_FORBIDDEN,
                f"/command/actor: this connection is Agent {self.agent_urn}; it sends that Agent's Commands only",
                details={"field": "/command/actor"},
            )
        assert frame.nested is not None
        # The process's bound on Commands in flight, shared with the REST
        # binding (missions.backpressure): past it, BACKPRESSURE before any
        # database work, and the sender retries the same Command.
        gate = process_gate()
        if not await gate.admission.enter_async():
            gate.count_shed()
            shed = ProtocolError(
                ErrorCode.BACKPRESSURE,
                f"this server has {gate.limit} Commands in flight; retry the same Command after"
                f" {gate.retry_after_ms} ms",
                details={"limit": gate.limit, "retryAfterMs": gate.retry_after_ms},
                retry_after_ms=gate.retry_after_ms,
            )
            await self.send_error(shed, related_frame_id=frame.frame_id, related_action_id=action_id)
            return
        try:
            await database_sync_to_async(accept_document)(frame.nested)
        except ProtocolError as exc:
            # A refused Command is an answer, not a bad frame.
            await self.send_error(exc, related_frame_id=frame.frame_id, related_action_id=action_id)
        except Exception:
            # accept() is one transaction: failing, it accepted nothing.
            log.exception("command %s failed inside the server", action_id)
            raise internal_error() from None
        finally:
            gate.admission.release()

    async def on_ack(self, frame: frames.Frame) -> None:
        assert self.agent is not None
        acks = [
            (bare(entry["groupId"], f"/acknowledgements/{i}/groupId"), entry["sequence"])
            for i, entry in enumerate(frame.doc["acknowledgements"])
        ]
        await database_sync_to_async(_store_acks)(self.agent, acks)
        hub = await get_hub()
        for group_id, sequence in acks:
            sub = self.subscriptions.get(group_id)
            if sub is not None:
                hub.acknowledge(sub, sequence)

    async def on_ping(self, frame: frames.Frame) -> None:
        self._draw(self.presence_bucket, "PING")
        presence = frame.doc.get("presence")
        if presence is not None:
            if presence["agentId"] != self.agent_urn:
                raise ProtocolError(
                    ErrorCode.AUTH_FORBIDDEN,
                    "/presence/agentId: a connection reports its own Agent's presence",
                    details={"field": "/presence/agentId"},
                )
            if presence["sessionEpoch"] != self.session_epoch:
                raise ProtocolError(
                    ErrorCode.AUTH_STALE_SESSION,
                    f"/presence/sessionEpoch: this connection's Session Epoch is {self.session_epoch}",
                    details={"field": "/presence/sessionEpoch"},
                )
            assert self.agent is not None
            await database_sync_to_async(_store_presence)(str(self.agent.id), presence["capacity"], True)
        if "replyToNonce" not in frame.doc:
            await self.send_frame(frames.ping(reply_to_nonce=frame.doc["nonce"]))

    # --- notices from accept() ------------------------------------------------------------

    async def agent_membership(self, message: dict[str, Any]) -> None:
        """A Membership of this Agent changed: a removal stops that Group's
        subscription. A notice may come twice (this machine's socket and the
        channel layer), the second copy after a newer one: one older than
        the newest Membership Epoch seen for the Group is old news, so a late
        copy of a removal never stops a subscription made after a re-admission."""
        group_id, epoch = str(message["group"]), int(message["membership_epoch"])
        if epoch < self.epochs.get(group_id, 0):
            return
        self.epochs[group_id] = epoch
        if not message.get("active"):
            await self.stop_stream(group_id)

    async def agent_session(self, message: dict[str, Any]) -> None:
        # A newer session fences this one (§6.3); an older epoch's notice is old news.
        if message["session_epoch"] > self.session_epoch:
            await self._replaced()

    async def _replaced(self) -> None:
        if self.closing:
            return
        err = ProtocolError(
            ErrorCode.AUTH_STALE_SESSION,
            "a newer session of this Agent fenced this one (§6.3)",
            details={"sessionEpoch": self.session_epoch},
            fatal=True,
        )
        await self.send_error(err)
        await self.close(code=CLOSE_SESSION_REPLACED, reason="session replaced")

    async def _agent_notice(self, message: dict[str, Any]) -> None:
        """The hub's hand-over of a notice from a commit on this machine."""
        if message.get("type") == "agent.membership":
            await self.agent_membership(message)
        elif message.get("type") == "agent.session":
            await self.agent_session(message)

    async def _check_current(self, epoch: int, memberships: dict[str, tuple[list[str], int]]) -> None:
        """The hub's periodic agent check: a replaced session closes the
        connection; a Group the Agent may no longer read stops (its Events
        told it already, ``ends_membership``; this catches a notice lost).
        The administrative Group has no Membership rows: it stays."""
        if epoch != self.session_epoch:
            await self._replaced()
            return
        # Missing from two checks in a row: a check read before a Membership
        # that a subscription came after does not end that subscription.
        gone = {group_id for group_id in self.subscriptions if group_id not in memberships}
        suspects, self.suspects = self.suspects & gone, gone
        if suspects:
            admin = await database_sync_to_async(_admin_groups)(sorted(suspects))
            for group_id in suspects - admin:
                await self.stop_stream(group_id)


def _admin_groups(group_ids: list[str]) -> set[str]:
    return {str(g) for g in Group.objects.filter(id__in=group_ids, kind=Group.KIND_ADMIN).values_list("id", flat=True)}
