"""Child Missions and Mission outcomes (PROTOCOL §7.3, §10.2 last rows, §14).

``mission.create_child`` promotes a WorkItem to a linked child Mission in a new
Group: the WorkItem blocks with its ownership fenced while the child runs. The
child's final Approval verifies it (the Approval becomes the parent WorkItem's
Evidence); its termination or cancellation follows the declared
``failurePolicy``. A terminal Mission state reaches every unfinished WorkItem (§10.2): ``propagate``
and ``to_parent`` are what the lifecycle Commands (``lifecycle``) call.
"""

from __future__ import annotations

import uuid
from typing import Any

from governance.limits import enforce
from missions.authority import AggregateRef, Decision, Emit, GroupHead, HandlerContext, check_revision
from missions.handlers.coordinator import live_mission
from missions.handlers.missions import coordinator_of, found_mission, mission_terms
from missions.models import Agent, AgentCard, Mission
from missions.registry import command
from mwportal.protocol import GENESIS_HASH, ErrorCode, ProtocolError
from mwportal.protocol.ids import bare, urn
from mwportal.protocol.values import parse_timestamp

from .. import state_machine as sm
from ..content import content
from ..evidence import authority_evidence
from ..models import WorkItem
from ..wire import refuse
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


def check_subset(terms: dict[str, Any], item: WorkItem, parent: Mission) -> None:
    """§14: the child's budget, deadline and permissions are subsets of the parent's: its budget
    within the parent WorkItem's (within the parent Mission's, §12), its deadline no later than the
    parent WorkItem's, its permissions among the parent Mission's."""
    limits = dict(item.contract.get("budget") or {})
    budget = terms["budget"]
    if "currency" in budget and "currency" in limits and budget["currency"] != limits["currency"]:
        raise _not_subset("budget/currency", f"the parent WorkItem's budget is in {limits['currency']}")
    for name, limit in limits.items():
        if name == "currency":
            continue
        if budget.get(name) is None or budget[name] > limit:
            raise _not_subset(f"budget/{name}", f"at most the parent WorkItem's {limit}")
    deadline = item.contract.get("deadline")
    if deadline is not None and parse_timestamp(terms["deadline"]) > parse_timestamp(deadline):
        raise _not_subset("deadline", f"no later than the parent WorkItem's {deadline}")
    extra = sorted(set(terms["permissions"]) - set(parent.permissions))
    if extra:
        raise _not_subset("permissions", f"not granted to the parent Mission: {', '.join(extra)}")


def check_within_parent(contract: dict[str, Any], mission: Mission) -> None:
    """§14: a child Mission's capabilities and data access are subsets of its parent WorkItem's, so
    every WorkItem authorized in it requires only capabilities the parent WorkItem's contract names
    and uses only resource operations the parent's contract allows."""
    if mission.parent_workitem_id is None:
        return
    parent = WorkItem.objects.filter(id=mission.parent_workitem_id).values_list("contract", flat=True).first()
    if parent is None:
        return
    capabilities = {(c["id"], c["version"]) for c in parent.get("requiredCapabilities") or []}
    for i, capability in enumerate(contract.get("requiredCapabilities") or []):
        if (capability["id"], capability["version"]) not in capabilities:
            raise _not_subset(f"contract/requiredCapabilities/{i}", "the parent WorkItem requires no such capability")
    allowed = {(r["resource"], op) for r in parent.get("allowedResources") or [] for op in r.get("operations") or []}
    for i, resource in enumerate(contract.get("allowedResources") or []):
        if any((resource["resource"], op) not in allowed for op in resource.get("operations") or []):
            raise _not_subset(f"contract/allowedResources/{i}", "the parent WorkItem's contract allows no such access")


def _not_subset(member: str, why: str) -> ProtocolError:
    field = f"/payload/{member}"
    message = f"{field}: a child Mission's terms are a subset of its parent's: {why} (§14)"
    return refuse(ErrorCode.INVALID_COMMAND, message, field=field, reason="not-a-subset")


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
    parent_mission = live_mission(ctx)
    if parent_mission.status != "active":
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"the Mission is {parent_mission.status}: no new child (§7.1)")
    sm.check_transition(item.state, "mission.create_child")
    mission_id, group_id = bare(p["missionId"], "/payload/missionId"), bare(p["groupId"], "/payload/groupId")
    terms = mission_terms(p, ctx.now)
    check_subset(terms, item, parent_mission)
    # §14, §20: beyond the Organization's default depth only with a cited Cooperation Override Grant.
    enforce(ctx, "delegation_depth", _depth(parent_mission))
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


def propagate(ctx: HandlerContext, transition: str, state: str, cause: str) -> list[Emit]:
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


def to_parent(
    ctx: HandlerContext, mission: Mission, approved: bool, artifact_hashes: list[str] | None = None
) -> list[tuple[GroupHead, list[Emit]]]:
    """A child Mission's approval or failure reaches its parent WorkItem (§14): the approved result
    (``artifact_hashes``, the approved Artifact set) becomes the parent WorkItem's Evidence."""
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
        method = f"child Mission {urn(mission.id)} received its final Approval"
        evidence = [authority_evidence(parent_ctx, item, method, passed=True, artifact_hashes=artifact_hashes)]
        content().record_evidence(parent_ctx, item, evidence, "coordinator")
        content().adopt_artifacts(parent_ctx, head.id, list(artifact_hashes or []))
        accepted = {"workItemId": urn(item.id), "evidence": evidence}
        return [(head, [emit("work.result.accepted", item, accepted)])]
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
    items = propagate(ctx, "parent.failed", sm.FAILED, f"mission terminated: {reason}")
    ref = AggregateRef("group", head.id, head.revision + 1)
    return [*items, Emit("mission.terminated", ref, {"missionId": urn(parent.id), "reason": reason[:4000]})]
