"""Execution under Execution Leases (PROTOCOL §11.3-§11.5, §12): start, renewal,
usage, checkpoints (live and buffered offline), blocking and unblocking."""

from __future__ import annotations

import secrets
import uuid
from typing import Any

from missions.authority import Decision, Emit, HandlerContext
from missions.registry import command
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import urn

from .. import state_machine as sm
from ..contract import requires_approval
from ..models import Checkpoint, ExecutionLease, WorkItem
from ..offline import OFFLINE_EXTENSION, OfflineBinding, check_binding, parse_binding
from ..wire import refuse, when
from .common import (
    COORDINATING,
    EXECUTING,
    charge_usage,
    check_lease,
    check_owner,
    check_retry_allowed,
    emit,
    end_lease,
    item_ref,
    lease_document,
    load_item,
    owner_is_live,
    save,
    seconds,
    token_digest,
    unmet_dependencies,
    usage_recorded,
)


def _issue_token(lease: ExecutionLease) -> dict[str, Any]:
    """A capability token bound to the lease, expiring with it; only its hash is kept (§12)."""
    token = secrets.token_urlsafe(32)
    lease.token_hash = token_digest(token)
    lease.token_expires_at = lease.expires_at
    return {
        "executionLeaseId": urn(lease.id),
        "executionLeaseExpiresAt": when(lease.expires_at),
        "capabilityToken": token,
        "capabilityTokenExpiresAt": when(lease.token_expires_at),
    }


def _check_start_gates(ctx: HandlerContext, item: WorkItem) -> None:
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
            workItemIds=unmet,
            reason="dependency_unmet",
        )


@command("work.start", group_roles=EXECUTING)
def start(ctx: HandlerContext) -> Decision:
    """Start under a new Execution Lease bound to Agent, Session Epoch, WorkItem
    and Ownership Epoch (§11.3). The capability token is in the receipt's
    ``grants`` only, never in the Event (§12)."""
    item = load_item(ctx)
    sm.check_transition(item.state, "work.start")
    check_owner(ctx, item)
    _check_start_gates(ctx, item)
    if item.needs_new_attempt:
        check_retry_allowed(item, ctx.now)
        if item.retry_not_before is not None and item.retry_not_before > ctx.now:
            raise refuse(
                ErrorCode.INVALID_STATE_TRANSITION,
                f"backing off until {when(item.retry_not_before)} before the next attempt",
                retryNotBefore=when(item.retry_not_before),
            )
        item.attempt += 1
        item.needs_new_attempt = False
    lease = ExecutionLease(
        id=uuid.uuid4(),
        workitem=item,
        agent_id=ctx.actor.id,
        session_epoch=ctx.actor.session_epoch,
        ownership_epoch=item.ownership_epoch,
        started_at=ctx.now,
        expires_at=ctx.now + seconds("MWP_LEASE_SECONDS", ctx.payload.get("executionLeaseSeconds")),
    )
    grants = _issue_token(lease)
    lease.save(force_insert=True)  # a new Lease ID: INSERT, never an UPDATE first
    item.state = sm.ACTIVE
    item.owner_expires_at = lease.expires_at
    save(item, ctx.now)
    payload = {
        "workItemId": urn(item.id),
        "ownershipEpoch": item.ownership_epoch,
        "executionLease": lease_document(item, lease),
        "executionLeaseExpiresAt": when(lease.expires_at),
        "attempt": item.attempt,
    }
    return Decision([emit("work.started", item, payload)], item_ref(item), grants=grants)


@command(sm.RENEW, group_roles=EXECUTING)
def renew_lease(ctx: HandlerContext) -> Decision:
    """Extend the current lease (it must be the one the payload names, §11.3) and
    rotate its capability token, which again expires with the lease. The
    WorkItem's revision stays: a renewal changes no state the table knows."""
    item = load_item(ctx)
    sm.check_transition(item.state, sm.RENEW)
    lease = check_lease(ctx, item)
    lease.expires_at = ctx.now + seconds("MWP_LEASE_SECONDS", ctx.payload.get("leaseSeconds"))
    lease.renewals = [*lease.renewals, {"at": when(ctx.now), "expiresAt": when(lease.expires_at)}]
    grants = _issue_token(lease)
    lease.save()
    item.owner_expires_at = lease.expires_at
    save(item, ctx.now, bump=False)
    payload: dict[str, Any] = {
        "workItemId": urn(item.id),
        "ownershipEpoch": item.ownership_epoch,
        "executionLease": lease_document(item, lease),
        "executionLeaseExpiresAt": when(lease.expires_at),
    }
    if ctx.payload.get("progress") is not None:
        payload["progress"] = ctx.payload["progress"]
    return Decision([emit("work.progressed", item, payload)], item_ref(item), grants=grants)


