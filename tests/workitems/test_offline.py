"""Bounded offline execution (PROTOCOL §11.5): buffered progress is reconciled
against its historical lease, and its usage charged, in one transaction."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.utils import timezone

from missions.models import GroupEvent, Mission
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import bare, urn
from tests.conftest import Because, refused
from tests.workitems.flow import BASIS, PROGRESS, Flow, checkpoint, stamp
from workitems import tasks
from workitems.models import Checkpoint, ExecutionLease
from workitems.offline import OFFLINE_EXTENSION, USAGE_RECORDED

INVALID = Because(ErrorCode.INVALID_COMMAND, "offline_binding_invalid")


def binding(flow: Flow, item: str, buffered_at: datetime, **overrides: Any) -> dict[str, Any]:
    """The binding's ``data``, as the reference implementation writes it."""
    lease = ExecutionLease.objects.get(id=flow.leases[item])
    grace = timedelta(seconds=settings.MWP_OFFLINE_GRACE_SECONDS)
    value = {
        "agentId": flow.worker.urn,
        "groupId": urn(flow.group),
        "workItemId": urn(item),
        "sessionEpoch": lease.session_epoch,
        "ownershipEpoch": lease.ownership_epoch,
        "executionLeaseId": urn(lease.id),
        "disconnectedAt": stamp(lease.started_at + timedelta(seconds=1)),
        "bufferedAt": stamp(buffered_at),
        "graceDeadline": stamp(lease.expires_at + grace),
        "executionLeaseExpiresAt": stamp(lease.expires_at),
        "resourceUsageDelta": {"modelTokens": 1200, "computeSeconds": 30},
    }
    value.update(overrides)
    return value


def send_buffered(flow: Flow, item: str, data: dict[str, Any], *, entry: Any = None, **payload: Any) -> dict[str, Any]:
    """The buffered checkpoint, re-signed under the Worker's current session."""
    extension = entry if entry is not None else {"version": "0.1.0", "critical": True, "data": data}
    body = {"ownershipEpoch": data["ownershipEpoch"], "executionLeaseId": data["executionLeaseId"],
            "checkpoint": checkpoint("offline"), "progress": PROGRESS, **payload}  # fmt: skip
    return flow.send(flow.worker, "work.checkpoint", item, body, extensions={OFFLINE_EXTENSION: extension})


def lease_of(flow: Flow, item: str) -> ExecutionLease:
    return ExecutionLease.objects.get(id=flow.leases[item])


def test_progress_buffered_in_the_grace_window_is_reconciled_with_its_usage_spec_11_5(flow: Flow) -> None:
    item = flow.drive_to("active")
    lease = lease_of(flow, item)
    buffered_at = lease.expires_at + timedelta(seconds=60)  # after expiry, inside the grace window
    later = lease.expires_at + timedelta(seconds=120)
    with time_machine.travel(later):
        tasks.expire_leases()  # the server saw the lease time out while the Worker was away
        old_epoch = flow.worker.session_epoch
        flow.worker.open_session()  # reconnect: a new session
        receipt = send_buffered(flow, item, binding(flow, item, buffered_at))

    assert [e["kind"] for e in receipt["events"]] == [USAGE_RECORDED, "work.checkpointed"]
    usage = GroupEvent.objects.get(event_id=bare(receipt["events"][0]["eventId"], "eventId")).body
    assert usage["executionLeaseId"] == urn(lease.id)
    offline = usage["offlineReconciliation"]
    assert (offline["executionSessionEpoch"], offline["reconciliationSessionEpoch"]) == (
        old_epoch,
        flow.worker.session_epoch,
    )
    assert offline["bufferedAt"] == stamp(buffered_at)
    assert usage["usageDelta"] == {"modelTokens": 1200, "computeSeconds": 30}
    it = flow.item(item)
    assert it.usage["modelTokens"] == 1200 and it.state == "queued"
    assert Mission.objects.get(group_id=flow.group).usage["modelTokens"] == 1200
    cp = Checkpoint.objects.get(workitem_id=item)
    assert (str(cp.lease_id), cp.state["phase"]) == (str(lease.id), "offline")
    with time_machine.travel(later + timedelta(seconds=1)):
        flow.start(item)  # the owner resumes from it under a new lease


def test_a_short_disconnection_with_the_lease_still_current_checkpoints_normally_spec_11_5(flow: Flow) -> None:
    item = flow.drive_to("active")
    buffered_at = lease_of(flow, item).started_at + timedelta(seconds=2)
    with time_machine.travel(buffered_at + timedelta(seconds=1)):
        receipt = send_buffered(flow, item, binding(flow, item, buffered_at, resourceUsageDelta={}))
    assert [e["kind"] for e in receipt["events"]] == ["work.checkpointed"]  # a zero delta appends no usage Event
    assert lease_of(flow, item).status == "released"
    assert flow.item(item).state == "queued"


