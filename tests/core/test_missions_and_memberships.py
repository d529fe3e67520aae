"""Missions, Memberships, the priority policy, snapshots, archival and tombstones on the normative wire
(PROTOCOL §7.1, §7.2, §7.4, §8, §11.1, §15.3, §16).

Every Event these Commands append is a signed Event document whose payload
the catalogue admits and whose envelope the bundle's ``event`` schema admits.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from missions.authority import accept
from missions.commands import group_service_command
from missions.handlers.sessions import capability, issue_agent_card
from missions.keyregistry import DjangoRegistry
from missions.models import Group, GroupEvent, GroupSnapshot, Membership, Mission, Organization
from missions.snapshots import group_state, snapshot_now, state_hash
from mwportal.protocol import ErrorCode, catalogue, jcs
from mwportal.protocol.command import format_timestamp
from mwportal.protocol.eventdoc import verify_event
from mwportal.protocol.ids import new_urn, urn
from mwportal.protocol.verification import verify_document
from tests.conftest import AgentKey, Because, group_revision, make_agent, refused
from tests.protocol.normative import normative_problems

EVIDENCE = "urn:uuid:00000000-0000-4000-8000-0000000e0002"
CRITERION = {
    "criterionId": "map-complete",
    "description": "Every district is on the map.",
    "evidenceRequired": ["reviewer_assessment"],
}


def terms(**changes: Any) -> dict[str, Any]:
    deadline = format_timestamp(datetime.now(UTC) + timedelta(days=7))
    base = {
        "title": "Survey",
        "objective": "Map the districts.",
        "definitionOfDone": [CRITERION],
        "deadline": deadline,
        "budget": {"currency": "EUR", "financialLimit": 100, "modelTokenLimit": 1_000_000},
    }
    return {**base, **changes}


def with_card(agent: AgentKey) -> AgentKey:
    issue_agent_card(agent.id, [capability("mission.coordinate", "1.0.0", verified_evidence=[EVIDENCE])])
    return agent


def create_mission(owner: AgentKey, coordinator: AgentKey, **changes: Any) -> tuple[str, str, dict[str, Any]]:
    """``mission.create`` by ``owner`` naming ``coordinator``; ``(group, mission, receipt)``."""
    group_id, mission_id = str(uuid.uuid4()), str(uuid.uuid4())
    payload = {"missionId": urn(mission_id), "groupId": urn(group_id), "coordinatorId": coordinator.urn, **terms()}
    payload.update(changes)
    return group_id, mission_id, owner.send("mission.create", group_id, payload)


def change(by: AgentKey, group_id: str, member: AgentKey, roles: list[str], **payload: Any) -> dict[str, Any]:
    return by.send(
        "membership.change",
        group_id,
        {"principal": member.actor, "roles": roles, **payload},
        expected_revision=group_revision(group_id),
    )


def events_of(receipt: dict[str, Any]) -> list[dict[str, Any]]:
    ids = [uuid.UUID(e["eventId"].removeprefix("urn:uuid:")) for e in receipt["events"]]
    rows = {row.event_id: row for row in GroupEvent.objects.filter(event_id__in=ids)}
    documents = [rows[i].as_wire() for i in ids]
    for document in documents:
        assert normative_problems("event", document) == [], document["kind"]
        catalogue.validate_payload(document["kind"], document["payload"])
    return documents


@pytest.fixture
def carl(coordinator: AgentKey) -> AgentKey:
    return with_card(coordinator)


@pytest.fixture
def founded(owner: AgentKey, carl: AgentKey, worker: AgentKey) -> dict[str, str]:
    group_id, mission_id, _ = create_mission(owner, carl)
    change(owner, group_id, worker, ["worker"])
    return {"group": group_id, "mission": mission_id}


# --- mission.create (§7.1) -----------------------------------------------------------------------


def test_a_human_creates_a_mission_with_its_group_conversation_and_coordinator_lease_PROTOCOL_7_1(
    org: dict[str, str], owner: AgentKey, carl: AgentKey
) -> None:
    group_id, mission_id, receipt = create_mission(owner, carl)
    [created] = events_of(receipt)
    assert (created["kind"], created["sequence"], created["groupId"]) == ("mission.created", 1, urn(group_id))
    mission, group = created["payload"]["mission"], created["payload"]["group"]
    assert normative_problems("mission", mission) == [] and normative_problems("group", group) == []
    assert mission["missionOwner"] == owner.actor
    assert mission["coordinator"]["agentId"] == carl.urn
    assert (mission["coordinator"]["agentCardVersion"], mission["coordinator"]["coordinatorEpoch"]) == (1, 1)
    assert (mission["state"], mission["revision"], mission["missionId"]) == ("active", 1, urn(mission_id))
    assert group["mainConversationId"].startswith("urn:uuid:")
    roles = {str(m.agent_id): m.roles for m in Membership.objects.filter(group_id=group_id)}
    assert roles == {owner.id: ["mission_owner"], carl.id: ["coordinator"]}
    assert Mission.objects.get(id=mission_id).budgets == terms()["budget"]
    verify_event(GroupEvent.objects.get(group_id=group_id, sequence=1).document.encode(),
                 DjangoRegistry(Organization.objects.get(id=org["id"])))  # fmt: skip


def test_a_root_mission_is_created_by_a_human_only_PROTOCOL_7_1(
    owner: AgentKey, carl: AgentKey, worker: AgentKey
) -> None:
    """The normative Command schema already holds ``mission.create``'s actor to a human."""
    group_id = str(uuid.uuid4())
    payload = {"missionId": new_urn(), "groupId": urn(group_id), "coordinatorId": carl.urn, **terms()}
    refused(ErrorCode.SCHEMA_VALIDATION_FAILED, worker.send, "mission.create", group_id, payload)


