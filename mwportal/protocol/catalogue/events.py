"""Event definitions: the core facts of §15.2 and the extension facts the Commands yield.

Member names follow the reference implementation's Events; a normative object
(a Mission, a Membership, a lease, an Approval, ...) travels whole, in its
normative shape.
"""

from __future__ import annotations

from typing import Any

from ..schemas.dsl import Schema, array, boolean, c, const, enum, has, ids, obj, text
from . import examples as ex
from .commands_group import PROJECT
from .model import (
    ACTOR,
    APPROVAL,
    ARTIFACT,
    CANDIDATES,
    CAPABILITY_PINS,
    CHECKPOINT,
    CONTEXT_PACKAGE,
    COOPERATION_OVERRIDE_GRANT,
    COOPERATION_POLICY,
    COUNT,
    DELEGATION_GRANT,
    EVIDENCE,
    EVIDENCE_LIST,
    GROUP,
    HASH,
    ID,
    LEASE,
    MEMBERSHIP,
    MESSAGE,
    MESSAGE_CONTENT,
    MISSION,
    POSITIVE,
    PROGRESS,
    REASON,
    SELECTION_BASIS,
    TIME,
    USAGE,
    USAGE_DIMENSIONS,
    WORK_CONTRACT,
    WORK_ITEM,
    WORK_PROPOSAL,
    EventDefinition,
    event_payload,
)


def fact(
    kind: str,
    required: dict[str, Schema],
    optional: dict[str, Schema] | None = None,
    *,
    aggregate: str,
    example: dict[str, Any],
    scope: str = "group",
    summary: str = "",
    **more: Any,
) -> EventDefinition:
    schema = event_payload(kind, required, optional, **more)
    schema["examples"] = [example]
    return EventDefinition(kind, schema, aggregate, scope, summary, (example,))


_LEASE_EXPIRY = {"ownershipLeaseExpiresAt": TIME}
# Every timer an Event sets travels with it, so a Worker's projection knows it (§11.3 start-by).
_START_BY = {"startBy": TIME}
_COORDINATOR_LEASE = {"coordinatorEpoch": POSITIVE, "leaseExpiresAt": TIME}
_AMENDMENT = {"amendmentId": ID, "messageId": ID, "reason": REASON}
_AMENDMENT_EXAMPLE = {"amendmentId": ex.uid(49), "messageId": ex.uid(48), "reason": "wrong draft"}
_REMAINING = obj({}, {name: COUNT for name in USAGE_DIMENSIONS})
_LEASED_EXAMPLE = {"workItemId": ex.WORK_ITEM, "executionLeaseId": ex.LEASE_ID}
_NEW_MISSION = {"mission": ex.mission(), "group": ex.group()}
# A child Mission's outcome lands on its parent WorkItem, citing the child's Event.
_FROM_CHILD = {"childMissionId": ID, "sourceEventId": ID}

