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

Just in time (§8 steps 1-4): a provisional Membership names the candidate's
Context Package and an expiry, lets it do nothing but take or decline its
offer (``provisional_gate``), is activated by the acceptance
(``activate_provisional``) and ends with the Command after which its Worker
owes nothing in the Group (``end_released``). ``visibilityStartSequence``
bounds what the member reads (``missions.access``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from mwportal.protocol import ErrorCode, catalogue
from mwportal.protocol.fields import parse_time
from mwportal.protocol.ids import urn

from ..authority import AggregateRef, Decision, Emit, HandlerContext, check_revision
from ..delivery import membership_notice
from ..guards import refuse
from ..models import Agent, Group, GroupEvent, Membership, Mission
from ..registry import before_handler_hooks, command, decided_hooks, membership_removed_hooks, obligation_checks
from .common import actor_doc, membership_doc, payload_id, principal_in

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


# Roles that always see the whole Group history (§8).
COMPLETE_VISIBILITY = frozenset(MISSION_ROLES)
# Roles a just-in-time (provisional) Membership may carry: the Agents that take offers (§8 step 1).
PROVISIONAL_ROLES = frozenset({"worker", "reviewer", "work_delegate"})
# What a provisional member may do until an offer's acceptance activates it (§8 step 3).
PROVISIONAL_COMMANDS = frozenset({"work.accept_offer", "ext.mwportal.work.offer_decline"})
# A provisional Membership lasts this long unless the change names ``provisionalExpiresAt``.
PROVISIONAL_DEFAULT = timedelta(hours=1)
# The Event that publishes a Context Package in a Group (artifacts.context, above this layer).
CONTEXT_PUBLISHED = "ext.mwportal.context.package_published"


def _published_package(group_id: str, package_id: str) -> bool:
    """Whether the Context Package was published in this Group (its signed
    ``package_published`` Event is in the Group's log)."""
    return GroupEvent.objects.filter(
        group_id=group_id, type=CONTEXT_PUBLISHED, body__contextPackage__contextPackageId=urn(package_id)
    ).exists()


def _visibility(ctx: HandlerContext, roles: list[str], existing: Membership | None) -> int:
    """The first sequence the member reads (§8): 0 (everything) for the Mission's roles; else
    ``visibilityAfterSequence`` + 1 when given; else what it had; else, for a just-in-time
    (provisional) member, the sequence of its own grant; else the whole history."""
    after = ctx.payload.get("visibilityAfterSequence")
    if COMPLETE_VISIBILITY & set(roles):
        if after:
            raise refuse(
                ErrorCode.INVALID_COMMAND,
                "/payload/visibilityAfterSequence: MissionOwner and Coordinator Memberships see the whole history (§8)",
                field="/payload/visibilityAfterSequence",
            )
        return 0
    if after is not None:
        if after > ctx.group.last_sequence:
            raise refuse(
                ErrorCode.INVALID_COMMAND,
                f"/payload/visibilityAfterSequence: beyond the Group's head {ctx.group.last_sequence}",
                field="/payload/visibilityAfterSequence",
            )
        return int(after) + 1 if after else 0
    if existing is not None and existing.active:
        return existing.visibility_start
    return ctx.group.last_sequence + 1 if ctx.payload.get("provisional") else 0


def _provisional(ctx: HandlerContext, member: Agent, roles: list[str], existing: Membership | None) -> tuple[str, Any]:
    """The Context Package and expiry of a just-in-time Membership (§8 steps 1-2), or ("", None)."""
    payload = ctx.payload
    package = payload.get("contextPackageId")
    if not payload.get("provisional"):
        if package is not None or payload.get("provisionalExpiresAt") is not None:
            raise refuse(
                ErrorCode.INVALID_COMMAND,
                "/payload/contextPackageId: only a provisional Membership names a Context Package and an expiry",
                field="/payload/contextPackageId",
            )
        return "", None
    if member.kind != Agent.KIND_AGENT or not set(roles) <= PROVISIONAL_ROLES:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"/payload/roles: a provisional Membership is an Agent's {', '.join(sorted(PROVISIONAL_ROLES))} (§8)",
            field="/payload/roles",
        )
    if existing is not None and existing.active:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            "/payload/provisional: the Principal is already a member; only a candidate joins provisionally",
            field="/payload/provisional",
        )
    if package is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/contextPackageId: a provisional Membership comes with a signed Context Package (§8 step 2)",
            field="/payload/contextPackageId",
        )
    package_id = payload_id(payload, "contextPackageId")
    if not _published_package(ctx.group.id, package_id):
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/contextPackageId: no Context Package of this Group",
            field="/payload/contextPackageId",
            reason="not_found",
        )
    sent = payload.get("provisionalExpiresAt")
    expires = parse_time(sent, "/payload/provisionalExpiresAt") if sent is not None else ctx.now + PROVISIONAL_DEFAULT
    if expires <= ctx.now:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/provisionalExpiresAt: already past",
            field="/payload/provisionalExpiresAt",
        )
    return package_id, expires


