"""The Group Authority's state objects: Missions, Groups, memberships, Conversations,
Messages, WorkItems and their contracts, leases, presence, and the §19 error document.

These are not signed; their conditionals tie lifecycle states to the members
each state needs (an archived Group names its snapshot, an active lease has no
closure, a restricted Conversation lists its members, ...).
"""

from __future__ import annotations

from .common import LOCAL_KEY, MEDIA_TYPE, OPERATION
from .dsl import (
    Schema,
    all_of,
    array,
    boolean,
    c,
    const,
    document,
    enum,
    has,
    hashes,
    ids,
    lacks,
    none_of,
    number,
    obj,
    one_of,
    open_object,
    ref,
    shaped,
    string,
    text,
    uri,
    when,
    where,
)

# --- Conversation (§9) -----------------------------------------------------------------------

_access = obj(
    {"mode": enum("group", "restricted")},
    {"members": array(c("actor"), min_items=1)},
    allOf=[when(where(mode=const("restricted")), has("members"))],
)

CONVERSATION = document(
    "conversation",
    obj(
        {
            "conversationId": c("id"),
            "missionId": c("id"),
            "groupId": c("id"),
            "type": enum("group", "work_item", "review", "restricted"),
            "title": text(500),
            "access": _access,
            "createdBy": c("actor"),
            "createdAt": c("timestamp"),
            "state": enum("active", "closed"),
            "revision": c("safeInteger"),
        },
        {"primaryWorkItemId": c("id"), "extensions": c("extensions")},
        allOf=[
            when(where(type=const("work_item")), has("primaryWorkItemId")),
            when(where(type=const("restricted")), shaped(access=shaped(mode=const("restricted")))),
        ],
    ),
)

# --- Error (§19) -----------------------------------------------------------------------------

CORE_ERROR_CODES = (
    "UNSUPPORTED_VERSION",
    "AUTH_REQUIRED",
    "AUTH_INVALID_SIGNATURE",
    "AUTH_STALE_SESSION",
    "AUTH_STALE_COORDINATOR",
    "AUTH_FORBIDDEN",
    "GROUP_NOT_FOUND",
    "MEMBERSHIP_REQUIRED",
    "MEMBERSHIP_STALE",
    "SCHEMA_VALIDATION_FAILED",
    "INVALID_COMMAND",
    "INVALID_STATE_TRANSITION",
    "REVISION_CONFLICT",
    "ACTION_ID_COLLISION",
    "UNKNOWN_CRITICAL_EXTENSION",
    "WORK_CONTRACT_INCOMPLETE",
    "WORK_OFFER_EXPIRED",
    "WORK_ALREADY_OWNED",
    "WORK_LEASE_EXPIRED",
    "WORK_STALE_OWNERSHIP",
    "APPROVAL_REQUIRED",
    "BUDGET_EXCEEDED",
    "RATE_LIMITED",
    "BACKPRESSURE",
    "CURSOR_TOO_OLD",
    "PROTOCOL_VIOLATION",
    "INTERNAL_ERROR",
)

ERROR = document(
    "error",
    obj(
        {
            "code": enum(*CORE_ERROR_CODES),
            "message": text(2000),
            "retryable": boolean(),
            "occurredAt": c("timestamp"),
        },
        {
            "fatal": boolean(),
            "relatedFrameId": c("id"),
            "relatedActionId": c("id"),
            "groupId": c("id"),
            "expectedRevision": c("safeInteger"),
            "currentRevision": c("safeInteger"),
            "retryAfterMs": c("safeInteger"),
            "snapshotArtifactHash": c("sha256"),
            "details": open_object(),
        },
    ),
)

# --- Group (§7) ------------------------------------------------------------------------------

GROUP = document(
    "group",
    obj(
        {
            "groupId": c("id"),
            "missionId": c("id"),
            "state": enum("active", "archived"),
            "mainConversationId": c("id"),
            "createdAt": c("timestamp"),
        },
        {"archivedAt": c("timestamp"), "archiveSnapshotId": c("id"), "extensions": c("extensions")},
        allOf=[
            # An archived Group is closed by a snapshot; an active one has neither.
            when(where(state=const("archived")), has("archivedAt", "archiveSnapshotId")),
            when(where(state=const("active")), none_of("archivedAt", "archiveSnapshotId")),
        ],
    ),
)

