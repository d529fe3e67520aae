"""Governance Commands (PROTOCOL §20): the cooperation policy and one-shot
Cooperation Override Grants, with the checks ``accept()`` runs for a Command
that cites one (``registry.before_handler_hooks`` and ``accepted_hooks``).

A cited grant must exist, be unexpired and unconsumed, and exactly match the
Command's Mission, Group, actor, kind and Action ID; the policy it escalates is
matched by ``governance.limits.enforce`` against the limit the Command exceeds.
It is consumed in the transaction that accepts the target Command (a
conditional update: a concurrent second use finds it consumed), linked in the
Policy Log with the Event it let through. Retrying the accepted Command with
the same content gets its stored receipt back before any of this runs (§15.1).
"""

from __future__ import annotations

from typing import Any

from missions.authority import AggregateRef, Decision, Emit, HandlerContext, check_revision
from missions.models import Agent, Mission
from missions.policylog import Entry
from missions.registry import accepted_hooks, before_handler_hooks, command
from mwportal.protocol import ErrorCode, ProtocolError, catalogue
from mwportal.protocol.command import format_timestamp
from mwportal.protocol.ids import bare, urn
from mwportal.protocol.values import parse_timestamp

from .models import CooperationOverrideGrant, CooperationPolicy
from .policy import check_policy

POLICY_SET = "ext.mwportal.governance.cooperation_policy_set"


def _instant(text: str, field: str) -> Any:
    from datetime import UTC, datetime

    parse_timestamp(text)
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _refuse(code: ErrorCode, message: str, reason: str, field: str | None = None) -> ProtocolError:
    details: dict[str, Any] = {"reason": reason}
    if field:
        details["field"] = field
    return ProtocolError(code, message, details=details)


@command(POLICY_SET, scope="admin", org_roles=("mission_owner", "admin"), actors=("human", "service"))
def set_cooperation_policy(ctx: HandlerContext) -> Decision:
    """A person (MissionOwner or admin) or the control plane sets the Organization's cooperation limits."""
    policy = check_policy(ctx.payload["policy"])
    org_id = ctx.group.organization_id
    row = CooperationPolicy.objects.select_for_update().filter(organization_id=org_id).first()
    check_revision(ctx.command, row.revision if row else 0)
    revision = (row.revision if row else 0) + 1
    CooperationPolicy.objects.update_or_create(
        organization_id=org_id, defaults={"policy": policy, "revision": revision, "updated_at": ctx.now}
    )
    ctx.policy_records.append(
        Entry(
            organization_id=org_id, kind="policy_set", policy_name="cooperation", actor=ctx.actor.id,
            action_id=ctx.command.action_id, command_kind=ctx.command.kind, detail={"policy": policy},
        )
    )  # fmt: skip
    ref = AggregateRef("organization", org_id, revision)
    return Decision(
        [Emit("ext.mwportal.governance.cooperation_policy_changed", ref, {"policy": policy, "revision": revision})], ref
    )


def grant_document(row: CooperationOverrideGrant) -> dict[str, Any]:
    return {
        "id": urn(str(row.id)),
        "missionId": urn(str(row.mission_id)),
        "groupId": urn(str(row.group_id)),
        "policyName": row.policy_name,
        "beneficiary": {"type": row.beneficiary_type, "id": urn(str(row.beneficiary_id))},
        "targetCommandKind": row.target_kind,
        "targetActionId": urn(str(row.target_action_id)),
        "approver": {"type": row.approver_type, "id": urn(str(row.approver_id))},
        "reason": row.reason,
        "grantedAt": format_timestamp(row.granted_at),
        "expiresAt": format_timestamp(row.expires_at),
    }


