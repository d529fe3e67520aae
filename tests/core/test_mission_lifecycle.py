"""The Mission lifecycle of PROTOCOL §7.1, row by row, through the REST binding.

The oracle is §7.1's table, written out here (``ROWS``), not read from the
code: each row's Command moves a Mission in its current state to its next
state when its authority sends it, and is refused from every other state and
by anyone else. ``approved``, ``cancelled`` and ``failed`` are terminal: an
approved Mission is never reopened or rewritten; corrections open a linked
follow-up Mission.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from missions.authority import accept
from missions.commands import group_service_command
from missions.handlers.missions import mission_document
from missions.models import Group, GroupEvent, Mission
from missions.verify import verify_group_log
from mwportal.protocol import ErrorCode, schemas
from mwportal.protocol.ids import urn
from tests.api.support import bearer, events_url, http
from tests.conftest import AgentKey, add_member, group_revision, make_person, refused
from tests.core.mission_support import (
    approval,
    approve,
    end,
    flow_fixture,  # noqa: F401  (the flow fixture)
    held,
    new_mission_payload,
    request_changes,
    rest_fixture,  # noqa: F401  (every Command over REST)
    status,
    submit,
    submitted_revision,
    to_approved,
    verified,
)
from tests.workitems.flow import Flow, contract, give_card, stamp

# §7.1, as the specification writes it: (current state, Command or cause, next state, authority).
ROWS = [
    ("none", "mission.create", "active", "human MissionOwner"),
    ("none", "mission.create_follow_up", "active", "the same human MissionOwner"),
    ("none", "mission.create_child", "active", "Parent Coordinator as child MissionOwner"),
    ("active", "mission.submit_for_approval", "awaiting_approval", "current Coordinator"),
    ("awaiting_approval", "mission.request_changes", "active", "MissionOwner"),
    ("awaiting_approval", "mission.approve", "approved", "MissionOwner"),
    ("non-terminal", "mission.cancel", "cancelled", "MissionOwner or Organization policy"),
    ("non-terminal", "mission.terminate", "failed", "Coordinator or Organization policy"),
]
TERMINAL = ("approved", "cancelled", "failed")
NON_TERMINAL = ("active", "awaiting_approval")
STATES = (*NON_TERMINAL, *TERMINAL)
TRANSITIONS = [row for row in ROWS if row[0] != "none"]


def _from_states(row: tuple[str, str, str, str]) -> tuple[str, ...]:
    return NON_TERMINAL if row[0] == "non-terminal" else (row[0],)


def reach(flow: Flow, state: str) -> list[str]:
    """The Survey Mission brought to ``state`` through §7.1's own rows; its held Artifact set."""
    verified(flow)
    hashes = [held(flow.group, flow.worker)]
    if state in ("awaiting_approval", "approved"):
        submit(flow.coordinator, flow.group, hashes)
    if state == "approved":
        approve(flow.owner, flow.group, hashes)
    if state == "cancelled":
        end(flow.owner, "mission.cancel", flow.group)
    if state == "failed":
        end(flow.coordinator, "mission.terminate", flow.group)
    assert status(flow.group) == state
    return hashes


def issue(flow: Flow, kind: str, hashes: list[str], by: AgentKey | None = None) -> dict[str, Any]:
    """``kind`` sent by the row's authority (or ``by``)."""
    if kind == "mission.submit_for_approval":
        return submit(by or flow.coordinator, flow.group, hashes)
    if kind == "mission.request_changes":
        return request_changes(by or flow.owner, flow.group)
    if kind == "mission.approve":  # the MissionOwner's signed Approval, whoever sends it
        document = approval(flow.owner, flow.group, hashes, submitted_revision(flow.group))
        return approve(by or flow.owner, flow.group, hashes, document)
    if kind == "mission.cancel":
        return end(by or flow.owner, kind, flow.group)
    assert kind == "mission.terminate"
    return end(by or flow.coordinator, kind, flow.group)


