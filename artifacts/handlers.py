"""Handlers of the Artifact Commands (PROTOCOL §13.1), the Evidence rows and the content seam.

Each runs inside ``accept()`` with the Group row locked; WorkItem rows are
locked after it (the write path's one lock order). Payloads arrive valid
against the catalogue (``mwportal/protocol/catalogue``); what the handlers
check is what a schema cannot: identities, the Group's holdings, signatures.

- ``ext.mwportal.artifact.content_store`` (the control plane only): the Group
  holds bytes the upload path has just stored and hashed; the Event names them
  by hash, size and media type, never the bytes (§13.1);
- ``artifact.publish`` (the WorkItem's owner, under its current Execution
  Lease, §11.3): the producer's signed Artifact manifest (``artifact.schema.json``).

The review pipeline's Command is in ``review_handlers``, the Context Packages'
in ``context``; the checks they share in ``guards``. ``record_evidence`` and ``absent_from_group`` are what the
WorkItem handlers call (``work.submit``, ``work.accept_result``, ``work.fail``);
this module installs them as ``workitems.content`` when it loads, so
``workitems`` never imports this app.
"""

from __future__ import annotations

from typing import Any

from missions.authority import AggregateRef, Decision, Emit, HandlerContext
from missions.registry import command
from mwportal.protocol import ErrorCode, ProtocolError, jcs, malformed
from mwportal.protocol.ids import bare, is_portal_id, urn
from workitems.content import Content, install
from workitems.handlers import check_lease
from workitems.models import Submission, WorkItem

from .guards import check_pinned_producer, in_group, instant, not_found, same_id, verify_signed
from .models import Artifact, ArtifactSource, Blob, BlobGroup, Evidence
from .review import review_after_commit
from .store import CONTENT_STORE, hex_of, missing_blobs, wire_hash

CONTENT_STORED = "ext.mwportal.artifact.content_stored"
# Who executes a WorkItem under a lease: workers, and reviewers for the
# review WorkItems the pipeline offers them.
EXECUTING = ("worker", "reviewer")


# --- stored content (§13.1) ---------------------------------------------------------------


@command(CONTENT_STORE, actors=("service",))
def store_content(ctx: HandlerContext) -> Decision:
    """Record that this Group holds the stored bytes ``contentHash``: its
    active members may read them. Issued by the upload path as the control
    plane once the bytes are stored under their hash; the Event names them
    by hash, size and media type only (§13.1: content outside the log)."""
    payload = ctx.payload
    sha = hex_of(payload["contentHash"], "/payload/contentHash")
    blob = Blob.objects.filter(sha256=sha).first()
    if blob is None:
        raise not_found(f"no stored bytes {wire_hash(sha)}", contentHash=wire_hash(sha))
    if payload.get("sizeBytes") not in (None, blob.size):
        raise malformed("/payload/sizeBytes", f"the stored content is {blob.size} bytes")
    if payload.get("mediaType") not in (None, blob.media_type):
        raise malformed("/payload/mediaType", f"the content was stored as {blob.media_type}")
    if BlobGroup.objects.filter(blob=blob, group_id=ctx.group.id).exists():
        raise ProtocolError(ErrorCode.INVALID_STATE_TRANSITION, f"this Group already holds {wire_hash(sha)}")
    uploader = payload.get("uploadedBy")
    uploaded_by = bare(uploader["id"], "/payload/uploadedBy/id") if uploader else ctx.actor.id
    BlobGroup.objects.create(blob=blob, group_id=ctx.group.id, uploaded_by_id=uploaded_by, created_at=ctx.now)
    ref = AggregateRef("artifact", sha, 1)
    body = {"contentHash": wire_hash(sha), "sizeBytes": blob.size, "mediaType": blob.media_type}
    if uploader:
        body["uploadedBy"] = uploader
    return Decision([Emit(CONTENT_STORED, ref, body)], ref)


# --- signed Artifact manifests (§13.1) ----------------------------------------------------


