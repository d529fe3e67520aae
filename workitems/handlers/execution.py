"""Execution under Execution Leases (spec 11.3): start, renewal, checkpoints, blocking."""

from __future__ import annotations

import secrets
import uuid
from typing import Any

from missions.authority import (
    Decision,
    Emit,
    HandlerContext,
)
from missions.guards import check_members, check_text, refuse
from missions.models import Mission
from missions.registry import command
from mwportal.protocol import ErrorCode, format_time, malformed

from .. import state_machine as sm
from ..contract import requires_approval
from ..guards import (
    check_progress,
    check_usage,
)
from ..models import Checkpoint, ExecutionLease, WorkItem
from ..offline import OFFLINE_EXTENSION, USAGE_RECORDED, OfflineBinding, check_binding, parse_binding
from .common import (
    COORDINATING,
    EXECUTING,
    charge_usage,
    check_lease,
    check_retry_allowed,
    end_lease,
    item_ref,
    load_item,
    owner_is_live,
    save,
    seconds,
    token_digest,
    unmet_dependencies,
)

# --- execution under leases (spec 11.3) ------------------------------------------


def _issue_token(lease: ExecutionLease) -> dict[str, Any]:
    """A capability token bound to the lease, expiring with it; only its hash is kept."""
    token = secrets.token_urlsafe(32)
    lease.token_hash = token_digest(token)
    lease.token_expires_at = lease.expires_at
    return {
        "lease_id": str(lease.id),
        "lease_expires_at": format_time(lease.expires_at),
        "capability_token": token,
        "capability_token_expires_at": format_time(lease.token_expires_at),
    }


@command("work.start", group_roles=EXECUTING, cas=True)
def start(ctx: HandlerContext) -> Decision:
    """Start under a new Execution Lease bound to Agent, Session Epoch,
    WorkItem and Ownership Epoch (MWP-WRK-013). The capability token is in the
    receipt's ``grants`` only, never in the Event."""
    check_members(ctx.body, [])
    item = load_item(ctx)
    env = ctx.envelope
    if env.ownership_epoch is None:
        raise malformed("ownership_epoch", "work.start must name the Ownership Epoch")
    sm.check_transition(item.state, "work.start")
    if env.ownership_epoch != item.ownership_epoch or str(item.owner_id) != ctx.actor.id:
        raise refuse(
            ErrorCode.WORK_STALE_OWNERSHIP,
            "the actor does not own this WorkItem under that Ownership Epoch",
            current=item.ownership_epoch,
        )
    if not owner_is_live(item, ctx.now):
        raise refuse(
            ErrorCode.WORK_LEASE_EXPIRED,
            "the start-by deadline has passed; ownership has lapsed",
            reason="lease_expired",
        )
    if item.accepted_contract_revision != item.contract_revision:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "the contract changed; it needs renewed acceptance")
    if requires_approval(item.contract) and item.approved_contract_revision != item.contract_revision:
        raise refuse(ErrorCode.APPROVAL_REQUIRED, "this contract needs an execution Approval before it starts")
    unmet = unmet_dependencies(item)
    if unmet:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            "dependencies do not satisfy their policy yet",
            workitems=unmet,
            reason="dependency_unmet",
        )
    if item.needs_new_attempt:
        check_retry_allowed(item, ctx.now)
        if item.retry_not_before is not None and item.retry_not_before > ctx.now:
            raise refuse(
                ErrorCode.INVALID_STATE_TRANSITION,
                f"backing off until {format_time(item.retry_not_before)} before the next attempt",
                retry_not_before=format_time(item.retry_not_before),
            )
        item.attempt += 1
        item.needs_new_attempt = False
    lease = ExecutionLease(
        id=uuid.uuid4(), workitem=item, agent_id=ctx.actor.id, session_epoch=ctx.actor.session_epoch,
        ownership_epoch=item.ownership_epoch, started_at=ctx.now,
        expires_at=ctx.now + seconds("MWP_LEASE_SECONDS"),
    )  # fmt: skip
    grants = _issue_token(lease)
    lease.save(force_insert=True)  # a new Lease ID: INSERT, never an UPDATE first
    item.state = sm.ACTIVE
    item.owner_expires_at = lease.expires_at
    save(item, ctx.now)
    body = {
        "agent": ctx.actor.id,
        "lease_id": str(lease.id),
        "ownership_epoch": item.ownership_epoch,
        "session_epoch": lease.session_epoch,
        "lease_expires_at": format_time(lease.expires_at),
        "attempt": item.attempt,
    }
    return Decision([Emit("work.started", item_ref(item), body)], item_ref(item), grants=grants)


