"""Child Missions and terminal Mission states (spec 10.2, last rows)."""

from __future__ import annotations

import uuid

import pytest

from missions.models import Group, GroupEvent, Mission
from missions.verify import verify_group_log
from mwportal.protocol import ErrorCode, ProtocolError
from tests.conftest import group_revision
from tests.workitems.flow import Flow
from workitems.models import ExecutionLease


def group_target(group: str) -> dict[str, object]:
    return {"kind": "group", "id": group, "revision": group_revision(group)}


def test_parent_mission_cancellation_reaches_every_unfinished_workitem(flow: Flow) -> None:
    items = {
        state: flow.drive_to(state)
        for state in ("open", "offered", "queued", "active", "blocked", "submitted", "verified", "failed")
    }
    lease = flow.leases[items["active"]]
    flow.owner.send("mission.cancel", flow.group, {"reason": "customer withdrew"}, target=group_target(flow.group))
    states = {state: flow.item(i).state for state, i in items.items()}
    assert states == {
        "open": "cancelled",
        "offered": "cancelled",
        "queued": "cancelled",
        "active": "cancelled",
        "blocked": "cancelled",
        "submitted": "cancelled",
        "verified": "verified",
        "failed": "failed",
    }
    assert ExecutionLease.objects.get(id=lease).status == "revoked"
    assert Mission.objects.get(id=flow.mission).status == "cancelled"
    assert verify_group_log(Group.objects.get(id=flow.group))[1] is None
    with pytest.raises(ProtocolError) as info:
        flow.authorize()
    assert info.value.code == ErrorCode.INVALID_STATE_TRANSITION


def test_parent_mission_failure_fails_unfinished_workitems_with_evidence(flow: Flow) -> None:
    item = flow.drive_to("queued")
    flow.owner.send("mission.fail", flow.group, {"reason": "funding cut"}, target=group_target(flow.group))
    assert flow.item(item).state == "failed"
    failed = GroupEvent.objects.get(aggregate_id=item, type="work.failed")
    assert failed.body["evidence"][0]["result"] == "fail"


def _child(flow: Flow, item: str, policy: str) -> tuple[str, str]:
    mission, group = str(uuid.uuid4()), str(uuid.uuid4())
    flow.coordinator.send(
        "mission.create_child",
        flow.group,
        {
            "mission": mission,
            "group": group,
            "title": "Deep dive",
            "objective": "sub-research",
            "failure_policy": policy,
        },
        target=flow.target(item),
    )
    return mission, group


def test_child_mission_blocks_parent_and_its_approval_verifies_it(flow: Flow) -> None:
    item = flow.drive_to("active")
    mission, group = _child(flow, item, "fail_parent")
    parent = flow.item(item)
    assert (parent.state, parent.owner_id, str(parent.child_mission_id)) == ("blocked", None, mission)
    child = Mission.objects.get(id=mission)
    assert (str(child.parent_group_id), str(child.parent_workitem_id)) == (flow.group, item)
    assert verify_group_log(Group.objects.get(id=group))[1] is None
    with pytest.raises(ProtocolError):
        flow.unblock(item)  # waits for the child
    flow.coordinator.send("mission.approve", group, {}, target=group_target(group))  # coordinator is child owner
    assert flow.item(item).state == "verified"
    approved = GroupEvent.objects.get(group_id=flow.group, type="work.child_approved")
    assert approved.body["evidence"][0]["result"] == "pass"
    assert verify_group_log(Group.objects.get(id=flow.group))[1] is None


def test_child_failure_follows_the_declared_policy(flow: Flow) -> None:
    fail_item = flow.drive_to("open")
    _, fail_group = _child(flow, fail_item, "fail_parent")
    keep_item = flow.drive_to("open")
    _, keep_group = _child(flow, keep_item, "keep_blocked")
    flow.coordinator.send("mission.fail", fail_group, {"reason": "dead end"}, target=group_target(fail_group))
    flow.coordinator.send("mission.cancel", keep_group, {"reason": "dead end"}, target=group_target(keep_group))
    assert flow.item(fail_item).state == "failed"
    kept = flow.item(keep_item)
    assert (kept.state, kept.child_mission_id) == ("blocked", None)
    flow.unblock(keep_item)  # the Coordinator takes it back
    assert flow.item(keep_item).state == "open"


def test_mission_approval_needs_finished_workitems(flow: Flow) -> None:
    flow.drive_to("queued")
    with pytest.raises(ProtocolError) as info:
        flow.owner.send("mission.approve", flow.group, {}, target=group_target(flow.group))
    assert info.value.code == ErrorCode.INVALID_STATE_TRANSITION


def test_a_failed_parent_workitem_stops_waiting_for_its_child(flow: Flow) -> None:
    """Found by the stateful test: fail, re-offer, block, unblock must work, and
    the old child's approval no longer touches the WorkItem."""
    item = flow.drive_to("open")
    _, child_group = _child(flow, item, "keep_blocked")
    flow.fail(item)
    flow.offer(item)
    flow.accept(item)
    flow.start(item)
    flow.block(item)
    flow.unblock(item)
    assert flow.item(item).state == "queued"
    flow.coordinator.send("mission.cancel", child_group, {"reason": "moot"}, target=group_target(child_group))
    assert flow.item(item).state == "queued"
