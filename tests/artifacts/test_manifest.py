"""``artifact.publish`` (PROTOCOL §13.1, §11.3): the producer's signed manifest, and the provenance graph.

The manifest is the normative ``artifact.schema.json`` document, signed by
its producer's Registry key (§6.4, signer ``producer.agentId``).
"""

from __future__ import annotations

import uuid

import pytest

from artifacts.models import Artifact, ArtifactSource
from mwportal.protocol import ErrorCode, jcs
from mwportal.protocol.command import Key
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import sign_document
from tests.api.support import API, error_of, http, normative
from tests.artifacts.conftest import Artifacts, events_of, now_text
from tests.conftest import AgentKey, Because, refused


def test_a_published_manifest_carries_every_field_of_13_1_and_its_signature(art: Artifacts) -> None:
    item = art.active_item()
    content = b"# findings\n"
    sha = art.upload(content)
    manifest = art.manifest(item, sha, content)
    normative("artifact", manifest)
    receipt = art.publish(item, manifest)
    assert [e["kind"] for e in receipt["events"]] == ["artifact.published"]
    (event,) = events_of(art.group, "artifact.published")
    normative("event", event)
    assert event["payload"] == {"artifact": manifest}
    assert event["workItemId"] == urn(item) and event["actor"] == art.worker.actor
    row = Artifact.objects.get(sha256=sha.removeprefix("sha256:"), workitem_id=item)
    assert (row.size, row.media_type, row.classification) == (len(content), "text/markdown", "internal")
    assert f"sha256:{row.manifest_hash}" == jcs.sha256_hash(jcs.canonicalize(manifest))
    assert str(row.group_id) == art.group and str(row.mission_id) == art.mission
    assert urn(row.artifact_id) == manifest["artifactId"] and urn(row.lease_id) == art.fences(item)["executionLeaseId"]


def test_a_manifest_with_a_wrong_signature_is_refused_13_1(art: Artifacts) -> None:
    item = art.active_item()
    sha = art.upload(b"data")
    stranger = Key(art.worker.key.key_id, Key.generate().seed)  # the Worker's key ID, another key's bytes
    bad = art.manifest(item, sha, b"data")
    forged = sign_document(
        {k: v for k, v in bad.items() if k != "signature"}, key_id=stranger.key_id, seed=stranger.seed,
        profile="artifact",
    )  # fmt: skip
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, art.publish, item, forged)
    tampered = {**art.manifest(item, sha, b"data"), "classification": "public"}  # signed as "internal"
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, art.publish, item, tampered)
    # Signed by another Agent's key for Wanda's producer ID: not the producer's signature.
    by_walt = art.manifest(item, sha, b"data", key=art.worker2)
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, art.publish, item, by_walt)
    assert not Artifact.objects.exists()


def test_a_manifest_naming_a_source_that_does_not_exist_is_refused_13_1(art: Artifacts) -> None:
    item = art.active_item()
    sha = art.upload(b"derived")
    ghost = "sha256:" + "ab" * 32
    err = refused(
        Because(ErrorCode.INVALID_COMMAND, "not_found"),
        art.publish,
        item,
        art.manifest(item, sha, b"derived", sources=[ghost]),
    )
    assert err.details["sourceArtifactHashes"] == [ghost]


def test_content_that_was_never_uploaded_to_this_group_is_refused(art: Artifacts, other: dict[str, str]) -> None:
    item = art.active_item()
    elsewhere = art.upload(b"from B", agent=art.coordinator, group=other["group"])
    refused(
        Because(ErrorCode.INVALID_COMMAND, "not_found"), art.publish, item, art.manifest(item, elsewhere, b"from B")
    )
    # Nor may B's content be cited as a source: Group content never enters
    # another Mission by default (§13.3).
    mine = art.upload(b"mine")
    refused(
        Because(ErrorCode.INVALID_COMMAND, "not_found"),
        art.publish,
        item,
        art.manifest(item, mine, b"mine", sources=[elsewhere]),
    )


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"sizeBytes": 999}, "/payload/artifact/sizeBytes"),
        ({"mediaType": "application/json"}, "/payload/artifact/mediaType"),
        ({"classification": "secret"}, "/payload/artifact/classification"),
        ({"groupId": urn(uuid.uuid4())}, "/payload/artifact/groupId"),
        ({"uri": "not a uri"}, "/payload/artifact/uri"),
        ({"opinion": "trust me"}, "/payload/artifact"),
        ({"contentHash": "ab" * 32}, "/payload/artifact/contentHash"),
    ],
)
def test_a_manifest_that_disagrees_with_the_content_or_scope_is_malformed(
    art: Artifacts, override: dict[str, object], field: str
) -> None:
    item = art.active_item()
    sha = art.upload(b"content")
    err = refused(
        ErrorCode.SCHEMA_VALIDATION_FAILED, art.publish, item, art.manifest(item, sha, b"content", **override)
    )
    assert err.details["field"] == field


def test_a_producer_publishes_only_its_own_manifest(art: Artifacts) -> None:
    item = art.active_item()
    sha = art.upload(b"mine")
    theirs = art.manifest(item, sha, b"mine", agent=art.worker2)  # Walt's manifest, sent by Wanda
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, art.publish, item, theirs)
    assert err.details["field"] == "/payload/artifact/producer/agentId"


