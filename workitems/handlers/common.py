"""What every WorkItem handler shares (PROTOCOL §10, §11.3-§11.5, §12).

Every handler runs inside ``accept()`` with the Group row locked, then locks
the WorkItem row (Group first, then the aggregate: the one lock order of the
write path). Each begins with ``check_transition()`` against the table in
``state_machine.py``, then the fences the Command carries in its payload
(``ownershipEpoch``, ``executionLeaseId``: the catalogue's ``LEASED``), then its
other rules, then writes the rows and returns the Events, whose payloads are the
catalogue's.

Timing (DESIGN §6 settings): an owner must start within
``MWP_START_BY_SECONDS`` of acceptance or of a checkpoint; an Execution Lease
lasts ``MWP_LEASE_SECONDS`` unless the Command asks for less; a blocked owner
keeps ownership for ``MWP_BLOCKED_LEASE_SECONDS``.

Identifiers: the rows keep bare UUIDs, every payload carries ``urn:uuid:`` IDs.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from missions.authority import AggregateRef, Emit, HandlerContext, check_revision
from missions.models import Mission
from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.ids import bare, urn

from .. import state_machine as sm
from ..contract import LIMITS, MICRO, dependency_policy
from ..models import ExecutionLease, Offer, WorkDependency, WorkItem
from ..wire import moment, refuse, when

COORDINATING = ("coordinator",)
# Who executes under offers and leases: workers, and reviewers for the review
# WorkItems the review pipeline offers them (§13.2). The offer is the gate.
EXECUTING = ("worker", "reviewer")
# work.fail: the Coordinator, or the lease holder (§10.2, §11.3).
AUTHORS_OF_RESULTS = ("coordinator", *EXECUTING)
# The UUID namespace of ownership lease IDs: one per (WorkItem, Ownership Epoch).
_OWNERSHIP_LEASES = uuid.UUID("6f1d3c52-7a55-4f0e-9b61-2d0c8e4f7a10")


def seconds(name: str, asked: int | None = None) -> timedelta:
    """A setting's duration, or the shorter one a Command asked for."""
    default = int(getattr(settings, name))
    return timedelta(seconds=min(default, asked) if asked else default)


def item_ref(item: WorkItem) -> AggregateRef:
    return AggregateRef("work_item", str(item.id), item.revision)


def emit(kind: str, item: WorkItem, payload: dict[str, Any]) -> Emit:
    """An Event about ``item``; its envelope names the WorkItem (§15.2 ``workItemId``)."""
    return Emit(kind, item_ref(item), payload, work_item_id=str(item.id))


def work_item_id(ctx: HandlerContext) -> str:
    """The payload's ``workItemId`` (bare); the envelope's, when present, must be the same."""
    target = bare(ctx.payload["workItemId"], "/payload/workItemId")
    if ctx.command.work_item_id is not None and ctx.command.work_item_id != target:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "workItemId: the envelope names another WorkItem than the payload",
            field="/workItemId",
        )
    return target


def load_item(ctx: HandlerContext) -> WorkItem:
    """The WorkItem the payload names, locked, its revision compared (§15.3)."""
    target = work_item_id(ctx)
    item = WorkItem.objects.select_for_update().filter(id=target, group_id=ctx.group.id).first()
    if item is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/workItemId: no such WorkItem in this Group",
            field="/payload/workItemId",
            reason="not_found",
        )
    check_revision(ctx.command, item.revision)
    return item


# Every column a handler may change, except the contract: the Work Contract
# is the largest value of the row and changes only with a new contract version.
_MUTABLE = [
    f.attname
    for f in WorkItem._meta.concrete_fields
    if f.name not in ("id", "group", "mission", "proposal", "contract", "created_at")
]


def save(item: WorkItem, now: datetime, *, bump: bool = True, contract: bool = False) -> None:
    """Write the WorkItem row (one UPDATE); ``contract=True`` also writes the contract."""
    if bump:
        item.revision += 1
    item.updated_at = now
    item.save(update_fields=[*_MUTABLE, "contract"] if contract else _MUTABLE)


def owner_is_live(item: WorkItem, now: datetime) -> bool:
    """An owner whose ownership lease (start-by, execution or blocked lease) is still running."""
    return item.owner_id is not None and item.owner_expires_at is not None and item.owner_expires_at > now


