"""``GET /api/v0.1/policy-log``: the caller's Organization's Policy Log, for its auditors only
(PROTOCOL §6.4, §20; DESIGN §1).

Entries come in the order they were appended, ``after`` a position the caller
already holds (``position`` of the last entry read), at most ``limit`` (1-500)
at a time. Any Principal who is not an auditor of the Organization gets
``AUTH_FORBIDDEN``; an unauthenticated caller ``AUTH_REQUIRED``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mwportal.protocol import ErrorCode, ProtocolError, malformed

from .. import policylog
from ..auth import request_agent
from ..views import ERRORS

_ID = {"type": "string", "pattern": "^urn:uuid:"}
ENTRY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["entryId", "position", "kind", "recordedAt", "detail"],
    "properties": {
        "entryId": _ID,
        "position": {"type": "integer", "minimum": 1},
        "kind": {"type": "string", "enum": sorted(policylog.KINDS)},
        "recordedAt": {"type": "string", "format": "date-time"},
        "groupId": _ID,
        "missionId": _ID,
        "policyName": {"type": "string"},
        "actor": _ID,
        "actionId": _ID,
        "commandKind": {"type": "string"},
        "eventId": {**_ID, "description": "the accepted Event the decision is linked to"},
        "reference": {"type": "string", "description": "an override grant, protected diagnostic or snapshot"},
        "detail": {"type": "object"},
    },
}


def _count(request: Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise malformed(name, f"an integer from {low} to {high}")
    return int(text)


class PolicyLogView(APIView):
    """The Organization's Policy Log, oldest first; auditors only."""

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "after", OpenApiTypes.INT, OpenApiParameter.QUERY, description="entries after this position"
            ),
            OpenApiParameter("limit", OpenApiTypes.INT, OpenApiParameter.QUERY, description="at most this many (500)"),
        ],
        responses={
            200: OpenApiResponse(
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["entries"],
                    "properties": {"entries": {"type": "array", "items": ENTRY_SCHEMA}},
                }
            ),
            **ERRORS,
        },
    )
    def get(self, request: Request) -> Response:
        principal = request_agent(request)
        if not policylog.readable_by(principal):
            raise ProtocolError(ErrorCode.AUTH_FORBIDDEN, "only the Organization's auditors read the Policy Log")
        after = _count(request, "after", 0, 0, 2**53 - 1)
        limit = _count(request, "limit", 200, 1, 500)
        return Response({"entries": policylog.entries(principal.organization_id, after=after, limit=limit)})
