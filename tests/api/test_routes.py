"""The REST binding lives under ``/api/v0.1/`` alone (issue 18 item 8: no private dialect left), and
every answer under ``/api/`` is the normative error document (§19) with the HTTP binding's status: an
unknown path is 404, a wrong method 405, both ``PROTOCOL_VIOLATION``; the portal's pages keep HTML."""

from __future__ import annotations

import re
import uuid

import pytest

from tests.api.support import error_of, http

OLD = [
    "/api/v1/sessions",
    "/api/v1/commands",
    f"/api/v1/groups/{uuid.uuid4()}/events",
    "/api/v1/memberships",
    "/api/v1/server-key",
    "/api/v1/schema/",
    f"/api/v1/artifacts/{'ab' * 32}",
    "/ws/v1/agent",
]


@pytest.mark.parametrize("path", OLD)
@pytest.mark.parametrize("method", ["get", "post"])
def test_the_version_1_routes_are_gone_spec_17(db: None, path: str, method: str) -> None:
    response = getattr(http(), method)(path)
    assert response.status_code == 404, path
    if path.startswith("/api/"):
        error = error_of(response, 404, "PROTOCOL_VIOLATION")
        assert error["details"] == {"reason": "no_route"}


@pytest.mark.parametrize("path", ["/api/v0.1/no/such/route", "/api/v0.1/", "/api/", "/api/v0.2/commands"])
def test_an_unknown_api_path_is_the_404_error_document(db: None, path: str) -> None:
    error_of(http().get(path), 404, "PROTOCOL_VIOLATION")


def operations() -> dict[str, set[str]]:
    from missions.api.openapi import openapi_document

    paths = openapi_document()["paths"]
    return {path: {m for m in item if m in {"get", "post", "put", "patch", "delete"}} for path, item in paths.items()}


OPERATIONS = operations()


@pytest.mark.parametrize("path", sorted(OPERATIONS))
def test_every_route_answers_a_wrong_method_with_the_405_error_document(db: None, path: str) -> None:
    wrong = next(m for m in ("put", "patch", "delete", "post", "get") if m not in OPERATIONS[path])
    url = re.sub(
        r"\{(\w+)\}", lambda m: "1" if m.group(1) == "sequence" else m.group(1), path
    )  # the method is refused first
    response = getattr(http(), wrong)(url)
    error_of(response, 405, "PROTOCOL_VIOLATION")
    assert response["Allow"], response.headers


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_the_work_contract_schema_route_answers_a_wrong_method_with_the_error_document(db: None, method: str) -> None:
    response = getattr(http(), method)("/api/v0.1/schema/work-contract.json")
    error_of(response, 405, "PROTOCOL_VIOLATION")
    assert response["Allow"] == "GET"


def test_a_portal_path_keeps_the_portal_404_page(db: None) -> None:
    page = http().get("/no/such/page/")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")
