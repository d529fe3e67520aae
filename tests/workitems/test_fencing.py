"""Leases, Ownership Epochs and session replacement (PROTOCOL §11.3, §11.5)."""

from __future__ import annotations

import pytest

from missions.models import GroupEvent
from mwportal.protocol import ErrorCode, ProtocolError, schemas
from mwportal.protocol.ids import bare, urn
from tests.conftest import Because, group_revision, refused
from tests.workitems.flow import PROGRESS, Flow, checkpoint
from workitems.models import ExecutionLease, Submission


def test_an_older_lease_id_after_renewal_and_restart_is_refused_spec_11_3(flow: Flow) -> None:
    """Same Ownership Epoch, newer lease: the delayed Command is WORK_LEASE_EXPIRED (stale_lease)."""
    item = flow.drive_to("active")
    old_lease = flow.leases[item]
    flow.renew(item)
    flow.checkpoint(item)
    flow.start(item)  # restart under a new lease, same Ownership Epoch
    assert flow.leases[item] != old_lease
    assert flow.item(item).ownership_epoch == 1
    stale = Because(ErrorCode.WORK_LEASE_EXPIRED, "stale_lease")
    refused(stale, flow.checkpoint, item, lease_id=old_lease)
    refused(stale, flow.renew, item, lease_id=old_lease)
    flow.checkpoint(item)


def test_renewal_yields_work_progressed_extends_the_lease_and_rotates_the_token_spec_11_3(flow: Flow) -> None:
    item = flow.drive_to("active")
    first = ExecutionLease.objects.get(id=flow.leases[item])
    receipt = flow.renew(item)
    assert [e["kind"] for e in receipt["events"]] == ["work.progressed"]
    lease = ExecutionLease.objects.get(id=flow.leases[item])
    assert receipt["grants"]["executionLeaseId"] == urn(lease.id)
    assert lease.expires_at >= first.expires_at
    assert lease.token_hash != first.token_hash
    assert len(lease.renewals) == 1
    assert lease.token_expires_at <= lease.expires_at
    event = GroupEvent.objects.get(event_id=bare(receipt["events"][0]["eventId"], "eventId"))
    schemas.validate("lease", event.body["executionLease"])
    assert event.body["executionLease"]["renewalCount"] == 1


def test_renewal_is_compare_and_set_spec_15_3(flow: Flow) -> None:
    item = flow.drive_to("active")
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, flow.renew, item, expected_revision=None)
    assert err.details["field"] == "expectedRevision"
    refused(ErrorCode.REVISION_CONFLICT, flow.renew, item, expected_revision=flow.revision(item) - 1)


def test_lease_commands_must_name_the_lease_spec_11_3(flow: Flow) -> None:
    item = flow.drive_to("active")
    payload = {"workItemId": urn(item), "ownershipEpoch": 1, "checkpoint": checkpoint(), "progress": PROGRESS}
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, flow.worker.send, "work.checkpoint", flow.group, payload)
    assert err.details["field"] == "/payload"


def test_another_worker_cannot_use_the_lease_spec_11_3(flow: Flow) -> None:
    item = flow.drive_to("active")
    refused(Because(ErrorCode.WORK_LEASE_EXPIRED, "stale_lease"), flow.checkpoint, item, agent=flow.worker2)


def test_a_stale_ownership_epoch_is_fenced_spec_11_3(flow: Flow) -> None:
    item = flow.drive_to("queued")
    refused(ErrorCode.WORK_STALE_OWNERSHIP, flow.send, flow.worker, "work.start", item, {"ownershipEpoch": 2})
    refused(ErrorCode.WORK_STALE_OWNERSHIP, flow.start, item, flow.worker2)
    flow.start(item)
    refused(ErrorCode.WORK_STALE_OWNERSHIP, flow.lease_command, "work.checkpoint", item,
            {"checkpoint": checkpoint(), "ownershipEpoch": 7})  # fmt: skip


def test_a_new_session_revokes_leases_and_requeues_spec_11_3(flow: Flow) -> None:
    item = flow.drive_to("active")
    lease_id = flow.leases[item]
    flow.worker.open_session()
    it = flow.item(item)
    assert it.state == "queued"
    assert ExecutionLease.objects.get(id=lease_id).status == "revoked"
    revoked = GroupEvent.objects.get(
        group_id=flow.group, type="ext.missionweaveprotocol.core.work_execution_lease_revoked"
    )
    assert revoked.body["executionLeaseId"] == urn(lease_id)
    assert (revoked.body["status"], revoked.body["sessionEpoch"]) == ("queued", flow.worker.session_epoch)
    # The new start-by deadline travels with the Event, so a Worker's projection knows it.
    assert revoked.body["startBy"] == it.start_by.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    # The old lease is dead even with the new session's epoch.
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.checkpoint, item, lease_id=lease_id)
    flow.start(item)  # the new runtime starts it again under a new lease
    assert flow.leases[item] != lease_id


def test_a_late_result_of_a_fenced_owner_is_kept_but_never_completes_spec_11_5(flow: Flow) -> None:
    item = flow.drive_to("active")
    old_lease = flow.leases[item]
    flow.worker.open_session()  # the old runtime is replaced: lease revoked, item queued
    flow.start(item)
    new_lease = flow.leases[item]
    with pytest.raises(ProtocolError) as info:
        flow.submit(item, lease_id=old_lease)
    assert info.value.code == ErrorCode.WORK_LEASE_EXPIRED
    late = Submission.objects.get(workitem_id=item)
    assert late.authoritative is False
    recorded = GroupEvent.objects.get(aggregate_id=item, type="ext.mwportal.work.late_result_recorded")
    assert recorded.body["ownershipEpoch"] == 1 and len(recorded.body["evidence"]) == 1
    assert flow.item(item).state == "active"
    flow.submit(item, lease_id=new_lease)
    assert flow.item(item).state == "submitted"
    assert Submission.objects.filter(workitem_id=item, authoritative=True).count() == 1


def test_the_late_result_record_is_the_control_planes_alone_spec_11_5(flow: Flow) -> None:
    item = flow.drive_to("active")
    payload = {"ownershipEpoch": 1, "artifactIds": [], "evidence": []}
    refused(
        ErrorCode.AUTH_FORBIDDEN, flow.send, flow.coordinator, "ext.mwportal.work.late_result_record", item, payload
    )


def test_ending_a_membership_revokes_its_lease_and_ends_its_ownership_spec_11_5(flow: Flow) -> None:
    """An ended member may no longer execute in the Group: its lease is revoked
    and its ownership ends in the same transaction, so the Coordinator can
    re-offer under a higher Ownership Epoch at once."""
    active = flow.drive_to("active")
    queued = flow.drive_to("queued")
    lease = flow.leases[active]
    receipt = flow.owner.send(
        "membership.end", flow.group, {"principal": flow.worker.actor}, expected_revision=group_revision(flow.group)
    )
    kinds = [e["kind"] for e in receipt["events"]]
    assert kinds[0] == "membership.ended"
    assert kinds.count("ext.missionweaveprotocol.core.work_execution_lease_revoked") == 1
    assert kinds.count("ext.mwportal.work.ownership_fenced") == 2
    assert ExecutionLease.objects.get(id=lease).status == "revoked"
    for item in (active, queued):
        it = flow.item(item)
        assert (it.state, it.owner_id) == ("queued", None)
        flow.offer(item, agents=[flow.worker2])
        flow.accept(item, flow.worker2)
        assert flow.item(item).ownership_epoch == 2
