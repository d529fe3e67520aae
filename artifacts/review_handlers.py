"""The handler of the review pipeline's Command, ``ext.mwportal.review.result_record`` (PROTOCOL §13.2).

Issued by the control plane only (``artifacts.review.run_review``): one run of
the pipeline's findings for one submission, each finding a normative Evidence
document the control plane signed. Everything is kept for the final human
Approval. When ``requestReview`` names qualitative criteria and no review
WorkItem exists for the submission yet, one is authorized and offered to the
Group's ``reviewer`` members (never the submitter) in the same transaction:
``work.authorized`` and ``work.offer.created`` as for any WorkItem.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings

from missions.authority import AggregateRef, Decision, Emit, HandlerContext
from missions.models import Mission
from missions.registry import command
from mwportal.protocol import malformed
from mwportal.protocol.ids import bare, urn
from workitems import state_machine as sm
from workitems.contract import check_contract, criteria_ids
from workitems.documents import work_item_document
from workitems.evidence import check_evidence
from workitems.handlers import item_ref
from workitems.models import Offer, Submission, WorkItem
from workitems.wire import when

from .guards import not_found, verify_signed
from .handlers import record_evidence
from .models import ReviewRequest
from .review import (
    REVIEW_RECORD,
    REVIEWER,
    STAGE_TYPES,
    criteria_of,
    reviewer_candidates,
    submission_id,
    submitted_hashes,
)
from .store import wire_hash

RECORDED = "ext.mwportal.review.result_recorded"
REQUESTED = "ext.mwportal.review.requested"
UNAVAILABLE = "ext.mwportal.review.reviewer_unavailable"
_STAGES = {kind: stage for stage, kind in STAGE_TYPES.items()}
# The capability a review WorkItem asks of its reviewer.
REVIEW_CAPABILITY = {"id": "mwportal.review", "version": "1.0.0"}


@command(REVIEW_RECORD, actors=("service",))
def record_review(ctx: HandlerContext) -> Decision:
    """Record one run of the review pipeline for a submission (§13.2).

    Every Evidence document is about this WorkItem, cites criteria of its
    contract and Artifacts this Group holds (``check_evidence``), is generated
    by the issuing control plane and carries its valid signature.
    """
    p = ctx.payload
    item_id = bare(p["workItemId"], "/payload/workItemId")
    # Locked after the Group row (lock order); the pipeline's reads happened
    # before this Command, its results are appended as they were found.
    item = WorkItem.objects.select_for_update().filter(id=item_id, group_id=ctx.group.id).first()
    if item is None:
        raise not_found(f"no WorkItem {urn(item_id)} in this Group", workItemId=urn(item_id))
    wanted_id = p["submissionId"]
    submission = next(
        (s for s in Submission.objects.filter(workitem=item, authoritative=True) if submission_id(s) == wanted_id),
        None,
    )
    if submission is None:
        raise not_found(f"no submission {wanted_id} of this WorkItem", submissionId=wanted_id)
    evidence = check_evidence(ctx, item, p["evidence"], generated_by_actor=True)
    for i, record in enumerate(evidence):
        verify_signed(ctx, record, "evidence", f"/payload/evidence/{i}")
    criteria = criteria_ids(item.contract)
    wanted = p["requestReview"]
    for i, c in enumerate(wanted):
        if c not in criteria:
            raise malformed(f"/payload/requestReview/{i}", "must name an acceptance criterion of the contract")
    stages = [str(r.get("details", {}).get("stage") or _STAGES.get(r["type"], "")) for r in evidence]
    payload = {"workItemId": urn(item.id), "submissionId": wanted_id, "evidence": evidence}
    events = [Emit(RECORDED, item_ref(item), payload, work_item_id=str(item.id))]
    record_evidence(ctx, item, evidence, "review", submission=submission, stages=stages)
    if wanted and not ReviewRequest.objects.filter(submission=submission).exists():
        events += _open_review(ctx, item, submission, wanted)
    return Decision(events, item_ref(item))


def _review_contract(item: WorkItem, submission: Submission, wanted: list[str]) -> dict[str, Any]:
    """The Work Contract of a review WorkItem: reviewer Evidence for each ``wanted`` criterion."""
    by_id = {c["criterionId"]: c for c in criteria_of(item)}
    subject = item.contract
    return {
        "contractVersion": 1,
        "goal": f"Review the submission of WorkItem {urn(item.id)} against its qualitative criteria",
        "requiredDeliverables": [
            {
                "deliverableId": "review",
                "description": "reviewer Evidence for each listed criterion",
                "mediaType": "application/json",
                "schema": "https://missionweaveprotocol.dev/schemas/0.1/evidence.schema.json",
            }
        ],
        "acceptanceCriteria": [
            {"criterionId": c, "description": by_id[c]["description"], "evidenceRequired": [REVIEWER]} for c in wanted
        ],
        "inputArtifacts": [wire_hash(h) for h in submitted_hashes(item, submission)],
        "dependencyWorkItemIds": [],
        "allowedResources": [],
        "requiredCapabilities": [REVIEW_CAPABILITY],
        "deadline": subject["deadline"],
        "requestedUrgency": subject["requestedUrgency"],
        "businessImpact": subject["businessImpact"],
        "retryPolicy": {"maxAttempts": 1, "backoff": "none", "maxDelay": "PT0S", "retryableFailures": []},
        "budget": subject["budget"],
        "sideEffectRisk": "none",
        "executionApproval": "not_required",
        "constraints": {"review": {"workItemId": urn(item.id), "submissionId": submission_id(submission)}},
    }


def _open_review(ctx: HandlerContext, item: WorkItem, submission: Submission, wanted: list[str]) -> list[Emit]:
    """Authorize a review WorkItem for the qualitative criteria and offer it to
    the Group's reviewers (§13.2: request reviewer-Agent Evidence)."""
    reviewers = reviewer_candidates(str(ctx.group.id), str(submission.agent_id))
    if not reviewers:
        payload = {"workItemId": urn(item.id), "criterionIds": wanted}
        return [Emit(UNAVAILABLE, item_ref(item), payload, work_item_id=str(item.id))]
    review_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"mwp:review:{item.id}:{submission.id}"))
    contract = check_contract(_review_contract(item, submission, wanted))  # the rules of any contract
    mission = Mission.objects.get(group_id=ctx.group.id)
    sm.check_transition(None, "work.authorize")
    review = WorkItem.objects.create(
        id=review_id, group_id=ctx.group.id, mission=mission, state=sm.OPEN, contract=contract,
        contract_revision=1, created_at=ctx.now, updated_at=ctx.now, revision=1,
    )  # fmt: skip
    authorized = {"workItem": work_item_document(review, ctx.actor.principal)}
    ReviewRequest.objects.create(
        review_workitem=review, subject=item, submission=submission, criteria=wanted, created_at=ctx.now
    )
    sm.check_transition(sm.OPEN, "work.offer")
    expires_at = ctx.now + timedelta(seconds=settings.MWP_REVIEW_OFFER_SECONDS)
    # The Group's reviewer role is what qualifies a candidate for the review capability.
    basis = {
        "requiredCapabilities": [REVIEW_CAPABILITY],
        "verifiedMatches": [REVIEW_CAPABILITY],
        "authorizationEligible": True,
        "availabilityEstimate": when(ctx.now),
        "expectedCost": 0,
        "reliabilityEvidence": [],
        "policyRulesApplied": [
            "review: every reviewer member of the Group except the submitter",
            "review: the reviewer role of the Group stands for the mwportal.review capability",
        ],
    }
    Offer.objects.bulk_create(
        [
            Offer(workitem=review, agent_id=a, contract_revision=1, selection_basis=basis, created_at=ctx.now,
                  expires_at=expires_at)
            for a in reviewers
        ]
    )  # fmt: skip
    review.state, review.revision = sm.OFFERED, 2
    review.save(update_fields=["state", "revision"])
    offered = {
        "workItemId": urn(review_id),
        "candidateAgentIds": [urn(a) for a in reviewers],
        "offerExpiresAt": when(expires_at),
        "selectionBasis": basis,
        "contractVersion": 1,
    }
    requested = {
        "workItemId": urn(item.id),
        "reviewWorkItemId": urn(review_id),
        "criterionIds": wanted,
        "reviewerIds": [urn(a) for a in reviewers],
    }
    return [
        Emit(REQUESTED, item_ref(item), requested, work_item_id=str(item.id)),
        Emit("work.authorized", AggregateRef("work_item", review_id, 1), authorized, work_item_id=review_id),
        Emit("work.offer.created", AggregateRef("work_item", review_id, 2), offered, work_item_id=review_id),
    ]
