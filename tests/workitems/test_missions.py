"""Child Missions and terminal Mission states (PROTOCOL §7.3, §10.2 last rows, §14)."""

from __future__ import annotations

import io
import uuid

from artifacts.store import store_stream
from missions.models import Agent, Group, GroupEvent, Mission
from missions.verify import verify_group_log
from mwportal.protocol import ErrorCode, schemas
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import sign_document
from tests.conftest import AgentKey, group_revision, refused
from tests.workitems.flow import COORDINATOR_EPOCH, Flow, stamp
from workitems.models import ExecutionLease


def end_mission(by: AgentKey, kind: str, group: str, reason: str = "customer withdrew") -> dict[str, object]:
    # An Agent's mission.terminate is a Coordinator's: it carries the Coordinator Epoch (§15.1).
    epoch = {"coordinator_epoch": COORDINATOR_EPOCH} if kind == "mission.terminate" else {}
    return by.send(kind, group, {"reason": reason}, expected_revision=group_revision(group), **epoch)


def held(flow: Flow, group: str, by: AgentKey) -> str:
    """Bytes stored into ``group``; their ``sha256:`` hash."""
    agent = Agent.objects.get(id=by.id)
    blob = store_stream(io.BytesIO(b"# findings\n"), "text/markdown", Group.objects.get(id=group), agent, 10_000)
    return "sha256:" + blob.sha256


def submit(by: AgentKey, group: str, hashes: list[str]) -> dict[str, object]:
    """``mission.submit_for_approval`` by the Group's Coordinator (§7.3)."""
    payload = {"artifactHashes": hashes, "missionRevision": group_revision(group)}
    return by.send("mission.submit_for_approval", group, payload, coordinator_epoch=COORDINATOR_EPOCH)


def approve(by: AgentKey, group: str, hashes: list[str], revision: int | None = None) -> dict[str, object]:
    """``mission.approve`` carrying the Approval document ``by`` signed over the submission (§7.3)."""
    submitted = GroupEvent.objects.filter(group_id=group, type="mission.submitted_for_approval").order_by("-sequence")
    last = submitted.first()
    revision = revision or (last.body["missionRevision"] if last is not None else group_revision(group))
    mission = Mission.objects.get(group_id=group)
    approval = {
        "approvalId": urn(uuid.uuid4()), "kind": "child_mission" if mission.parent_group_id else "mission_final",
        "decision": "approved", "missionId": urn(mission.id), "groupId": urn(group), "missionRevision": revision,
        "artifactHashes": hashes, "acceptancePolicyVersion": "1.0.0", "approver": by.actor, "comments": "",
        "conditions": [], "occurredAt": stamp(),
    }  # fmt: skip
    signed = sign_document(approval, key_id=by.key.key_id, seed=by.key.seed, profile="approval")
    payload = {
        "approvalId": approval["approvalId"],
        "missionRevision": revision,
        "artifactHashes": hashes,
        "acceptancePolicyVersion": "1.0.0",
        "approval": signed,
    }
    return by.send("mission.approve", group, payload, expected_revision=group_revision(group))


def test_cancelling_the_mission_reaches_every_unfinished_workitem_spec_10_2(flow: Flow) -> None:
    items = {
        state: flow.drive_to(state)
        for state in ("open", "offered", "queued", "active", "blocked", "submitted", "verified", "failed")
    }
    lease = flow.leases[items["active"]]
    end_mission(flow.owner, "mission.cancel", flow.group)
    states = {state: flow.item(i).state for state, i in items.items()}
    assert states == {
        "open": "cancelled", "offered": "cancelled", "queued": "cancelled", "active": "cancelled",
        "blocked": "cancelled", "submitted": "cancelled", "verified": "verified", "failed": "failed",
    }  # fmt: skip
    assert ExecutionLease.objects.get(id=lease).status == "revoked"
    assert Mission.objects.get(id=flow.mission).status == "cancelled"
    assert verify_group_log(Group.objects.get(id=flow.group))[1] is None
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.authorize)


def test_terminating_the_mission_fails_unfinished_workitems_with_evidence_spec_10_2(flow: Flow) -> None:
    item = flow.drive_to("queued")
    end_mission(flow.coordinator, "mission.terminate", flow.group, "funding cut")
    assert flow.item(item).state == "failed"
    failed = GroupEvent.objects.get(aggregate_id=item, type="work.failed").body
    schemas.validate("evidence", failed["evidence"][0])
    assert failed["evidence"][0]["result"] == "failed"
    assert Mission.objects.get(id=flow.mission).status == "failed"


def test_a_child_mission_blocks_its_parent_and_its_approval_verifies_it_spec_14(flow: Flow) -> None:
    item = flow.drive_to("active")
    mission, group = flow.create_child(item, "fail_parent_work_item")
    parent = flow.item(item)
    assert (parent.state, parent.owner_id, str(parent.child_mission_id)) == ("blocked", None, mission)
    blocked = GroupEvent.objects.get(aggregate_id=item, type="work.blocked").body
    assert blocked["childMissionId"] == urn(mission)
    child = Mission.objects.get(id=mission)
    assert (str(child.parent_group_id), str(child.parent_workitem_id)) == (flow.group, item)
    created = GroupEvent.objects.get(group_id=group, type="mission.created").body["mission"]
    assert created["parent"] == {"missionId": urn(flow.mission), "workItemId": urn(item), "depth": 1}
    assert verify_group_log(Group.objects.get(id=group))[1] is None
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.unblock, item)  # it waits for the child
    findings = [held(flow, group, flow.worker2)]
    submit(flow.worker2, group, findings)  # the child's Coordinator
    approve(flow.coordinator, group, findings)  # the parent Coordinator is the child's MissionOwner
    assert flow.item(item).state == "verified"
    accepted = GroupEvent.objects.get(group_id=flow.group, type="work.result.accepted").body
    assert accepted["evidence"][0]["result"] == "passed"
    approved = GroupEvent.objects.get(group_id=group, type="mission.approved").body["approval"]
    assert approved["kind"] == "child_mission"
    assert verify_group_log(Group.objects.get(id=flow.group))[1] is None


