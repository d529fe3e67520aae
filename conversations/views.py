"""``GET /api/v0.1/groups/{groupId}/conversations``: a Group's Conversations (§9), each as
``conversation.schema.json`` has it. Membership is enforced by ``access_group``: a Group the
caller may not see answers as an absent one."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from missions.access import access_group
from missions.api.openapi import kernel
from missions.auth import request_agent
from missions.models import Group
from missions.views import ERRORS
from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.ids import bare, urn

from .documents import conversations

PAGE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["groupId", "conversations"],
    "properties": {
        "groupId": {"type": "string"},
        "conversations": {"type": "array", "items": kernel("conversation")},
    },
}


class GroupConversationsView(APIView):
    """The planning Conversation and one Conversation per WorkItem."""

    @extend_schema(
        parameters=[
            OpenApiParameter("groupId", OpenApiTypes.STR, OpenApiParameter.PATH, description="urn:uuid: of the Group"),
        ],
        responses={200: OpenApiResponse(PAGE), **ERRORS},
    )
    def get(self, request: Request, groupId: str) -> Response:  # noqa: N803 (the path's protocol name)
        group = access_group(request_agent(request), bare(groupId, "groupId"))
        if group.kind == Group.KIND_ADMIN:
            raise ProtocolError(ErrorCode.INVALID_STATE_TRANSITION, "an administrative Group has no Conversations")
        return Response({"groupId": urn(group.id), "conversations": conversations(group)})