@pytest.mark.parametrize("missing", ["objective", "definitionOfDone", "deadline", "budget"])
def test_a_mission_declares_its_terms_PROTOCOL_7_1(owner: AgentKey, carl: AgentKey, missing: str) -> None:
    group_id = str(uuid.uuid4())
    payload = {"missionId": new_urn(), "groupId": urn(group_id), "coordinatorId": carl.urn, **terms()}
    del payload[missing]
    error = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, owner.send, "mission.create", group_id, payload)
    assert error.details["field"] == f"/payload/{missing}"


def test_a_mission_is_refused_a_past_deadline_a_coordinator_without_a_card_and_another_group_PROTOCOL_7_1(
    owner: AgentKey, carl: AgentKey, worker: AgentKey
) -> None:
    past = format_timestamp(datetime.now(UTC) - timedelta(minutes=1))
    refused(Because(ErrorCode.INVALID_COMMAND, "deadline-passed"), create_mission, owner, carl, deadline=past)
    refused(Because(ErrorCode.INVALID_COMMAND, "no-agent-card"), create_mission, owner, worker)
    error = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, create_mission, owner, carl, groupId=new_urn())
    assert error.details["field"] == "/payload/groupId"
    refused(ErrorCode.SCHEMA_VALIDATION_FAILED, create_mission, owner, carl, followUpOfMissionId=new_urn())


def test_a_group_is_created_once_PROTOCOL_7_1(owner: AgentKey, carl: AgentKey) -> None:
    group_id, _, _ = create_mission(owner, carl)
    payload = {"missionId": new_urn(), "groupId": urn(group_id), "coordinatorId": carl.urn, **terms()}
    refused(ErrorCode.REVISION_CONFLICT, owner.send, "mission.create", group_id, payload)


# --- membership.change, membership.end (§8, §15.3) -----------------------------------------------


