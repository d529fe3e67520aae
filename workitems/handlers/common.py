"""What every WorkItem handler shares (spec 10, 11.3-11.5; DESIGN §4a).

Every handler runs inside ``accept()`` with the Group row locked, then locks
the WorkItem row (Group first, then the aggregate: the one lock order of the
write path). Each begins with ``check_transition()`` against the table in
``state_machine.py`` (then lease-bound Commands check their fencing), then its
``check_*`` guards, then writes the rows and returns the Events.

Timing (DESIGN §6 settings): an owner must start within
``MWP_START_BY_SECONDS`` of acceptance or of a checkpoint; an Execution Lease
lasts ``MWP_LEASE_SECONDS`` unless renewed; a blocked owner keeps ownership
for ``MWP_BLOCKED_LEASE_SECONDS``.

Here: loading and saving the WorkItem, lease fencing, usage charges and
dependencies.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from missions.authority import (
    AggregateRef,
    HandlerContext,
    check_revision,
    check_target_kind,
)
from missions.guards import refuse
from missions.models import Mission
from mwportal.protocol import ErrorCode, format_time, malformed, parse_time

from .. import state_machine as sm
from ..contract import criteria_ids
from ..models import BUDGET_DIMENSIONS, ExecutionLease, Offer, WorkDependency, WorkItem

COORDINATING = ("coordinator", "owner")
# Who executes under offers and leases: workers, and reviewers for the review
# WorkItems the review pipeline offers them (spec 13.2). The offer is the gate.
EXECUTING = ("worker", "reviewer")


# --- shared pieces -------------------------------------------------------------


def seconds(name: str) -> timedelta:
    return timedelta(seconds=getattr(settings, name))


def item_ref(item: WorkItem) -> AggregateRef:
    return AggregateRef("workitem", str(item.id), item.revision)


def load_item(ctx: HandlerContext) -> WorkItem:
    """The target WorkItem, locked (after the Group row: the write path's lock order)."""
    env = ctx.envelope
    if env.target is None:
        raise malformed("target", f"{env.type} needs a workitem target")
    check_target_kind(env, "workitem")
    assert env.target is not None
    try:
        item = WorkItem.objects.select_for_update().get(id=env.target.id, group_id=ctx.group.id)
    except WorkItem.DoesNotExist:
        item = None
    if item is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"no WorkItem {env.target.id} in this Group",
            workitem=env.target.id,
            reason="not_found",
        )
    check_revision(env, item.revision)
    return item


# Every column a handler may change, except the contract: the Work Contract
# is the largest value of the row and changes only in work.offer.
_MUTABLE = [
    f.attname for f in WorkItem._meta.concrete_fields
    if f.name not in ("id", "group", "mission", "proposal", "contract", "created_at")
]  # fmt: skip


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
    offers = Offer.objects.filter(workitem=item, status="open")
    if except_agent is not None:
        offers = offers.exclude(agent_id=except_agent)
    withdrawn = sorted(str(a) for a in offers.values_list("agent_id", flat=True))
    offers.update(status="withdrawn", closed_at=now)
    return withdrawn


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_role(ctx: HandlerContext, roles: tuple[str, ...]) -> None:
    held = ctx.actor.membership_roles or frozenset()
    if not held & set(roles):
        raise refuse(ErrorCode.AUTH_FORBIDDEN, f"{ctx.envelope.type} needs the Group role {' or '.join(roles)}")


def check_lease(ctx: HandlerContext, item: WorkItem) -> ExecutionLease:
    """Fencing of lease-bound Commands (spec 11.3; MWP-WRK-013).

    The envelope must name the current Lease ID of an active lease held by the
    actor; an older Lease ID is WORK_LEASE_EXPIRED (reason ``stale_lease``)
    even under the same Ownership Epoch, a changed Ownership Epoch is
    WORK_STALE_OWNERSHIP, an elapsed lease is WORK_LEASE_EXPIRED (reason
    ``lease_expired``).
    """
    env = ctx.envelope
    if env.lease_id is None:
        raise malformed("lease_id", f"{env.type} must name the current Execution Lease")
    if env.ownership_epoch is not None and env.ownership_epoch != item.ownership_epoch:
        raise refuse(
            ErrorCode.WORK_STALE_OWNERSHIP,
            f"ownership_epoch {env.ownership_epoch} is not current ({item.ownership_epoch})",
            current=item.ownership_epoch,
        )
    lease = active_lease(item)
    if lease is None or str(lease.id) != env.lease_id or str(lease.agent_id) != ctx.actor.id:
        raise refuse(
            ErrorCode.WORK_LEASE_EXPIRED,
            f"lease {env.lease_id} is not the current Execution Lease",
            lease_id=env.lease_id,
            reason="stale_lease",
        )
    if lease.expires_at <= ctx.now:
        raise refuse(
            ErrorCode.WORK_LEASE_EXPIRED,
            f"lease {env.lease_id} expired at {format_time(lease.expires_at)}",
            reason="lease_expired",
        )
    return lease


