"""GET /api/v1/groups/{id}/events?after=&limit= (DESIGN §4): a member's bearer
token reads the Group log in sequence order, ``{"events": [...], "head": H}``."""

from __future__ import annotations

import uuid
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from missions.commands import create_organization
from missions.models import Group
from mwportal.protocol import GENESIS_HASH, first_break
from tests.api.support import bearer, error_of, events_url, http, malformed_naming, show
from tests.conftest import AgentKey, group_revision, make_agent

EVENT_MEMBERS = {
    "event_id",
    "group",
    "sequence",
    "type",
    "aggregate",
    "actor",
    "action_id",
    "occurred_at",
    "body",
    "prev_hash",
    "hash",
}


def read(group: str, agent: AgentKey, query: str = "") -> dict:  # type: ignore[type-arg]
    response = http().get(events_url(group, query), **bearer(agent.extra["token"]))
    assert response.status_code == 200, show(response)
    payload = response.json()
    assert set(payload) == {"events", "head"}
    return payload  # type: ignore[no-any-return]


def sequences(payload: dict) -> list[int]:  # type: ignore[type-arg]
    return [e["sequence"] for e in payload["events"]]


def test_a_member_reads_the_log_in_sequence_order(mission: dict[str, str], worker: AgentKey) -> None:
    page = read(mission["group"], worker)
    head = Group.objects.get(id=mission["group"]).last_sequence
    assert page["head"] == head == 5  # mission.created + four membership.added
    assert sequences(page) == list(range(1, head + 1))
    assert [e["type"] for e in page["events"]] == ["mission.created"] + ["membership.added"] * 4


def test_every_event_has_exactly_the_members_of_design_4(mission: dict[str, str], owner: AgentKey) -> None:
    for event in read(mission["group"], owner)["events"]:
        assert set(event) == EVENT_MEMBERS, event
        assert set(event["aggregate"]) == {"kind", "id", "revision"}
        assert event["group"] == mission["group"]
        assert event["aggregate"] == {
            "kind": "group",
            "id": mission["group"],
            "revision": event["aggregate"]["revision"],
        }
        assert isinstance(event["aggregate"]["revision"], int)
        uuid.UUID(event["event_id"])
        uuid.UUID(event["action_id"])
        assert event["occurred_at"].endswith("Z")
        assert isinstance(event["body"], dict)
        assert len(event["hash"]) == 64 and len(event["prev_hash"]) == 64


def test_the_events_form_an_intact_hash_chain_MWP_EVT_005(mission: dict[str, str], owner: AgentKey) -> None:
    events = read(mission["group"], owner)["events"]
    assert events[0]["prev_hash"] == GENESIS_HASH
    assert first_break(events) is None
    assert events[-1]["hash"] == Group.objects.get(id=mission["group"]).head_hash


def test_the_log_shows_what_the_receipt_promised(mission: dict[str, str], owner: AgentKey, outsider: AgentKey) -> None:
    g = mission["group"]
    receipt = owner.send(
        "membership.add",
        g,
        {"agent": outsider.id, "roles": ["reviewer"]},
        target={"kind": "group", "id": g, "revision": group_revision(g)},
    )
    page = read(g, owner, f"after={receipt['events'][0]['sequence'] - 1}")
    (event,) = page["events"]
    assert event["event_id"] == receipt["events"][0]["event_id"]
    assert event["action_id"] == receipt["action_id"]
    assert event["actor"] == owner.id
    assert event["type"] == "membership.added"
    assert event["body"] == {"agent": outsider.id, "roles": ["reviewer"], "membership_epoch": 1}
    assert page["head"] == receipt["events"][-1]["sequence"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", [1, 2, 3, 4, 5]),
        ("after=0", [1, 2, 3, 4, 5]),
        ("after=2", [3, 4, 5]),
        ("limit=2", [1, 2]),
        ("after=1&limit=2", [2, 3]),
        ("after=4&limit=10", [5]),
        ("after=5", []),
        ("after=500", []),
        ("limit=1000", [1, 2, 3, 4, 5]),
    ],
)
def test_after_and_limit_page_the_log(
    mission: dict[str, str], worker: AgentKey, query: str, expected: list[int]
) -> None:
    page = read(mission["group"], worker, query)
    assert sequences(page) == expected
    assert page["head"] == 5