@command("artifact.publish", group_roles=EXECUTING)
def publish_artifact(ctx: HandlerContext) -> Decision:
    """Publish the producer's signed manifest of content this Group holds, under the current lease.

    The manifest (``artifact.schema.json``, §13.1) signs ``contentHash``,
    ``mediaType``, ``schemaUri``, ``producer`` (Agent, its card and
    capability versions), ``missionId``/``groupId``/``workItemId``,
    ``sourceArtifactHashes``, ``toolVersions``/``modelVersions``,
    ``createdAt``, ``classification``, ``sizeBytes`` and ``uri``. Refused: a signature
    that is not the producer's key in the Registry (AUTH_INVALID_SIGNATURE);
    content or a source not held by this Group (INVALID_COMMAND, reason
    not_found: Group content never enters another Mission by default,
    §13.3); a manifest that disagrees with the stored bytes or with the
    Command's scope (SCHEMA_VALIDATION_FAILED).
    """
    manifest = ctx.payload["artifact"]
    where = "/payload/artifact"
    item_id = bare(manifest["workItemId"], f"{where}/workItemId")
    if ctx.command.work_item_id is not None and ctx.command.work_item_id != item_id:
        raise malformed("workItemId", "must be the manifest's WorkItem")
    item = WorkItem.objects.select_for_update().filter(id=item_id, group_id=ctx.group.id).first()
    if item is None:
        raise not_found(f"no WorkItem {urn(item_id)} in this Group", workItemId=urn(item_id))
    lease = check_lease(ctx, item)  # §11.3: publication names the current Execution Lease
    same_id(manifest["groupId"], ctx.group.id, f"{where}/groupId", "must be the Command's Group")
    same_id(manifest["missionId"], str(item.mission_id), f"{where}/missionId", "must be the WorkItem's Mission")
    producer = manifest["producer"]
    same_id(producer["agentId"], ctx.actor.id, f"{where}/producer/agentId", "the producer publishes its own manifest")
    check_pinned_producer(item.pins, producer, f"{where}/producer")  # the pinned card and capabilities (§6.1)
    verify_signed(ctx, manifest, "artifact", where)
    artifact_id = bare(manifest["artifactId"], f"{where}/artifactId")
    sha = hex_of(manifest["contentHash"], f"{where}/contentHash")
    blob = Blob.objects.filter(sha256=sha).first()
    if blob is None or sha not in in_group(ctx.group.id, [sha]):
        raise not_found(f"no content {manifest['contentHash']} was stored into this Group", contentHash=wire_hash(sha))
    if blob.size != manifest["sizeBytes"]:
        raise malformed(f"{where}/sizeBytes", f"the stored content is {blob.size} bytes")
    if blob.media_type != manifest["mediaType"]:
        raise malformed(f"{where}/mediaType", f"the content was stored as {blob.media_type}")
    sources = [hex_of(h, f"{where}/sourceArtifactHashes/{i}") for i, h in enumerate(manifest["sourceArtifactHashes"])]
    absent = sorted(set(sources) - in_group(ctx.group.id, sources)) if sources else []
    if absent:
        shown = [wire_hash(s) for s in absent]
        raise not_found(f"source Artifacts not held by this Group: {', '.join(shown)}", sourceArtifactHashes=shown)
    if Artifact.objects.filter(artifact_id=artifact_id).exists():
        raise ProtocolError(ErrorCode.INVALID_STATE_TRANSITION, f"Artifact {urn(artifact_id)} is already published")
    if Artifact.objects.filter(sha256=sha, workitem=item).exists():
        raise ProtocolError(
            ErrorCode.INVALID_STATE_TRANSITION, f"content {wire_hash(sha)} is already published for this WorkItem"
        )
    artifact = Artifact.objects.create(
        artifact_id=artifact_id, sha256=sha, group_id=ctx.group.id, mission_id=item.mission_id, workitem=item,
        producer_id=ctx.actor.id, agent_card_version=producer["agentCardVersion"], media_type=manifest["mediaType"],
        content_schema=manifest["schemaUri"], size=manifest["sizeBytes"], sources=sources,
        versions={"toolVersions": manifest["toolVersions"], "modelVersions": manifest["modelVersions"],
                  "capabilities": producer["capabilities"]},
        classification=manifest["classification"], retrieval_uri=manifest["uri"], manifest=manifest,
        manifest_hash=jcs.sha256_hash(jcs.canonicalize(manifest)).removeprefix("sha256:"), lease_id=lease.id,
        created_at=instant(manifest["createdAt"], f"{where}/createdAt"), published_at=ctx.now,
    )  # fmt: skip
    ArtifactSource.objects.bulk_create([ArtifactSource(artifact=artifact, source_sha256=s) for s in sources])
    ref = AggregateRef("artifact", artifact_id, 1)
    return Decision([Emit("artifact.published", ref, {"artifact": manifest}, work_item_id=item_id)], ref)


