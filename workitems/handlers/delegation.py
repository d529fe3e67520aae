"""``membership.grant_delegation`` (PROTOCOL §9.1): the current Coordinator grants a
``work_delegate`` member scoped authority over one WorkItem's subtree.

The Grant records every member §9.1 names (``membership.schema.json``'s
``delegationGrants`` item) and is persisted as a ``DelegationGrant`` row, which
each use looks up by its ID (``workitems.delegation.check_grant``).
"""

from __future__ import annotations

from typing import Any

from missions.authority import AggregateRef, Decision, Emit, HandlerContext
from missions.models import Agent, Membership, Mission
from missions.registry import command
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import bare, urn

from ..delegation import FINISHED, current_coordinator
from ..models import DelegationGrant, WorkItem
from ..wire import moment, refuse, when


def _current_lease(ctx: HandlerContext, mission: Mission) -> int:
    """Only the current Coordinator, at its current epoch, grants (§9.1, §15.1)."""
    coordinator, epoch = current_coordinator(mission)
    presented = ctx.command.coordinator_epoch
    if presented is None:
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "coordinatorEpoch: membership.grant_delegation carries the current Coordinator Epoch (§15.1)",
            field="coordinatorEpoch",
        )
    if coordinator != ctx.actor.id or presented != epoch:
        raise refuse(
            ErrorCode.AUTH_STALE_COORDINATOR,
            f"coordinatorEpoch {presented} is not the current Coordinator's lease ({epoch})",
            current=epoch,
        )
    return epoch


@command("membership.grant_delegation", group_roles=("coordinator",), actors=("agent",))
def grant_delegation(ctx: HandlerContext) -> Decision:
    """A scoped Delegation Grant for a ``work_delegate`` member (§9.1)."""
    p = ctx.payload
    mission = Mission.objects.get(group_id=ctx.group.id)
    if mission.status != "active":
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"the Mission is {mission.status}")
    epoch = _current_lease(ctx, mission)
    grant_id = bare(p["grantId"], "/payload/grantId")
    if DelegationGrant.objects.filter(id=grant_id).exists():
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION, "/payload/grantId: this ID cannot be used", field="/payload/grantId"
        )
    grantee_id = bare(p["granteeAgentId"], "/payload/granteeAgentId")
    if grantee_id == ctx.actor.id:
        # §20: no cyclic delegation; the Coordinator's authority is its lease, never a Grant to itself.
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/granteeAgentId: a Coordinator cannot delegate to itself (cyclic delegation, §20)",
            field="/payload/granteeAgentId",
            reason="cyclic-delegation",
        )
    grantee = Agent.objects.filter(id=grantee_id, kind=Agent.KIND_AGENT).first()
    membership = Membership.objects.filter(group_id=ctx.group.id, agent_id=grantee_id, active=True).first()
    if grantee is None or membership is None or "work_delegate" not in membership.roles:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/granteeAgentId: the grantee must be an Agent holding an active work_delegate Membership",
            field="/payload/granteeAgentId",
            reason="grantee-not-delegate",
        )
    target = WorkItem.objects.filter(id=bare(p["targetWorkItemId"], "/payload/targetWorkItemId"), group_id=ctx.group.id)
    item = target.first()
    if item is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/targetWorkItemId: no such WorkItem in this Group",
            field="/payload/targetWorkItemId",
            reason="not_found",
        )
    if item.state in FINISHED:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"the target WorkItem is {item.state}")
    expires_at = moment(p["expiresAt"])
    if expires_at <= ctx.now:
        raise refuse(ErrorCode.INVALID_COMMAND, "/payload/expiresAt: already past", field="/payload/expiresAt")
    mission_currency = (mission.budgets or {}).get("currency")
    if mission_currency and p["budget"]["currency"] != mission_currency:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"/payload/budget/currency: the Mission budgets in {mission_currency}",
            field="/payload/budget/currency",
        )
    document: dict[str, Any] = {
        "grantId": urn(grant_id),
        "granteeAgentId": urn(grantee_id),
        "missionId": urn(str(mission.id)),
        "groupId": urn(ctx.group.id),
        "targetWorkItemId": urn(str(item.id)),
        "allowedCapabilities": p["allowedCapabilities"],
        "budget": p["budget"],
        "maxDescendantDepth": p["maxDescendantDepth"],
        "granteeMembershipEpoch": membership.epoch,
        "coordinatorEpoch": epoch,
        "grantedBy": ctx.actor.principal,
        "grantedAt": when(ctx.now),
        "expiresAt": p["expiresAt"],
    }
    DelegationGrant.objects.create(
        id=grant_id, group_id=ctx.group.id, mission=mission, grantee=grantee, target=item,
        allowed_capabilities=p["allowedCapabilities"], budget=p["budget"],
        max_descendant_depth=p["maxDescendantDepth"], grantee_membership_epoch=membership.epoch,
        coordinator_epoch=epoch, granted_by_id=ctx.actor.id, granted_at=ctx.now, expires_at=expires_at,
        document=document,
    )  # fmt: skip
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision + 1)
    return Decision([Emit("membership.delegation.granted", ref, {"delegationGrant": document})], ref)