# --- Lease (§11) -----------------------------------------------------------------------------

LEASE = document(
    "lease",
    obj(
        {
            "leaseId": c("id"),
            "leaseType": enum("coordinator", "ownership", "execution", "blocked"),
            "missionId": c("id"),
            "groupId": c("id"),
            "holderAgentId": c("id"),
            "sessionEpoch": c("positiveInteger"),
            "issuedAt": c("timestamp"),
            "startsAt": c("timestamp"),
            "expiresAt": c("timestamp"),
            "state": enum("active", "expired", "revoked", "released"),
            "renewalCount": c("safeInteger"),
        },
        {
            "workItemId": c("id"),
            "coordinatorEpoch": c("positiveInteger"),
            "ownershipEpoch": c("positiveInteger"),
            "startBy": c("timestamp"),
            "graceExpiresAt": c("timestamp"),
            "lastRenewedAt": c("timestamp"),
            "closedAt": c("timestamp"),
            "closureReason": string(pattern="\\S", max_length=512),
        },
        allOf=[
            when(where(leaseType=const("coordinator")), has("coordinatorEpoch")),
            when(where(leaseType=enum("ownership", "execution", "blocked")), has("workItemId", "ownershipEpoch")),
            when(where(leaseType=const("ownership")), has("startBy")),
            when(
                where(leaseType=const("execution")),
                none_of("coordinatorEpoch", "startBy", "graceExpiresAt", "capabilityTokenId"),
            ),
            when(where(renewalCount={"minimum": 1}), has("lastRenewedAt")),
            when(where(renewalCount=const(0)), lacks("lastRenewedAt")),
            # Only a closed lease says when and why it closed.
            when(where(state=const("active")), none_of("closedAt", "closureReason"), has("closedAt", "closureReason")),
        ],
    ),
)

# --- Membership (§8) -------------------------------------------------------------------------

_BUDGET_LIMITS = (
    "currency",
    "financialLimit",
    "modelTokenLimit",
    "toolCallLimit",
    "computeSecondsLimit",
    "wallClockSecondsLimit",
    "externalSideEffectLimit",
)

_delegation_grant = obj(
    {
        "grantId": c("id"),
        "granteeAgentId": c("id"),
        "missionId": c("id"),
        "groupId": c("id"),
        "targetWorkItemId": c("id"),
        "allowedCapabilities": array(c("capabilityRef"), min_items=1, unique=True),
        # A delegated budget states every limit (§12).
        "budget": {**all_of(c("budget")), **has(*_BUDGET_LIMITS)},
        "maxDescendantDepth": c("safeInteger"),
        "granteeMembershipEpoch": c("positiveInteger"),
        "coordinatorEpoch": c("positiveInteger"),
        "grantedBy": c("agentActor"),
        "grantedAt": c("timestamp"),
        "expiresAt": c("timestamp"),
    }
)

MEMBERSHIP = document(
    "membership",
    obj(
        {
            "membershipId": c("id"),
            "missionId": c("id"),
            "groupId": c("id"),
            "member": c("actor"),
            "role": enum("mission_owner", "coordinator", "worker", "reviewer", "observer", "work_delegate"),
            "state": enum("provisional", "active", "ended"),
            "membershipEpoch": c("positiveInteger"),
            "scopes": array(string(pattern=OPERATION, max_length=160), min_items=1, unique=True),
            "visibilityStartSequence": c("safeInteger"),
            "grantedAt": c("timestamp"),
        },
        {
            "delegationGrants": array(_delegation_grant, unique=True),
            "contextPackageId": c("id"),
            "provisionalExpiresAt": c("timestamp"),
            "activatedAt": c("timestamp"),
            "endedAt": c("timestamp"),
            "extensions": c("extensions"),
        },
        allOf=[
            # A provisional member joins on a Context Package and expires unless activated (§8).
            when(where(state=const("provisional")), has("provisionalExpiresAt", "contextPackageId")),
            when(where(state=const("active")), has("activatedAt")),
            when(where(state=const("ended")), has("endedAt")),
        ],
    ),
)

# --- Message (§9) ----------------------------------------------------------------------------

_content_part = one_of(
    obj({"type": const("text"), "text": text(100000)}),
    obj({"type": const("artifact_ref"), "artifactHash": c("sha256")}),
    obj({"type": const("data_ref"), "schema": uri(), "data": {}}),
)

