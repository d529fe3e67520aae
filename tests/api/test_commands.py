"""``POST /api/v0.1/commands`` (DESIGN §5, PROTOCOL §15.1): a signed Command document's bytes in, its
receipt ``{actionId, events: [{eventId, sequence, kind}], aggregateRevision, replayed}`` out (201 when
accepted now, 200 for an unchanged retry), or the normative error document of the first failing stage
(§6.4, §19). No bearer token: the signature and epochs authenticate the Command. Every refusal writes
nothing, and no input answers 500."""

from __future__ import annotations

import json
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from missions.models import GroupEvent
from mwportal.protocol import catalogue
from mwportal.protocol.command import Key, format_timestamp
from mwportal.protocol.ids import urn
from tests.api.support import (
    COMMANDS,
    bearer,
    error_of,
    http,
    nothing_written,
    post_json,
    post_raw,
    show,
)
from tests.conftest import AgentKey, group_revision

ONE_MIB = 1024 * 1024
RECEIPT_MEMBERS = {"actionId", "events", "aggregateRevision", "replayed"}


def create_mission(owner: AgentKey, coordinator: AgentKey, **kw: Any) -> dict[str, Any]:
    """A signed ``mission.create`` of a new Group (it needs no Group state): the catalogue's example
    terms (§7.1: objective, definition of done, budget, deadline) with fresh IDs."""
    group = str(uuid.uuid4())
    payload = {
        **catalogue.command("mission.create").examples[0],
        "missionId": urn(str(uuid.uuid4())),
        "groupId": urn(group),
        "coordinatorId": coordinator.urn,
        "title": "Survey",
        "objective": "Map the coast",
        "deadline": format_timestamp(datetime.now(UTC) + timedelta(days=7)),
    }
    return owner.command("mission.create", group, payload, **kw)


def add_reviewer(owner: AgentKey, mission: dict[str, str], member: AgentKey, **kw: Any) -> dict[str, Any]:
    g = mission["group"]
    kw.setdefault("expected_revision", group_revision(g))
    return owner.command("membership.change", g, {"principal": member.actor, "roles": ["reviewer"]}, **kw)


# --- accepted, replayed, collided ----------------------------------------------------------------


def test_a_valid_command_answers_201_with_its_receipt_spec_15_1(owner: AgentKey, coordinator: AgentKey) -> None:
    document = create_mission(owner, coordinator)
    response = post_json(http(), COMMANDS, document)
    assert response.status_code == 201, show(response)
    receipt = response.json()
    assert set(receipt) == RECEIPT_MEMBERS, receipt
    assert receipt["actionId"] == document["actionId"] and receipt["replayed"] is False
    stored = GroupEvent.objects.filter(group_id=document["groupId"].removeprefix("urn:uuid:")).order_by("sequence")
    assert [{"eventId": urn(str(e.event_id)), "sequence": e.sequence, "kind": e.type} for e in stored] == (
        receipt["events"]
    )
    assert [ref["sequence"] for ref in receipt["events"]] == list(range(1, len(stored) + 1))  # §15.2: from 1
    assert isinstance(receipt["aggregateRevision"], int)


def test_a_command_on_an_existing_group_answers_its_new_revision_spec_15_3(
    mission: dict[str, str], owner: AgentKey, outsider: AgentKey
) -> None:
    before = group_revision(mission["group"])
    response = post_json(http(), COMMANDS, add_reviewer(owner, mission, outsider))
    assert response.status_code == 201, show(response)
    receipt = response.json()
    assert receipt["aggregateRevision"] == group_revision(mission["group"]) > before
    assert [ref["kind"] for ref in receipt["events"]] == ["membership.changed"]


def test_the_same_bytes_again_answer_200_with_the_stored_receipt_spec_15_1(
    owner: AgentKey, coordinator: AgentKey
) -> None:
    client = http()
    text = json.dumps(create_mission(owner, coordinator))
    first = post_raw(client, COMMANDS, text)
    assert first.status_code == 201, show(first)
    with nothing_written():
        again = post_raw(client, COMMANDS, text)
    assert again.status_code == 200, show(again)
    assert again.json() == {**first.json(), "replayed": True}


