"""Expiry by the Celery tasks (PROTOCOL §11.3, §11.5): idempotent Commands of the
Organization's control plane (``ext.mwportal.work.lease_expire``, ``Auth.SERVICE``)."""

from __future__ import annotations

from datetime import timedelta

import time_machine
from django.conf import settings
from django.utils import timezone

from missions import service_keys
from missions.models import ActionReceipt, Group, GroupEvent
from mwportal.protocol import ErrorCode, schemas
from mwportal.protocol.ids import urn
from tests.conftest import refused
from tests.workitems.flow import Flow, contract
from workitems import tasks
from workitems.models import ExecutionLease

LEASE_EXPIRED = "ext.mwportal.work.lease_expired"
FENCED = "ext.mwportal.work.ownership_fenced"


def kinds_of(item: str) -> list[str]:
    return list(GroupEvent.objects.filter(aggregate_id=item).order_by("sequence").values_list("type", flat=True))


def test_expire_leases_twice_appends_once_spec_11_3(flow: Flow) -> None:
    """A timed-out Execution Lease changes no state (§10.2 has no row for it): the WorkItem
    stays active with no lease; once the owner's offline grace (§11.5) and the backoff have
    passed, the retry policy re-offers it to the same Worker (work.offer from active with no
    live owner, the expired owner fenced first; §11.4, §11.5)."""
    item = flow.drive_to("active")
    lease = ExecutionLease.objects.get(id=flow.leases[item])
    with time_machine.travel(lease.expires_at + timedelta(seconds=5)):
        assert tasks.expire_leases() == 1
        assert tasks.expire_leases() == 0
        assert kinds_of(item).count(LEASE_EXPIRED) == 1 and kinds_of(item)[-1] == LEASE_EXPIRED
        assert ExecutionLease.objects.get(id=lease.id).status == "expired"
        it = flow.item(item)
        assert (it.state, str(it.owner_id), it.needs_new_attempt) == ("active", flow.worker.id, True)
        expired = GroupEvent.objects.get(aggregate_id=item, type=LEASE_EXPIRED)
        assert (expired.body["leaseType"], expired.body["leaseId"]) == ("execution", urn(lease.id))
        assert expired.body["retryNotBefore"] and expired.body["status"] == "active"
        assert tasks.retry_failed() == 0  # the owner may still reconcile buffered progress (§11.5)
    grace = timedelta(seconds=settings.MWP_OFFLINE_GRACE_SECONDS)
    with time_machine.travel(lease.expires_at + grace + timedelta(seconds=1)):
        assert tasks.retry_failed() == 1
        assert kinds_of(item)[-2:] == [FENCED, "work.offer.created"]
        assert flow.item(item).state == "offered"
        flow.accept(item)
        flow.start(item)
        assert flow.item(item).attempt == 2


def test_the_expiry_command_is_the_control_planes_signed_command_spec_15_1(flow: Flow) -> None:
    """Two beat processes racing issue the same deterministic Command: accepted once."""
    item = flow.drive_to("active")
    lease = ExecutionLease.objects.select_related("workitem__group").get(id=flow.leases[item])
    key = (lease.id, lease.expires_at.isoformat())
    with time_machine.travel(timezone.now() + timedelta(hours=1)):
        first = tasks.issue_expiry(lease.workitem, "execution", str(lease.id), key, lease.expires_at)
        second = tasks.issue_expiry(lease.workitem, "execution", str(lease.id), key, lease.expires_at)
    assert (first, second) == (True, False)
    assert kinds_of(item).count(LEASE_EXPIRED) == 1
    event = GroupEvent.objects.get(aggregate_id=item, type=LEASE_EXPIRED)
    document = event.as_wire()
    schemas.validate("event", document)
    organization = str(Group.objects.get(id=flow.group).organization_id)
    control_plane = service_keys.principal_id(organization, service_keys.CONTROL_PLANE)
    assert document["actor"] == {"type": "service", "id": urn(control_plane)}
    receipt = ActionReceipt.objects.get(action_id=document["cause"]["id"].removeprefix("urn:uuid:"))
    assert str(receipt.actor) == control_plane


