"""Renewing and expiring the Coordinator lease (PROTOCOL §7.2).

``mission.renew_coordinator`` is the current Coordinator's, with its
Coordinator Epoch (``accept()`` fenced it already, ``missions.coordinator``);
the renewal moves the lease's expiry, not the Mission's revision. The beat
records an expiry nobody renewed with the control plane's
``ext.mwportal.mission.coordinator_lease_expire``; from then on the epoch's
Commands are refused until ``mission.assign_coordinator`` appoints a
replacement (``artifacts.coordinator``: the replacement receives a signed
Context Package).
"""

from __future__ import annotations

from mwportal.protocol import ErrorCode
from mwportal.protocol.catalogue import PROJECT
from mwportal.protocol.ids import urn

from ..authority import AggregateRef, Decision, Emit, HandlerContext, check_revision
from ..coordinator import expires_at, lease_seconds
from ..guards import refuse
from ..models import Mission
from ..registry import command
from .common import stamp

EXPIRE = f"{PROJECT}.mission.coordinator_lease_expire"
EXPIRED = f"{PROJECT}.mission.coordinator_lease_expired"
# §7.1: the states a Coordinator lease still governs.
NON_TERMINAL = ("active", "awaiting_approval")


def live_mission(ctx: HandlerContext) -> Mission:
    """The Group's Mission, locked for this Command, refused once terminal (§7.1)."""
    mission = Mission.objects.select_for_update().get(group_id=ctx.group.id)
    if mission.status not in NON_TERMINAL:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            f"the Mission is {mission.status}: a terminal Mission is never reopened or rewritten (§7.1)",
            state=mission.status,
        )
    return mission


@command("mission.renew_coordinator", group_roles=("coordinator",), actors=("agent",))
def renew_coordinator(ctx: HandlerContext) -> Decision:
    """The current Coordinator renews its lease for ``leaseSeconds`` (or its period) from now."""
    check_revision(ctx.command, ctx.group.revision)
    mission = live_mission(ctx)
    seconds = lease_seconds(ctx.payload.get("leaseSeconds") or mission.coordinator_lease_seconds)
    mission.coordinator_lease_seconds = seconds
    mission.coordinator_lease_expires_at = expires_at(ctx.now, seconds)
    mission.save(update_fields=["coordinator_lease_seconds", "coordinator_lease_expires_at"])
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision)
    payload = {"coordinatorEpoch": mission.coordinator_epoch, "leaseExpiresAt": stamp(expires_at(ctx.now, seconds))}
    return Decision([Emit("mission.coordinator.renewed", ref, payload)], ref)


@command(EXPIRE, actors=("service",))
def expire_coordinator_lease(ctx: HandlerContext) -> Decision:
    """The control plane records that the lease of ``coordinatorEpoch`` ran out unrenewed (the beat
    issues it once per epoch: its action ID is derived from the Mission and the epoch)."""
    check_revision(ctx.command, ctx.group.revision)
    mission = live_mission(ctx)
    epoch = ctx.payload["coordinatorEpoch"]
    expiry = mission.coordinator_lease_expires_at
    if epoch != mission.coordinator_epoch or expiry is None or expiry > ctx.now:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            f"the Coordinator lease of epoch {epoch} is not the current lease, expired",
            current=mission.coordinator_epoch,
        )
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision)
    payload = {
        "coordinatorId": urn(str(mission.coordinator_id)),
        "coordinatorEpoch": epoch,
        "leaseExpiresAt": stamp(expiry),
    }
    return Decision([Emit(EXPIRED, ref, payload)], ref)
