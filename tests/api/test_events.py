"""``GET /api/v0.1/groups/{groupId}/events?afterSequence=N&limit=M`` (DESIGN §5, PROTOCOL §15.2, §16):
a member's bearer token reads ``{"events": [...], "headSequence": H}``, the Group's signed Event
documents after N in sequence order, exactly as the WebSocket delivers them. An outside client verifies
each one with the key ``GET /api/v0.1/keys/{keyId}`` serves. A cursor outside the online window is
``CURSOR_TOO_OLD`` (410) with ``snapshotArtifactHash`` and a signed snapshot reference; a Group one may
not read is ``GROUP_NOT_FOUND``, byte for byte as an absent one (§17.2)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from missions.commands import create_organization
from missions.models import Group, GroupEvent
from mwportal.protocol import jcs
from mwportal.protocol.eventdoc import verify_event
from mwportal.protocol.registry import KeyBinding, KeyResolutionError, Principal
from mwportal.protocol.values import b64url_decode, parse_timestamp
from tests.api.support import (
    bearer,
    error_of,
    events_url,
    http,
    key_url,
    normative,
    show,
    snapshot_url,
    wire,
)
from tests.conftest import AgentKey, make_agent

PAGE_MEMBERS = {"events", "headSequence"}


def read(group: str, agent: AgentKey, query: str = "") -> dict[str, Any]:
    response = http().get(events_url(group, query), **bearer(agent.extra["token"]))
    assert response.status_code == 200, show(response)
    page = response.json()
    assert set(page) == PAGE_MEMBERS, page
    for event in page["events"]:
        normative("event", event)
    return page  # type: ignore[no-any-return]


def sequences(page: dict[str, Any]) -> list[int]:
    return [e["sequence"] for e in page["events"]]


class RestRegistry:
    """An outside client's Registry evidence: each key from ``GET /api/v0.1/keys/{keyId}``."""

    organization_id = "urn:example:outside-client"

    def __init__(self) -> None:
        self.fetched: list[str] = []

    def resolve(self, key_id: str) -> KeyBinding:
        response = http().get(key_url(key_id))
        if response.status_code != 200:
            raise KeyResolutionError("unknown-key")
        self.fetched.append(key_id)
        b = response.json()
        return KeyBinding(
            key_id=b["keyId"],
            principal=Principal(**b["principal"]),
            algorithm=b["algorithm"],
            public_key=b64url_decode(b["publicKey"]),
            valid_from=parse_timestamp(b["validFrom"]),
            valid_until=parse_timestamp(b["validUntil"]) if "validUntil" in b else None,
            revoked_at=parse_timestamp(b["revokedAt"]) if "revokedAt" in b else None,
        )


def test_a_member_reads_the_log_in_sequence_order_from_1_spec_15_2(mission: dict[str, str], worker: AgentKey) -> None:
    page = read(mission["group"], worker)
    head = Group.objects.get(id=mission["group"]).last_sequence
    assert page["headSequence"] == head and sequences(page) == list(range(1, head + 1))
    assert all(e["groupId"] == wire(mission["group"]) for e in page["events"])


def test_the_page_serves_the_stored_signed_documents_spec_15_2(mission: dict[str, str], worker: AgentKey) -> None:
    stored = [e.as_wire() for e in GroupEvent.objects.filter(group_id=mission["group"]).order_by("sequence")]
    assert read(mission["group"], worker)["events"] == stored


def test_an_outside_client_verifies_every_event_with_the_served_keys_spec_6_4(
    mission: dict[str, str], worker: AgentKey
) -> None:
    registry = RestRegistry()
    for event in read(mission["group"], worker)["events"]:
        verified = verify_event(json.dumps(event).encode(), registry)
        assert verified.principal.type == "service"
        assert event["acceptedBy"] == {"type": "service", "id": verified.principal.id}
    assert registry.fetched


def test_a_tampered_event_does_not_verify_with_the_served_key_spec_6_4(
    mission: dict[str, str], worker: AgentKey
) -> None:
    from mwportal.protocol import ProtocolError

    event = read(mission["group"], worker)["events"][0]
    tampered = {**event, "occurredAt": "2020-01-01T00:00:00.000000Z"}
    with pytest.raises(ProtocolError) as refused:
        verify_event(json.dumps(tampered).encode(), RestRegistry())
    assert refused.value.code == "AUTH_INVALID_SIGNATURE"


