"""Command definitions: Organization bootstrap, Missions, Memberships, Messages, policy, archival."""

from __future__ import annotations

from typing import Any

from ..schemas.dsl import Schema, array, boolean, c, const, has, ids, one_of, ref, text
from . import examples as ex
from .model import (
    ACTOR,
    AGENT_CARD,
    APPROVAL,
    APPROVAL_POLICY,
    CHILD_FAILURE_POLICY,
    CONTEXT_PACKAGE,
    COOPERATION_POLICY,
    COUNT,
    CRITERIA,
    GROUP_SNAPSHOT,
    HASH,
    ID,
    MESSAGE_CONTENT,
    PERMISSIONS,
    POSITIVE,
    REASON,
    ROLE,
    SECONDS,
    TIME,
    CommandDefinition,
    command_payload,
    epochs_for,
)

PROJECT = "ext.mwportal"
"""The project's own Extension Profile namespace (§18) for what MWP 0.1 leaves out."""


def define(
    kind: str,
    required: dict[str, Schema],
    optional: dict[str, Schema] | None = None,
    *,
    issuers: tuple[str, ...],
    aggregate: str,
    events: tuple[str, ...],
    example: dict[str, Any],
    cas: bool = False,
    leased: bool = False,
    epochs: dict[str, tuple[str, ...]] | None = None,
    scope: str = "group",
    summary: str = "",
    **more: Any,
) -> CommandDefinition:
    schema = command_payload(kind, required, optional, **more)
    schema["examples"] = [example]
    return CommandDefinition(
        kind=kind,
        payload_schema=schema,
        issuers=issuers,
        epochs=epochs if epochs is not None else epochs_for(issuers, leased=leased),
        aggregate=aggregate,
        events=events,
        compare_and_set=cas,
        scope=scope,
        summary=summary,
        examples=(example,),
    )


# The bundle's mission.create vector names the Coordinator ``coordinatorAgentId``; the reference
# implementation names it ``coordinatorId``.  Exactly one of the two.
_COORDINATOR = {"coordinatorAgentId": ID, "coordinatorId": ID}
_ONE_COORDINATOR = one_of(has("coordinatorAgentId"), has("coordinatorId"))

_MISSION_TERMS = {
    "title": text(500),
    "objective": text(10000),
    "definitionOfDone": CRITERIA,
    "budget": c("budget"),
    "deadline": TIME,
    "permissions": PERMISSIONS,
    "approvalPolicy": APPROVAL_POLICY,
    "coordinatorLeaseSeconds": SECONDS,
}

_NEW_MISSION = {
    "missionId": ex.MISSION,
    "groupId": ex.GROUP,
    "coordinatorId": ex.COORDINATOR["id"],
    "title": "Board briefing",
    "objective": "Prepare the board's quarterly briefing.",
    "definitionOfDone": [ex.CRITERION],
    "budget": ex.BUDGET,
    "deadline": ex.DEADLINE,
    "permissions": [],
    "coordinatorLeaseSeconds": 300,
}

_HUMAN_ONLY: dict[str, tuple[str, ...]] = {"mission_owner": ()}

