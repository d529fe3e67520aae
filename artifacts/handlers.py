"""Handlers of the Artifact, review and Context Package commands (spec 13).

Each runs inside ``accept()`` with the Group row locked; WorkItem rows are
locked after it (the write path's one lock order). Commands:

- ``artifact.publish`` (lease holder): the producer's signed manifest of an
  uploaded blob (spec 13.1), naming the current Lease ID (spec 11.3);
- ``review.record`` (system): one run of the review pipeline's results for a
  submission (spec 13.2), with the review WorkItem it opens for qualitative
  criteria;
- ``context.publish`` (member): a signed Context Package version (spec 13.3);
- ``context.forward`` (owner or coordinator of both Groups): an explicit,
  audited copy of a Context Package into another Group.

``record_evidence``, the store's blob checks and the review pipeline are
what the WorkItem handlers call (``work.submit``, ``work.accept_result``,
``work.fail``); this module installs them as ``workitems.content`` when it
loads, so ``workitems`` never imports this app.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings

from missions.authority import AggregateRef, Decision, Emit, HandlerContext
from missions.guards import check_int, check_members, check_uuid, refuse
from missions.models import AgentCard, Group, Membership, Mission
from missions.registry import command
from mwportal.protocol import ErrorCode, format_time, malformed, parse_time
from mwportal.protocol.documents import (
    DocumentInvalid,
    check_context_package,
    check_manifest,
    document_hash,
    verify_document,
)
from workitems import state_machine as sm
from workitems.content import Content, install
from workitems.contract import check_contract
from workitems.handlers import check_lease, item_ref, load_item
from workitems.models import Offer, Submission, WorkItem

from .models import Artifact, ArtifactSource, Blob, BlobGroup, ContextForward, ContextPackage, Evidence, ReviewRequest
from .review import review_after_commit
from .store import check_sha256, missing_blobs

# Who executes a WorkItem under a lease: workers, and reviewers for the
# review WorkItems the pipeline offers them.
EXECUTING = ("worker", "reviewer")
STAGE_METHODS = {
    "integrity": "artifact_integrity",
    "schema": "schema",
    "deterministic": "deterministic_check",
    "reviewer": "reviewer",
    "combined": "other",
}


def _document(check: Any, value: Any) -> dict[str, Any]:
    try:
        return check(value)  # type: ignore[no-any-return]
    except DocumentInvalid as exc:
        raise malformed(f"body.{exc.field}", exc.message) from None


def check_card_version(agent_id: str, version: int, field: str) -> None:
    """``version`` is one of the Agent's published Agent Card versions (0: none published yet)."""
    if version == 0 and not AgentCard.objects.filter(agent_id=agent_id).exists():
        return
    if not AgentCard.objects.filter(agent_id=agent_id, version=version).exists():
        raise malformed(field, f"the Agent has no Agent Card version {version}")


def in_group(group_id: str, hashes: list[str]) -> set[str]:
    """Which of ``hashes`` this Group holds: uploaded to it or published in it."""
    linked = set(BlobGroup.objects.filter(group_id=group_id, blob_id__in=hashes).values_list("blob_id", flat=True))
    published = set(Artifact.objects.filter(group_id=group_id, sha256__in=hashes).values_list("sha256", flat=True))
    return linked | published


def check_signed_by_actor(ctx: HandlerContext, document: dict[str, Any], what: str) -> None:
    if not verify_document(ctx.actor.public_key, document):
        raise refuse(ErrorCode.AUTH_INVALID_SIGNATURE, f"the {what} signature does not verify with the producer's key")


# --- Artifacts (spec 13.1) ---------------------------------------------------------


