"""The Mission lifecycle after creation (PROTOCOL §7.1, §7.3).

=================== ================================================ =================== ==========================
state               Command or cause                                 next                authority
=================== ================================================ =================== ==========================
active              ``mission.submit_for_approval``                  awaiting_approval   current Coordinator
awaiting_approval   ``mission.request_changes``                      active              MissionOwner
awaiting_approval   ``mission.approve`` (a signed Approval)          approved            MissionOwner
non-terminal        ``mission.cancel`` or parent cancellation        cancelled           MissionOwner, policy
non-terminal        ``mission.terminate`` or child failure           failed              Coordinator, policy
=================== ================================================ =================== ==========================

``approved``, ``cancelled`` and ``failed`` are terminal: every Command on such
a Mission is refused, and corrections open a linked follow-up Mission
(``mission.create_follow_up``). The Coordinator's Commands were fenced by
``accept()`` already (its current, unexpired Coordinator Epoch, §7.2).
"""

from __future__ import annotations

from typing import Any

from missions.authority import AggregateRef, Decision, Emit, GroupHead, HandlerContext, check_revision
from missions.handlers.coordinator import live_mission
from missions.keyregistry import DjangoRegistry
from missions.models import Approval, GroupEvent, Mission, Organization
from missions.registry import command
from mwportal.protocol import ErrorCode, ProtocolError, jcs
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import WIRE_MESSAGES, VerificationFailed, verify_document

from .. import state_machine as sm
from ..content import content
from ..models import WorkItem
from ..wire import refuse
from .outcomes import propagate, to_parent

_DECISIONS = ("mission.submitted_for_approval", "mission.approved", "mission.changes_requested")


def _in_state(ctx: HandlerContext, state: str) -> Mission:
    check_revision(ctx.command, ctx.group.revision)
    mission = live_mission(ctx)
    if mission.status != state:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            f"{ctx.command.kind} needs a Mission {state}; it is {mission.status} (§7.1)",
            state=mission.status,
        )
    return mission


def _next(ctx: HandlerContext) -> AggregateRef:
    """A Mission state change is a Group revision change."""
    return AggregateRef("group", ctx.group.id, ctx.group.revision + 1)


def _submitted(ctx: HandlerContext) -> dict[str, Any]:
    """The submission awaiting the decision: the last ``mission.submitted_for_approval``."""
    last = GroupEvent.objects.filter(group_id=ctx.group.id, type__in=_DECISIONS).order_by("-sequence").first()
    assert last is not None and last.type == "mission.submitted_for_approval", "awaiting_approval has a submission"
    if ctx.payload["missionRevision"] != last.body["missionRevision"]:
        raise refuse(
            ErrorCode.REVISION_CONFLICT,
            f"/payload/missionRevision: revision {last.body['missionRevision']} is the one submitted",
            field="/payload/missionRevision",
        )
    return dict(last.body)


def _unfinished(ctx: HandlerContext) -> None:
    unfinished = WorkItem.objects.filter(group_id=ctx.group.id, state__in=sm.UNFINISHED).count()
    if unfinished:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            f"{unfinished} WorkItems are unfinished: every required result is reviewed first (§7.3)",
            unfinished=unfinished,
        )


@command("mission.submit_for_approval", group_roles=("coordinator",), actors=("agent",))
def submit_for_approval(ctx: HandlerContext) -> Decision:
    """The current Coordinator submits this exact Mission revision and Artifact set (§7.3), after
    reviewing every required WorkItem result: none is unfinished."""
    mission = _in_state(ctx, "active")
    revision = ctx.payload.get("missionRevision") or ctx.group.revision
    if revision != ctx.group.revision:
        raise refuse(
            ErrorCode.REVISION_CONFLICT, f"/payload/missionRevision: the Mission is at revision {ctx.group.revision}",
            field="/payload/missionRevision",
        )  # fmt: skip
    _unfinished(ctx)
    absent = content().absent_from_group(ctx.group.id, list(ctx.payload["artifactHashes"]))
    if absent:
        raise refuse(
            ErrorCode.INVALID_COMMAND, f"/payload/artifactHashes: not held by this Group: {', '.join(absent)}",
            field="/payload/artifactHashes", reason="not_found",
        )  # fmt: skip
    Mission.objects.filter(pk=mission.pk).update(status="awaiting_approval")
    payload = {
        "missionId": urn(mission.id),
        "missionRevision": revision,
        "artifactHashes": ctx.payload["artifactHashes"],
    }
    ref = _next(ctx)
    return Decision([Emit("mission.submitted_for_approval", ref, payload)], ref)