@pytest.mark.parametrize("row", TRANSITIONS, ids=lambda r: f"{r[0]}-{r[1]}")
def test_each_row_moves_the_mission_to_its_next_state_7_1(flow: Flow, row: tuple[str, str, str, str]) -> None:
    current, kind, after, _ = row
    for start in _from_states(row):
        if start != "active":  # one fresh Mission per starting state
            flow = Flow(survey_again(flow), flow.owner, flow.coordinator, flow.worker, flow.worker2)
        hashes = reach(flow, start)
        issue(flow, kind, hashes)
        assert status(flow.group) == after, (start, kind)
        document = mission_document(flow.group)
        assert document is not None and document["state"] == after
        schemas.validate("mission", document)
        assert verify_group_log(Group.objects.get(id=flow.group))[1] is None


def survey_again(flow: Flow) -> dict[str, str]:
    from tests.workitems.flow import survey_mission

    return survey_mission(flow.owner, flow.coordinator, [flow.worker, flow.worker2])


@pytest.mark.parametrize("row", TRANSITIONS, ids=lambda r: f"{r[0]}-{r[1]}")
def test_each_row_is_refused_from_every_other_state_7_1(flow: Flow, row: tuple[str, str, str, str]) -> None:
    _, kind, _, _ = row
    others = [s for s in STATES if s not in _from_states(row)]
    for start in others:
        mission = flow if start == others[0] else Flow(survey_again(flow), *_cast(flow))
        hashes = reach(mission, start)
        refused(ErrorCode.INVALID_STATE_TRANSITION, issue, mission, kind, hashes)
        assert status(mission.group) == start


def _cast(flow: Flow) -> tuple[AgentKey, AgentKey, AgentKey, AgentKey]:
    return flow.owner, flow.coordinator, flow.worker, flow.worker2


# Who is NOT the row's authority, and what they are told.
WRONG_AUTHORITY = [
    ("active", "mission.submit_for_approval", "owner", ErrorCode.SCHEMA_VALIDATION_FAILED),  # a human has no epoch
    ("active", "mission.submit_for_approval", "worker", ErrorCode.AUTH_STALE_COORDINATOR),
    ("awaiting_approval", "mission.request_changes", "coordinator", ErrorCode.AUTH_FORBIDDEN),
    ("awaiting_approval", "mission.approve", "coordinator", ErrorCode.AUTH_FORBIDDEN),
    ("active", "mission.cancel", "coordinator", ErrorCode.AUTH_FORBIDDEN),  # §7.1: the Coordinator recommends only
    ("active", "mission.cancel", "worker", ErrorCode.AUTH_FORBIDDEN),
    ("active", "mission.terminate", "owner", ErrorCode.SCHEMA_VALIDATION_FAILED),  # humans do not terminate
    ("active", "mission.terminate", "worker", ErrorCode.AUTH_STALE_COORDINATOR),
]


@pytest.mark.parametrize("state,kind,who,code", WRONG_AUTHORITY, ids=lambda v: str(v))
def test_only_the_rows_authority_moves_the_mission_7_1(
    flow: Flow, state: str, kind: str, who: str, code: ErrorCode
) -> None:
    hashes = reach(flow, state)
    by = {"owner": flow.owner, "coordinator": flow.coordinator, "worker": flow.worker}[who]
    if kind == "mission.submit_for_approval" and who == "owner":
        payload = {"artifactHashes": hashes, "missionRevision": group_revision(flow.group)}
        refused(code, by.send, kind, flow.group, payload, coordinator_epoch=1)
    elif kind == "mission.terminate" and who == "owner":
        refused(code, end, by, kind, flow.group, coordinator_epoch=1)
    else:
        refused(code, issue, flow, kind, hashes, by)
    assert status(flow.group) == state


@pytest.mark.parametrize("kind", ["mission.cancel", "mission.terminate"])
def test_organization_policy_cancels_or_terminates_a_non_terminal_mission_7_1(flow: Flow, kind: str) -> None:
    reach(flow, "awaiting_approval")
    command = group_service_command(
        kind, flow.group, {"reason": "policy"}, expected_revision=group_revision(flow.group)
    )
    accept(command)
    assert status(flow.group) == ("cancelled" if kind == "mission.cancel" else "failed")


def test_submission_needs_every_required_result_reviewed_7_3(flow: Flow) -> None:
    verified(flow)
    hashes = [held(flow.group, flow.worker)]
    pending = flow.authorize()  # one required WorkItem not reviewed yet
    refused(ErrorCode.INVALID_STATE_TRANSITION, submit, flow.coordinator, flow.group, hashes)
    flow.cancel(pending)
    submit(flow.coordinator, flow.group, hashes)
    assert status(flow.group) == "awaiting_approval"