@command("artifact.upload", internal=True)
def upload_artifact(ctx: HandlerContext) -> Decision:
    """Record that this Group holds the stored bytes ``sha256`` (its members may
    read them). The bytes stay outside the log (spec 13.1); the Event names
    them by hash, size and media type only. Issued by the upload view after
    the bytes are stored."""
    check_members(ctx.body, ["sha256"])
    sha = check_sha256(ctx.body["sha256"], "body.sha256")
    blob = Blob.objects.filter(sha256=sha).first()
    if blob is None:
        raise refuse(ErrorCode.INVALID_COMMAND, f"no stored bytes {sha}", sha256=sha, reason="not_found")
    if BlobGroup.objects.filter(blob=blob, group_id=ctx.group.id).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"this Group already holds {sha}")
    BlobGroup.objects.create(blob=blob, group_id=ctx.group.id, uploaded_by_id=ctx.actor.id, created_at=ctx.now)
    ref = AggregateRef("blob", sha, 1)
    body = {"sha256": sha, "size": blob.size, "media_type": blob.media_type, "agent": ctx.actor.id}
    return Decision([Emit("artifact.uploaded", ref, body)], ref)


@command("artifact.publish", group_roles=EXECUTING)
def publish_artifact(ctx: HandlerContext) -> Decision:
    """Publish the signed manifest of an uploaded blob under the current lease.

    The manifest binds content hash, media type and schema, producer Agent
    and Agent Card version, Mission/Group/WorkItem, sources, versions,
    creation time, classification, size and retrieval URI (spec 13.1). It is
    refused when its signature is not the producer's (AUTH_INVALID_SIGNATURE), when
    the content or a source hash is not held by this Group (INVALID_COMMAND, reason not_found: Group
    content never enters another Mission by default, spec 13.3), or when it
    disagrees with the stored bytes' size or media type (SCHEMA_VALIDATION_FAILED).
    """
    check_members(ctx.body, ["manifest"])
    item = load_item(ctx)
    check_lease(ctx, item)  # spec 11.3: Artifact publication names the current Lease ID
    manifest = _document(check_manifest, ctx.body["manifest"])
    if manifest["group"] != ctx.group.id:
        raise malformed("body.manifest.group", "must be the Command's Group")
    if manifest["mission"] != str(item.mission_id):
        raise malformed("body.manifest.mission", "must be the WorkItem's Mission")
    if manifest["workitem"] != str(item.id):
        raise malformed("body.manifest.workitem", "must be the target WorkItem")
    producer = manifest["producer"]
    if producer["agent"] != ctx.actor.id:
        raise malformed("body.manifest.producer.agent", "the producer publishes its own manifest")
    check_card_version(ctx.actor.id, producer["agent_card_version"], "body.manifest.producer.agent_card_version")
    check_signed_by_actor(ctx, manifest, "manifest")
    sha = manifest["content_hash"]
    blob = Blob.objects.filter(sha256=sha).first()
    if blob is None or sha not in in_group(ctx.group.id, [sha]):
        raise refuse(
            ErrorCode.INVALID_COMMAND, f"no Artifact {sha} was uploaded to this Group", sha256=sha, reason="not_found"
        )
    if blob.size != manifest["size"]:
        raise malformed("body.manifest.size", f"the stored content is {blob.size} bytes")
    if blob.media_type != manifest["media_type"]:
        raise malformed("body.manifest.media_type", f"the content was stored as {blob.media_type}")
    sources = manifest["sources"]
    absent = sorted(set(sources) - in_group(ctx.group.id, sources)) if sources else []
    if absent:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"source Artifacts not held by this Group: {', '.join(absent)}",
            sources=absent,
            reason="not_found",
        )
    if Artifact.objects.filter(sha256=sha, workitem=item).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"Artifact {sha} is already published for this WorkItem")
    manifest_hash = document_hash(manifest)
    artifact = Artifact.objects.create(
        sha256=sha, group_id=ctx.group.id, mission_id=item.mission_id, workitem=item, producer_id=ctx.actor.id,
        agent_card_version=producer["agent_card_version"], media_type=manifest["media_type"],
        content_schema=manifest["content_schema"] or "", size=manifest["size"], sources=sources,
        versions=manifest["versions"], classification=manifest["classification"],
        retrieval_uri=manifest["retrieval_uri"], manifest=manifest, manifest_hash=manifest_hash,
        lease_id=str(ctx.envelope.lease_id), created_at=parse_time(manifest["created_at"], "body.manifest.created_at"),
        published_at=ctx.now,
    )  # fmt: skip
    ArtifactSource.objects.bulk_create([ArtifactSource(artifact=artifact, source_sha256=s) for s in sources])
    revision = Artifact.objects.filter(sha256=sha, group_id=ctx.group.id).count()
    ref = AggregateRef("artifact", sha, revision)
    body = {
        "workitem": str(item.id),
        "lease_id": ctx.envelope.lease_id,
        "manifest": manifest,
        "manifest_hash": manifest_hash,
    }
    return Decision([Emit("artifact.published", ref, body)], ref)


