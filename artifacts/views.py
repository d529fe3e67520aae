"""``POST /api/v1/artifacts?group=`` and ``GET /api/v1/artifacts/{sha256}`` (DESIGN §4)."""

from __future__ import annotations

from typing import Any, BinaryIO, cast

from django.conf import settings
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from missions.access import access_group
from missions.auth import request_agent
from missions.models import Membership
from missions.views import ERRORS
from mwportal.protocol import ErrorCode, ProtocolError, malformed, parse_uuid

from .models import Blob, BlobGroup
from .store import check_sha256, open_verified, store_stream


class _RawParser(BaseParser):
    """Declares that any media type is accepted; the view reads the raw stream itself."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return stream


class ArtifactUploadView(APIView):
    parser_classes = [_RawParser]

    @extend_schema(
        parameters=[OpenApiParameter("group", str, required=True, description="the Group the Artifact belongs to")],
        request={"application/octet-stream": bytes},
        responses={201: OpenApiResponse(description='{"sha256", "size", "media_type"}'), **ERRORS},
    )
    def post(self, request: Request) -> Response:
        agent = request_agent(request)
        group = access_group(agent, parse_uuid(request.query_params.get("group"), "group"))
        media_type = (request.content_type or "application/octet-stream").split(";")[0].strip()
        if not media_type or "/" not in media_type:
            raise malformed("Content-Type", "must be a media type such as application/json")
        # The Django request is a file-like stream of the body: read in
        # chunks, never whole (a 1 GiB Artifact never sits in memory).
        stream = cast(BinaryIO, request._request)
        blob = store_stream(stream, media_type, group, agent, settings.MWP_ARTIFACT_MAX_BYTES)
        return Response({"sha256": blob.sha256, "size": blob.size, "media_type": blob.media_type}, status=201)


class ArtifactDownloadView(APIView):
    @extend_schema(responses={200: OpenApiResponse(description="the Artifact's bytes"), **ERRORS})
    def get(self, request: Request, sha256: str) -> StreamingHttpResponse:
        agent = request_agent(request)
        sha256 = check_sha256(sha256)
        blob = Blob.objects.filter(sha256=sha256).first()
        if blob is None:
            raise ProtocolError(ErrorCode.NOT_FOUND, f"no Artifact {sha256}", {"sha256": sha256})
        groups = BlobGroup.objects.filter(blob=blob).values_list("group_id", flat=True)
        if not Membership.objects.filter(agent=agent, group_id__in=list(groups), active=True).exists():
            raise ProtocolError(ErrorCode.NOT_A_MEMBER, "not a member of a Group this Artifact belongs to")
        response = StreamingHttpResponse(open_verified(sha256), content_type=blob.media_type)
        response["Content-Length"] = str(blob.size)
        response["ETag"] = f'"{sha256}"'
        return response
