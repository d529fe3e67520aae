"""PROTOCOL §7.1: Mission IDs and Group IDs stay stable, through the REST binding.

Over a Mission's whole life (creation, a Coordinator replacement, a submission,
changes requested, a second submission, approval) every Event of its Group, the
Mission document and Memberships as a Group snapshot and ``/memberships`` serve
them, carry the IDs the MissionOwner created it with; a follow-up Mission keeps
IDs of its own and links the original.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from missions.handlers.missions import mission_document
from missions.models import Group, Mission
from missions.snapshots import snapshot_now
from mwportal.protocol import ProtocolError
from mwportal.protocol.ids import urn
from tests.api.support import MEMBERSHIPS, events_url, http, snapshot_url, wire
from tests.conftest import AgentKey, make_agent
from tests.core.mission_support import (
    approve,
    flow_fixture,  # noqa: F401  (the flow fixture)
    held,
    new_mission_payload,
    request_changes,
    rest_fixture,  # noqa: F401  (every Command over REST)
    status,
    submit,
    verified,
)
from tests.core.test_coordinator_lease import assign, reconcile
from tests.workitems.flow import Flow, give_card


def read(url: str, reader: AgentKey) -> Any:
    """The 200 body ``url`` serves to ``reader``'s session."""
    response = http().get(url, HTTP_AUTHORIZATION=f"Bearer {reader.extra['token']}")
    assert response.status_code == 200, response.content[:300]
    return response.json()


def served_events(group: str, reader: AgentKey) -> list[dict[str, Any]]:
    """Every Event of ``group`` as the REST binding pages it to ``reader``."""
    events: list[dict[str, Any]] = []
    while True:
        page = read(events_url(group, f"afterSequence={len(events)}"), reader)
        events += page["events"]
        if len(events) >= page["headSequence"]:
            return events


def assert_carries(group: str, mission: str, reader: AgentKey) -> list[str]:
    """Every served Event of ``group`` names ``group``; any Mission or Group ID in a payload is these two."""
    events = served_events(group, reader)
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    for event in events:
        assert event["groupId"] == urn(group), event["kind"]
        payload = event["payload"]
        assert payload.get("missionId", urn(mission)) == urn(mission), event["kind"]
        assert payload.get("groupId", urn(group)) == urn(group), event["kind"]
        assert payload.get("mission", {}).get("missionId", urn(mission)) == urn(mission), event["kind"]
        assert payload.get("group", {}).get("groupId", urn(group)) == urn(group), event["kind"]
        for membership in payload.get("memberships", []):
            assert (membership["missionId"], membership["groupId"]) == (urn(mission), urn(group)), event["kind"]
    return [e["kind"] for e in events]


def test_mission_and_group_ids_stay_stable_7_1(flow: Flow) -> None:
    group, mission = flow.group, flow.mission
    cora = give_card(make_agent("acme", "Cora Coordinator", ["coordinator"]))
    verified(flow)
    hashes = [held(group, flow.worker)]
    assign(flow.owner, group, cora)  # Coordinator replacement (§7.2)
    reconcile(cora, group)
    submit(cora, group, hashes)
    request_changes(flow.owner, group)
    submit(cora, group, hashes)
    approve(flow.owner, group, hashes)
    assert status(group) == "approved"

    kinds = assert_carries(group, mission, flow.worker)
    for kind in ("mission.created", "mission.coordinator.assigned", "mission.submitted_for_approval",
                 "mission.changes_requested", "mission.approved"):  # fmt: skip
        assert kind in kinds, (kind, kinds)
    assert Mission.objects.values_list("id", "group_id").get(group_id=group) == (UUID(mission), UUID(group))
    document = mission_document(group)
    assert document is not None and (document["missionId"], document["groupId"]) == (urn(mission), urn(group))

    # The snapshot as served: the Mission document, the Group, every Membership.
    sequence = snapshot_now(group).sequence
    body = read(snapshot_url(group, sequence), flow.worker)
    assert body["snapshot"]["groupId"] == urn(group)
    state = body["state"]
    assert (state["mission"]["missionId"], state["mission"]["groupId"]) == (urn(mission), urn(group))
    assert (state["group"]["missionId"], state["group"]["groupId"]) == (urn(mission), urn(group))
    assert state["memberships"]
    for membership in state["memberships"]:
        assert (membership["missionId"], membership["groupId"]) == (urn(mission), urn(group))

    # /memberships as served to a member.
    mine = [m for m in read(MEMBERSHIPS, flow.worker)["memberships"] if m["groupId"] == wire(group)]
    assert mine and all(m["missionId"] == urn(mission) for m in mine)

    # A follow-up keeps IDs of its own and links the original, which keeps its IDs.
    head = Group.objects.values_list("last_sequence", flat=True).get(id=group)
    payload = new_mission_payload(cora, followUpOfMissionId=urn(mission))
    follow_group = payload["groupId"].removeprefix("urn:uuid:")
    follow_mission = payload["missionId"].removeprefix("urn:uuid:")
    flow.owner.send("mission.create_follow_up", follow_group, payload)
    assert {follow_group, follow_mission}.isdisjoint({group, mission})
    follow = mission_document(follow_group)
    assert follow is not None
    assert (follow["missionId"], follow["groupId"]) == (urn(follow_mission), urn(follow_group))
    assert follow["followUpToMissionId"] == urn(mission)
    (created, *_) = read(events_url(follow_group), cora)["events"]
    assert created["groupId"] == urn(follow_group) and created["payload"]["followUpOfMissionId"] == urn(mission)
    assert created["payload"]["mission"]["missionId"] == urn(follow_mission)
    assert assert_carries(follow_group, follow_mission, cora)[0] == "mission.follow_up.created"
    assert Group.objects.values_list("last_sequence", flat=True).get(id=group) == head
    assert assert_carries(group, mission, flow.worker) == kinds


@pytest.mark.parametrize("reused", ["missionId", "groupId", "both"])
def test_a_created_mission_or_group_id_is_never_given_to_another_mission_7_1(flow: Flow, reused: str) -> None:
    group, mission = flow.group, flow.mission
    payload = new_mission_payload(flow.coordinator)
    if reused in ("missionId", "both"):
        payload["missionId"] = urn(mission)
    if reused in ("groupId", "both"):
        payload["groupId"] = urn(group)
    target = payload["groupId"].removeprefix("urn:uuid:")
    before = served_events(group, flow.worker)
    with pytest.raises(ProtocolError):
        flow.owner.send("mission.create", target, payload)
    assert served_events(group, flow.worker) == before
    assert Mission.objects.values_list("id", "group_id").get(group_id=group) == (UUID(mission), UUID(group))
    assert Mission.objects.filter(id=mission).count() == 1
