"""Existence oracles (issue 16 item 8): what the API answers about something
the caller may not see must not depend on whether it exists.

- REST reads of a Group (events, snapshots): an Agent that is not a member
  of an existing Group, a removed member and an Agent of another
  Organization get exactly the answer of an absent Group: status, code,
  message and details, with only the Group ID differing (spec §17.2, DESIGN
  §4: GROUP_NOT_FOUND "absent or intentionally undisclosed").
- ``work.authorize`` with a WorkItem ID taken in a Group the Coordinator
  cannot see answers as for one taken in their own Group, naming neither.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.http import HttpResponse

from missions.commands import create_organization
from tests.api.support import COMMANDS, bearer, error_of, events_url, http, post_json
from tests.conftest import AgentKey, group_revision, make_agent
from tests.workitems.flow import contract


def answer(response: HttpResponse, group: str) -> tuple[int, dict[str, Any]]:
    """The status and the error document with ``group`` replaced by a marker
    and without ``occurredAt`` (the clock, not the Group), so answers about
    two different Group IDs compare equal when nothing else tells them apart."""
    text = response.content.decode().replace(group, "<group>")
    document = json.loads(text)
    assert isinstance(document.pop("occurredAt", None), str), document
    return response.status_code, document


def snapshot_url(group: str) -> str:
    return f"/api/v1/groups/{group}/snapshots/1"


READS = {"events": events_url, "snapshot": snapshot_url}


@pytest.fixture
def stranger(org: dict[str, str]) -> AgentKey:
    """Gina, an Agent of another Organization."""
    create_organization("globex", "Globex")
    return make_agent("globex", "Gina Globex", ["worker"])


@pytest.mark.parametrize("route", sorted(READS))
def test_it_answers_a_non_member_exactly_as_for_an_absent_group(
    route: str, mission: dict[str, str], outsider: AgentKey
) -> None:
    url = READS[route]
    absent = str(uuid.uuid4())
    token = bearer(outsider.extra["token"])
    unseen = answer(http().get(url(mission["group"]), **token), mission["group"])
    missing = answer(http().get(url(absent), **token), absent)
    assert unseen == missing
    status, document = missing
    assert status == 404 and document["code"] == "GROUP_NOT_FOUND", document


@pytest.mark.parametrize("route", sorted(READS))
def test_it_answers_a_removed_member_exactly_as_for_an_absent_group(
    route: str, mission: dict[str, str], owner: AgentKey, worker2: AgentKey
) -> None:
    url, g = READS[route], mission["group"]
    owner.send(
        "membership.remove", g, {"agent": worker2.id}, target={"kind": "group", "id": g, "revision": group_revision(g)}
    )
    absent = str(uuid.uuid4())
    token = bearer(worker2.extra["token"])
    assert answer(http().get(url(g), **token), g) == answer(http().get(url(absent), **token), absent)


@pytest.mark.parametrize("route", sorted(READS))
def test_it_answers_another_organizations_agent_exactly_as_for_an_absent_group(
    route: str, org: dict[str, str], mission: dict[str, str], stranger: AgentKey
) -> None:
    url, absent = READS[route], str(uuid.uuid4())
    token = bearer(stranger.extra["token"])
    expected = answer(http().get(url(absent), **token), absent)
    for group in (org["admin_group"], mission["group"]):
        assert answer(http().get(url(group), **token), group) == expected, group


def test_a_member_still_reads_and_still_gets_a_real_404_for_an_absent_snapshot(
    mission: dict[str, str], worker: AgentKey
) -> None:
    # The gate did not become a wall: a member's answers are unchanged.
    token = bearer(worker.extra["token"])
    assert http().get(events_url(mission["group"]), **token).status_code == 200
    error = error_of(http().get(snapshot_url(mission["group"]), **token), 404, "GROUP_NOT_FOUND")
    assert "snapshot" in error["message"]


# --- work.authorize ---------------------------------------------------------


@pytest.fixture
def other_mission(owner: AgentKey) -> tuple[str, AgentKey]:
    """A second Mission of the same Organization, coordinated by Cora, who is
    not a member of ``mission``."""
    cora = make_agent("acme", "Cora Coordinator", ["coordinator"])
    group = str(uuid.uuid4())
    owner.send("mission.create", group, {"mission": str(uuid.uuid4()), "title": "Other", "objective": "Elsewhere"})
    owner.send(
        "membership.add",
        group,
        {"agent": cora.id, "roles": ["coordinator"]},
        target={"kind": "group", "id": group, "revision": group_revision(group)},
    )
    return group, cora


def authorize(coordinator: AgentKey, group: str, item: str) -> HttpResponse:
    body = {"workitem": item, "contract": contract()}
    return post_json(http(), COMMANDS, coordinator.envelope("work.authorize", group, body))


def test_it_answers_work_authorize_of_another_groups_item_as_for_one_of_its_own(
    mission: dict[str, str], coordinator: AgentKey, other_mission: tuple[str, AgentKey]
) -> None:
    hidden = str(uuid.uuid4())  # in ``mission``, which Cora cannot see
    assert authorize(coordinator, mission["group"], hidden).status_code == 201
    group, cora = other_mission
    own = str(uuid.uuid4())
    assert authorize(cora, group, own).status_code == 201

    unseen = authorize(cora, group, hidden)
    taken_here = authorize(cora, group, own)
    assert answer(unseen, hidden) == answer(taken_here, own)
    error = error_of(unseen, 422, "INVALID_STATE_TRANSITION")
    # It names neither the other Group nor that the item "exists" anywhere.
    assert "exists" not in error["message"].lower()
    assert mission["group"] not in unseen.content.decode()
    assert error["details"] == {"field": "body.workitem"}


def test_a_gate_reached_through_a_workitem_does_not_hand_out_its_group_id(
    mission: dict[str, str], coordinator: AgentKey, other_mission: tuple[str, AgentKey]
) -> None:
    # GET /workitems/{id}/review checks the item's Group with the same gate;
    # its refusal must not name that Group to someone outside it.
    hidden = str(uuid.uuid4())
    assert authorize(coordinator, mission["group"], hidden).status_code == 201
    _, cora = other_mission
    response = http().get(f"/api/v1/workitems/{hidden}/review", **bearer(cora.extra["token"]))
    error_of(response, 404, "GROUP_NOT_FOUND")
    assert mission["group"] not in response.content.decode()


def test_it_answers_an_unknown_api_path_with_the_not_found_document() -> None:
    """Issue 16: every answer under /api/ is the error document, an unknown
    route included (Django's HTML 404 page before); portal paths keep the
    portal's page."""
    from django.test import Client

    client = Client()
    error_of(client.get("/api/v1/no/such/route"), 404, "PROTOCOL_VIOLATION")
    page = client.get("/no/such/page/")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")