ORGANIZATION = (
    define(
        "ext.missionweaveprotocol.registry.agent_card_register",
        {"card": AGENT_CARD},
        issuers=("service",),
        aggregate="agent",
        events=(
            "ext.missionweaveprotocol.registry.agent_card_registered",
            "ext.missionweaveprotocol.core.work_execution_lease_revoked",
            "ext.mwportal.work.ownership_fenced",
        ),
        scope="organization",
        summary="The Registry service registers a signed Agent Card version (§6.1).",
        example={"card": ex.agent_card()},
    ),
    define(
        "ext.missionweaveprotocol.identity.session_open",
        {"agentId": ID},
        issuers=("service",),
        aggregate="agent",
        events=(
            "ext.missionweaveprotocol.identity.session_opened",
            "ext.missionweaveprotocol.core.work_execution_lease_revoked",
        ),
        scope="organization",
        summary="A new Session Epoch for the Agent; its older sessions and active leases are revoked (§6.3, §11.3).",
        example={"agentId": ex.WORKER["id"]},
    ),
    define(
        f"{PROJECT}.admin.organization_create",
        {"organizationId": ID, "slug": text(50), "name": text(200)},
        issuers=("service",),
        aggregate="organization",
        events=(f"{PROJECT}.admin.organization_created",),
        summary="The Organization and its administrative Group come into being (bootstrap).",
        example={"organizationId": ex.ORG, "slug": "acme", "name": "Acme"},
    ),
    define(
        f"{PROJECT}.registry.principal_register",
        {"principal": ACTOR, "name": text(200), "organizationRoles": array(text(100), unique=True)},
        {"publicKey": c("publicKey"), "username": text(150)},
        issuers=("service",),
        aggregate="agent",
        events=(f"{PROJECT}.registry.principal_registered",),
        summary="An Organization admin registers a human or Agent Principal, with its key if it has one.",
        example={"principal": ex.OWNER, "name": "Dana", "organizationRoles": ["mission_owner"], "username": "dana"},
    ),
    define(
        f"{PROJECT}.registry.principal_key_enroll",
        {"publicKey": c("publicKey")},
        {"principal": ACTOR},
        issuers=("member", "service"),
        aggregate="agent",
        events=(f"{PROJECT}.registry.principal_key_enrolled",),
        summary="The public half of the key a person's own browser generated is bound to them: by the person,"
        " or by the portal for the person its sign-in authenticated (``principal``).",
        example={"publicKey": {"keyId": ex.KEY, "algorithm": "Ed25519", "publicKey": "AA", "validFrom": ex.T0}},
    ),
    define(
        f"{PROJECT}.registry.principal_key_revoke",
        {"keyId": ID},
        {"reason": REASON},
        issuers=("member", "service"),
        aggregate="agent",
        events=(f"{PROJECT}.registry.principal_key_revoked",),
        summary="An Organization admin revokes a person's key: its validity history gains a revokedAt (§6.4).",
        example={"keyId": ex.KEY, "reason": "The laptop was lost."},
    ),
    define(
        f"{PROJECT}.scheduling.priority_policy_set",
        {"policy": {"type": "object"}},
        issuers=("mission_owner", "service"),
        aggregate="organization",
        events=(f"{PROJECT}.scheduling.priority_policy_changed",),
        summary="The Organization's priority policy (§11.1: escalation goes through policy, never a Coordinator).",
        example={"policy": {"classes": {"normal": 1}}},
    ),
)

