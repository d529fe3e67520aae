"""What a client needs to build and check documents (DESIGN §5): keys, Memberships, the catalogue.

- ``GET /api/v0.1/keys/{keyId}``: a Registry key binding, public, so that
  anyone can verify a signature (§6.4): ``{keyId, principal, algorithm,
  publicKey, validFrom, validUntil?, revokedAt?}``, the boundaries being the
  effective (earliest) ones of the key's append-only validity history.
- ``GET /api/v0.1/memberships``: the caller's Membership documents
  (``membership.schema.json``).
- ``GET /api/v0.1/catalogue``: every Command and Event kind with its payload
  schema (``mwportal.protocol.catalogue.as_data()``), public.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.values import parse_timestamp

from .. import serializers as s
from ..auth import request_agent
from ..models import SigningKey, SigningKeyValidity
from ..views import ERRORS
from .memberships import administrative_group_id, membership_documents
from .openapi import kernel


def earliest(stamps: list[str]) -> str | None:
    """The earliest of RFC 3339 texts, as written (§6.4: the earliest retained boundary is effective)."""
    return min(stamps, key=parse_timestamp) if stamps else None


def key_binding(row: SigningKey) -> dict[str, Any]:
    history = list(SigningKeyValidity.objects.filter(key=row).values_list("valid_until", "revoked_at"))
    binding: dict[str, Any] = {
        "keyId": row.key_id,
        "principal": {"type": row.principal_type, "id": row.principal_id},
        "algorithm": row.algorithm,
        "publicKey": row.public_key,
        "validFrom": row.valid_from,
    }
    valid_until = earliest([until for until, _ in history if until is not None])
    revoked_at = earliest([revoked for _, revoked in history if revoked is not None])
    if valid_until is not None:
        binding["validUntil"] = valid_until
    if revoked_at is not None:
        binding["revokedAt"] = revoked_at
    return binding


class KeyView(APIView):
    """A key binding of the Registry: what verifies the signatures made with it."""

    authentication_classes: list[Any] = []

    @extend_schema(
        parameters=[OpenApiParameter("keyId", OpenApiTypes.STR, OpenApiParameter.PATH, description="the key ID")],
        responses={200: s.KeyBindingSerializer, **ERRORS},
    )
    def get(self, request: Request, keyId: str) -> Response:  # noqa: N803 (the path's protocol name)
        # A key ID is never reused within an Organization, and the portal
        # mints them as urn:uuid: URIs, so one names one binding. One held by
        # two Organizations is evidence no verification trusts (it fails
        # closed, missions.authority.SignerRegistry), so none is served.
        rows = list(SigningKey.objects.filter(key_id=keyId)[:2])
        if len(rows) != 1:
            raise ProtocolError(ErrorCode.GROUP_NOT_FOUND, "no such key in the Registry")
        (row,) = rows
        return Response(key_binding(row))


class MembershipsView(APIView):
    """The calling Principal's Memberships, as Membership documents."""

    @extend_schema(
        responses={
            200: OpenApiResponse(
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["memberships"],
                    "properties": {
                        "memberships": {"type": "array", "items": kernel("membership")},
                        "administrativeGroupId": {
                            "type": "string",
                            "description": "urn:uuid: of the Organization's administrative Group, which every "
                            "Principal of the Organization reads (no Mission's Group, so no Membership document)",
                        },
                    },
                }
            ),
            **ERRORS,
        }
    )
    def get(self, request: Request) -> Response:
        principal = request_agent(request)
        body: dict[str, Any] = {"memberships": membership_documents(principal)}
        admin = administrative_group_id(principal)
        if admin is not None:
            body["administrativeGroupId"] = admin
        return Response(body)


class CatalogueView(APIView):
    """Every Command and Event kind the Authority speaks, with its JSON Schema 2020-12 payload schema."""

    authentication_classes: list[Any] = []

    @extend_schema(
        responses={
            200: OpenApiResponse(
                {
                    "type": "object",
                    "required": ["commands", "events"],
                    "properties": {
                        "commands": {"type": "object", "description": "kind -> payloadSchema, issuers, epochs, ..."},
                        "events": {"type": "object", "description": "kind -> payloadSchema, ..."},
                    },
                },
                description="the catalogue (mwp.command-payload.* and mwp.event-payload.* are the same schemas)",
            ),
            **ERRORS,
        }
    )
    def get(self, request: Request) -> Response:
        from mwportal.protocol import catalogue  # compiled on first use, not at start-up

        return Response(catalogue.as_data())