@command("work.renew_lease", group_roles=EXECUTING)
def renew_lease(ctx: HandlerContext) -> Decision:
    """Extend the current lease (compare-and-set on its Lease ID) and rotate
    its capability token, which again expires with the lease."""
    check_members(ctx.body, [])
    item = load_item(ctx)
    sm.check_transition(item.state, "work.renew_lease")
    lease = check_lease(ctx, item)
    lease.expires_at = ctx.now + seconds("MWP_LEASE_SECONDS")
    lease.renewals = [*lease.renewals, {"at": format_time(ctx.now), "expires_at": format_time(lease.expires_at)}]
    grants = _issue_token(lease)
    lease.save()
    item.owner_expires_at = lease.expires_at
    save(item, ctx.now, bump=False)
    body = {
        "lease_id": str(lease.id),
        "lease_expires_at": format_time(lease.expires_at),
        "renewal": len(lease.renewals),
    }
    return Decision([Emit("work.lease_renewed", item_ref(item), body)], item_ref(item), grants=grants)


def _release_with_checkpoint(
    ctx: HandlerContext, item: WorkItem, lease: ExecutionLease, reason: str, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Checkpoint, charge usage and release the lease (checkpoint and block)."""
    body = _record_checkpoint(ctx, item, lease, extra)
    end_lease(lease, "released", reason, ctx.now)
    return body


def _record_checkpoint(
    ctx: HandlerContext, item: WorkItem, lease: ExecutionLease, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The checkpoint row and the usage it charges; the Event body."""
    check_members(ctx.body, ["checkpoint", "progress"], ("usage", *extra))
    state = ctx.body["checkpoint"]
    if not isinstance(state, dict):
        raise malformed("body.checkpoint", "must be an object")
    progress = check_progress(ctx.body["progress"])
    usage = charge_usage(ctx, item, check_usage(ctx.body.get("usage")))
    item.checkpoint_count += 1
    Checkpoint.objects.create(
        workitem=item,
        lease=lease,
        ownership_epoch=item.ownership_epoch,
        number=item.checkpoint_count,
        state=state,
        progress=progress,
        created_at=ctx.now,
    )
    return {
        "lease_id": str(lease.id),
        "checkpoint_number": item.checkpoint_count,
        "checkpoint": state,
        "progress": progress,
        "usage": usage,
    }


@command("work.checkpoint", group_roles=EXECUTING, extensions=(OFFLINE_EXTENSION,))
def checkpoint(ctx: HandlerContext) -> Decision:
    """Durable progress releases execution while the owner keeps a bounded
    ownership lease (spec 10.2): the WorkItem returns to ``queued``.

    A checkpoint buffered offline carries the bounded-offline-execution
    binding and is reconciled against its historical lease (``offline.py``).
    """
    item = load_item(ctx)
    binding = parse_binding(ctx.envelope.extensions)
    if binding is not None:
        return _reconcile_offline_checkpoint(ctx, item, binding)
    sm.check_transition(item.state, "work.checkpoint")
    lease = check_lease(ctx, item)
    body = _release_with_checkpoint(ctx, item, lease, "checkpoint")
    return Decision([_checkpointed(ctx, item, body)], item_ref(item))


def _checkpointed(ctx: HandlerContext, item: WorkItem, body: dict[str, Any]) -> Emit:
    """Back to ``queued`` under a fresh start-by deadline; the Event."""
    item.state = sm.QUEUED
    item.start_by = ctx.now + seconds("MWP_START_BY_SECONDS")
    item.owner_expires_at = item.start_by
    save(item, ctx.now)
    # The Event carries every timer it sets, so a Worker's projection knows them.
    body["start_by"] = format_time(item.start_by)
    return Emit("work.checkpointed", item_ref(item), body)


def _reconcile_offline_checkpoint(ctx: HandlerContext, item: WorkItem, binding: OfflineBinding) -> Decision:
    """Spec 11.5 (MWP-WRK-021/022): the offline usage is charged with its own
    Event naming both sessions, then the checkpoint applies, in this one
    transaction; a budget overflow refuses both."""
    lease = check_binding(ctx, item, binding)
    if "usage" in ctx.body:
        raise malformed("body.usage", "offline usage travels in the binding's usage_delta")
    if lease.status == "active":
        sm.check_transition(item.state, "work.checkpoint")
    elif item.state != sm.QUEUED:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"a {item.state} WorkItem takes no buffered progress")
    usage = charge_usage(ctx, item, binding.usage_delta)
    usage_body: dict[str, Any] | None = None
    if usage:
        mission_usage = Mission.objects.filter(id=item.mission_id).values_list("usage", flat=True).get()
        usage_body = {
            "workitem": str(item.id), "historical": binding.historical(),
            "reconciliation": {"session_epoch": ctx.envelope.session_epoch}, "disconnected_at":
            format_time(binding.disconnected_at), "buffered_at": format_time(binding.buffered_at),
            "delta": usage["delta"], "workitem_total": usage["workitem_total"], "mission_total": mission_usage,
        }  # fmt: skip
    offline = {"offline": {**binding.historical(), "buffered_at": format_time(binding.buffered_at)}}
    if lease.status == "active":
        # Still the current lease (the disconnection was short): an ordinary
        # checkpoint that releases it.
        body = {**_release_with_checkpoint(ctx, item, lease, "checkpoint"), **offline}
        checkpointed = _checkpointed(ctx, item, body)
    else:
        # The lease ended after the progress was buffered (expired, or revoked
        # by the new session): the checkpoint is recorded for whoever resumes;
        # the WorkItem stays queued under its current deadlines.
        body = {**_record_checkpoint(ctx, item, lease), **offline}
        save(item, ctx.now)
        checkpointed = Emit("work.checkpointed", item_ref(item), body)
    # The charge comes first in the log, then the progress it paid for.
    emits = [Emit(USAGE_RECORDED, item_ref(item), usage_body)] if usage_body is not None else []
    return Decision([*emits, checkpointed], item_ref(item))


