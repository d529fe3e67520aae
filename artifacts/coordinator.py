"""``mission.assign_coordinator`` and the replacement's reconciliation (PROTOCOL §7.2).

Here rather than in the missions app because the replacement receives a signed
Context Package (§7.2, §13.3). In the same transaction as the appointment, the
Group Authority generates it from authoritative state (``artifacts.packager``:
the Mission, its WorkItems with states and owners, the decisions in the
Group's Events, constraints, open questions, the Artifacts held, the source
Event range ``1..head``), the Organization's context packager Agent signs it,
and it is verified and published like a Coordinator's (``package_published``,
appended before the appointment's own Events). A Coordinator that dies before
publishing anything can therefore always be replaced. The
``mission.coordinator.assigned`` Event names the package
(``contextPackageId``, ``contextPackageHash``), and the replacement reads it
through ``GET /api/v0.1/groups/{groupId}/context-packages/{contextPackageId}``.

The MissionOwner or the Organization's control plane appoints; the former
Coordinator loses its coordinator role (its Membership Epoch moves, and with no
other role its Membership ends), so every later coordination Command of its
is fenced (``missions.coordinator``). Its Events stay valid history. The
replacement also becomes the MissionOwner of the unfinished child Missions the
former Coordinator owned (§14).

Before new assignments the replacement reconciles (§7.2):
``ext.mwportal.mission.coordinator_reconcile`` cites the package its
appointment named (ID and hash) and the Group sequence it has processed
through, at or past the appointment's Event and at most the head. Until then
``missions.coordinator.fence`` refuses its ``work.authorize``, ``work.offer``
and ``mission.create_child``.
"""

from __future__ import annotations

from missions.authority import AggregateRef, Decision, Emit, GroupHead, HandlerContext, check_revision
from missions.coordinator import ASSIGNED, RECONCILE, RECONCILED, expires_at, lease_seconds
from missions.guards import refuse
from missions.handlers.common import stamp
from missions.handlers.coordinator import NON_TERMINAL, live_mission
from missions.handlers.memberships import Notice, change_roles
from missions.handlers.missions import coordinator_lease_id, coordinator_of
from missions.models import GroupEvent, Membership, Mission
from missions.registry import command
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import urn

from .context import publish_generated
from .packager import replacement_package
from .store import hex_of, wire_hash


@command("mission.assign_coordinator", group_roles=("mission_owner",), actors=("human", "service"))
def assign_coordinator(ctx: HandlerContext) -> Decision:
    """Appoint a replacement Coordinator at Coordinator Epoch n+1 with a fresh lease (§7.2)."""
    check_revision(ctx.command, ctx.group.revision)
    mission = live_mission(ctx)
    replacement, card_version = coordinator_of(ctx.group.organization_id, ctx.payload)
    new_id = str(replacement.id)
    old_id = str(mission.coordinator_id) if mission.coordinator_id is not None else None
    if new_id == old_id:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/coordinatorId: the replacement is another Agent; the current one renews its lease",
            field="/payload/coordinatorId",
        )
    package, published = publish_generated(ctx, replacement_package(ctx, mission, new_id))
    epoch = mission.coordinator_epoch + 1
    seconds = lease_seconds(ctx.payload.get("leaseSeconds") or mission.coordinator_lease_seconds)
    mission.coordinator, mission.coordinator_epoch, mission.coordinator_card_version = replacement, epoch, card_version
    mission.coordinator_lease_id = coordinator_lease_id(str(mission.id), epoch)
    mission.coordinator_lease_seconds, mission.coordinator_lease_expires_at = seconds, expires_at(ctx.now, seconds)
    mission.save()
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision + 1)
    events, notices = _move_role(ctx.group.id, str(mission.id), "coordinator", old_id, new_id, ref, ctx)
    assigned = {
        "coordinatorId": urn(new_id),
        "coordinatorEpoch": epoch,
        "leaseExpiresAt": stamp(mission.coordinator_lease_expires_at),
        "contextPackageId": urn(str(package.package)),
        "contextPackageHash": wire_hash(package.document_hash),
    }
    if old_id is not None:
        assigned["previousCoordinatorId"] = urn(old_id)
    also = _hand_over_children(ctx, old_id, new_id) if old_id is not None else []
    emits = [published, Emit(ASSIGNED, ref, assigned), *events]
    return Decision(emits, ref, also=also, notices=notices)


