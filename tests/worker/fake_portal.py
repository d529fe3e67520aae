"""A small Group Authority speaking MWP 0.1, for the Worker runtime's wire tests (no Django).

It is built only from the kernel (``ServerHandshake``, ``frames``,
``verify_document``, ``build_event``, the catalogue): one ``/mwp/0.1``
WebSocket and the three REST reads the Worker makes (``keys/{keyId}``,
``memberships``, ``groups/{groupId}/events``). Every COMMAND it receives is
verified in the six stages (profile ``command``) and its payload against the
catalogue before it answers with the Events a Group Authority would append
(``cause`` naming the Command), so a Worker that passes against it speaks the
normative wire, not this module's dialect. Everything the Worker sent is kept
(``frames``, ``commands``) for the test to read.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from mwportal.protocol import catalogue, eventdoc, frames, jcs
from mwportal.protocol.catalogue import examples as ex
from mwportal.protocol.command import Key, format_timestamp
from mwportal.protocol.errors import ErrorCode, ProtocolError
from mwportal.protocol.handshake import ServerHandshake
from mwportal.protocol.ids import new_urn, urn
from mwportal.protocol.registry import KeyBinding, MemoryRegistry, Principal
from mwportal.protocol.verification import verify_document
from tests.worker.streams import ORG, Authority, payload

Event = dict[str, Any]


def now() -> datetime:
    return datetime.now(UTC)


class FakePortal:
    """``async with FakePortal(authority, agent_key) as portal``: ``portal.url`` serves it."""

    def __init__(self, authority: Authority, agent: Key) -> None:
        assert agent.principal is not None
        self.authority = authority
        self.agent = urn(agent.principal[1])
        self.registry = MemoryRegistry(ORG)
        self.registry.register(agent.key_id, Principal("agent", self.agent), agent.public_key, "2026-01-01T00:00:00Z")
        self.logs: dict[str, list[Event]] = {}  # groupId -> its Events, in sequence order
        self.revisions: dict[str, int] = {}
        self.frames: list[dict[str, Any]] = []  # everything the Worker sent, parsed
        self.commands: list[dict[str, Any]] = []  # the verified Command documents
        self.subscribed: list[tuple[str, int]] = []
        self.on_subscribe: Callable[[ServerConnection, str], Any] | None = None
        self.injected: dict[str, list[Event]] = {}  # sent after a Group's replay: what a forger would slip in
        self._sockets: set[ServerConnection] = set()
        self._server: Any = None
        self.url = ""
        self.epoch = 0

    async def __aenter__(self) -> FakePortal:
        self._server = await serve(self._socket, "127.0.0.1", 0, process_request=self._rest)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    # --- the Group Authority ---------------------------------------------------------------

    def append(self, group: str, kind: str, body: dict[str, Any], *, cause: str | None = None,
               item: str | None = None, key: Key | None = None) -> Event:  # fmt: skip
        """The next signed Event of ``group`` (a catalogue payload), delivered to every subscriber."""
        catalogue.validate_payload(kind, body)
        log = self.logs.setdefault(group, [])
        name = item or group
        self.revisions[name] = self.revisions.get(name, 0) + 1
        event = eventdoc.build_event(
            event_id=new_urn(), kind=kind, actor=self.authority.principal,
            cause={"type": "command", "id": cause or new_urn()}, correlation_id=cause or new_urn(),
            occurred_at=now(), payload=body, accepted_by=self.authority.principal, key=key or self.authority.key,
            group_id=group, sequence=len(log) + 1, aggregate_revision=self.revisions[name], work_item_id=item,
        )  # fmt: skip
        if key is None:
            log.append(event)
        else:
            self.injected.setdefault(group, []).append(event)
        for ws in list(self._sockets):
            asyncio.ensure_future(self._send(ws, frames.event(event)))
        return event

    def mission(self, group: str) -> None:
        mission = new_urn()
        self.append(group, "mission.created", payload(
            "mission.created", mission={**ex.mission(), "missionId": mission, "groupId": group},
            group={**ex.group(), "groupId": group, "missionId": mission}))  # fmt: skip
        member = {
            **ex.membership(),
            "groupId": group,
            "missionId": mission,
            "member": {"type": "agent", "id": self.agent},
        }
        self.append(group, "membership.changed", payload("membership.changed", membership=member))

    def offer(self, group: str, contract: dict[str, Any]) -> str:
        item = new_urn()
        doc = {**ex.work_item(), "workItemId": item, "groupId": group, "contract": contract}
        self.append(group, "work.authorized", payload("work.authorized", workItem=doc), item=item)
        self.append(group, "work.offer.created", payload(
            "work.offer.created", workItemId=item, candidateAgentIds=[self.agent],
            offerExpiresAt=format_timestamp(now() + timedelta(minutes=10))), item=item)  # fmt: skip
        return item

    def _lease(self, group: str, item: str, kind: str, **members: Any) -> dict[str, Any]:
        return {**ex.lease(kind), "leaseId": new_urn(), "groupId": group, "holderAgentId": self.agent,
                "workItemId": item, "issuedAt": format_timestamp(now()), "startsAt": format_timestamp(now()),
                "expiresAt": format_timestamp(now() + timedelta(seconds=30)), "sessionEpoch": self.epoch,
                **members}  # fmt: skip

    def _decide(self, doc: dict[str, Any]) -> None:
        """The Events a Group Authority appends on accepting ``doc`` (the happy path of §10-§13)."""
        kind, p, group, action = doc["kind"], doc["payload"], doc["groupId"], doc["actionId"]
        item = p.get("workItemId") or p.get("artifact", {}).get("workItemId")
        epoch = {"ownershipEpoch": p.get("ownershipEpoch", 1)}
        if kind == "work.accept_offer":
            lease = self._lease(group, item, "ownership", startBy=format_timestamp(now() + timedelta(minutes=15)))
            body = payload("work.offer.accepted", workItemId=item, assigneeId=self.agent, ownershipEpoch=1,
                           ownershipLeaseExpiresAt=lease["expiresAt"], ownershipLease=lease)  # fmt: skip
            self.append(group, "work.offer.accepted", body, cause=action, item=item)
        elif kind == "work.start":
            lease = self._lease(group, item, "execution")
            self.append(group, "work.started", payload(
                "work.started", workItemId=item, **epoch, executionLease=lease,
                executionLeaseExpiresAt=lease["expiresAt"]), cause=action, item=item)  # fmt: skip
        elif kind == "ext.missionweaveprotocol.core.work_execution_lease_renew":
            lease = self._lease(group, item, "execution", leaseId=p["executionLeaseId"], renewalCount=1)
            self.append(group, "work.progressed", payload(
                "work.progressed", workItemId=item, **epoch, executionLease=lease,
                executionLeaseExpiresAt=lease["expiresAt"]), cause=action, item=item)  # fmt: skip
        elif kind == "work.checkpoint":
            self.append(group, "work.checkpointed", payload(
                "work.checkpointed", workItemId=item, checkpoint=p["checkpoint"],
                startBy=format_timestamp(now() + timedelta(minutes=15))), cause=action, item=item)  # fmt: skip
        elif kind == "artifact.publish":
            self.append(group, "artifact.published", {"artifact": p["artifact"]}, cause=action)
        elif kind == "work.submit":
            self.append(group, "work.submitted", payload(
                "work.submitted", workItemId=item, artifactIds=p["artifactIds"], evidence=p["evidence"]),
                cause=action, item=item)  # fmt: skip
        else:
            raise AssertionError(f"the fake Group Authority does not accept {kind}: {p}")

    # --- the WebSocket binding (§17) ----------------------------------------------------------

    async def _send(self, ws: ServerConnection, frame: dict[str, Any]) -> None:
        with contextlib.suppress(ConnectionClosed):
            await ws.send(frames.encode(frame))

    def _resolve(self, key_id: str) -> KeyBinding:
        return self.registry.resolve(key_id)

    async def _socket(self, ws: ServerConnection) -> None:
        handshake = ServerHandshake(self._resolve, organization_id=ORG)
        try:
            first = frames.parse(await ws.recv())
            self.frames.append(first.doc)
            await self._send(ws, handshake.receive_client_init(first, now()))
            second = frames.parse(await ws.recv())
            self.frames.append(second.doc)
            handshake.receive_client_response(second, now())
            self.epoch += 1
            await self._send(ws, handshake.accept_frame("s" * 32, self.epoch, now() + timedelta(hours=1)))
            self._sockets.add(ws)
            async for text in ws:
                frame = frames.parse(text)
                self.frames.append(frame.doc)
                await self._on_frame(ws, frame)
        except ConnectionClosed:
            pass
        finally:
            self._sockets.discard(ws)

    async def _on_frame(self, ws: ServerConnection, frame: frames.Frame) -> None:
        if frame.type == "SUBSCRIBE":
            for entry in frame.doc["groups"]:
                group, after = entry["groupId"], entry["afterSequence"]
                self.subscribed.append((group, after))
                if self.on_subscribe is not None and await self.on_subscribe(ws, group):
                    continue  # the test answered this SUBSCRIBE itself
                for event in [*self.logs.get(group, [])[after:], *self.injected.get(group, [])]:
                    await self._send(ws, frames.event(event))
        elif frame.type == "COMMAND":
            assert frame.nested is not None
            doc = frame.doc["command"]
            try:
                verify_document(frame.nested, "command", self.registry)  # the six stages (§6.4)
                catalogue.validate_payload(doc["kind"], doc["payload"])
                if catalogue.command(doc["kind"]).compare_and_set and "expectedRevision" not in doc:
                    raise ProtocolError(ErrorCode.SCHEMA_VALIDATION_FAILED, "expectedRevision is required (§15.3)")
            except Exception as exc:
                err = exc if isinstance(exc, ProtocolError) else ProtocolError(ErrorCode.AUTH_INVALID_SIGNATURE, "no")
                await self._send(ws, frames.error_frame(err, related_action_id=doc.get("actionId")))
                return
            self.commands.append(doc)
            self._decide(doc)
        elif frame.type == "PING" and "replyToNonce" not in frame.doc:
            await self._send(ws, frames.ping(now(), reply_to_nonce=frame.doc["nonce"]))

    async def backpressure(self, ws: ServerConnection, group: str, retry_after_ms: int) -> None:
        await self._send(ws, frames.backpressure_frame(group, retry_after_ms))

    # --- the REST reads (DESIGN §5) -------------------------------------------------------------

    def _rest(self, ws: ServerConnection, request: Request) -> Response | None:
        path, _, query = request.path.partition("?")
        if not path.startswith("/api/v0.1/"):
            return None  # the WebSocket
        parts = [urllib.parse.unquote(p) for p in path.split("/")[3:]]
        if parts[0] == "keys" and parts[1] == self.authority.key.key_id:
            return _json(self.authority.binding())
        if parts == ["memberships"]:
            docs = [{**ex.membership(), "groupId": g, "member": {"type": "agent", "id": self.agent}} for g in self.logs]
            return _json({"memberships": docs})
        if parts[0] == "groups" and parts[2:] == ["events"] and parts[1] in self.logs:
            after = int(urllib.parse.parse_qs(query).get("afterSequence", ["0"])[0])
            log = self.logs[parts[1]]
            return _json({"events": log[after : after + 1], "headSequence": len(log)})
        err = ProtocolError(ErrorCode.GROUP_NOT_FOUND, "no such thing")
        return _json(err.document(), HTTPStatus.NOT_FOUND)


def _json(body: Any, status: HTTPStatus = HTTPStatus.OK) -> Response:
    data = jcs.canonicalize(body) if not isinstance(body, bytes) else body
    headers = Headers({"Content-Type": "application/json", "Content-Length": str(len(data)), "Connection": "close"})
    return Response(status.value, status.phrase, headers, data)


__all__ = ["FakePortal"]