@command("work.block", group_roles=EXECUTING)
def block(ctx: HandlerContext) -> Decision:
    """Checkpoint, record the required resolution, release the lease; the
    owner keeps a bounded blocked lease (spec 11.4; MWP-WRK-017)."""
    item = load_item(ctx)
    sm.check_transition(item.state, "work.block")
    lease = check_lease(ctx, item)
    body = _release_with_checkpoint(ctx, item, lease, "blocked", ("resolution_required",))
    if "resolution_required" not in ctx.body:
        raise malformed("body.resolution_required", "is required")
    body["resolution_required"] = check_text(ctx.body, "resolution_required", max_length=5000)
    item.state = sm.BLOCKED
    item.owner_expires_at = ctx.now + seconds("MWP_BLOCKED_LEASE_SECONDS")
    save(item, ctx.now)
    body["owner_expires_at"] = format_time(item.owner_expires_at)
    return Decision([Emit("work.blocked", item_ref(item), body)], item_ref(item))


@command("work.unblock", group_roles=COORDINATING, cas=True)
def unblock(ctx: HandlerContext) -> Decision:
    """Resolve a blocker: back to the owner's queue, or ``open`` for a new
    offer when the blocked lease has run out (spec 10.2)."""
    check_members(ctx.body, ["resolution"])
    resolution = check_text(ctx.body, "resolution", max_length=5000)
    item = load_item(ctx)
    sm.check_transition(item.state, "work.unblock")
    if item.child_mission_id is not None:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "the WorkItem waits for its child Mission")
    if owner_is_live(item, ctx.now):
        item.state = sm.QUEUED
        item.start_by = ctx.now + seconds("MWP_START_BY_SECONDS")
        item.owner_expires_at = item.start_by
    else:
        item.state = sm.OPEN
        item.owner, item.owner_expires_at, item.start_by = None, None, None
    save(item, ctx.now)
    body = {"resolution": resolution, "state": item.state,
            "start_by": format_time(item.start_by) if item.start_by else None}  # fmt: skip
    return Decision([Emit("work.unblocked", item_ref(item), body)], item_ref(item))