def test_a_child_failure_follows_the_declared_policy_spec_14(flow: Flow) -> None:
    fail_item = flow.drive_to("open")
    _, fail_group = flow.create_child(fail_item, "fail_parent_work_item")
    keep_item = flow.drive_to("open")
    _, keep_group = flow.create_child(keep_item, "block_parent_work_item")
    end_mission(flow.worker2, "mission.terminate", fail_group, "dead end")  # the child's Coordinator
    end_mission(flow.coordinator, "mission.cancel", keep_group, "dead end")
    assert flow.item(fail_item).state == "failed"
    kept = flow.item(keep_item)
    assert (kept.state, kept.child_mission_id) == ("blocked", None)
    flow.unblock(keep_item)  # the Coordinator takes it back
    assert flow.item(keep_item).state == "open"


def test_a_child_failure_can_fail_the_parent_mission_spec_14(flow: Flow) -> None:
    item = flow.drive_to("open")
    other = flow.drive_to("queued")
    _, child_group = flow.create_child(item, "fail_parent_mission")
    end_mission(flow.worker2, "mission.terminate", child_group, "dead end")
    assert (flow.item(item).state, flow.item(other).state) == ("failed", "failed")
    assert Mission.objects.get(id=flow.mission).status == "failed"
    assert GroupEvent.objects.filter(group_id=flow.group, type="mission.terminated").count() == 1


def test_submission_needs_finished_workitems_and_approval_a_submission_spec_7_3(flow: Flow) -> None:
    flow.drive_to("queued")
    hashes = [held(flow, flow.group, flow.worker)]
    refused(ErrorCode.INVALID_STATE_TRANSITION, submit, flow.coordinator, flow.group, hashes)
    refused(ErrorCode.INVALID_STATE_TRANSITION, approve, flow.owner, flow.group, hashes, 1)


def test_a_submission_names_artifacts_of_this_group_spec_7_3_spec_13_3(flow: Flow) -> None:
    flow.drive_to("verified")
    err = refused(ErrorCode.INVALID_COMMAND, submit, flow.coordinator, flow.group, ["sha256:" + "cd" * 32])
    assert err.details["field"] == "/payload/artifactHashes"


def test_changes_requested_reopen_the_submitted_revision_spec_7_3(flow: Flow) -> None:
    flow.drive_to("verified")
    hashes = [held(flow, flow.group, flow.worker)]
    submit(flow.coordinator, flow.group, hashes)
    revision = GroupEvent.objects.get(group_id=flow.group, type="mission.submitted_for_approval").body[
        "missionRevision"
    ]
    payload = {"missionRevision": revision, "feedback": "Add the appendix."}
    flow.owner.send("mission.request_changes", flow.group, payload, expected_revision=group_revision(flow.group))
    requested = GroupEvent.objects.get(group_id=flow.group, type="mission.changes_requested").body
    assert requested["newRevision"] == group_revision(flow.group) and requested["feedback"] == "Add the appendix."
    refused(ErrorCode.INVALID_STATE_TRANSITION, approve, flow.owner, flow.group, hashes, revision)
    flow.drive_to("verified")  # the Coordinator adds corrective work to the same Mission
    submit(flow.coordinator, flow.group, hashes)
    approve(flow.owner, flow.group, hashes)
    assert Mission.objects.get(id=flow.mission).status == "approved"


def test_mission_approval_by_its_human_owner_spec_7_3(flow: Flow) -> None:
    flow.drive_to("verified")
    hashes = [held(flow, flow.group, flow.worker)]
    submit(flow.coordinator, flow.group, hashes)
    refused(ErrorCode.INVALID_COMMAND, approve, flow.owner, flow.group, ["sha256:" + "cd" * 32])
    receipt = approve(flow.owner, flow.group, hashes)
    approval = GroupEvent.objects.get(group_id=flow.group, type="mission.approved").body["approval"]
    schemas.validate("approval", approval)
    assert (approval["kind"], approval["approver"]) == ("mission_final", flow.owner.actor)
    assert receipt["events"][-1]["kind"] == "mission.approved"
    assert Mission.objects.get(id=flow.mission).status == "approved"


def test_a_failed_parent_workitem_stops_waiting_for_its_child_spec_14(flow: Flow) -> None:
    """Found by the stateful test: fail, re-offer, block, unblock must work, and
    the old child's end no longer touches the WorkItem."""
    item = flow.drive_to("open")
    _, child_group = flow.create_child(item, "block_parent_work_item")
    flow.fail(item)
    flow.offer(item)
    flow.accept(item)
    flow.start(item)
    flow.block(item)
    flow.unblock(item)
    assert flow.item(item).state == "queued"
    end_mission(flow.coordinator, "mission.cancel", child_group, "moot")
    assert flow.item(item).state == "queued"