def test_publication_needs_the_current_lease_MWP_WRK_013(art: Artifacts) -> None:
    item = art.active_item()
    sha = art.upload(b"late")
    manifest = art.manifest(item, sha, b"late")
    old = art.fences(item)
    checkpoint = {"phase": "drafting", "createdAt": now_text()}
    art.worker.send("work.checkpoint", art.group, {"workItemId": urn(item), **old, "checkpoint": checkpoint})
    art.start(item)
    stale = Because(ErrorCode.WORK_LEASE_EXPIRED, "stale_lease")
    refused(stale, art.worker.send, "artifact.publish", art.group, {"artifact": manifest, **old})
    art.publish(item, manifest)
    # Another Agent holds no lease on it at all.
    other = art.manifest(item, sha, b"late", agent=art.worker2)
    refused(stale, art.worker2.send, "artifact.publish", art.group, {"artifact": other, **art.fences(item)})


def test_a_mutable_uri_is_not_identity_13_1(art: Artifacts) -> None:
    """Two manifests of the same bytes under different URIs name one content;
    the same URI for different bytes names two."""
    first, second = art.active_item(), art.active_item()
    sha = art.upload(b"v1")
    art.publish(first, art.manifest(first, sha, b"v1", uri="https://mirror.example/latest"))
    art.publish(second, art.manifest(second, sha, b"v1", uri="https://other.example/x"))
    assert set(Artifact.objects.values_list("sha256", flat=True)) == {sha.removeprefix("sha256:")}
    third = art.active_item()
    sha2 = art.upload(b"v2")
    art.publish(third, art.manifest(third, sha2, b"v2", uri="https://mirror.example/latest"))
    assert (
        Artifact.objects.filter(retrieval_uri="https://mirror.example/latest").values("sha256").distinct().count() == 2
    )
    assert b"".join(art.download(sha).streaming_content) == b"v1"


def test_provenance_graph_is_queryable_by_members_13_1(art: Artifacts, outsider: AgentKey) -> None:
    item = art.active_item()
    raw, _ = art.produce(item, b"raw data", "text/csv")
    clean, _ = art.produce(item, b"clean data", "text/csv", sources=[raw])
    report, _ = art.produce(item, b"# report", sources=[clean, raw])
    assert ArtifactSource.objects.count() == 3
    response = art.get(f"{API}/artifacts/{clean}/provenance")
    assert response.status_code == 200, response.content
    graph = response.json()
    assert graph["contentHash"] == clean
    assert {n["contentHash"] for n in graph["nodes"]} == {raw, clean, report}
    assert {(e["source"], e["derived"]) for e in graph["edges"]} == {(raw, clean), (clean, report), (raw, report)}
    node = next(n for n in graph["nodes"] if n["contentHash"] == clean)
    assert node["manifests"][0]["manifest"]["sourceArtifactHashes"] == [raw]
    normative("artifact", node["manifests"][0]["manifest"])
    # One step down from raw reaches both derived Artifacts; from a fresh
    # Artifact nothing is reached.
    one_step = art.get(f"{API}/artifacts/{raw}/provenance?depth=1").json()
    assert {n["contentHash"] for n in one_step["nodes"]} == {raw, clean, report}
    lone, _ = art.produce(item, b"unrelated")
    assert [n["contentHash"] for n in art.get(f"{API}/artifacts/{lone}/provenance").json()["nodes"]] == [lone]
    error_of(art.get(f"{API}/artifacts/{clean}/provenance", outsider), 404, "GROUP_NOT_FOUND")
    error_of(art.get(f"{API}/artifacts/sha256:{'0' * 64}/provenance"), 404, "GROUP_NOT_FOUND")
    error_of(art.get(f"{API}/artifacts/{clean}/provenance?depth=0"), 400, "SCHEMA_VALIDATION_FAILED")


def test_the_openapi_schema_documents_the_artifact_endpoints(db: None) -> None:
    paths = http().get(f"{API}/schema/", {"format": "json"}).json()["paths"]
    for path in (
        f"{API}/artifacts",
        f"{API}/artifacts/uploads",
        f"{API}/artifacts/uploads/{{uploadId}}",
        f"{API}/artifacts/uploads/{{uploadId}}/complete",
        f"{API}/artifacts/{{contentHash}}",
        f"{API}/artifacts/{{contentHash}}/provenance",
        f"{API}/work-items/{{workItemId}}/review",
        f"{API}/groups/{{groupId}}/context-packages",
        f"{API}/groups/{{groupId}}/context-packages/{{contextPackageId}}",
        f"{API}/groups/{{groupId}}/context-packages/{{contextPackageId}}/events",
    ):
        assert path in paths, path


def test_the_v1_artifact_routes_are_gone(art: Artifacts) -> None:
    """Issue 18 item 8: no private dialect left."""
    sha = art.upload(b"kept")
    for url in (f"/api/v1/artifacts/{sha.removeprefix('sha256:')}", f"/api/v1/artifacts?group={art.group}"):
        assert art.get(url).status_code == 404