def test_submission_is_for_the_exact_revision_and_held_artifacts_7_3(flow: Flow) -> None:
    verified(flow)
    hashes = [held(flow.group, flow.worker)]
    stale = {"artifactHashes": hashes, "missionRevision": group_revision(flow.group) - 1}
    refused(ErrorCode.REVISION_CONFLICT, flow.coordinator.send, "mission.submit_for_approval", flow.group, stale,
            coordinator_epoch=1)  # fmt: skip
    err = refused(ErrorCode.INVALID_COMMAND, submit, flow.coordinator, flow.group, ["sha256:" + "cd" * 32])
    assert err.details["field"] == "/payload/artifactHashes"
    submit(flow.coordinator, flow.group, hashes)
    body = GroupEvent.objects.get(group_id=flow.group, type="mission.submitted_for_approval").body
    assert body["artifactHashes"] == hashes


def test_changes_requested_reopen_the_same_mission_and_keep_earlier_submissions_7_3(flow: Flow) -> None:
    hashes = reach(flow, "awaiting_approval")
    first = submitted_revision(flow.group)
    request_changes(flow.owner, flow.group)
    assert status(flow.group) == "active"
    verified(flow, "Add the appendix")  # corrective work in the same Mission
    second_hashes = [held(flow.group, flow.worker, b"# findings, revised\n")]
    submit(flow.coordinator, flow.group, second_hashes)
    response = http().get(events_url(flow.group), **bearer(flow.coordinator.extra["token"]))
    assert response.status_code == 200, response.content[:300]
    submissions = [e for e in response.json()["events"] if e["kind"] == "mission.submitted_for_approval"]
    assert [s["payload"]["missionRevision"] for s in submissions] == [first, submitted_revision(flow.group)]
    assert submissions[0]["payload"]["artifactHashes"] == hashes
    approve(flow.owner, flow.group, second_hashes)
    assert status(flow.group) == "approved"


def test_approval_is_the_mission_owners_signed_document_over_the_submission_7_3(flow: Flow) -> None:
    hashes = reach(flow, "awaiting_approval")
    revision = submitted_revision(flow.group)
    forged = approval(flow.owner, flow.group, hashes, revision, signer=flow.coordinator)
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, approve, flow.owner, flow.group, hashes, forged)
    other_revision = approval(flow.owner, flow.group, hashes, revision + 1)
    refused(ErrorCode.INVALID_COMMAND, approve, flow.owner, flow.group, hashes, other_revision)
    other_set = approval(flow.owner, flow.group, ["sha256:" + "ab" * 32], revision)
    refused(ErrorCode.INVALID_COMMAND, approve, flow.owner, flow.group, hashes, other_set)
    bare = {"approvalId": other_set["approvalId"], "missionRevision": revision, "artifactHashes": hashes,
            "acceptancePolicyVersion": "1.0.0"}  # fmt: skip
    refused(ErrorCode.SCHEMA_VALIDATION_FAILED, flow.owner.send, "mission.approve", flow.group, bare,
            expected_revision=group_revision(flow.group))  # fmt: skip
    assert status(flow.group) == "awaiting_approval"
    approve(flow.owner, flow.group, hashes)
    stored = GroupEvent.objects.get(group_id=flow.group, type="mission.approved").body["approval"]
    schemas.validate("approval", stored)
    assert stored["approver"] == flow.owner.actor and stored["missionRevision"] == revision
    assert stored["artifactHashes"] == hashes


def _every_command(flow: Flow, hashes: list[str]) -> list[tuple[str, Any]]:
    """A Command of each mission.* kind (and new work) against the Survey Mission."""
    from tests.core.test_coordinator_lease import assign, renew

    def child() -> Any:
        return flow.create_child(flow.authorize())

    return [
        ("mission.submit_for_approval", lambda: submit(flow.coordinator, flow.group, hashes)),
        ("mission.request_changes", lambda: request_changes(flow.owner, flow.group)),
        ("mission.approve", lambda: approve(flow.owner, flow.group, hashes)),
        ("mission.cancel", lambda: end(flow.owner, "mission.cancel", flow.group)),
        ("mission.terminate", lambda: end(flow.coordinator, "mission.terminate", flow.group)),
        ("mission.renew_coordinator", lambda: renew(flow.coordinator, flow.group)),
        ("mission.assign_coordinator", lambda: assign(flow.owner, flow.group, flow.worker2)),
        ("work.authorize", lambda: flow.authorize()),
        ("mission.create_child", child),
    ]


