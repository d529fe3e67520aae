"""``artifact.publish`` (spec 13.1, 11.3): the producer's signed manifest, and the provenance graph."""

from __future__ import annotations

import pytest

from artifacts.models import Artifact, ArtifactSource
from missions.models import GroupEvent
from mwportal.protocol import ErrorCode, generate_keypair
from mwportal.protocol.documents import MANIFEST_MEMBERS, document_hash, verify_document
from tests.api.support import error_of
from tests.artifacts.conftest import Artifacts
from tests.conftest import AgentKey, Because, refused


def test_a_published_manifest_carries_every_field_of_13_1_and_its_signature(art: Artifacts) -> None:
    item = art.active_item()
    content = b"# findings\n"
    sha = art.upload(content)
    manifest = art.manifest(item, sha, content)
    receipt = art.publish(item, manifest)
    assert receipt["events"][0]["type"] == "artifact.published"
    event = GroupEvent.objects.get(event_id=receipt["events"][0]["event_id"])
    carried = event.body["manifest"]
    assert set(carried) == set(MANIFEST_MEMBERS)
    assert carried == manifest
    assert event.body["lease_id"] == art.leases[item]
    assert verify_document(art.worker.public_key, carried)
    row = Artifact.objects.get(sha256=sha, workitem_id=item)
    assert (row.size, row.media_type, row.classification) == (len(content), "text/markdown", "internal")
    assert row.manifest_hash == document_hash(manifest) == event.body["manifest_hash"]
    assert str(row.group_id) == art.group and str(row.mission_id) == art.mission


def test_a_manifest_with_a_wrong_signature_is_refused_13_1(art: Artifacts) -> None:
    item = art.active_item()
    sha = art.upload(b"data")
    stranger, _ = generate_keypair()
    bad = art.manifest(item, sha, b"data", key=stranger)
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, art.publish, item, bad)
    tampered = {**art.manifest(item, sha, b"data"), "classification": "public"}  # signed as "internal"
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, art.publish, item, tampered)
    assert not Artifact.objects.exists()


def test_a_manifest_naming_a_source_that_does_not_exist_is_refused_13_1(art: Artifacts) -> None:
    item = art.active_item()
    sha = art.upload(b"derived")
    ghost = "ab" * 32
    err = refused(
        Because(ErrorCode.INVALID_COMMAND, "not_found"),
        art.publish,
        item,
        art.manifest(item, sha, b"derived", sources=[ghost]),
    )
    assert err.details["sources"] == [ghost]


def test_content_that_was_never_uploaded_to_this_group_is_refused(art: Artifacts, other: dict[str, str]) -> None:
    item = art.active_item()
    elsewhere = art.upload(b"from B", agent=art.coordinator, group=other["group"])
    refused(
        Because(ErrorCode.INVALID_COMMAND, "not_found"), art.publish, item, art.manifest(item, elsewhere, b"from B")
    )
    # Nor may B's content be cited as a source: Group content never enters
    # another Mission by default (spec 13.3).
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
        ({"size": 999}, "body.manifest.size"),
        ({"media_type": "application/json"}, "body.manifest.media_type"),
        ({"classification": "secret"}, "body.manifest.classification"),
        ({"group": "00000000-0000-4000-8000-000000000000"}, "body.manifest.group"),
        ({"retrieval_uri": ""}, "body.manifest.retrieval_uri"),
        ({"opinion": "trust me"}, "body.manifest.opinion"),
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


def test_publication_needs_the_current_lease_MWP_WRK_013(art: Artifacts) -> None:
    item = art.active_item()
    sha = art.upload(b"late")
    manifest = art.manifest(item, sha, b"late")
    old_lease = art.leases[item]
    art.checkpoint(item)
    art.start(item)
    stale = Because(ErrorCode.WORK_LEASE_EXPIRED, "stale_lease")
    refused(stale, art.lease_command, "artifact.publish", item, {"manifest": manifest}, lease_id=old_lease)
    refused(stale, art.publish, item, art.manifest(item, sha, b"late", agent=art.worker2), agent=art.worker2)
    art.publish(item, manifest)


def test_a_mutable_uri_is_not_identity_13_1(art: Artifacts) -> None:
    """Two manifests of the same bytes under different URIs name one Artifact;
    the same URI for different bytes names two."""
    first, second = art.active_item(), art.active_item()
    sha = art.upload(b"v1")
    art.publish(first, art.manifest(first, sha, b"v1", retrieval_uri="https://mirror.example/latest"))
    art.publish(second, art.manifest(second, sha, b"v1", retrieval_uri="https://other.example/x"))
    assert set(Artifact.objects.values_list("sha256", flat=True)) == {sha}
    third = art.active_item()
    sha2 = art.upload(b"v2")
    art.publish(third, art.manifest(third, sha2, b"v2", retrieval_uri="https://mirror.example/latest"))
    assert (
        Artifact.objects.filter(retrieval_uri="https://mirror.example/latest").values("sha256").distinct().count() == 2
    )
    assert b"".join(art.download(sha).streaming_content) == b"v1"


def test_provenance_graph_is_queryable_by_members_13_1(art: Artifacts, outsider: AgentKey) -> None:
    item = art.active_item()
    raw = art.produce(item, b"raw data", "text/csv")
    clean = art.produce(item, b"clean data", "text/csv", sources=[raw])
    report = art.produce(item, b"# report", sources=[clean, raw])
    assert ArtifactSource.objects.count() == 3
    response = art.get(f"/api/v1/artifacts/{clean}/provenance")
    assert response.status_code == 200, response.content
    graph = response.json()
    assert {n["sha256"] for n in graph["nodes"]} == {raw, clean, report}
    assert {(e["source"], e["derived"]) for e in graph["edges"]} == {(raw, clean), (clean, report), (raw, report)}
    node = next(n for n in graph["nodes"] if n["sha256"] == clean)
    assert node["manifests"][0]["manifest"]["sources"] == [raw]
    # One step down from raw reaches both derived Artifacts; from a fresh
    # Artifact nothing is reached.
    one_step = art.get(f"/api/v1/artifacts/{raw}/provenance?depth=1").json()
    assert {n["sha256"] for n in one_step["nodes"]} == {raw, clean, report}
    lone = art.produce(item, b"unrelated")
    assert [n["sha256"] for n in art.get(f"/api/v1/artifacts/{lone}/provenance").json()["nodes"]] == [lone]
    error_of(art.get(f"/api/v1/artifacts/{clean}/provenance", outsider), 404, "GROUP_NOT_FOUND")
    error_of(art.get(f"/api/v1/artifacts/{'0' * 64}/provenance"), 404, "GROUP_NOT_FOUND")
    error_of(art.get(f"/api/v1/artifacts/{clean}/provenance?depth=0"), 400, "SCHEMA_VALIDATION_FAILED")


def test_the_openapi_schema_documents_the_artifact_endpoints(db: None) -> None:
    from tests.api.support import http

    paths = http().get("/api/v1/schema/", {"format": "json"}).json()["paths"]
    for path in (
        "/api/v1/artifacts",
        "/api/v1/artifacts/{sha256}",
        "/api/v1/artifacts/{sha256}/provenance",
        "/api/v1/workitems/{workitem_id}/review",
        "/api/v1/groups/{group_id}/context-packages",
        "/api/v1/groups/{group_id}/context-packages/{package_id}",
        "/api/v1/groups/{group_id}/context-packages/{package_id}/events",
    ):
        assert path in paths, path