def active_lease(item: WorkItem) -> ExecutionLease | None:
    # Locked after the WorkItem row, per the lock order.
    return ExecutionLease.objects.select_for_update().filter(workitem=item, status="active").first()


def end_lease(lease: ExecutionLease | None, status: str, reason: str, now: datetime) -> None:
    if lease is None:
        return
    lease.status, lease.end_reason, lease.ended_at = status, reason, now
    lease.save(update_fields=["status", "end_reason", "ended_at"])


def withdraw_offers(item: WorkItem, now: datetime, *, except_agent: str | None = None) -> list[str]:
    """Close the open offers; the withdrawn Agents' IDs (``urn:uuid:``), sorted."""
    offers = Offer.objects.filter(workitem=item, status="open")
    if except_agent is not None:
        offers = offers.exclude(agent_id=except_agent)
    withdrawn = sorted(urn(a) for a in offers.values_list("agent_id", flat=True))
    offers.update(status="withdrawn", closed_at=now)
    return withdrawn


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_role(ctx: HandlerContext, roles: tuple[str, ...]) -> None:
    held = ctx.actor.membership_roles or frozenset()
    if not held & set(roles):
        raise refuse(ErrorCode.AUTH_FORBIDDEN, f"{ctx.command.kind} needs the Group role {' or '.join(roles)}")


def check_owner(ctx: HandlerContext, item: WorkItem) -> None:
    """The actor owns the WorkItem under the payload's Ownership Epoch (§11.3)."""
    epoch = ctx.payload.get("ownershipEpoch")
    if epoch != item.ownership_epoch or str(item.owner_id) != ctx.actor.id:
        raise refuse(
            ErrorCode.WORK_STALE_OWNERSHIP,
            f"ownershipEpoch {epoch} of this actor is not the current ownership ({item.ownership_epoch})",
            currentOwnershipEpoch=item.ownership_epoch,
        )


def check_lease(ctx: HandlerContext, item: WorkItem) -> ExecutionLease:
    """Fencing of lease-bound Commands (§11.3).

    The payload names the current Execution Lease of an active lease held by
    the actor: an older Lease ID is WORK_LEASE_EXPIRED (reason ``stale_lease``)
    even under the same Ownership Epoch, a changed Ownership Epoch is
    WORK_STALE_OWNERSHIP, an elapsed lease is WORK_LEASE_EXPIRED (reason
    ``lease_expired``).
    """
    lease_id = bare(ctx.payload["executionLeaseId"], "/payload/executionLeaseId")
    epoch = ctx.payload.get("ownershipEpoch")
    if epoch != item.ownership_epoch:
        raise refuse(
            ErrorCode.WORK_STALE_OWNERSHIP,
            f"ownershipEpoch {epoch} is not current ({item.ownership_epoch})",
            currentOwnershipEpoch=item.ownership_epoch,
        )
    lease = active_lease(item)
    if lease is None or str(lease.id) != lease_id or str(lease.agent_id) != ctx.actor.id:
        raise refuse(
            ErrorCode.WORK_LEASE_EXPIRED,
            f"{urn(lease_id)} is not the current Execution Lease",
            executionLeaseId=urn(lease_id),
            reason="stale_lease",
        )
    if lease.expires_at <= ctx.now:
        raise refuse(
            ErrorCode.WORK_LEASE_EXPIRED,
            f"the Execution Lease expired at {when(lease.expires_at)}",
            reason="lease_expired",
        )
    return lease


# --- normative lease documents (lease.schema.json) ------------------------------


def lease_document(item: WorkItem, lease: ExecutionLease) -> dict[str, Any]:
    """The Execution Lease as ``lease.schema.json`` has it."""
    doc: dict[str, Any] = {
        "leaseId": urn(lease.id),
        "leaseType": "execution",
        "missionId": urn(item.mission_id),
        "groupId": urn(item.group_id),
        "holderAgentId": urn(lease.agent_id),
        "sessionEpoch": lease.session_epoch,
        "issuedAt": when(lease.started_at),
        "startsAt": when(lease.started_at),
        "expiresAt": when(lease.expires_at),
        "state": lease.status,
        "renewalCount": len(lease.renewals),
        "workItemId": urn(item.id),
        "ownershipEpoch": lease.ownership_epoch,
    }
    if lease.renewals:
        doc["lastRenewedAt"] = lease.renewals[-1]["at"]
    if lease.status != "active":
        doc["closedAt"] = when(lease.ended_at or lease.expires_at)
        doc["closureReason"] = lease.end_reason or lease.status
    return doc