def test_membership_change_appends_one_membership_changed_per_role_PROTOCOL_8(
    founded: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    g = founded["group"]
    receipt = change(owner, g, worker, ["reviewer", "worker"])
    documents = events_of(receipt)
    memberships = [d["payload"]["membership"] for d in documents]
    assert [(m["role"], m["state"], m["membershipEpoch"]) for m in memberships] == [
        ("reviewer", "active", 2),
        ("worker", "active", 2),
    ]
    assert all(m["member"] == worker.actor and normative_problems("membership", m) == [] for m in memberships)
    # Dropping a role ends that role's Membership; the other goes on under the next epoch.
    documents = events_of(change(owner, g, worker, ["reviewer"]))
    assert [(d["payload"]["membership"]["role"], d["payload"]["membership"]["state"]) for d in documents] == [
        ("reviewer", "active"),
        ("worker", "ended"),
    ]
    assert Membership.objects.get(group_id=g, agent_id=worker.id).epoch == 3


def test_membership_change_is_compare_and_set_on_the_group_revision_PROTOCOL_15_3(
    founded: dict[str, str], owner: AgentKey, worker2: AgentKey
) -> None:
    g = founded["group"]
    payload = {"principal": worker2.actor, "roles": ["worker"]}
    error = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, owner.send, "membership.change", g, payload)
    assert error.details["field"] == "expectedRevision"
    stale = group_revision(g) - 1
    refused(ErrorCode.REVISION_CONFLICT, owner.send, "membership.change", g, payload, expected_revision=stale)
    change(owner, g, worker2, ["worker"])


def test_the_missions_owner_and_coordinator_roles_are_not_a_membership_changes_PROTOCOL_7_2(
    founded: dict[str, str], owner: AgentKey, carl: AgentKey, worker: AgentKey
) -> None:
    g = founded["group"]
    refused(ErrorCode.AUTH_FORBIDDEN, change, owner, g, worker, ["coordinator"])
    refused(ErrorCode.AUTH_FORBIDDEN, change, carl, g, worker, ["mission_owner"])
    refused(ErrorCode.INVALID_STATE_TRANSITION, change, owner, g, carl, ["worker"])
    refused(ErrorCode.INVALID_STATE_TRANSITION, change, carl, g, owner, ["observer"])
    # A human is no Worker; the Coordinator may grant Agents their roles.
    refused(ErrorCode.INVALID_COMMAND, change, carl, g, owner, ["mission_owner", "worker"])
    reviewer = make_agent("acme", "Rita Reviewer", ["worker"])
    change(carl, g, reviewer, ["reviewer"])
    # Nothing to change is refused rather than appended.
    refused(ErrorCode.INVALID_STATE_TRANSITION, change, carl, g, reviewer, ["reviewer"])


def test_a_provisional_membership_needs_its_context_package_and_visibility_stays_within_the_log_PROTOCOL_8(
    founded: dict[str, str], owner: AgentKey, worker2: AgentKey
) -> None:
    """Just-in-time Membership and restricted visibility are granted (tests/artifacts/test_membership_8.py),
    never without the Context Package a provisional member receives nor beyond the Group's head."""
    g = founded["group"]
    refused(ErrorCode.INVALID_COMMAND, change, owner, g, worker2, ["worker"], provisional=True)
    refused(ErrorCode.INVALID_COMMAND, change, owner, g, worker2, ["worker"], visibilityAfterSequence=10**6)
    change(owner, g, worker2, ["worker"], provisional=False, visibilityAfterSequence=None)


def test_membership_end_fences_the_member_PROTOCOL_8(
    founded: dict[str, str], owner: AgentKey, carl: AgentKey, worker: AgentKey
) -> None:
    g = founded["group"]
    before = worker.command("membership.change", g, {"principal": worker.actor, "roles": ["worker"]})
    receipt = owner.send(
        "membership.end",
        g,
        {"principal": worker.actor, "reason": "done"},
        expected_revision=group_revision(g),
    )
    [ended] = [d for d in events_of(receipt) if d["kind"] == "membership.ended"]
    assert ended["payload"] == {"principal": worker.actor, "reason": "done"}
    row = Membership.objects.get(group_id=g, agent_id=worker.id)
    assert (row.active, row.epoch) == (False, 2)
    # A Command signed under the ended Membership finds no Group (it is no longer the member's to see).
    refused(ErrorCode.GROUP_NOT_FOUND, worker.send_document, before)
    # The MissionOwner's and the Coordinator's Memberships do not end (§7.1, §7.2).
    for member in (owner, carl):
        refused(ErrorCode.INVALID_STATE_TRANSITION, owner.send, "membership.end", g,
                {"principal": member.actor}, expected_revision=group_revision(g))  # fmt: skip
    refused(Because(ErrorCode.INVALID_COMMAND, "not_found"), owner.send, "membership.end", g,
            {"principal": worker.actor}, expected_revision=group_revision(g))  # fmt: skip