@command(RECONCILE, group_roles=("coordinator",), actors=("agent",))
def reconcile(ctx: HandlerContext) -> Decision:
    """The replacement Coordinator reconciled: it cites the signed Context Package its appointment named
    and the sequence it processed the Group's Events through, so it may issue new assignments (§7.2).
    ``accept()`` fenced it already (the current Coordinator, its epoch, an unexpired lease)."""
    mission = live_mission(ctx)
    epoch = mission.coordinator_epoch
    events = GroupEvent.objects.filter(group_id=ctx.group.id)
    appointed = events.filter(type=ASSIGNED, body__coordinatorEpoch=epoch).values_list("sequence", "body").first()
    if appointed is None:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            f"the Coordinator of epoch {epoch} was not appointed as a replacement: it has nothing to reconcile",
            reason="not-a-replacement",
        )
    if events.filter(type=RECONCILED, body__coordinatorEpoch=epoch).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"epoch {epoch} has reconciled already", reason="reconciled")
    sequence, body = appointed
    payload = ctx.payload
    cited = (
        payload["contextPackageId"],
        wire_hash(hex_of(payload["contextPackageHash"], "/payload/contextPackageHash")),
    )
    if cited != (body["contextPackageId"], body["contextPackageHash"]):
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"/payload/contextPackageId: the appointment of epoch {epoch} named Context Package "
            f"{body['contextPackageId']} ({body['contextPackageHash']})",
            field="/payload/contextPackageId",
        )
    through = payload["throughSequence"]
    if not sequence <= through <= ctx.group.last_sequence:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"/payload/throughSequence: at or past the appointment's Event ({sequence}) and at most the Group "
            f"head ({ctx.group.last_sequence})",
            field="/payload/throughSequence",
        )
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision)
    reconciled = {"coordinatorId": urn(ctx.actor.id), "coordinatorEpoch": epoch,
                  "contextPackageId": body["contextPackageId"], "throughSequence": through}  # fmt: skip
    return Decision([Emit(RECONCILED, ref, reconciled)], ref)


def _move_role(
    group_id: str, mission_id: str, role: str, old_id: str | None, new_id: str, ref: AggregateRef, ctx: HandlerContext
) -> tuple[list[Emit], list[Notice]]:
    """``role`` leaves ``old_id`` (its Membership Epoch moves; with no role left it ends) and joins
    ``new_id``'s Membership in ``group_id``: one ``membership.changed`` each."""
    events: list[Emit] = []
    notices: list[Notice] = []
    for agent_id, change in ((old_id, "drop"), (new_id, "add")):
        if agent_id is None:
            continue
        row = Membership.objects.filter(group_id=group_id, agent_id=agent_id).first()
        held = set(row.roles) if row is not None and row.active else set()
        roles = sorted(held - {role} if change == "drop" else held | {role})
        state = "ended" if change == "drop" else "active"
        emits, notice = change_roles(
            ctx, group_id, agent_id, roles, row=row, ref=ref, mission_id=mission_id, changes=[(role, state)]
        )
        events.extend(emits)
        notices.append(notice)
    return events, notices


def _hand_over_children(ctx: HandlerContext, old_id: str, new_id: str) -> list[tuple[GroupHead, list[Emit]]]:
    """§14: the Parent Coordinator is its children's MissionOwner, so the replacement becomes the
    MissionOwner of every unfinished child Mission the former Coordinator owned (their Groups locked
    in ascending id order after this one)."""
    out: list[tuple[GroupHead, list[Emit]]] = []
    children = Mission.objects.filter(parent_group_id=ctx.group.id, status__in=NON_TERMINAL).order_by("group_id")
    for child in children:
        owner = Membership.objects.filter(group_id=child.group_id, agent_id=old_id, active=True).first()
        if owner is None or "mission_owner" not in owner.roles:
            continue
        head = ctx.lock_other_group(str(child.group_id))
        ref = AggregateRef("group", head.id, head.revision + 1)
        events, _ = _move_role(head.id, str(child.id), "mission_owner", old_id, new_id, ref, ctx)
        out.append((head, events))
    return out
