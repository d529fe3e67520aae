"""The review pipeline (spec 13.2) and the per-WorkItem review summary.

A Worker's claim of completion is never enough. After ``work.submit``
commits, ``run_review(workitem_id)`` reviews the latest authoritative
submission, in the order of spec 13.2:

1. **Artifact integrity and output schemas**: every submitted or cited
   Artifact's stored bytes are hashed again (a mismatch is recorded on the
   blob and fails every criterion whose Evidence cites it), its signed
   manifest is verified (producer signature, size, media type); then the
   contract's ``json_schema`` checks run;
2. **deterministic checks** declared in the contract (``workitems/checks.py``);
3. **reviewer-Agent Evidence** for criteria whose evidence methods include
   ``reviewer``: a review WorkItem is offered to the Group's ``reviewer``
   members; when its reviewer submits, the subject is reviewed again and the
   reviewer's Evidence joins in;
4. **combined evaluation** per criterion and overall;
5. everything is **retained** as Evidence records and ``review.recorded``
   Events for the final human Approval.

The pipeline reads outside any transaction and records its results with the
system Command ``review.record`` through ``accept()``; its action ID derives
from the submission and the results, so running it twice with the same
findings appends nothing new.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from django.conf import settings
from django.db import transaction

from missions.authority import accept, system_action_id
from missions.commands import system_command
from missions.models import Agent
from mwportal.protocol import ProtocolError, canonicalize
from mwportal.protocol.documents import verify_document
from workitems import checks as registry
from workitems.models import Submission, WorkItem

from .models import Artifact, Blob, Evidence, ReviewRequest
from .store import CHUNK, blob_integrity, blob_name, storage

log = logging.getLogger("missions.review")
RESULTS = ("pass", "fail", "inconclusive")


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


def run_review(workitem_id: str) -> dict[str, Any] | None:
    """Review the latest authoritative submission of the WorkItem and record
    the results; returns the receipt of ``review.record`` (None when there is
    no submission). Reviewing a review WorkItem also re-reviews its subject,
    so the reviewer's Evidence reaches the subject's combined evaluation."""
    item = WorkItem.objects.filter(id=workitem_id).first()
    if item is None:
        return None
    submission = Submission.objects.filter(workitem=item, authoritative=True).order_by("-id").first()
    if submission is None:
        return None
    results, wanted = evaluate(item, submission)
    body = {"workitem": str(item.id), "submission": submission.id, "results": results, "request_review": wanted}
    digest = hashlib.sha256(canonicalize({"results": results, "request_review": wanted})).hexdigest()
    receipt = accept(
        system_command(
            "review.record",
            str(item.group_id),
            body,
            action_id=system_action_id("review", submission.id, digest),
            # Deterministic with the action ID: the same findings are the
            # same Command, replayed rather than appended again.
            issued_at=submission.created_at,
        )
    )
    request = ReviewRequest.objects.filter(review_workitem=item).first()
    if request is not None:
        run_review(str(request.subject_id))
    return receipt


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
    key = Agent.objects.filter(id=artifact.producer_id).values_list("public_key", flat=True).first() or ""
    if not verify_document(key, artifact.manifest):
        return "bad_signature"
    if blob is not None and (blob.size != artifact.size or blob.media_type != artifact.media_type):
        return "disagrees_with_content"
    return "verified"


def evaluate(item: WorkItem, submission: Submission) -> tuple[list[dict[str, Any]], list[str]]:
    """The pipeline's findings for one submission (reads only): the result
    list of ``review.record`` and the criteria that still need a reviewer."""
    criteria = item.contract["acceptance_criteria"]
    ids = [c["id"] for c in criteria]
    cited: dict[str, set[str]] = {}
    for record in submission.evidence:
        for sha in record["artifacts"]:
            cited.setdefault(sha, set()).update(record["criteria"])
    hashes = list(dict.fromkeys([*submission.artifacts, *cited]))
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
        results.append({
            "stage": "integrity", "criteria": sorted(cited.get(sha) or ids), "kind": "artifact_integrity",
            "artifacts": [sha], "result": result,
            "details": {"hash": integrity, "manifest": manifest, "media_type": blob.media_type if blob else None,
                        "size": blob.size if blob else None},
        })  # fmt: skip
        if blob is not None:
            subjects[sha] = registry.Subject(
                sha, blob.media_type, blob.size, integrity, _reader(sha, blob.size, integrity)
            )

    # Stages 1b and 2: the contract's checks, schema checks first.
    for stage in ("schema", "deterministic"):
        for criterion in criteria:
            mine = [s for s, crits in cited.items() if criterion["id"] in crits] or list(hashes)
            for spec in criterion.get("checks", []):
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
                    "stage": stage, "criteria": [criterion["id"]], "kind": spec["kind"],
                    "artifacts": [s.sha256 for s in chosen], "result": outcome.result, "details": outcome.details,
                })  # fmt: skip

    # Stage 3: reviewer-Agent Evidence (none for a review WorkItem itself).
    is_review = ReviewRequest.objects.filter(review_workitem=item).exists()
    reviewer = {} if is_review else reviewer_evidence(item, submission)
    wanted: list[str] = []
    for criterion in criteria:
        c = criterion["id"]
        if is_review or "reviewer" not in criterion["evidence_methods"]:
            continue
        found = reviewer.get(c, [])
        if not found:
            wanted.append(c)
            continue
        results.append({
            "stage": "reviewer", "criteria": [c], "kind": "reviewer_evidence",
            "artifacts": sorted({a for r in found for a in r["artifacts"]}),
            "result": _worst(r["result"] for r in found),
            "details": {"producers": sorted({r["producer"] for r in found})},
        })  # fmt: skip

    # Stage 4: the combined evaluation per criterion.
    for criterion in criteria:
        c = criterion["id"]
        own = [r["result"] for r in submission.evidence if c in r["criteria"]]
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


def review_summary(workitem: WorkItem) -> dict[str, Any]:
    """Everything the Coordinator review page shows for one WorkItem (read only).

    Returns::

        {"workitem": id, "group": id, "state": str,
         "submission": {"id", "agent", "created_at", "lease_id", "artifacts": [sha]} | None,
         "review": {"status": "not_submitted" | "pending" | "recorded",
                    "recorded_sequence": int | None, "outcome": "pass" | "fail" | "inconclusive" | "pending" | None,
                    "requests": [{"review_workitem", "state", "criteria"}]},
         "criteria": [{"id", "description", "evidence_methods", "checks" (declared),
                       "evidence": [Evidence records the Worker mapped to it],
                       "results": [{"stage", "kind", "result", "artifacts", "details"}],
                       "reviewer_evidence": [Evidence records of reviewer Agents],
                       "outcome": "pass" | "fail" | "inconclusive" | "pending" | None}],
         "artifacts": [{"sha256", "media_type", "size", "integrity" (last check of the stored bytes:
                        verified | mismatch | missing | unchecked), "integrity_checked_at",
                        "manifest": signed manifest | None, "manifest_state", "download_url",
                        "criteria": [ids citing it]}],
         "retained": [every Evidence record of this WorkItem with origin, stage and sequence]}

    ``outcome`` per criterion is the latest recorded combined evaluation of
    the pipeline (``None`` before it ran). The caller must have checked that
    the viewer may read the WorkItem's Group (``missions.access.access_group``).
    """
    from mwportal.protocol import format_time

    submission = Submission.objects.filter(workitem=workitem, authoritative=True).order_by("-id").first()
    criteria = workitem.contract["acceptance_criteria"]
    runs = Evidence.objects.filter(workitem=workitem, origin="review")
    if submission is not None:
        runs = runs.filter(submission=submission)
    latest = runs.order_by("-sequence").values_list("sequence", flat=True).first()
    recorded = list(runs.filter(sequence=latest).order_by("id")) if latest is not None else []
    reviewer = reviewer_evidence(workitem, submission) if submission is not None else {}
    cited: dict[str, set[str]] = {}
    for record in submission.evidence if submission else []:
        for sha in record["artifacts"]:
            cited.setdefault(sha, set()).update(record["criteria"])
    rows = []
    for criterion in criteria:
        c = criterion["id"]
        mine = [r for r in recorded if c in r.criteria]
        combined = next((r for r in mine if r.stage == "combined"), None)
        rows.append({
            "id": c, "description": criterion["description"], "evidence_methods": criterion["evidence_methods"],
            "checks": criterion.get("checks", []),
            "evidence": [r for r in (submission.evidence if submission else []) if c in r["criteria"]],
            "results": [{"stage": r.stage, "kind": r.details.get("kind", r.method), "method": r.method,
                         "result": r.result, "artifacts": r.artifacts, "details": r.details}
                        for r in mine if r.stage != "combined"],
            "reviewer_evidence": reviewer.get(c, []),
            "outcome": combined.details.get("outcome", combined.result) if combined else None,
        })  # fmt: skip
    hashes = list(dict.fromkeys([*(submission.artifacts if submission else []), *cited]))
    blobs = {b.sha256: b for b in Blob.objects.filter(sha256__in=hashes)}
    artifacts = []
    for sha in hashes:
        blob = blobs.get(sha)
        manifest = Artifact.objects.filter(sha256=sha, workitem=workitem).first()
        integrity_row = next((r for r in recorded if r.stage == "integrity" and sha in r.artifacts), None)
        artifacts.append({
            "sha256": sha, "media_type": blob.media_type if blob else None, "size": blob.size if blob else None,
            "integrity": blob.integrity if blob else "missing",
            "integrity_checked_at": format_time(blob.integrity_checked_at) if blob and blob.integrity_checked_at
            else None,
            "manifest": manifest.manifest if manifest else None,
            "manifest_state": integrity_row.details.get("manifest") if integrity_row else None,
            "download_url": f"/api/v1/artifacts/{sha}", "criteria": sorted(cited.get(sha, set())),
        })  # fmt: skip
    outcomes = [r["outcome"] for r in rows]
    if submission is None:
        status, overall = "not_submitted", None
    elif latest is None:
        status, overall = "pending", None
    else:
        status = "recorded"
        overall = next((o for o in ("fail", "pending", "inconclusive") if o in outcomes), "pass" if outcomes else None)
    requests = [
        {"review_workitem": str(r.review_workitem_id), "state": r.review_workitem.state, "criteria": r.criteria}
        for r in ReviewRequest.objects.filter(subject=workitem).select_related("review_workitem").order_by("id")
    ]
    retained = [
        {**e.as_record(), "origin": e.origin, "stage": e.stage, "sequence": e.sequence}
        for e in Evidence.objects.filter(workitem=workitem).order_by("sequence", "id")
    ]
    return {
        "workitem": str(workitem.id),
        "group": str(workitem.group_id),
        "state": workitem.state,
        "submission": None
        if submission is None
        else {
            "id": submission.id,
            "agent": str(submission.agent_id),
            "created_at": format_time(submission.created_at),
            "lease_id": str(submission.lease_id) if submission.lease_id else None,
            "artifacts": submission.artifacts,
        },  # fmt: skip
        "review": {"status": status, "recorded_sequence": latest, "outcome": overall, "requests": requests},
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
