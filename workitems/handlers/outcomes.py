"""Child Missions and Mission outcomes (spec 10.2 last rows), and the WorkItems in a Group snapshot."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import F, Prefetch

from missions.authority import (
    AggregateRef,
    Decision,
    Emit,
    GroupHead,
    HandlerContext,
)
from missions.guards import check_members, check_text, check_uuid, refuse
from missions.handlers import check_mission_budgets, found_mission
from missions.models import Approval, Mission
from missions.registry import command, snapshot_contributors
from mwportal.protocol import GENESIS_HASH, ErrorCode, format_time, malformed

from .. import state_machine as sm
from ..contract import criteria_ids
from ..models import Checkpoint, ExecutionLease, Offer, WorkItem
from .common import (
    COORDINATING,
    active_lease,
    end_item,
    end_lease,
    item_ref,
    load_item,
    save,
    system_evidence,
    withdraw_offers,
)

# --- Missions: child Missions and terminal states (spec 10.2 last rows) ---------


@command("mission.create_child", group_roles=COORDINATING, cas=True)
def create_child(ctx: HandlerContext) -> Decision:
    """Run a WorkItem as a linked child Mission in a new Group. The WorkItem is
    ``blocked`` with ownership fenced while the child runs; the child's final
    Approval verifies it, its failure follows ``failure_policy``
    (``fail_parent`` or ``keep_blocked``)."""
    body = ctx.body
    check_members(body, ["mission", "group", "title", "objective", "failure_policy"], ["budgets"])
    if body["failure_policy"] not in ("fail_parent", "keep_blocked"):
        raise malformed("body.failure_policy", "must be fail_parent or keep_blocked")
    item = load_item(ctx)
    sm.check_transition(item.state, "mission.create_child")
    mission_id, group_id = check_uuid(body, "mission"), check_uuid(body, "group")
    end_lease(active_lease(item), "revoked", "child mission", ctx.now)
    withdraw_offers(item, ctx.now)
    item.owner, item.owner_expires_at, item.start_by = None, None, None
    item.state = sm.BLOCKED
    child_events = found_mission(
        group_id=group_id, mission_id=mission_id, org_id=ctx.group.organization_id,
        title=check_text(body, "title", max_length=300), objective=check_text(body, "objective", max_length=20_000),
        owner_id=ctx.actor.id, now=ctx.now, budgets=check_mission_budgets(body),
        parent={"group": ctx.group.id, "workitem": str(item.id)},
    )  # fmt: skip
    item.child_mission_id = mission_id
    item.child_failure_policy = body["failure_policy"]
    save(item, ctx.now)
    child_head = GroupHead(group_id, ctx.group.organization_id, "mission", 0, GENESIS_HASH, 1)
    parent_body = {"child_mission": mission_id, "child_group": group_id, "failure_policy": body["failure_policy"]}
    return Decision(
        [Emit("mission.child_created", item_ref(item), parent_body)], item_ref(item), also=[(child_head, child_events)]
    )


def _mission_for(ctx: HandlerContext) -> Mission:
    mission = Mission.objects.get(group_id=ctx.group.id)
    if mission.status != "active":
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"the Mission is already {mission.status}")
    return mission


def _propagate_to_items(ctx: HandlerContext, transition: str, state: str, cause: str) -> list[Emit]:
    """A terminal Mission state reaches every unfinished WorkItem (spec 10.2)."""
    events = []
    for item in WorkItem.objects.select_for_update().filter(group_id=ctx.group.id, state__in=sm.UNFINISHED):
        sm.check_transition(item.state, transition)
        end_item(item, state, ctx.now, cause)
        save(item, ctx.now)
        kind = "work.failed" if state == sm.FAILED else "work.cancelled"
        body: dict[str, Any] = {"reason": cause}
        if state == sm.FAILED:
            body["evidence"] = [system_evidence(ctx, item, cause)]
        events.append(Emit(kind, item_ref(item), body))
    return events


def _to_parent(ctx: HandlerContext, mission: Mission, outcome: str) -> list[tuple[GroupHead, list[Emit]]]:
    """Propagate a child Mission's approval or failure to its parent WorkItem."""
    if mission.parent_group_id is None or mission.parent_workitem_id is None:
        return []
    head = ctx.lock_other_group(str(mission.parent_group_id))
    item = WorkItem.objects.select_for_update().filter(id=mission.parent_workitem_id).first()
    if item is None or item.state != sm.BLOCKED or str(item.child_mission_id) != str(mission.id):
        return [(head, [])]
    if outcome == "approved":
        sm.check_transition(item.state, "child.approved", sm.VERIFIED)
        item.state = sm.VERIFIED
        evidence = [
            {
                "subject": str(item.id),
                "criteria": criteria_ids(item.contract),
                "method": "human",
                "result": "pass",
                "producer": ctx.actor.id,
                "timestamp": format_time(ctx.now),
                "artifacts": [],
                "summary": f"child Mission {mission.id} received final Approval",
            }
        ]
        save(item, ctx.now)
        return [
            (
                head,
                [Emit("work.child_approved", item_ref(item), {"child_mission": str(mission.id), "evidence": evidence})],
            )
        ]
    to = sm.FAILED if item.child_failure_policy == "fail_parent" else sm.BLOCKED
    sm.check_transition(item.state, "child.failed", to)
    body: dict[str, Any] = {"child_mission": str(mission.id), "outcome": outcome, "state": to}
    if to == sm.FAILED:
        end_item(item, sm.FAILED, ctx.now, f"child mission {outcome}")
        body["evidence"] = [system_evidence(ctx, item, f"child Mission {mission.id} {outcome}")]
    else:
        item.child_mission = None  # the Coordinator may now unblock or reassign
    save(item, ctx.now)
    return [(head, [Emit("work.child_failed", item_ref(item), body)])]