# --- Evidence records (spec 13.2) ------------------------------------------------


def record_evidence(
    ctx: HandlerContext,
    item: WorkItem,
    records: list[dict[str, Any]],
    origin: str,
    *,
    position: int = 0,
    submission: Submission | None = None,
    stages: list[str] | None = None,
    details: list[dict[str, Any]] | None = None,
) -> None:
    """Keep ``records`` (already checked) as Evidence rows of ``item``.

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
                subject=r["subject"],
                criteria=r["criteria"],
                method=r["method"],
                result=r["result"],
                producer=r["producer"],
                timestamp=parse_time(r["timestamp"], "evidence.timestamp"),
                artifacts=r["artifacts"],
                summary=r["summary"],
                details=(details[i] if details else {}),
                record=r,
                sequence=sequence,
            )  # fmt: skip
            for i, r in enumerate(records)
        ]
    )


# --- the review pipeline's results (spec 13.2) ------------------------------------

_RESULT_MEMBERS = ("stage", "criteria", "kind", "artifacts", "result", "details")


def _check_results(value: Any, criteria: list[str]) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise malformed("body.results", "must be a list")
    for i, r in enumerate(value):
        where = f"body.results.{i}"
        if not isinstance(r, dict) or set(r) != set(_RESULT_MEMBERS):
            raise malformed(where, f"needs exactly {', '.join(_RESULT_MEMBERS)}")
        if r["stage"] not in STAGE_METHODS:
            raise malformed(f"{where}.stage", f"must be one of {', '.join(STAGE_METHODS)}")
        if r["result"] not in ("pass", "fail", "inconclusive"):
            raise malformed(f"{where}.result", "must be pass, fail or inconclusive")
        if not isinstance(r["criteria"], list) or not set(r["criteria"]) <= set(criteria):
            raise malformed(f"{where}.criteria", "must name acceptance criteria of the contract")
        if not isinstance(r["details"], dict) or not isinstance(r["kind"], str):
            raise malformed(where, "kind must be a string and details an object")
    return value


@command("review.record", actors=("system",))
def record_review(ctx: HandlerContext) -> Decision:
    """Record one run of the review pipeline for a submission (spec 13.2).

    Body: ``{"workitem", "submission", "results": [{stage, criteria, kind,
    artifacts, result, details}], "request_review": [criterion ids]}``. Each
    result becomes an Evidence record (producer ``system``); everything is
    kept for the final human Approval. When ``request_review`` names
    qualitative criteria and no review WorkItem exists for this submission
    yet, one is authorized and offered to the Group's ``reviewer`` members
    (never the submitter), in the same transaction.
    """
    body = ctx.body
    check_members(body, ["workitem", "submission", "results", "request_review"])
    item_id = check_uuid(body, "workitem")
    # Locked after the Group row (lock order); the pipeline's reads happened
    # before this Command, its results are appended as they were found.
    item = WorkItem.objects.select_for_update().filter(id=item_id, group_id=ctx.group.id).first()
    if item is None:
        raise refuse(ErrorCode.INVALID_COMMAND, f"no WorkItem {item_id} in this Group", reason="not_found")
    submission_id = check_int(body, "submission", minimum=1)
    submission = Submission.objects.filter(id=submission_id, workitem=item, authoritative=True).first()
    if submission is None:
        raise refuse(ErrorCode.INVALID_COMMAND, f"no submission {submission_id} of this WorkItem", reason="not_found")
    criteria = [c["id"] for c in item.contract["acceptance_criteria"]]
    results = _check_results(body["results"], criteria)
    stamp = format_time(ctx.now)
    records = [
        {
            "subject": str(item.id),
            "criteria": r["criteria"],
            "method": STAGE_METHODS[r["stage"]],
            "result": r["result"],
            "producer": "system",
            "timestamp": stamp,
            "artifacts": r["artifacts"],
            "summary": f"{r['stage']}: {r['kind']} {r['result']}",
        }
        for r in results
    ]
    events = [
        Emit(
            "review.recorded",
            item_ref(item),
            {
                "workitem": str(item.id),
                "submission": submission.id,
                "evidence": records,
                "checks": [{"stage": r["stage"], "kind": r["kind"], "details": r["details"]} for r in results],
            },
        )
    ]
    record_evidence(
        ctx, item, records, "review", submission=submission,
        stages=[r["stage"] for r in results], details=[{"kind": r["kind"], **r["details"]} for r in results],
    )  # fmt: skip
    wanted = body["request_review"]
    if not isinstance(wanted, list) or not set(wanted) <= set(criteria):
        raise malformed("body.request_review", "must list acceptance criteria of the contract")
    if wanted and not ReviewRequest.objects.filter(submission=submission).exists():
        events += _open_review(ctx, item, submission, wanted)
    return Decision(events, item_ref(item))


def _open_review(ctx: HandlerContext, item: WorkItem, submission: Submission, wanted: list[str]) -> list[Emit]:
    """Authorize a review WorkItem for the qualitative criteria and offer it to
    the Group's reviewers (spec 13.2: request reviewer-Agent Evidence)."""
    reviewers = sorted(
        str(m.agent_id)
        for m in Membership.objects.filter(group_id=ctx.group.id, active=True)
        if "reviewer" in m.roles and str(m.agent_id) != str(submission.agent_id)
    )[: settings.MWP_MAX_OFFER_CANDIDATES]
    if not reviewers:
        body = {"workitem": str(item.id), "criteria": wanted, "reason": "no reviewer member other than the submitter"}
        return [Emit("review.reviewer_unavailable", item_ref(item), body)]
    by_id = {c["id"]: c for c in item.contract["acceptance_criteria"]}
    review_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"mwp:review:{item.id}:{submission.id}"))
    contract = {
        "goal": f"Review the submission of WorkItem {item.id} against its qualitative criteria",
        "deliverables": ["reviewer Evidence for each listed criterion"],
        "acceptance_criteria": [
            {"id": c, "description": by_id[c]["description"], "evidence_methods": ["reviewer"]} for c in wanted
        ],
        "inputs": [
            {
                "kind": "review",
                "workitem": str(item.id),
                "submission": submission.id,
                "artifacts": submission.artifacts,
                "evidence": submission.evidence,
            }
        ],  # fmt: skip
        "dependencies": [],
        "allowed": {"tools": [], "data": [], "operations": ["read"]},
        "resources": {},
        "capabilities": [],
        "deadline": None,
        "urgency": item.contract.get("urgency", "normal"),
        "business_impact": item.contract.get("business_impact", "medium"),
        "budgets": dict.fromkeys(item.contract["budgets"]),
        "retry": {"max_attempts": 1, "backoff_seconds": 0, "backoff_multiplier": 1, "deadline": None, "max_cost": None},
        "risk": {"class": "low", "requires_execution_approval": False},
    }
    contract = {**check_contract(contract), "revision": 1}  # the same rules as any authorized contract
    mission = Mission.objects.get(group_id=ctx.group.id)
    review = WorkItem.objects.create(
        id=review_id, group_id=ctx.group.id, mission=mission, state=sm.OFFERED, contract=contract,
        created_at=ctx.now, updated_at=ctx.now, revision=2,
    )  # fmt: skip
    ReviewRequest.objects.create(
        review_workitem=review, subject=item, submission=submission, criteria=wanted, created_at=ctx.now
    )
    expires_at = ctx.now + timedelta(seconds=settings.MWP_REVIEW_OFFER_SECONDS)
    basis = {
        "capability_matches": [],
        "authorization_eligibility": True,
        "availability_estimate": "unknown",
        "expected_cost": 0,
        "reliability_evidence": [],
        "policy_rules": ["review: every reviewer member of the Group except the submitter"],
    }
    Offer.objects.bulk_create(
        [
            Offer(workitem=review, agent_id=a, contract_revision=1, selection_basis=basis, created_at=ctx.now,
                  expires_at=expires_at)
            for a in reviewers
        ]
    )  # fmt: skip
    sm.check_transition(None, "work.authorize")
    sm.check_transition(sm.OPEN, "work.offer")
    authorized = AggregateRef("workitem", review_id, 1)
    offered = AggregateRef("workitem", review_id, 2)
    return [
        Emit(
            "review.requested",
            item_ref(item),
            {"workitem": str(item.id), "review_workitem": review_id, "criteria": wanted, "reviewers": reviewers},
        ),
        Emit("work.authorized", authorized, {"workitem": review_id, "contract": contract, "proposal": None}),
        Emit(
            "work.offered",
            offered,
            {
                "agents": reviewers,
                "expires_at": format_time(expires_at),
                "selection_basis": basis,
                "contract_revision": 1,
            },
        ),  # fmt: skip
    ]


