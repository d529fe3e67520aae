"""Small valid instances of the normative objects a payload embeds.

The catalogue publishes one example payload per kind (the ``examples`` keyword
of its schema) so that a client can see a whole payload; these are the parts
those examples share.  They are schema-valid, not signed: a signature here is
a well-formed placeholder.
"""

from __future__ import annotations

from typing import Any

T0 = "2026-01-05T09:00:00Z"
T1 = "2026-01-05T09:10:00Z"
T2 = "2026-01-05T09:30:00Z"
DEADLINE = "2026-01-09T17:00:00Z"


def uid(n: int) -> str:
    """An example ``urn:uuid:`` identifier, distinct for each ``n``."""
    return f"urn:uuid:00000000-0000-4000-8000-{n:012d}"


ORG = uid(1)
MISSION = uid(2)
GROUP = uid(3)
CONVERSATION = uid(4)
OWNER = {"type": "human", "id": uid(5)}
COORDINATOR = {"type": "agent", "id": uid(6)}
WORKER = {"type": "agent", "id": uid(7)}
SERVICE = {"type": "service", "id": uid(8)}
WORK_ITEM = uid(9)
LEASE_ID = uid(10)
EVENT = uid(11)
KEY = uid(12)
HASH = "sha256:" + "ab" * 32
OTHER_HASH = "sha256:" + "cd" * 32
CAPABILITY = {"id": "text.summarize", "version": "1.2.0"}

SIGNATURE = {"algorithm": "Ed25519", "keyId": KEY, "createdAt": T0, "value": "AA"}
BUDGET = {"currency": "EUR", "financialLimit": 20, "modelTokenLimit": 200000}
FULL_BUDGET = {
    "currency": "EUR",
    "financialLimit": 10,
    "modelTokenLimit": 100000,
    "toolCallLimit": 50,
    "computeSecondsLimit": 600,
    "wallClockSecondsLimit": 3600,
    "externalSideEffectLimit": 0,
}
CRITERION = {
    "criterionId": "summary-complete",
    "description": "The summary covers every section of the source.",
    "evidenceRequired": ["reviewer_assessment"],
}


def work_contract() -> dict[str, Any]:
    return {
        "contractVersion": 1,
        "goal": "Summarize the quarterly report.",
        "requiredDeliverables": [
            {
                "deliverableId": "summary",
                "description": "A two-page summary.",
                "mediaType": "text/markdown",
                "schema": "https://schemas.example.org/summary",
            }
        ],
        "acceptanceCriteria": [CRITERION],
        "inputArtifacts": [HASH],
        "dependencyWorkItemIds": [],
        "allowedResources": [],
        "requiredCapabilities": [CAPABILITY],
        "deadline": DEADLINE,
        "requestedUrgency": "normal",
        "businessImpact": "Board meeting preparation.",
        "retryPolicy": {"maxAttempts": 2, "backoff": "fixed", "maxDelay": "PT5M", "retryableFailures": []},
        "budget": BUDGET,
        "sideEffectRisk": "none",
        "executionApproval": "not_required",
    }


def lease(kind: str = "execution") -> dict[str, Any]:
    out: dict[str, Any] = {
        "leaseId": LEASE_ID,
        "leaseType": kind,
        "missionId": MISSION,
        "groupId": GROUP,
        "holderAgentId": WORKER["id"],
        "sessionEpoch": 1,
        "issuedAt": T0,
        "startsAt": T0,
        "expiresAt": T1,
        "state": "active",
        "renewalCount": 0,
        "workItemId": WORK_ITEM,
        "ownershipEpoch": 1,
    }
    if kind == "ownership":
        out["startBy"] = T1
    return out


def renewed_lease() -> dict[str, Any]:
    return {**lease(), "expiresAt": T2, "renewalCount": 1, "lastRenewedAt": T1}


def evidence() -> dict[str, Any]:
    return {
        "evidenceId": uid(20),
        "missionId": MISSION,
        "groupId": GROUP,
        "workItemId": WORK_ITEM,
        "type": "reviewer_assessment",
        "subject": {"type": "artifact", "id": HASH},
        "criterionIds": ["summary-complete"],
        "method": "A reviewer read the summary against the source.",
        "result": "passed",
        "artifactHashes": [HASH],
        "generatedBy": COORDINATOR,
        "createdAt": T1,
        "signature": SIGNATURE,
    }


def artifact() -> dict[str, Any]:
    return {
        "artifactId": uid(21),
        "contentHash": HASH,
        "uri": "https://portal.example.org/artifacts/" + HASH,
        "sizeBytes": 2048,
        "mediaType": "text/markdown",
        "schemaUri": "https://schemas.example.org/summary",
        "producer": {"agentId": WORKER["id"], "agentCardVersion": 1, "capabilities": [CAPABILITY]},
        "missionId": MISSION,
        "groupId": GROUP,
        "workItemId": WORK_ITEM,
        "sourceArtifactHashes": [],
        "toolVersions": [],
        "modelVersions": [],
        "classification": "internal",
        "createdAt": T1,
        "signature": SIGNATURE,
    }


def approval(kind: str = "mission_final") -> dict[str, Any]:
    out: dict[str, Any] = {
        "approvalId": uid(22),
        "kind": kind,
        "decision": "approved",
        "missionId": MISSION,
        "groupId": GROUP,
        "missionRevision": 3,
        "artifactHashes": [HASH],
        "acceptancePolicyVersion": "1.0.0",
        "approver": OWNER,
        "comments": "",
        "conditions": [],
        "occurredAt": T1,
        "signature": SIGNATURE,
    }
    if kind == "work_execution":
        out["workItemId"] = WORK_ITEM
    return out