def _close_mission(
    ctx: HandlerContext, mission: Mission, status: str, event: str, body: dict[str, Any], item_events: list[Emit]
) -> Decision:
    """Set the Mission's terminal status (a Group revision change) and
    propagate to its parent WorkItem, if it is a child Mission."""
    Mission.objects.filter(id=mission.id).update(status=status)
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision + 1)
    outcome = {"completed": "approved", "failed": "failed", "cancelled": "cancelled"}[status]
    return Decision(
        [*item_events, Emit(event, ref, {"mission": str(mission.id), **body})],
        ref,
        also=_to_parent(ctx, mission, outcome),
    )


@command("mission.approve", group_roles=("owner",), target="group", cas=True)
def approve_mission(ctx: HandlerContext) -> Decision:
    """Final Approval of the Mission by its owner; every WorkItem must be finished."""
    check_members(ctx.body, [], ["note"])
    mission = _mission_for(ctx)
    unfinished = WorkItem.objects.filter(group_id=ctx.group.id, state__in=sm.UNFINISHED).count()
    if unfinished:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION, f"{unfinished} WorkItems are unfinished", unfinished=unfinished
        )
    note = ctx.body.get("note") or ""
    Approval.objects.create(
        group_id=ctx.group.id,
        kind=Approval.KIND_FINAL,
        subject_kind="mission",
        subject_id=str(mission.id),
        subject_revision=ctx.group.revision,
        granted_by_id=ctx.actor.id,
        note=str(note)[:2000],
        granted_at=ctx.now,
    )
    return _close_mission(ctx, mission, "completed", "mission.approved", {"note": str(note)[:2000]}, [])


@command("mission.fail", group_roles=("owner",), target="group", cas=True)
def fail_mission(ctx: HandlerContext) -> Decision:
    check_members(ctx.body, ["reason"])
    reason = check_text(ctx.body, "reason", max_length=2000)
    mission = _mission_for(ctx)
    events = _propagate_to_items(ctx, "parent.failed", sm.FAILED, f"mission failed: {reason}")
    return _close_mission(ctx, mission, "failed", "mission.failed", {"reason": reason}, events)