MISSIONS = (
    define(
        "mission.create",
        {"missionId": ID, "groupId": ID},
        {**_COORDINATOR, **_MISSION_TERMS, "followUpOfMissionId": ID},
        issuers=("mission_owner",),
        epochs=_HUMAN_ONLY,
        aggregate="mission",
        events=("mission.created",),
        summary="A human creates a root Mission, its Group and Conversation, and a Coordinator lease (§7.1).",
        example=_NEW_MISSION,
        oneOf=_ONE_COORDINATOR["oneOf"],
    ),
    define(
        "mission.create_follow_up",
        {"missionId": ID, "groupId": ID, "followUpOfMissionId": ID},
        {**_COORDINATOR, **_MISSION_TERMS},
        issuers=("mission_owner",),
        epochs=_HUMAN_ONLY,
        aggregate="mission",
        events=("mission.follow_up.created",),
        summary="The same human opens a Mission linked to an approved one (§7.1).",
        example={**_NEW_MISSION, "missionId": ex.uid(40), "groupId": ex.uid(41), "followUpOfMissionId": ex.MISSION},
        oneOf=_ONE_COORDINATOR["oneOf"],
    ),
    define(
        "mission.create_child",
        {
            "missionId": ID,
            "groupId": ID,
            "parentWorkItemId": ID,
            "title": text(500),
            "objective": text(10000),
            "definitionOfDone": CRITERIA,
            "deadline": TIME,
        },
        {
            **_COORDINATOR,
            "budget": c("budget"),
            "permissions": PERMISSIONS,
            "failurePolicy": CHILD_FAILURE_POLICY,
            "coordinatorLeaseSeconds": SECONDS,
        },
        issuers=("coordinator",),
        aggregate="mission",
        events=("mission.child.created", "mission.created", "work.blocked"),
        cas=True,
        summary="The Coordinator promotes a WorkItem to a child Mission; the parent WorkItem blocks (§14).",
        example={
            **{k: _NEW_MISSION[k] for k in ("title", "objective", "definitionOfDone", "deadline", "budget")},
            "missionId": ex.uid(42),
            "groupId": ex.uid(43),
            "parentWorkItemId": ex.WORK_ITEM,
            "coordinatorId": ex.uid(44),
            "failurePolicy": "block_parent_work_item",
        },
        oneOf=_ONE_COORDINATOR["oneOf"],
    ),
    define(
        "mission.assign_coordinator",
        {},
        {**_COORDINATOR, "leaseSeconds": SECONDS},
        issuers=("mission_owner", "service"),
        aggregate="mission",
        # The generated Context Package the replacement receives is published first (§7.2).
        events=(f"{PROJECT}.context.package_published", "mission.coordinator.assigned", "membership.changed"),
        summary="A replacement Coordinator with a higher Coordinator Epoch (§7.2).",
        example={"coordinatorId": ex.uid(45), "leaseSeconds": 300},
        oneOf=_ONE_COORDINATOR["oneOf"],
    ),
    define(
        "mission.renew_coordinator",
        {},
        {"leaseSeconds": SECONDS},
        issuers=("coordinator",),
        aggregate="mission",
        events=("mission.coordinator.renewed",),
        cas=True,
        summary="The current Coordinator renews its lease (§7.2).",
        example={"leaseSeconds": 300},
    ),
    define(
        f"{PROJECT}.mission.coordinator_lease_expire",
        {"coordinatorEpoch": POSITIVE},
        issuers=("service",),
        aggregate="mission",
        events=(f"{PROJECT}.mission.coordinator_lease_expired",),
        cas=True,
        summary="The control plane records that the Coordinator lease of an epoch ran out unrenewed (§7.2).",
        example={"coordinatorEpoch": 1},
    ),
    define(
        f"{PROJECT}.mission.coordinator_reconcile",
        {"contextPackageId": ID, "contextPackageHash": HASH, "throughSequence": POSITIVE},
        issuers=("coordinator",),
        aggregate="mission",
        events=(f"{PROJECT}.mission.coordinator_reconciled",),
        summary=(
            "A replacement Coordinator cites the signed Context Package its appointment named and the Group"
            " sequence it has processed through (at or past the appointment); until it has, its work.authorize,"
            " work.offer and mission.create_child are refused (§7.2: it reconciles before new assignments)."
        ),
        example={"contextPackageId": ex.uid(30), "contextPackageHash": ex.HASH, "throughSequence": 12},
    ),
    define(
        "mission.submit_for_approval",
        {"artifactHashes": array(HASH, min_items=1, unique=True)},
        {"missionRevision": POSITIVE},
        issuers=("coordinator",),
        aggregate="mission",
        events=("mission.submitted_for_approval",),
        summary="The Coordinator submits a Mission revision and its Artifact set (§7.3).",
        example={"artifactHashes": [ex.HASH]},
    ),
    define(
        "mission.approve",
        {
            "approvalId": ID,
            "missionRevision": POSITIVE,
            "artifactHashes": array(HASH, min_items=1, unique=True),
            "acceptancePolicyVersion": c("semver"),
        },
        # ``approval``: the Approval document (approval.schema.json) the MissionOwner signed over
        # exactly these members; the Group Authority requires it and verifies its signature (§7.3).
        {"comments": text(10000, min_length=None), "conditions": array(text(2000)), "approval": APPROVAL},
        issuers=("mission_owner",),
        aggregate="mission",
        events=("mission.approved", "work.result.accepted"),
        cas=True,
        summary="The MissionOwner approves; a child Mission's approval verifies its parent WorkItem (§7.3, §14).",
        example={
            "approvalId": ex.uid(22),
            "missionRevision": 3,
            "artifactHashes": [ex.HASH],
            "acceptancePolicyVersion": "1.0.0",
            "comments": "",
            "approval": ex.approval(),
        },
    ),
    define(
        "mission.request_changes",
        {"missionRevision": POSITIVE, "feedback": text(10000)},
        issuers=("mission_owner",),
        aggregate="mission",
        events=("mission.changes_requested",),
        cas=True,
        summary="The MissionOwner reopens the submitted Mission with feedback (§7.1).",
        example={"missionRevision": 3, "feedback": "Add the appendix."},
    ),
    define(
        "mission.cancel",
        {"reason": REASON},
        issuers=("mission_owner", "service"),
        aggregate="mission",
        events=("mission.cancelled", "work.cancelled", "work.failed", "work.blocked", "membership.ended"),
        cas=True,
        summary="Cancellation propagates to unfinished WorkItems and child Missions (§7.1, §10.2).",
        example={"reason": "The board meeting moved."},
    ),
    define(
        "mission.terminate",
        {"reason": REASON},
        issuers=("coordinator", "service"),
        aggregate="mission",
        events=("mission.terminated", "work.failed", "work.blocked", "membership.ended"),
        cas=True,
        summary="The Mission fails; a child's failure blocks or fails its parent WorkItem as declared (§7.1, §14).",
        example={"reason": "The source report was withdrawn."},
    ),
)

