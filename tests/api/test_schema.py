"""GET /api/v1/schema/ (DESIGN §4): a valid OpenAPI 3 document of the REST API."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from openapi_spec_validator import validate

from tests.api.support import http, show

SCHEMA = "/api/v1/schema/"
SESSIONS = "/api/v1/sessions"
COMMANDS = "/api/v1/commands"
EVENTS = "/api/v1/groups/{group_id}/events"


@pytest.fixture
def spec(db: None) -> dict[str, Any]:
    response = http().get(SCHEMA, {"format": "json"})
    assert response.status_code == 200, show(response)
    return response.json()  # type: ignore[no-any-return]


def resolve(spec: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        node = spec["components"]["schemas"][name]
    return node


def body_schema(spec: dict[str, Any], operation: dict[str, Any], status: str) -> dict[str, Any]:
    content = operation["responses"][status]["content"]
    return resolve(spec, content["application/json"]["schema"])


def test_it_is_a_valid_openapi_3_document(spec: dict[str, Any]) -> None:
    assert spec["openapi"].startswith("3.")
    validate(spec)


def test_it_answers_the_openapi_json_media_type(db: None) -> None:
    response = http().get(SCHEMA, HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200, show(response)
    assert response["Content-Type"].startswith("application/vnd.oai.openapi+json")
    validate(response.json())


def test_its_default_yaml_form_is_the_same_document(spec: dict[str, Any]) -> None:
    response = http().get(SCHEMA)
    assert response.status_code == 200, show(response)
    assert yaml.safe_load(response.content) == spec


def test_it_documents_the_three_endpoints(spec: dict[str, Any]) -> None:
    paths = spec["paths"]
    assert "post" in paths[SESSIONS]
    assert "post" in paths[COMMANDS]
    assert "get" in paths[EVENTS]


def test_it_documents_the_session_request_and_answer(spec: dict[str, Any]) -> None:
    operation = spec["paths"][SESSIONS]["post"]
    request = resolve(spec, operation["requestBody"]["content"]["application/json"]["schema"])
    assert set(request["properties"]) == {"agent", "issued_at", "nonce", "signature"}
    assert set(request["required"]) == {"agent", "issued_at", "nonce", "signature"}
    assert set(body_schema(spec, operation, "201")["properties"]) == {"agent", "token", "session_epoch"}
    assert {"400", "401"} <= set(operation["responses"])


def test_it_documents_the_envelope_and_the_receipt(spec: dict[str, Any]) -> None:
    operation = spec["paths"][COMMANDS]["post"]
    envelope = resolve(spec, operation["requestBody"]["content"]["application/json"]["schema"])
    assert set(envelope["properties"]) == {
        "type",
        "action_id",
        "actor",
        "group",
        "target",
        "session_epoch",
        "membership_epoch",
        "ownership_epoch",
        "lease_id",
        "issued_at",
        "body",
        "extensions",
        "signature",
    }
    assert set(envelope["required"]) == {
        "type",
        "action_id",
        "actor",
        "group",
        "session_epoch",
        "issued_at",
        "body",
        "signature",
    }
    for status in ("200", "201"):
        receipt = body_schema(spec, operation, status)
        assert {"action_id", "actor", "group", "status", "events", "aggregate", "accepted_at", "replayed"} <= set(
            receipt["properties"]
        )
    assert {"400", "401", "403", "404", "409", "422"} <= set(operation["responses"])


def test_it_documents_the_event_page(spec: dict[str, Any]) -> None:
    operation = spec["paths"][EVENTS]["get"]
    parameters = {p["name"]: p for p in operation["parameters"]}
    assert parameters["group_id"]["in"] == "path"
    for name in ("after", "limit"):
        assert parameters[name]["in"] == "query"
        assert parameters[name]["schema"]["type"] == "integer"
    page = body_schema(spec, operation, "200")
    assert set(page["properties"]) == {"events", "head"}
    event = resolve(spec, page["properties"]["events"]["items"])
    assert set(event["properties"]) == {
        "event_id",
        "group",
        "sequence",
        "type",
        "aggregate",
        "actor",
        "action_id",
        "occurred_at",
        "body",
        "prev_hash",
        "hash",
    }
    assert set(resolve(spec, event["properties"]["aggregate"])["properties"]) == {"kind", "id", "revision"}
    assert {"400", "401", "403", "404"} <= set(operation["responses"])


def test_it_documents_the_error_shape(spec: dict[str, Any]) -> None:
    # The bare normative error document (§19), every member of it, no wrapper.
    error = body_schema(spec, spec["paths"][COMMANDS]["post"], "400")
    assert set(error["properties"]) == {
        *("code", "message", "retryable", "occurredAt", "fatal", "relatedFrameId", "relatedActionId", "groupId"),
        *("expectedRevision", "currentRevision", "retryAfterMs", "snapshotArtifactHash", "details"),
    }
    assert set(error["required"]) == {"code", "message", "retryable", "occurredAt"}
    assert set(resolve(spec, error["properties"]["code"])["enum"]) == {
        *("UNSUPPORTED_VERSION", "AUTH_REQUIRED", "AUTH_INVALID_SIGNATURE", "AUTH_STALE_SESSION"),
        *("AUTH_STALE_COORDINATOR", "AUTH_FORBIDDEN", "GROUP_NOT_FOUND", "MEMBERSHIP_REQUIRED", "MEMBERSHIP_STALE"),
        *("SCHEMA_VALIDATION_FAILED", "INVALID_COMMAND", "INVALID_STATE_TRANSITION", "REVISION_CONFLICT"),
        *("ACTION_ID_COLLISION", "UNKNOWN_CRITICAL_EXTENSION", "WORK_CONTRACT_INCOMPLETE", "WORK_OFFER_EXPIRED"),
        *("WORK_ALREADY_OWNED", "WORK_LEASE_EXPIRED", "WORK_STALE_OWNERSHIP", "APPROVAL_REQUIRED", "BUDGET_EXCEEDED"),
        *("RATE_LIMITED", "BACKPRESSURE", "CURSOR_TOO_OLD", "PROTOCOL_VIOLATION", "INTERNAL_ERROR"),
    }


def test_it_documents_bearer_authentication_for_reading_events(spec: dict[str, Any]) -> None:
    # DESIGN §4: reads take "Authorization: Bearer <token>". Without an
    # OpenApiAuthenticationExtension for BearerTokenAuthentication the schema
    # lists only the Django session cookie.
    schemes = spec.get("components", {}).get("securitySchemes", {})
    bearer_names = {
        name for name, s in schemes.items() if s.get("type") == "http" and s.get("scheme", "").lower() == "bearer"
    }
    assert bearer_names, schemes
    security = spec["paths"][EVENTS]["get"].get("security", [])
    assert any(set(requirement) & bearer_names for requirement in security), security
