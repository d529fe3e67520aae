"""REST views (DESIGN §4): parse -> build Command -> ``accept()`` -> render."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions as drf_exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView, exception_handler

from mwportal.protocol import (
    CanonicalizationError,
    ErrorCode,
    ProtocolError,
    loads_strict,
    malformed,
    parse_envelope,
    parse_uuid,
)

from . import serializers as s
from .access import access_group
from .auth import request_agent
from .authority import Auth, Command, accept
from .models import Agent, AgentSession, Group, GroupEvent, GroupSnapshot, Membership
from .server_key import server_keypair
from .snapshots import snapshot_for_cursor

log = logging.getLogger(__name__)

ERRORS = {code: s.ErrorSerializer for code in (400, 401, 403, 404, 409, 410, 422)}


def protocol_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every refusal leaves in the one error shape of DESIGN §4."""
    if isinstance(exc, ProtocolError):
        return Response(exc.as_dict(), status=exc.http_status)
    if isinstance(exc, drf_exceptions.NotAuthenticated | drf_exceptions.AuthenticationFailed):
        err = ProtocolError(ErrorCode.STALE_SESSION, str(exc.detail))
        return Response(err.as_dict(), status=401)
    if isinstance(exc, drf_exceptions.PermissionDenied):
        return Response(ProtocolError(ErrorCode.FORBIDDEN, str(exc.detail)).as_dict(), status=403)
    if isinstance(exc, drf_exceptions.NotFound):
        return Response(ProtocolError(ErrorCode.NOT_FOUND, str(exc.detail)).as_dict(), status=404)
    if isinstance(exc, drf_exceptions.APIException):
        # Method not allowed, unsupported media type, throttling: the status
        # is DRF's, the shape is ours.
        err = ProtocolError(ErrorCode.MALFORMED, str(exc.detail))
        return Response(err.as_dict(), status=exc.status_code)
    return exception_handler(exc, context)


def read_json_body(request: Request) -> Any:
    """The request body as strict JSON, at most 1 MiB, else MALFORMED."""
    django_request: HttpRequest = request._request
    limit = settings.MWP_MAX_COMMAND_BYTES
    declared = django_request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit() or int(declared) > limit:
        raise malformed("body", f"the request body is over {limit} bytes")
    raw = django_request.read(limit + 1)
    if len(raw) > limit:
        raise malformed("body", f"the request body is over {limit} bytes")
    if not raw:
        raise malformed("body", "is empty; expected a JSON object")
    try:
        return loads_strict(raw)
    except CanonicalizationError as exc:
        raise malformed("body", str(exc)) from None


class SessionsView(APIView):
    """Open an Agent Session with a signed request; the previous one is revoked."""

    authentication_classes: list[Any] = []

    @extend_schema(request=s.SessionRequestSerializer, responses={201: s.SessionSerializer, **ERRORS})
    def post(self, request: Request) -> Response:
        data = read_json_body(request)
        if not isinstance(data, dict):
            raise malformed("body", "must be a JSON object")
        for name in ("agent", "issued_at", "nonce", "signature"):
            if name not in data:
                raise malformed(name, "is required")
        for name in sorted(set(data) - {"agent", "issued_at", "nonce", "signature"}):
            raise malformed(name, "unknown member")
        agent_id = parse_uuid(data["agent"], "agent")
        agent = Agent.objects.filter(id=agent_id).first()
        if agent is None:
            raise ProtocolError(ErrorCode.INVALID_SIGNATURE, f"unknown agent {agent_id}")
        admin_group = Group.objects.filter(organization_id=agent.organization_id, kind=Group.KIND_ADMIN).first()
        if admin_group is None:
            raise ProtocolError(ErrorCode.NOT_FOUND, "the Agent's Organization has no administrative Group")
        nonce = data["nonce"] if isinstance(data["nonce"], str) else ""
        if nonce and AgentSession.objects.filter(agent=agent, nonce=nonce).exists():
            # A replayed or re-signed request with a used nonce (replay protection).
            raise ProtocolError(ErrorCode.INVALID_SIGNATURE, "this session request was already used (replay)")
        from .authority import system_action_id

        envelope = parse_envelope(
            {
                "type": "agent.open_session",
                # One action per (agent, nonce): a replayed request is a
                # replayed Command, refused below as a reused nonce.
                "action_id": system_action_id("session", agent_id, nonce),
                "actor": agent_id,
                "group": str(admin_group.id),
                # Not checked for a self-authenticating Command; fixed so the
                # same request always has the same canonical content.
                "session_epoch": 0,
                "issued_at": data["issued_at"] if isinstance(data["issued_at"], str) else "",
                "body": {"request": data},
            },
            require_signature=False,
        )
        receipt = accept(Command(envelope, Auth.SELF))
        if receipt.get("replayed"):
            raise ProtocolError(ErrorCode.INVALID_SIGNATURE, "this session request was already used (replay)")
        grants = receipt["grants"]
        return Response(
            {"agent": agent_id, "token": grants["token"], "session_epoch": grants["session_epoch"]}, status=201
        )