def ownership_lease_id(item: WorkItem) -> str:
    """The ownership lease of the current Ownership Epoch: one stable ID per epoch."""
    return str(uuid.uuid5(_OWNERSHIP_LEASES, f"{item.id}:{item.ownership_epoch}"))


def ownership_lease(item: WorkItem, session_epoch: int, now: datetime) -> dict[str, Any]:
    """The ownership grant with its start-by deadline (§11.3), as ``lease.schema.json`` has it."""
    assert item.start_by is not None and item.owner_id is not None
    return {
        "leaseId": urn(ownership_lease_id(item)),
        "leaseType": "ownership",
        "missionId": urn(item.mission_id),
        "groupId": urn(item.group_id),
        "holderAgentId": urn(item.owner_id),
        "sessionEpoch": session_epoch,
        "issuedAt": when(now),
        "startsAt": when(now),
        "expiresAt": when(item.start_by),
        "state": "active",
        "renewalCount": 0,
        "workItemId": urn(item.id),
        "ownershipEpoch": item.ownership_epoch,
        "startBy": when(item.start_by),
    }


# --- budgets (§12) ---------------------------------------------------------------


def _limits(budget: dict[str, Any]) -> dict[str, float]:
    """Usage dimension -> hard limit of a normative budget (money in microunits)."""
    out: dict[str, float] = {}
    for dim, limit in LIMITS.items():
        if isinstance(budget.get(limit), int | float) and not isinstance(budget.get(limit), bool):
            out[dim] = budget[limit] * MICRO if dim == "financialMicrounits" else budget[limit]
    return out


def charge_usage(ctx: HandlerContext, item: WorkItem, delta: dict[str, int] | None) -> dict[str, Any] | None:
    """Charge a usage delta to the WorkItem and its Mission in one transition (§12).

    A one-dimension overflow of either budget is BUDGET_EXCEEDED, raised
    before anything is written, so the charge and the Command fail together.
    Returns the ``cumulativeUsage`` and ``remainingBudget`` of the recorded
    Event, or None for a zero delta.
    """
    delta = {dim: value for dim, value in (delta or {}).items() if value}
    if not delta:
        return None
    own = _limits(item.contract["budget"])
    totals = {
        dim: item.usage.get(dim, 0) + delta.get(dim, 0) for dim in LIMITS if item.usage.get(dim, 0) + delta.get(dim, 0)
    }
    for dim, total in totals.items():
        if dim in own and total > own[dim]:
            raise refuse(
                ErrorCode.BUDGET_EXCEEDED,
                f"the WorkItem's {dim} would reach {total} of {own[dim]}",
                dimension=dim,
                limit=own[dim],
                total=total,
            )
    mission = Mission.objects.get(id=item.mission_id)  # guarded by the Group lock
    caps = _limits(mission.budgets or {})
    spent = {
        dim: mission.usage.get(dim, 0) + delta.get(dim, 0)
        for dim in LIMITS
        if mission.usage.get(dim, 0) + delta.get(dim, 0)
    }
    for dim, total in spent.items():
        if dim in caps and total > caps[dim]:
            raise refuse(
                ErrorCode.BUDGET_EXCEEDED,
                f"the Mission's {dim} would reach {total} of {caps[dim]}",
                dimension=dim,
                limit=caps[dim],
                total=total,
            )
    item.usage = totals
    Mission.objects.filter(id=mission.id).update(usage=spent)
    remaining: dict[str, int] = {}
    for dim in LIMITS:
        left = [own[dim] - totals.get(dim, 0)] if dim in own else []
        left += [caps[dim] - spent.get(dim, 0)] if dim in caps else []
        if left:
            remaining[dim] = int(min(left))
    return {"cumulativeUsage": dict(totals), "remainingBudget": remaining}


