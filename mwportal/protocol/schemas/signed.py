"""The nine Signed Documents of PROTOCOL §6.4, and the First-Admission Record that admits them.

Each signed object closes over its members and carries ``signature``; the
conditionals encode who may issue what (§6, §7, §12, §15): which actor types
a Command kind admits, which epochs each actor type must or must not present,
which Command and Event kinds are Organization-scoped rather than Group-scoped.
"""

from __future__ import annotations

from .common import EVIDENCE_METHODS, LOCAL_KEY, MEDIA_TYPE, capability_id, extension_kind
from .dsl import (
    Schema,
    all_of,
    any_of,
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
    local,
    merge,
    none_of,
    obj,
    open_object,
    shaped,
    string,
    text,
    uri,
    when,
    where,
)

SIGNED_PROFILES = (
    "agent-card",
    "approval",
    "artifact",
    "command",
    "context-package",
    "event",
    "evidence",
    "extension-profile",
    "group-snapshot",
)

# --- Agent Card (§6.2) ------------------------------------------------------------------------

_capability = obj(
    {
        "id": capability_id(),
        "version": c("semver"),
        "inputSchema": uri(),
        "inputSchemaHash": c("sha256"),
        "outputSchema": uri(),
        "outputSchemaHash": c("sha256"),
        "constraints": open_object(),
        "verifiedEvidence": ids(min_items=1),
    }
)

AGENT_CARD = document(
    "agent-card",
    obj(
        {
            "agentId": c("id"),
            "organizationId": c("id"),
            "cardVersion": c("positiveInteger"),
            "displayName": text(200),
            "owner": c("actor"),
            "status": enum("active", "deprecated", "revoked"),
            "protocolVersions": array(c("protocolVersion"), min_items=1, unique=True),
            "endpoints": array(
                obj({"transport": const("wss"), "uri": string(fmt="uri", pattern="^wss://")}),
                min_items=1,
            ),
            "publicKeys": array(c("publicKey"), min_items=1),
            "capabilities": array(_capability, min_items=1),
            "maxConcurrency": c("positiveInteger"),
            "issuedAt": c("timestamp"),
            "signature": c("signature"),
        },
        {
            "description": text(4000, min_length=None),
            "validUntil": c("timestamp"),
            "extensions": c("extensions"),
        },
    ),
)

# --- Approval Decision (§7, §12) -------------------------------------------------------------

APPROVAL = document(
    "approval",
    obj(
        {
            "approvalId": c("id"),
            "kind": enum("mission_final", "child_mission", "work_execution"),
            "decision": enum("approved", "changes_requested", "denied", "revoked"),
            "missionId": c("id"),
            "groupId": c("id"),
            "missionRevision": c("safeInteger"),
            "artifactHashes": hashes(),
            "acceptancePolicyVersion": c("semver"),
            "approver": c("actor"),
            "comments": text(10000, min_length=None),
            "conditions": array(text(2000)),
            "occurredAt": c("timestamp"),
            "signature": c("signature"),
        },
        {"workItemId": c("id"), "revokesApprovalId": c("id")},
        allOf=[
            # Approving a Mission or a child Mission names what was approved.
            when(
                where(kind=enum("mission_final", "child_mission"), decision=const("approved")),
                shaped(artifactHashes={"minItems": 1}),
            ),
            # Final Mission approval is a human's (§7).
            when(where(kind=const("mission_final")), shaped(approver=c("humanActor"))),
            when(where(kind=const("work_execution")), has("workItemId")),
            when(where(decision=const("revoked")), has("revokesApprovalId")),
        ],
    ),
)

# --- Artifact Manifest (§13) -----------------------------------------------------------------

_name_version = {"name": text(200), "version": text(200)}