@command("mission.request_changes", group_roles=("mission_owner",))
def request_changes(ctx: HandlerContext) -> Decision:
    """The MissionOwner reopens the same Mission with feedback (§7.1, §7.3); the earlier
    submissions stay in the log, and the Coordinator revises or adds WorkItems."""
    mission = _in_state(ctx, "awaiting_approval")
    _submitted(ctx)
    Mission.objects.filter(pk=mission.pk).update(status="active")
    ref = _next(ctx)
    payload = {"missionId": urn(mission.id), "feedback": ctx.payload["feedback"], "newRevision": ref.revision}
    return Decision([Emit("mission.changes_requested", ref, payload)], ref)


def _approval(ctx: HandlerContext, mission: Mission, submitted: dict[str, Any]) -> dict[str, Any]:
    """The Approval document the MissionOwner signed (approval.schema.json), over exactly the submitted
    revision and Artifact set and the Command's own members, verified in the six stages of §6.4."""
    p, field = ctx.payload, "/payload/approval"
    approval = p.get("approval")
    if approval is None:
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"{field}: the MissionOwner's signed Approval document (approval.schema.json) is required (§7.3)",
            field=field,
        )
    expected = {
        "approvalId": p["approvalId"], "kind": "child_mission" if mission.parent_group_id else "mission_final",
        "decision": "approved", "missionId": urn(mission.id), "groupId": urn(ctx.group.id),
        "missionRevision": submitted["missionRevision"], "acceptancePolicyVersion": p["acceptancePolicyVersion"],
        "approver": ctx.actor.principal, "comments": p.get("comments") or "",
        "conditions": list(p.get("conditions") or []),
    }  # fmt: skip
    for name, value in expected.items():
        if approval.get(name) != value:
            raise refuse(
                ErrorCode.INVALID_COMMAND, f"{field}/{name}: must be {value!r}, as the Command and submission say",
                field=f"{field}/{name}",
            )  # fmt: skip
    if sorted(approval["artifactHashes"]) != sorted(submitted["artifactHashes"]):
        raise refuse(
            ErrorCode.INVALID_COMMAND, f"{field}/artifactHashes: must be the submitted Artifact set",
            field=f"{field}/artifactHashes",
        )  # fmt: skip
    try:
        registry = DjangoRegistry(Organization.objects.get(id=ctx.group.organization_id))
        verify_document(jcs.canonicalize(approval), "approval", registry)
    except VerificationFailed as exc:
        raise ProtocolError(
            exc.wire_code, f"{field}: {WIRE_MESSAGES[exc.wire_code]}", details={"field": field}
        ) from None
    return dict(approval)


@command("mission.approve", group_roles=("mission_owner",))
def approve_mission(ctx: HandlerContext) -> Decision:
    """The MissionOwner's final Approval (§7.3) of the submitted revision and Artifact set, signed
    by the MissionOwner. A child Mission's approval verifies its parent WorkItem (§14)."""
    p = ctx.payload
    mission = _in_state(ctx, "awaiting_approval")
    submitted = _submitted(ctx)
    if sorted(p["artifactHashes"]) != sorted(submitted["artifactHashes"]):
        raise refuse(
            ErrorCode.INVALID_COMMAND, "/payload/artifactHashes: must be the submitted Artifact set",
            field="/payload/artifactHashes",
        )  # fmt: skip
    _unfinished(ctx)
    approval = _approval(ctx, mission, submitted)
    Approval.objects.create(
        group_id=ctx.group.id, kind=Approval.KIND_FINAL, subject_kind="mission", subject_id=str(mission.id),
        subject_revision=submitted["missionRevision"], granted_by_id=ctx.actor.id,
        note=(p.get("comments") or "")[:2000], granted_at=ctx.now,
    )  # fmt: skip
    Mission.objects.filter(pk=mission.pk).update(status="approved")
    ref = _next(ctx)
    also = to_parent(ctx, mission, approved=True, artifact_hashes=list(submitted["artifactHashes"]))
    return Decision([Emit("mission.approved", ref, {"approval": approval})], ref, also=also)


