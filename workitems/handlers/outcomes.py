"""Child Missions and Mission outcomes (PROTOCOL §7.3, §10.2 last rows, §14).

``mission.create_child`` promotes a WorkItem to a linked child Mission in a new
Group: the WorkItem blocks with its ownership fenced while the child runs. The
child's final Approval verifies it (the Approval becomes the parent WorkItem's
Evidence); its termination or cancellation follows the declared
``failurePolicy``. ``mission.approve``, ``mission.cancel`` and
``mission.terminate`` end a Mission; a terminal Mission state reaches every
unfinished WorkItem (§10.2).
"""

from __future__ import annotations

import uuid
from typing import Any

from missions.authority import AggregateRef, Decision, Emit, GroupHead, HandlerContext, check_revision
from missions.handlers.missions import coordinator_of, found_mission, mission_terms
from missions.models import Agent, AgentCard, Approval, GroupEvent, Mission
from missions.registry import command
from mwportal.protocol import GENESIS_HASH, ErrorCode
from mwportal.protocol.ids import bare, urn

from .. import state_machine as sm
from ..content import content
from ..documents import POLICY_VERSION, actor_of, authority_signed
from ..evidence import authority_evidence
from ..models import WorkItem
from ..wire import refuse, when
from .common import active_lease, emit, end_item, end_lease, item_ref, save, withdraw_offers

# The declared child-failure policies (§14) as the WorkItem row keeps them.
POLICIES = {
    "block_parent_work_item": "keep_blocked",
    "fail_parent_work_item": "fail_parent",
    "fail_parent_mission": "fail_mission",
}


def _mission_ref(ctx: HandlerContext) -> AggregateRef:
    """A Mission status change is a Group revision change."""
    return AggregateRef("group", ctx.group.id, ctx.group.revision + 1)


def _depth(mission: Mission) -> int:
    depth, parent = 1, mission.parent_group_id
    while parent is not None:
        depth += 1
        parent = Mission.objects.filter(group_id=parent).values_list("parent_group_id", flat=True).first()
    return depth


@command("mission.create_child", group_roles=("coordinator",))
def create_child(ctx: HandlerContext) -> Decision:
    """Run a WorkItem as a linked child Mission in a new Group (§14). The WorkItem
    is ``blocked`` with ownership fenced while the child runs; the parent
    Coordinator is the child's MissionOwner. ``expectedRevision`` is the parent
    WorkItem's revision."""
    p = ctx.payload
    item = (
        WorkItem.objects.select_for_update()
        .filter(id=bare(p["parentWorkItemId"], "/payload/parentWorkItemId"), group_id=ctx.group.id)
        .first()
    )
    if item is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/parentWorkItemId: no such WorkItem in this Group",
            field="/payload/parentWorkItemId",
            reason="not_found",
        )
    check_revision(ctx.command, item.revision)
    sm.check_transition(item.state, "mission.create_child")
    mission_id, group_id = bare(p["missionId"], "/payload/missionId"), bare(p["groupId"], "/payload/groupId")
    parent_mission = Mission.objects.get(id=item.mission_id)
    terms = mission_terms(p, ctx.now)
    owner = Agent.objects.get(id=ctx.actor.id)
    if p.get("coordinatorAgentId") is None and p.get("coordinatorId") is None:
        coordinator = owner
        version = AgentCard.objects.filter(agent=owner).order_by("-version").values_list("version", flat=True).first()
        card_version = int(version or 1)
    else:
        coordinator, card_version = coordinator_of(str(ctx.group.organization_id), p)
    end_lease(active_lease(item), "revoked", "child mission", ctx.now)
    withdraw_offers(item, ctx.now)
    item.owner, item.owner_expires_at, item.start_by = None, None, None
    item.state = sm.BLOCKED
    child_events = found_mission(
        group_id=group_id,
        mission_id=mission_id,
        organization_id=str(ctx.group.organization_id),
        owner=owner,
        coordinator=coordinator,
        card_version=card_version,
        terms=terms,
        now=ctx.now,
        parent={
            "missionId": str(parent_mission.id),
            "workItemId": str(item.id),
            "depth": _depth(parent_mission),
            "groupId": ctx.group.id,
        },
    )
    item.child_mission_id = uuid.UUID(mission_id)
    item.child_failure_policy = POLICIES[p.get("failurePolicy") or "block_parent_work_item"]
    save(item, ctx.now)
    child_head = GroupHead(group_id, str(ctx.group.organization_id), "mission", 0, GENESIS_HASH, 1)
    created = {
        "parentMissionId": urn(parent_mission.id),
        "parentWorkItemId": urn(item.id),
        "childMissionId": urn(mission_id),
        "childGroupId": urn(group_id),
    }
    blocked = {
        "workItemId": urn(item.id),
        "reason": f"waits for its child Mission {urn(mission_id)}",
        "childMissionId": urn(mission_id),
    }
    return Decision(
        [emit("mission.child.created", item, created), emit("work.blocked", item, blocked)],
        item_ref(item),
        also=[(child_head, child_events)],
    )


