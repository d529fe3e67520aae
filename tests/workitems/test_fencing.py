"""Leases, Ownership Epochs and session replacement (spec 11.3; MWP-WRK-013/014/019)."""

from __future__ import annotations

import pytest

from missions.models import GroupEvent
from mwportal.protocol import ErrorCode, ProtocolError
from tests.conftest import Because, group_revision, refused
from tests.workitems.flow import PROGRESS, Flow
from workitems.models import ExecutionLease, Submission


def test_older_lease_id_after_renewal_and_restart_is_refused_MWP_WRK_013(flow: Flow) -> None:
    """Same Ownership Epoch, newer lease: the delayed Command is WORK_LEASE_EXPIRED (stale_lease)."""
    item = flow.drive_to("active")
    old_lease = flow.leases[item]
    flow.lease_command("work.renew_lease", item, {})
    flow.checkpoint(item)
    flow.start(item)  # restart under a new lease, same Ownership Epoch
    assert flow.leases[item] != old_lease
    assert flow.item(item).ownership_epoch == 1
    refused(
        Because(ErrorCode.WORK_LEASE_EXPIRED, "stale_lease"),
        flow.lease_command,
        "work.checkpoint",
        item,
        {"checkpoint": {"step": 2}, "progress": PROGRESS},
        lease_id=old_lease,
    )
    refused(
        Because(ErrorCode.WORK_LEASE_EXPIRED, "stale_lease"),
        flow.lease_command,
        "work.renew_lease",
        item,
        {},
        lease_id=old_lease,
    )
    flow.checkpoint(item)


def test_renewal_extends_the_lease_and_rotates_the_token(flow: Flow) -> None:
    item = flow.drive_to("active")
    first = ExecutionLease.objects.get(id=flow.leases[item])
    receipt = flow.lease_command("work.renew_lease", item, {})
    lease = ExecutionLease.objects.get(id=flow.leases[item])
    assert receipt["grants"]["lease_id"] == str(lease.id)
    assert lease.expires_at >= first.expires_at
    assert lease.token_hash != first.token_hash
    assert len(lease.renewals) == 1
    assert lease.token_expires_at <= lease.expires_at


def test_lease_commands_must_name_the_lease(flow: Flow) -> None:
    item = flow.drive_to("active")
    refused(
        ErrorCode.SCHEMA_VALIDATION_FAILED,
        flow.worker.send,
        "work.checkpoint",
        flow.group,
        {"checkpoint": {}, "progress": PROGRESS},
        target=flow.target(item, None),
    )


def test_another_worker_cannot_use_the_lease(flow: Flow) -> None:
    item = flow.drive_to("active")
    refused(Because(ErrorCode.WORK_LEASE_EXPIRED, "stale_lease"), flow.checkpoint, item, agent=flow.worker2)


def test_start_with_a_stale_ownership_epoch_is_refused(flow: Flow) -> None:
    item = flow.drive_to("queued")
    refused(
        ErrorCode.WORK_STALE_OWNERSHIP,
        flow.worker.send,
        "work.start",
        flow.group,
        {},
        target=flow.target(item),
        ownership_epoch=0,
    )
    refused(ErrorCode.WORK_STALE_OWNERSHIP, flow.start, item, flow.worker2)


def test_new_session_revokes_leases_and_requeues_MWP_WRK_014(flow: Flow) -> None:
    item = flow.drive_to("active")
    lease_id = flow.leases[item]
    flow.worker.open_session()
    it = flow.item(item)
    assert it.state == "queued"
    assert ExecutionLease.objects.get(id=lease_id).status == "revoked"
    revoked = GroupEvent.objects.get(group_id=flow.group, type="work.lease_revoked")
    assert revoked.body["lease_id"] == lease_id
    # The old lease is dead even with the new session's epoch.
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.checkpoint, item, lease_id=lease_id)
    flow.start(item)  # the new runtime starts it again under a new lease
    assert flow.leases[item] != lease_id


def test_late_result_of_a_fenced_owner_is_kept_but_never_completes_MWP_WRK_019(flow: Flow) -> None:
    item = flow.drive_to("active")
    old_lease = flow.leases[item]
    flow.worker.open_session()  # old runtime replaced: lease revoked, item queued
    flow.start(item)
    new_lease = flow.leases[item]
    with pytest.raises(ProtocolError) as info:
        flow.submit(item, lease_id=old_lease)
    assert info.value.code == ErrorCode.WORK_LEASE_EXPIRED
    late = Submission.objects.get(workitem_id=item)
    assert late.authoritative is False
    assert GroupEvent.objects.filter(aggregate_id=item, type="work.late_result_recorded").count() == 1
    assert flow.item(item).state == "active"
    flow.submit(item, lease_id=new_lease)
    assert flow.item(item).state == "submitted"
    assert Submission.objects.filter(workitem_id=item, authoritative=True).count() == 1


def test_removing_a_member_revokes_its_lease_and_ends_its_ownership(flow: Flow) -> None:
    """A removed member may no longer execute in the Group: its lease is
    revoked and its ownership ends in the same transaction, so the
    Coordinator can re-offer under a higher Ownership Epoch at once."""
    active = flow.drive_to("active")
    queued = flow.drive_to("queued")
    lease = flow.leases[active]
    group = {"kind": "group", "id": flow.group, "revision": group_revision(flow.group)}
    receipt = flow.owner.send("membership.remove", flow.group, {"agent": flow.worker.id}, target=group)
    types = [e["type"] for e in receipt["events"]]
    assert types[0] == "membership.removed"
    assert types.count("work.lease_revoked") == 1 and types.count("work.owner_fenced") == 2
    assert ExecutionLease.objects.get(id=lease).status == "revoked"
    for item in (active, queued):
        it = flow.item(item)
        assert (it.state, it.owner_id) == ("queued", None)
        flow.offer(item, agents=[flow.worker2])
        flow.accept(item, flow.worker2)
        assert flow.item(item).ownership_epoch == 2
