"""Expiry and fencing: the system Commands of Celery beat (workitems/tasks.py), session
replacement (MWP-WRK-014) and member removal, which revoke leases and ownership."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from missions.authority import (
    Decision,
    Emit,
    GroupHead,
    HandlerContext,
)
from missions.guards import check_members, refuse
from missions.registry import command, membership_removed_hooks, session_replaced_hooks
from mwportal.protocol import ErrorCode, ProtocolError, format_time

from .. import state_machine as sm
from ..content import content
from ..models import ExecutionLease, WorkItem
from .common import (
    active_lease,
    backoff,
    check_retry_allowed,
    end_item,
    end_lease,
    item_ref,
    save,
    seconds,
    system_evidence,
)

# --- expiry: system Commands issued by Celery beat (workitems/tasks.py) --------


def _system_item(ctx: HandlerContext) -> WorkItem:
    check_members(ctx.body, ["workitem", "ownership_epoch"], ["lease_id"])
    item = WorkItem.objects.select_for_update().filter(id=ctx.body["workitem"], group_id=ctx.group.id).first()
    if item is None:
        raise refuse(ErrorCode.INVALID_COMMAND, "no such WorkItem", reason="not_found")
    if item.ownership_epoch != ctx.body["ownership_epoch"]:
        raise refuse(ErrorCode.WORK_STALE_OWNERSHIP, "the WorkItem changed owner since the expiry was observed")
    return item


@command("work.expire_lease", actors=("system",))
def expire_lease(ctx: HandlerContext) -> Decision:
    """The Execution Lease timed out (spec 11.3): it expires, and the WorkItem
    returns to its queue for another attempt within the retry budget, or
    fails with Evidence when the budget is exhausted (spec 11.4)."""
    item = _system_item(ctx)
    lease = active_lease(item)
    if lease is None or str(lease.id) != ctx.body.get("lease_id") or lease.expires_at > ctx.now:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "the lease is no longer active and past its expiry")
    sm.check_transition(item.state, "expire.lease")
    end_lease(lease, "expired", "lease timeout", ctx.now)
    try:
        check_retry_allowed(item, ctx.now)
    except ProtocolError as exhausted:
        end_item(item, sm.FAILED, ctx.now, "lease timeout")
        save(item, ctx.now)
        evidence = [system_evidence(ctx, item, f"lease expired; {exhausted.message}")]
        content().record_evidence(ctx, item, evidence, "failure")
        return Decision(
            [
                Emit(
                    "work.failed",
                    item_ref(item),
                    {"evidence": evidence, "attempt": item.attempt, "reason": "retries exhausted"},
                )
            ],
            item_ref(item),
        )
    item.state = sm.QUEUED
    item.needs_new_attempt = True
    item.retry_not_before = ctx.now + backoff(item)
    item.start_by = item.retry_not_before + seconds("MWP_START_BY_SECONDS")
    item.owner_expires_at = item.start_by
    save(item, ctx.now)
    body = {
        "lease_id": str(lease.id),
        "ownership_epoch": item.ownership_epoch,
        "attempt": item.attempt,
        "start_by": format_time(item.start_by),
        "retry_not_before": format_time(item.retry_not_before),
    }
    return Decision([Emit("work.lease_expired", item_ref(item), body)], item_ref(item))


def _fence_lapsed_owner(ctx: HandlerContext, transition: str, event: str, what: str) -> Decision:
    """The owner's bounded ownership lease ran out: fence it (no owner)."""
    item = _system_item(ctx)
    sm.check_transition(item.state, transition)
    if item.owner_id is None or item.owner_expires_at is None or item.owner_expires_at > ctx.now:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"the {what} has not passed")
    body = _fence_owner(item)
    save(item, ctx.now)
    return Decision([Emit(event, item_ref(item), body)], item_ref(item))


def _fence_owner(item: WorkItem) -> dict[str, Any]:
    """End the owner's ownership (no owner, no deadlines); the Event body."""
    body = {"agent": str(item.owner_id), "ownership_epoch": item.ownership_epoch}
    item.owner, item.owner_expires_at, item.start_by = None, None, None
    return body