def _active_mission(ctx: HandlerContext) -> Mission:
    check_revision(ctx.command, ctx.group.revision)
    mission = Mission.objects.get(group_id=ctx.group.id)
    if mission.status != "active":
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"the Mission is already {mission.status}")
    return mission


def _propagate(ctx: HandlerContext, transition: str, state: str, cause: str) -> list[Emit]:
    """A terminal Mission state reaches every unfinished WorkItem (§10.2, last row)."""
    events: list[Emit] = []
    for item in WorkItem.objects.select_for_update().filter(group_id=ctx.group.id, state__in=sm.UNFINISHED):
        sm.check_transition(item.state, transition)
        end_item(item, state, ctx.now, cause)
        save(item, ctx.now)
        payload: dict[str, Any] = {"workItemId": urn(item.id), "reason": cause}
        if state == sm.FAILED:
            payload["evidence"] = [authority_evidence(ctx, item, cause, passed=False)]
            content().record_evidence(ctx, item, payload["evidence"], "failure", position=len(events))
        events.append(emit("work.failed" if state == sm.FAILED else "work.cancelled", item, payload))
    return events


def _to_parent(ctx: HandlerContext, mission: Mission, approved: bool) -> list[tuple[GroupHead, list[Emit]]]:
    """A child Mission's approval or failure reaches its parent WorkItem (§14)."""
    if mission.parent_group_id is None or mission.parent_workitem_id is None:
        return []
    head = ctx.lock_other_group(str(mission.parent_group_id))
    item = WorkItem.objects.select_for_update().filter(id=mission.parent_workitem_id).first()
    if item is None or item.state != sm.BLOCKED or str(item.child_mission_id) != str(mission.id):
        return [(head, [])]
    parent_ctx = HandlerContext(
        command=ctx.command,
        spec=ctx.spec,
        actor=ctx.actor,
        group=head,
        now=ctx.now,
        payload=ctx.payload,
        auth=ctx.auth,
    )
    if approved:
        sm.check_transition(item.state, "child.approved", sm.VERIFIED)
        item.state = sm.VERIFIED
        item.child_mission = None
        save(item, ctx.now)
        evidence = [
            authority_evidence(
                parent_ctx, item, f"child Mission {urn(mission.id)} received its final Approval", passed=True
            )
        ]
        content().record_evidence(parent_ctx, item, evidence, "coordinator")
        return [(head, [emit("work.result.accepted", item, {"workItemId": urn(item.id), "evidence": evidence})])]
    policy = item.child_failure_policy
    to = sm.BLOCKED if policy == "keep_blocked" else sm.FAILED
    sm.check_transition(item.state, "child.failed", to)
    reason = f"child Mission {urn(mission.id)} failed"
    if to == sm.BLOCKED:
        item.child_mission = None  # the Coordinator may now unblock or reassign
        save(item, ctx.now)
        blocked = {"workItemId": urn(item.id), "reason": reason, "childMissionId": urn(mission.id)}
        return [(head, [emit("work.blocked", item, blocked)])]
    end_item(item, sm.FAILED, ctx.now, reason)
    save(item, ctx.now)
    evidence = [authority_evidence(parent_ctx, item, reason, passed=False)]
    content().record_evidence(parent_ctx, item, evidence, "failure")
    failed = {"workItemId": urn(item.id), "reason": reason, "evidence": evidence, "childMissionId": urn(mission.id)}
    events = [emit("work.failed", item, failed)]
    if policy == "fail_mission":
        events += _terminate_parent(parent_ctx, head, reason)
    return [(head, events)]