def test_an_agent_cannot_expire_a_lease_spec_11_5(flow: Flow) -> None:
    item = flow.drive_to("active")
    payload = {"ownershipEpoch": 1, "leaseType": "execution", "leaseId": urn(flow.leases[item])}
    refused(ErrorCode.AUTH_FORBIDDEN, flow.send, flow.coordinator, "ext.mwportal.work.lease_expire", item, payload)


def test_expire_start_by_twice_appends_once_and_fences_the_owner_spec_11_5(flow: Flow) -> None:
    item = flow.drive_to("queued")
    with time_machine.travel(timezone.now() + timedelta(hours=1)):
        assert tasks.expire_start_by() == 1
        assert tasks.expire_start_by() == 0
        assert kinds_of(item).count(FENCED) == 1
        fenced = GroupEvent.objects.get(aggregate_id=item, type=FENCED).body
        assert (fenced["reason"], fenced["agentId"], fenced["ownershipEpoch"]) == (
            "start_by_missed",
            flow.worker.urn,
            1,
        )
        refused(ErrorCode.WORK_STALE_OWNERSHIP, flow.start, item)
        # The Coordinator reassigns under a higher Ownership Epoch.
        flow.offer(item, agents=[flow.worker2])
        flow.accept(item, flow.worker2)
        assert flow.item(item).ownership_epoch == 2
        flow.start(item, flow.worker2)


def test_expire_blocked_leases_twice_appends_once_then_unblock_reopens_spec_10_2(flow: Flow) -> None:
    item = flow.drive_to("blocked")
    with time_machine.travel(timezone.now() + timedelta(days=2)):
        assert tasks.expire_blocked_leases() == 1
        assert tasks.expire_blocked_leases() == 0
        assert kinds_of(item).count(FENCED) == 1
        assert GroupEvent.objects.get(aggregate_id=item, type=LEASE_EXPIRED).body["leaseType"] == "blocked"
        receipt = flow.unblock(item)
    assert flow.item(item).state == "open"
    assert (
        GroupEvent.objects.get(event_id=receipt["events"][0]["eventId"].removeprefix("urn:uuid:")).body["status"]
        == "open"
    )


def test_unblock_with_a_live_owner_requeues_spec_10_2(flow: Flow) -> None:
    item = flow.drive_to("blocked")
    flow.unblock(item)
    it = flow.item(item)
    assert (it.state, str(it.owner_id)) == ("queued", flow.worker.id)
    flow.start(item)


def test_lease_expiry_without_attempts_left_fails_with_evidence_spec_11_4(flow: Flow) -> None:
    item = flow.authorize(contract(retryPolicy={"maxAttempts": 1, "backoff": "none", "maxDelay": "PT0S",
                                                "retryableFailures": []}))  # fmt: skip
    flow.offer(item)
    flow.accept(item)
    flow.start(item)
    with time_machine.travel(timezone.now() + timedelta(hours=1)):
        tasks.expire_leases()
    assert flow.item(item).state == "failed"
    failed = GroupEvent.objects.get(aggregate_id=item, type="work.failed").body
    schemas.validate("evidence", failed["evidence"][0])
    assert failed["evidence"][0]["result"] == "failed" and failed["evidence"][0]["generatedBy"]["type"] == "service"
    assert "retries exhausted" in failed["reason"]


def test_offer_expiry_appends_nothing_but_acceptance_is_refused_spec_10_2(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, expires_in=60)
    count = GroupEvent.objects.count()
    with time_machine.travel(timezone.now() + timedelta(minutes=5)):
        for task in (tasks.expire_leases, tasks.expire_start_by, tasks.expire_blocked_leases):
            task()
        assert GroupEvent.objects.count() == count
        refused(ErrorCode.WORK_OFFER_EXPIRED, flow.accept, item)
    assert flow.item(item).state == "offered"


def test_the_beat_schedule_runs_every_expiry_task() -> None:
    from django.conf import settings

    from mwportal.celery import app

    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert scheduled >= {"workitems.expire_leases", "workitems.expire_start_by", "workitems.expire_blocked_leases"}
    app.loader.import_default_modules()
    assert scheduled <= set(app.tasks)