# --- Context Packages (spec 13.3) ------------------------------------------------


@command("context.publish")
def publish_context(ctx: HandlerContext) -> Decision:
    """A signed, versioned Context Package of this Group, generated by the actor.

    Version 1 starts a package; version n+1 names the hash of version n
    (``previous``), or REVISION_CONFLICT. Everything it cites must belong to
    this Group: its Mission, a WorkItem of it, Events up to the head, Artifacts
    the Group holds (spec 13.3: Group content never enters another Mission's
    context by default).
    """
    check_members(ctx.body, ["package"])
    doc = _document(check_context_package, ctx.body["package"])
    scope = doc["scope"]
    if scope["group"] != ctx.group.id:
        raise malformed("body.package.scope.group", "must be the Command's Group")
    mission = Mission.objects.filter(group_id=ctx.group.id).first()
    if mission is None or scope["mission"] != str(mission.id):
        raise malformed("body.package.scope.mission", "must be this Group's Mission")
    if (
        scope["workitem"] is not None
        and not WorkItem.objects.filter(id=scope["workitem"], group_id=ctx.group.id).exists()
    ):
        raise refuse(ErrorCode.INVALID_COMMAND, f"no WorkItem {scope['workitem']} in this Group", reason="not_found")
    if doc["events"]["to"] > ctx.group.last_sequence:
        raise malformed("body.package.events.to", f"the Group head is at {ctx.group.last_sequence}")
    absent = sorted(set(doc["artifacts"]) - in_group(ctx.group.id, doc["artifacts"])) if doc["artifacts"] else []
    if absent:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"Artifacts not held by this Group: {', '.join(absent)}",
            artifacts=absent,
            reason="not_found",
        )
    generator = doc["generator"]
    if generator["agent"] != ctx.actor.id:
        raise malformed("body.package.generator.agent", "the generator publishes its own package")
    check_card_version(ctx.actor.id, generator["agent_card_version"], "body.package.generator.agent_card_version")
    check_signed_by_actor(ctx, doc, "Context Package")
    latest = ContextPackage.objects.filter(package=doc["package"]).order_by("-version").first()
    if latest is not None and str(latest.group_id) != ctx.group.id:
        raise refuse(
            ErrorCode.INVALID_COMMAND, f"no Context Package {doc['package']} in this Group", reason="not_found"
        )
    current = latest.version if latest else 0
    if doc["version"] != current + 1 or (latest is not None and doc["previous"] != latest.document_hash):
        raise refuse(
            ErrorCode.REVISION_CONFLICT,
            f"the package is at version {current}; the next version is {current + 1} naming its hash",
            current=current,
            previous=latest.document_hash if latest else None,
        )
    digest = document_hash(doc)
    ContextPackage.objects.create(
        package=doc["package"], version=doc["version"], group_id=ctx.group.id, mission=mission,
        workitem_id=scope["workitem"], generator_id=ctx.actor.id, from_sequence=doc["events"]["from"],
        to_sequence=doc["events"]["to"], document=doc, document_hash=digest, previous_hash=doc["previous"] or "",
        published_at=ctx.now,
    )  # fmt: skip
    ref = AggregateRef("context_package", doc["package"], doc["version"])
    return Decision([Emit("context.published", ref, {"package": doc, "document_hash": digest})], ref)


