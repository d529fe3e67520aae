"""``GET /api/v1/schema/work-contract.json``: the Work Contract JSON Schema."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from .contract import CONTRACT_SCHEMA


@require_GET
def work_contract_schema(request: HttpRequest) -> JsonResponse:
    response = JsonResponse(CONTRACT_SCHEMA)
    response["Content-Type"] = "application/schema+json"
    return response