def test_the_same_content_reordered_is_still_a_replay_spec_17_4(owner: AgentKey, coordinator: AgentKey) -> None:
    client = http()
    document = create_mission(owner, coordinator)
    assert post_json(client, COMMANDS, document).status_code == 201
    with nothing_written():
        again = post_json(client, COMMANDS, dict(reversed(list(document.items()))))
    assert again.status_code == 200 and again.json()["replayed"] is True, show(again)


def test_the_same_action_id_with_other_content_is_409_collision_spec_19(owner: AgentKey, coordinator: AgentKey) -> None:
    client = http()
    document = create_mission(owner, coordinator)
    assert post_json(client, COMMANDS, document).status_code == 201
    other = create_mission(owner, coordinator, action_id=document["actionId"].removeprefix("urn:uuid:"))
    with nothing_written():
        error = error_of(post_json(client, COMMANDS, other), 409, "ACTION_ID_COLLISION")
    assert error["relatedActionId"] == document["actionId"]


def test_a_known_command_with_a_bad_signature_is_401_not_its_receipt_spec_6_4(
    owner: AgentKey, coordinator: AgentKey
) -> None:
    client = http()
    document = create_mission(owner, coordinator)
    assert post_json(client, COMMANDS, document).status_code == 201
    forged = json.loads(json.dumps(document))
    value = forged["signature"]["value"]
    forged["signature"]["value"] = ("A" if value[0] != "A" else "B") + value[1:]
    with nothing_written():
        error_of(post_json(client, COMMANDS, forged), 401, "AUTH_INVALID_SIGNATURE")


# --- authentication and authority ----------------------------------------------------------------


def test_a_command_signed_with_another_key_is_401_spec_6_4(
    owner: AgentKey, coordinator: AgentKey, outsider: AgentKey
) -> None:
    impostor = AgentKey(owner.id, Key(owner.key.key_id, outsider.key.seed), owner.org_slug, owner.kind)
    with nothing_written():
        error_of(post_json(http(), COMMANDS, create_mission(impostor, coordinator)), 401, "AUTH_INVALID_SIGNATURE")


def test_an_unknown_key_is_401_spec_6_4(owner: AgentKey, coordinator: AgentKey) -> None:
    stranger = AgentKey(owner.id, Key.generate(), owner.org_slug, owner.kind)
    with nothing_written():
        error_of(post_json(http(), COMMANDS, create_mission(stranger, coordinator)), 401, "AUTH_INVALID_SIGNATURE")


def propose(agent: AgentKey, group: str, **kw: Any) -> dict[str, Any]:
    """A signed ``work.propose`` (the catalogue's example contract, a fresh proposal)."""
    contract = {
        **catalogue.command("work.propose").examples[0]["contract"],
        "deadline": format_timestamp(datetime.now(UTC) + timedelta(days=7)),
    }
    return agent.command("work.propose", group, {"proposalId": urn(str(uuid.uuid4())), "contract": contract}, **kw)


def test_a_stale_session_epoch_is_401_spec_6_3(mission: dict[str, str], worker: AgentKey) -> None:
    stale = worker.session_epoch
    worker.open_session()
    with nothing_written():
        error_of(
            post_json(http(), COMMANDS, propose(worker, mission["group"], session_epoch=stale)),
            401,
            "AUTH_STALE_SESSION",
        )


def test_a_non_member_gets_the_answer_of_an_absent_group_spec_17_2(mission: dict[str, str], outsider: AgentKey) -> None:
    def post(group: str) -> dict[str, Any]:
        document = propose(outsider, group, membership_epoch=1)
        error = error_of(post_json(http(), COMMANDS, document), 404, "GROUP_NOT_FOUND")
        error.pop("relatedActionId", None)
        return error

    with nothing_written():
        assert post(mission["group"]) == post(str(uuid.uuid4()))


