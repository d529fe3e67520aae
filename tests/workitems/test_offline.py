"""Bounded offline execution (spec 11.5): buffered progress is reconciled
against its historical lease, and its usage charged, in one transaction."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.utils import timezone

from missions.models import GroupEvent, Mission
from mwportal.protocol import ErrorCode, ProtocolError, format_time
from tests.conftest import Because, refused
from tests.workitems.flow import PROGRESS, Flow
from workitems import tasks
from workitems.models import Checkpoint, ExecutionLease
from workitems.offline import OFFLINE_EXTENSION, USAGE_RECORDED


def binding(flow: Flow, item: str, buffered_at: datetime, **overrides: Any) -> dict[str, Any]:
    lease = ExecutionLease.objects.get(id=flow.leases[item])
    grace = timedelta(seconds=settings.MWP_OFFLINE_GRACE_SECONDS)
    value = {
        "critical": True,
        "agent": flow.worker.id,
        "group": flow.group,
        "workitem": item,
        "session_epoch": lease.session_epoch,
        "ownership_epoch": lease.ownership_epoch,
        "lease_id": str(lease.id),
        "disconnected_at": format_time(lease.started_at + timedelta(seconds=1)),
        "buffered_at": format_time(buffered_at),
        "grace_deadline": format_time(lease.expires_at + grace),
        "lease_expires_at": format_time(lease.expires_at),
        "usage_delta": {"tokens": 1200, "compute_seconds": 30},
    }
    value.update(overrides)
    return value


def send_buffered(flow: Flow, item: str, bound: dict[str, Any], **body: Any) -> dict[str, Any]:
    """The buffered checkpoint, re-signed under the Worker's current session."""
    return flow.worker.send(
        "work.checkpoint",
        flow.group,
        {"checkpoint": {"step": "offline"}, "progress": PROGRESS, **body},
        target=flow.target(item, None),
        lease_id=bound["lease_id"],
        extensions={OFFLINE_EXTENSION: bound},
    )


def lease_of(flow: Flow, item: str) -> ExecutionLease:
    return ExecutionLease.objects.get(id=flow.leases[item])


def test_progress_buffered_in_the_grace_window_is_reconciled_with_its_usage_MWP_WRK_021_MWP_WRK_022(
    flow: Flow,
) -> None:
    item = flow.drive_to("active")
    lease = lease_of(flow, item)
    buffered_at = lease.expires_at + timedelta(seconds=60)  # after expiry, inside the grace window
    later = lease.expires_at + timedelta(seconds=120)
    with time_machine.travel(later):
        tasks.expire_leases()  # the server saw the lease time out while the Worker was away
        old_epoch = flow.worker.session_epoch
        flow.worker.open_session()  # reconnect: a new session
        bound = binding(flow, item, buffered_at)
        receipt = send_buffered(flow, item, bound)

    types = [e["type"] for e in receipt["events"]]
    assert types == [USAGE_RECORDED, "work.checkpointed"]
    usage_event = GroupEvent.objects.get(event_id=receipt["events"][0]["event_id"])
    assert usage_event.body["historical"] == {
        "session_epoch": old_epoch,
        "lease_id": str(lease.id),
        "ownership_epoch": lease.ownership_epoch,
    }
    assert usage_event.body["reconciliation"] == {"session_epoch": flow.worker.session_epoch}
    assert usage_event.body["delta"] == {"tokens": 1200, "compute_seconds": 30}
    it = flow.item(item)
    assert it.usage["tokens"] == 1200 and it.state == "queued"
    assert Mission.objects.get(group_id=flow.group).usage["tokens"] == 1200
    cp = Checkpoint.objects.get(workitem_id=item)
    assert (str(cp.lease_id), cp.state) == (str(lease.id), {"step": "offline"})
    with time_machine.travel(later + timedelta(seconds=1)):
        flow.start(item)  # the owner resumes from it under a new lease


def test_short_disconnection_with_the_lease_still_current_checkpoints_normally(flow: Flow) -> None:
    item = flow.drive_to("active")
    buffered_at = lease_of(flow, item).started_at + timedelta(seconds=2)
    with time_machine.travel(buffered_at + timedelta(seconds=1)):
        receipt = send_buffered(flow, item, binding(flow, item, buffered_at, usage_delta={}))
    assert [e["type"] for e in receipt["events"]] == ["work.checkpointed"]  # a zero delta appends no usage Event
    assert lease_of(flow, item).status == "released"
    assert flow.item(item).state == "queued"


def test_progress_buffered_after_the_grace_window_is_refused_MWP_WRK_021(flow: Flow) -> None:
    item = flow.drive_to("active")
    lease = lease_of(flow, item)
    grace = timedelta(seconds=settings.MWP_OFFLINE_GRACE_SECONDS)
    too_late = lease.expires_at + grace + timedelta(seconds=5)
    with time_machine.travel(too_late + timedelta(seconds=5)):
        tasks.expire_leases()
        flow.worker.open_session()
        refused(
            Because(ErrorCode.INVALID_COMMAND, "offline_binding_invalid"),
            send_buffered,
            flow,
            item,
            binding(flow, item, too_late),
        )
        # Stretching the grace deadline past the lease's window does not help.
        stretched = binding(flow, item, too_late, grace_deadline=format_time(too_late + timedelta(minutes=5)))
        refused(Because(ErrorCode.INVALID_COMMAND, "offline_binding_invalid"), send_buffered, flow, item, stretched)
    assert not Checkpoint.objects.filter(workitem_id=item).exists()


