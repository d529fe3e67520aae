"""A Group's log over REST (DESIGN §5, PROTOCOL §16): signed Event documents after a sequence, and snapshots.

``GET /api/v0.1/groups/{groupId}/events?afterSequence=N&limit=M`` answers
``{"events": [...], "headSequence": H}``: the Group's signed Event documents
(``GroupEvent.document``, exactly what the WebSocket delivers) with a
sequence above N, in order. A position older than the online replay window
is ``CURSOR_TOO_OLD`` (410) carrying ``snapshotArtifactHash`` and, in
``details.snapshot``, the reference of the signed snapshot to restore. Its
``href`` serves the snapshot artifact ``{"snapshot": <signed Group
Snapshot>, "state": <the state>}``, whose JCS bytes hash to
``snapshotArtifactHash``; the client checks that hash, the snapshot's
signature and ``stateHash``, restores, and reads on after
``throughSequence``.

Membership is enforced by ``access_group``: a Group that is absent and one the
caller may not see are the same ``GROUP_NOT_FOUND`` document, byte for byte.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mwportal.protocol import ErrorCode, ProtocolError, jcs
from mwportal.protocol.ids import bare, urn

from .. import serializers as s
from ..access import access_group, visible_from
from ..auth import request_agent
from ..models import Group, GroupEvent, GroupSnapshot
from ..snapshots import snapshot_for_cursor
from ..views import ERRORS
from ..withholding import served
from .openapi import kernel

QUERY = frozenset({"afterSequence", "limit"})

EVENT_PAGE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["events", "headSequence"],
    "properties": {
        "events": {"type": "array", "items": kernel("event"), "description": "signed Event documents, in order"},
        "headSequence": {"type": "integer", "minimum": 0, "description": "the Group's last sequence when read"},
    },
}


SNAPSHOT_ARTIFACT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["snapshot", "state"],
    "properties": {
        "snapshot": kernel("group-snapshot"),
        "state": {"type": "object", "description": "the Group's state; its JCS bytes hash to snapshot.stateHash"},
    },
    "description": "the snapshot artifact: its JCS bytes hash to the snapshotArtifactHash of CURSOR_TOO_OLD",
}


def snapshot_artifact(snapshot: GroupSnapshot) -> dict[str, Any]:
    """What a client restores: the signed Group Snapshot (``group-snapshot.schema.json``) and the state
    its ``stateHash`` commits to, as one JSON document."""
    return {"snapshot": snapshot.document, "state": snapshot.state}


def snapshot_artifact_hash(snapshot: GroupSnapshot) -> str:
    """The content address of the snapshot artifact: ``sha256:`` of its JCS bytes."""
    return jcs.sha256_hash(jcs.canonicalize(snapshot_artifact(snapshot)))


def snapshot_url(group_id: str, sequence: int) -> str:
    return f"/api/v0.1/groups/{urn(group_id)}/snapshots/{sequence}"


def snapshot_reference(snapshot: GroupSnapshot) -> dict[str, Any]:
    """The signed snapshot's reference (DESIGN §5, PROTOCOL §16): which one, where, and what it hashes to."""
    reference: dict[str, Any] = {
        "groupId": urn(str(snapshot.group_id)),
        "throughSequence": snapshot.sequence,
        "snapshotArtifactHash": snapshot_artifact_hash(snapshot),
        "href": snapshot_url(str(snapshot.group_id), snapshot.sequence),
    }
    document = snapshot.document
    for member in ("snapshotId", "stateHash"):
        if member in document:
            reference[member] = document[member]
    if "signature" in document:
        reference["signature"] = document["signature"]
    return reference


def cursor_too_old(snapshot: GroupSnapshot, after: int) -> ProtocolError:
    return ProtocolError(
        ErrorCode.CURSOR_TOO_OLD,
        f"afterSequence {after} is outside the online replay window; restore the snapshot, then read after it",
        snapshot_artifact_hash=snapshot_artifact_hash(snapshot),
        details={"snapshot": snapshot_reference(snapshot)},
    )