MEMBERSHIPS = (
    define(
        "membership.change",
        {"principal": ACTOR, "roles": array(ROLE, min_items=1, unique=True)},
        {
            "provisional": boolean(),
            "visibilityAfterSequence": COUNT,
            "contextPackageId": ID,
            "provisionalExpiresAt": TIME,
        },
        issuers=("mission_owner", "coordinator"),
        aggregate="membership",
        events=("membership.changed",),
        cas=True,
        summary="Grants or changes a Principal's Membership roles in the Group (§8).",
        example={"principal": ex.WORKER, "roles": ["worker"], "provisional": False, "visibilityAfterSequence": None},
    ),
    define(
        "membership.end",
        {"principal": ACTOR},
        {"reason": REASON},
        issuers=("mission_owner", "coordinator"),
        aggregate="membership",
        events=(
            "membership.ended",
            "ext.missionweaveprotocol.core.work_execution_lease_revoked",
            f"{PROJECT}.work.ownership_fenced",
        ),
        cas=True,
        summary="Ends a Membership; the member's leases and ownerships are revoked (§8, §11.3).",
        example={"principal": ex.WORKER},
    ),
    define(
        "membership.grant_delegation",
        {
            "grantId": ID,
            "granteeAgentId": ID,
            "targetWorkItemId": ID,
            "allowedCapabilities": array(c("capabilityRef"), min_items=1, unique=True),
            "budget": {"allOf": [c("budget")], "required": list(ex.FULL_BUDGET)},
            "maxDescendantDepth": COUNT,
            "expiresAt": TIME,
        },
        issuers=("coordinator",),
        aggregate="membership",
        events=("membership.delegation.granted",),
        summary="A scoped Delegation Grant for a work_delegate member (§9.1).",
        example={
            "grantId": ex.uid(47),
            "granteeAgentId": ex.WORKER["id"],
            "targetWorkItemId": ex.WORK_ITEM,
            "allowedCapabilities": [ex.CAPABILITY],
            "budget": ex.FULL_BUDGET,
            "maxDescendantDepth": 1,
            "expiresAt": ex.DEADLINE,
        },
    ),
)