ARTIFACT = document(
    "artifact",
    obj(
        {
            "artifactId": c("id"),
            "contentHash": c("sha256"),
            "uri": uri(),
            "sizeBytes": c("safeInteger"),
            "mediaType": string(pattern=MEDIA_TYPE),
            "schemaUri": uri(),
            "producer": obj(
                {
                    "agentId": c("id"),
                    "agentCardVersion": c("positiveInteger"),
                    "capabilities": array(c("capabilityRef"), min_items=1),
                }
            ),
            "missionId": c("id"),
            "groupId": c("id"),
            "workItemId": c("id"),
            "sourceArtifactHashes": hashes(),
            "toolVersions": array(obj(_name_version)),
            "modelVersions": array(obj({"provider": text(200), "model": text(200), "version": text(200)})),
            "classification": c("classification"),
            "createdAt": c("timestamp"),
            "signature": c("signature"),
        },
        {"extensions": c("extensions")},
    ),
)

# --- Command envelope (§15) ------------------------------------------------------------------

CORE_COMMAND_KINDS = (
    "mission.create",
    "mission.assign_coordinator",
    "mission.renew_coordinator",
    "mission.submit_for_approval",
    "mission.approve",
    "mission.request_changes",
    "mission.cancel",
    "mission.terminate",
    "mission.create_child",
    "mission.create_follow_up",
    "membership.change",
    "membership.end",
    "membership.grant_delegation",
    "message.post",
    "message.correct",
    "message.retract",
    "message.redact",
    "work.propose",
    "work.authorize",
    "work.offer",
    "work.accept_offer",
    "work.start",
    "work.checkpoint",
    "work.block",
    "work.unblock",
    "work.submit",
    "work.accept_result",
    "work.fail",
    "work.cancel",
    "artifact.publish",
    "approval.grant_execution",
    "policy.grant_cooperation_override",
)
# Issued by the Organization's service outside any Group (§6.2 registration, §6.3 sessions).
ORGANIZATION_COMMAND_KINDS = (
    "ext.missionweaveprotocol.registry.agent_card_register",
    "ext.missionweaveprotocol.identity.session_open",
)
# Only the Mission's current Coordinator, presenting its coordinator epoch, issues these.
COORDINATOR_COMMAND_KINDS = (
    "mission.renew_coordinator",
    "mission.submit_for_approval",
    "mission.create_child",
    "membership.grant_delegation",
    "work.accept_result",
)

_EPOCHS_OF_MEMBERS = ("membershipEpoch", "coordinatorEpoch")


def _actor_is(t: Schema) -> Schema:
    return where(actor=where(type=t))


def _created_by_human() -> Schema:
    # A Mission is created by a human before any Group membership exists.
    return merge(shaped(actor=c("humanActor")), none_of(*_EPOCHS_OF_MEMBERS))


COMMAND = document(
    "command",
    obj(
        {
            "protocolVersion": c("protocolVersion"),
            "actionId": c("id"),
            "actor": c("actor"),
            "kind": any_of(local("coreCommandKind"), extension_kind()),
            "correlationId": c("id"),
            "issuedAt": c("timestamp"),
            "payload": open_object(),
            "signature": c("signature"),
        },
        {
            "sessionEpoch": c("positiveInteger"),
            "membershipEpoch": c("positiveInteger"),
            "coordinatorEpoch": c("positiveInteger"),
            "groupId": c("id"),
            "conversationId": c("id"),
            "workItemId": c("id"),
            "cooperationOverrideGrantId": c("id"),
            "expectedRevision": c("safeInteger"),
            "causedByEventId": c("id"),
            "extensions": c("extensions"),
        },
        allOf=[
            # Termination is for Agents (the Coordinator) and the service, never a human.
            when(where(kind=const("mission.terminate")), shaped(actor=where(type=enum("agent", "service")))),
            # Agents act within a Session and a Group membership; nobody else presents a session epoch.
            when(_actor_is(const("agent")), has("groupId", "sessionEpoch", "membershipEpoch"), lacks("sessionEpoch")),
            when(_actor_is(const("service")), none_of(*_EPOCHS_OF_MEMBERS)),
            when(where(kind=local("coreCommandKind")), has("groupId")),
            when(
                where(
                    actor=where(type=const("human")), kind={"not": enum("mission.create", "mission.create_follow_up")}
                ),
                has("groupId", "membershipEpoch"),
            ),
            when(where(kind=const("mission.create")), _created_by_human()),
            when(where(kind=const("mission.create_follow_up")), _created_by_human()),
            when(
                where(kind=local("organizationScopedKind")),
                merge(
                    shaped(actor=where(type=const("service"))), none_of("groupId", "sessionEpoch", *_EPOCHS_OF_MEMBERS)
                ),
            ),
            when(
                where(kind=local("coordinatorOnlyKind")), merge(shaped(actor=c("agentActor")), has("coordinatorEpoch"))
            ),
            when(where(actor=where(type=const("agent")), kind=const("mission.terminate")), has("coordinatorEpoch")),
        ],
    ),
    defs={
        "coreCommandKind": enum(*CORE_COMMAND_KINDS),
        "organizationScopedKind": enum(*ORGANIZATION_COMMAND_KINDS),
        "coordinatorOnlyKind": enum(*COORDINATOR_COMMAND_KINDS),
    },
)

