"""Delegated work authority (PROTOCOL §9.1): a ``work_delegate`` authorizes or offers only
under a persisted Delegation Grant.

The role alone conveys no work-authoring authority. A Grant is persisted by its
``membership.delegation.granted`` Event; at every use the actor must be its
grantee, holding an active ``work_delegate`` Membership at the Grant's
Membership Epoch, before the Grant's expiry; its target WorkItem (the scope
root) must exist and be unfinished. The subtree of the Grant is its target and
the WorkItems authorized under it (their ``work.authorized`` names the Grant):
a delegate offers only those and authorizes a new one only under
``parentWorkItemId`` in the subtree. Each required capability must be allowed
(same ID, at least the Grant's version) and the contracts' budgets of the
WorkItems authorized under the Grant stay within every ceiling.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from missions.authority import HandlerContext
from missions.models import GroupEvent, Membership
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import bare, urn

from .contract import LIMITS
from .models import WorkItem
from .wire import moment, refuse

AUTHORING = ("coordinator", "mission_owner")
_FINISHED = ("verified", "failed", "cancelled")


def acts_as_delegate(ctx: HandlerContext) -> bool:
    """The actor authors work only through a Grant: it is neither Coordinator nor MissionOwner."""
    return not (ctx.actor.membership_roles or frozenset()) & set(AUTHORING)


def _forbidden(message: str) -> Exception:
    return refuse(
        ErrorCode.AUTH_FORBIDDEN, f"/payload/delegationGrantId: {message} (§9.1)", field="/payload/delegationGrantId"
    )


def _grant(ctx: HandlerContext) -> dict[str, Any]:
    grant_id = ctx.payload.get("delegationGrantId")
    if grant_id is None:
        raise _forbidden("a delegated Command cites a persisted Delegation Grant")
    bare(grant_id, "/payload/delegationGrantId")
    for body in GroupEvent.objects.filter(group_id=ctx.group.id, type="membership.delegation.granted").values_list(
        "body", flat=True
    ):
        if body["delegationGrant"]["grantId"] == grant_id:
            return dict(body["delegationGrant"])
    raise _forbidden("no such Delegation Grant in this Group")


def _subtree(ctx: HandlerContext, grant: dict[str, Any]) -> set[str]:
    under = {
        body["workItem"]["workItemId"]
        for body in GroupEvent.objects.filter(group_id=ctx.group.id, type="work.authorized").values_list(
            "body", flat=True
        )
        if body.get("delegationGrantId") == grant["grantId"]
    }
    return {grant["targetWorkItemId"], *under}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("-", 1)[0].split("+", 1)[0].split("."))


def check_grant(
    ctx: HandlerContext, *, contract: dict[str, Any] | None, within: str | None, now: datetime, offered: bool = False
) -> None:
    """Refuse a delegate's Command its Grant does not cover; ``within`` is the WorkItem
    (``urn:uuid:``) that must lie in the Grant's subtree (the ``offered`` one, or the new one's parent)."""
    grant = _grant(ctx)
    if grant["granteeAgentId"] != urn(ctx.actor.id):
        raise _forbidden("the Grant is another Agent's; a Grant is non-transferable")
    membership = Membership.objects.filter(group_id=ctx.group.id, agent_id=ctx.actor.id, active=True).first()
    if (
        membership is None
        or "work_delegate" not in membership.roles
        or membership.epoch != grant["granteeMembershipEpoch"]
    ):
        raise _forbidden("the grantee's work_delegate Membership changed since the Grant")
    if moment(grant["expiresAt"]) <= now:
        raise _forbidden("the Grant has expired")
    target = WorkItem.objects.filter(
        id=bare(grant["targetWorkItemId"], "targetWorkItemId"), group_id=ctx.group.id
    ).first()
    if target is None or target.state in _FINISHED:
        raise _forbidden("the Grant's target WorkItem is missing or finished")
    if within is None or within not in _subtree(ctx, grant):
        raise _forbidden("the WorkItem is outside the Grant's subtree")
    if contract is None:
        return
    allowed = {c["id"]: _version(c["version"]) for c in grant["allowedCapabilities"]}
    for need in contract["requiredCapabilities"]:
        if need["id"] not in allowed or _version(need["version"]) < allowed[need["id"]]:
            raise _forbidden(f"capability {need['id']} {need['version']} is not allowed by the Grant")
    subtree = [bare(i, "workItemId") for i in _subtree(ctx, grant)]
    others = WorkItem.objects.filter(group_id=ctx.group.id, id__in=subtree).exclude(
        id=bare(grant["targetWorkItemId"], "targetWorkItemId")
    )
    if offered:  # its contract is the one counted above
        others = others.exclude(id=bare(within, "workItemId"))
    spent = [contract["budget"], *(item.contract["budget"] for item in others)]
    for limit in LIMITS.values():
        total = sum(b.get(limit, 0) for b in spent)
        if total > grant["budget"][limit]:
            raise _forbidden(f"the Grant's {limit} of {grant['budget'][limit]} would be exceeded ({total})")