MISSIONS = (
    fact(
        "mission.created",
        {"mission": MISSION, "group": GROUP},
        {"parentEventId": ID},
        aggregate="mission",
        summary="In the new Group; a child Mission's names the parent Group's mission.child.created.",
        example=_NEW_MISSION,
    ),
    fact(
        "mission.follow_up.created",
        {"mission": MISSION, "group": GROUP, "followUpOfMissionId": ID},
        aggregate="mission",
        example={**_NEW_MISSION, "followUpOfMissionId": ex.uid(40)},
    ),
    fact(
        "mission.child.created",
        {"parentMissionId": ID, "parentWorkItemId": ID, "childMissionId": ID, "childGroupId": ID},
        aggregate="mission",
        summary="In the parent Group.",
        example={
            "parentMissionId": ex.MISSION,
            "parentWorkItemId": ex.WORK_ITEM,
            "childMissionId": ex.uid(42),
            "childGroupId": ex.uid(43),
        },
    ),
    fact(
        "mission.coordinator.assigned",
        {"coordinatorId": ID, **_COORDINATOR_LEASE},
        # The signed Context Package the replacement receives (§7.2), by ID and document hash.
        {"previousCoordinatorId": ID, "coordinatorLease": LEASE, "contextPackageId": ID, "contextPackageHash": HASH},
        aggregate="mission",
        example={
            "previousCoordinatorId": ex.COORDINATOR["id"],
            "coordinatorId": ex.uid(45),
            "coordinatorEpoch": 2,
            "leaseExpiresAt": ex.T1,
        },
    ),
    fact(
        "mission.coordinator.renewed",
        _COORDINATOR_LEASE,
        {"coordinatorLease": LEASE},
        aggregate="mission",
        example={"coordinatorEpoch": 1, "leaseExpiresAt": ex.T2},
    ),
    fact(
        f"{PROJECT}.mission.coordinator_lease_expired",
        {"coordinatorId": ID, **_COORDINATOR_LEASE},
        aggregate="mission",
        summary="The Coordinator lease of this epoch expired; its Commands are refused until a replacement (§7.2).",
        example={"coordinatorId": ex.COORDINATOR["id"], "coordinatorEpoch": 1, "leaseExpiresAt": ex.T1},
    ),
    fact(
        f"{PROJECT}.mission.coordinator_reconciled",
        {"coordinatorId": ID, "coordinatorEpoch": POSITIVE, "contextPackageId": ID, "throughSequence": POSITIVE},
        aggregate="mission",
        summary="The replacement Coordinator of this epoch reconciled; it may issue new assignments (§7.2).",
        example={
            "coordinatorId": ex.uid(45),
            "coordinatorEpoch": 2,
            "contextPackageId": ex.uid(30),
            "throughSequence": 12,
        },
    ),
    fact(
        "mission.submitted_for_approval",
        {"missionId": ID, "missionRevision": POSITIVE, "artifactHashes": array(HASH, min_items=1, unique=True)},
        aggregate="mission",
        example={"missionId": ex.MISSION, "missionRevision": 3, "artifactHashes": [ex.HASH]},
    ),
    fact(
        "mission.approved",
        {"approval": APPROVAL},
        aggregate="mission",
        example={"approval": ex.approval()},
    ),
    fact(
        "mission.changes_requested",
        {"missionId": ID, "feedback": text(10000), "newRevision": POSITIVE},
        aggregate="mission",
        example={"missionId": ex.MISSION, "feedback": "Add the appendix.", "newRevision": 4},
    ),
    fact(
        "mission.cancelled",
        {"missionId": ID, "reason": REASON},
        aggregate="mission",
        example={"missionId": ex.MISSION, "reason": "The board meeting moved."},
    ),
    fact(
        "mission.terminated",
        {"missionId": ID, "reason": REASON},
        {"sourceEventId": ID},
        aggregate="mission",
        example={"missionId": ex.MISSION, "reason": "The source report was withdrawn."},
    ),
)

MEMBERSHIPS = (
    fact(
        "membership.changed",
        {"membership": MEMBERSHIP},
        aggregate="membership",
        summary="One per Membership (a Principal's role) granted or changed.",
        example={"membership": ex.membership()},
    ),
    fact(
        "membership.ended",
        {"principal": ACTOR},
        {"membership": MEMBERSHIP, "reason": REASON},
        aggregate="membership",
        example={"principal": ex.WORKER},
    ),
    fact(
        "membership.delegation.granted",
        {"delegationGrant": DELEGATION_GRANT},
        aggregate="membership",
        example={"delegationGrant": ex.delegation_grant()},
    ),
)

MESSAGES = (
    fact(
        "message.posted",
        {"messageId": ID, "authority": const(False)},
        {"conversationId": ID, "message": MESSAGE},
        aggregate="message",
        summary="The Message ID and its standing (never authority); the whole Message when it is served.",
        example={"messageId": ex.uid(25), "authority": False, "message": ex.message()},
    ),
    fact(
        "message.corrected",
        _AMENDMENT,
        # The replacement is the Message's content: its withheld form after a redaction lacks it (§7.4).
        {"replacementContent": {"anyOf": [text(100000), MESSAGE_CONTENT]}, "message": MESSAGE},
        aggregate="message",
        example={**_AMENDMENT_EXAMPLE, "replacementContent": "Draft 2 is ready."},
    ),
    fact("message.retracted", _AMENDMENT, aggregate="message", example=_AMENDMENT_EXAMPLE),
    fact("message.redacted", _AMENDMENT, aggregate="message", example=_AMENDMENT_EXAMPLE),
)