def membership(member: dict[str, Any] = WORKER, role: str = "worker") -> dict[str, Any]:
    return {
        "membershipId": uid(23),
        "missionId": MISSION,
        "groupId": GROUP,
        "member": member,
        "role": role,
        "state": "active",
        "membershipEpoch": 1,
        "scopes": ["work.execute"],
        "visibilityStartSequence": 0,
        "grantedAt": T0,
        "activatedAt": T0,
    }


def mission() -> dict[str, Any]:
    return {
        "missionId": MISSION,
        "groupId": GROUP,
        "revision": 1,
        "objective": "Prepare the board's quarterly briefing.",
        "definitionOfDone": [CRITERION],
        "missionOwner": OWNER,
        "coordinator": {
            "agentId": COORDINATOR["id"],
            "agentCardVersion": 1,
            "coordinatorEpoch": 1,
            "leaseId": uid(24),
        },
        "state": "active",
        "budget": BUDGET,
        "deadline": DEADLINE,
        "approvalPolicy": {"finalHumanApproval": True, "highRiskExecutionApproval": True},
        "createdAt": T0,
    }


def group() -> dict[str, Any]:
    return {
        "groupId": GROUP,
        "missionId": MISSION,
        "state": "active",
        "mainConversationId": CONVERSATION,
        "createdAt": T0,
    }


def message() -> dict[str, Any]:
    return {
        "messageId": uid(25),
        "missionId": MISSION,
        "groupId": GROUP,
        "conversationId": CONVERSATION,
        "author": WORKER,
        "kind": "message",
        "authority": False,
        "content": [{"type": "text", "text": "The source has an appendix; summarize it too?"}],
        "committedAt": T1,
    }


def work_item() -> dict[str, Any]:
    return {
        "workItemId": WORK_ITEM,
        "missionId": MISSION,
        "groupId": GROUP,
        "conversationId": uid(26),
        "revision": 1,
        "state": "open",
        "exclusive": True,
        "contract": work_contract(),
        "createdBy": COORDINATOR,
        "createdAt": T0,
    }


def agent_card() -> dict[str, Any]:
    return {
        "agentId": WORKER["id"],
        "organizationId": ORG,
        "cardVersion": 1,
        "displayName": "Summarizer",
        "owner": OWNER,
        "status": "active",
        "protocolVersions": ["0.1"],
        "endpoints": [{"transport": "wss", "uri": "wss://portal.example.org/mwp/0.1"}],
        "publicKeys": [{"keyId": KEY, "algorithm": "Ed25519", "publicKey": "AA", "validFrom": T0}],
        "capabilities": [
            {
                **CAPABILITY,
                "inputSchema": "https://schemas.example.org/report",
                "inputSchemaHash": HASH,
                "outputSchema": "https://schemas.example.org/summary",
                "outputSchemaHash": OTHER_HASH,
                "constraints": {},
                "verifiedEvidence": [uid(27)],
            }
        ],
        "maxConcurrency": 2,
        "issuedAt": T0,
        "signature": SIGNATURE,
    }


def group_snapshot() -> dict[str, Any]:
    return {
        "snapshotId": uid(28),
        "groupId": GROUP,
        "throughSequence": 12,
        "eventIds": [EVENT],
        "stateHash": HASH,
        "policyLog": [
            {
                "entryId": uid(29),
                "decision": "archive after approval",
                "actor": SERVICE,
                "occurredAt": T1,
                "details": {},
            }
        ],
        "createdBy": SERVICE,
        "createdAt": T1,
        "signature": SIGNATURE,
    }


def context_package() -> dict[str, Any]:
    return {
        "contextPackageId": uid(30),
        "version": 1,
        "missionId": MISSION,
        "groupId": GROUP,
        "sourceEventRange": {"fromSequence": 1, "toSequence": 12, "eventIds": [EVENT]},
        "artifactHashes": [HASH],
        "summary": "The source is the Q3 report; the board wants two pages.",
        "decisions": [{"description": "Appendix is out of scope.", "sourceEventIds": [EVENT]}],
        "constraints": ["No figures from other quarters."],
        "unresolvedQuestions": [],
        "generatedBy": COORDINATOR,
        "generatedAt": T1,
        "signature": SIGNATURE,
        "workItemId": WORK_ITEM,
    }


def selection_basis() -> dict[str, Any]:
    return {
        "requiredCapabilities": [CAPABILITY],
        "verifiedMatches": [CAPABILITY],
        "authorizationEligible": True,
        "availabilityEstimate": T1,
        "expectedCost": 2,
        "reliabilityEvidence": [uid(31)],
        "policyRulesApplied": ["first eligible worker"],
    }


def delegation_grant() -> dict[str, Any]:
    return {
        "grantId": uid(32),
        "granteeAgentId": WORKER["id"],
        "missionId": MISSION,
        "groupId": GROUP,
        "targetWorkItemId": WORK_ITEM,
        "allowedCapabilities": [CAPABILITY],
        "budget": FULL_BUDGET,
        "maxDescendantDepth": 1,
        "granteeMembershipEpoch": 1,
        "coordinatorEpoch": 1,
        "grantedBy": COORDINATOR,
        "grantedAt": T0,
        "expiresAt": DEADLINE,
    }


def checkpoint() -> dict[str, Any]:
    return {"phase": "drafting", "completedMilestones": ["outline"], "nextStep": "write section 2", "createdAt": T1}