def test_progress_buffered_after_lease_closure_is_refused_MWP_WRK_021(flow: Flow) -> None:
    item = flow.drive_to("active")
    flow.checkpoint(item)  # the Worker itself released the lease
    after = timezone.now() + timedelta(seconds=1)
    with time_machine.travel(after + timedelta(seconds=1)):
        refused(
            Because(ErrorCode.INVALID_COMMAND, "offline_binding_invalid"),
            send_buffered,
            flow,
            item,
            binding(flow, item, after),
        )


def test_progress_for_a_changed_owner_is_refused_MWP_WRK_021(flow: Flow) -> None:
    item = flow.drive_to("active")
    lease = lease_of(flow, item)
    buffered_at = lease.expires_at + timedelta(seconds=30)
    with time_machine.travel(lease.expires_at + timedelta(hours=2)):
        tasks.expire_leases()
    with time_machine.travel(lease.expires_at + timedelta(hours=3)):
        assert tasks.expire_start_by() == 1  # ownership lapses too
        flow.offer(item, agents=[flow.worker2])
        flow.accept(item, flow.worker2)
        flow.worker.open_session()
        bound = binding(flow, item, buffered_at, grace_deadline=format_time(buffered_at + timedelta(seconds=1)))
        err = refused(Because(ErrorCode.INVALID_COMMAND, "offline_binding_invalid"), send_buffered, flow, item, bound)
    assert "owner" in err.message


def test_a_budget_overflow_refuses_both_the_charge_and_the_progress_MWP_WRK_022(flow: Flow) -> None:
    item = flow.drive_to("active")
    lease = lease_of(flow, item)
    buffered_at = lease.expires_at + timedelta(seconds=10)
    with time_machine.travel(lease.expires_at + timedelta(seconds=20)):
        tasks.expire_leases()
        flow.worker.open_session()
        bound = binding(flow, item, buffered_at, usage_delta={"tokens": 10**9})
        refused(ErrorCode.BUDGET_EXCEEDED, send_buffered, flow, item, bound)
    assert flow.item(item).usage.get("tokens", 0) == 0
    assert not Checkpoint.objects.filter(workitem_id=item).exists()
    assert not GroupEvent.objects.filter(type=USAGE_RECORDED).exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"critical": False}, "critical"),
        ({"usage_delta": {"bananas": 1}}, "usage_delta.bananas"),
        ({"buffered_at": "yesterday"}, "buffered_at"),
        ({"extra": 1}, "extra"),
    ],
)
def test_a_malformed_binding_names_its_member(flow: Flow, change: dict[str, Any], field: str) -> None:
    item = flow.drive_to("active")
    bound = {**binding(flow, item, timezone.now()), **change}
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, send_buffered, flow, item, bound)
    assert err.details["field"] == f"extensions.{OFFLINE_EXTENSION}.{field}"


def test_the_binding_must_match_the_command(flow: Flow) -> None:
    item = flow.drive_to("active")
    other = flow.drive_to("active")
    bound = binding(flow, item, timezone.now(), workitem=other)
    refused(Because(ErrorCode.INVALID_COMMAND, "offline_binding_invalid"), send_buffered, flow, item, bound)


def test_usage_in_the_body_beside_the_binding_is_refused(flow: Flow) -> None:
    item = flow.drive_to("active")
    buffered_at = lease_of(flow, item).started_at + timedelta(seconds=2)
    with time_machine.travel(buffered_at + timedelta(seconds=1)), pytest.raises(ProtocolError) as info:
        send_buffered(flow, item, binding(flow, item, buffered_at), usage={"tokens": 1})
    assert info.value.details["field"] == "body.usage"


def test_an_unknown_critical_extension_is_refused_and_a_non_critical_one_is_kept(flow: Flow) -> None:
    item = flow.authorize()
    offer = {"agents": [flow.worker.id], "expires_at": format_time(timezone.now() + timedelta(minutes=5))}
    from tests.workitems.flow import BASIS

    err = refused(
        ErrorCode.UNKNOWN_CRITICAL_EXTENSION,
        flow.coordinator.send,
        "work.offer",
        flow.group,
        {**offer, "selection_basis": BASIS},
        target=flow.target(item),
        extensions={"urn:example:must-understand": {"critical": True}},
    )
    assert err.details["field"] == "extensions.urn:example:must-understand"
    flow.coordinator.send(
        "work.offer",
        flow.group,
        {**offer, "selection_basis": BASIS},
        target=flow.target(item),
        extensions={"urn:example:hint": {"critical": False}},
    )
