"""A Content-Security-Policy on every portal page (issue 16 item 2).

The policy allows scripts, styles and connections from the portal's origin
only (plus a per-request script nonce), no plugins, no ``<base>``, no
framing. The pages it covers carry no inline script, style attribute or
event handler, so the policy blocks nothing the portal needs
(``test_csp_browser.py`` shows that in Chromium).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import include, path

from portal import visuals
from tests.delivery.conftest import ROOT
from tests.portal.conftest import Person, approval_contract
from tests.workitems.flow import Flow

pytestmark = pytest.mark.django_db


def directives(response: Any) -> dict[str, str]:
    header = response.headers["Content-Security-Policy"]
    return {part.split()[0]: part.partition(" ")[2] for part in (p.strip() for p in header.split(";")) if part}


def assert_portal_policy(response: Any) -> None:
    d = directives(response)
    assert d["default-src"] == "'self'"
    assert re.fullmatch(r"'self' 'nonce-[A-Za-z0-9_-]{22}'", d["script-src"]), d
    assert d["style-src"] == "'self'"  # no 'unsafe-inline'
    assert d["object-src"] == "'none'"
    assert d["base-uri"] == "'none'"
    assert d["frame-ancestors"] == "'none'"
    assert d["form-action"] == "'self'"
    assert d["connect-src"] == "'self' ws://testserver"


def assert_no_inline_code(html: str) -> None:
    """What the policy would block: style attributes, event handlers, inline
    scripts (JSON data blocks are never executed, so they are allowed)."""
    assert not re.search(r"<[^>]*\sstyle=", html), re.search(r"<[^>]*\sstyle=[^>]*>", html)
    assert not re.search(r"<[^>]*\son[a-z]+=", html)
    assert "javascript:" not in html
    assert "<style" not in html
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert "src=" in tag or 'type="application/json"' in tag, tag


def test_it_sets_the_policy_on_every_portal_page(flow: Flow, pat: Person) -> None:
    """issue 16 item 2: sign-in, Missions, a Mission, Approvals, policy, review, final, errors."""
    item = flow.authorize(approval_contract())
    flow.offer(item)
    flow.accept(item)
    done = flow.drive_to("submitted")
    pages = ["/", f"/missions/{flow.group}/", f"/missions/{flow.group}/live", "/approvals/", "/policy/",
             f"/missions/{flow.group}/workitems/{item}/", f"/missions/{flow.group}/workitems/{done}/",
             f"/missions/{flow.group}/final/"]  # fmt: skip
    for url in pages:
        response = pat.client.get(url)
        assert response.status_code in (200, 403), (url, response.status_code)
        assert_portal_policy(response)
        if response["Content-Type"].startswith("text/html"):
            assert_no_inline_code(response.content.decode())
        else:  # the live refresh: HTML fragments that portal.js puts in place with innerHTML
            for fragment in response.json().values():
                assert_no_inline_code(fragment)
    anonymous = Client()
    for url, status in (("/login/", 200), ("/no/such/page", 404), ("/admin/login/", 200)):
        response = anonymous.get(url)
        assert response.status_code == status, url
        assert_portal_policy(response)
    assert_no_inline_code(anonymous.get("/login/").content.decode())


def test_it_names_the_secure_websocket_origin_behind_tls(pat: Person) -> None:
    response = pat.client.get("/", secure=True)
    assert directives(response)["connect-src"] == "'self' wss://testserver"


def test_it_gives_each_response_its_own_nonce(pat: Person) -> None:
    first, second = (directives(pat.client.get("/"))["script-src"] for _ in range(2))
    assert first != second


def sandboxed(request: HttpRequest) -> HttpResponse:
    response = HttpResponse(b"<svg onload=alert(1)>", content_type="image/svg+xml")
    response["Content-Security-Policy"] = "sandbox"
    return response


urlpatterns = [path("sandboxed", sandboxed), path("", include("mwportal.urls"))]


@pytest.mark.urls("tests.deploy.test_csp")
def test_it_leaves_a_views_own_policy_alone() -> None:
    """The Artifact byte-serving views send ``sandbox``; the portal's default does not replace it."""
    response = Client().get("/sandboxed")
    assert response.headers["Content-Security-Policy"] == "sandbox"


def test_it_has_a_class_for_every_colour_the_pages_name() -> None:
    """No style attributes: a colour is the class c-<hex> (static/portal/portal.css)."""
    css = (ROOT / "static" / "portal" / "portal.css").read_text()
    colours = {*visuals.STATE_COLOURS.values(), *visuals.SERIES_COLOURS, "#94a3b8", "#f59e0b"}
    for colour in colours:
        hexa = colour.lstrip("#").lower()
        assert f'.c-{hexa}, [data-c="{hexa}"] {{ --c: #{hexa}; }}' in css, colour


def test_it_keeps_templates_free_of_inline_code() -> None:
    """Every template, error pages included (the test above renders most of them)."""
    for template in Path(ROOT / "templates").rglob("*.html"):
        text = template.read_text()
        assert " style=" not in text, template
        assert not re.search(r"\son[a-z]+=", text), template
        for tag in re.findall(r"<script\b[^>]*>", text):
            assert "src=" in tag or "nonce=" in tag, (template, tag)