@command(sm.USAGE, group_roles=EXECUTING, actors=("agent", "service"))
def record_usage(ctx: HandlerContext) -> Decision:
    """A nonzero usage delta for one WorkItem under one Ownership Epoch and one
    Execution Lease, charged to the WorkItem and its Mission in one transition (§12)."""
    item = load_item(ctx)
    sm.check_transition(item.state, sm.USAGE)
    lease = _service_lease(ctx, item) if ctx.command.actor_type == "service" else check_lease(ctx, item)
    delta = ctx.payload["usageDelta"]
    charged = charge_usage(ctx, item, delta)
    if charged is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND, "/payload/usageDelta: a usage record is nonzero", field="/payload/usageDelta"
        )
    save(item, ctx.now)
    return Decision([usage_recorded(item, str(lease.id), delta, charged)], item_ref(item))


def _service_lease(ctx: HandlerContext, item: WorkItem) -> ExecutionLease:
    """A metering service cites the current lease and epoch, as the owner would."""
    lease = ExecutionLease.objects.select_for_update().filter(workitem=item, status="active").first()
    if (
        lease is None
        or urn(lease.id) != ctx.payload["executionLeaseId"]
        or ctx.payload["ownershipEpoch"] != item.ownership_epoch
    ):
        raise refuse(ErrorCode.WORK_LEASE_EXPIRED, "not the current Execution Lease", reason="stale_lease")
    return lease


def _record_checkpoint(ctx: HandlerContext, item: WorkItem, lease: ExecutionLease) -> None:
    item.checkpoint_count += 1
    Checkpoint.objects.create(
        workitem=item,
        lease=lease,
        ownership_epoch=item.ownership_epoch,
        number=item.checkpoint_count,
        state=ctx.payload["checkpoint"],
        progress=ctx.payload.get("progress") or {},
        created_at=ctx.now,
    )


def _checkpointed(ctx: HandlerContext, item: WorkItem, *, requeue: bool) -> Emit:
    """The ``work.checkpointed`` Event; ``requeue``: back to ``queued`` under a fresh start-by."""
    if requeue:
        item.state = sm.QUEUED
        item.start_by = ctx.now + seconds("MWP_START_BY_SECONDS", ctx.payload.get("resumeWithinSeconds"))
        item.owner_expires_at = item.start_by
    save(item, ctx.now)
    payload: dict[str, Any] = {"workItemId": urn(item.id), "checkpoint": ctx.payload["checkpoint"]}
    if item.owner_expires_at is not None:
        payload["ownershipLeaseExpiresAt"] = when(item.owner_expires_at)
    if ctx.payload.get("progress") is not None:
        payload["progress"] = ctx.payload["progress"]
    # Every timer the Event sets travels with it, so a Worker's projection knows them.
    if item.start_by is not None:
        payload["startBy"] = when(item.start_by)
    return emit("work.checkpointed", item, payload)


@command("work.checkpoint", group_roles=EXECUTING, extensions=(OFFLINE_EXTENSION,))
def checkpoint(ctx: HandlerContext) -> Decision:
    """Durable progress releases execution while the owner keeps a bounded
    ownership lease (§10.2): the WorkItem returns to ``queued``. A usage delta
    is charged first, in the same transition (§12).

    A checkpoint buffered offline carries the bounded-offline-execution binding
    and is reconciled against its historical lease (``offline.py``, §11.5).
    """
    item = load_item(ctx)
    binding = parse_binding(ctx.command.extensions or {})
    if binding is not None:
        return _reconcile_offline_checkpoint(ctx, item, binding)
    sm.check_transition(item.state, "work.checkpoint")
    lease = check_lease(ctx, item)
    delta = ctx.payload.get("usageDelta") or {}
    charged = charge_usage(ctx, item, delta)
    _record_checkpoint(ctx, item, lease)
    end_lease(lease, "released", "checkpoint", ctx.now)
    events = [usage_recorded(item, str(lease.id), delta, charged)] if charged is not None else []
    return Decision([*events, _checkpointed(ctx, item, requeue=True)], item_ref(item))


