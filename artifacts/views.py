"""REST views of Artifacts, review results and Context Packages (DESIGN §5; PROTOCOL §13), under ``/api/v0.1/``.

Identifiers are ``urn:uuid:`` URIs and content hashes ``sha256:<hex>``, in
paths, queries and bodies alike; every refusal is the normative error document.

- ``POST /api/v0.1/artifacts?groupId=`` stores content (streaming) ->
  ``{"contentHash", "sizeBytes", "mediaType"}``;
- ``GET /api/v0.1/artifacts/{contentHash}`` streams it back after checking its hash;
- ``GET /api/v0.1/artifacts/{contentHash}/provenance`` the provenance graph around it;
- ``GET /api/v0.1/work-items/{workItemId}/review`` the review results (``artifacts.review``);
- ``GET /api/v0.1/groups/{groupId}/context-packages[/{contextPackageId}[/events]]``.

- ``POST /api/v0.1/artifacts/uploads?groupId=`` (``Upload-Length``) starts a
  resumable upload, ``PATCH /api/v0.1/artifacts/uploads/{uploadId}``
  (``Upload-Offset``) appends a chunk of at most ``MWP_ARTIFACT_CHUNK_BYTES``,
  ``HEAD``/``GET`` on it tell the offset to resume from, and
  ``POST /api/v0.1/artifacts/uploads/{uploadId}/complete[?contentHash=]`` stores
  the content (``artifacts.uploads``).

The upload and download stream in ``CHUNK``-sized pieces under WSGI and
ASGI alike. Under daphne, though, a request's body is queued whole by daphne
itself before the view runs (daphne 4.2 has no request backpressure), so
under ASGI a single-request upload larger than a chunk is refused
(SCHEMA_VALIDATION_FAILED, naming the resumable endpoint): large Artifacts
arrive chunk by chunk, and the server never holds more than a chunk of one
(bench/artifacts.py).

Reads only, apart from the bytes: the signed manifest arrives with
``artifact.publish``, Context Packages with
``ext.mwportal.context.package_publish``/``package_forward``, through
``POST /api/v0.1/commands``; that a Group holds stored bytes is the control
plane's ``ext.mwportal.artifact.content_store``, issued here once the bytes are
stored. Everything is for members of the Group concerned; anyone else gets 404
GROUP_NOT_FOUND, the answer for a thing that is not there (``access_blob``,
``access_group``; issue 16 item 8; the rule for absent things in
``mwportal/protocol/errors.py``).

The byte routes (uploads and the download) authenticate by bearer token
(the ``sessionToken`` of ``POST /api/v0.1/sessions``) only, never by the
portal's session cookie (issue 16 item 2): a browser that holds the cookie
cannot be led into fetching Worker-supplied bytes from the API. The download
is always an attachment, ``nosniff``, under ``Content-Security-Policy:
sandbox`` (``blob_download``), so HTML or SVG a Worker uploaded never runs in
the portal's origin. Uploads go into Mission Groups only
(``access_upload_group``); a resumable upload's reservation counts against the
Agent's quota (``artifacts.uploads``).
"""

from __future__ import annotations

from typing import Any, BinaryIO, cast

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from missions.access import access_group
from missions.auth import BearerTokenAuthentication, request_agent
from missions.models import Group, GroupEvent
from missions.serializers import ErrorSerializer
from missions.views import ERRORS
from missions.withholding import served_documents
from mwportal.protocol import ErrorCode, ProtocolError, malformed
from mwportal.protocol.ids import bare, urn

from .access import access_blob, access_context_package, access_upload_group, access_workitem, member_groups
from .models import Artifact, ArtifactSource, Blob, ContextForward, ContextPackage
from .review import review_summary
from .store import achunks, check_media_type, check_served, hex_of, open_verified, store_stream, wire_hash
from .uploads import append_chunk, cancel_upload, chunk_max, complete_upload, create_upload, load_upload

API = "/api/v0.1"
# The byte routes: a bearer token only (issue 16 item 2).
BYTE_ROUTE_AUTHENTICATION = [BearerTokenAuthentication]
GROUP_PARAMETER = OpenApiParameter(
    "groupId", str, required=True, description="the Mission Group (urn:uuid:) the content goes into"
)