# --- Context Package (§13) -------------------------------------------------------------------

CONTEXT_PACKAGE = document(
    "context-package",
    obj(
        {
            "contextPackageId": c("id"),
            "version": c("positiveInteger"),
            "missionId": c("id"),
            "groupId": c("id"),
            "sourceEventRange": obj(
                {
                    "fromSequence": c("positiveInteger"),
                    "toSequence": c("positiveInteger"),
                    "eventIds": ids(min_items=1),
                }
            ),
            "artifactHashes": hashes(),
            "summary": text(50000),
            # Every decision cites the Events it came from.
            "decisions": array(obj({"description": text(4000), "sourceEventIds": ids(min_items=1)})),
            "constraints": array(text(4000)),
            "unresolvedQuestions": array(text(4000)),
            "generatedBy": c("agentActor"),
            "generatedAt": c("timestamp"),
            "signature": c("signature"),
        },
        {"previousContextPackageId": c("id"), "workItemId": c("id"), "extensions": c("extensions")},
    ),
)

# --- Event envelope (§15) --------------------------------------------------------------------

CORE_EVENT_KINDS = (
    "mission.created",
    "mission.coordinator.assigned",
    "mission.coordinator.renewed",
    "mission.submitted_for_approval",
    "mission.approved",
    "mission.changes_requested",
    "mission.cancelled",
    "mission.terminated",
    "mission.child.created",
    "mission.follow_up.created",
    "membership.changed",
    "membership.ended",
    "membership.delegation.granted",
    "message.posted",
    "message.corrected",
    "message.retracted",
    "message.redacted",
    "work.proposed",
    "work.authorized",
    "work.offer.created",
    "work.offer.accepted",
    "work.contract.revised",
    "work.started",
    "work.progressed",
    "work.checkpointed",
    "work.blocked",
    "work.unblocked",
    "work.submitted",
    "work.result.accepted",
    "work.failed",
    "work.cancelled",
    "artifact.published",
    "approval.execution.granted",
    "policy.cooperation_override.granted",
    "group.snapshot.created",
    "group.archived",
)
ORGANIZATION_EVENT_KINDS = (
    "ext.missionweaveprotocol.registry.agent_card_registered",
    "ext.missionweaveprotocol.identity.session_opened",
)
_GROUP_POSITION = ("groupId", "sequence", "aggregateRevision")

EVENT = document(
    "event",
    obj(
        {
            "protocolVersion": c("protocolVersion"),
            "eventId": c("id"),
            "kind": any_of(enum(*CORE_EVENT_KINDS), extension_kind()),
            "actor": c("actor"),
            "cause": obj({"type": enum("command", "event", "timer", "policy"), "id": c("id")}),
            "correlationId": c("id"),
            "occurredAt": c("timestamp"),
            "payload": open_object(),
            "acceptedBy": c("actor"),
            "signature": c("signature"),
        },
        {
            "groupId": c("id"),
            "sequence": c("positiveInteger"),
            "aggregateRevision": c("safeInteger"),
            "conversationId": c("id"),
            "workItemId": c("id"),
            "commandHash": c("sha256"),
            "extensions": c("extensions"),
        },
        allOf=[
            # Organization-scoped Events stand outside every Group's sequence; all others have a place in one.
            when(
                where(kind=enum(*ORGANIZATION_EVENT_KINDS)),
                merge(shaped(actor=where(type=const("service"))), none_of(*_GROUP_POSITION)),
                has(*_GROUP_POSITION),
            )
        ],
    ),
)

