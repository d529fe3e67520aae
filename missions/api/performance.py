"""``GET /api/v0.1/agents/{agentId}/performance``: the Registry's capability performance records (PROTOCOL §6.1).

One record per capability version the Agent's assignments pinned, counting
accepted results and failures, kept apart from the Agent Card and never folded
into one global score. Organization data: read by the Organization's people and
services and by an Agent holding the Coordinator role in one of its Groups (who
chooses whom to offer work); another Agent, an unknown one and another
Organization's answer alike, ``GROUP_NOT_FOUND``.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.ids import is_portal_id, urn

from ..auth import request_agent
from ..models import Agent, CapabilityRecord, Membership
from ..views import ERRORS

RECORD = {
    "type": "object",
    "required": ["agentId", "records"],
    "properties": {
        "agentId": {"type": "string"},
        "records": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["capability", "completed", "failed", "updatedAt"],
                "properties": {
                    "capability": {"type": "object"},
                    "completed": {"type": "integer"},
                    "failed": {"type": "integer"},
                    "updatedAt": {"type": "string"},
                },
            },
        },
    },
}


def _absent() -> ProtocolError:
    return ProtocolError(ErrorCode.GROUP_NOT_FOUND, "no such Agent")


def _may_read(caller: Agent) -> bool:
    if caller.kind != Agent.KIND_AGENT:
        return True  # the Organization's people and services
    roles = Membership.objects.filter(agent=caller, active=True).values_list("roles", flat=True)
    return any("coordinator" in r for r in roles)


class AgentPerformanceView(APIView):
    """An Agent's per-capability performance records."""

    @extend_schema(
        parameters=[
            OpenApiParameter("agentId", OpenApiTypes.STR, OpenApiParameter.PATH, description="urn:uuid: of the Agent"),
        ],
        responses={200: OpenApiResponse(RECORD), **ERRORS},
    )
    def get(self, request: Request, agentId: str) -> Response:  # noqa: N803 (the path's protocol name)
        caller = request_agent(request)
        if not is_portal_id(agentId) or not _may_read(caller):
            raise _absent()
        agent = Agent.objects.filter(
            id=agentId.removeprefix("urn:uuid:"), organization_id=caller.organization_id, kind=Agent.KIND_AGENT
        ).first()
        if agent is None:
            raise _absent()
        rows = CapabilityRecord.objects.filter(agent=agent).order_by("capability_id", "capability_version")
        records = [
            {
                "capability": {"id": r.capability_id, "version": r.capability_version},
                "completed": r.completed,
                "failed": r.failed,
                "updatedAt": r.updated_at.isoformat().replace("+00:00", "Z"),
            }
            for r in rows
        ]
        return Response({"agentId": urn(str(agent.id)), "records": records})
