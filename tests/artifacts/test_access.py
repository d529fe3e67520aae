"""Who reads a blob (issue 16 item 1): holding bytes is proven only by sending them.

The attack of the review: an Agent that learned a SHA-256 (from another
Group, another Organization, a forwarded Context Package, or before its
removal) recorded "my Group holds these bytes" with a signed Command and then
downloaded them. Now only the control plane issues
``ext.mwportal.artifact.content_store``, after the upload path stored and hashed
the bytes. Every test drives the REST API (``POST /api/v0.1/commands``,
``/api/v0.1/artifacts``) as the attacker would.

Forwarded packages (spec 13.3: by default, what a Group holds stays out of
any other Mission's context): forwarding copies the package *document*,
whose Artifact hashes are citations; the bytes stay readable only in the
Groups they were uploaded into, as the cited Events stay readable only to
the source Group's members. A receiving Group gets the bytes only when
someone holding them uploads them there.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from artifacts.models import Blob, BlobGroup
from missions.commands import create_organization
from missions.models import GroupEvent
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import urn
from tests.api.support import API, COMMANDS, bearer, error_of, http, nothing_written, post_json
from tests.artifacts.conftest import Artifacts, criterion, give_card, now_text
from tests.artifacts.test_context import forward, package_doc, publish
from tests.conftest import AgentKey, Because, add_member, group_revision, make_agent, make_person, refused

UPLOADS = f"{API}/artifacts/uploads"
STORE = "ext.mwportal.artifact.content_store"


def signed_upload(agent: AgentKey, group: str, sha: str, **envelope: Any) -> Any:
    """The attack: a signed ``content_store`` naming bytes the sender never sent."""
    return post_json(http(), COMMANDS, agent.command(STORE, group, {"contentHash": sha}, **envelope))


def assert_not_readable(art: Artifacts, sha: str, agent: AgentKey) -> None:
    error_of(art.download(sha, agent), 404, "GROUP_NOT_FOUND")
    error_of(art.get(f"{API}/artifacts/{sha}/provenance", agent), 404, "GROUP_NOT_FOUND")


def end_membership(art: Artifacts, agent: AgentKey) -> None:
    art.owner.send("membership.end", art.group, {"principal": agent.actor}, expected_revision=group_revision(art.group))


@pytest.fixture
def globex() -> dict[str, Any]:
    """A second Organization with its own Mission, owner and worker, and a
    blob its worker uploaded there."""
    org_id, admin = create_organization("globex", "Globex")
    gina = make_person("globex", "Gina Owner", ["mission_owner"])
    gus = give_card(make_agent("globex", "Gus Coordinator", ["coordinator"]))
    greg = make_agent("globex", "Greg Worker", ["worker"])
    group = str(uuid.uuid4())
    gina.send(
        "mission.create",
        group,
        {
            "missionId": urn(uuid.uuid4()), "groupId": urn(group), "coordinatorAgentId": gus.urn, "title": "Secret",
            "objective": "Theirs", "deadline": now_text(timedelta(days=30)),
            "definitionOfDone": [criterion("done", "human_review")], "budget": {"toolCallLimit": 10},
        },
    )  # fmt: skip
    add_member(gina, group, greg, ["worker"])
    response = Client().post(
        f"{API}/artifacts?groupId={urn(group)}", data=b"globex trade secret", content_type="text/plain",
        **bearer(greg.extra["token"]),
    )  # fmt: skip
    assert response.status_code == 201, response.content
    return {"org": org_id, "admin_group": admin, "group": group, "worker": greg, "sha": response.json()["contentHash"]}


def test_it_refuses_a_signed_upload_naming_another_groups_blob(art: Artifacts, other: dict[str, str]) -> None:
    """Issue 16 item 1, cross-Group: Wanda (A only) names B's blob."""
    sha = art.upload(b"mission B content", agent=art.coordinator, group=other["group"])
    assert_not_readable(art, sha, art.worker)
    with nothing_written():
        error_of(signed_upload(art.worker, art.group, sha), 403, "AUTH_FORBIDDEN")
    assert not BlobGroup.objects.filter(blob_id=sha.removeprefix("sha256:"), group_id=art.group).exists()
    assert_not_readable(art, sha, art.worker)


def test_it_refuses_a_signed_upload_naming_another_organizations_blob(
    art: Artifacts, globex: dict[str, Any], org: dict[str, str]
) -> None:
    """Issue 16 item 1, cross-Organization: the review's exact chain (201, then B's bytes) now stops at 403."""
    sha = globex["sha"]
    assert_not_readable(art, sha, art.worker)
    for group in (art.group, org["admin_group"]):
        with nothing_written():
            error_of(signed_upload(art.worker, group, sha), 403, "AUTH_FORBIDDEN")
    assert list(BlobGroup.objects.filter(blob_id=sha.removeprefix("sha256:")).values_list("group_id", flat=True)) == [
        uuid.UUID(globex["group"])
    ]
    assert_not_readable(art, sha, art.worker)
    assert art.download(sha, globex["worker"]).status_code == 200  # its own members still read it