# --- Evidence records (§13.2) -------------------------------------------------------------


def record_evidence(
    ctx: HandlerContext,
    item: WorkItem,
    records: list[dict[str, Any]],
    origin: str,
    *,
    position: int = 0,
    submission: Submission | None = None,
    stages: list[str] | None = None,
) -> None:
    """Keep ``records`` (normative Evidence, already checked) as Evidence rows of ``item``.

    ``position`` is the index, among the Decision's Events, of the Event
    that carries them: the rows name its Group sequence.
    """
    sequence = ctx.group.last_sequence + 1 + position
    Evidence.objects.bulk_create(
        [
            Evidence(
                group_id=ctx.group.id,
                workitem=item,
                submission=submission,
                origin=origin,
                stage=(stages[i] if stages else ""),
                evidence_id=r["evidenceId"],
                type=r["type"],
                subject=r["subject"]["id"],
                criteria=r["criterionIds"],
                method=r["method"],
                result=r["result"],
                producer=r["generatedBy"]["id"],
                timestamp=instant(r["createdAt"], f"evidence/{i}/createdAt"),
                artifacts=[hex_of(h, f"evidence/{i}/artifactHashes") for h in r["artifactHashes"]],
                details=r.get("details", {}),
                record=r,
                sequence=sequence,
            )  # fmt: skip
            for i, r in enumerate(records)
        ]
    )


def absent_from_group(group_id: str, identifiers: list[str]) -> list[str]:
    """Which of ``identifiers`` this Group does not hold, sorted: content hashes
    (``sha256:<hex>``) not stored or not stored into the Group, and Artifact
    IDs (``urn:uuid:``) of no manifest published in it. Content never enters a
    Group by default (§13.3)."""
    hashes = {i: i.removeprefix("sha256:") for i in identifiers if isinstance(i, str) and i.startswith("sha256:")}
    ids = {i: bare(i, "artifactIds") for i in identifiers if is_portal_id(i)}
    other = [i for i in identifiers if i not in hashes and i not in ids]
    held = in_group(group_id, list(hashes.values()))
    stored_missing = set(missing_blobs(list(hashes.values())))
    absent = {w for w, h in hashes.items() if h not in held or h in stored_missing}
    published = {
        str(a)
        for a in Artifact.objects.filter(group_id=group_id, artifact_id__in=ids.values()).values_list(
            "artifact_id", flat=True
        )
    }
    absent |= {w for w, b in ids.items() if b not in published}
    return sorted(absent | set(other))


def artifact_hashes(group_id: str, artifact_ids: list[str]) -> list[str]:
    """The content hashes (hex) of Artifacts published in the Group, by their ``urn:uuid:`` IDs, in order."""
    wanted = [bare(a, "artifactIds") for a in artifact_ids if is_portal_id(a)]
    found = dict(
        (str(a), s)
        for a, s in Artifact.objects.filter(group_id=group_id, artifact_id__in=wanted).values_list(
            "artifact_id", "sha256"
        )
    )
    return list(dict.fromkeys(found[a] for a in wanted if a in found))


def adopt_artifacts(ctx: HandlerContext, group_id: str, hashes: list[str]) -> None:
    """A child Mission's approved Artifacts become the parent Group's too (§14): its members may read
    them and its Coordinator may submit them. Recorded by the approving Command's actor."""
    wanted = [hex_of(h, "artifactHashes") for h in hashes]
    held = set(BlobGroup.objects.filter(group_id=group_id, blob_id__in=wanted).values_list("blob_id", flat=True))
    BlobGroup.objects.bulk_create(
        [
            BlobGroup(blob_id=h, group_id=group_id, uploaded_by_id=ctx.actor.id, created_at=ctx.now)
            for h in dict.fromkeys(wanted)
            if h not in held and Blob.objects.filter(pk=h).exists()
        ]
    )


install(
    Content(
        record_evidence=record_evidence,
        absent_from_group=absent_from_group,
        review_after_commit=review_after_commit,
        adopt_artifacts=adopt_artifacts,
    )  # fmt: skip
)
