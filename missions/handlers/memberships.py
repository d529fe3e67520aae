"""Memberships of a Mission Group: granting, changing and ending them (§8).

The project keeps one row per (Group, Principal): its roles and one
Membership Epoch, bumped by every change, so a Command signed under older
roles is recognised (MEMBERSHIP_STALE). On the wire each role is its own
normative Membership: ``membership.change`` appends one ``membership.changed``
per role it grants or keeps, and one (``state: ended``) per role it drops.

The MissionOwner's and the current Coordinator's roles are the Mission's
(§7.1, §7.2): ``mission.create`` grants them; a Membership change neither
grants them to anyone else nor takes them away, and ``membership.end`` does
not end them. Membership rows need no lock of their own: every change to a
Group's Memberships holds that Group's row lock.
"""

from __future__ import annotations

from typing import Any

from mwportal.protocol import ErrorCode

from ..authority import AggregateRef, Decision, Emit, HandlerContext, check_revision
from ..delivery import membership_notice
from ..guards import refuse
from ..models import Agent, Membership, Mission
from ..registry import command, membership_removed_hooks
from .common import actor_doc, membership_doc, principal_in

# Roles that are the Mission's, not a Membership change's to give or take.
MISSION_ROLES = ("mission_owner", "coordinator")
# What a person may be in a Group: Coordinators, Workers and delegates are Agents (§3).
HUMAN_ROLES = frozenset({"mission_owner", "reviewer", "observer"})
MANAGING = ("mission_owner", "coordinator")


def _member(ctx: HandlerContext) -> Agent:
    member = principal_in(ctx.group.organization_id, ctx.payload["principal"], "/payload/principal")
    if member.kind == Agent.KIND_SERVICE:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/principal: an Organization service acts by Organization policy, not by a Membership (§8)",
            field="/payload/principal",
        )
    return member


def _unsupported(payload: dict[str, Any]) -> None:
    """Provisional, just-in-time Memberships and restricted visibility (§8) are not offered yet:
    every member here is active and sees the Group's whole history. Asking for them is refused
    rather than granting more than was asked."""
    if payload.get("provisional"):
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/provisional: this Organization grants active Memberships only",
            field="/payload/provisional",
            reason="provisional-unsupported",
        )
    if payload.get("contextPackageId") is not None:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/contextPackageId: only a provisional Membership names a Context Package",
            field="/payload/contextPackageId",
            reason="provisional-unsupported",
        )
    if payload.get("visibilityAfterSequence"):
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/visibilityAfterSequence: members here see the Group's whole history (0)",
            field="/payload/visibilityAfterSequence",
            reason="restricted-visibility-unsupported",
        )


@command("membership.change", group_roles=MANAGING)
def change_membership(ctx: HandlerContext) -> Decision:
    """Grant a Principal a Membership, or change its roles (§8); compare-and-set on the Group revision."""
    payload = ctx.payload
    check_revision(ctx.command, ctx.group.revision)
    _unsupported(payload)
    member = _member(ctx)
    roles = sorted(set(payload["roles"]))
    member_id = str(member.id)
    existing = Membership.objects.filter(group_id=ctx.group.id, agent_id=member_id).first()
    held = set(existing.roles) if existing is not None and existing.active else set()
    if member.kind == Agent.KIND_PERSON and not set(roles) <= HUMAN_ROLES:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"/payload/roles: a human Principal may be {', '.join(sorted(HUMAN_ROLES))}",
            field="/payload/roles",
        )
    for role in MISSION_ROLES:
        if role in roles and role not in held:
            raise refuse(
                ErrorCode.AUTH_FORBIDDEN,
                f"/payload/roles: {role} is the Mission's (mission.create names it), not a Membership change's",
                field="/payload/roles",
            )
        if role in held and role not in roles:
            raise refuse(
                ErrorCode.INVALID_STATE_TRANSITION,
                f"/payload/roles: the Mission keeps its {role}; this change would take the role away",
                field="/payload/roles",
            )
    if held == set(roles):
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "the Principal already holds exactly these roles")
    if existing is None:
        epoch = 1
        Membership.objects.create(group_id=ctx.group.id, agent_id=member_id, roles=roles, epoch=1, updated_at=ctx.now)
    else:
        epoch = existing.epoch + 1
        Membership.objects.filter(pk=existing.pk).update(roles=roles, epoch=epoch, active=True, updated_at=ctx.now)
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision + 1)
    mission_id = str(Mission.objects.values_list("id", flat=True).get(group_id=ctx.group.id))
    actor = actor_doc(member.kind, member_id)
    changes = [(role, "active") for role in roles] + [(role, "ended") for role in sorted(held - set(roles))]
    docs = [
        membership_doc(
            group_id=ctx.group.id, mission_id=mission_id, member=actor, role=role, epoch=epoch, now=ctx.now, state=state
        )  # fmt: skip
        for role, state in changes
    ]
    events = [Emit("membership.changed", ref, {"membership": doc}) for doc in docs]
    return Decision(events, ref, notices=[membership_notice(ctx.group.id, member_id, roles, epoch, True)])


@command("membership.end", group_roles=MANAGING)
def end_membership(ctx: HandlerContext) -> Decision:
    """End a Principal's Membership (§8); its leases and ownerships in the Group end with it (§11.3).

    The removed member's work is fenced in the same transaction (the
    membership-removed hooks): its Execution Leases are revoked and its
    ownership ends, so the Coordinator can re-offer at once.
    """
    check_revision(ctx.command, ctx.group.revision)
    member = _member(ctx)
    member_id = str(member.id)
    existing = Membership.objects.filter(group_id=ctx.group.id, agent_id=member_id, active=True).first()
    if existing is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/principal: no active Membership in this Group",
            field="/payload/principal",
            reason="not_found",
        )
    for role in MISSION_ROLES:
        if role in existing.roles:
            raise refuse(
                ErrorCode.INVALID_STATE_TRANSITION,
                f"the Mission's {role} Membership does not end (§7.1, §7.2)",
                field="/payload/principal",
            )
    epoch = existing.epoch + 1
    Membership.objects.filter(pk=existing.pk).update(epoch=epoch, active=False, updated_at=ctx.now)
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision + 1)
    consequences = [emit for hook in membership_removed_hooks for emit in hook(ctx, member_id)]
    ended: dict[str, Any] = {"principal": actor_doc(member.kind, member_id)}
    if ctx.payload.get("reason") is not None:
        ended["reason"] = ctx.payload["reason"]
    return Decision(
        [Emit("membership.ended", ref, ended), *consequences],
        ref,
        notices=[membership_notice(ctx.group.id, member_id, [], epoch, False)],
    )