def _reconcile_offline_checkpoint(ctx: HandlerContext, item: WorkItem, binding: OfflineBinding) -> Decision:
    """§11.5: the offline usage is charged with its own Event naming both
    sessions, then the checkpoint applies, in this one transaction; a budget
    overflow refuses both."""
    lease = check_binding(ctx, item, binding)
    if ctx.payload.get("usageDelta"):
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/usageDelta: offline usage travels in the binding's resourceUsageDelta",
            field="/payload/usageDelta",
        )
    # The current lease, or one that timed out while the WorkItem stayed active
    # (§11.3: a timeout changes no state): the work.checkpoint row, active -> queued.
    resumes = lease.status == "active" or item.state == sm.ACTIVE
    if resumes:
        sm.check_transition(item.state, "work.checkpoint")
    elif item.state != sm.QUEUED:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"a {item.state} WorkItem takes no buffered progress")
    charged = charge_usage(ctx, item, binding.usage_delta)
    events: list[Emit] = []
    if charged is not None:
        offline = {
            "disconnectedAt": binding.raw["disconnectedAt"],
            "bufferedAt": binding.raw["bufferedAt"],
            "graceDeadline": binding.raw["graceDeadline"],
            "executionSessionEpoch": binding.session_epoch,
            "reconciliationSessionEpoch": ctx.command.session_epoch,
            "reconciledAt": when(ctx.now),
            "progressActionId": urn(ctx.command.action_id),
        }
        events.append(usage_recorded(item, str(lease.id), binding.usage_delta, charged, offline))
    _record_checkpoint(ctx, item, lease)
    if lease.status == "active":
        # Still the current lease (the disconnection was short): an ordinary
        # checkpoint that releases it.
        end_lease(lease, "released", "checkpoint", ctx.now)
    # A lease that timed out left the WorkItem active: the checkpoint queues it
    # for its owner. One revoked by the new session already queued it: the
    # checkpoint is recorded for whoever resumes, under the current deadlines.
    events.append(_checkpointed(ctx, item, requeue=resumes))
    return Decision(events, item_ref(item))


@command("work.block", group_roles=EXECUTING)
def block(ctx: HandlerContext) -> Decision:
    """Checkpoint, name the required resolution, release the lease; the owner
    keeps a bounded blocked lease (§11.4)."""
    item = load_item(ctx)
    sm.check_transition(item.state, "work.block")
    lease = check_lease(ctx, item)
    _record_checkpoint(ctx, item, lease)
    end_lease(lease, "released", "blocked", ctx.now)
    item.state = sm.BLOCKED
    item.owner_expires_at = ctx.now + seconds("MWP_BLOCKED_LEASE_SECONDS", ctx.payload.get("blockedLeaseSeconds"))
    save(item, ctx.now)
    payload = {
        "workItemId": urn(item.id),
        "reason": ctx.payload["reason"],
        "checkpoint": ctx.payload["checkpoint"],
        "ownershipLeaseExpiresAt": when(item.owner_expires_at),
    }
    return Decision([emit("work.blocked", item, payload)], item_ref(item))


@command("work.unblock", group_roles=COORDINATING)
def unblock(ctx: HandlerContext) -> Decision:
    """Resolve a blocker: back to the owner's queue, or ``open`` for a new offer
    when the blocked lease has run out (§10.2)."""
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
    payload: dict[str, Any] = {"workItemId": urn(item.id), "status": item.state}
    if ctx.payload.get("resolution") is not None:
        payload["resolution"] = ctx.payload["resolution"]
    if item.start_by is not None:
        payload["startBy"] = when(item.start_by)
    return Decision([emit("work.unblocked", item, payload)], item_ref(item))