def test_paging_with_the_last_sequence_reads_everything_once(org: dict[str, str], worker: AgentKey) -> None:
    whole = read(org["admin_group"], worker, "limit=1000")
    seen: list[int] = []
    after = 0
    while True:
        page = read(org["admin_group"], worker, f"after={after}&limit=3")
        assert page["head"] == whole["head"]
        if not page["events"]:
            break
        seen += sequences(page)
        after = page["events"][-1]["sequence"]
    assert seen == sequences(whole) == list(range(1, whole["head"] + 1))


def test_limit_defaults_to_100(org: dict[str, str], worker: AgentKey) -> None:
    for i in range(101):
        worker.send("agent_card.publish", org["admin_group"], {"capabilities": [], "max_concurrency": 1 + i % 4})
    page = read(org["admin_group"], worker)
    assert page["head"] > 101
    assert sequences(page) == list(range(1, 101))


def test_the_number_of_queries_does_not_grow_with_the_page(mission: dict[str, str], worker: AgentKey) -> None:
    client = http()
    with CaptureQueriesContext(connection) as one:
        assert client.get(events_url(mission["group"], "limit=1"), **bearer(worker.extra["token"])).status_code == 200
    with CaptureQueriesContext(connection) as five:
        assert client.get(events_url(mission["group"], "limit=5"), **bearer(worker.extra["token"])).status_code == 200
    assert len(five.captured_queries) == len(one.captured_queries)


# --- Who may read -----------------------------------------------------------


# A Group the reader may not see answers exactly as an absent one (issue 16
# item 8; tests/api/test_existence.py compares the two answers whole).


def test_a_non_member_is_404_as_for_an_absent_group(mission: dict[str, str], outsider: AgentKey) -> None:
    response = http().get(events_url(mission["group"]), **bearer(outsider.extra["token"]))
    error_of(response, 404, "GROUP_NOT_FOUND")


def test_a_removed_member_is_404(mission: dict[str, str], owner: AgentKey, worker2: AgentKey) -> None:
    g = mission["group"]
    owner.send(
        "membership.remove", g, {"agent": worker2.id}, target={"kind": "group", "id": g, "revision": group_revision(g)}
    )
    error_of(http().get(events_url(g), **bearer(worker2.extra["token"])), 404, "GROUP_NOT_FOUND")


def test_without_a_token_it_is_401(mission: dict[str, str]) -> None:
    error_of(http().get(events_url(mission["group"])), 401, "AUTH_REQUIRED")


@pytest.mark.parametrize(
    ("header", "code"),
    [
        ("Bearer nonsense", "AUTH_STALE_SESSION"),
        ("Bearer " + "A" * 43, "AUTH_STALE_SESSION"),
        # Not a bearer token at all: no authentication was presented.
        ("Basic dXNlcjpwYXNz", "AUTH_REQUIRED"),
        ("Token abc", "AUTH_REQUIRED"),
    ],
)
def test_an_unknown_token_is_401(mission: dict[str, str], header: str, code: str) -> None:
    error_of(http().get(events_url(mission["group"]), HTTP_AUTHORIZATION=header), 401, code)


def test_a_bearer_header_without_a_token_is_refused(mission: dict[str, str]) -> None:
    response = http().get(events_url(mission["group"]), HTTP_AUTHORIZATION="Bearer")
    assert response.status_code in (400, 401), show(response)
    error_of(response, response.status_code, response.json()["code"])


def test_a_replaced_sessions_token_is_401_MWP_WRK_014(mission: dict[str, str], worker: AgentKey) -> None:
    old = worker.extra["token"]
    new = worker.open_session()
    error_of(http().get(events_url(mission["group"]), **bearer(old)), 401, "AUTH_STALE_SESSION")
    assert http().get(events_url(mission["group"]), **bearer(new)).status_code == 200