def test_a_membership_command_under_an_older_membership_epoch_is_stale_PROTOCOL_8(
    founded: dict[str, str], owner: AgentKey, carl: AgentKey, worker: AgentKey
) -> None:
    g = founded["group"]
    old = carl.command("ext.mwportal.audit.event_redact", g, {"sequence": 1, "reason": "x"})
    assert old["membershipEpoch"] == 1
    # Carl's Membership does not change here, but Wanda's does: her old epoch is stale.
    stale = worker.command("membership.change", g, {"principal": worker.actor, "roles": ["worker"]})
    change(owner, g, worker, ["worker", "reviewer"])
    refused(ErrorCode.MEMBERSHIP_STALE, worker.send_document, stale)


# --- the priority policy (§11.1) -------------------------------------------------------------------


def test_the_priority_policy_is_set_by_a_mission_owner_with_compare_and_set_PROTOCOL_11_1(
    org: dict[str, str], owner: AgentKey, carl: AgentKey
) -> None:
    policy = {"classes": {"high": 4, "normal": 1}, "default_class": "normal"}
    kind = "ext.mwportal.scheduling.priority_policy_set"
    receipt = owner.send(kind, org["admin_group"], {"policy": policy})
    [changed] = events_of(receipt)
    assert changed["payload"] == {"policy": policy, "revision": 1}
    refused(ErrorCode.REVISION_CONFLICT, owner.send, kind, org["admin_group"], {"policy": policy}, expected_revision=0)
    owner.send(kind, org["admin_group"], {"policy": policy}, expected_revision=1)
    # A Coordinator never escalates Organization priority.
    refused(ErrorCode.AUTH_FORBIDDEN, carl.send, kind, org["admin_group"], {"policy": policy})


# --- snapshots, archival, tombstones (§7.4, §16) -------------------------------------------------------


def test_a_live_snapshot_is_signed_by_the_group_authority_and_commits_to_the_state_PROTOCOL_16(
    org: dict[str, str], founded: dict[str, str], worker: AgentKey
) -> None:
    g = founded["group"]
    head = Group.objects.get(id=g).last_sequence
    snapshot = snapshot_now(g)
    document = snapshot.document
    assert normative_problems("group-snapshot", document) == []
    assert document["throughSequence"] == head == snapshot.sequence
    assert document["eventIds"] == [
        urn(str(e))
        for e in GroupEvent.objects.filter(group_id=g, sequence__lte=head).values_list("event_id", flat=True)
    ]
    assert document["stateHash"] == state_hash(snapshot.state)
    verified = verify_document(jcs.canonicalize(document), "group-snapshot",
                               DjangoRegistry(Organization.objects.get(id=org["id"])))  # fmt: skip
    assert verified.principal.type == "service"
    memberships = snapshot.state["memberships"]
    assert {(m["member"]["id"], m["role"]) for m in memberships} >= {(worker.urn, "worker")}
    assert all(normative_problems("membership", m) == [] for m in memberships)
    assert snapshot_now(g).pk == snapshot.pk  # the head did not move: the same snapshot


def test_a_live_snapshot_appends_no_event_only_archival_does_PROTOCOL_15_2(founded: dict[str, str]) -> None:
    """§15.2: group.snapshot.created is appended by group_archive alone; a replay snapshot is delivery state."""
    g = founded["group"]
    head = Group.objects.get(id=g).last_sequence
    snapshot_now(g)
    assert Group.objects.get(id=g).last_sequence == head
    assert not GroupEvent.objects.filter(group_id=g, type="group.snapshot.created").exists()
    assert catalogue.commands_yielding("group.snapshot.created") == ("ext.missionweaveprotocol.core.group_archive",)


def test_an_active_missions_group_is_not_archived_PROTOCOL_7_4(founded: dict[str, str]) -> None:
    from missions.snapshots import archive_group

    refused(ErrorCode.INVALID_STATE_TRANSITION, archive_group, founded["group"])
    assert not GroupSnapshot.objects.filter(group_id=founded["group"], final=True).exists()