@command("membership.change", group_roles=MANAGING)
def change_membership(ctx: HandlerContext) -> Decision:
    """Grant a Principal a Membership, or change its roles (§8); compare-and-set on the Group revision.

    Every change moves the Membership Epoch. A provisional grant (§8 steps 1-2) names the
    candidate's Context Package; the member can then only take or decline its offer.
    """
    payload = ctx.payload
    check_revision(ctx.command, ctx.group.revision)
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
    package_id, expires = _provisional(ctx, member, roles, existing)
    visibility = _visibility(ctx, roles, existing)
    if held == set(roles) and (existing is None or visibility == existing.visibility_start):
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "the Principal already holds exactly these roles")
    state = "provisional" if package_id else "active"
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision + 1)
    mission_id = str(Mission.objects.values_list("id", flat=True).get(group_id=ctx.group.id))
    changes = [(role, state) for role in roles] + [(role, "ended") for role in sorted(held - set(roles))]
    provisional = {
        "visibility_start": visibility, "provisional": bool(package_id), "context_package_id": package_id,
        "provisional_expires_at": expires,
    }  # fmt: skip
    events, notice = change_roles(
        ctx, ctx.group.id, member_id, roles, row=existing, ref=ref, mission_id=mission_id, changes=changes,
        kind=member.kind, extra=provisional,
    )  # fmt: skip
    return Decision(events, ref, notices=[notice])


Notice = tuple[str, dict[str, Any]]


def change_roles(
    ctx: HandlerContext,
    group_id: str,
    agent_id: str,
    roles: list[str],
    *,
    row: Membership | None,
    ref: AggregateRef,
    mission_id: str,
    changes: list[tuple[str, str]],
    kind: str = Agent.KIND_AGENT,
    extra: dict[str, Any] | None = None,
) -> tuple[list[Emit], Notice]:
    """The one write of a Membership's roles (§8): ``agent_id``'s Membership ``row`` in ``group_id`` (None:
    none yet) now holds ``roles``. Every change moves its Membership Epoch; left with no role it ends (its
    last roles stay on record). One ``membership.changed`` per ``(role, state)`` of ``changes``, and the
    notice for the member's connections. ``extra``: the provisional-grant fields of membership.change."""
    extra = extra or {}
    fields = {
        "roles": roles or (row.roles if row is not None else roles), "active": bool(roles), "updated_at": ctx.now,
        **extra,
    }  # fmt: skip
    if row is None:
        epoch = 1
        Membership.objects.create(group_id=group_id, agent_id=agent_id, epoch=1, **fields)
    else:
        epoch = row.epoch + 1
        Membership.objects.filter(pk=row.pk).update(epoch=epoch, **fields)
    actor = actor_doc(kind, agent_id)
    docs = [
        membership_doc(
            group_id=group_id,
            mission_id=mission_id,
            member=actor,
            role=role,
            epoch=epoch,
            now=ctx.now,
            state=state,
            visibility_start=extra.get("visibility_start", 0),
            context_package_id=extra.get("context_package_id") or None,
            provisional_expires=extra.get("provisional_expires_at"),
        )  # fmt: skip
        for role, state in changes
    ]
    events = [Emit("membership.changed", ref, {"membership": doc}) for doc in docs]
    return events, membership_notice(group_id, agent_id, roles, epoch, bool(roles))


