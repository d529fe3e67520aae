"""How Artifact bytes are served (issue 16 item 2): never rendered in the portal's origin.

A Worker chooses the media type of what it uploads. Both byte-serving routes
(the API's ``GET /api/v0.1/artifacts/{contentHash}`` and the portal's
``/missions/<group>/artifacts/<sha>``) answer with an attachment, ``nosniff``
and ``Content-Security-Policy: sandbox``; the API's byte routes take a
bearer token only, so the portal's session cookie never fetches bytes there.
The browser reproduction is ``tests/browser/test_artifact_xss.py``.
"""

from __future__ import annotations

import pytest

from artifacts.models import Blob
from mwportal.protocol.ids import urn
from tests.api.support import error_of
from tests.artifacts.conftest import Artifacts
from tests.portal.conftest import Person, grant, make_person

PAGE = b"<html><body><script>document.title = 'ran'</script></body></html>"
SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
HOSTILE = [("text/html", PAGE), ("image/svg+xml", SVG), ("application/xhtml+xml", PAGE)]


def assert_attachment(response: object, sha: str) -> None:
    headers = response.headers  # type: ignore[attr-defined]
    # The file name is the hash's hex digits alone: nothing the uploader chose reaches the header.
    assert headers["Content-Disposition"] == f'attachment; filename="{sha.removeprefix("sha256:")}"'
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Content-Security-Policy"].split(";")[0].strip() == "sandbox"
    assert "private" in headers["Cache-Control"]


@pytest.fixture
def member(art: Artifacts) -> Person:
    """Pam, a person observing the Mission, signed in to the portal (session cookie)."""
    pam = make_person("pam", ["mission_owner"])
    grant(art.owner, art.group, pam, ["observer"])
    return pam


@pytest.mark.parametrize(("media_type", "content"), HOSTILE)
def test_it_serves_hostile_media_types_as_sandboxed_attachments(
    art: Artifacts, member: Person, media_type: str, content: bytes
) -> None:
    """Issue 16 item 2: both routes, for every type a browser would run."""
    sha = art.upload(content, media_type)
    api = art.download(sha, art.coordinator)
    assert api.status_code == 200
    assert_attachment(api, sha)
    assert b"".join(api.streaming_content) == content
    portal = member.client.get(f"/missions/{art.group}/artifacts/{sha.removeprefix('sha256:')}")
    assert portal.status_code == 200
    assert_attachment(portal, sha)
    assert b"".join(portal.streaming_content) == content  # type: ignore[attr-defined]


def test_it_never_serves_api_bytes_by_the_portal_session_cookie(art: Artifacts, member: Person) -> None:
    """Issue 16 item 2: a link to the API sent to a signed-in member fetches nothing."""
    sha = art.upload(PAGE, "text/html")
    response = member.client.get(f"/api/v0.1/artifacts/{sha}")
    error_of(response, 401, "AUTH_REQUIRED")
    assert PAGE not in response.content
    # The other byte routes take no cookie either (no upload as the person).
    error_of(
        member.client.post(f"/api/v0.1/artifacts?groupId={urn(art.group)}", data=PAGE, content_type="text/html"),
        401,
        "AUTH_REQUIRED",
    )
    error_of(
        member.client.post(f"/api/v0.1/artifacts/uploads?groupId={urn(art.group)}", content_type="text/html",
                           HTTP_UPLOAD_LENGTH="10"),
        401, "AUTH_REQUIRED",
    )  # fmt: skip
    assert Blob.objects.count() == 1
    # JSON reads keep the portal session (the review page's data).
    assert member.client.get(f"/api/v0.1/artifacts/{sha}/provenance").status_code == 200