def charge_usage(ctx: HandlerContext, item: WorkItem, usage: dict[str, float]) -> dict[str, Any]:
    """Record a usage delta against the WorkItem and its Mission (spec 11.4).

    An overflow of either budget is BUDGET_EXCEEDED, raised before anything is
    written, so the charge and the Command fail together.
    """
    if not usage:
        return {}
    budgets = item.contract["budgets"]
    new_item = {dim: item.usage.get(dim, 0) + usage.get(dim, 0) for dim in BUDGET_DIMENSIONS if
                item.usage.get(dim, 0) + usage.get(dim, 0)}  # fmt: skip
    for dim, total in new_item.items():
        limit = budgets.get(dim)
        if limit is not None and total > limit:
            raise refuse(
                ErrorCode.BUDGET_EXCEEDED,
                f"WorkItem budget {dim} would reach {total} of {limit}",
                dimension=dim,
                limit=limit,
                total=total,
            )
    mission = Mission.objects.get(id=item.mission_id)  # guarded by the Group lock
    new_mission = dict(mission.usage)
    for dim, value in usage.items():
        new_mission[dim] = new_mission.get(dim, 0) + value
        limit = mission.budgets.get(dim)
        if limit is not None and new_mission[dim] > limit:
            raise refuse(
                ErrorCode.BUDGET_EXCEEDED,
                f"Mission budget {dim} would reach {new_mission[dim]} of {limit}",
                dimension=dim,
                limit=limit,
                total=new_mission[dim],
            )
    item.usage = new_item
    Mission.objects.filter(id=mission.id).update(usage=new_mission)
    return {"delta": usage, "workitem_total": new_item}


def unmet_dependencies(item: WorkItem) -> list[str]:
    """Dependencies whose policy does not hold yet (spec 10.4)."""
    if not item.contract["dependencies"]:
        return []  # the contract names the edges; none, no query
    satisfied = {
        "verified": {sm.VERIFIED},
        "submitted": {sm.SUBMITTED, sm.VERIFIED},
        "terminal": {sm.VERIFIED, sm.FAILED, sm.CANCELLED},
    }
    return [
        str(dep.depends_on_id)
        for dep in WorkDependency.objects.filter(workitem=item).select_related("depends_on")
        if dep.depends_on.state not in satisfied[dep.policy]
    ]


def set_dependencies(item: WorkItem, contract: dict[str, Any], mission_id: Any) -> None:
    """Replace the WorkItem's edges in the Mission DAG; a cycle is
    INVALID_COMMAND, reason ``dependency_cycle`` (spec 10.4)."""
    wanted = {d["workitem"]: d["policy"] for d in contract["dependencies"]}
    if str(item.id) in wanted:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "a WorkItem cannot depend on itself",
            workitem=str(item.id),
            reason="dependency_cycle",
        )
    known = set(
        str(i) for i in WorkItem.objects.filter(mission_id=mission_id, id__in=list(wanted)).values_list("id", flat=True)
    )
    for i, dep in enumerate(contract["dependencies"]):
        if dep["workitem"] not in known:
            field = f"contract.dependencies.{i}.workitem"
            raise refuse(
                ErrorCode.INVALID_COMMAND,
                f"{field}: no WorkItem {dep['workitem']} in this Mission",
                field=field,
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
                workitem=str(item.id),
                reason="dependency_cycle",
            )
        if node not in seen:
            seen.add(node)
            stack.extend(edges.get(node, ()))
    WorkDependency.objects.filter(workitem=item).delete()
    WorkDependency.objects.bulk_create(
        [WorkDependency(workitem=item, depends_on_id=dep, policy=policy) for dep, policy in wanted.items()]
    )


def end_item(item: WorkItem, state: str, now: datetime, reason: str) -> None:
    """Fail or cancel: revoke the lease, withdraw offers, return control to the Coordinator."""
    end_lease(active_lease(item), "revoked", reason, now)
    withdraw_offers(item, now)
    item.state = state
    item.owner, item.owner_expires_at, item.start_by = None, None, None
    # A failed or cancelled WorkItem no longer waits for a child Mission; a
    # later outcome of that child finds no link and changes nothing here.
    item.child_mission = None


def backoff(item: WorkItem) -> timedelta:
    retry = item.contract["retry"]
    return timedelta(seconds=retry["backoff_seconds"] * retry["backoff_multiplier"] ** max(item.attempt - 1, 0))


def check_retry_allowed(item: WorkItem, now: datetime) -> None:
    """A new attempt stays within the contract's attempts, deadline and cost (spec 11.4)."""
    retry = item.contract["retry"]
    if item.attempt >= retry["max_attempts"]:
        raise refuse(ErrorCode.BUDGET_EXCEEDED, f"all {retry['max_attempts']} attempts are used", dimension="attempts")
    if retry["deadline"] is not None and parse_time(retry["deadline"], "retry.deadline") <= now:
        raise refuse(ErrorCode.BUDGET_EXCEEDED, "the retry deadline has passed", dimension="retry_deadline")
    if retry["max_cost"] is not None and item.usage.get("financial", 0) >= retry["max_cost"]:
        raise refuse(ErrorCode.BUDGET_EXCEEDED, "the retry cost limit is reached", dimension="max_cost")


def system_evidence(ctx: HandlerContext, item: WorkItem, summary: str) -> dict[str, Any]:
    return {
        "subject": str(item.id),
        "criteria": criteria_ids(item.contract),
        "method": "other",
        "result": "fail",
        "producer": str(item.owner_id or item.group_id),
        "timestamp": format_time(ctx.now),
        "artifacts": [],
        "summary": summary,
    }