def activate_provisional(ctx: HandlerContext) -> tuple[list[Emit], list[Any]]:
    """Accepting an offer activates the acceptor's provisional Membership (§8 step 3): its epoch
    moves and a ``membership.changed`` (state ``active``) per role says so; with the notice for
    the member's connections. Nothing for an active member."""
    row = Membership.objects.filter(group_id=ctx.group.id, agent_id=ctx.actor.id, active=True, provisional=True).first()
    if row is None:
        return [], []
    epoch = row.epoch + 1
    Membership.objects.filter(pk=row.pk).update(
        epoch=epoch, provisional=False, provisional_expires_at=None, updated_at=ctx.now
    )
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision + 1)
    mission_id = str(Mission.objects.values_list("id", flat=True).get(group_id=ctx.group.id))
    actor = actor_doc(Agent.KIND_AGENT, ctx.actor.id)
    emits = [
        Emit(
            "membership.changed",
            ref,
            {
                "membership": membership_doc(
                    group_id=ctx.group.id,
                    mission_id=mission_id,
                    member=actor,
                    role=role,
                    epoch=epoch,
                    now=ctx.now,
                    visibility_start=row.visibility_start,
                    context_package_id=row.context_package_id or None,
                )
            },
        )  # fmt: skip
        for role in row.roles
    ]
    return emits, [membership_notice(ctx.group.id, ctx.actor.id, list(row.roles), epoch, True)]


def provisional_gate(ctx: HandlerContext) -> None:
    """A provisional member may only take or decline its offer (§8 steps 2-3); once its
    ``provisionalExpiresAt`` has passed, not even that."""
    if ctx.actor.is_service or ctx.group.kind != Group.KIND_MISSION:
        return
    if not ctx.actor.provisional:  # read with the actor's Membership (authority._load_actor)
        return
    row = ctx.actor.provisional_expires_at
    if row is not None and row <= ctx.now:
        raise refuse(
            ErrorCode.MEMBERSHIP_REQUIRED, "the provisional Membership has expired (§8)", reason="provisional_expired"
        )
    if ctx.spec.kind not in PROVISIONAL_COMMANDS:
        raise refuse(
            ErrorCode.AUTH_FORBIDDEN,
            f"a provisional member may only {' or '.join(sorted(PROVISIONAL_COMMANDS))} until it accepts (§8)",
            reason="membership_provisional",
        )


before_handler_hooks.append(provisional_gate)

# The roles whose just-in-time Membership ends with the member's last WorkItem (§8 step 4).
RELEASED_ROLES = frozenset({"worker", "work_delegate"})


def end_released(ctx: HandlerContext, decision: Decision) -> None:
    """§8 step 4: a just-in-time Membership (one that joined provisionally and was activated by an
    acceptance) ends with the Command after which its Worker has no WorkItem and no open offer in the
    Group: a ``membership.ended`` among that Command's own Events, and a new epoch."""
    if ctx.group.kind != Group.KIND_MISSION or not ctx.group.id:
        return
    if "membership.ended" not in catalogue.command(ctx.command.kind).events:
        # Only a Command the catalogue says may end a Membership releases obligations (a result
        # accepted, a WorkItem cancelled or failed, an offer declined or withdrawn, a Mission ended);
        # every other kind's Events stay what its definition yields, and it costs no query here.
        return
    rows = [
        row
        for row in Membership.objects.filter(group_id=ctx.group.id, active=True, provisional=False)
        .exclude(context_package_id="")
        .order_by("agent_id")
        if set(row.roles) <= RELEASED_ROLES
    ]
    for row in rows:
        agent_id = str(row.agent_id)
        if any(check(agent_id, ctx.group.id) for check in obligation_checks):
            continue
        epoch = row.epoch + 1
        Membership.objects.filter(pk=row.pk).update(epoch=epoch, active=False, updated_at=ctx.now)
        ref = AggregateRef("group", ctx.group.id, ctx.group.revision + 1)
        member = actor_doc(Agent.KIND_AGENT, agent_id)
        decision.events.append(Emit("membership.ended", ref, {"principal": member, "reason": "no obligations left"}))
        decision.notices.append(membership_notice(ctx.group.id, agent_id, [], epoch, False))


decided_hooks.append(end_released)


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