WORK = (
    fact(
        "work.proposed",
        {"proposal": WORK_PROPOSAL},
        aggregate="work_proposal",
        example={
            "proposal": {
                "id": ex.uid(60),
                "missionId": ex.MISSION,
                "groupId": ex.GROUP,
                "proposedBy": ex.WORKER,
                "contract": ex.work_contract(),
                "dependencyIds": [],
                "status": "open",
                "createdAt": ex.T0,
                "updatedAt": ex.T0,
            }
        },
    ),
    fact(
        "work.authorized",
        {"workItem": WORK_ITEM},
        {"proposalId": ID, "delegationGrantId": ID},
        aggregate="work_item",
        example={"workItem": ex.work_item()},
    ),
    fact(
        "work.offer.created",
        {
            "workItemId": ID,
            "candidateAgentIds": CANDIDATES,
            "offerExpiresAt": TIME,
            "selectionBasis": SELECTION_BASIS,
        },
        {
            "contractVersion": POSITIVE,
            "contract": WORK_CONTRACT,
            "contractChanged": boolean(),
            "contextPackageId": ID,
            "delegationGrantId": ID,
        },
        aggregate="work_item",
        example={
            "workItemId": ex.WORK_ITEM,
            "candidateAgentIds": [ex.WORKER["id"]],
            "offerExpiresAt": ex.T1,
            "selectionBasis": ex.selection_basis(),
        },
    ),
    fact(
        "work.offer.accepted",
        {
            "workItemId": ID,
            "assigneeId": ID,
            "ownershipEpoch": POSITIVE,
            "ownershipLeaseExpiresAt": TIME,
            "agentCardVersion": POSITIVE,
            # The ownership lease in full: its start-by deadline is what a Worker must honour (§11.3).
            "ownershipLease": LEASE,
        },
        # The losing candidates' offers are withdrawn in the same transition (§10.3); the acceptance pins
        # the card's version of every required capability with agentCardVersion (§6.1).
        {
            "contractVersion": POSITIVE,
            "selectionBasis": SELECTION_BASIS,
            "withdrawnAgentIds": ids(),
            "capabilityPins": CAPABILITY_PINS,
        },
        aggregate="work_item",
        example={
            "workItemId": ex.WORK_ITEM,
            "assigneeId": ex.WORKER["id"],
            "ownershipEpoch": 1,
            "ownershipLeaseExpiresAt": ex.T1,
            "agentCardVersion": 1,
            "ownershipLease": ex.lease("ownership"),
            "capabilityPins": [ex.CAPABILITY],
        },
    ),
    fact(
        "work.contract.revised",
        {"workItemId": ID, "revision": POSITIVE},
        {"dependencyId": ID, "contract": WORK_CONTRACT},
        aggregate="work_item",
        example={"workItemId": ex.WORK_ITEM, "dependencyId": ex.uid(61), "revision": 2},
    ),
    fact(
        "work.started",
        {"workItemId": ID, "ownershipEpoch": POSITIVE, "executionLease": LEASE, "executionLeaseExpiresAt": TIME},
        {"attempt": POSITIVE},
        aggregate="work_item",
        example={
            "workItemId": ex.WORK_ITEM,
            "ownershipEpoch": 1,
            "executionLease": ex.lease(),
            "executionLeaseExpiresAt": ex.T1,
        },
    ),
    fact(
        "work.progressed",
        {"workItemId": ID, "ownershipEpoch": POSITIVE, "executionLease": LEASE, "executionLeaseExpiresAt": TIME},
        {"progress": PROGRESS},
        aggregate="work_item",
        summary="An Execution Lease renewal, with the structured progress it reports (§11.4).",
        example={
            "workItemId": ex.WORK_ITEM,
            "ownershipEpoch": 1,
            "executionLease": ex.renewed_lease(),
            "executionLeaseExpiresAt": ex.T2,
        },
    ),
    fact(
        "work.checkpointed",
        {"workItemId": ID, "checkpoint": CHECKPOINT, **_LEASE_EXPIRY},
        {"progress": PROGRESS, **_START_BY},
        aggregate="work_item",
        example={"workItemId": ex.WORK_ITEM, "checkpoint": ex.checkpoint(), "ownershipLeaseExpiresAt": ex.T2},
    ),
    fact(
        "work.blocked",
        {"workItemId": ID, "reason": REASON},
        {**_LEASE_EXPIRY, "checkpoint": CHECKPOINT, **_FROM_CHILD},
        aggregate="work_item",
        summary="By its owner (with the blocked lease), or by a child Mission (citing the child's Event).",
        example={"workItemId": ex.WORK_ITEM, "reason": "needs the appendix", "ownershipLeaseExpiresAt": ex.T2},
    ),
    fact(
        "work.unblocked",
        {"workItemId": ID, "status": enum("queued", "open")},
        {"resolution": REASON, **_START_BY},
        aggregate="work_item",
        example={"workItemId": ex.WORK_ITEM, "status": "queued", "resolution": "appendix attached"},
    ),
    fact(
        "work.submitted",
        {"workItemId": ID, "artifactIds": ids(min_items=1), "evidence": EVIDENCE_LIST},
        aggregate="work_item",
        example={"workItemId": ex.WORK_ITEM, "artifactIds": [ex.uid(21)], "evidence": [ex.evidence()]},
    ),
    fact(
        "work.result.accepted",
        {"workItemId": ID},
        {"evidence": EVIDENCE_LIST, "childApprovalId": ID, **_FROM_CHILD},
        aggregate="work_item",
        summary="The Coordinator's review with its Evidence, or a child Mission's approval.",
        example={"workItemId": ex.WORK_ITEM, "evidence": [ex.evidence()]},
        # Either the review's Evidence or the child Mission's approval, not both.
        oneOf=[has("evidence"), has("childMissionId", "childApprovalId", "sourceEventId")],
    ),
    fact(
        "work.failed",
        {"workItemId": ID, "reason": REASON},
        {"evidence": EVIDENCE_LIST, "attempt": POSITIVE, **_FROM_CHILD},
        aggregate="work_item",
        example={"workItemId": ex.WORK_ITEM, "reason": "source unreadable", "evidence": [ex.evidence()]},
    ),
    fact(
        "work.cancelled",
        {"workItemId": ID, "reason": REASON},
        {"sourceEventId": ID},
        aggregate="work_item",
        example={"workItemId": ex.WORK_ITEM, "reason": "superseded"},
    ),
    fact(
        "artifact.published",
        {"artifact": ARTIFACT},
        aggregate="artifact",
        example={"artifact": ex.artifact()},
    ),
    fact(
        "approval.execution.granted",
        {
            "approval": APPROVAL,
            "ownershipEpoch": POSITIVE,
            "operations": array(text(200), min_items=1, unique=True),
            "expiresAt": TIME,
        },
        {"resources": ids(), "budget": c("budget"), "contractVersion": POSITIVE},
        aggregate="work_item",
        example={
            "approval": ex.approval("work_execution"),
            "ownershipEpoch": 1,
            "operations": ["email.send"],
            "expiresAt": ex.T1,
        },
    ),
    fact(
        f"{PROJECT}.governance.cooperation_policy_changed",
        {"policy": {"type": "object"}, "revision": POSITIVE},
        aggregate="organization",
        example={"policy": {"proposal_rate": {"windowSeconds": 60, "soft": 5, "hard": 10}}, "revision": 1},
    ),
    fact(
        f"{PROJECT}.governance.soft_threshold_reached",
        {"policyName": COOPERATION_POLICY, "count": COUNT, "soft": COUNT, "hard": COUNT, "actor": ACTOR},
        aggregate="group",
        summary="A cooperation limit's soft threshold was reached: the Coordinator is notified (§20).",
        example={"policyName": "proposal_rate", "count": 5, "soft": 5, "hard": 10, "actor": ex.WORKER},
    ),
    fact(
        "policy.cooperation_override.granted",
        {"cooperationOverrideGrant": COOPERATION_OVERRIDE_GRANT},
        aggregate="mission",
        example={
            "cooperationOverrideGrant": {
                "id": ex.uid(52),
                "missionId": ex.MISSION,
                "groupId": ex.GROUP,
                "policyName": "delegation_depth",
                "beneficiary": ex.COORDINATOR,
                "targetCommandKind": "mission.create_child",
                "targetActionId": ex.uid(53),
                "approver": ex.OWNER,
                "reason": "approved deeper decomposition",
                "grantedAt": ex.T0,
                "expiresAt": ex.T2,
            }
        },
    ),
    fact(
        "group.snapshot.created",
        {"snapshotId": ID, "throughSequence": POSITIVE, "stateHash": HASH},
        {"snapshotArtifactHash": HASH},
        aggregate="group",
        example={"snapshotId": ex.uid(28), "throughSequence": 12, "stateHash": ex.HASH},
    ),
    fact(
        "group.archived",
        {"snapshotId": ID, "archivedAt": TIME},
        aggregate="group",
        example={"snapshotId": ex.uid(28), "archivedAt": ex.T2},
    ),
)