def _terminate_parent(ctx: HandlerContext, head: GroupHead, reason: str) -> list[Emit]:
    """``fail_parent_mission``: the parent Mission terminates with its unfinished WorkItems."""
    parent = Mission.objects.filter(group_id=head.id, status="active").first()
    if parent is None:
        return []
    Mission.objects.filter(id=parent.id).update(status="failed")
    items = _propagate(ctx, "parent.failed", sm.FAILED, f"mission terminated: {reason}")
    ref = AggregateRef("group", head.id, head.revision + 1)
    return [*items, Emit("mission.terminated", ref, {"missionId": urn(parent.id), "reason": reason[:4000]})]


def _close(
    ctx: HandlerContext, mission: Mission, status: str, kind: str, payload: dict[str, Any], items: list[Emit]
) -> Decision:
    Mission.objects.filter(id=mission.id).update(status=status)
    ref = _mission_ref(ctx)
    return Decision([*items, Emit(kind, ref, payload)], ref, also=_to_parent(ctx, mission, status == "completed"))


_DECISIONS = ("mission.submitted_for_approval", "mission.approved", "mission.changes_requested")


def _submission(ctx: HandlerContext) -> dict[str, Any] | None:
    """The Mission revision and Artifact set awaiting a decision: the last
    ``mission.submitted_for_approval`` when no approval or change request followed it."""
    last = GroupEvent.objects.filter(group_id=ctx.group.id, type__in=_DECISIONS).order_by("-sequence").first()
    return last.body if last is not None and last.type == "mission.submitted_for_approval" else None


def _submitted(ctx: HandlerContext) -> dict[str, Any]:
    submitted = _submission(ctx)
    if submitted is None:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "the Coordinator has not submitted this Mission for Approval")
    if ctx.payload["missionRevision"] != submitted["missionRevision"]:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"/payload/missionRevision: revision {submitted['missionRevision']} is the one submitted",
            field="/payload/missionRevision",
        )
    return submitted


@command("mission.submit_for_approval", group_roles=("coordinator",), actors=("agent",))
def submit_for_approval(ctx: HandlerContext) -> Decision:
    """The Coordinator submits a Mission revision and its Artifact set (§7.3), once
    every WorkItem is finished; the MissionOwner approves or requests changes."""
    mission = _active_mission(ctx)
    revision = ctx.payload.get("missionRevision") or ctx.group.revision
    if revision != ctx.group.revision:
        raise refuse(
            ErrorCode.REVISION_CONFLICT, f"/payload/missionRevision: the Mission is at revision {ctx.group.revision}",
            field="/payload/missionRevision",
        )  # fmt: skip
    if _submission(ctx) is not None:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "this Mission already awaits its owner's decision")
    unfinished = WorkItem.objects.filter(group_id=ctx.group.id, state__in=sm.UNFINISHED).count()
    if unfinished:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION, f"{unfinished} WorkItems are unfinished", unfinished=unfinished
        )
    absent = content().absent_from_group(ctx.group.id, list(ctx.payload["artifactHashes"]))
    if absent:
        raise refuse(
            ErrorCode.INVALID_COMMAND, f"/payload/artifactHashes: not held by this Group: {', '.join(absent)}",
            field="/payload/artifactHashes", reason="not_found",
        )  # fmt: skip
    payload = {
        "missionId": urn(mission.id),
        "missionRevision": revision,
        "artifactHashes": ctx.payload["artifactHashes"],
    }
    ref = _mission_ref(ctx)
    return Decision([Emit("mission.submitted_for_approval", ref, payload)], ref)


