"""Expiry and fencing (PROTOCOL §11.3-§11.5): the control plane's
``ext.mwportal.work.lease_expire`` (issued by Celery beat, ``workitems/tasks.py``),
session replacement and the end of a Membership, which revoke leases and ownership."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from missions.authority import Decision, Emit, GroupHead, HandlerContext
from missions.registry import command, membership_removed_hooks, session_replaced_hooks
from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.ids import bare, urn

from .. import state_machine as sm
from ..content import content
from ..evidence import authority_evidence
from ..models import ExecutionLease, Offer, WorkItem
from ..wire import refuse, when
from .common import (
    active_lease,
    backoff,
    check_retry_allowed,
    emit,
    end_item,
    end_lease,
    item_ref,
    ownership_lease_id,
    save,
    seconds,
    work_item_id,
)

LEASE_EXPIRE = "ext.mwportal.work.lease_expire"
LEASE_EXPIRED = "ext.mwportal.work.lease_expired"
OWNERSHIP_FENCED = "ext.mwportal.work.ownership_fenced"
LEASE_REVOKED = "ext.missionweaveprotocol.core.work_execution_lease_revoked"


@command(LEASE_EXPIRE, actors=("service",))
def expire(ctx: HandlerContext) -> Decision:
    """A timer ran out (§11.3, §11.5): a lapsed Execution Lease, a missed start-by
    deadline (``ownership``) or the end of the bounded blocked lease (``blocked``).

    The payload names the Ownership Epoch the control plane observed; a
    WorkItem that moved on since is WORK_STALE_OWNERSHIP, so a late or repeated
    timer changes nothing.
    """
    item = WorkItem.objects.select_for_update().filter(id=work_item_id(ctx), group_id=ctx.group.id).first()
    if item is None:
        raise refuse(ErrorCode.INVALID_COMMAND, "/payload/workItemId: no such WorkItem", reason="not_found")
    if item.ownership_epoch != ctx.payload["ownershipEpoch"]:
        raise refuse(ErrorCode.WORK_STALE_OWNERSHIP, "the WorkItem changed owner since the expiry was observed")
    kind = ctx.payload["leaseType"]
    if kind == "execution":
        return _expire_execution(ctx, item)
    transition = "expire.start_by" if kind == "ownership" else "expire.blocked_lease"
    sm.check_transition(item.state, transition)
    if item.owner_id is None or item.owner_expires_at is None or item.owner_expires_at > ctx.now:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"the {kind} lease has not run out")
    lease_id = ownership_lease_id(item)
    fenced = _fence_owner(item, "start_by_missed" if kind == "ownership" else "blocked_lease_expired")
    save(item, ctx.now)
    expired = {
        "workItemId": urn(item.id),
        "ownershipEpoch": item.ownership_epoch,
        "leaseType": kind,
        "status": item.state,
    }
    if kind == "ownership":
        expired["leaseId"] = urn(lease_id)
    return Decision([emit(LEASE_EXPIRED, item, expired), emit(OWNERSHIP_FENCED, item, fenced)], item_ref(item))


def _expire_execution(ctx: HandlerContext, item: WorkItem) -> Decision:
    """The Execution Lease timed out (§11.3). §10.2 gives a lease timeout no state of its own:
    the WorkItem stays ``active`` with no lease, and its owner keeps ownership through
    the offline grace window (§11.5: buffered progress may still be reconciled, which
    checkpoints it to ``queued``). After that and the contract's backoff the retry
    policy re-offers it (``work.offer`` from ``active`` with no live owner, the expired
    owner fenced first: §11.5's reassignment). Once the policy is spent the attempt
    fails (§11.4: ``work.failed`` with Evidence, the table's ``work.fail`` row)."""
    lease = active_lease(item)
    named = ctx.payload.get("leaseId")
    if lease is None or named is None or bare(named, "/payload/leaseId") != str(lease.id) or lease.expires_at > ctx.now:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "the lease is no longer active and past its expiry")
    expired: dict[str, Any] = {
        "workItemId": urn(item.id),
        "ownershipEpoch": item.ownership_epoch,
        "leaseType": "execution",
        "leaseId": urn(lease.id),
        "attempt": max(item.attempt, 1),
    }
    try:
        check_retry_allowed(item, ctx.now)
    except ProtocolError as exhausted:
        sm.check_transition(item.state, "work.fail")
        end_lease(lease, "expired", "lease timeout", ctx.now)
        end_item(item, sm.FAILED, ctx.now, "lease timeout")
        save(item, ctx.now)
        reason = f"the Execution Lease expired; retries exhausted: {exhausted.message}"
        evidence = [authority_evidence(ctx, item, f"{reason}.", passed=False)]
        content().record_evidence(ctx, item, evidence, "failure")
        failed = {"workItemId": urn(item.id), "reason": reason, "evidence": evidence, "attempt": max(item.attempt, 1)}
        return Decision([emit(LEASE_EXPIRED, item, expired), emit("work.failed", item, failed)], item_ref(item))
    sm.check_transition(item.state, "expire.lease", sm.ACTIVE)
    end_lease(lease, "expired", "lease timeout", ctx.now)
    item.needs_new_attempt = True
    item.retry_not_before = ctx.now + backoff(item)
    item.owner_expires_at = lease.expires_at + seconds("MWP_OFFLINE_GRACE_SECONDS")
    item.start_by = None
    save(item, ctx.now)
    expired["status"] = item.state  # active: no state change
    expired["retryNotBefore"] = when(max(item.retry_not_before, item.owner_expires_at))
    return Decision([emit(LEASE_EXPIRED, item, expired)], item_ref(item))


def _fence_owner(item: WorkItem, reason: str) -> dict[str, Any]:
    """End the owner's ownership (no owner, no deadlines); the ``ownership_fenced`` payload."""
    payload = {
        "workItemId": urn(item.id),
        "ownershipEpoch": item.ownership_epoch,
        "reason": reason,
        "agentId": urn(str(item.owner_id)),
    }
    item.owner, item.owner_expires_at, item.start_by = None, None, None
    return payload


def _revoke_lease(item: WorkItem, lease: ExecutionLease, reason: str, now: datetime) -> dict[str, Any]:
    """Revoke the active lease; the WorkItem waits in its queue for a new attempt (§11.3).
    The ``work_execution_lease_revoked`` payload."""
    sm.check_transition(item.state, "lease.revoke")
    end_lease(lease, "revoked", reason, now)
    item.state = sm.QUEUED
    item.needs_new_attempt = True
    return {
        "workItemId": urn(item.id),
        "executionLeaseId": urn(lease.id),
        "reason": reason,
        "status": item.state,
        "agentId": urn(lease.agent_id),
    }


# --- session replacement (§11.3) ---------------------------------------------------


def revoke_leases_of_replaced_session(
    ctx: HandlerContext, agent_id: str, epoch: int
) -> list[tuple[GroupHead, list[Emit]]]:
    """A replacement Agent Session revokes the Agent's active leases and returns
    the WorkItems to ``queued`` before the new runtime may start them again.

    Runs inside ``...identity.session_open``: the Groups are locked in
    ascending id order.
    """
    leases = ExecutionLease.objects.filter(agent_id=agent_id, status="active").values_list(
        "workitem__group_id", "workitem_id"
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
            payload = _revoke_lease(item, lease, "session_replaced", ctx.now)
            payload["sessionEpoch"] = epoch
            item.start_by = ctx.now + seconds("MWP_START_BY_SECONDS")
            item.owner_expires_at = item.start_by
            payload["startBy"] = when(item.start_by)  # the new start-by deadline travels with the Event
            save(item, ctx.now)
            events.append(emit(LEASE_REVOKED, item, payload))
        out.append((head, events))
    return out


session_replaced_hooks.append(revoke_leases_of_replaced_session)


def fence_removed_member(ctx: HandlerContext, agent_id: str) -> list[Emit]:
    """``membership.end``: the member's active leases in this Group are revoked (the
    WorkItem returns to ``queued``) and its ownership of queued, active and
    blocked WorkItems ends, as when an ownership lease runs out, so the
    Coordinator may re-offer under a higher Ownership Epoch (§11.5). Open offers
    to it are withdrawn."""
    events: list[Emit] = []
    # Locked after the Group row, per the write path's lock order, in id order.
    owned = WorkItem.objects.select_for_update().filter(
        group_id=ctx.group.id, owner_id=uuid.UUID(agent_id), state__in=(sm.QUEUED, sm.ACTIVE, sm.BLOCKED)
    )
    for item in owned.order_by("id"):
        lease = active_lease(item) if item.state == sm.ACTIVE else None
        revoked = _revoke_lease(item, lease, "membership_ended", ctx.now) if lease is not None else None
        sm.check_transition(item.state, "expire.blocked_lease" if item.state == sm.BLOCKED else "expire.start_by")
        fenced = _fence_owner(item, "membership_ended")
        save(item, ctx.now)
        if revoked is not None:
            events.append(emit(LEASE_REVOKED, item, revoked))
        events.append(emit(OWNERSHIP_FENCED, item, fenced))
    Offer.objects.filter(workitem__group_id=ctx.group.id, agent_id=agent_id, status="open").update(
        status="withdrawn", closed_at=ctx.now
    )
    return events


membership_removed_hooks.append(fence_removed_member)