def _revoke_lease(item: WorkItem, lease: ExecutionLease, reason: str, now: datetime) -> dict[str, Any]:
    """Revoke the active lease; the WorkItem waits in its queue for a new
    attempt (MWP-WRK-014). The ``work.lease_revoked`` body, without timers."""
    sm.check_transition(item.state, "lease.revoke")
    end_lease(lease, "revoked", reason, now)
    item.state = sm.QUEUED
    item.needs_new_attempt = True
    return {"lease_id": str(lease.id), "agent": str(lease.agent_id), "reason": reason}


@command("work.expire_start_by", actors=("system",))
def expire_start_by(ctx: HandlerContext) -> Decision:
    """The owner missed its start-by deadline: it is fenced (no owner), and the
    Coordinator may re-offer under a higher Ownership Epoch (spec 11.5)."""
    return _fence_lapsed_owner(ctx, "expire.start_by", "work.start_deadline_missed", "start-by deadline")


@command("work.expire_blocked_lease", actors=("system",))
def expire_blocked_lease(ctx: HandlerContext) -> Decision:
    """The bounded blocked lease ran out: the owner is fenced; an unblock then
    re-opens the WorkItem for a new offer (spec 10.2)."""
    return _fence_lapsed_owner(ctx, "expire.blocked_lease", "work.blocked_lease_expired", "blocked lease")


# --- session replacement (MWP-WRK-014) --------------------------------------------


def revoke_leases_of_replaced_session(ctx: HandlerContext) -> list[tuple[GroupHead, list[Emit]]]:
    """A replacement Agent Session revokes the Agent's active leases and returns
    the WorkItems to ``queued`` before the new runtime may start them again.

    Runs inside ``agent.open_session``: other Groups are locked in ascending
    id order after the administrative Group.
    """
    leases = list(
        ExecutionLease.objects.filter(agent_id=ctx.actor.id, status="active").values_list(
            "workitem__group_id", "workitem_id"
        )
    )
    by_group: dict[str, list[str]] = {}
    for lease_group, lease_item in leases:
        by_group.setdefault(str(lease_group), []).append(str(lease_item))
    out: list[tuple[GroupHead, list[Emit]]] = []
    for group_id in sorted(by_group):
        head = ctx.lock_other_group(group_id)
        events: list[Emit] = []
        for item_id in sorted(by_group[group_id]):
            item = WorkItem.objects.select_for_update().get(id=item_id)
            lease = active_lease(item)
            if lease is None or item.state != sm.ACTIVE:
                continue
            body = _revoke_lease(item, lease, "session replaced", ctx.now)
            item.start_by = ctx.now + seconds("MWP_START_BY_SECONDS")
            item.owner_expires_at = item.start_by
            save(item, ctx.now)
            body["start_by"] = format_time(item.start_by)
            events.append(Emit("work.lease_revoked", item_ref(item), body))
        out.append((head, events))
    return out


session_replaced_hooks.append(revoke_leases_of_replaced_session)


def fence_removed_member(ctx: HandlerContext, agent_id: str) -> list[Emit]:
    """``membership.remove``: the removed member's active leases in this Group
    are revoked (the WorkItem returns to ``queued``) and its ownership of
    queued, active and blocked WorkItems ends, as when an ownership lease runs
    out, so the Coordinator may re-offer under a higher Ownership Epoch.
    Open offers to it are withdrawn."""
    events: list[Emit] = []
    # Locked after the Group row, per the write path's lock order, in id order.
    owned = WorkItem.objects.select_for_update().filter(
        group_id=ctx.group.id, owner_id=uuid.UUID(agent_id), state__in=(sm.QUEUED, sm.ACTIVE, sm.BLOCKED)
    )
    for item in owned.order_by("id"):
        lease = active_lease(item) if item.state == sm.ACTIVE else None
        revoked = _revoke_lease(item, lease, "membership removed", ctx.now) if lease is not None else None
        sm.check_transition(item.state, "expire.blocked_lease" if item.state == sm.BLOCKED else "expire.start_by")
        fenced = _fence_owner(item)
        save(item, ctx.now)
        if revoked is not None:
            events.append(Emit("work.lease_revoked", item_ref(item), {**revoked, "start_by": None}))
        events.append(Emit("work.owner_fenced", item_ref(item), fenced))
    return events


membership_removed_hooks.append(fence_removed_member)
