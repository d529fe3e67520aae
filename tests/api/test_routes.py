"""The REST binding lives under ``/api/v0.1/`` alone (issue 18 item 8: no private dialect left), and
every answer under ``/api/`` is the normative error document (§19) with the HTTP binding's status: an
unknown path is 404, a wrong method 405, both ``PROTOCOL_VIOLATION``; the portal's pages keep HTML."""

from __future__ import annotations

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


def test_a_portal_path_keeps_the_portal_404_page(db: None) -> None:
    page = http().get("/no/such/page/")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")