def test_it_refuses_every_signed_upload_even_of_bytes_the_group_holds(art: Artifacts) -> None:
    """``content_store`` is the control plane's own record: refused from any Agent or person, whatever it names."""
    sha = art.upload(b"ours")
    error_of(signed_upload(art.worker, art.group, sha), 403, "AUTH_FORBIDDEN")
    error_of(signed_upload(art.worker, art.group, "sha256:" + "1" * 64), 403, "AUTH_FORBIDDEN")
    error_of(signed_upload(art.owner, art.group, sha), 403, "AUTH_FORBIDDEN")


def test_it_stops_serving_a_removed_member_at_once(art: Artifacts) -> None:
    """Issue 16 item 1, after removal: the hashes Wanda saw open nothing once she is out."""
    sha = art.upload(b"Wanda's own report")
    assert art.download(sha, art.worker).status_code == 200
    end_membership(art, art.worker)
    assert_not_readable(art, sha, art.worker)
    # She signs with the Membership Epoch she held.
    error_of(signed_upload(art.worker, art.group, sha, membership_epoch=1), 403, "AUTH_FORBIDDEN")
    assert art.download(sha, art.coordinator).status_code == 200


def test_it_does_not_let_a_removed_member_complete_an_upload(art: Artifacts) -> None:
    client, auth = art.client(art.worker)
    created = client.post(
        f"{UPLOADS}?groupId={urn(art.group)}", content_type="text/plain", HTTP_UPLOAD_LENGTH="4", **auth
    )
    upload = created.json()["uploadId"]
    patched = client.patch(
        f"{UPLOADS}/{upload}", data=b"late", content_type="application/offset+octet-stream",
        HTTP_UPLOAD_OFFSET="0", **auth,
    )  # fmt: skip
    assert patched.status_code == 204
    end_membership(art, art.worker)
    error_of(client.post(f"{UPLOADS}/{upload}/complete", **auth), 404, "GROUP_NOT_FOUND")
    assert not BlobGroup.objects.filter(group_id=art.group).exists()


def test_it_grants_no_bytes_through_a_forwarded_context_package_13_3(
    art: Artifacts, other: dict[str, str], owner: AgentKey
) -> None:
    """Issue 16 item 1, forwarded package: B's members read the package and
    its hashes, never the bytes behind them (see the module docstring)."""
    sha = art.upload(b"A's working notes")
    doc = package_doc(art, art.coordinator, artifacts=[sha])
    publish(art.coordinator, art.group, doc)
    forward(art.coordinator, art.group, doc, other["group"])
    bea = make_agent("acme", "Bea", ["worker"])  # a member of B only
    add_member(owner, other["group"], bea, ["worker"])
    url = f"{API}/groups/{urn(other['group'])}/context-packages/{doc['contextPackageId']}"
    received = art.get(url, bea)
    assert received.status_code == 200 and received.json()["contextPackage"]["artifactHashes"] == [sha]
    assert_not_readable(art, sha, bea)
    error_of(signed_upload(bea, other["group"], sha), 403, "AUTH_FORBIDDEN")
    # Nor does B's log accept the hash as content it holds.
    again = package_doc(art, art.coordinator, group=other["group"], mission=other["mission"], artifacts=[sha])
    refused(Because(ErrorCode.INVALID_COMMAND, "not_found"), publish, art.coordinator, other["group"], again)
    assert_not_readable(art, sha, bea)
    # Bytes arrive in B only by being sent there; then B's members read them.
    art.upload(b"A's working notes", agent=art.coordinator, group=other["group"])
    assert art.download(sha, bea).status_code == 200


@pytest.mark.parametrize("route", ["single", "resumable"])
def test_it_refuses_uploads_into_the_administrative_group(art: Artifacts, org: dict[str, str], route: str) -> None:
    """Issue 16 item 1: the Organization's administrative Group is no dumping ground."""
    client, auth = art.client(art.worker)
    before = GroupEvent.objects.filter(group_id=org["admin_group"]).count()
    if route == "single":
        response = client.post(
            f"{API}/artifacts?groupId={urn(org['admin_group'])}", data=b"dump", content_type="text/plain", **auth
        )
    else:
        response = client.post(
            f"{UPLOADS}?groupId={urn(org['admin_group'])}", content_type="text/plain", HTTP_UPLOAD_LENGTH="4", **auth
        )
    error = error_of(response, 403, "AUTH_FORBIDDEN")
    assert "administrative Group" in error["message"]
    assert not Blob.objects.exists()
    assert GroupEvent.objects.filter(group_id=org["admin_group"]).count() == before