@pytest.mark.parametrize("state", TERMINAL)
def test_a_terminal_mission_refuses_every_command_7_1(flow: Flow, state: str) -> None:
    hashes = reach(flow, state)
    give_card(flow.worker2)
    head = Group.objects.values_list("last_sequence", "revision").get(id=flow.group)
    for kind, send in _every_command(flow, hashes):
        err = refused(ErrorCode.INVALID_STATE_TRANSITION, send)
        assert err is not None, kind
    assert Group.objects.values_list("last_sequence", "revision").get(id=flow.group) == head
    assert status(flow.group) == state


def test_a_follow_up_links_to_the_approved_mission_which_is_never_rewritten_7_1(flow: Flow) -> None:
    to_approved(flow)
    head = Group.objects.values_list("last_sequence", "revision").get(id=flow.group)
    payload = new_mission_payload(flow.coordinator, followUpOfMissionId=urn(flow.mission))
    flow.owner.send("mission.create_follow_up", payload["groupId"].removeprefix("urn:uuid:"), payload)
    group = payload["groupId"].removeprefix("urn:uuid:")
    first = GroupEvent.objects.get(group_id=group, sequence=1)
    assert first.type == "mission.follow_up.created"
    assert first.body["followUpOfMissionId"] == urn(flow.mission)
    document = mission_document(group)
    assert document is not None and document["followUpToMissionId"] == urn(flow.mission)
    assert document["state"] == "active" and document["missionOwner"] == flow.owner.actor
    schemas.validate("mission", document)
    assert Group.objects.values_list("last_sequence", "revision").get(id=flow.group) == head
    assert status(flow.group) == "approved"


def test_a_follow_up_needs_an_approved_mission_and_its_own_owner_7_1(flow: Flow, org: dict[str, str]) -> None:
    payload = new_mission_payload(flow.coordinator, followUpOfMissionId=urn(flow.mission))
    group = payload["groupId"].removeprefix("urn:uuid:")
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.owner.send, "mission.create_follow_up", group, payload)
    to_approved(flow)
    stranger = make_person("acme", "Sam Stranger", ["mission_owner"])
    refused(ErrorCode.AUTH_FORBIDDEN, stranger.send, "mission.create_follow_up", group, payload)
    refused(ErrorCode.SCHEMA_VALIDATION_FAILED, flow.owner.send, "mission.create", group, payload)
    assert not Mission.objects.filter(group_id=group).exists()


def soon() -> datetime:
    return datetime.now(UTC) + timedelta(days=1)


def test_cancellation_reaches_unfinished_workitems_and_child_missions_7_1_14(flow: Flow) -> None:
    done = verified(flow)
    open_item = flow.authorize()
    parent_item = flow.authorize()
    child_mission, child_group = flow.create_child(parent_item)
    add_member(flow.coordinator, child_group, flow.worker, ["worker"])
    child_flow = Flow({"group": child_group, "mission": child_mission}, flow.coordinator, flow.worker2, flow.worker,
                      flow.worker)  # fmt: skip
    small = {k: v if k == "currency" else 1 for k, v in flow.item(parent_item).contract["budget"].items()}
    child_item = child_flow.authorize(contract(goal="Read the free text", budget=small, deadline=stamp(soon())))
    end(flow.owner, "mission.cancel", flow.group)
    assert (flow.item(done).state, flow.item(open_item).state, flow.item(parent_item).state) == (
        "verified", "cancelled", "cancelled",
    )  # fmt: skip
    assert status(child_group) == "cancelled"
    assert child_flow.item(child_item).state == "cancelled"
    cancelled = GroupEvent.objects.get(group_id=child_group, type="mission.cancelled").body
    assert cancelled["missionId"] == urn(child_mission)
    for group in (flow.group, child_group):
        assert verify_group_log(Group.objects.get(id=group))[1] is None