_AMENDMENT = {"amendmentId": ID, "messageId": ID, "reason": REASON}

ESSENTIAL_AMBIGUITY = f"https://mwportal.dev/schemas/0.1/{PROJECT}.work.essential-ambiguity"
"""The ``data_ref`` schema of the content item that makes a Message in a WorkItem's Conversation an
essential ambiguity (§10.1): ``{"type": "data_ref", "schema": ESSENTIAL_AMBIGUITY, "data": {"questions":
[...], "fields": [contract members]}}``. No candidate accepts that contract revision afterwards."""

MESSAGES = (
    define(
        "message.post",
        {"messageId": ID, "conversationId": ID, "content": {"anyOf": [text(100000), MESSAGE_CONTENT]}},
        {
            "mentions": array(ACTOR, unique=True),
            "references": ids(),
            # A Message never authorizes anything (§9); the member, when sent, says so.
            "authority": const(False),
        },
        issuers=("member",),
        aggregate="message",
        events=("message.posted", f"{PROJECT}.governance.soft_threshold_reached"),
        summary="A completed Message in a Conversation; context, never authority (§9). A structured item of"
        " schema ESSENTIAL_AMBIGUITY in a WorkItem's Conversation raises an essential ambiguity (§10.1).",
        example={"messageId": ex.uid(48), "conversationId": ex.CONVERSATION, "content": "Draft is ready."},
    ),
    define(
        "message.correct",
        {**_AMENDMENT, "replacementContent": {"anyOf": [text(100000), MESSAGE_CONTENT]}},
        issuers=("member",),
        aggregate="message",
        events=("message.corrected",),
        summary="Appends a correction referencing the original Message (§9.1).",
        example={
            "amendmentId": ex.uid(49),
            "messageId": ex.uid(48),
            "replacementContent": "Draft 2 is ready.",
            "reason": "wrong draft",
        },
    ),
    define(
        "message.retract",
        _AMENDMENT,
        issuers=("member",),
        aggregate="message",
        events=("message.retracted",),
        summary="The author retracts a Message; the original stays in history (§9.1).",
        example={"amendmentId": ex.uid(50), "messageId": ex.uid(48), "reason": "posted too early"},
    ),
    define(
        "message.redact",
        _AMENDMENT,
        issuers=("mission_owner", "coordinator"),
        aggregate="message",
        events=("message.redacted",),
        summary="A policy redaction with an auditable reason; content withheld, the Event chain kept (§7.4, §9.1).",
        example={"amendmentId": ex.uid(51), "messageId": ex.uid(48), "reason": "contained a credential"},
    ),
)

POLICY = (
    define(
        f"{PROJECT}.governance.cooperation_policy_set",
        {"policy": {"type": "object"}},
        issuers=("mission_owner", "service"),
        aggregate="organization",
        events=(f"{PROJECT}.governance.cooperation_policy_changed",),
        cas=True,
        summary="The Organization's cooperation limits: soft thresholds and hard limits per policy name (§20).",
        example={"policy": {"proposal_rate": {"windowSeconds": 60, "soft": 5, "hard": 10}}},
    ),
    define(
        "policy.grant_cooperation_override",
        {
            "grantId": ID,
            "policyName": COOPERATION_POLICY,
            "beneficiary": ACTOR,
            "targetCommandKind": c("kind"),
            "targetActionId": ID,
            "reason": REASON,
            "expiresAt": TIME,
        },
        issuers=("mission_owner", "service"),
        aggregate="mission",
        events=("policy.cooperation_override.granted",),
        summary="A one-shot escalation of one cooperation limit for one named Command (§20).",
        example={
            "grantId": ex.uid(52),
            "policyName": "delegation_depth",
            "beneficiary": ex.COORDINATOR,
            "targetCommandKind": "mission.create_child",
            "targetActionId": ex.uid(53),
            "reason": "approved deeper decomposition",
            "expiresAt": ex.T2,
        },
    ),
)

