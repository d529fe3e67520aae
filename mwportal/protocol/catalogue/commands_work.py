"""Command definitions: WorkItems, their leases and budgets, Artifacts, review, execution approval."""

from __future__ import annotations

from ..schemas.common import MEDIA_TYPE
from ..schemas.dsl import array, boolean, c, enum, ids, string, text
from . import examples as ex
from .commands_group import PROJECT, define
from .model import (
    ARTIFACT,
    CANDIDATES,
    CHECKPOINT,
    CRITERION_KEY,
    EVIDENCE_LIST,
    HASH,
    ID,
    POSITIVE,
    PROGRESS,
    REASON,
    SECONDS,
    SELECTION_BASIS,
    TIME,
    USAGE,
    WORK_CONTRACT,
    CommandDefinition,
)

_OWNED = {"workItemId": ID, "ownershipEpoch": POSITIVE}
_LEASED = {**_OWNED, "executionLeaseId": ID}
_AUTHORS = ("coordinator", "work_delegate", "mission_owner")
_USAGE_RECORDED = "ext.missionweaveprotocol.core.resource_usage_recorded"

_OWNED_EXAMPLE = {"workItemId": ex.WORK_ITEM, "ownershipEpoch": 1}
_LEASED_EXAMPLE = {**_OWNED_EXAMPLE, "executionLeaseId": ex.LEASE_ID}

PLANNING = (
    define(
        "work.propose",
        {"proposalId": ID, "contract": WORK_CONTRACT},
        {"dependencyIds": ids(), "parentWorkItemId": ID},
        issuers=("member",),
        aggregate="work_proposal",
        events=("work.proposed", f"{PROJECT}.governance.soft_threshold_reached"),
        summary="Any member proposes sub-work; no WorkItem exists yet (§9, §10.2).",
        example={
            "proposalId": ex.uid(60),
            "contract": ex.work_contract(),
            "dependencyIds": [],
            "parentWorkItemId": None,
        },
    ),
    define(
        "work.authorize",
        {"workItemId": ID, "contract": WORK_CONTRACT},
        {"dependencyIds": ids(), "proposalId": ID, "parentWorkItemId": ID, "delegationGrantId": ID},
        issuers=_AUTHORS,
        aggregate="work_item",
        events=("work.authorized", f"{PROJECT}.governance.soft_threshold_reached"),
        summary="The Coordinator or a scoped delegate creates the WorkItem under its Work Contract (§9.1, §10).",
        example={"workItemId": ex.WORK_ITEM, "contract": ex.work_contract(), "proposalId": None},
    ),
    define(
        "ext.missionweaveprotocol.core.work_dependency_add",
        {"workItemId": ID, "dependencyId": ID},
        issuers=("coordinator",),
        aggregate="work_item",
        events=("work.contract.revised",),
        cas=True,
        summary="A new dependency edge revises the Work Contract; a cycle is refused (§10.4).",
        example={"workItemId": ex.WORK_ITEM, "dependencyId": ex.uid(61)},
    ),
    define(
        "work.offer",
        {"workItemId": ID, "candidateAgentIds": CANDIDATES, "selectionBasis": SELECTION_BASIS},
        {
            "offerExpiresInSeconds": SECONDS,
            "offerExpiresAt": TIME,
            "delegationGrantId": ID,
            "contract": WORK_CONTRACT,
            "contextPackageId": ID,
        },
        # "service": the Organization's retry policy re-offers a failed attempt (§11.4).
        issuers=(*_AUTHORS, "service"),
        aggregate="work_item",
        events=(
            "work.offer.created",
            f"{PROJECT}.work.ownership_fenced",
            f"{PROJECT}.governance.soft_threshold_reached",
            "membership.ended",
        ),
        cas=True,
        summary=(
            "A durable, expiring offer to ranked candidates; an expired owner is fenced first (§10.3). "
            "The control plane's is the retry policy's re-offer of a failed attempt (§11.4)."
        ),
        example={
            "workItemId": ex.WORK_ITEM,
            "candidateAgentIds": [ex.WORKER["id"]],
            "selectionBasis": ex.selection_basis(),
            "offerExpiresInSeconds": 600,
            "delegationGrantId": None,
        },
    ),
    define(
        "work.accept_offer",
        {"workItemId": ID},
        {"ownershipLeaseSeconds": SECONDS},
        issuers=("worker",),
        aggregate="work_item",
        events=("work.offer.accepted", "membership.changed", "membership.ended"),
        cas=True,
        summary="The first valid acceptance wins a new Ownership Epoch and start-by deadline (§10.3, §11.3);"
        " it activates the acceptor's provisional Membership (§8).",
        example={"workItemId": ex.WORK_ITEM, "ownershipLeaseSeconds": 900},
    ),
    define(
        f"{PROJECT}.work.offer_decline",
        {
            "workItemId": ID,
            "reason": enum("capacity", "deadline", "capability", "authorization", "dependency", "budget", "other"),
        },
        {"detail": text(2000)},
        issuers=("worker",),
        aggregate="work_item",
        events=(f"{PROJECT}.work.offer_declined", "membership.ended"),
        summary="A candidate declines with a structured reason (§10.3); not a core transition (§15.1).",
        example={"workItemId": ex.WORK_ITEM, "reason": "capacity"},
    ),
    define(
        "approval.grant_execution",
        {"approvalId": ID, **_OWNED, "operations": array(text(200), min_items=1, unique=True)},
        {
            "resources": ids(),
            "budget": c("budget"),
            "expiresInSeconds": SECONDS,
            "comments": text(10000, min_length=None),
        },
        issuers=("mission_owner",),
        aggregate="work_item",
        events=("approval.execution.granted",),
        cas=True,
        summary="The signed approval gate that lets a queued WorkItem start (§12).",
        example={
            "approvalId": ex.uid(62),
            **_OWNED_EXAMPLE,
            "operations": ["email.send"],
            "resources": [],
            "expiresInSeconds": 300,
            "comments": None,
        },
    ),
)