def usage_recorded(
    item: WorkItem, lease_id: str, delta: dict[str, int], charged: dict[str, Any], offline: dict[str, Any] | None = None
) -> Emit:
    """The ``...resource_usage_recorded`` Event of a charge (``offline``: its reconciliation, §11.5)."""
    payload = {
        "workItemId": urn(item.id),
        "executionLeaseId": urn(lease_id),
        "ownershipEpoch": item.ownership_epoch,
        "usageDelta": {dim: value for dim, value in delta.items() if value},
        **charged,
    }
    if offline is not None:
        payload["offlineReconciliation"] = offline
    return emit("ext.missionweaveprotocol.core.resource_usage_recorded", item, payload)


# --- dependencies (§10.4) ---------------------------------------------------------


_SATISFIED = {
    "verified": {sm.VERIFIED},
    "submitted": {sm.SUBMITTED, sm.VERIFIED},
    "terminal": {sm.VERIFIED, sm.FAILED, sm.CANCELLED},
}


def unmet_dependencies(item: WorkItem) -> list[str]:
    """Dependencies (``urn:uuid:``) whose policy does not hold yet (§10.4)."""
    if not item.contract["dependencyWorkItemIds"]:
        return []  # the contract names the edges; none, no query
    return [
        urn(dep.depends_on_id)
        for dep in WorkDependency.objects.filter(workitem=item).select_related("depends_on")
        if dep.depends_on.state not in _SATISFIED[dep.policy]
    ]


def set_dependencies(
    item: WorkItem, contract: dict[str, Any], mission_id: Any, field: str = "/payload/contract"
) -> None:
    """Replace the WorkItem's edges in the Mission DAG; a cycle is
    INVALID_COMMAND, reason ``dependency_cycle`` (§10.4)."""
    policy = dependency_policy(contract)
    wanted = [bare(d, f"{field}/dependencyWorkItemIds/{i}") for i, d in enumerate(contract["dependencyWorkItemIds"])]
    if str(item.id) in wanted:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "a WorkItem cannot depend on itself",
            workItemId=urn(item.id),
            reason="dependency_cycle",
        )
    known = {str(i) for i in WorkItem.objects.filter(mission_id=mission_id, id__in=wanted).values_list("id", flat=True)}
    for i, dep in enumerate(wanted):
        if dep not in known:
            where = f"{field}/dependencyWorkItemIds/{i}"
            raise refuse(
                ErrorCode.INVALID_COMMAND,
                f"{where}: no WorkItem {urn(dep)} in this Mission",
                field=where,
                reason="contract_invalid",
            )
    # Cycle check: walk the existing edges from each new dependency; reaching
    # this WorkItem again closes a cycle.
    edges: dict[str, set[str]] = {}
    for src, dst in WorkDependency.objects.filter(workitem__mission_id=mission_id).values_list(
        "workitem_id", "depends_on_id"
    ):
        edges.setdefault(str(src), set()).add(str(dst))
    edges[str(item.id)] = set(wanted)
    stack, seen = list(wanted), set()
    while stack:
        node = stack.pop()
        if node == str(item.id):
            raise refuse(
                ErrorCode.INVALID_COMMAND,
                "the dependencies would form a cycle",
                workItemId=urn(item.id),
                reason="dependency_cycle",
            )
        if node not in seen:
            seen.add(node)
            stack.extend(edges.get(node, ()))
    WorkDependency.objects.filter(workitem=item).delete()
    WorkDependency.objects.bulk_create(
        [WorkDependency(workitem=item, depends_on_id=dep, policy=policy) for dep in dict.fromkeys(wanted)]
    )


# --- ending and retrying -------------------------------------------------------------


def end_item(item: WorkItem, state: str, now: datetime, reason: str) -> None:
    """Fail or cancel: revoke the lease, withdraw offers, return control to the Coordinator."""
    end_lease(active_lease(item), "revoked", reason, now)
    withdraw_offers(item, now)
    item.state = state
    item.owner, item.owner_expires_at, item.start_by = None, None, None
    # A failed or cancelled WorkItem no longer waits for a child Mission; a
    # later outcome of that child finds no link and changes nothing here.
    item.child_mission = None
    # Nor for a retry the policy scheduled (``schedule_retry`` sets it anew).
    item.retry_not_before = None


def _duration(text: str) -> timedelta:
    """An ISO 8601 duration of the kernel's ``duration`` pattern (days to seconds)."""
    days, _, clock = text[1:].partition("T")
    total = float(days[:-1]) * 86400 if days else 0.0
    number = ""
    for ch in clock:
        if ch.isdigit() or ch == ".":
            number += ch
            continue
        total += float(number) * {"H": 3600, "M": 60, "S": 1}[ch]
        number = ""
    return timedelta(seconds=total)


