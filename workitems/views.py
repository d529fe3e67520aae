"""The Work Contract's JSON Schema (``work-contract.schema.json``, the kernel's), served as is."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from .contract import contract_schema


@require_GET
def work_contract_schema(request: HttpRequest) -> JsonResponse:
    response = JsonResponse(contract_schema())
    response["Content-Type"] = "application/schema+json"
    return response