ARCHIVAL = (
    define(
        "ext.missionweaveprotocol.core.group_archive",
        {"snapshot": GROUP_SNAPSHOT},
        issuers=("service",),
        aggregate="group",
        events=("group.snapshot.created", "group.archived"),
        cas=True,
        summary="The signed final snapshot and the archival of the Group, in one transaction (§7.4, §15.2).",
        example={"snapshot": ex.group_snapshot()},
    ),
    define(
        f"{PROJECT}.audit.event_redact",
        {"sequence": POSITIVE, "reason": REASON},
        issuers=("mission_owner",),
        aggregate="group",
        events=(f"{PROJECT}.audit.event_redacted",),
        summary="A tombstone withholding one Event's content; the log and its signatures still verify (§7.4).",
        example={"sequence": 7, "reason": "personal data"},
    ),
    define(
        f"{PROJECT}.context.package_publish",
        {"contextPackage": CONTEXT_PACKAGE},
        issuers=("coordinator",),
        aggregate="context_package",
        events=(f"{PROJECT}.context.package_published",),
        summary="A signed Context Package version for a Worker or a replacement Coordinator (§13.3).",
        example={"contextPackage": ex.context_package()},
    ),
    define(
        f"{PROJECT}.context.package_forward",
        {"contextPackageId": ID, "version": POSITIVE, "toGroupId": ID},
        issuers=("mission_owner", "coordinator"),
        aggregate="context_package",
        events=(f"{PROJECT}.context.package_forwarded", f"{PROJECT}.context.package_received"),
        summary="Cross-Group forwarding, permission-checked and audited on both sides (§13.3).",
        example={"contextPackageId": ex.uid(30), "version": 1, "toGroupId": ex.uid(54)},
    ),
)

_PROFILE_URI = "https://profiles.example.org/mwp/acme-geodata"
_PROFILE_EXAMPLE = {
    "profileUri": _PROFILE_URI,
    "name": "Acme geodata",
    "version": "1.2.0",
    "schemaUri": "https://profiles.example.org/mwp/acme-geodata/1.2.0/schema.json",
    "schemaHash": ex.HASH,
    "requiredCapabilities": [ex.CAPABILITY],
    "critical": True,
    "commandKinds": ["ext.acme.geodata.tile_render"],
    "eventKinds": ["ext.acme.geodata.tile_rendered"],
    "overridesCoreInvariants": False,
    "approvedBy": ex.SERVICE,
    "approvedAt": ex.T0,
    "signature": ex.SIGNATURE,
}

EXTENSION_PROFILES = (
    define(
        f"{PROJECT}.extension.profile_register",
        {"profile": ref("extension-profile")},
        issuers=("mission_owner", "service"),
        aggregate="organization",
        events=(f"{PROJECT}.extension.profile_registered",),
        summary="An Organization-approved, signed Extension Profile version joins the Organization's registry (§18).",
        example={"profile": _PROFILE_EXAMPLE},
    ),
    define(
        f"{PROJECT}.extension.profile_pin",
        {"profileUri": ID, "major": COUNT},
        issuers=("mission_owner", "coordinator"),
        aggregate="group",
        events=(f"{PROJECT}.extension.profile_pinned",),
        summary="The Group pins the supported major version of a registered Extension Profile it uses (§18).",
        example={"profileUri": _PROFILE_URI, "major": 1},
    ),
)

DEFINITIONS: tuple[CommandDefinition, ...] = (
    *ORGANIZATION,
    *MISSIONS,
    *MEMBERSHIPS,
    *MESSAGES,
    *POLICY,
    *ARCHIVAL,
    *EXTENSION_PROFILES,
)

__all__ = ["DEFINITIONS", "ESSENTIAL_AMBIGUITY", "PROJECT", "define"]