def test_a_member_without_the_role_is_403_spec_8(mission: dict[str, str], worker: AgentKey, outsider: AgentKey) -> None:
    # membership.change is the MissionOwner's or the Coordinator's; Wanda is a worker.
    with nothing_written():
        error_of(post_json(http(), COMMANDS, add_reviewer(worker, mission, outsider)), 403, "AUTH_FORBIDDEN")


def test_a_stale_expected_revision_is_409_revision_conflict_spec_15_3(
    mission: dict[str, str], owner: AgentKey, outsider: AgentKey
) -> None:
    current = group_revision(mission["group"])
    document = add_reviewer(owner, mission, outsider, expected_revision=current - 1)
    with nothing_written():
        error = error_of(post_json(http(), COMMANDS, document), 409, "REVISION_CONFLICT")
    assert (error["expectedRevision"], error["currentRevision"]) == (current - 1, current), error


def test_no_bearer_token_is_needed_and_a_bad_one_is_not_consulted(owner: AgentKey, coordinator: AgentKey) -> None:
    response = http().post(
        COMMANDS, json.dumps(create_mission(owner, coordinator)), content_type="application/json", **bearer("x" * 43)
    )
    assert response.status_code == 201, show(response)


# --- framing: before any schema (§6.4 stage 1, §17.4) -------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [" ", "not json", "{", '{"kind": "mission.create",}', "{'kind': 1}", b"\xff\xfe\x00", b"\x80abc", "NaN"],
    ids=repr,
)
def test_a_body_that_is_not_json_is_a_protocol_violation_spec_6_4(org: dict[str, str], raw: str | bytes) -> None:
    with nothing_written():
        error_of(post_raw(http(), COMMANDS, raw), 400, "PROTOCOL_VIOLATION")


def test_an_empty_body_is_a_protocol_violation(org: dict[str, str]) -> None:
    error_of(post_raw(http(), COMMANDS, b""), 400, "PROTOCOL_VIOLATION")


@pytest.mark.parametrize("member", ["kind", "actionId", "payload", "signature"])
def test_a_duplicate_member_is_a_protocol_violation_spec_17_4(
    owner: AgentKey, coordinator: AgentKey, member: str
) -> None:
    document = create_mission(owner, coordinator)
    text = json.dumps(document)[:-1] + f", {json.dumps(member)}: {json.dumps(document[member])}}}"
    with nothing_written():
        error_of(post_raw(http(), COMMANDS, text), 400, "PROTOCOL_VIOLATION")


@pytest.mark.parametrize("value", [[], "command", 1, None], ids=repr)
def test_json_that_is_not_a_command_object_is_refused_before_any_lookup(org: dict[str, str], value: Any) -> None:
    with nothing_written():
        response = post_json(http(), COMMANDS, value)
    assert response.status_code == 400, show(response)
    error_of(response, 400, response.json()["code"])


@pytest.mark.parametrize("member", ["actionId", "actor", "kind", "issuedAt", "payload", "signature"])
def test_a_missing_member_is_refused_before_the_signature_spec_6_4(
    owner: AgentKey, coordinator: AgentKey, member: str
) -> None:
    document = create_mission(owner, coordinator)
    del document[member]
    with nothing_written():
        response = post_json(http(), COMMANDS, document)
    assert response.status_code == 400, show(response)
    assert response.json()["code"] in ("SCHEMA_VALIDATION_FAILED", "PROTOCOL_VIOLATION"), show(response)
    error_of(response, 400, response.json()["code"])


@pytest.mark.parametrize(
    "media_type", ["text/plain", "application/x-www-form-urlencoded", "application/json; charset=utf-16"]
)
def test_a_body_not_declared_json_is_415(owner: AgentKey, coordinator: AgentKey, media_type: str) -> None:
    with nothing_written():
        response = post_raw(http(), COMMANDS, json.dumps(create_mission(owner, coordinator)), media_type)
        error_of(response, 415, "PROTOCOL_VIOLATION")


