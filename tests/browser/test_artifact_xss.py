"""Stored XSS through Worker uploads, in a real browser (issue 16 item 2).

The review's chain: a Worker uploads ``text/html`` (or SVG, or XHTML) whose
script fetches the MissionOwner's Approvals page and submits its Grant form;
the owner, signed in to the portal, opens a link to the Artifact; the
download view served it inline in the portal's origin, so the script ran
with the owner's session and granted an execution Approval.

Here the same bytes go up through the real API of a real daphne, and the
owner's headless Chromium opens both links an attacker could send: the
portal's download (now an attachment: the browser saves it and renders
nothing) and the API's (now bearer-only: the cookie fetches a 401, no
bytes). The script leaves a mark in the portal origin's ``localStorage``
and grants the Approval when it runs; neither happens. Without the fix (and
with the page-wide CSP middleware off, which would also block this inline
script) the API link rendered all three payloads and the Approval was
granted as the owner, once per media type.
"""

from __future__ import annotations

import contextlib
import json
import urllib.request

import pytest
from playwright.sync_api import Browser
from playwright.sync_api import Error as PlaywrightError

from missions.models import Approval, GroupEvent
from tests.browser.conftest import base_url, shot, sign_in
from tests.delivery.conftest import Daphne
from tests.portal.conftest import Person, approval_contract
from tests.workitems.flow import Flow

pytestmark = pytest.mark.django_db(transaction=True)

# Runs as whoever renders it: marks the origin, then grants the first
# pending Approval with the viewer's session and CSRF token.
ATTACK = """
localStorage.setItem("xss", "ran"); document.title = "xss ran";
fetch("/approvals/", {credentials: "same-origin"}).then(r => r.text()).then(html => {
  const form = new DOMParser().parseFromString(html, "text/html").querySelector('form[action$="/grant"]');
  return fetch(form.getAttribute("action"), {method: "POST", body: new FormData(form), credentials: "same-origin"});
}).then(() => localStorage.setItem("xss", "granted"));
"""
PAYLOADS = {
    "text/html": f"<!doctype html><html><body><h1 id=pwned>pwned</h1><script>{ATTACK}</script></body></html>",
    "image/svg+xml": f'<svg xmlns="http://www.w3.org/2000/svg"><script><![CDATA[{ATTACK}]]></script></svg>',
    "application/xhtml+xml": (
        f'<html xmlns="http://www.w3.org/1999/xhtml"><body><script>//<![CDATA[\n{ATTACK}\n//]]></script></body></html>'
    ),
}


def worker_uploads(server: Daphne, flow: Flow, media_type: str) -> str:
    """The Worker's upload through daphne's REST API, as its runtime does it."""
    request = urllib.request.Request(  # noqa: S310 (http to our own daphne)
        f"{base_url(server)}/api/v0.1/artifacts?groupId=urn:uuid:{flow.group}",
        data=PAYLOADS[media_type].encode(),
        headers={"Content-Type": media_type, "Authorization": f"Bearer {flow.worker.extra['token']}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (http to our own daphne)
        assert response.status == 201
        return str(json.loads(response.read())["contentHash"]).removeprefix("sha256:")


def assert_nothing_ran(page: object, flow: Flow, item: str, server: Daphne) -> None:
    page.goto(f"{base_url(server)}/approvals/")  # type: ignore[attr-defined]
    assert page.evaluate("localStorage.getItem('xss')") is None  # type: ignore[attr-defined]
    # The item still waits for its Approval: its Grant form is still there.
    assert page.locator(f"#approval-{item} button[name=grant]").count() == 1  # type: ignore[attr-defined]
    assert not GroupEvent.objects.filter(group_id=flow.group, type="approval.execution.granted").exists()
    assert not Approval.objects.filter(subject_id=item).exists()


@pytest.mark.parametrize("media_type", list(PAYLOADS))
def test_it_downloads_a_hostile_artifact_instead_of_running_it_as_the_owner(
    server: Daphne, browser: Browser, flow: Flow, pat: Person, media_type: str
) -> None:
    item = flow.authorize(approval_contract())
    flow.offer(item)
    flow.accept(item)  # queued: waits for the MissionOwner's execution Approval
    sha = worker_uploads(server, flow, media_type)

    owner = sign_in(browser, server, "pat")
    link = f"{base_url(server)}/missions/{flow.group}/artifacts/{sha}"
    # A download is not a page: Chromium aborts the navigation itself.
    with owner.expect_download(timeout=10_000) as downloading, contextlib.suppress(PlaywrightError):
        owner.goto(link)
    download = downloading.value
    assert download.suggested_filename == sha
    assert download.path().read_bytes() == PAYLOADS[media_type].encode()
    served = owner.context.request.get(link)  # the owner's cookies, the same response
    assert served.headers["content-disposition"] == f'attachment; filename="{sha}"'
    assert served.headers["x-content-type-options"] == "nosniff"
    assert served.headers["content-security-policy"].startswith("sandbox")
    assert_nothing_ran(owner, flow, item, server)

    # The API's link: the session cookie opens nothing there.
    answer = owner.goto(f"{base_url(server)}/api/v0.1/artifacts/sha256:{sha}")
    assert owner.locator("#pwned").count() == 0 and owner.title() != "xss ran"
    shot(owner, f"artifact-xss-{media_type.replace('/', '-')}")
    assert answer is not None and answer.status == 401
    assert "AUTH_REQUIRED" in answer.text() and PAYLOADS[media_type] not in answer.text()
    assert_nothing_ran(owner, flow, item, server)