MESSAGE = document(
    "message",
    obj(
        {
            "messageId": c("id"),
            "missionId": c("id"),
            "groupId": c("id"),
            "conversationId": c("id"),
            "author": c("actor"),
            "kind": enum("message", "correction", "retraction", "redaction"),
            # A Message is context, never an authorization to act (§9).
            "authority": const(False),
            "content": array(_content_part, min_items=1),
            "committedAt": c("timestamp"),
        },
        {
            "targetMessageId": c("id"),
            "mentions": array(c("actor"), unique=True),
            "references": ids(),
            "reason": text(4000),
            "extensions": c("extensions"),
        },
        allOf=[when(where(kind=enum("correction", "retraction", "redaction")), has("targetMessageId", "reason"))],
    ),
)

# --- Mission (§7, §14) -----------------------------------------------------------------------

MISSION = document(
    "mission",
    obj(
        {
            "missionId": c("id"),
            "groupId": c("id"),
            "revision": c("safeInteger"),
            "objective": text(10000),
            "definitionOfDone": array(c("acceptanceCriterion"), min_items=1),
            "missionOwner": c("actor"),
            "coordinator": obj(
                {
                    "agentId": c("id"),
                    "agentCardVersion": c("positiveInteger"),
                    "coordinatorEpoch": c("positiveInteger"),
                    "leaseId": c("id"),
                }
            ),
            "state": enum("active", "awaiting_approval", "approved", "failed", "cancelled"),
            "budget": c("budget"),
            "deadline": c("timestamp"),
            "approvalPolicy": obj(
                {"finalHumanApproval": boolean(), "highRiskExecutionApproval": boolean()},
                {"policyVersion": c("semver")},
            ),
            "createdAt": c("timestamp"),
        },
        {
            "parent": obj({"missionId": c("id"), "workItemId": c("id"), "depth": c("positiveInteger")}),
            "followUpToMissionId": c("id"),
            "pinnedProfiles": array(obj({"profileUri": c("id"), "majorVersion": c("safeInteger")}), unique=True),
            "extensions": c("extensions"),
        },
        allOf=[
            # A top-level Mission belongs to a human and ends in that human's approval;
            # a child Mission belongs to the parent's Coordinator Agent (§14).
            when(
                lacks("parent"),
                shaped(missionOwner=c("humanActor"), approvalPolicy=shaped(finalHumanApproval=const(True))),
                shaped(missionOwner=c("agentActor")),
            )
        ],
    ),
)

# --- Presence (§6.3) -------------------------------------------------------------------------

PRESENCE_RECORD = document(
    "presence-record",
    obj(
        {
            "agentId": c("id"),
            "sessionEpoch": c("positiveInteger"),
            "status": enum("online", "busy", "away", "draining", "offline"),
            "capacity": obj(
                {
                    "maxSlots": c("positiveInteger"),
                    "activeSlots": c("safeInteger"),
                    "availableSlots": c("safeInteger"),
                    "queuedItems": c("safeInteger"),
                }
            ),
            "capabilityAvailability": array(
                obj({"capability": c("capabilityRef"), "status": enum("available", "degraded", "unavailable")})
            ),
            "lastHeartbeat": c("timestamp"),
            "expiresAt": c("timestamp"),
        },
        {"estimatedResponseMs": c("safeInteger")},
    ),
)

# --- Work Contract (§10) ---------------------------------------------------------------------

WORK_CONTRACT = document(
    "work-contract",
    obj(
        {
            "contractVersion": c("positiveInteger"),
            "goal": text(10000),
            "requiredDeliverables": array(
                obj(
                    {
                        "deliverableId": string(pattern=LOCAL_KEY),
                        "description": text(4000),
                        "mediaType": string(pattern=MEDIA_TYPE),
                        "schema": uri(),
                    }
                ),
                min_items=1,
            ),
            "acceptanceCriteria": array(c("acceptanceCriterion"), min_items=1),
            "inputArtifacts": hashes(),
            "dependencyWorkItemIds": ids(),
            "allowedResources": array(c("resourceGrant")),
            "requiredCapabilities": array(c("capabilityRef"), min_items=1),
            "deadline": c("timestamp"),
            "requestedUrgency": enum("routine", "normal", "high", "critical"),
            "businessImpact": text(4000),
            "retryPolicy": obj(
                {
                    "maxAttempts": c("positiveInteger"),
                    "backoff": enum("none", "fixed", "exponential"),
                    "maxDelay": c("duration"),
                    "retryableFailures": array(string(pattern="^[A-Z][A-Z0-9_]{1,127}$"), unique=True),
                }
            ),
            "budget": c("budget"),
            "sideEffectRisk": enum("none", "reversible", "external", "high_risk", "destructive"),
            "executionApproval": enum("not_required", "policy_required", "human_required"),
        },
        {"constraints": open_object(), "extensions": c("extensions")},
    ),
)