def test_each_event_names_the_command_that_caused_it_spec_15_2(mission: dict[str, str], worker: AgentKey) -> None:
    for event in read(mission["group"], worker)["events"]:
        assert event["cause"]["type"] == "command" and event["cause"]["id"].startswith("urn:uuid:")
        assert event["commandHash"].startswith("sha256:")


@pytest.mark.parametrize(("after", "limit"), [(0, 1), (1, 2), (2, 100), (3, 1)])
def test_after_sequence_and_limit_page_the_log_spec_16(
    mission: dict[str, str], worker: AgentKey, after: int, limit: int
) -> None:
    head = Group.objects.get(id=mission["group"]).last_sequence
    page = read(mission["group"], worker, f"afterSequence={after}&limit={limit}")
    assert sequences(page) == list(range(after + 1, min(head, after + limit) + 1))
    assert page["headSequence"] == head


def test_paging_from_each_last_sequence_reads_everything_once(mission: dict[str, str], worker: AgentKey) -> None:
    seen: list[int] = []
    after = 0
    while True:
        page = read(mission["group"], worker, f"afterSequence={after}&limit=2")
        if not page["events"]:
            break
        seen += sequences(page)
        after = seen[-1]
    assert seen == list(range(1, Group.objects.get(id=mission["group"]).last_sequence + 1))


def test_an_after_sequence_beyond_the_head_is_an_empty_page(mission: dict[str, str], worker: AgentKey) -> None:
    page = read(mission["group"], worker, "afterSequence=9007199254740991")
    assert page["events"] == [] and page["headSequence"] == Group.objects.get(id=mission["group"]).last_sequence


def test_the_number_of_queries_does_not_grow_with_the_page(mission: dict[str, str], worker: AgentKey) -> None:
    def queries(limit: int) -> int:
        with CaptureQueriesContext(connection) as ctx:
            read(mission["group"], worker, f"limit={limit}")
        return len(ctx.captured_queries)

    assert queries(1) == queries(100)


# --- CURSOR_TOO_OLD (§16) -----------------------------------------------------------------------


def test_a_cursor_outside_the_online_window_is_410_with_a_signed_snapshot_reference_spec_16(
    mission: dict[str, str], worker: AgentKey, settings: Any
) -> None:
    settings.MWP_ONLINE_REPLAY_EVENTS = 1
    token = bearer(worker.extra["token"])
    error = error_of(http().get(events_url(mission["group"], "afterSequence=0"), **token), 410, "CURSOR_TOO_OLD")
    reference = error["details"]["snapshot"]
    assert error["snapshotArtifactHash"] == reference["snapshotArtifactHash"]
    assert reference["groupId"] == wire(mission["group"])
    # The reference leads to the snapshot artifact, whose JCS bytes hash to it.
    response = http().get(reference["href"], **token)
    assert response.status_code == 200, show(response)
    artifact = response.json()
    assert jcs.sha256_hash(jcs.canonicalize(artifact)) == error["snapshotArtifactHash"]
    snapshot = normative("group-snapshot", artifact["snapshot"])
    assert snapshot["stateHash"] == jcs.sha256_hash(jcs.canonicalize(artifact["state"]))
    assert snapshot["throughSequence"] == reference["throughSequence"] and snapshot["groupId"] == wire(mission["group"])
    # Signed by the Group Authority, with the key GET /api/v0.1/keys serves.
    from mwportal.protocol.verification import verify_document

    verified = verify_document(jcs.canonicalize(snapshot), "group-snapshot", RestRegistry())
    assert verified.principal.type == "service"
    # Reading on after the snapshot's sequence is online again.
    after = reference["throughSequence"]
    assert sequences(read(mission["group"], worker, f"afterSequence={after}")) == list(
        range(after + 1, Group.objects.get(id=mission["group"]).last_sequence + 1)
    )


def test_an_absent_snapshot_of_a_visible_group_is_404(mission: dict[str, str], worker: AgentKey) -> None:
    error_of(http().get(snapshot_url(mission["group"], 999), **bearer(worker.extra["token"])), 404, "GROUP_NOT_FOUND")