EXECUTION = (
    define(
        "work.start",
        _OWNED,
        {"executionLeaseSeconds": SECONDS},
        issuers=("work_owner",),
        aggregate="work_item",
        events=("work.started",),
        cas=True,
        summary="The owner starts under a new Execution Lease (§11.3).",
        example={**_OWNED_EXAMPLE, "executionLeaseSeconds": 300},
    ),
    define(
        "ext.missionweaveprotocol.core.work_execution_lease_renew",
        _LEASED,
        {"leaseSeconds": SECONDS, "progress": PROGRESS},
        issuers=("work_owner",),
        leased=True,
        aggregate="work_item",
        events=("work.progressed",),
        cas=True,
        summary="The owner renews its current Execution Lease (§11.3, §15.3).",
        example={**_LEASED_EXAMPLE, "leaseSeconds": 300},
    ),
    define(
        "ext.missionweaveprotocol.core.resource_usage_record",
        {**_LEASED, "usageDelta": USAGE},
        issuers=("work_owner", "service"),
        leased=True,
        aggregate="work_item",
        events=(_USAGE_RECORDED,),
        summary="A nonzero usage delta charged to the WorkItem and its whole budget ancestry (§12).",
        example={**_LEASED_EXAMPLE, "usageDelta": {"modelTokens": 1200, "toolCalls": 3}},
    ),
    define(
        "work.checkpoint",
        {**_LEASED, "checkpoint": CHECKPOINT},
        {"resumeWithinSeconds": SECONDS, "progress": PROGRESS, "usageDelta": USAGE},
        issuers=("work_owner",),
        leased=True,
        aggregate="work_item",
        events=("work.checkpointed", _USAGE_RECORDED),
        summary="Durable progress; the Execution Lease is released, ownership kept for a bound (§10.2, §11.3).",
        example={**_LEASED_EXAMPLE, "checkpoint": ex.checkpoint(), "resumeWithinSeconds": 900},
    ),
    define(
        "work.block",
        {**_LEASED, "reason": REASON, "checkpoint": CHECKPOINT},
        {"blockedLeaseSeconds": SECONDS},
        issuers=("work_owner",),
        leased=True,
        aggregate="work_item",
        events=("work.blocked",),
        summary="Checkpoint, name the required resolution, release the slot (§11.4).",
        example={**_LEASED_EXAMPLE, "reason": "needs the appendix", "checkpoint": ex.checkpoint()},
    ),
    define(
        "work.unblock",
        {"workItemId": ID},
        {"resolution": REASON},
        issuers=("coordinator",),
        aggregate="work_item",
        events=("work.unblocked",),
        cas=True,
        summary="The blocker is resolved; the WorkItem re-enters its queue or is re-offered (§10.2).",
        example={"workItemId": ex.WORK_ITEM, "resolution": "appendix attached"},
    ),
    define(
        f"{PROJECT}.work.lease_expire",
        {"workItemId": ID, "ownershipEpoch": POSITIVE, "leaseType": enum("ownership", "execution", "blocked")},
        {"leaseId": ID},
        issuers=("service",),
        aggregate="work_item",
        events=(f"{PROJECT}.work.lease_expired", f"{PROJECT}.work.ownership_fenced", "work.failed", "membership.ended"),
        summary="A timer expires a lease (missed start-by, lapsed Execution or blocked lease); §11.4, §11.5.",
        example={**_OWNED_EXAMPLE, "leaseType": "execution", "leaseId": ex.LEASE_ID},
    ),
)

