"""The review pipeline (PROTOCOL §13.2) and the per-WorkItem review summary.

A Worker's claim of completion is never enough. After ``work.submit``
commits, ``run_review(workitem_id)`` reviews the latest authoritative
submission, in the order of §13.2:

1. **Artifact integrity and output schemas**: every submitted or cited
   Artifact's stored bytes are hashed again (a mismatch is recorded on the
   blob and fails every criterion whose Evidence cites it), its signed
   manifest is verified (the producer's key in the Registry, size, media
   type); then the contract's ``json_schema`` checks run;
2. **deterministic checks** declared in the contract (``constraints.checks``,
   ``workitems/checks.py``);
3. **reviewer-Agent Evidence** for criteria requiring ``reviewer_assessment``:
   a review WorkItem is offered to the Group's ``reviewer`` members; when its
   reviewer submits, the subject is reviewed again and the reviewer's
   Evidence joins in;
4. **combined evaluation** per criterion and overall;
5. everything is **retained** as signed Evidence (``evidence.schema.json``,
   signed by the control plane) in ``ext.mwportal.review.result_recorded``
   Events, for the final human Approval.

The pipeline reads outside any transaction and records its results with the
control plane's Command ``ext.mwportal.review.result_record`` through
``accept()``; its action ID derives from the submission, the results and the
reviewers it may ask, so running it twice with the same findings appends
nothing new, and a run after a reviewer joined requests the review a run
without one could not.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from missions.authority import accept
from missions.commands import group_service_command
from missions.keyregistry import DjangoRegistry
from missions.models import Membership, Organization
from missions.service_keys import control_plane
from mwportal.protocol import ProtocolError, jcs
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import VerificationFailed, sign_document, verify_document
from workitems import checks as registry
from workitems.contract import declared_checks
from workitems.models import Submission, WorkItem

from .models import Artifact, Blob, Evidence, ReviewRequest
from .store import CHUNK, blob_integrity, blob_name, storage, wire_hash

log = logging.getLogger("missions.review")
REVIEW_RECORD = "ext.mwportal.review.result_record"
# Check outcomes (workitems.checks) and the Evidence results they become.
RESULTS = {"pass": "passed", "fail": "failed", "inconclusive": "inconclusive"}
# The pipeline's stages and the Evidence ``type`` of each (evidence.schema.json).
STAGE_TYPES = {
    "integrity": "artifact_integrity",
    "schema": "schema_validation",
    "deterministic": "deterministic_test",
    "reviewer": "reviewer_assessment",
    "combined": "policy_check",
}
REVIEWER = "reviewer_assessment"  # what a criterion requires of a reviewer Agent
_NAMESPACE = uuid.UUID("3b0e6f5e-2d8c-4c8b-9a57-6f4d1e2c7a90")


def submission_id(submission: Submission) -> str:
    """The ``urn:uuid:`` ID of a submission on the wire (derived from its row, stable)."""
    return urn(uuid.uuid5(_NAMESPACE, f"submission:{submission.workitem_id}:{submission.id}"))


def criteria_of(item: WorkItem) -> list[dict[str, Any]]:
    """The contract's normative acceptance criteria (``criterionId``, ``description``, ``evidenceRequired``)."""
    return list(item.contract["acceptanceCriteria"])


def submitted_hashes(item: WorkItem, submission: Submission) -> list[str]:
    """The content hashes (hex) of the Artifacts a submission names by ``artifactIds``, in order."""
    ids = [str(a).removeprefix("urn:uuid:") for a in submission.artifacts]
    found = dict(
        (str(a), s)
        for a, s in Artifact.objects.filter(group_id=item.group_id, artifact_id__in=ids).values_list(
            "artifact_id", "sha256"
        )
    )
    return list(dict.fromkeys(found[a] for a in ids if a in found))


# --- running the pipeline ---------------------------------------------------------


def review_after_commit(workitem_id: str) -> None:
    """Called by ``work.submit`` inside its transaction: schedule the pipeline
    for after commit (``MWP_REVIEW_ON_SUBMIT``: celery, inline or off)."""
    mode = settings.MWP_REVIEW_ON_SUBMIT
    if mode == "inline":
        transaction.on_commit(lambda: run_review_quietly(workitem_id))
    elif mode == "celery":
        transaction.on_commit(lambda: _enqueue(workitem_id))