class CommandsView(APIView):
    """Submit a signed Command envelope; answers with its receipt."""

    # The envelope's Ed25519 signature is the authentication.
    authentication_classes: list[Any] = []

    @extend_schema(
        request=s.EnvelopeSerializer, responses={200: s.ReceiptSerializer, 201: s.ReceiptSerializer, **ERRORS}
    )
    def post(self, request: Request) -> Response:
        envelope = parse_envelope(read_json_body(request))
        receipt = accept(Command(envelope, Auth.SIGNED))
        return Response(receipt, status=200 if receipt.get("replayed") else 201)


class GroupEventsView(APIView):
    """Events of a Group after a position, in sequence order."""

    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="return Events with a sequence above this (default 0)"),
            OpenApiParameter("limit", int, description="at most this many Events (1-1000, default 100)"),
        ],
        responses={200: s.EventPageSerializer, **ERRORS},
    )
    def get(self, request: Request, group_id: str) -> Response:
        group_id = parse_uuid(group_id, "group")
        query = s.EventQuerySerializer(data=request.query_params)
        if not query.is_valid():
            field, problems = next(iter(query.errors.items()))
            raise malformed(field, str(problems[0]))
        agent = request_agent(request)
        group = access_group(agent, group_id)
        after, limit = query.validated_data["after"], query.validated_data["limit"]
        snapshot = snapshot_for_cursor(group, after)
        if snapshot is not None:
            # The cursor is older than the online replay window: restore the
            # signed snapshot, then replay after its sequence (spec 16).
            ref = snapshot.reference()
            err = ProtocolError(
                ErrorCode.CURSOR_TOO_OLD, f"after {after} is outside the online replay window", {"snapshot": ref}
            )
            return Response({**err.as_dict(), "snapshot": ref}, status=410)
        events = GroupEvent.objects.filter(group=group, sequence__gt=after).order_by("sequence")[:limit]
        return Response({"events": [e.as_wire() for e in events], "head": group.last_sequence})


class GroupSnapshotView(APIView):
    """A signed Group snapshot document (verify it with ``mwportal.protocol.snapshot``)."""

    @extend_schema(responses={200: OpenApiResponse(description="the signed snapshot document"), **ERRORS})
    def get(self, request: Request, group_id: str, sequence: int) -> Response:
        group = access_group(request_agent(request), parse_uuid(group_id, "group"))
        snap = GroupSnapshot.objects.filter(group=group, sequence=sequence).first()
        if snap is None:
            raise ProtocolError(ErrorCode.NOT_FOUND, f"no snapshot of this Group at {sequence}")
        return Response(snap.document)


class ServerKeyView(APIView):
    """The server's Ed25519 public key, which signs Group snapshots."""

    authentication_classes: list[Any] = []

    @extend_schema(responses={200: OpenApiResponse(description='{"public_key"}')})
    def get(self, request: Request) -> Response:
        return Response({"public_key": server_keypair()[1], "algorithm": "Ed25519"})


class MembershipsView(APIView):
    """The calling Agent's active Memberships, with roles and epochs."""

    @extend_schema(responses={200: OpenApiResponse(description='{"memberships": [...]}'), **ERRORS})
    def get(self, request: Request) -> Response:
        agent = request_agent(request)
        rows = Membership.objects.filter(agent=agent, active=True).select_related("group").order_by("group_id")
        memberships = [
            {"group": str(m.group_id), "roles": m.roles, "membership_epoch": m.epoch, "kind": m.group.kind}
            for m in rows
        ]
        admin = Group.objects.filter(organization_id=agent.organization_id, kind=Group.KIND_ADMIN).first()
        return Response(
            {"agent": str(agent.id), "memberships": memberships, "admin_group": str(admin.id) if admin else None}
        )