def test_an_unknown_group_is_404(mission: dict[str, str], worker: AgentKey) -> None:
    error_of(http().get(events_url(str(uuid.uuid4())), **bearer(worker.extra["token"])), 404, "GROUP_NOT_FOUND")


@pytest.mark.parametrize("group", ["not-a-uuid", "6f1c2a3b4d5e4f608172839405a6b7c8", "123"])
def test_a_group_id_that_is_not_a_uuid_is_malformed(mission: dict[str, str], worker: AgentKey, group: str) -> None:
    malformed_naming(http().get(events_url(group), **bearer(worker.extra["token"])), "group")


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("after=-1", "after"),
        ("after=abc", "after"),
        ("after=1.5", "after"),
        ("after=1e3", "after"),
        ("limit=0", "limit"),
        ("limit=-5", "limit"),
        ("limit=1001", "limit"),
        ("limit=abc", "limit"),
        ("limit=99999999999999999999", "limit"),
        ("after=2&limit=x", "limit"),
    ],
)
def test_a_bad_after_or_limit_is_malformed_naming_it(
    mission: dict[str, str], worker: AgentKey, query: str, field: str
) -> None:
    malformed_naming(http().get(events_url(mission["group"], query), **bearer(worker.extra["token"])), field)


@pytest.mark.parametrize("after", ["9223372036854775807", "9223372036854775808", "99999999999999999999"])
def test_an_after_beyond_any_sequence_is_an_empty_page_not_500(
    mission: dict[str, str], worker: AgentKey, after: str
) -> None:
    response = http().get(events_url(mission["group"], f"after={after}"), **bearer(worker.extra["token"]))
    assert response.status_code in (200, 400), show(response)
    if response.status_code == 200:
        assert response.json() == {"events": [], "head": 5}


# --- The Organization's administrative Group --------------------------------


@pytest.mark.parametrize("persona", ["owner", "coordinator", "worker", "worker2", "outsider"])
def test_every_agent_of_the_organization_reads_its_administrative_group(
    request: pytest.FixtureRequest, org: dict[str, str], mission: dict[str, str], persona: str
) -> None:
    agent: AgentKey = request.getfixturevalue(persona)
    page = read(org["admin_group"], agent)
    assert page["events"][0]["type"] == "org.created"
    assert page["head"] == Group.objects.get(id=org["admin_group"]).last_sequence
    assert first_break(page["events"]) is None


def test_an_agent_of_another_organization_cannot_read_it(org: dict[str, str]) -> None:
    create_organization("globex", "Globex")
    stranger = make_agent("globex", "Gina Globex", ["worker"])
    error_of(http().get(events_url(org["admin_group"]), **bearer(stranger.extra["token"])), 404, "GROUP_NOT_FOUND")


# --- No query answers 500, on either backend (issue 16 item 6) ---------------

query_values = (
    st.integers(-(2**70), 2**70).map(str)
    | st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
    | st.sampled_from(["", "0", "1000", "1e3", "0x10", " 1", "１", "\x00", "1\x00"])
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(after=st.none() | query_values, limit=st.none() | query_values, group=st.sampled_from(["mission", "other"]))
def test_no_query_answers_500(
    mission: dict[str, str], worker: AgentKey, after: str | None, limit: str | None, group: str
) -> None:
    # Encoded as a client would (NUL as %00); a page or a refusal naming the
    # parameter, for a Group one reads and for one that is not there.
    params = {name: value for name, value in (("after", after), ("limit", limit)) if value is not None}
    target = mission["group"] if group == "mission" else str(uuid.uuid4())
    response = http().get(events_url(target, urlencode(params)), **bearer(worker.extra["token"]))
    assert response.status_code in {200, 400, 404, 410}, show(response)
    if response.status_code == 400:
        error = error_of(response, 400, "SCHEMA_VALIDATION_FAILED")
        assert error["details"].get("field") in params, error
    elif response.status_code != 200:
        error_of(response, response.status_code, response.json()["code"])