# --- who may read (§17.2) -----------------------------------------------------------------------


def answer(response: Any, group: str) -> tuple[int, dict[str, Any]]:
    """Status and error document with the Group ID masked and without ``occurredAt``."""
    document = json.loads(response.content.decode().replace(group, "<group>"))
    document.pop("occurredAt")
    return response.status_code, document


@pytest.fixture
def stranger(org: dict[str, str]) -> AgentKey:
    """Gina, an Agent of another Organization."""
    create_organization("globex", "Globex")
    return make_agent("globex", "Gina Globex", ["worker"])


@pytest.mark.parametrize("route", ["events", "snapshot"])
def test_a_non_member_gets_exactly_the_answer_of_an_absent_group_spec_17_2(
    route: str, mission: dict[str, str], outsider: AgentKey, stranger: AgentKey, org: dict[str, str]
) -> None:
    url = {"events": events_url, "snapshot": lambda g: snapshot_url(g, 1)}[route]
    absent = wire(str(uuid.uuid4()))
    for reader, groups in ((outsider, [mission["group"]]), (stranger, [mission["group"], org["admin_group"]])):
        token = bearer(reader.extra["token"])
        missing = answer(http().get(url(absent), **token), absent)
        assert missing[0] == 404 and missing[1]["code"] == "GROUP_NOT_FOUND", missing
        for group in groups:
            assert answer(http().get(url(wire(group)), **token), wire(group)) == missing, (reader.id, group)


def test_every_principal_of_the_organization_reads_its_administrative_group(
    org: dict[str, str], outsider: AgentKey
) -> None:
    read(org["admin_group"], outsider)


def test_without_a_token_it_is_401_auth_required_spec_19(mission: dict[str, str]) -> None:
    error_of(http().get(events_url(mission["group"])), 401, "AUTH_REQUIRED")


@pytest.mark.parametrize("header", ["Bearer nope", "Bearer " + "A" * 43])
def test_an_unknown_token_is_401_auth_stale_session(mission: dict[str, str], header: str) -> None:
    error_of(http().get(events_url(mission["group"]), HTTP_AUTHORIZATION=header), 401, "AUTH_STALE_SESSION")


def test_a_malformed_authorization_header_is_a_protocol_violation(mission: dict[str, str]) -> None:
    error_of(http().get(events_url(mission["group"]), HTTP_AUTHORIZATION="Bearer a b"), 400, "PROTOCOL_VIOLATION")


# --- bad queries ----------------------------------------------------------------------------------


@pytest.mark.parametrize("group", ["not-a-uuid", str(uuid.uuid4()), "urn:uuid:NOT", "urn:example:x"])
def test_a_group_id_that_is_not_urn_uuid_is_schema_validation_failed(
    mission: dict[str, str], worker: AgentKey, group: str
) -> None:
    response = http().get(f"/api/v0.1/groups/{group}/events", **bearer(worker.extra["token"]))
    error = error_of(response, 400, "SCHEMA_VALIDATION_FAILED")
    assert error["details"]["field"] == "groupId"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("afterSequence=-1", "afterSequence"),
        ("afterSequence=x", "afterSequence"),
        ("afterSequence=9007199254740992", "afterSequence"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=1.5", "limit"),
        ("after=3", "after"),
        ("cursor=1", "cursor"),
    ],
)
def test_a_bad_query_parameter_is_schema_validation_failed_naming_it(
    mission: dict[str, str], worker: AgentKey, query: str, field: str
) -> None:
    response = http().get(events_url(mission["group"], query), **bearer(worker.extra["token"]))
    assert error_of(response, 400, "SCHEMA_VALIDATION_FAILED")["details"]["field"] == field


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(name=st.sampled_from(["afterSequence", "limit"]) | st.text(max_size=8), value=st.text(max_size=12))
def test_no_query_answers_500(mission: dict[str, str], worker: AgentKey, name: str, value: str) -> None:
    response = http().get(events_url(mission["group"]), {name: value}, **bearer(worker.extra["token"]))
    assert response.status_code in (200, 400), show(response)
    if response.status_code == 400:
        error_of(response, 400, response.json()["code"])