@command("mission.request_changes", group_roles=("mission_owner",))
def request_changes(ctx: HandlerContext) -> Decision:
    """The MissionOwner reopens the submitted revision with feedback (§7.1, §7.3); the
    Coordinator revises or adds WorkItems, earlier submissions kept."""
    mission = _active_mission(ctx)
    _submitted(ctx)
    ref = _mission_ref(ctx)
    payload = {"missionId": urn(mission.id), "feedback": ctx.payload["feedback"], "newRevision": ref.revision}
    return Decision([Emit("mission.changes_requested", ref, payload)], ref)


@command("mission.approve", group_roles=("mission_owner",))
def approve_mission(ctx: HandlerContext) -> Decision:
    """The MissionOwner's final Approval (§7.3) of the submitted Mission revision and
    Artifact set; every WorkItem must be finished. A child Mission's approval
    verifies its parent WorkItem (§14)."""
    p = ctx.payload
    mission = _active_mission(ctx)
    submitted = _submitted(ctx)
    if sorted(p["artifactHashes"]) != sorted(submitted["artifactHashes"]):
        raise refuse(
            ErrorCode.INVALID_COMMAND, "/payload/artifactHashes: must be the submitted Artifact set",
            field="/payload/artifactHashes",
        )  # fmt: skip
    unfinished = WorkItem.objects.filter(group_id=ctx.group.id, state__in=sm.UNFINISHED).count()
    if unfinished:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION, f"{unfinished} WorkItems are unfinished", unfinished=unfinished
        )
    Approval.objects.create(
        group_id=ctx.group.id, kind=Approval.KIND_FINAL, subject_kind="mission", subject_id=str(mission.id),
        subject_revision=p["missionRevision"], granted_by_id=ctx.actor.id, note=(p.get("comments") or "")[:2000],
        granted_at=ctx.now,
    )  # fmt: skip
    approval = authority_signed("approval", {
        "approvalId": p["approvalId"], "kind": "child_mission" if mission.parent_group_id else "mission_final",
        "decision": "approved", "missionId": urn(mission.id), "groupId": urn(ctx.group.id),
        "missionRevision": p["missionRevision"], "artifactHashes": p["artifactHashes"],
        "acceptancePolicyVersion": p["acceptancePolicyVersion"] or POLICY_VERSION, "approver": actor_of(ctx),
        "comments": p.get("comments") or "", "conditions": list(p.get("conditions") or []), "occurredAt": when(ctx.now),
    }, ctx)  # fmt: skip
    return _close(ctx, mission, "completed", "mission.approved", {"approval": approval}, [])


@command("mission.cancel", group_roles=("mission_owner",), actors=("agent", "human", "service"))
def cancel_mission(ctx: HandlerContext) -> Decision:
    """Cancellation reaches every unfinished WorkItem (§7.1, §10.2)."""
    mission = _active_mission(ctx)
    reason = ctx.payload["reason"]
    items = _propagate(ctx, "parent.cancelled", sm.CANCELLED, f"mission cancelled: {reason}"[:4000])
    return _close(
        ctx, mission, "cancelled", "mission.cancelled", {"missionId": urn(mission.id), "reason": reason}, items
    )


@command("mission.terminate", group_roles=("coordinator",), actors=("agent", "service"))
def terminate_mission(ctx: HandlerContext) -> Decision:
    """The Mission fails (§7.1): its unfinished WorkItems fail with Evidence; a child's
    failure blocks or fails its parent WorkItem as declared (§14)."""
    mission = _active_mission(ctx)
    reason = ctx.payload["reason"]
    items = _propagate(ctx, "parent.failed", sm.FAILED, f"mission terminated: {reason}"[:4000])
    return _close(ctx, mission, "failed", "mission.terminated", {"missionId": urn(mission.id), "reason": reason}, items)
