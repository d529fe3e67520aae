"""REST views (DESIGN §4): parse -> build Command -> ``accept()`` -> render."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, InterfaceError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils.log import log_response
from django.views import defaults
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions as drf_exceptions
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView, set_rollback

from mwportal.protocol import (
    HTTP_STATUS,
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

# Every status an error document can come with (the one table in
# mwportal/protocol/errors.py), for each view's OpenAPI responses.
ERRORS = {status: s.ErrorSerializer for status in sorted(set(HTTP_STATUS.values()))}


# How long a client waits before retrying after INTERNAL_ERROR: a pool
# checkout waits MWP_DB_POOL_TIMEOUT (3 s) before failing, so a retry sooner
# than a second would mostly join the same queue.
INTERNAL_RETRY_AFTER_MS = 1000

# A database that cannot be reached or answer (an outage, a connection that
# broke, an exhausted pool) is the Authority failing, not the request being
# wrong: spec §19 INTERNAL_ERROR, retryable. Django wraps the driver's errors
# in these; psycopg_pool.PoolTimeout is listed too for a checkout that fails
# outside Django's wrapper.
DATABASE_ERRORS: tuple[type[BaseException], ...] = (DatabaseError, InterfaceError)
with contextlib.suppress(ImportError):
    from psycopg_pool import PoolTimeout

    DATABASE_ERRORS = (*DATABASE_ERRORS, PoolTimeout)


def internal_error(exc: BaseException | None) -> ProtocolError:
    """The INTERNAL_ERROR document for an unexpected failure (``exc``, or None
    when the handler is not told it); it says nothing of the cause (which is
    logged server-side), only that a retry is safe: a Command is accepted in
    one transaction or not at all, and an unchanged retry of one that was
    accepted answers with its receipt (MWP-EVT-003)."""
    what = "its database" if isinstance(exc, DATABASE_ERRORS) else "an unexpected error"
    return ProtocolError(
        ErrorCode.INTERNAL_ERROR,
        f"the Authority failed ({what}); retry the same request unchanged",
        retry_after_ms=INTERNAL_RETRY_AFTER_MS,
    )


_R = TypeVar("_R", bound=HttpResponse)


def error_response(err: ProtocolError, status: int | None = None) -> Response:
    """``err`` in the one error shape, with ``Retry-After`` when it says when to retry."""
    return _with_retry_after(Response(err.as_dict(), status=status or err.http_status), err)


def json_error_response(err: ProtocolError) -> JsonResponse:
    """``error_response`` for Django's handlers, outside DRF (no renderer there)."""
    return _with_retry_after(JsonResponse(err.as_dict(), status=err.http_status), err)


def _with_retry_after(response: _R, err: ProtocolError) -> _R:
    retry_after = err.retry_after_header()
    if retry_after is not None:
        response["Retry-After"] = retry_after
    return response


def protocol_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """Every refusal leaves in the one error shape of DESIGN §4, and so does
    every failure: a database error or any other unexpected exception is the
    INTERNAL_ERROR document with ``Retry-After`` (issue 16 item 10), never
    Django's HTML page. The traceback is logged once, server-side."""
    if isinstance(exc, ProtocolError):
        if exc.code is ErrorCode.INTERNAL_ERROR:
            # BACKPRESSURE (503) is a refusal the server chose; only a failure
            # is worth a traceback.
            return _logged(error_response(exc), exc, context)
        return error_response(exc)
    if isinstance(exc, drf_exceptions.NotAuthenticated):
        return error_response(ProtocolError(ErrorCode.AUTH_REQUIRED, str(exc.detail)), 401)
    if isinstance(exc, drf_exceptions.AuthenticationFailed):
        return error_response(ProtocolError(ErrorCode.AUTH_STALE_SESSION, str(exc.detail)), 401)
    if isinstance(exc, drf_exceptions.PermissionDenied | PermissionDenied):
        return error_response(ProtocolError(ErrorCode.AUTH_FORBIDDEN, _detail(exc, "forbidden")), 403)
    if isinstance(exc, drf_exceptions.NotFound | Http404):
        # A route matched but its object is absent: the errors.py rule for
        # absent things read over REST.
        return error_response(ProtocolError(ErrorCode.GROUP_NOT_FOUND, _detail(exc, "not found")), 404)
    if isinstance(exc, drf_exceptions.APIException) and exc.status_code < 500:
        # Method not allowed, unsupported media type, throttling: the HTTP
        # binding's own refusals keep DRF's status; the document is ours.
        return error_response(ProtocolError(ErrorCode.PROTOCOL_VIOLATION, str(exc.detail)), exc.status_code)
    set_rollback()
    return _logged(error_response(internal_error(exc)), exc, context)


def _detail(exc: Exception, default: str) -> str:
    detail = getattr(exc, "detail", None) or (exc.args[0] if exc.args else None)
    return str(detail) if detail else default