@command("mission.cancel", group_roles=("owner",), target="group", cas=True)
def cancel_mission(ctx: HandlerContext) -> Decision:
    check_members(ctx.body, ["reason"])
    reason = check_text(ctx.body, "reason", max_length=2000)
    mission = _mission_for(ctx)
    events = _propagate_to_items(ctx, "parent.cancelled", sm.CANCELLED, f"mission cancelled: {reason}")
    return _close_mission(ctx, mission, "cancelled", "mission.cancelled", {"reason": reason}, events)


def _when(value: datetime | None) -> str | None:
    return format_time(value) if value is not None else None


def _item_state(item: WorkItem) -> dict[str, Any]:
    """One WorkItem as a snapshot carries it: the state, and every timer,
    lease, open offer and the latest checkpoint a Worker needs to go on from
    the snapshot alone (a restored owner renews its lease, an offered Worker
    still sees its offer, a new owner resumes from the checkpoint; spec 16)."""
    # The prefetches of snapshot_workitems hold only the active lease, the
    # open offers and the latest checkpoint.
    lease = next(iter(item.leases.all()), None)
    latest = next(iter(item.checkpoints.all()), None)
    return {
        "id": str(item.id), "state": item.state, "revision": item.revision, "contract": item.contract,
        "contract_revision": item.contract_revision, "accepted_contract_revision": item.accepted_contract_revision,
        "owner": str(item.owner_id) if item.owner_id else None, "ownership_epoch": item.ownership_epoch,
        "start_by": _when(item.start_by), "owner_expires_at": _when(item.owner_expires_at),
        "approved_contract_revision": item.approved_contract_revision, "attempt": item.attempt,
        "needs_new_attempt": item.needs_new_attempt, "retry_not_before": _when(item.retry_not_before),
        "usage": item.usage, "checkpoint_count": item.checkpoint_count,
        "dependencies": sorted(
            ({"workitem": str(d.depends_on_id), "policy": d.policy} for d in item.dependencies.all()),
            key=lambda d: d["workitem"],
        ),
        # The Lease ID and its holder are in the work.started Event already;
        # the capability token is never in the log.
        "lease": {
            "lease_id": str(lease.id), "agent": str(lease.agent_id), "session_epoch": lease.session_epoch,
            "ownership_epoch": lease.ownership_epoch, "expires_at": format_time(lease.expires_at),
        } if lease else None,
        "offers": sorted(
            ({"agent": str(o.agent_id), "expires_at": format_time(o.expires_at)}
             for o in item.offers.all()),
            key=lambda o: o["agent"],
        ),
        "latest_checkpoint": {
            "number": latest.number, "ownership_epoch": latest.ownership_epoch, "lease_id": str(latest.lease_id),
            "state": latest.state, "progress": latest.progress, "created_at": format_time(latest.created_at),
        } if latest else None,
        "child_mission": str(item.child_mission_id) if item.child_mission_id else None,
        "child_failure_policy": item.child_failure_policy or None,
    }  # fmt: skip


def snapshot_workitems(group_id: str) -> tuple[str, Any]:
    """The WorkItems of a Group as its snapshot carries them (what a Worker's
    per-Group queue needs to restore)."""
    rows = (
        WorkItem.objects.filter(group_id=group_id)
        .prefetch_related(
            "dependencies",
            Prefetch("leases", queryset=ExecutionLease.objects.filter(status="active")),
            Prefetch("offers", queryset=Offer.objects.filter(status="open")),
            # Only the latest checkpoint: its number is the item's count.
            Prefetch("checkpoints", queryset=Checkpoint.objects.filter(number=F("workitem__checkpoint_count"))),
        )
        .order_by("id")
    )
    return "workitems", [_item_state(item) for item in rows]


snapshot_contributors.append(snapshot_workitems)