def read_query(request: Request) -> tuple[int, int]:
    """``afterSequence`` and ``limit``, else SCHEMA_VALIDATION_FAILED naming the parameter."""
    for name in sorted(set(request.query_params) - QUERY):
        raise ProtocolError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"{name}: unknown query parameter (afterSequence, limit)",
            details={"field": name},
        )
    query = s.EventQuerySerializer(data=request.query_params)
    if not query.is_valid():
        field, problems = next(iter(query.errors.items()))
        raise ProtocolError(
            ErrorCode.SCHEMA_VALIDATION_FAILED, f"{field}: {problems[0]}", details={"field": str(field)}
        )
    return query.validated_data["afterSequence"], query.validated_data["limit"]


def visible_group(request: Request, group_id: str) -> Group:
    return access_group(request_agent(request), bare(group_id, "groupId"))


class GroupEventsView(APIView):
    """A Group's signed Event documents after a sequence, in sequence order."""

    @extend_schema(
        parameters=[
            OpenApiParameter("groupId", OpenApiTypes.STR, OpenApiParameter.PATH, description="urn:uuid: of the Group"),
            OpenApiParameter("afterSequence", int, description="Events with a sequence above this (default 0)"),
            OpenApiParameter("limit", int, description="at most this many Events (1-1000, default 100)"),
        ],
        responses={200: OpenApiResponse(EVENT_PAGE), **ERRORS},
    )
    def get(self, request: Request, groupId: str) -> HttpResponse:  # noqa: N803 (the path's protocol name)
        after, limit = read_query(request)
        group = visible_group(request, groupId)
        # §8: a late joiner's page starts at its visibility start, whatever it asked for.
        after = max(after, visible_from(request_agent(request), group) - 1)
        snapshot = snapshot_for_cursor(group, after)
        if snapshot is not None:
            raise cursor_too_old(snapshot, after)
        rows = (
            GroupEvent.objects.filter(group=group, sequence__gt=after)
            .order_by("sequence")
            .values_list("sequence", "document", "type")[:limit]
        )
        # The stored JCS texts as they are: what the Group Authority signed,
        # spliced into the page without being parsed and written again; a
        # redacted Event in its signed withheld form (§7.4, ``missions.withholding``).
        documents = served(str(group.id), str(group.organization_id), rows)
        body = '{"events":[' + ",".join(documents) + '],"headSequence":' + str(group.last_sequence) + "}"
        return HttpResponse(body, content_type="application/json")


class GroupSnapshotView(APIView):
    """The signed snapshot of a Group through a sequence (the one a CURSOR_TOO_OLD names)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("groupId", OpenApiTypes.STR, OpenApiParameter.PATH, description="urn:uuid: of the Group"),
            OpenApiParameter("sequence", int, OpenApiParameter.PATH, description="the snapshot's sequence"),
        ],
        responses={200: OpenApiResponse(SNAPSHOT_ARTIFACT), **ERRORS},
    )
    def get(self, request: Request, groupId: str, sequence: int) -> Response:  # noqa: N803
        group = visible_group(request, groupId)
        snapshot = GroupSnapshot.objects.filter(group=group, sequence=sequence).first()
        if snapshot is not None and visible_from(request_agent(request), group) > 0:
            # §8: a snapshot cites the whole history; a member whose visibility starts later does not read it.
            raise ProtocolError(
                ErrorCode.AUTH_FORBIDDEN,
                "a snapshot covers the Group's history before your visibility start (§8)",
                details={"reason": "before_visibility"},
            )
        if snapshot is None:
            # errors.py: an absent thing read through a visible Group is the same 404.
            raise ProtocolError(ErrorCode.GROUP_NOT_FOUND, f"no snapshot of this Group through sequence {sequence}")
        return Response(snapshot_artifact(snapshot))
