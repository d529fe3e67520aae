"""The happy path (PROTOCOL §10.2), its receipts, Events and rows; every Event a
normative, catalogue-valid document (§15.2)."""

from __future__ import annotations

from missions.models import ActionReceipt, GroupEvent
from mwportal.protocol import catalogue, schemas
from mwportal.protocol.ids import bare
from tests.workitems.flow import Flow
from workitems.models import ExecutionLease


def kinds_of(item: str) -> list[str]:
    return list(GroupEvent.objects.filter(aggregate_id=item).order_by("sequence").values_list("type", flat=True))


def test_it_runs_a_workitem_from_authorize_to_verified_spec_10_2(flow: Flow) -> None:
    item = flow.drive_to("verified")
    assert [k for k in kinds_of(item) if k != "artifact.published"] == [
        "work.authorized",
        "work.offer.created",
        "work.offer.accepted",
        "work.started",
        "work.submitted",
        "work.result.accepted",
    ]
    assert flow.item(item).state == "verified"


def test_every_workitem_event_is_a_catalogue_valid_signed_document_spec_15_2(flow: Flow) -> None:
    item = flow.drive_to("verified")
    for event in GroupEvent.objects.filter(aggregate_id=item).order_by("sequence"):
        document = event.as_wire()
        schemas.validate("event", document)
        catalogue.validate_payload(document["kind"], document["payload"])
        assert document["workItemId"] == f"urn:uuid:{item}"
        assert document["cause"]["type"] == "command"


def test_the_authorized_workitem_carries_the_normative_work_contract_spec_10_1(flow: Flow) -> None:
    item = flow.authorize()
    event = GroupEvent.objects.get(aggregate_id=item, type="work.authorized")
    schemas.validate("work-item", event.body["workItem"])
    assert event.body["workItem"]["contract"] == flow.item(item).contract
    assert event.body["workItem"]["state"] == "open"


def test_start_grants_a_lease_and_token_only_in_the_receipt_spec_11_3_spec_12(flow: Flow) -> None:
    item = flow.drive_to("queued")
    receipt = flow.start(item)
    grants = receipt["grants"]
    assert set(grants) == {"executionLeaseId", "executionLeaseExpiresAt", "capabilityToken", "capabilityTokenExpiresAt"}
    assert grants["capabilityTokenExpiresAt"] <= grants["executionLeaseExpiresAt"]
    event = GroupEvent.objects.get(event_id=bare(receipt["events"][0]["eventId"], "eventId"))
    assert grants["capabilityToken"] not in event.document
    lease = ExecutionLease.objects.get(id=bare(grants["executionLeaseId"], "grants"))
    it = flow.item(item)
    assert (str(lease.agent_id), lease.session_epoch, lease.ownership_epoch, lease.status) == (
        flow.worker.id,
        flow.worker.session_epoch,
        it.ownership_epoch,
        "active",
    )
    schemas.validate("lease", event.body["executionLease"])
    assert event.body["executionLease"]["leaseId"] == grants["executionLeaseId"]
    # The stored receipt never holds the token: a replay has no grants.
    stored = ActionReceipt.objects.get(action_id=bare(receipt["actionId"], "actionId"))
    assert "grants" not in stored.receipt


def test_checkpoint_releases_the_lease_and_requeues_spec_10_2(flow: Flow) -> None:
    item = flow.drive_to("active")
    lease_id = flow.leases[item]
    receipt = flow.checkpoint(item)
    assert [e["kind"] for e in receipt["events"]] == ["work.checkpointed"]
    assert flow.item(item).state == "queued"
    assert ExecutionLease.objects.get(id=lease_id).status == "released"
    event = GroupEvent.objects.get(event_id=bare(receipt["events"][0]["eventId"], "eventId"))
    assert event.body["startBy"] and event.body["ownershipLeaseExpiresAt"] == event.body["startBy"]
    flow.start(item)
    assert flow.leases[item] != lease_id


def test_acceptance_carries_the_ownership_lease_with_its_start_by_spec_11_3(flow: Flow) -> None:
    item = flow.drive_to("offered")
    receipt = flow.accept(item)
    event = GroupEvent.objects.get(event_id=bare(receipt["events"][0]["eventId"], "eventId"))
    lease = event.body["ownershipLease"]
    schemas.validate("lease", lease)
    assert lease["leaseType"] == "ownership" and lease["startBy"] == event.body["ownershipLeaseExpiresAt"]
    assert event.body["assigneeId"] == flow.worker.urn and event.body["ownershipEpoch"] == 1
