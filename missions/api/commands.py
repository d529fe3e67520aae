"""``POST /api/v0.1/commands``: a signed Command document in, its receipt out (DESIGN §5, PROTOCOL §15.1).

No bearer token: the Command's signature and epochs authenticate it, and
``accept_document`` verifies the raw bytes in the six stages of §6.4 before
anything else, so a malformed document gets its stage's error whoever sends it.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import serializers as s
from ..authority import accept_document
from ..views import BODY_ERRORS, read_body, refuse_nul
from .openapi import COMMAND_DOCUMENT, ref


class CommandsView(APIView):
    """Submit one signed Command document; answers with its receipt."""

    authentication_classes: list[Any] = []

    @extend_schema(
        request={"application/json": ref(COMMAND_DOCUMENT)},
        responses={
            201: OpenApiResponse(s.ReceiptSerializer, description="accepted now: its Events were appended"),
            200: OpenApiResponse(
                s.ReceiptSerializer,
                description="an unchanged retry of an accepted Command: the stored receipt, replayed (MWP-EVT-003)",
            ),
            **BODY_ERRORS,
        },
    )
    def post(self, request: Request) -> Response:
        raw = read_body(request)
        refuse_nul(raw)
        receipt = accept_document(raw)
        return Response(receipt, status=200 if receipt.get("replayed") else 201)