RESULTS = (
    define(
        "artifact.publish",
        {"artifact": ARTIFACT, "ownershipEpoch": POSITIVE, "executionLeaseId": ID},
        issuers=("work_owner",),
        leased=True,
        aggregate="artifact",
        events=("artifact.published",),
        summary="The owner publishes a signed, content-addressed Artifact manifest (§13.1).",
        example={"artifact": ex.artifact(), "ownershipEpoch": 1, "executionLeaseId": ex.LEASE_ID},
    ),
    define(
        f"{PROJECT}.artifact.content_store",
        {"contentHash": HASH},
        # uploadedBy: the Principal whose upload the control plane records.
        {"sizeBytes": c("safeInteger"), "mediaType": string(pattern=MEDIA_TYPE), "uploadedBy": c("actor")},
        issuers=("service",),
        aggregate="artifact",
        events=(f"{PROJECT}.artifact.content_stored",),
        summary="The portal records that the Group holds bytes it stored; issued only by the upload path.",
        example={"contentHash": ex.HASH, "sizeBytes": 2048, "mediaType": "text/markdown"},
    ),
    define(
        "work.submit",
        {**_LEASED, "artifactIds": ids(min_items=1), "evidence": EVIDENCE_LIST},
        {"usageDelta": USAGE},
        issuers=("work_owner",),
        leased=True,
        aggregate="work_item",
        events=("work.submitted", _USAGE_RECORDED),
        summary="Artifacts and Evidence mapped to the acceptance criteria (§13.2).",
        example={**_LEASED_EXAMPLE, "artifactIds": [ex.uid(21)], "evidence": [ex.evidence()]},
    ),
    define(
        f"{PROJECT}.work.late_result_record",
        {**_OWNED, "artifactIds": ids(), "evidence": array(c("id"))},
        issuers=("service",),
        aggregate="work_item",
        events=(f"{PROJECT}.work.late_result_recorded",),
        summary="A fenced owner's late result, kept for audit, never completing the WorkItem (§11.5).",
        example={**_OWNED_EXAMPLE, "artifactIds": [ex.uid(21)], "evidence": []},
    ),
    define(
        f"{PROJECT}.review.result_record",
        {
            "workItemId": ID,
            "submissionId": ID,
            "evidence": EVIDENCE_LIST,
            "requestReview": array(CRITERION_KEY, unique=True),
        },
        issuers=("service",),
        aggregate="work_item",
        events=(
            f"{PROJECT}.review.result_recorded",
            f"{PROJECT}.review.requested",
            f"{PROJECT}.review.reviewer_unavailable",
            "work.authorized",
            "work.offer.created",
        ),
        summary="One run of the review pipeline; qualitative criteria go to a reviewer WorkItem (§13.2).",
        example={
            "workItemId": ex.WORK_ITEM,
            "submissionId": ex.uid(63),
            "evidence": [ex.evidence()],
            "requestReview": [],
        },
    ),
    define(
        "work.accept_result",
        {"workItemId": ID, "evidence": EVIDENCE_LIST},
        issuers=("coordinator",),
        aggregate="work_item",
        events=("work.result.accepted", "membership.ended"),
        cas=True,
        summary="The Coordinator's review succeeds; the WorkItem is verified (§10.2, §13.2).",
        example={"workItemId": ex.WORK_ITEM, "evidence": [ex.evidence()]},
    ),
    define(
        "work.fail",
        {"workItemId": ID, "reason": REASON},
        {"ownershipEpoch": POSITIVE, "executionLeaseId": ID, "evidence": EVIDENCE_LIST, "retryable": boolean()},
        issuers=("coordinator", "work_owner"),
        leased=True,
        aggregate="work_item",
        events=("work.failed", "membership.ended"),
        summary="Failure with Evidence; a retryable attempt within the retry policy is re-offered later (§11.4).",
        example={"workItemId": ex.WORK_ITEM, "reason": "source unreadable", **_LEASED_EXAMPLE},
        # A Worker's failure cites both its Ownership Epoch and its lease, or neither (the Coordinator's).
        dependentRequired={"ownershipEpoch": ["executionLeaseId"], "executionLeaseId": ["ownershipEpoch"]},
    ),
    define(
        "work.cancel",
        {"workItemId": ID, "reason": REASON},
        issuers=("mission_owner", "coordinator"),
        aggregate="work_item",
        events=("work.cancelled", "membership.ended"),
        cas=True,
        summary="Cancellation revokes leases and applies the cleanup policy (§10.2, §12).",
        example={"workItemId": ex.WORK_ITEM, "reason": "superseded"},
    ),
)


DEFINITIONS: tuple[CommandDefinition, ...] = (*PLANNING, *EXECUTION, *RESULTS)