def backoff(item: WorkItem) -> timedelta:
    """The wait before the next attempt (``retryPolicy``): none; fixed at ``maxDelay``;
    or exponential, doubling each attempt up to ``maxDelay`` at the last retry."""
    policy = item.contract["retryPolicy"]
    longest = _duration(policy["maxDelay"])
    if policy["backoff"] == "none":
        return timedelta(0)
    if policy["backoff"] == "fixed":
        return longest
    halvings: int = max(int(policy["maxAttempts"]) - 1 - item.attempt, 0)
    wait: timedelta = longest / 2**halvings
    return wait


def check_retry_allowed(item: WorkItem, now: datetime) -> None:
    """A new attempt stays within the contract's attempts, deadline and cost (§11.4)."""
    policy = item.contract["retryPolicy"]
    if item.attempt >= policy["maxAttempts"]:
        raise refuse(ErrorCode.BUDGET_EXCEEDED, f"all {policy['maxAttempts']} attempts are used", dimension="attempts")
    if moment(item.contract["deadline"]) <= now:
        raise refuse(ErrorCode.BUDGET_EXCEEDED, "the contract's deadline has passed", dimension="deadline")
    for dim, limit in _limits(item.contract["budget"]).items():
        if item.usage.get(dim, 0) >= limit:
            raise refuse(ErrorCode.BUDGET_EXCEEDED, f"the WorkItem's {dim} budget is spent", dimension=dim)


# --- automatic retries (§11.4): failed -> work.offer by the retry policy ---------------
#
# The table has no failed-attempt row of its own: a failed attempt is the
# ``work.fail`` row (-> ``failed``), or a timed-out Execution Lease that leaves
# the WorkItem ``active`` without a lease; the next attempt is the ``work.offer``
# row from there, issued by the Organization's control plane for its retry
# policy once the contract's backoff has passed (``workitems.tasks.retry_failed``),
# to the Worker whose attempt failed; that Worker accepts and starts again.


def schedule_retry(item: WorkItem, now: datetime) -> str | None:
    """After a retryable failed attempt (the item is already ``failed``): schedule the
    policy's re-offer after the backoff; or, when the contract allows no further
    attempt, why not (the failure stands: §11.4 exhaustion)."""
    try:
        check_retry_allowed(item, now)
    except ProtocolError as exhausted:
        return exhausted.message
    item.needs_new_attempt = True
    item.retry_not_before = now + backoff(item)
    return None


def last_holder(item: WorkItem) -> str | None:
    """The Agent whose Execution Lease was the WorkItem's latest (bare UUID)."""
    lease = ExecutionLease.objects.filter(workitem=item).order_by("-started_at").values_list("agent_id", flat=True)
    holder = lease.first()
    return None if holder is None else str(holder)


def check_retry_offer(ctx: HandlerContext, item: WorkItem) -> None:
    """A ``work.offer`` by the Organization's control plane is its retry policy's
    re-offer (§11.4): of a WorkItem with a scheduled retry (``failed``, or ``active``
    after its Execution Lease timed out and the owner's grace ran out), after the
    backoff, within the contract's attempts, deadline and budget, to the Worker
    whose attempt failed, under the contract it accepted. Nothing else."""
    retried = item.state == sm.FAILED or (item.state == sm.ACTIVE and active_lease(item) is None)
    if not retried or item.retry_not_before is None or not item.needs_new_attempt:
        raise refuse(ErrorCode.AUTH_FORBIDDEN, "the control plane offers only a WorkItem its retry policy retries")
    if item.retry_not_before > ctx.now:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            f"backing off until {when(item.retry_not_before)} before the next attempt",
            retryNotBefore=when(item.retry_not_before),
        )
    check_retry_allowed(item, ctx.now)
    holder = last_holder(item)
    named = [bare(a, f"/payload/candidateAgentIds/{i}") for i, a in enumerate(ctx.payload["candidateAgentIds"])]
    if holder is None or named != [holder] or ctx.payload.get("contract") is not None:
        raise refuse(
            ErrorCode.AUTH_FORBIDDEN,
            "a retry re-offers the same contract to the Worker whose attempt failed",
            field="/payload/candidateAgentIds",
        )