FORWARDING = ("owner", "coordinator")


@command("context.forward", group_roles=FORWARDING)
def forward_context(ctx: HandlerContext) -> Decision:
    """Forward one Context Package version to another Mission Group (spec 13.3).

    Never by default: an owner or coordinator of this Group who is also an
    owner or coordinator of the receiving Group does it explicitly, and both
    logs record it (``context.forwarded`` here, ``context.received`` there).
    The cited Events stay readable only to members of this Group.
    """
    check_members(ctx.body, ["package", "version", "to_group"])
    package_id = check_uuid(ctx.body, "package")
    version = check_int(ctx.body, "version", minimum=1)
    to_group = check_uuid(ctx.body, "to_group")
    package = ContextPackage.objects.filter(package=package_id, version=version, group_id=ctx.group.id).first()
    if package is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND, f"no Context Package {package_id} v{version} in this Group", reason="not_found"
        )
    if to_group == ctx.group.id:
        raise malformed("body.to_group", "must be another Group")
    target = Group.objects.filter(id=to_group, kind=Group.KIND_MISSION).first()
    there = Membership.objects.filter(group_id=to_group, agent_id=ctx.actor.id, active=True).first()
    if target is None or there is None:
        # A Group the forwarder is not a member of answers as an absent one (issue 16).
        raise refuse(ErrorCode.GROUP_NOT_FOUND, f"no Mission Group {to_group} of yours", field="body.to_group")
    if not set(there.roles) & set(FORWARDING):
        # The permission check of spec 13.3: the forwarder answers for the
        # content in both Groups.
        raise refuse(ErrorCode.AUTH_FORBIDDEN, "forwarding needs the owner or coordinator role in the receiving Group")
    if ContextForward.objects.filter(package=package, to_group_id=uuid.UUID(to_group)).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "this version was already forwarded to that Group")
    head = ctx.lock_other_group(to_group)
    ContextForward.objects.create(package=package, to_group_id=to_group, forwarded_by_id=ctx.actor.id,
                                  forwarded_at=ctx.now)  # fmt: skip
    ref = AggregateRef("context_package", package_id, version)
    note = {"package": package_id, "version": version, "document_hash": package.document_hash}
    return Decision(
        [Emit("context.forwarded", ref, {**note, "to_group": to_group})],
        ref,
        also=[
            (head, [Emit("context.received", ref, {**note, "from_group": ctx.group.id, "document": package.document})])
        ],
    )


def absent_from_group(group_id: str, hashes: list[str]) -> list[str]:
    """Cited hashes missing from the store or not held by this Group:
    content never enters a Group by default (spec 13.3)."""
    return sorted(set(missing_blobs(hashes)) | (set(hashes) - in_group(group_id, hashes)))


install(
    Content(
        record_evidence=record_evidence, absent_from_group=absent_from_group, review_after_commit=review_after_commit
    )
)
