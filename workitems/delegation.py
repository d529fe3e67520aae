"""Delegated work authority (PROTOCOL §9.1): a ``work_delegate`` authorizes or offers only
under a persisted Delegation Grant, looked up by the ID the Command cites.

The role alone conveys no work-authoring authority. At every use the actor must
be the Grant's grantee, holding an active ``work_delegate`` Membership at the
Grant's Membership Epoch; the Grant's issuer must still be the current
Coordinator at the Grant's Coordinator Epoch, the Mission active, the Grant
unexpired, and its target WorkItem (the scope root) present and neither failed,
cancelled nor verified. The subtree of the Grant is its target and every
descendant (``parentWorkItemId`` links): a delegate offers only those and
authorizes a new one only under a parent in the subtree, no deeper below the
target than the Grant's maximum descendant depth. Each required capability must
be allowed (same ID, at least the Grant's version) and the contracts' budgets
of the WorkItems created or offered under the Grant stay within every ceiling.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from missions.authority import HandlerContext
from missions.models import Membership, Mission
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import bare

from .contract import LIMITS
from .models import DelegationGrant, WorkItem
from .wire import refuse

AUTHORING = ("coordinator", "mission_owner")
FINISHED = ("verified", "failed", "cancelled")


def acts_as_delegate(ctx: HandlerContext) -> bool:
    """The actor authors work only through a Grant: it is neither Coordinator nor MissionOwner."""
    return not (ctx.actor.membership_roles or frozenset()) & set(AUTHORING)


def current_coordinator(mission: Mission) -> tuple[str | None, int]:
    """The Mission's current Coordinator (bare UUID) and Coordinator Epoch: its lease (§7.2)."""
    return (str(mission.coordinator_id) if mission.coordinator_id else None), mission.coordinator_epoch


def _forbidden(message: str, reason: str) -> Exception:
    return refuse(
        ErrorCode.AUTH_FORBIDDEN,
        f"/payload/delegationGrantId: {message} (§9.1)",
        field="/payload/delegationGrantId",
        reason=reason,
    )


def ancestry(item: WorkItem) -> list[WorkItem]:
    """``item``'s parent, grandparent, ... (parents are created before their children: no cycle)."""
    chain: list[WorkItem] = []
    parent = item.parent
    while parent is not None:
        chain.append(parent)
        parent = parent.parent
    return chain


def in_subtree(item: WorkItem, root_id: Any) -> bool:
    return str(item.id) == str(root_id) or any(str(a.id) == str(root_id) for a in ancestry(item))


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("-", 1)[0].split("+", 1)[0].split("."))


def check_grant(
    ctx: HandlerContext, *, contract: dict[str, Any], within: WorkItem | None, now: datetime, offered: bool = False
) -> DelegationGrant:
    """The Grant the delegate's Command cites, if it covers the Command; else AUTH_FORBIDDEN.

    ``within`` is the WorkItem that must lie in the Grant's subtree: the one
    ``offered``, or the new one's parent (None: the new one has no parent)."""
    grant_id = ctx.payload.get("delegationGrantId")
    if grant_id is None:
        raise _forbidden("a delegated Command cites a persisted Delegation Grant", "grant-required")
    grant = DelegationGrant.objects.filter(id=bare(grant_id, "/payload/delegationGrantId"), group_id=ctx.group.id)
    found = grant.select_related("target", "mission").first()
    if found is None:
        raise _forbidden("no such Delegation Grant in this Group", "grant-unknown")
    if str(found.grantee_id) != ctx.actor.id:
        raise _forbidden("the Grant is another Agent's; a Grant is non-transferable", "grant-not-grantee")
    membership = Membership.objects.filter(group_id=ctx.group.id, agent_id=ctx.actor.id, active=True).first()
    if membership is None or "work_delegate" not in membership.roles:
        raise _forbidden("the grantee no longer holds an active work_delegate Membership", "grant-membership-ended")
    if membership.epoch != found.grantee_membership_epoch:
        raise _forbidden("the grantee's Membership changed since the Grant", "grant-membership-changed")
    mission = Mission.objects.get(id=found.mission_id)
    if mission.status != "active":
        raise _forbidden(f"the Grant's Mission is {mission.status}", "grant-mission-ended")
    coordinator, epoch = current_coordinator(mission)
    if coordinator != str(found.granted_by_id) or epoch != found.coordinator_epoch:
        raise _forbidden("the Coordinator who issued the Grant was replaced", "grant-coordinator-replaced")
    if found.expires_at <= now:
        raise _forbidden("the Grant has expired", "grant-expired")
    target = WorkItem.objects.filter(id=found.target_id).first()
    if target is None or target.state in FINISHED:
        raise _forbidden("the Grant's target WorkItem is missing, failed, cancelled or verified", "grant-target-ended")
    if within is None or not in_subtree(within, target.id):
        raise _forbidden("the WorkItem is outside the Grant's subtree", "grant-out-of-scope")
    depth = within.depth if offered else within.depth + 1
    if depth - target.depth > found.max_descendant_depth:
        raise _forbidden(
            f"a WorkItem {depth - target.depth} levels below the target exceeds the Grant's"
            f" maxDescendantDepth {found.max_descendant_depth}",
            "grant-depth",
        )
    allowed = {c["id"]: _version(c["version"]) for c in found.allowed_capabilities}
    for need in contract["requiredCapabilities"]:
        if need["id"] not in allowed or _version(need["version"]) < allowed[need["id"]]:
            raise _forbidden(
                f"capability {need['id']} {need['version']} is not allowed by the Grant", "grant-capability"
            )
    if contract["budget"].get("currency") != found.budget["currency"]:
        raise _forbidden(f"the Grant's budgets are in {found.budget['currency']}", "grant-currency")
    counted = WorkItem.objects.filter(group_id=ctx.group.id).filter(delegation_grant=found) | WorkItem.objects.filter(
        group_id=ctx.group.id, offered_under_grant=found
    )
    if offered:  # its contract is the one counted here
        counted = counted.exclude(id=within.id)
    spent = [contract["budget"], *(item.contract["budget"] for item in counted.distinct())]
    for limit in LIMITS.values():
        total = sum(b.get(limit, 0) for b in spent)
        if total > found.budget[limit]:
            raise _forbidden(
                f"the Grant's {limit} of {found.budget[limit]} would be exceeded ({total})", "grant-budget"
            )
    return found
