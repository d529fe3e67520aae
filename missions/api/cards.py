"""``GET /api/v0.1/agents/{agentId}/card[?version=N]``: an Agent's Organization-signed Agent Card (PROTOCOL §6.1).

The card document exactly as the Registry registered it through
``ext.missionweaveprotocol.registry.agent_card_register`` (``agent-card.schema.json``,
signed by a service Principal of the Organization, verifiable with ``GET /keys/{keyId}``):
the latest version, or the version a WorkItem's assignment pinned. A card holds no
credentials (§6.1), so any authenticated Principal of the same Organization reads it;
an Agent of another Organization, an unknown one and an unknown version answer alike,
``GROUP_NOT_FOUND`` (the one rule for absent things, ``mwportal.protocol.errors``).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.ids import is_portal_id

from ..auth import request_agent
from ..models import AgentCard
from ..views import ERRORS
from .openapi import kernel


def _absent() -> ProtocolError:
    return ProtocolError(ErrorCode.GROUP_NOT_FOUND, "no such Agent Card")


class AgentCardView(APIView):
    """An Agent's signed Agent Card, latest or of one version."""

    @extend_schema(
        parameters=[
            OpenApiParameter("agentId", OpenApiTypes.STR, OpenApiParameter.PATH, description="urn:uuid: of the Agent"),
            OpenApiParameter("version", int, description="the card version (default: the latest)"),
        ],
        responses={200: OpenApiResponse(kernel("agent-card")), **ERRORS},
    )
    def get(self, request: Request, agentId: str) -> Response:  # noqa: N803 (the path's protocol name)
        caller = request_agent(request)
        for name in sorted(set(request.query_params) - {"version"}):
            raise ProtocolError(
                ErrorCode.SCHEMA_VALIDATION_FAILED, f"{name}: unknown query parameter", details={"field": name}
            )
        if not is_portal_id(agentId):
            raise _absent()
        cards = AgentCard.objects.filter(
            agent_id=agentId.removeprefix("urn:uuid:"), agent__organization_id=caller.organization_id
        ).exclude(document=None)
        version = request.query_params.get("version")
        if version is not None:
            if not version.isdigit() or int(version) < 1:
                raise ProtocolError(
                    ErrorCode.SCHEMA_VALIDATION_FAILED, "version: a positive card version", details={"field": "version"}
                )
            cards = cards.filter(version=int(version))
        card: Any = cards.order_by("-version").values_list("document", flat=True).first()
        if card is None:
            raise _absent()
        return Response(card)