def test_progress_buffered_after_the_grace_window_is_refused_spec_11_5(flow: Flow) -> None:
    item = flow.drive_to("active")
    lease = lease_of(flow, item)
    grace = timedelta(seconds=settings.MWP_OFFLINE_GRACE_SECONDS)
    too_late = lease.expires_at + grace + timedelta(seconds=5)
    with time_machine.travel(too_late + timedelta(seconds=5)):
        tasks.expire_leases()
        flow.worker.open_session()
        refused(INVALID, send_buffered, flow, item, binding(flow, item, too_late))
        # Stretching the grace deadline past the lease's window does not help.
        stretched = binding(flow, item, too_late, graceDeadline=stamp(too_late + timedelta(minutes=5)))
        refused(INVALID, send_buffered, flow, item, stretched)
    assert not Checkpoint.objects.filter(workitem_id=item).exists()


def test_progress_buffered_after_lease_closure_is_refused_spec_11_5(flow: Flow) -> None:
    item = flow.drive_to("active")
    flow.checkpoint(item)  # the Worker itself released the lease
    after = timezone.now() + timedelta(seconds=1)
    with time_machine.travel(after + timedelta(seconds=1)):
        refused(INVALID, send_buffered, flow, item, binding(flow, item, after))


def test_progress_for_a_changed_owner_is_refused_spec_11_5(flow: Flow) -> None:
    item = flow.drive_to("active")
    lease = lease_of(flow, item)
    buffered_at = lease.expires_at + timedelta(seconds=30)
    with time_machine.travel(lease.expires_at + timedelta(hours=2)):
        tasks.expire_leases()
    with time_machine.travel(lease.expires_at + timedelta(hours=3)):
        # Ownership lapsed too: the active WorkItem keeps its state, the offer fences the owner (§10.2).
        flow.offer(item, agents=[flow.worker2])
        flow.accept(item, flow.worker2)
        flow.worker.open_session()
        bound = binding(flow, item, buffered_at, graceDeadline=stamp(buffered_at + timedelta(seconds=1)))
        err = refused(INVALID, send_buffered, flow, item, bound)
    assert "owner" in err.message


def test_a_budget_overflow_refuses_both_the_charge_and_the_progress_spec_11_5(flow: Flow) -> None:
    item = flow.drive_to("active")
    lease = lease_of(flow, item)
    buffered_at = lease.expires_at + timedelta(seconds=10)
    with time_machine.travel(lease.expires_at + timedelta(seconds=20)):
        tasks.expire_leases()
        flow.worker.open_session()
        bound = binding(flow, item, buffered_at, resourceUsageDelta={"modelTokens": 10**9})
        refused(ErrorCode.BUDGET_EXCEEDED, send_buffered, flow, item, bound)
    assert flow.item(item).usage.get("modelTokens", 0) == 0
    assert not Checkpoint.objects.filter(workitem_id=item).exists()
    assert not GroupEvent.objects.filter(type=USAGE_RECORDED).exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"resourceUsageDelta": {"bananas": 1}}, "data/resourceUsageDelta/bananas"),
        ({"bufferedAt": "yesterday"}, "data/bufferedAt"),
        ({"extra": 1}, "data/extra"),
        ({"sessionEpoch": 0}, "data/sessionEpoch"),
    ],
)
def test_a_malformed_binding_names_its_member_spec_11_5(flow: Flow, change: dict[str, Any], field: str) -> None:
    item = flow.drive_to("active")
    bound = {**binding(flow, item, timezone.now()), **change}
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, send_buffered, flow, item, bound)
    assert err.details["field"] == f"/extensions/{OFFLINE_EXTENSION}/{field}"


def test_the_binding_is_critical_spec_11_5(flow: Flow) -> None:
    item = flow.drive_to("active")
    data = binding(flow, item, timezone.now())
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, send_buffered, flow, item, data,
                  entry={"version": "0.1.0", "critical": False, "data": data})  # fmt: skip
    assert err.details["field"] == f"/extensions/{OFFLINE_EXTENSION}/critical"


def test_the_binding_must_match_the_command_spec_11_5(flow: Flow) -> None:
    item = flow.drive_to("active")
    other = flow.drive_to("active")
    refused(INVALID, send_buffered, flow, item, binding(flow, item, timezone.now(), workItemId=urn(other)))


def test_usage_in_the_payload_beside_the_binding_is_refused_spec_11_5(flow: Flow) -> None:
    item = flow.drive_to("active")
    buffered_at = lease_of(flow, item).started_at + timedelta(seconds=2)
    with time_machine.travel(buffered_at + timedelta(seconds=1)):
        err = refused(ErrorCode.INVALID_COMMAND, send_buffered, flow, item, binding(flow, item, buffered_at),
                      usageDelta={"modelTokens": 1})  # fmt: skip
    assert err.details["field"] == "/payload/usageDelta"


def test_an_unknown_critical_extension_is_refused_and_a_non_critical_one_is_kept_spec_18(flow: Flow) -> None:
    item = flow.authorize()
    offer = {"candidateAgentIds": [flow.worker.urn], "offerExpiresInSeconds": 300, "selectionBasis": BASIS}
    must = {"urn:example:must-understand": {"version": "1.0.0", "critical": True, "data": {}}}
    err = refused(ErrorCode.UNKNOWN_CRITICAL_EXTENSION, flow.send, flow.coordinator, "work.offer", item, offer,
                  extensions=must)  # fmt: skip
    assert err.details["field"] == "extensions.urn:example:must-understand"
    hint = {"urn:example:hint": {"version": "1.0.0", "critical": False, "data": {}}}
    flow.send(flow.coordinator, "work.offer", item, offer, extensions=hint)