EXTENSIONS = (
    fact(
        "ext.missionweaveprotocol.registry.agent_card_registered",
        {"agentId": ID, "version": POSITIVE},
        aggregate="agent",
        scope="organization",
        example={"agentId": ex.WORKER["id"], "version": 1},
    ),
    fact(
        "ext.missionweaveprotocol.identity.session_opened",
        {"agentId": ID, "sessionEpoch": POSITIVE},
        aggregate="agent",
        scope="organization",
        example={"agentId": ex.WORKER["id"], "sessionEpoch": 2},
    ),
    fact(
        "ext.missionweaveprotocol.core.work_execution_lease_revoked",
        {
            **{"workItemId": ID, "executionLeaseId": ID},
            "reason": text(200),
            "status": enum("queued", "open", "blocked"),
        },
        {"sessionEpoch": POSITIVE, "agentId": ID, **_START_BY},
        aggregate="work_item",
        summary="In each Group where the Agent held a lease; the WorkItem returns to its queue (§11.3).",
        example={**_LEASED_EXAMPLE, "reason": "session_replaced", "status": "queued", "sessionEpoch": 2},
    ),
    fact(
        "ext.missionweaveprotocol.core.resource_usage_recorded",
        {
            "workItemId": ID,
            "executionLeaseId": ID,
            "ownershipEpoch": POSITIVE,
            "usageDelta": USAGE,
            "cumulativeUsage": _REMAINING,
            "remainingBudget": _REMAINING,
        },
        {
            "offlineReconciliation": obj(
                {
                    "disconnectedAt": TIME,
                    "bufferedAt": TIME,
                    "graceDeadline": TIME,
                    "executionSessionEpoch": POSITIVE,
                    "reconciliationSessionEpoch": POSITIVE,
                    "reconciledAt": TIME,
                    "progressActionId": ID,
                }
            )
        },
        aggregate="work_item",
        example={
            **_LEASED_EXAMPLE,
            "ownershipEpoch": 1,
            "usageDelta": {"modelTokens": 1200},
            "cumulativeUsage": {"modelTokens": 5000},
            "remainingBudget": {"modelTokens": 195000},
        },
    ),
    fact(
        f"{PROJECT}.admin.organization_created",
        {"organizationId": ID, "slug": text(50), "name": text(200)},
        aggregate="organization",
        example={"organizationId": ex.ORG, "slug": "acme", "name": "Acme"},
    ),
    fact(
        f"{PROJECT}.registry.principal_registered",
        {"principal": ACTOR, "name": text(200), "organizationRoles": array(text(100), unique=True)},
        {"keyId": ID},
        aggregate="agent",
        example={"principal": ex.OWNER, "name": "Dana", "organizationRoles": ["mission_owner"]},
    ),
    fact(
        f"{PROJECT}.registry.principal_key_enrolled",
        {"principal": ACTOR, "keyId": ID},
        aggregate="agent",
        example={"principal": ex.OWNER, "keyId": ex.KEY},
    ),
    fact(
        f"{PROJECT}.registry.principal_key_revoked",
        {"principal": ACTOR, "keyId": ID, "revokedAt": TIME},
        {"reason": REASON},
        aggregate="agent",
        example={"principal": ex.OWNER, "keyId": ex.KEY, "revokedAt": ex.T0},
    ),
    fact(
        f"{PROJECT}.scheduling.priority_policy_changed",
        {"policy": {"type": "object"}, "revision": POSITIVE},
        aggregate="organization",
        example={"policy": {"classes": {"normal": 1}}, "revision": 2},
    ),
    fact(
        f"{PROJECT}.audit.event_redacted",
        {"sequence": POSITIVE, "reason": REASON},
        {"eventId": ID},
        aggregate="group",
        example={"sequence": 7, "reason": "personal data"},
    ),
    fact(
        f"{PROJECT}.context.package_published",
        {"contextPackage": CONTEXT_PACKAGE},
        # The JCS hash of the signed document: what a later version names as its predecessor.
        {"documentHash": HASH},
        aggregate="context_package",
        example={"contextPackage": ex.context_package()},
    ),
    fact(
        f"{PROJECT}.context.package_forwarded",
        {"contextPackageId": ID, "version": POSITIVE, "toGroupId": ID},
        aggregate="context_package",
        example={"contextPackageId": ex.uid(30), "version": 1, "toGroupId": ex.uid(54)},
    ),
    fact(
        f"{PROJECT}.context.package_received",
        {"contextPackage": CONTEXT_PACKAGE, "fromGroupId": ID},
        {"documentHash": HASH},
        aggregate="context_package",
        example={"contextPackage": ex.context_package(), "fromGroupId": ex.uid(55)},
    ),
    fact(
        f"{PROJECT}.work.offer_declined",
        {"workItemId": ID, "agentId": ID, "reason": text(100)},
        {"detail": text(2000)},
        aggregate="work_item",
        example={"workItemId": ex.WORK_ITEM, "agentId": ex.WORKER["id"], "reason": "capacity"},
    ),
    fact(
        f"{PROJECT}.work.lease_expired",
        {"workItemId": ID, "ownershipEpoch": POSITIVE, "leaseType": enum("ownership", "execution", "blocked")},
        {
            "leaseId": ID,
            # Where the WorkItem is after the expiry; a lapsed Execution Lease leaves it active (§10.2).
            "status": enum("open", "offered", "queued", "active", "blocked"),
            "attempt": POSITIVE,
            "retryNotBefore": TIME,
            **_START_BY,
        },
        aggregate="work_item",
        example={"workItemId": ex.WORK_ITEM, "ownershipEpoch": 1, "leaseType": "ownership", "status": "queued"},
    ),
    fact(
        f"{PROJECT}.work.ownership_fenced",
        {"workItemId": ID, "ownershipEpoch": POSITIVE, "reason": text(200)},
        # agentCardVersion: the card whose incompatible upgrade fenced the ownership (§6.1).
        {"agentId": ID, "agentCardVersion": POSITIVE},
        aggregate="work_item",
        summary="The owner loses its Ownership Epoch; its later Commands are stale (§11.5).",
        example={"workItemId": ex.WORK_ITEM, "ownershipEpoch": 1, "reason": "start_by_missed"},
    ),
    fact(
        f"{PROJECT}.work.late_result_recorded",
        {"workItemId": ID, "ownershipEpoch": POSITIVE, "artifactIds": ids(), "evidence": ids(unique=False)},
        aggregate="work_item",
        example={"workItemId": ex.WORK_ITEM, "ownershipEpoch": 1, "artifactIds": [ex.uid(21)], "evidence": []},
    ),
    fact(
        f"{PROJECT}.artifact.content_stored",
        {"contentHash": HASH, "sizeBytes": COUNT},
        {"mediaType": text(255), "uploadedBy": c("actor")},
        aggregate="artifact",
        example={"contentHash": ex.HASH, "sizeBytes": 2048, "mediaType": "text/markdown"},
    ),
    fact(
        f"{PROJECT}.review.result_recorded",
        {"workItemId": ID, "submissionId": ID, "evidence": array(EVIDENCE)},
        {"checks": array(obj({"stage": text(100), "kind": text(100)}, {"details": {"type": "object"}}))},
        aggregate="work_item",
        example={"workItemId": ex.WORK_ITEM, "submissionId": ex.uid(63), "evidence": [ex.evidence()]},
    ),
    fact(
        f"{PROJECT}.review.requested",
        {"workItemId": ID, "reviewWorkItemId": ID, "criterionIds": array(text(128), min_items=1), "reviewerIds": ids()},
        aggregate="work_item",
        example={
            "workItemId": ex.WORK_ITEM,
            "reviewWorkItemId": ex.uid(64),
            "criterionIds": ["summary-complete"],
            "reviewerIds": [ex.uid(65)],
        },
    ),
    fact(
        f"{PROJECT}.review.reviewer_unavailable",
        {"workItemId": ID, "criterionIds": array(text(128), min_items=1)},
        aggregate="work_item",
        example={"workItemId": ex.WORK_ITEM, "criterionIds": ["summary-complete"]},
    ),
    fact(
        f"{PROJECT}.extension.profile_registered",
        {"profileUri": ID, "version": c("semver"), "schemaHash": HASH, "critical": boolean()},
        aggregate="organization",
        example={
            "profileUri": "https://profiles.example.org/mwp/acme-geodata",
            "version": "1.2.0",
            "schemaHash": ex.HASH,
            "critical": True,
        },
    ),
    fact(
        f"{PROJECT}.extension.profile_pinned",
        {"profileUri": ID, "major": COUNT},
        aggregate="group",
        example={"profileUri": "https://profiles.example.org/mwp/acme-geodata", "major": 1},
    ),
)

DEFINITIONS: tuple[EventDefinition, ...] = (*MISSIONS, *MEMBERSHIPS, *MESSAGES, *WORK, *EXTENSIONS)