def _descendants(group_id: str) -> list[Mission]:
    """The unfinished child Missions under ``group_id``, at every depth (§14)."""
    found: list[Mission] = []
    frontier = [group_id]
    while frontier:
        children = list(
            Mission.objects.filter(parent_group_id__in=frontier, status__in=("active", "awaiting_approval"))
        )
        found += children
        frontier = [str(c.group_id) for c in children]
    return found


def _cancel_children(ctx: HandlerContext, reason: str) -> list[tuple[GroupHead, list[Emit]]]:
    """Parent cancellation reaches every unfinished child Mission and its WorkItems (§7.1),
    their Groups locked in ascending id order after this one."""
    out: list[tuple[GroupHead, list[Emit]]] = []
    for child in sorted(_descendants(ctx.group.id), key=lambda m: str(m.group_id)):
        head = ctx.lock_other_group(str(child.group_id))
        child_ctx = HandlerContext(
            command=ctx.command, spec=ctx.spec, actor=ctx.actor, group=head, now=ctx.now, payload=ctx.payload,
            auth=ctx.auth,
        )  # fmt: skip
        cause = f"parent Mission cancelled: {reason}"[:4000]
        items = propagate(child_ctx, "parent.cancelled", sm.CANCELLED, cause)
        Mission.objects.filter(pk=child.pk).update(status="cancelled")
        ref = AggregateRef("group", head.id, head.revision + 1)
        out.append((head, [*items, Emit("mission.cancelled", ref, {"missionId": urn(child.id), "reason": cause})]))
    return out


@command("mission.cancel", group_roles=("mission_owner",), actors=("agent", "human", "service"))
def cancel_mission(ctx: HandlerContext) -> Decision:
    """The MissionOwner (or the Organization's policy) cancels: every unfinished WorkItem and child
    Mission is cancelled with it (§7.1, §10.2)."""
    check_revision(ctx.command, ctx.group.revision)
    mission = live_mission(ctx)
    reason = ctx.payload["reason"]
    # Every other Group this cancellation writes to, locked up front in ascending id order.
    others = [str(m.group_id) for m in _descendants(ctx.group.id)] + [str(g) for g in [mission.parent_group_id] if g]
    for group_id in sorted(others):
        ctx.lock_other_group(group_id)
    children = _cancel_children(ctx, reason)
    items = propagate(ctx, "parent.cancelled", sm.CANCELLED, f"mission cancelled: {reason}"[:4000])
    Mission.objects.filter(pk=mission.pk).update(status="cancelled")
    ref = _next(ctx)
    own = [*items, Emit("mission.cancelled", ref, {"missionId": urn(mission.id), "reason": reason})]
    return Decision(own, ref, also=[*children, *to_parent(ctx, mission, approved=False)])


@command("mission.terminate", group_roles=("coordinator",), actors=("agent", "service"))
def terminate_mission(ctx: HandlerContext) -> Decision:
    """The Coordinator (its current epoch) or the Organization's policy fails the Mission (§7.1):
    its unfinished WorkItems fail with Evidence; a child's failure blocks or fails its parent
    WorkItem as declared (§14)."""
    check_revision(ctx.command, ctx.group.revision)
    mission = live_mission(ctx)
    reason = ctx.payload["reason"]
    items = propagate(ctx, "parent.failed", sm.FAILED, f"mission terminated: {reason}"[:4000])
    Mission.objects.filter(pk=mission.pk).update(status="failed")
    ref = _next(ctx)
    own = [*items, Emit("mission.terminated", ref, {"missionId": urn(mission.id), "reason": reason})]
    return Decision(own, ref, also=to_parent(ctx, mission, approved=False))