# --- Evidence (§13) --------------------------------------------------------------------------

EVIDENCE = document(
    "evidence",
    obj(
        {
            "evidenceId": c("id"),
            "missionId": c("id"),
            "groupId": c("id"),
            "workItemId": c("id"),
            "type": enum(*EVIDENCE_METHODS, "failure_report"),
            "subject": obj({"type": enum("work_item", "artifact", "mission"), "id": any_of(c("id"), c("sha256"))}),
            "criterionIds": array(string(pattern=LOCAL_KEY), min_items=1, unique=True),
            "method": text(4000),
            "result": enum("passed", "failed", "inconclusive"),
            "artifactHashes": hashes(),
            "generatedBy": c("actor"),
            "createdAt": c("timestamp"),
            "signature": c("signature"),
        },
        {
            "details": open_object(),
            "toolVersion": text(500, min_length=None),
            "modelVersion": text(500, min_length=None),
        },
    ),
)

# --- Extension Profile (§18) -----------------------------------------------------------------

EXTENSION_PROFILE = document(
    "extension-profile",
    obj(
        {
            "profileUri": c("id"),
            "name": text(200),
            "version": c("semver"),
            "schemaUri": uri(),
            "schemaHash": c("sha256"),
            "requiredCapabilities": array(c("capabilityRef")),
            "critical": boolean(),
            "commandKinds": array(extension_kind(), unique=True),
            "eventKinds": array(extension_kind(), unique=True),
            # An extension never overrides a core invariant (§18).
            "overridesCoreInvariants": const(False),
            "approvedBy": c("actor"),
            "approvedAt": c("timestamp"),
            "signature": c("signature"),
        }
    ),
)

# --- Group Snapshot (§16) --------------------------------------------------------------------

GROUP_SNAPSHOT = document(
    "group-snapshot",
    obj(
        {
            "snapshotId": c("id"),
            "groupId": c("id"),
            "throughSequence": c("positiveInteger"),
            "eventIds": ids(min_items=1),
            "stateHash": c("sha256"),
            "policyLog": array(
                obj(
                    {
                        "entryId": c("id"),
                        "decision": text(4000),
                        "actor": c("actor"),
                        "occurredAt": c("timestamp"),
                        "details": open_object(),
                    }
                ),
                min_items=1,
            ),
            "createdBy": obj({"type": const("service"), "id": c("id")}),
            "createdAt": c("timestamp"),
            "signature": c("signature"),
        }
    ),
)

# --- First-Admission Record (§6.4): trusted metadata, not itself signed ----------------------

FIRST_ADMISSION_RECORD = document(
    "first-admission-record",
    obj(
        {
            "protocolVersion": c("protocolVersion"),
            "admissionRecordId": c("id"),
            "organizationId": c("id"),
            "documentKind": enum(*SIGNED_PROFILES),
            "signingHash": c("sha256"),
            "keyId": c("id"),
            "principal": c("actor"),
            "trustedAcceptedAt": c("timestamp"),
            "acceptedBy": all_of(c("actor"), shaped(type=const("service"))),
        }
    ),
)

SCHEMAS: dict[str, Schema] = {
    "agent-card": AGENT_CARD,
    "approval": APPROVAL,
    "artifact": ARTIFACT,
    "command": COMMAND,
    "context-package": CONTEXT_PACKAGE,
    "event": EVENT,
    "evidence": EVIDENCE,
    "extension-profile": EXTENSION_PROFILE,
    "group-snapshot": GROUP_SNAPSHOT,
    "first-admission-record": FIRST_ADMISSION_RECORD,
}
