"""The REST binding's plumbing (DESIGN §5): every refusal and failure as the
normative error document (§19) with its status from ``errors.RULES``, and the
strict reading of a request body. The endpoints are in ``missions/api/``."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, InterfaceError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils.log import log_response
from django.views import defaults
from rest_framework import exceptions as drf_exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import set_rollback

from mwportal.protocol import HTTP_STATUS, CanonicalizationError, ErrorCode, ProtocolError, loads_strict

from . import serializers as s

log = logging.getLogger(__name__)

# Every status an error document can come with (the one table in
# mwportal/protocol/errors.py), for each view's OpenAPI responses.
ERRORS = {status: s.ErrorSerializer for status in sorted(set(HTTP_STATUS.values()))}
# A route that reads a JSON body also refuses one too large (413) or not JSON (415).
BODY_ERRORS = {**ERRORS, 413: s.ErrorSerializer, 415: s.ErrorSerializer}


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


def database_failure(exc: BaseException) -> BaseException | None:
    """The database error among the causes and contexts of ``exc``, if any."""
    pending, seen = [exc], set()
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, DATABASE_ERRORS):
            return node
        pending += [n for n in (node.__cause__, node.__context__) if n is not None]
    return None


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
    """Every refusal leaves in the normative error document (DESIGN §5), and so does
    every failure: a database error or any other unexpected exception is the
    INTERNAL_ERROR document with ``Retry-After`` (issue 16 item 10), never
    Django's HTML page. The traceback is logged once, server-side.

    A refusal raised because the database failed underneath it (key
    resolution fails closed, §6.4, so an outage would read as
    AUTH_INVALID_SIGNATURE) is the Authority failing, not the request being
    wrong: INTERNAL_ERROR, retryable, since nothing was accepted."""
    if isinstance(exc, ProtocolError) and exc.code is not ErrorCode.INTERNAL_ERROR:
        failure = database_failure(exc)
        if failure is not None:
            set_rollback()
            return _logged(error_response(internal_error(failure)), failure, context)
    if isinstance(exc, ProtocolError):
        if exc.code is ErrorCode.INTERNAL_ERROR:
            # BACKPRESSURE (429) is a refusal the server chose; only a failure
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


def methods_only(view: Callable[..., HttpResponse], *methods: str) -> Callable[..., HttpResponse]:
    """A plain Django view under ``/api/`` that answers any other method with
    the 405 error document (with ``Allow``), as the DRF views do."""

    @functools.wraps(view)
    def answer(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method not in methods:
            err = ProtocolError(
                ErrorCode.PROTOCOL_VIOLATION,
                f"method {request.method} is not allowed here",
                details={"reason": "method_not_allowed"},
                http_status=405,
            )
            response = json_error_response(err)
            response["Allow"] = ", ".join(methods)
            return response
        return view(request, *args, **kwargs)

    return answer


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: an exception that escaped a view outside DRF (the
    Work Contract schema, middleware) under ``/api/`` answers the
    INTERNAL_ERROR document too; the portal's pages keep their HTML page.
    Django has already logged the traceback when it calls this."""
    if request.path.startswith("/api/"):
        return json_error_response(internal_error(None))
    return defaults.server_error(request)


def read_body(request: Request) -> bytes:
    """The request body's bytes, else the binding's refusal: 400
    PROTOCOL_VIOLATION when it is empty, 415 unless it is declared
    ``application/json`` (UTF-8), 413 over ``MWP_MAX_COMMAND_BYTES`` (1 MiB).
    Nothing is parsed yet."""
    django_request: HttpRequest = request._request
    limit = settings.MWP_MAX_COMMAND_BYTES
    declared = django_request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit():
        raise unreadable("Content-Length is not a number of bytes")
    if int(declared) == 0:
        raise unreadable("is empty; expected a JSON object")
    check_json_media_type(django_request)
    if int(declared) > limit:
        raise too_large(limit)
    raw: bytes = django_request.read(limit + 1)
    if len(raw) > limit:
        raise too_large(limit)
    if not raw:
        raise unreadable("is empty; expected a JSON object")
    return raw


def parse_json(raw: bytes) -> Any:
    """``raw`` as one strict JSON value (§17.4, §6.4): 400 PROTOCOL_VIOLATION
    when it is not strict JSON, SCHEMA_VALIDATION_FAILED for a NUL in a
    member (the project's storage refuses one)."""
    try:
        return loads_strict(raw)
    except CanonicalizationError as exc:
        # §6.4: invalid JSON, a duplicate member or a value outside the JCS
        # data model (a lone surrogate, an unsafe number) is PROTOCOL_VIOLATION;
        # a NUL is JCS data the project's storage refuses, a member's value.
        if exc.reason == "nul" and exc.field:
            raise ProtocolError(ErrorCode.SCHEMA_VALIDATION_FAILED, str(exc), details={"field": exc.field}) from None
        raise unreadable(str(exc)) from None


_NUL_ESCAPE = b"\\u0000"


def refuse_nul(raw: bytes) -> None:
    """SCHEMA_VALIDATION_FAILED naming the member if ``raw`` holds a NUL character.

    A NUL is valid JSON and JCS data, but PostgreSQL's text and jsonb refuse
    it (issue 16 item 6), so a document holding one must be refused here
    rather than answered 500 by the database. In JSON text a NUL can only be
    the escape ``\\u0000`` (a raw control character is not JSON), so the bytes
    are searched first and parsed only when one may be there.
    """
    at = raw.find(_NUL_ESCAPE)
    while at != -1:
        before = at - 1
        while before >= 0 and raw[before] == 0x5C:  # the backslashes before the escape's own
            before -= 1
        if (at - 1 - before) % 2 == 0:  # the escape's backslash is not itself escaped
            parse_json(raw)  # names the member, or the JSON's own fault
            raise ProtocolError(
                ErrorCode.SCHEMA_VALIDATION_FAILED, "body: a string holds a NUL character", details={"field": "body"}
            )
        at = raw.find(_NUL_ESCAPE, at + 1)


def check_json_media_type(request: HttpRequest) -> None:
    """415 PROTOCOL_VIOLATION unless the body is declared ``application/json``
    (a ``charset`` parameter, when given, must be UTF-8: §17.1's UTF-8 JSON)."""
    declared = request.META.get("CONTENT_TYPE", "")
    media_type, _, params = declared.partition(";")
    charset = ""
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"').lower()
    if media_type.strip().lower() != "application/json" or charset not in ("", "utf-8", "utf8"):
        raise ProtocolError(
            ErrorCode.PROTOCOL_VIOLATION,
            f"Content-Type: expected application/json, not {declared[:100] or 'none'}",
            details={"field": "Content-Type", "reason": "unsupported_media_type"},
            http_status=415,
        )


def unreadable(problem: str) -> ProtocolError:
    """A body that is not one strict JSON value (§17.4 framing): PROTOCOL_VIOLATION."""
    return ProtocolError(ErrorCode.PROTOCOL_VIOLATION, f"body: {problem}", details={"field": "body"})


def too_large(limit: int) -> ProtocolError:
    """A body over the binding's limit: PROTOCOL_VIOLATION with HTTP 413."""
    return ProtocolError(
        ErrorCode.PROTOCOL_VIOLATION,
        f"body: the request body is over {limit} bytes",
        details={"field": "body", "reason": "too_large"},
        http_status=413,
    )