def _logged(response: Response, exc: BaseException, context: dict[str, Any]) -> Response:
    """Log a 5xx with its traceback the way Django logs an uncaught one
    (``django.request``), and mark the response logged so Django's handler
    does not log it a second time without the traceback."""
    request = context.get("request")
    path = getattr(request, "path", "?")
    log_response("%s: %s", "Internal Server Error", path, response=response, request=request, exception=exc)
    return response


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler404``: an unknown path under ``/api/`` answers an error
    document (PROTOCOL_VIOLATION, 404: the binding has no such route), as
    every API refusal does; the portal's pages keep their HTML page."""
    if request.path.startswith("/api/"):
        err = ProtocolError(
            ErrorCode.PROTOCOL_VIOLATION,
            f"no API route {request.path}",
            details={"reason": "no_route"},
            http_status=404,
        )
        return json_error_response(err)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: an exception that escaped a view outside DRF (the
    Work Contract schema, middleware) under ``/api/`` answers the
    INTERNAL_ERROR document too; the portal's pages keep their HTML page.
    Django has already logged the traceback when it calls this."""
    if request.path.startswith("/api/"):
        return json_error_response(internal_error(None))
    return defaults.server_error(request)


def read_json_body(request: Request) -> Any:
    """The request body as strict JSON, at most 1 MiB, else PROTOCOL_VIOLATION
    (unreadable) or SCHEMA_VALIDATION_FAILED (a member's value)."""
    django_request: HttpRequest = request._request
    limit = settings.MWP_MAX_COMMAND_BYTES
    declared = django_request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit() or int(declared) > limit:
        raise unreadable(f"the request body is over {limit} bytes")
    raw = django_request.read(limit + 1)
    if len(raw) > limit:
        raise unreadable(f"the request body is over {limit} bytes")
    if not raw:
        raise unreadable("is empty; expected a JSON object")
    try:
        return loads_strict(raw)
    except CanonicalizationError as exc:
        # §6.4: invalid JSON, a duplicate member or a value outside the JCS
        # data model (a lone surrogate, an unsafe number) is PROTOCOL_VIOLATION;
        # a NUL is JCS data the project's storage refuses, a member's value.
        if exc.reason == "nul" and exc.field:
            # The member inside the document (issue 16 item 6: "body.title:
            # a string holds a NUL character"); the message already names it.
            raise ProtocolError(ErrorCode.SCHEMA_VALIDATION_FAILED, str(exc), details={"field": exc.field}) from None
        raise unreadable(str(exc)) from None


def unreadable(problem: str) -> ProtocolError:
    """A body that is not one strict JSON value (§17.4 framing): PROTOCOL_VIOLATION."""
    return ProtocolError(ErrorCode.PROTOCOL_VIOLATION, f"body: {problem}", details={"field": "body"})


class SessionsView(APIView):
    """Open an Agent Session with a signed request; the previous one is revoked."""

    authentication_classes: list[Any] = []
    parser_classes = [JSONParser]  # as CommandsView: strict JSON only

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
            raise ProtocolError(ErrorCode.AUTH_INVALID_SIGNATURE, f"unknown agent {agent_id}")
        admin_group = Group.objects.filter(organization_id=agent.organization_id, kind=Group.KIND_ADMIN).first()
        if admin_group is None:
            raise ProtocolError(ErrorCode.GROUP_NOT_FOUND, "the Agent's Organization has no administrative Group")
        nonce = data["nonce"] if isinstance(data["nonce"], str) else ""
        if nonce and AgentSession.objects.filter(agent=agent, nonce=nonce).exists():
            # A replayed or re-signed request with a used nonce (replay protection).
            raise ProtocolError(ErrorCode.AUTH_INVALID_SIGNATURE, "this session request was already used (replay)")
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
            raise ProtocolError(ErrorCode.AUTH_INVALID_SIGNATURE, "this session request was already used (replay)")
        grants = receipt["grants"]
        return Response(
            {"agent": agent_id, "token": grants["token"], "session_epoch": grants["session_epoch"]}, status=201
        )


class CommandsView(APIView):
    """Submit a signed Command envelope; answers with its receipt."""

    # The envelope's Ed25519 signature is the authentication.
    authentication_classes: list[Any] = []
    # The body is read as strict JSON whatever its Content-Type; the schema
    # then documents only application/json instead of DRF's form parsers.
    parser_classes = [JSONParser]

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
                ErrorCode.CURSOR_TOO_OLD,
                f"after {after} is outside the online replay window",
                details={"snapshot": ref},
            )
            # The reference travels in details: the document admits no other
            # member, and snapshotArtifactHash waits for snapshots stored as
            # Artifacts (issue 18).
            return error_response(err)
        events = GroupEvent.objects.filter(group=group, sequence__gt=after).order_by("sequence")[:limit]
        return Response({"events": [e.as_wire() for e in events], "head": group.last_sequence})


class GroupSnapshotView(APIView):
    """A signed Group snapshot document (verify it with ``mwportal.protocol.snapshot``)."""

    @extend_schema(responses={200: OpenApiResponse(description="the signed snapshot document"), **ERRORS})
    def get(self, request: Request, group_id: str, sequence: int) -> Response:
        group = access_group(request_agent(request), parse_uuid(group_id, "group"))
        snap = GroupSnapshot.objects.filter(group=group, sequence=sequence).first()
        if snap is None:
            raise ProtocolError(ErrorCode.GROUP_NOT_FOUND, f"no snapshot of this Group at {sequence}")
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