def padded(owner: AgentKey, coordinator: AgentKey, size: int) -> bytes:
    """A validly signed ``mission.create`` of exactly ``size`` bytes (padded in its objective)."""
    document = create_mission(owner, coordinator)
    data = json.dumps(document).encode()
    return data.replace(b'"Map the coast"', b'"Map the coast"' + b" " * (size - len(data)))


def test_a_command_of_exactly_one_mebibyte_is_read(owner: AgentKey, coordinator: AgentKey) -> None:
    data = padded(owner, coordinator, ONE_MIB)
    assert len(data) == ONE_MIB
    assert post_raw(http(), COMMANDS, data).status_code == 201


def test_a_body_one_byte_over_one_mebibyte_is_413(owner: AgentKey, coordinator: AgentKey) -> None:
    data = padded(owner, coordinator, ONE_MIB + 1)
    with nothing_written():
        error_of(post_raw(http(), COMMANDS, data), 413, "PROTOCOL_VIOLATION")


def test_a_huge_body_is_413_without_being_read(org: dict[str, str]) -> None:
    error_of(post_raw(http(), COMMANDS, b'{"pad": "' + b"x" * (4 * ONE_MIB) + b'"}'), 413, "PROTOCOL_VIOLATION")


def test_escaped_lone_surrogates_are_a_protocol_violation_spec_2(owner: AgentKey, coordinator: AgentKey) -> None:
    text = json.dumps(create_mission(owner, coordinator)).replace('"Survey"', '"Sur\\ud800vey"')
    with nothing_written():
        error_of(post_raw(http(), COMMANDS, text), 400, "PROTOCOL_VIOLATION")


def test_deeply_nested_bodies_never_answer_500(owner: AgentKey, coordinator: AgentKey) -> None:
    client = http()
    text = json.dumps(create_mission(owner, coordinator)).replace('"Survey"', "PLACEHOLDER")
    limit = sys.getrecursionlimit()
    with nothing_written():
        answers = {
            depth: post_raw(client, COMMANDS, text.replace("PLACEHOLDER", "[" * depth + "]" * depth)).status_code
            for depth in range(limit - 100, limit + 10, 7)
        }
    assert {status for status in answers.values()} <= {400, 401}, answers


@pytest.mark.parametrize("method", ["get", "put", "patch", "delete"])
def test_other_methods_are_405_in_the_error_document(org: dict[str, str], method: str) -> None:
    error_of(getattr(http(), method)(COMMANDS), 405, "PROTOCOL_VIOLATION")


# --- no input answers 500 (issue 16 item 6) ------------------------------------------------------

any_text = st.text(alphabet=st.characters() | st.characters(categories=["Cs"]), max_size=10)
scalars = st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats() | any_text | st.uuids().map(urn)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=4),
    max_leaves=10,
)
MEMBERS = ["protocolVersion", "actionId", "actor", "kind", "groupId", "correlationId", "issuedAt", "payload",
           "sessionEpoch", "membershipEpoch", "expectedRevision", "signature", "extensions"]  # fmt: skip


def as_bytes(value: Any) -> bytes:
    try:
        return json.dumps(value).encode()
    except ValueError:
        return b"null"


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(member=st.sampled_from(MEMBERS) | any_text, value=json_values)
def test_no_changed_member_answers_500(owner: AgentKey, coordinator: AgentKey, member: str, value: Any) -> None:
    document = {**create_mission(owner, coordinator), member: value}
    with nothing_written():
        response = post_raw(http(), COMMANDS, as_bytes(document))
    assert 400 <= response.status_code < 500, show(response)
    error_of(response, response.status_code, response.json()["code"])


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200))
def test_no_byte_string_answers_500(org: dict[str, str], data: bytes) -> None:
    with nothing_written():
        response = post_raw(http(), COMMANDS, data)
    assert 400 <= response.status_code < 500, show(response)
    error_of(response, response.status_code, response.json()["code"])