# --- WorkItem (§10) --------------------------------------------------------------------------

_capabilities = array(c("capabilityRef"), min_items=1)

WORK_ITEM = document(
    "work-item",
    obj(
        {
            "workItemId": c("id"),
            "missionId": c("id"),
            "groupId": c("id"),
            "conversationId": c("id"),
            "revision": c("safeInteger"),
            "state": enum(
                "open", "offered", "queued", "active", "blocked", "submitted", "verified", "failed", "cancelled"
            ),
            "exclusive": boolean(),
            "contract": ref("work-contract"),
            "createdBy": c("actor"),
            "createdAt": c("timestamp"),
        },
        {
            "offers": array(
                obj(
                    {
                        "offerId": c("id"),
                        "agentId": c("id"),
                        "agentCardVersion": c("positiveInteger"),
                        "expiresAt": c("timestamp"),
                        "status": enum("pending", "accepted", "declined", "withdrawn", "expired", "lost_race"),
                    },
                    {
                        "declineReason": enum(
                            "capacity", "deadline", "capability", "authorization", "dependency", "budget", "other"
                        )
                    },
                )
            ),
            "owner": obj(
                {
                    "agentId": c("id"),
                    "agentCardVersion": c("positiveInteger"),
                    "capabilityPins": _capabilities,
                    "ownershipEpoch": c("positiveInteger"),
                    "ownershipLeaseId": c("id"),
                    "acceptedAt": c("timestamp"),
                }
            ),
            "selectionBasis": obj(
                {
                    "requiredCapabilities": _capabilities,
                    "verifiedMatches": _capabilities,
                    "authorizationEligible": boolean(),
                    "availabilityEstimate": c("timestamp"),
                    "expectedCost": number(minimum=0),
                    "reliabilityEvidence": ids(unique=False),
                    "policyRulesApplied": array(text(200), min_items=1),
                }
            ),
            "scheduleEstimate": obj(
                {
                    "estimatedStart": c("timestamp"),
                    "estimatedCompletion": c("timestamp"),
                    "confidence": number(minimum=0, maximum=1),
                    "capacityStatus": enum("available", "queued", "constrained", "blocked"),
                    "lastCalculatedAt": c("timestamp"),
                }
            ),
            "progress": obj(
                {
                    "currentPhase": text(500),
                    "completedMilestones": array(text(500)),
                    "nextCheckpoint": text(500),
                    "blockers": array(text(2000)),
                    "updatedCompletionEstimate": c("timestamp"),
                    "evidenceIds": ids(),
                }
            ),
            "submission": obj(
                {"artifactHashes": hashes(min_items=1), "evidenceIds": ids(min_items=1), "submittedAt": c("timestamp")}
            ),
            "authorizedBy": c("actor"),
            "updatedAt": c("timestamp"),
            "extensions": c("extensions"),
        },
        allOf=[
            # From queued on, a WorkItem has an owner and the reasons it was chosen (§10, §11).
            when(
                where(state=enum("queued", "active", "blocked", "submitted", "verified")),
                has("owner", "selectionBasis"),
            ),
            when(where(state=enum("submitted", "verified")), has("submission")),
        ],
    ),
)

SCHEMAS: dict[str, Schema] = {
    "conversation": CONVERSATION,
    "error": ERROR,
    "group": GROUP,
    "lease": LEASE,
    "membership": MEMBERSHIP,
    "message": MESSAGE,
    "mission": MISSION,
    "presence-record": PRESENCE_RECORD,
    "work-contract": WORK_CONTRACT,
    "work-item": WORK_ITEM,
}
