"""``GET /api/v0.1/schema/`` (DESIGN §5): the REST binding as an OpenAPI 3.1 document that embeds the
kernel's JSON Schemas and every catalogue payload schema under their ``$id``, so that any client can
build and check what it sends (§15.1), and names the normative error document for every refusal (§19)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from jsonschema_path import SchemaPath
from openapi_spec_validator.validation import OpenAPIV31SpecValidator

from mwportal.protocol import catalogue, schemas
from tests.api.support import SCHEMA, http, show

API = "/api/v0.1"
ROUTES = {
    f"{API}/sessions/challenge": "post",
    f"{API}/sessions": "post",
    f"{API}/commands": "post",
    f"{API}/groups/{{groupId}}/events": "get",
    f"{API}/groups/{{groupId}}/snapshots/{{sequence}}": "get",
    f"{API}/keys/{{keyId}}": "get",
    f"{API}/agents/{{agentId}}/card": "get",
    f"{API}/memberships": "get",
    f"{API}/catalogue": "get",
    f"{API}/policy-log": "get",
}


@pytest.fixture
def spec(db: None) -> dict[str, Any]:
    response = http().get(SCHEMA, {"format": "json"})
    assert response.status_code == 200, show(response)
    return response.json()  # type: ignore[no-any-return]


def components(spec: dict[str, Any]) -> dict[str, Any]:
    return spec["components"]["schemas"]  # type: ignore[no-any-return]


def by_id(spec: dict[str, Any]) -> dict[str, Any]:
    return {c["$id"]: c for c in components(spec).values() if isinstance(c, dict) and "$id" in c}


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def pointer(spec: dict[str, Any], ref: str) -> Any:
    node: Any = spec
    for part in ref.removeprefix("#/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def test_it_is_a_valid_openapi_3_1_document_resolving_by_id(spec: dict[str, Any]) -> None:
    assert spec["openapi"] == "3.1.0"
    embedded = by_id(spec)
    # References between the embedded schemas are by $id; the validator is
    # given the document's own copies instead of fetching those URIs.
    OpenAPIV31SpecValidator(SchemaPath.from_dict(spec, handlers={"https": embedded.__getitem__})).validate()


def test_every_reference_resolves_inside_the_document(spec: dict[str, Any]) -> None:
    embedded = by_id(spec)
    for ref in set(refs(spec)):
        if ref.startswith("#/"):
            pointer(spec, ref)
            continue
        base, _, fragment = ref.partition("#")
        assert base in embedded, ref
        if fragment:
            pointer(embedded[base], "#" + fragment)


def test_it_answers_the_openapi_json_media_type_and_the_same_yaml(db: None, spec: dict[str, Any]) -> None:
    response = http().get(SCHEMA, HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response["Content-Type"].startswith("application/vnd.oai.openapi+json")
    assert yaml.safe_load(http().get(SCHEMA).content) == spec == response.json()


def test_the_document_built_without_a_request_is_the_served_one(spec: dict[str, Any]) -> None:
    from missions.api.openapi import openapi_document

    assert json.loads(json.dumps(openapi_document(), default=str)) == spec


def test_it_documents_every_route_of_the_binding(spec: dict[str, Any]) -> None:
    for path, method in ROUTES.items():
        assert method in spec["paths"].get(path, {}), path
    assert not [path for path in spec["paths"] if not path.startswith(f"{API}/")]


def test_it_embeds_every_kernel_schema_under_its_id(spec: dict[str, Any]) -> None:
    embedded = by_id(spec)
    for name in (schemas.COMMON, *schemas.NAMES):
        assert schemas.json_schema(name)["$id"] in embedded, name


def test_every_command_kinds_payload_schema_is_in_the_document_spec_15_1(spec: dict[str, Any]) -> None:
    embedded = by_id(spec)
    data = catalogue.as_data()
    for kind in catalogue.COMMAND_KINDS:
        schema = data["commands"][kind]["payloadSchema"]
        served = embedded[schema["$id"]]
        assert served["properties"].keys() == schema["properties"].keys(), kind
        assert served.get("required") == schema.get("required"), kind
    # CommandDocument ties each kind to its payload schema.
    document = components(spec)["CommandDocument"]
    kinds = {option["properties"]["kind"]["const"]: option["properties"]["payload"] for option in document["oneOf"]}
    assert set(kinds) == set(catalogue.COMMAND_KINDS)
    for kind, payload in kinds.items():
        assert pointer(spec, payload["$ref"])["$id"] == data["commands"][kind]["payloadSchema"]["$id"]
    request = spec["paths"][f"{API}/commands"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert request == {"$ref": "#/components/schemas/CommandDocument"}


def test_every_event_kinds_payload_schema_is_in_the_document_spec_15_2(spec: dict[str, Any]) -> None:
    embedded = by_id(spec)
    data = catalogue.as_data()
    for kind in catalogue.EVENT_KINDS:
        assert data["events"][kind]["payloadSchema"]["$id"] in embedded, kind


def body(spec: dict[str, Any], path: str, method: str, status: str) -> Any:
    return spec["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]


def test_the_hello_routes_take_and_answer_the_hello_frames_spec_6_3(spec: dict[str, Any]) -> None:
    frame = "#/components/schemas/mwp.websocket-frame/$defs/"
    challenge, sessions = f"{API}/sessions/challenge", f"{API}/sessions"
    assert spec["paths"][challenge]["post"]["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": frame + "helloClientInit"
    }
    assert body(spec, challenge, "post", "200") == {"$ref": frame + "helloServerChallenge"}
    assert spec["paths"][sessions]["post"]["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": frame + "helloClientResponse"
    }
    assert body(spec, sessions, "post", "201") == {"$ref": frame + "helloServerAccept"}


def test_the_event_page_holds_event_documents_spec_15_2(spec: dict[str, Any]) -> None:
    page = body(spec, f"{API}/groups/{{groupId}}/events", "get", "200")
    assert set(page["properties"]) == {"events", "headSequence"}
    assert page["properties"]["events"]["items"] == {"$ref": "#/components/schemas/mwp.event"}
    parameters = {p["name"]: p for p in spec["paths"][f"{API}/groups/{{groupId}}/events"]["get"]["parameters"]}
    assert parameters["groupId"]["in"] == "path"
    assert {parameters[n]["in"] for n in ("afterSequence", "limit")} == {"query"}


def test_every_refusal_is_the_normative_error_document_spec_19(spec: dict[str, Any]) -> None:
    assert components(spec)["Error"] == {"$ref": "#/components/schemas/mwp.error"}
    for path, method in ROUTES.items():
        responses = spec["paths"][path][method]["responses"]
        errors = {status for status in responses if status.startswith(("4", "5"))}
        assert {"400", "401", "404", "500"} <= errors, path
        for status in errors:
            assert body(spec, path, method, status) == {"$ref": "#/components/schemas/Error"}, (path, status)
        if method == "post":
            assert {"413", "415"} <= errors, path


def test_it_documents_bearer_authentication_for_the_reads(spec: dict[str, Any]) -> None:
    schemes = spec["components"]["securitySchemes"]
    bearer = {name for name, s in schemes.items() if s.get("type") == "http" and s.get("scheme") == "bearer"}
    assert bearer, schemes
    for path in (f"{API}/groups/{{groupId}}/events", f"{API}/memberships"):
        assert any(set(requirement) & bearer for requirement in spec["paths"][path]["get"]["security"]), path
