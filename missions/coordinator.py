"""The Coordinator lease (PROTOCOL §7.2): one current Coordinator Epoch per Mission, and its fence.

The lease lives on the Mission row: its Agent, Coordinator Epoch, lease ID,
expiry and renewal period. ``mission.create`` grants epoch 1,
``mission.assign_coordinator`` a higher one, ``mission.renew_coordinator``
moves the expiry, and the beat (``missions.tasks.expire_coordinator_leases``)
records an expiry nobody renewed.

``fence`` is the one check every Command whose authority derives from the
lease goes through, inside ``accept()`` before roles and Membership Epochs are
looked at (the former Coordinator has lost its role and its Membership Epoch
has moved, yet what it is told is that its Coordinator Epoch is fenced):

- the kinds §15.1 names (``mission.renew_coordinator``,
  ``mission.submit_for_approval``, ``mission.create_child``,
  ``membership.grant_delegation``, ``work.accept_result``, and an Agent's
  ``mission.terminate``);
- ``work.authorize`` and ``work.offer`` issued as Coordinator (§7.2: only the
  current epoch authorizes or assigns WorkItems);
- any other Command that presents a Coordinator Epoch, from the current or a
  former Coordinator.

Such a Command from anyone but the current Coordinator, or with another epoch,
is AUTH_STALE_COORDINATOR; under an expired lease it is WORK_LEASE_EXPIRED.

§7.2 also has a replacement bring itself up to date with the WorkItems'
current state before it hands out any new assignment. A Coordinator appointed by
``mission.assign_coordinator`` (whose ``mission.coordinator.assigned`` names
the signed Context Package it receives) issues ``work.authorize``,
``work.offer`` and ``mission.create_child`` only once its
``ext.mwportal.mission.coordinator_reconcile`` is accepted: that Command cites
the package (ID and hash) and the Group sequence it processed through, at or
past its appointment (``artifacts.coordinator``). Before that, they are
INVALID_STATE_TRANSITION with reason ``coordinator-not-reconciled``. The
Coordinator of epoch 1 made the plan and reconciles nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.command import CommandDoc
from mwportal.protocol.ids import urn

from .models import GroupEvent, Membership, Mission

# §15.1: an Agent Command of these kinds derives its authority from the lease.
LEASE_KINDS = frozenset(
    {
        "mission.renew_coordinator",
        "mission.submit_for_approval",
        "mission.create_child",
        "membership.grant_delegation",
        "work.accept_result",
        "mission.terminate",
    }
)
# §7.2: authorizing and assigning WorkItems, when the Coordinator does it.
AS_COORDINATOR_KINDS = frozenset({"work.authorize", "work.offer"})
# §7.2: a replacement's reconciliation (the project's kind): fenced like the lease's own Commands.
RECONCILE = "ext.mwportal.mission.coordinator_reconcile"
RECONCILED = "ext.mwportal.mission.coordinator_reconciled"
ASSIGNED = "mission.coordinator.assigned"
# §7.2: the new assignments a replacement issues only once it has reconciled.
ASSIGNING_KINDS = frozenset({"work.authorize", "work.offer", "mission.create_child"})


def lease_seconds(requested: int | None) -> int:
    """The renewal period of a lease: the one asked for, or the Organization's default."""
    return int(requested or settings.MWP_COORDINATOR_LEASE_SECONDS)


def expires_at(now: datetime, seconds: int) -> datetime:
    return now + timedelta(seconds=seconds)


def fenced(doc: CommandDoc, membership_roles: frozenset[str] | None) -> bool:
    """Whether ``doc`` is a Command whose authority derives from the Coordinator lease."""
    if doc.kind in LEASE_KINDS or doc.kind == RECONCILE or doc.coordinator_epoch is not None:
        return True
    return doc.kind in AS_COORDINATOR_KINDS and "coordinator" in (membership_roles or ())


def _former(group_id: str, actor_id: str) -> bool:
    """Whether ``actor_id`` held an earlier Coordinator lease of the Group's Mission (§7.2)."""
    replaced = GroupEvent.objects.filter(group_id=group_id, type=ASSIGNED)
    return replaced.filter(body__previousCoordinatorId=urn(actor_id)).exists()


def fence(
    doc: CommandDoc,
    actor_id: str,
    actor_type: str,
    membership_roles: frozenset[str] | None,
    group_id: str,
    now: datetime,
) -> None:
    """Refuse a lease-derived Agent Command not carrying the current, unexpired Coordinator lease (§7.2, §15.1).

    Only a Principal that is or was a member of the Group is told about its
    Coordinator Epoch; anyone else meets the ordinary Membership checks.
    """
    if actor_type != "agent" or not fenced(doc, membership_roles):
        return
    row = (
        Mission.objects.filter(group_id=group_id)
        .values_list("coordinator_id", "coordinator_epoch", "coordinator_lease_expires_at")
        .first()
    )
    if row is None or not Membership.objects.filter(group_id=group_id, agent_id=actor_id).exists():
        return
    coordinator, epoch, expiry = row
    leased = doc.kind in LEASE_KINDS or doc.kind == RECONCILE
    if not leased and str(coordinator) != actor_id and not _former(group_id, actor_id):
        return  # an epoch presented by someone who never held the lease: the role checks answer
    if str(coordinator) != actor_id or doc.coordinator_epoch != epoch:
        raise ProtocolError(
            ErrorCode.AUTH_STALE_COORDINATOR,
            f"{doc.kind} needs the current Coordinator lease: Coordinator Epoch {epoch}",
            details={"current": epoch, "field": "coordinatorEpoch"},
        )
    if expiry is None or expiry <= now:
        raise ProtocolError(
            ErrorCode.WORK_LEASE_EXPIRED,
            f"the Coordinator lease of epoch {epoch} has expired; the MissionOwner appoints a replacement (§7.2)",
            details={"coordinatorEpoch": epoch, "reason": "coordinator-lease-expired"},
        )
    if doc.kind in ASSIGNING_KINDS and epoch > 1 and not reconciled(group_id, epoch):  # epoch 1: mission.create
        raise ProtocolError(
            ErrorCode.INVALID_STATE_TRANSITION,
            f"the replacement Coordinator of epoch {epoch} reconciles the Group's WorkItem state before new "
            f"assignments (§7.2): {RECONCILE} first, citing its Context Package",
            details={"coordinatorEpoch": epoch, "reason": "coordinator-not-reconciled"},
        )


def reconciled(group_id: str, epoch: int) -> bool:
    """Whether the Coordinator of ``epoch`` may issue new assignments: one appointed as a replacement
    once its reconciliation is accepted; the first Coordinator, which planned from the start, always."""
    events = GroupEvent.objects.filter(group_id=group_id)
    if not events.filter(type=ASSIGNED, body__coordinatorEpoch=epoch).exists():
        return True
    return events.filter(type=RECONCILED, body__coordinatorEpoch=epoch).exists()