def test_a_finished_missions_group_is_archived_with_its_signed_final_snapshot_PROTOCOL_7_4(
    org: dict[str, str], founded: dict[str, str], owner: AgentKey
) -> None:
    from missions.snapshots import archive_group

    g = founded["group"]
    owner.send("mission.cancel", g, {"reason": "the survey moved"}, expected_revision=group_revision(g))
    head = Group.objects.get(id=g).last_sequence
    final = archive_group(g)
    assert (final.final, final.sequence, final.document["throughSequence"]) == (True, head, head)
    assert normative_problems("group-snapshot", final.document) == []
    assert final.document["stateHash"] == state_hash(final.state)
    tail = list(GroupEvent.objects.filter(group_id=g, sequence__gt=head).order_by("sequence"))
    assert [e.type for e in tail] == ["group.snapshot.created", "group.archived"]
    assert tail[1].body["snapshotId"] == final.document["snapshotId"]
    for event in tail:
        assert normative_problems("event", event.as_wire()) == []
    # Once archived, a Group is archived; a later snapshot's state says so.
    refused(ErrorCode.INVALID_STATE_TRANSITION, archive_group, g)
    assert group_state(g)["group"]["state"] == "archived"


def test_a_final_snapshot_not_signed_by_the_group_authority_or_not_of_the_head_is_refused_PROTOCOL_7_4(
    org: dict[str, str], founded: dict[str, str], owner: AgentKey
) -> None:
    from missions.service_keys import control_plane
    from missions.snapshots import GROUP_ARCHIVE, snapshot_document
    from mwportal.protocol.verification import sign_document

    g = founded["group"]
    owner.send("mission.cancel", g, {"reason": "the survey moved"}, expected_revision=group_revision(g))
    head = Group.objects.get(id=g).last_sequence
    good = snapshot_document(group_id=g, organization_id=org["id"], through_sequence=head, state=group_state(g),
                             now=datetime.now(UTC), decision="final")  # fmt: skip

    def archive(document: dict[str, Any]) -> Any:
        command = group_service_command(GROUP_ARCHIVE, g, {"snapshot": document}, expected_revision=group_revision(g))
        return accept(command)

    key = control_plane(org["id"])
    unsigned = {k: v for k, v in good.items() if k != "signature"}
    by_control_plane = sign_document(
        {**unsigned, "createdBy": {"type": "service", "id": urn(key.principal[1])}, "policyLog": [
            {**good["policyLog"][0], "actor": {"type": "service", "id": urn(key.principal[1])}}]},
        key_id=key.key_id, seed=key.seed, profile="group-snapshot",
    )  # fmt: skip
    refused(ErrorCode.AUTH_FORBIDDEN, archive, by_control_plane)
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, archive, {**good, "stateHash": "sha256:" + "0" * 64})
    assert not GroupSnapshot.objects.filter(group_id=g, final=True).exists()


def test_a_redaction_is_a_tombstone_event_once_PROTOCOL_7_4(founded: dict[str, str], owner: AgentKey) -> None:
    g = founded["group"]
    kind = "ext.mwportal.audit.event_redact"
    receipt = owner.send(kind, g, {"sequence": 2, "reason": "personal data"})
    [tombstone] = events_of(receipt)
    redacted = GroupEvent.objects.get(group_id=g, sequence=2)
    assert tombstone["payload"] == {"sequence": 2, "reason": "personal data", "eventId": urn(str(redacted.event_id))}
    refused(ErrorCode.INVALID_STATE_TRANSITION, owner.send, kind, g, {"sequence": 2, "reason": "again"})
    refused(Because(ErrorCode.INVALID_COMMAND, "not_found"), owner.send, kind, g, {"sequence": 99, "reason": "x"})


def test_group_state_is_what_the_snapshot_hashes(founded: dict[str, str]) -> None:
    state = group_state(founded["group"])
    assert state["mission"]["missionId"] == urn(founded["mission"])
    assert state_hash(state) == state_hash(group_state(founded["group"]))