def _enqueue(workitem_id: str) -> None:
    """Hand the review to Celery; an unreachable broker must not turn the
    committed submission into an error (``mwp review`` runs it later)."""
    # The project's Celery app, explicitly: web processes do not import it
    # otherwise, and a bare shared_task would fall back to Celery's default
    # broker.
    from mwportal.celery import app

    try:
        app.send_task("artifacts.review_submission", args=[workitem_id])
    except Exception:  # the broker's errors are not ours to classify
        log.exception("could not enqueue the review of WorkItem %s; run: mwp review %s", workitem_id, workitem_id)


def run_review_quietly(workitem_id: str) -> None:
    try:
        run_review(workitem_id)
    except Exception:  # the submission stands; the review can be run again
        log.exception("review of WorkItem %s failed", workitem_id)


def evidence_documents(item: WorkItem, submission: Submission, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pipeline's findings as normative Evidence (§13.2), signed by the
    Organization's control plane, which runs the pipeline.

    Deterministic: the same findings for the same submission are the same
    documents (IDs derived from them, ``createdAt`` the submission's time),
    so the Command that carries them is the same Command, replayed.
    """
    key = control_plane(str(item.group.organization_id))
    assert key.principal is not None
    principal = urn(key.principal[1])
    created = submission.created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    out = []
    for index, r in enumerate(results):
        digest = hashlib.sha256(jcs.canonicalize(r)).hexdigest()
        artifacts = [wire_hash(a) for a in dict.fromkeys(r["artifacts"])]
        subject = (
            {"type": "artifact", "id": artifacts[0]}
            if r["stage"] == "integrity"
            else {"type": "work_item", "id": urn(item.id)}
        )
        document = {
            "evidenceId": urn(uuid.uuid5(_NAMESPACE, f"evidence:{submission_id(submission)}:{index}:{digest}")),
            "missionId": urn(item.mission_id),
            "groupId": urn(item.group_id),
            "workItemId": urn(item.id),
            "type": STAGE_TYPES[r["stage"]],
            "subject": subject,
            "criterionIds": list(dict.fromkeys(r["criteria"])),
            "method": f"{r['stage']}: {r['kind']}",
            "result": RESULTS[r["result"]],
            "details": {"stage": r["stage"], "kind": r["kind"], **r["details"]},
            "artifactHashes": artifacts,
            "generatedBy": {"type": "service", "id": principal},
            "createdAt": created,
        }
        out.append(sign_document(document, key_id=key.key_id, seed=key.seed, profile="evidence"))
    return out


def run_review(workitem_id: str) -> dict[str, Any] | None:
    """Review the latest authoritative submission of the WorkItem and record
    the results; returns the receipt of ``ext.mwportal.review.result_record``
    (None when there is no submission). Reviewing a review WorkItem also
    re-reviews its subject, so the reviewer's Evidence reaches the subject's
    combined evaluation."""
    item = WorkItem.objects.filter(id=workitem_id).select_related("group").first()
    if item is None:
        return None
    submission = Submission.objects.filter(workitem=item, authoritative=True).order_by("-id").first()
    if submission is None:
        return None
    results, wanted = evaluate(item, submission)
    evidence = evidence_documents(item, submission, results)
    payload = {
        "workItemId": urn(item.id),
        "submissionId": submission_id(submission),
        "evidence": evidence,
        "requestReview": wanted,
    }
    digest = hashlib.sha256(jcs.canonicalize(payload)).hexdigest()
    # A reviewer who joined after a run that found none makes the next run a new
    # Command, which requests the review; the same reviewers replay it.
    reviewers = reviewer_candidates(str(item.group_id), str(submission.agent_id)) if wanted else []
    found = f":{','.join(reviewers)}" if reviewers else ""
    receipt = accept(
        group_service_command(
            REVIEW_RECORD,
            str(item.group_id),
            payload,
            action_id=str(uuid.uuid5(_NAMESPACE, f"review:{submission_id(submission)}:{digest}{found}")),
            # Deterministic with the action ID: the same findings are the
            # same Command, replayed rather than appended again.
            issued_at=submission.created_at,
            work_item_id=str(item.id),
        )
    )
    request = ReviewRequest.objects.filter(review_workitem=item).first()
    if request is not None:
        run_review(str(request.subject_id))
    return receipt


def reviewer_candidates(group_id: str, submitter: str) -> list[str]:
    """The Group's active ``reviewer`` members who may review a submission: never its submitter
    (§13.2), at most ``MWP_MAX_OFFER_CANDIDATES`` of them, by id."""
    return sorted(
        str(m.agent_id)
        for m in Membership.objects.filter(group_id=group_id, active=True)
        if "reviewer" in m.roles and str(m.agent_id) != submitter
    )[: settings.MWP_MAX_OFFER_CANDIDATES]


def _reader(sha: str, size: int, integrity: str) -> Any:
    def read(limit: int) -> bytes | None:
        if integrity != "verified" or size > limit:
            return None
        parts = []
        with storage().open(blob_name(sha), "rb") as fh:
            while chunk := fh.read(CHUNK):
                parts.append(chunk)
        return b"".join(parts)

    return read


def _manifest_state(item: WorkItem, sha: str, blob: Blob | None) -> str:
    """``verified``, ``absent``, or what is wrong with the signed manifest."""
    artifact = (
        Artifact.objects.filter(sha256=sha, workitem=item).first()
        or Artifact.objects.filter(sha256=sha, group_id=item.group_id).order_by("id").first()
    )
    if artifact is None:
        return "absent"
    organization = Organization.objects.get(id=item.group.organization_id)
    try:
        verify_document(jcs.canonicalize(artifact.manifest), "artifact", DjangoRegistry(organization))
    except VerificationFailed:
        return "bad_signature"
    if blob is not None and (blob.size != artifact.size or blob.media_type != artifact.media_type):
        return "disagrees_with_content"
    return "verified"


OWN = {"passed": "pass", "failed": "fail", "inconclusive": "inconclusive"}


def evaluate(item: WorkItem, submission: Submission) -> tuple[list[dict[str, Any]], list[str]]:
    """The pipeline's findings for one submission (reads only): one result per
    check (``stage``, ``criteria``, ``kind``, ``artifacts`` as hex hashes,
    ``result`` pass/fail/inconclusive, ``details``) and the criteria that still
    need a reviewer's Evidence."""
    criteria = criteria_of(item)
    ids = [c["criterionId"] for c in criteria]
    cited: dict[str, set[str]] = {}
    for record in submission.evidence:
        for sha in record["artifactHashes"]:
            cited.setdefault(sha.removeprefix("sha256:"), set()).update(record["criterionIds"])
    hashes = list(dict.fromkeys([*submitted_hashes(item, submission), *cited]))
    blobs = {b.sha256: b for b in Blob.objects.filter(sha256__in=hashes)}
    results: list[dict[str, Any]] = []
    subjects: dict[str, registry.Subject] = {}

    # Stage 1a: integrity of every Artifact, and its signed manifest.
    for sha in hashes:
        blob = blobs.get(sha)
        integrity = blob_integrity(sha) if blob is not None else "missing"
        manifest = _manifest_state(item, sha, blob)
        if integrity != "verified" or manifest not in ("verified", "absent"):
            result = "fail"
        else:
            result = "pass" if manifest == "verified" else "inconclusive"
        observed: dict[str, Any] = {"hash": integrity, "manifest": manifest}
        if blob is not None:
            observed |= {"mediaType": blob.media_type, "sizeBytes": blob.size}
        results.append({
            "stage": "integrity", "criteria": sorted(cited.get(sha) or ids), "kind": "artifact_integrity",
            "artifacts": [sha], "result": result, "details": observed,
        })  # fmt: skip
        if blob is not None:
            subjects[sha] = registry.Subject(
                sha, blob.media_type, blob.size, integrity, _reader(sha, blob.size, integrity)
            )

    # Stages 1b and 2: the contract's checks, schema checks first.
    declared = declared_checks(item.contract)
    for stage in ("schema", "deterministic"):
        for criterion in criteria:
            c = criterion["criterionId"]
            mine = [s for s, crits in cited.items() if c in crits] or list(hashes)
            for spec in declared.get(c, []):
                kind = registry.CHECKS.get(spec["kind"])
                if kind is None or kind.stage != stage:
                    continue
                chosen = [subjects[s] for s in mine if s in subjects]
                if "media_type" in spec:
                    chosen = [s for s in chosen if s.media_type == spec["media_type"]]
                missing = [s for s in mine if s not in subjects]
                if missing:
                    outcome = registry.Outcome("fail", {"missing": missing})
                elif not chosen:
                    outcome = registry.Outcome("fail", {"reason": "no Artifact to check"})
                else:
                    # Never raises: a crashing check is recorded as failed
                    # with its reason (issue 16 item 7).
                    outcome = registry.run_check(kind, spec, chosen)
                results.append({
                    "stage": stage, "criteria": [c], "kind": spec["kind"],
                    "artifacts": [s.sha256 for s in chosen], "result": outcome.result, "details": outcome.details,
                })  # fmt: skip

    # Stage 3: reviewer-Agent Evidence (none for a review WorkItem itself).
    is_review = ReviewRequest.objects.filter(review_workitem=item).exists()
    reviewer = {} if is_review else reviewer_evidence(item, submission)
    wanted: list[str] = []
    for criterion in criteria:
        c = criterion["criterionId"]
        if is_review or REVIEWER not in criterion["evidenceRequired"]:
            continue
        found = reviewer.get(c, [])
        if not found:
            wanted.append(c)
            continue
        results.append({
            "stage": "reviewer", "criteria": [c], "kind": "reviewer_evidence",
            "artifacts": sorted({a.removeprefix("sha256:") for r in found for a in r["artifactHashes"]}),
            "result": _worst(OWN[r["result"]] for r in found),
            "details": {"producers": sorted({r["generatedBy"]["id"] for r in found})},
        })  # fmt: skip

    # Stage 4: the combined evaluation per criterion.
    for criterion in criteria:
        c = criterion["criterionId"]
        own = [OWN[r["result"]] for r in submission.evidence if c in r["criterionIds"]]
        found_checks = [r["result"] for r in results if c in r["criteria"]]
        pending = c in wanted
        combined = combine(own, found_checks, pending)
        results.append({
            "stage": "combined", "criteria": [c], "kind": "combined_evaluation", "artifacts": [],
            "result": "inconclusive" if combined == "pending" else combined,
            "details": {"outcome": combined, "submitted": own, "checks": found_checks},
        })  # fmt: skip
    return results, wanted


def _worst(results: Any) -> str:
    found = set(results)
    if "fail" in found:
        return "fail"
    if "inconclusive" in found or not found:
        return "inconclusive"
    return "pass"


def combine(submitted: list[str], checks: list[str], pending_reviewer: bool) -> str:
    """One criterion's combined outcome: ``fail`` when any Evidence or check
    failed; ``pending`` while reviewer Evidence is awaited; ``inconclusive``
    when something is; ``pass`` otherwise (and only with some passing
    Evidence)."""
    everything = [*submitted, *checks]
    if "fail" in everything:
        return "fail"
    if pending_reviewer:
        return "pending"
    if "inconclusive" in everything or "pass" not in everything:
        return "inconclusive"
    return "pass"


def reviewer_evidence(item: WorkItem, submission: Submission) -> dict[str, list[dict[str, Any]]]:
    """Evidence submitted through this submission's review WorkItem(s), by criterion."""
    out: dict[str, list[dict[str, Any]]] = {}
    for request in ReviewRequest.objects.filter(subject=item, submission=submission):
        rows = Evidence.objects.filter(workitem_id=request.review_workitem_id, origin="submission").order_by("id")
        latest = rows.order_by("-sequence").values_list("sequence", flat=True).first()
        for row in rows.filter(sequence=latest) if latest is not None else []:
            for c in row.criteria:
                if c in request.criteria:
                    out.setdefault(c, []).append(row.as_record())
    return out


# --- the summary a Coordinator's review page shows -------------------------------


OUTCOMES = {**RESULTS, "pending": "pending"}


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def review_summary(workitem: WorkItem) -> dict[str, Any]:
    """Everything the Coordinator review page and ``GET /api/v0.1/work-items/{id}/review`` show (read only).

    Returns (identifiers ``urn:uuid:``, hashes ``sha256:``)::

        {"workItemId", "groupId", "state",
         "submission": {"submissionId", "agentId", "submittedAt", "executionLeaseId", "artifactIds"} | None,
         "review": {"status": "not_submitted" | "pending" | "recorded", "recordedSequence": int | None,
                    "outcome": "passed" | "failed" | "inconclusive" | "pending" | None,
                    "requests": [{"reviewWorkItemId", "state", "criterionIds"}]},
         "criteria": [{"criterionId", "description", "evidenceRequired", "checks" (declared),
                       "evidence": [the Worker's Evidence citing it],
                       "results": [{"stage", "kind", "method", "result", "artifactHashes", "details"}],
                       "reviewerEvidence": [Evidence of reviewer Agents],
                       "outcome": "passed" | "failed" | "inconclusive" | "pending" | None}],
         "artifacts": [{"contentHash", "mediaType", "sizeBytes", "integrity" (last check of the stored bytes:
                        verified | mismatch | missing | unchecked), "integrityCheckedAt", "manifest" (signed) | None,
                        "manifestState", "downloadUrl", "criterionIds"}],
         "retained": [{"evidence", "origin", "stage", "sequence"}: every Evidence record of this WorkItem]}

    ``outcome`` per criterion is the latest recorded combined evaluation of
    the pipeline (``None`` before it ran). The caller must have checked that
    the viewer may read the WorkItem's Group (``missions.access.access_group``).
    """
    submission = Submission.objects.filter(workitem=workitem, authoritative=True).order_by("-id").first()
    criteria = criteria_of(workitem)
    declared = declared_checks(workitem.contract)
    runs = Evidence.objects.filter(workitem=workitem, origin="review")
    if submission is not None:
        runs = runs.filter(submission=submission)
    latest = runs.order_by("-sequence").values_list("sequence", flat=True).first()
    recorded = list(runs.filter(sequence=latest).order_by("id")) if latest is not None else []
    reviewer = reviewer_evidence(workitem, submission) if submission is not None else {}
    own = submission.evidence if submission is not None else []
    cited: dict[str, set[str]] = {}
    for record in own:
        for sha in record["artifactHashes"]:
            cited.setdefault(sha.removeprefix("sha256:"), set()).update(record["criterionIds"])
    rows = []
    for criterion in criteria:
        c = criterion["criterionId"]
        mine = [r for r in recorded if c in r.criteria]
        combined = next((r for r in mine if r.stage == "combined"), None)
        rows.append({
            "criterionId": c, "description": criterion["description"],
            "evidenceRequired": criterion["evidenceRequired"], "checks": declared.get(c, []),
            "evidence": [r for r in own if c in r["criterionIds"]],
            "results": [{"stage": r.stage, "kind": r.details.get("kind", r.method), "method": r.method,
                         "result": r.result, "artifactHashes": [wire_hash(a) for a in r.artifacts],
                         "details": r.details}
                        for r in mine if r.stage != "combined"],
            "reviewerEvidence": reviewer.get(c, []),
            "outcome": OUTCOMES[combined.details.get("outcome", "inconclusive")] if combined else None,
        })  # fmt: skip
    hashes = list(dict.fromkeys([*(submitted_hashes(workitem, submission) if submission else []), *cited]))
    blobs = {b.sha256: b for b in Blob.objects.filter(sha256__in=hashes)}
    artifacts = []
    for sha in hashes:
        blob = blobs.get(sha)
        manifest = Artifact.objects.filter(sha256=sha, workitem=workitem).first()
        integrity_row = next((r for r in recorded if r.stage == "integrity" and sha in r.artifacts), None)
        artifacts.append({
            "contentHash": wire_hash(sha), "mediaType": blob.media_type if blob else None,
            "sizeBytes": blob.size if blob else None, "integrity": blob.integrity if blob else "missing",
            "integrityCheckedAt": _when(blob.integrity_checked_at) if blob and blob.integrity_checked_at else None,
            "manifest": manifest.manifest if manifest else None,
            "manifestState": integrity_row.details.get("manifest") if integrity_row else None,
            "downloadUrl": f"/api/v0.1/artifacts/{wire_hash(sha)}", "criterionIds": sorted(cited.get(sha, set())),
        })  # fmt: skip
    outcomes = [r["outcome"] for r in rows]
    if submission is None:
        status, overall = "not_submitted", None
    elif latest is None:
        status, overall = "pending", None
    else:
        status = "recorded"
        overall = next(
            (o for o in ("failed", "pending", "inconclusive") if o in outcomes), "passed" if outcomes else None
        )
    requests = [
        {"reviewWorkItemId": urn(r.review_workitem_id), "state": r.review_workitem.state, "criterionIds": r.criteria}
        for r in ReviewRequest.objects.filter(subject=workitem).select_related("review_workitem").order_by("id")
    ]
    retained = [
        {"evidence": e.as_record(), "origin": e.origin, "stage": e.stage, "sequence": e.sequence}
        for e in Evidence.objects.filter(workitem=workitem).order_by("sequence", "id")
    ]
    return {
        "workItemId": urn(workitem.id),
        "groupId": urn(workitem.group_id),
        "state": workitem.state,
        "submission": None
        if submission is None
        else {
            "submissionId": submission_id(submission),
            "agentId": urn(submission.agent_id),
            "submittedAt": _when(submission.created_at),
            "executionLeaseId": urn(submission.lease_id) if submission.lease_id else None,
            "artifactIds": list(submission.artifacts),
        },  # fmt: skip
        "review": {"status": status, "recordedSequence": latest, "outcome": overall, "requests": requests},
        "criteria": rows,
        "artifacts": artifacts,
        "retained": retained,
    }


def review_now(workitem_id: str) -> dict[str, Any] | None:
    """Run the pipeline, answering None when the WorkItem moved on (refused)."""
    try:
        return run_review(workitem_id)
    except ProtocolError as exc:
        log.info("review of %s not recorded: %s", workitem_id, exc)
        return None