class _RawParser(BaseParser):
    """Declares that any media type is accepted; the view reads the raw stream itself."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return stream


def _stored(blob: Blob) -> dict[str, Any]:
    return {"contentHash": wire_hash(blob.sha256), "sizeBytes": blob.size, "mediaType": blob.media_type}


def _query_group(request: Request) -> str:
    return bare(request.query_params.get("groupId"), "groupId")


class ArtifactUploadView(APIView):
    authentication_classes = BYTE_ROUTE_AUTHENTICATION
    parser_classes = [_RawParser]

    @extend_schema(
        parameters=[GROUP_PARAMETER],
        request={"application/octet-stream": bytes},
        responses={201: OpenApiResponse(description='{"contentHash", "sizeBytes", "mediaType"}'), **ERRORS},
    )
    def post(self, request: Request) -> Response:
        agent = request_agent(request)
        group = access_upload_group(agent, _query_group(request))
        media_type = _media_type(request)
        declared = request._request.META.get("CONTENT_LENGTH") or ""
        if declared.isdigit() and int(declared) > settings.MWP_ARTIFACT_MAX_BYTES:
            # Refused before a byte of the body is read.
            raise malformed("body", f"an Artifact is at most {settings.MWP_ARTIFACT_MAX_BYTES} bytes")
        if isinstance(request._request, ASGIRequest) and declared.isdigit() and int(declared) > chunk_max():
            # daphne has queued the whole body in memory before this view
            # runs: past a chunk, Artifacts take the resumable upload.
            raise malformed(
                "body",
                f"under ASGI a single-request upload is at most {chunk_max()} bytes; "
                f"use the resumable upload: POST {API}/artifacts/uploads?groupId=",
            )
        # The Django request is a file-like stream of the body: read in
        # chunks, never whole (a 1 GiB Artifact never sits in memory).
        stream = cast(BinaryIO, request._request)
        blob = store_stream(
            stream, media_type, group, agent, settings.MWP_ARTIFACT_MAX_BYTES,
            int(declared) if declared.isdigit() else None,
        )  # fmt: skip
        return Response(_stored(blob), status=201)


def _media_type(request: Request) -> str:
    """The upload's media type: the Content-Type without its parameters,
    checked (RFC 6838 tokens, at most the column's length: issue 16 item 6)."""
    return check_media_type((request.content_type or "application/octet-stream").split(";")[0].strip())


def _header_int(request: Request, name: str) -> int:
    raw = request.headers.get(name, "")
    if not raw.isdigit():
        raise malformed(name, "must be a non-negative integer (bytes)")
    return int(raw)


def _upload_view(upload_id: str, meta: dict[str, Any]) -> dict[str, Any]:
    return {"uploadId": upload_id, "offset": meta["offset"], "length": meta["length"],
            "mediaType": meta["media_type"], "groupId": urn(meta["group"]), "chunkMax": chunk_max()}  # fmt: skip


UPLOAD_HEADERS = {"Cache-Control": "no-store"}


class ResumableUploadCreateView(APIView):
    """Start a resumable upload of ``Upload-Length`` bytes into a Group."""

    authentication_classes = BYTE_ROUTE_AUTHENTICATION
    parser_classes = [_RawParser]

    @extend_schema(
        parameters=[
            GROUP_PARAMETER,
            OpenApiParameter(
                "Upload-Length",
                int,
                OpenApiParameter.HEADER,
                required=True,
                description="the Artifact's size in bytes (at most MWP_ARTIFACT_MAX_BYTES)",
            ),
        ],  # fmt: skip
        request=None,
        responses={
            201: OpenApiResponse(description='{"uploadId", "offset": 0, "length", "chunkMax"}'),
            **ERRORS,
            429: OpenApiResponse(
                response=ErrorSerializer,
                description="RATE_LIMITED: the Agent's open uploads or reserved bytes are at their bound "
                "(MWP_ARTIFACT_UPLOAD_MAX_OPEN, MWP_ARTIFACT_UPLOAD_MAX_RESERVED_BYTES); retryAfterMs",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        agent = request_agent(request)
        group = access_upload_group(agent, _query_group(request))
        media_type = _media_type(request)
        length = _header_int(request, "Upload-Length")
        upload_id = create_upload(group, agent, media_type, length)
        return Response(
            {"uploadId": upload_id, "offset": 0, "length": length, "chunkMax": chunk_max()},
            status=201,
            headers={"Location": f"{API}/artifacts/uploads/{upload_id}", "Upload-Offset": "0", **UPLOAD_HEADERS},
        )


class ResumableUploadView(APIView):
    """A resumable upload: its offset (``HEAD``/``GET``), a chunk appended
    (``PATCH``), or the upload abandoned (``DELETE``: its reservation is
    released at once)."""

    authentication_classes = BYTE_ROUTE_AUTHENTICATION
    parser_classes = [_RawParser]

    @extend_schema(
        responses={
            200: OpenApiResponse(
                description='{"uploadId", "offset", "length", "mediaType", "groupId", "chunkMax"}; '
                "headers Upload-Offset, Upload-Length (HEAD: the headers alone)"
            ),
            **ERRORS,
        },
    )
    def get(self, request: Request, uploadId: str) -> Response:  # noqa: N803 (the path's member name)
        meta = load_upload(uploadId, request_agent(request))
        return Response(
            _upload_view(uploadId, meta),
            headers={"Upload-Offset": str(meta["offset"]), "Upload-Length": str(meta["length"]), **UPLOAD_HEADERS},
        )

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "Upload-Offset",
                int,
                OpenApiParameter.HEADER,
                required=True,
                description="the bytes received so far (where this chunk goes)",
            ),
        ],  # fmt: skip
        request={"application/offset+octet-stream": bytes},
        responses={
            204: OpenApiResponse(description="appended and fsynced; header Upload-Offset: the new offset"),
            **ERRORS,
            409: OpenApiResponse(
                response=ErrorSerializer,
                description="REVISION_CONFLICT: wrong Upload-Offset; details.offset and the "
                "Upload-Offset header say where to resume",
            ),
        },  # fmt: skip
    )
    def patch(self, request: Request, uploadId: str) -> Response:  # noqa: N803
        agent = request_agent(request)
        offset = _header_int(request, "Upload-Offset")
        size = _header_int(request, "Content-Length")
        try:
            new_offset = append_chunk(uploadId, agent, offset, cast(BinaryIO, request._request), size)
        except ProtocolError as exc:
            if exc.code != ErrorCode.REVISION_CONFLICT:
                raise
            return Response(exc.as_dict(), status=409, headers={"Upload-Offset": str(exc.details["offset"])})
        return Response(status=204, headers={"Upload-Offset": str(new_offset), **UPLOAD_HEADERS})

    @extend_schema(
        request=None, responses={204: OpenApiResponse(description="the upload and its staged bytes are gone"), **ERRORS}
    )
    def delete(self, request: Request, uploadId: str) -> Response:  # noqa: N803
        cancel_upload(uploadId, request_agent(request))
        return Response(status=204, headers=UPLOAD_HEADERS)


class ResumableUploadCompleteView(APIView):
    """Store a fully received upload under its SHA-256 (and record the Group holding it)."""

    authentication_classes = BYTE_ROUTE_AUTHENTICATION

    @extend_schema(
        parameters=[
            OpenApiParameter("contentHash", str, description="the sha256:<hex> the client expects the bytes to have")
        ],
        request=None,
        responses={
            201: OpenApiResponse(description='{"contentHash", "sizeBytes", "mediaType"}'),
            **ERRORS,
            400: OpenApiResponse(
                response=ErrorSerializer,
                description="INVALID_COMMAND (details.reason artifact_hash_mismatch): the bytes do not hash to"
                " ?contentHash= (the upload is dropped)",
            ),
        },  # fmt: skip
    )
    def post(self, request: Request, uploadId: str) -> Response:  # noqa: N803
        agent = request_agent(request)
        raw = request.query_params.get("contentHash")
        expected = None if raw is None else hex_of(raw, "contentHash")
        meta = load_upload(uploadId, agent)
        group = access_upload_group(agent, meta["group"])  # still an active member
        blob = complete_upload(uploadId, agent, group, expected)
        return Response(_stored(blob), status=201)


def blob_download(request: HttpRequest, blob: Blob) -> StreamingHttpResponse:
    """The response serving ``blob``, for the API's download and the portal's
    (one helper, so both send the same safety headers; issue 16 item 2).

    The hash is checked before the first byte leaves (a streamed response
    cannot take back bytes already sent): INTERNAL_ERROR is raised
    here. Under ASGI the bytes stream from an async iterator: Django would
    collect a synchronous one into a list first (a 1 GiB Artifact in memory).

    A Worker chooses the media type of what it uploads: ``text/html`` or
    ``image/svg+xml`` served inline from the portal's origin would run its
    script with the viewer's session. ``attachment`` makes a browser save
    the bytes instead of rendering them, ``nosniff`` stops it guessing
    another type, and ``sandbox`` puts anything rendered anyway (a browser
    that ignores the disposition, an ``<iframe>``) in an opaque origin with
    scripts off. The file name is the hash alone: nothing the uploader chose
    reaches the header. ``private``: a shared cache must not keep bytes
    served to one authorised viewer.
    """
    if isinstance(request, ASGIRequest):
        check_served(blob.sha256)
        response = StreamingHttpResponse(achunks(blob.sha256), content_type=blob.media_type)
    else:
        response = StreamingHttpResponse(open_verified(blob.sha256), content_type=blob.media_type)
    response["Content-Disposition"] = f'attachment; filename="{blob.sha256}"'
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    response["Cache-Control"] = "private"
    response["Content-Length"] = str(blob.size)
    response["ETag"] = f'"{wire_hash(blob.sha256)}"'
    return response


class ArtifactDownloadView(APIView):
    authentication_classes = BYTE_ROUTE_AUTHENTICATION

    @extend_schema(
        responses={
            200: OpenApiResponse(description="the Artifact's bytes, after their SHA-256 was checked"),
            **ERRORS,
            500: OpenApiResponse(
                response=ErrorSerializer,
                description="INTERNAL_ERROR (details.reason artifact_hash_mismatch): the stored bytes no longer"
                " match their hash",
            ),
        }
    )
    def get(self, request: Request, contentHash: str) -> StreamingHttpResponse:  # noqa: N803
        agent = request_agent(request)
        return blob_download(request._request, access_blob(agent, hex_of(contentHash, "contentHash")))


def _node(artifacts: list[Artifact]) -> list[dict[str, Any]]:
    return [
        {"artifactId": urn(a.artifact_id), "groupId": urn(a.group_id), "workItemId": urn(a.workitem_id),
         "producerId": urn(a.producer_id), "manifestHash": wire_hash(a.manifest_hash), "manifest": a.manifest}
        for a in artifacts
    ]  # fmt: skip


class ArtifactProvenanceView(APIView):
    """The provenance graph around an Artifact (§13.1), within the caller's Groups."""

    @extend_schema(
        parameters=[OpenApiParameter("depth", int, description="how many derivation steps to walk each way (1-50)")],
        responses={
            200: OpenApiResponse(
                description='{"contentHash", "nodes": [{"contentHash", "manifests": [...]}], '
                '"edges": [{"source", "derived"}]}'
            ),
            **ERRORS,
        },
    )
    def get(self, request: Request, contentHash: str) -> Response:  # noqa: N803
        agent = request_agent(request)
        sha256 = hex_of(contentHash, "contentHash")
        access_blob(agent, sha256)
        raw_depth = request.query_params.get("depth", "10")
        if not raw_depth.isdigit() or not 1 <= int(raw_depth) <= 50:
            raise malformed("depth", "must be an integer from 1 to 50")
        groups = member_groups(agent)
        visible = Artifact.objects.filter(group_id__in=groups)
        nodes: dict[str, list[Artifact]] = {}
        edges: set[tuple[str, str]] = set()
        frontier_up, frontier_down = {sha256}, {sha256}
        seen = {sha256}
        for _ in range(int(raw_depth)):
            # Up: the sources named by the manifests of the frontier.
            ups = ArtifactSource.objects.filter(artifact__in=visible.filter(sha256__in=frontier_up))
            new_up = set()
            for source, derived in ups.values_list("source_sha256", "artifact__sha256"):
                edges.add((source, derived))
                new_up.add(source)
            # Down: manifests that name the frontier as a source.
            downs = ArtifactSource.objects.filter(source_sha256__in=frontier_down, artifact__in=visible)
            new_down = set()
            for source, derived in downs.values_list("source_sha256", "artifact__sha256"):
                edges.add((source, derived))
                new_down.add(derived)
            frontier_up, frontier_down = new_up - seen, new_down - seen
            seen |= new_up | new_down
            if not frontier_up and not frontier_down:
                break
        # Every edge between the nodes found (a derived Artifact's other sources too).
        among = ArtifactSource.objects.filter(artifact__in=visible.filter(sha256__in=seen), source_sha256__in=seen)
        edges.update(among.values_list("source_sha256", "artifact__sha256"))
        for artifact in visible.filter(sha256__in=seen).order_by("id"):
            nodes.setdefault(artifact.sha256, []).append(artifact)
        return Response(
            {
                "contentHash": wire_hash(sha256),
                "nodes": [{"contentHash": wire_hash(s), "manifests": _node(nodes.get(s, []))} for s in sorted(seen)],
                "edges": [{"source": wire_hash(s), "derived": wire_hash(d)} for s, d in sorted(edges)],
            }
        )


class WorkItemReviewView(APIView):
    """The review results of a WorkItem's submission: criteria beside their
    Evidence, Artifact integrity and the pipeline's check results (§13.2)."""

    @extend_schema(responses={200: OpenApiResponse(description="artifacts.review.review_summary()"), **ERRORS})
    def get(self, request: Request, workItemId: str) -> Response:  # noqa: N803
        agent = request_agent(request)
        return Response(review_summary(access_workitem(agent, bare(workItemId, "workItemId"))))


def _package_view(package: ContextPackage, forwarded: bool) -> dict[str, Any]:
    return {
        "contextPackageId": urn(package.package),
        "version": package.version,
        "lineageId": urn(package.lineage),
        "groupId": urn(package.group_id),
        "forwarded": forwarded,
        "documentHash": wire_hash(package.document_hash),
        "contextPackage": package.document,
    }


class ContextPackageListView(APIView):
    @extend_schema(
        # Distinct from the single package's GET, which drf-spectacular names alike (check --deploy warns).
        operation_id="groups_context_packages_list",
        responses={200: OpenApiResponse(description='{"contextPackages": [...]}'), **ERRORS},
    )
    def get(self, request: Request, groupId: str) -> Response:  # noqa: N803
        group = access_group(request_agent(request), bare(groupId, "groupId"))
        own = ContextPackage.objects.filter(group=group).order_by("lineage", "version")
        forwarded = ContextPackage.objects.filter(
            id__in=ContextForward.objects.filter(to_group=group).values("package_id")
        ).order_by("lineage", "version")
        return Response(
            {"contextPackages": [_package_view(p, False) for p in own] + [_package_view(p, True) for p in forwarded]}
        )


class ContextPackageView(APIView):
    @extend_schema(
        responses={
            200: OpenApiResponse(
                description='{"contextPackageId", "version", "lineageId", "groupId", "forwarded", "documentHash", '
                '"contextPackage"}'
            ),
            **ERRORS,
        },
    )
    def get(self, request: Request, groupId: str, contextPackageId: str) -> Response:  # noqa: N803
        group = access_group(request_agent(request), bare(groupId, "groupId"))
        package, forwarded = access_context_package(group, bare(contextPackageId, "contextPackageId"))
        return Response(_package_view(package, forwarded))


class ContextPackageEventsView(APIView):
    """The Events a Context Package cites (signed Event documents); only for members of its source Group."""

    @extend_schema(responses={200: OpenApiResponse(description='{"groupId", "events": [...]}'), **ERRORS})
    def get(self, request: Request, groupId: str, contextPackageId: str) -> Response:  # noqa: N803
        agent = request_agent(request)
        group = access_group(agent, bare(groupId, "groupId"))
        package, _ = access_context_package(group, bare(contextPackageId, "contextPackageId"))
        # A forwarded package does not open its source Group's log: the
        # cited Events need a Membership there (§13.3).
        access_group(agent, str(package.group_id))
        limit = 1000
        events = GroupEvent.objects.filter(
            group_id=package.group_id, sequence__gte=package.from_sequence, sequence__lte=package.to_sequence
        ).order_by("sequence")[:limit]
        source = str(package.group_id)
        organization_id = str(Group.objects.values_list("organization_id", flat=True).get(id=source))
        # A redacted Message is cited in its withheld form (§7.4, ``missions.withholding``).
        return Response({"groupId": urn(package.group_id), "events": served_documents(source, organization_id, events)})
