"""The happy path and its receipts, Events and rows."""

from __future__ import annotations

from missions.models import GroupEvent
from tests.workitems.flow import Flow
from workitems.models import ExecutionLease


def test_it_runs_a_workitem_from_authorize_to_verified(flow: Flow) -> None:
    item = flow.drive_to("verified")
    types = list(GroupEvent.objects.filter(aggregate_id=item).order_by("sequence").values_list("type", flat=True))
    assert types == [
        "work.authorized",
        "work.offered",
        "work.offer_accepted",
        "work.started",
        "work.submitted",
        "work.result_accepted",
    ]
    assert flow.item(item).state == "verified"


def test_start_grants_a_lease_and_token_only_in_the_receipt_MWP_WRK_013(flow: Flow) -> None:
    item = flow.drive_to("queued")
    receipt = flow.start(item)
    grants = receipt["grants"]
    assert set(grants) == {"lease_id", "lease_expires_at", "capability_token", "capability_token_expires_at"}
    assert grants["capability_token_expires_at"] <= grants["lease_expires_at"]
    event = GroupEvent.objects.get(event_id=receipt["events"][0]["event_id"])
    assert grants["capability_token"] not in str(event.body)
    lease = ExecutionLease.objects.get(id=grants["lease_id"])
    it = flow.item(item)
    assert (str(lease.agent_id), lease.session_epoch, lease.ownership_epoch, lease.status) == (
        flow.worker.id,
        flow.worker.session_epoch,
        it.ownership_epoch,
        "active",
    )
    # The stored receipt never holds the token: a replay has no grants.
    from missions.models import ActionReceipt

    stored = ActionReceipt.objects.get(action_id=receipt["action_id"])
    assert "grants" not in stored.receipt


def test_checkpoint_releases_the_lease_and_requeues(flow: Flow) -> None:
    item = flow.drive_to("active")
    lease_id = flow.leases[item]
    flow.checkpoint(item)
    assert flow.item(item).state == "queued"
    assert ExecutionLease.objects.get(id=lease_id).status == "released"
    flow.start(item)
    assert flow.leases[item] != lease_id
