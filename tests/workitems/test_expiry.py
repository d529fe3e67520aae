"""Expiry by the Celery tasks (spec 11.3/11.5): idempotent system Commands."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from missions.models import GroupEvent
from mwportal.protocol import ErrorCode, ProtocolError
from tests.workitems.flow import Flow
from workitems import tasks
from workitems.models import ExecutionLease


def events_of(item: str) -> list[str]:
    return list(GroupEvent.objects.filter(aggregate_id=item).order_by("sequence").values_list("type", flat=True))


def test_expire_leases_twice_appends_once(flow: Flow) -> None:
    item = flow.drive_to("active")
    with time_machine.travel(timezone.now() + timedelta(hours=1)):
        assert tasks.expire_leases() == 1
        assert tasks.expire_leases() == 0
    assert events_of(item).count("work.lease_expired") == 1
    assert ExecutionLease.objects.get(id=flow.leases[item]).status == "expired"
    assert flow.item(item).state == "queued"


def test_expiry_command_issued_twice_is_replayed(flow: Flow) -> None:
    """Two beat processes racing: the same deterministic system Command twice."""
    item = flow.drive_to("active")
    lease = ExecutionLease.objects.get(id=flow.leases[item])
    with time_machine.travel(timezone.now() + timedelta(hours=1)):
        first = tasks._issue(
            "work.expire_lease",
            flow.group,
            {"workitem": item, "ownership_epoch": 1, "lease_id": str(lease.id)},
            (lease.id, lease.expires_at.isoformat()),
            lease.expires_at,
        )
        second = tasks._issue(
            "work.expire_lease",
            flow.group,
            {"workitem": item, "ownership_epoch": 1, "lease_id": str(lease.id)},
            (lease.id, lease.expires_at.isoformat()),
            lease.expires_at,
        )
    assert (first, second) == (True, False)
    assert events_of(item).count("work.lease_expired") == 1


def test_expire_start_by_twice_appends_once_and_fences_the_owner_MWP_WRK_019(flow: Flow) -> None:
    item = flow.drive_to("queued")
    with time_machine.travel(timezone.now() + timedelta(hours=1)):
        assert tasks.expire_start_by() == 1
        assert tasks.expire_start_by() == 0
        assert events_of(item).count("work.start_deadline_missed") == 1
        with pytest.raises(ProtocolError) as info:
            flow.start(item)
        assert info.value.code == ErrorCode.WORK_STALE_OWNERSHIP
        # The Coordinator reassigns under a higher Ownership Epoch.
        flow.offer(item, agents=[flow.worker2])
        flow.accept(item, flow.worker2)
        assert flow.item(item).ownership_epoch == 2
        flow.start(item, flow.worker2)


def test_expire_blocked_leases_twice_appends_once_then_unblock_reopens(flow: Flow) -> None:
    item = flow.drive_to("blocked")
    with time_machine.travel(timezone.now() + timedelta(days=2)):
        assert tasks.expire_blocked_leases() == 1
        assert tasks.expire_blocked_leases() == 0
        assert events_of(item).count("work.blocked_lease_expired") == 1
        flow.unblock(item)
    assert flow.item(item).state == "open"


def test_unblock_with_a_live_owner_requeues(flow: Flow) -> None:
    item = flow.drive_to("blocked")
    flow.unblock(item)
    it = flow.item(item)
    assert (it.state, str(it.owner_id)) == ("queued", flow.worker.id)
    flow.start(item)


def test_lease_expiry_without_attempts_left_fails_with_evidence(flow: Flow) -> None:
    from tests.workitems.flow import contract

    item = flow.authorize(
        contract(
            retry={"max_attempts": 1, "backoff_seconds": 0, "backoff_multiplier": 1, "deadline": None, "max_cost": None}
        )
    )
    flow.offer(item)
    flow.accept(item)
    flow.start(item)
    with time_machine.travel(timezone.now() + timedelta(hours=1)):
        tasks.expire_leases()
    assert flow.item(item).state == "failed"
    failed = GroupEvent.objects.filter(aggregate_id=item, type="work.failed").get()
    assert failed.body["evidence"][0]["result"] == "fail"
    assert "retries exhausted" in failed.body["reason"]


def test_offer_expiry_appends_nothing_but_acceptance_is_refused(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, expires_in=60)
    count = GroupEvent.objects.count()
    with time_machine.travel(timezone.now() + timedelta(minutes=5)):
        for task in (tasks.expire_leases, tasks.expire_start_by, tasks.expire_blocked_leases):
            task()
        assert GroupEvent.objects.count() == count
        with pytest.raises(ProtocolError) as info:
            flow.accept(item)
    assert info.value.code == ErrorCode.WORK_OFFER_EXPIRED
    assert flow.item(item).state == "offered"


def test_the_beat_schedule_runs_every_expiry_task() -> None:
    from django.conf import settings

    from mwportal.celery import app

    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert scheduled >= {"workitems.expire_leases", "workitems.expire_start_by", "workitems.expire_blocked_leases"}
    app.loader.import_default_modules()
    assert scheduled <= set(app.tasks)