@command("policy.grant_cooperation_override", group_roles=("mission_owner",), actors=("human", "service"))
def grant_cooperation_override(ctx: HandlerContext) -> Decision:
    """The MissionOwner, or the Organization's policy service, grants one Command one escalation (§20)."""
    p = ctx.payload
    grant_id = bare(p["grantId"], "/payload/grantId")
    mission = Mission.objects.filter(group_id=ctx.group.id).first()
    if mission is None:
        raise _refuse(ErrorCode.INVALID_STATE_TRANSITION, "no Mission in this Group", "no-mission")
    if mission.status != "active":
        raise _refuse(ErrorCode.INVALID_STATE_TRANSITION, f"the Mission is {mission.status}", "mission-not-active")
    if CooperationOverrideGrant.objects.filter(id=grant_id).exists():
        raise _refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            "/payload/grantId: this ID cannot be used",
            "id-taken",
            "/payload/grantId",
        )
    expires_at = _instant(p["expiresAt"], "/payload/expiresAt")
    if expires_at <= ctx.now:
        raise _refuse(ErrorCode.INVALID_COMMAND, "/payload/expiresAt: already past", "expired", "/payload/expiresAt")
    try:
        catalogue.command(p["targetCommandKind"])
    except catalogue.UnknownKind:
        raise _refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/targetCommandKind: not a Command kind",
            "unknown-kind",
            "/payload/targetCommandKind",
        ) from None
    beneficiary = bare(p["beneficiary"]["id"], "/payload/beneficiary/id")
    agent = Agent.objects.filter(id=beneficiary, organization_id=ctx.group.organization_id).first()
    if agent is None or Agent.ACTOR_TYPES[agent.kind] != p["beneficiary"]["type"]:
        raise _refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/beneficiary: no such Principal",
            "unknown-principal",
            "/payload/beneficiary",
        )
    row = CooperationOverrideGrant.objects.create(
        id=grant_id, organization_id=ctx.group.organization_id, mission_id=mission.id, group_id=ctx.group.id,
        policy_name=p["policyName"], beneficiary_type=p["beneficiary"]["type"], beneficiary_id=beneficiary,
        target_kind=p["targetCommandKind"], target_action_id=bare(p["targetActionId"], "/payload/targetActionId"),
        reason=p["reason"], approver_type=ctx.actor.type, approver_id=ctx.actor.id, granted_at=ctx.now,
        expires_at=expires_at,
    )  # fmt: skip
    document = grant_document(row)
    ctx.policy_records.append(
        Entry(
            organization_id=ctx.group.organization_id, kind="override_issued", group_id=ctx.group.id,
            mission_id=str(mission.id), policy_name=row.policy_name, actor=ctx.actor.id,
            action_id=ctx.command.action_id, command_kind=ctx.command.kind, reference=document["id"],
            detail={"cooperationOverrideGrant": document},
        )
    )  # fmt: skip
    ref = AggregateRef("mission", str(mission.id), ctx.group.revision)
    return Decision([Emit("policy.cooperation_override.granted", ref, {"cooperationOverrideGrant": document})], ref)


def _unusable(why: str, reason: str) -> ProtocolError:
    return _refuse(
        ErrorCode.AUTH_FORBIDDEN, f"cooperationOverrideGrantId: {why} (§20)", reason, "cooperationOverrideGrantId"
    )


def verify_cited_grant(ctx: HandlerContext) -> None:
    """The Command's cited grant exists, is live and unconsumed, and binds exactly this Command."""
    cited = ctx.command.raw.get("cooperationOverrideGrantId")
    if cited is None:
        return
    grant_id = bare(cited, "cooperationOverrideGrantId")
    row = CooperationOverrideGrant.objects.select_for_update().filter(id=grant_id).first()
    if row is None or str(row.organization_id) != (ctx.group.organization_id or ctx.actor.organization_id):
        raise _unusable("no such Cooperation Override Grant", "override-unknown")
    doc = ctx.command
    if row.consumed_at is not None:
        raise _unusable("the grant was already used; it is one-shot", "override-consumed")
    if row.expires_at <= ctx.now:
        raise _unusable("the grant has expired", "override-expired")
    if str(row.group_id) != ctx.group.id:
        raise _unusable("the grant is another Group's", "override-mismatch")
    if (row.beneficiary_type, str(row.beneficiary_id)) != (doc.actor_type, doc.actor):
        raise _unusable("the grant is another Principal's", "override-mismatch")
    if row.target_kind != doc.kind or str(row.target_action_id) != doc.action_id:
        raise _unusable("the grant names another Command", "override-mismatch")
    ctx.override = row


def consume_cited_grant(ctx: HandlerContext, receipt: dict[str, Any]) -> None:
    """Consume the verified grant with the accepted Command, linked to its first Event."""
    row = ctx.override
    if row is None:
        return
    event_id = bare(receipt["events"][0]["eventId"], "eventId")
    taken = CooperationOverrideGrant.objects.filter(id=row.id, consumed_at__isnull=True).update(
        consumed_at=ctx.now, consumed_event_id=event_id
    )
    if taken != 1:  # another transaction consumed it first
        raise _unusable("the grant was already used; it is one-shot", "override-consumed")
    ctx.policy_records.append(
        Entry(
            organization_id=str(row.organization_id), kind="override_consumed", group_id=ctx.group.id,
            mission_id=str(row.mission_id), policy_name=row.policy_name, actor=ctx.actor.id,
            action_id=ctx.command.action_id, command_kind=ctx.command.kind, event_id=event_id,
            reference=urn(str(row.id)),
        )
    )  # fmt: skip


before_handler_hooks.append(verify_cited_grant)
accepted_hooks.append(consume_cited_grant)
