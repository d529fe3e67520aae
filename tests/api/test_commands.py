"""POST /api/v1/commands (DESIGN §3, §4): a signed envelope in, a receipt out.

Every refusal answers in the error shape of DESIGN §4 and writes nothing; no
input, however broken, answers 500.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import sys
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from missions.models import ActionReceipt, GroupEvent
from missions.registry import command_types
from mwportal.protocol import generate_keypair, signed
from tests.api.support import (
    COMMANDS,
    error_of,
    http,
    malformed_naming,
    nothing_written,
    post_json,
    post_raw,
    show,
    unreadable_body,
)
from tests.conftest import AgentKey, group_revision

RECEIPT_MEMBERS = {"action_id", "actor", "group", "status", "events", "aggregate", "accepted_at", "replayed"}
RFC3339_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
ONE_MIB = 1024 * 1024


def create_mission(owner: AgentKey, **kw: Any) -> dict[str, Any]:
    """A signed ``mission.create`` (it needs no existing Group state)."""
    body = {"mission": str(uuid.uuid4()), "title": "Survey", "objective": "Map the coast"}
    return owner.envelope("mission.create", str(uuid.uuid4()), body, **kw)


def add_member(owner: AgentKey, mission: dict[str, str], agent: AgentKey, **kw: Any) -> dict[str, Any]:
    g = mission["group"]
    target = {"kind": "group", "id": g, "revision": group_revision(g)}
    return owner.envelope("membership.add", g, {"agent": agent.id, "roles": ["reviewer"]}, target=target, **kw)


def counts() -> tuple[int, int]:
    return GroupEvent.objects.count(), ActionReceipt.objects.count()


# --- Accepted, replayed, collided -------------------------------------------


def test_a_valid_command_answers_201_with_the_receipt(owner: AgentKey) -> None:
    raw = create_mission(owner)
    response = post_json(http(), COMMANDS, raw)
    assert response.status_code == 201, show(response)
    receipt = response.json()
    assert set(receipt) == RECEIPT_MEMBERS
    assert receipt["action_id"] == raw["action_id"]
    assert receipt["actor"] == owner.id
    assert receipt["group"] == raw["group"]
    assert receipt["status"] == "accepted"
    assert receipt["replayed"] is False
    assert RFC3339_Z.match(receipt["accepted_at"])
    assert receipt["aggregate"] == {"kind": "group", "id": raw["group"], "revision": 1}
    assert [e["type"] for e in receipt["events"]] == ["mission.created", "membership.added"]
    assert [e["sequence"] for e in receipt["events"]] == [1, 2]
    for ref in receipt["events"]:
        assert set(ref) == {"event_id", "sequence", "type"}
        uuid.UUID(ref["event_id"])
    stored = GroupEvent.objects.filter(group_id=raw["group"]).order_by("sequence")
    assert [str(e.event_id) for e in stored] == [e["event_id"] for e in receipt["events"]]


def test_a_command_on_an_existing_aggregate_answers_with_its_new_revision(
    mission: dict[str, str], owner: AgentKey, outsider: AgentKey
) -> None:
    before = group_revision(mission["group"])
    response = post_json(http(), COMMANDS, add_member(owner, mission, outsider))
    assert response.status_code == 201, show(response)
    receipt = response.json()
    assert receipt["aggregate"] == {"kind": "group", "id": mission["group"], "revision": before + 1}
    assert [e["type"] for e in receipt["events"]] == ["membership.added"]


def test_the_same_bytes_again_answer_200_replayed_with_the_same_events_MWP_EVT_003(owner: AgentKey) -> None:
    client = http()
    text = json.dumps(create_mission(owner))
    first = post_raw(client, COMMANDS, text)
    assert first.status_code == 201, show(first)
    with nothing_written():
        again = post_raw(client, COMMANDS, text)
    assert again.status_code == 200, show(again)
    replay = again.json()
    assert replay["replayed"] is True
    assert replay == {**first.json(), "replayed": True}


def test_the_same_content_reordered_is_still_a_replay_MWP_EVT_003(owner: AgentKey) -> None:
    client = http()
    raw = create_mission(owner)
    assert post_json(client, COMMANDS, raw).status_code == 201
    reordered = dict(reversed(list(raw.items())))
    with nothing_written():
        again = post_json(client, COMMANDS, reordered)
    assert again.status_code == 200, show(again)
    assert again.json()["replayed"] is True


def test_the_same_action_id_with_other_content_is_409_collision_MWP_EVT_003(owner: AgentKey) -> None:
    client = http()
    raw = create_mission(owner)
    assert post_json(client, COMMANDS, raw).status_code == 201
    other = create_mission(owner, action_id=raw["action_id"])
    with nothing_written():
        error = error_of(post_json(client, COMMANDS, other), 409, "ACTION_ID_COLLISION")
    assert error["details"] == {"action_id": raw["action_id"]}


# --- Authentication and authority refusals ----------------------------------


def test_a_bad_signature_is_401_and_writes_nothing(owner: AgentKey, outsider: AgentKey) -> None:
    client = http()
    raw = create_mission(owner)
    tampered = {**raw, "body": {**raw["body"], "title": "Forged"}}
    wrong_key = signed(outsider.private_key, {k: v for k, v in raw.items() if k != "signature"})
    garbage = {**raw, "signature": "AAAA"}
    flipped_sig = {**raw, "signature": ("B" if raw["signature"][0] == "A" else "A") + raw["signature"][1:]}
    for bad in (tampered, wrong_key, garbage, flipped_sig):
        with nothing_written():
            error_of(post_json(client, COMMANDS, bad), 401, "AUTH_INVALID_SIGNATURE")


def test_an_unknown_actor_is_401(org: dict[str, str]) -> None:
    private, public = generate_keypair()
    stranger = AgentKey(str(uuid.uuid4()), private, public, "acme", session_epoch=1)
    with nothing_written():
        error_of(post_json(http(), COMMANDS, create_mission(stranger)), 401, "AUTH_INVALID_SIGNATURE")


def test_a_stale_session_epoch_is_401(owner: AgentKey) -> None:
    stale = create_mission(owner, session_epoch=owner.session_epoch - 1)
    with nothing_written():
        error_of(post_json(http(), COMMANDS, stale), 401, "AUTH_STALE_SESSION")


def test_a_non_member_gets_the_answer_of_an_absent_group(
    mission: dict[str, str], outsider: AgentKey, worker2: AgentKey
) -> None:
    """Issue 16 item 8: a signed Command into a Group the actor is not in is
    answered exactly as one into a Group that does not exist (status, code,
    message, details), so a signature proves nothing about which IDs exist."""
    g = mission["group"]
    raw = outsider.envelope(
        "membership.remove", g, {"agent": worker2.id}, target={"kind": "group", "id": g, "revision": group_revision(g)}
    )
    absent = str(uuid.uuid4())
    raw_absent = outsider.envelope(
        "membership.remove", absent, {"agent": worker2.id}, target={"kind": "group", "id": absent, "revision": 1}
    )
    with nothing_written():
        seen = error_of(post_json(http(), COMMANDS, raw), 404, "GROUP_NOT_FOUND")
        unseen = error_of(post_json(http(), COMMANDS, raw_absent), 404, "GROUP_NOT_FOUND")
    assert seen == unseen


def test_a_member_without_the_role_is_403(mission: dict[str, str], worker: AgentKey, worker2: AgentKey) -> None:
    g = mission["group"]
    raw = worker.envelope(
        "membership.remove", g, {"agent": worker2.id}, target={"kind": "group", "id": g, "revision": group_revision(g)}
    )
    with nothing_written():
        error_of(post_json(http(), COMMANDS, raw), 403, "AUTH_FORBIDDEN")


def test_an_unknown_group_is_404(owner: AgentKey, worker: AgentKey) -> None:
    g = str(uuid.uuid4())
    raw = owner.envelope(
        "membership.add", g, {"agent": worker.id, "roles": ["worker"]}, target={"kind": "group", "id": g, "revision": 1}
    )
    with nothing_written():
        error_of(post_json(http(), COMMANDS, raw), 404, "GROUP_NOT_FOUND")


def test_a_stale_revision_is_409(mission: dict[str, str], owner: AgentKey, outsider: AgentKey) -> None:
    g = mission["group"]
    raw = owner.envelope(
        "membership.add",
        g,
        {"agent": outsider.id, "roles": ["worker"]},
        target={"kind": "group", "id": g, "revision": group_revision(g) - 1},
    )
    with nothing_written():
        error_of(post_json(http(), COMMANDS, raw), 409, "REVISION_CONFLICT")


# --- Malformed envelopes: 400 naming the field, nothing written -------------

REQUIRED = ["type", "action_id", "actor", "group", "session_epoch", "issued_at", "body", "signature"]


@pytest.mark.parametrize("member", REQUIRED)
def test_a_missing_member_is_malformed_naming_it(owner: AgentKey, member: str) -> None:
    raw = create_mission(owner)
    del raw[member]
    with nothing_written():
        malformed_naming(post_json(http(), COMMANDS, raw), member)


@pytest.mark.parametrize("member", ["note", "Type", "token", "grants"])
def test_an_extra_member_is_malformed_naming_it(owner: AgentKey, member: str) -> None:
    # Signed with the extra member in place, so only the shape is at fault.
    raw = create_mission(owner)
    unsigned = {k: v for k, v in raw.items() if k != "signature"}
    with nothing_written():
        malformed_naming(post_json(http(), COMMANDS, signed(owner.private_key, {**unsigned, member: 1})), member)


WRONG = [
    ("type", "create", "type"),
    ("type", "Mission.Create", "type"),
    ("type", 5, "type"),
    ("type", "mission.fly", "type"),
    ("type", "mission.create\n", "type"),
    ("action_id", "not-a-uuid", "action_id"),
    ("action_id", 7, "action_id"),
    ("action_id", "{6f1c2a3b-4d5e-4f60-8172-839405a6b7c8}", "action_id"),
    ("actor", "not-a-uuid", "actor"),
    ("actor", None, "actor"),
    ("group", "6f1c2a3b4d5e4f608172839405a6b7c8", "group"),
    ("group", ["x"], "group"),
    ("lease_id", "lease-1", "lease_id"),
    ("lease_id", 1, "lease_id"),
    ("session_epoch", "1", "session_epoch"),
    ("session_epoch", True, "session_epoch"),
    ("session_epoch", -1, "session_epoch"),
    ("session_epoch", 1.5, "session_epoch"),
    ("membership_epoch", "2", "membership_epoch"),
    ("ownership_epoch", False, "ownership_epoch"),
    ("issued_at", "2026-11-29T10:00:00", "issued_at"),
    ("issued_at", "2026-11-29T10:00:00+00:00", "issued_at"),
    ("issued_at", 1764410400, "issued_at"),
    ("body", [], "body"),
    ("body", "{}", "body"),
    ("body", None, "body"),
    ("target", [], "target"),
    ("target", "group", "target"),
    ("target", {"kind": "group", "id": "not-a-uuid"}, "target.id"),
    ("target", {"kind": "group", "id": "5f0c3a52-8d1e-4b7a-9c3e-2a6f1d4b8e90", "rev": 1}, "target.rev"),
    ("target", {"kind": "", "id": "5f0c3a52-8d1e-4b7a-9c3e-2a6f1d4b8e91"}, "target.kind"),
    ("target", {"kind": "group"}, "target.id"),
    ("target", {"kind": "group", "id": "5f0c3a52-8d1e-4b7a-9c3e-2a6f1d4b8e92", "revision": "1"}, "target.revision"),
    ("extensions", "x", "extensions"),
    ("extensions", [], "extensions"),
    ("signature", "", "signature"),
    ("signature", 12, "signature"),
]


@pytest.mark.parametrize(("member", "value", "field"), WRONG, ids=[f"{m}={v!r}" for m, v, _ in WRONG])
def test_a_member_of_the_wrong_type_is_malformed_naming_it(
    owner: AgentKey, member: str, value: Any, field: str
) -> None:
    # Re-signed after the change, so the answer cannot be a signature refusal.
    raw = create_mission(owner)
    unsigned = {k: v for k, v in raw.items() if k != "signature"}
    unsigned[member] = value
    body = signed(owner.private_key, unsigned) if member != "signature" else {**unsigned}
    with nothing_written():
        malformed_naming(post_json(http(), COMMANDS, body), field)


@pytest.mark.parametrize(
    "raw",
    [
        "",
        " ",
        "not json",
        "{",
        '{"type": "mission.create",}',
        "{'type': 1}",
        b"\xff\xfe\x00",
        b"\x80abc",
        "NaN",
        '{"body": Infinity}',
    ],
    ids=repr,
)
def test_a_body_that_is_not_json_is_malformed(owner: AgentKey, raw: str | bytes) -> None:
    with nothing_written():
        unreadable_body(post_raw(http(), COMMANDS, raw))


@pytest.mark.parametrize("value", [[], [{}], "envelope", 1, 1.5, None, True], ids=repr)
def test_json_that_is_not_an_object_is_malformed(org: dict[str, str], value: Any) -> None:
    with nothing_written():
        malformed_naming(post_json(http(), COMMANDS, value), "envelope")


@pytest.mark.parametrize("member", ["type", "action_id", "body", "signature"])
def test_duplicate_members_are_malformed(owner: AgentKey, member: str) -> None:
    raw = create_mission(owner)
    text = json.dumps(raw)[:-1] + f", {json.dumps(member)}: {json.dumps(raw[member])}}}"
    with nothing_written():
        error = unreadable_body(post_raw(http(), COMMANDS, text))
    assert member in error["message"]


def test_nested_duplicate_members_are_malformed(owner: AgentKey) -> None:
    raw = create_mission(owner)
    text = json.dumps(raw).replace('"title": "Survey"', '"title": "Survey", "title": "Other"')
    assert text.count('"title"') == 2
    with nothing_written():
        unreadable_body(post_raw(http(), COMMANDS, text))


def test_an_empty_body_is_malformed(org: dict[str, str]) -> None:
    with nothing_written():
        unreadable_body(post_raw(http(), COMMANDS, b""))


@pytest.mark.parametrize(
    ("number", "code"),
    [
        # A binary64 value, but not a session epoch: the member's schema.
        ("9007199254740992", "SCHEMA_VALIDATION_FAILED"),
        # §6.4: not JSON, or a value outside the JCS data model.
        ("-9007199254740993", "PROTOCOL_VIOLATION"),
        ("1e400", "PROTOCOL_VIOLATION"),
        ("NaN", "PROTOCOL_VIOLATION"),
        ("-Infinity", "PROTOCOL_VIOLATION"),
    ],
)
def test_numbers_without_a_canonical_form_are_malformed(owner: AgentKey, number: str, code: str) -> None:
    raw = create_mission(owner)
    text = json.dumps(raw).replace(f'"session_epoch": {raw["session_epoch"]}', f'"session_epoch": {number}')
    assert number in text
    with nothing_written():
        error_of(post_raw(http(), COMMANDS, text), 400, code)


def padded_command(owner: AgentKey, size: int) -> bytes:
    """A validly signed ``mission.create`` of exactly ``size`` bytes (padded in ``extensions``)."""
    raw = create_mission(owner)
    unsigned = {k: v for k, v in raw.items() if k != "signature"}
    unsigned["extensions"] = {"pad": ""}
    overhead = len(json.dumps(signed(owner.private_key, unsigned)).encode())
    unsigned["extensions"] = {"pad": "x" * (size - overhead)}
    data = json.dumps(signed(owner.private_key, unsigned)).encode()
    assert len(data) == size
    return data


def test_a_command_of_exactly_one_mebibyte_is_accepted(owner: AgentKey) -> None:
    response = post_raw(http(), COMMANDS, padded_command(owner, ONE_MIB))
    assert response.status_code == 201, show(response)


def test_a_command_one_byte_over_one_mebibyte_is_malformed(owner: AgentKey) -> None:
    data = padded_command(owner, ONE_MIB + 1)
    with nothing_written():
        unreadable_body(post_raw(http(), COMMANDS, data))


def test_a_huge_body_is_malformed(org: dict[str, str]) -> None:
    data = b'{"pad": "' + b"x" * (4 * ONE_MIB) + b'"}'
    with nothing_written():
        unreadable_body(post_raw(http(), COMMANDS, data))


@pytest.mark.parametrize(
    ("where", "escape"),
    [("body value", '"\\ud800"'), ("body key", None), ("title", '"a\\udfffb"')],
)
def test_escaped_lone_surrogates_are_malformed_not_500(owner: AgentKey, where: str, escape: str | None) -> None:
    raw = create_mission(owner)
    text = json.dumps(raw)
    if where == "body key":
        text = text.replace('"title":', '"\\udc00": 1, "title":')
    elif where == "title":
        text = text.replace('"title": "Survey"', f'"title": {escape}')
    else:
        text = text.replace('"title": "Survey"', f'"title": "Survey", "note": {escape}')
    with nothing_written():
        # §6.4: a lone surrogate is outside the JCS data model.
        error_of(post_raw(http(), COMMANDS, text), 400, "PROTOCOL_VIOLATION")


def test_an_unknown_member_named_with_a_lone_surrogate_is_malformed_not_500(owner: AgentKey) -> None:
    # The refusal names the member; naming it must not break the JSON answer.
    text = json.dumps(create_mission(owner))[:-1] + ', "\\ud800": 1}'
    with nothing_written():
        error_of(post_raw(http(), COMMANDS, text), 400, "PROTOCOL_VIOLATION")


def test_utf8_encoded_surrogates_are_malformed_not_500(owner: AgentKey) -> None:
    data = json.dumps(create_mission(owner)).encode().replace(b'"Survey"', b'"Sur\xed\xa0\x80vey"')
    with nothing_written():
        error_of(post_raw(http(), COMMANDS, data), 400, "PROTOCOL_VIOLATION")


def test_deeply_nested_bodies_never_answer_500(owner: AgentKey) -> None:
    # Nesting near the interpreter's recursion limit: the parser may take a
    # depth that a later, deeper canonicalisation (signature check, content
    # hash) cannot; every depth must still be answered 400 or 401.
    client = http()
    text = json.dumps(create_mission(owner)).replace('"Survey"', "PLACEHOLDER")
    limit = sys.getrecursionlimit()
    answers: dict[int, int] = {}
    with nothing_written():
        for depth in range(limit - 200, limit + 10):
            response = post_raw(client, COMMANDS, text.replace("PLACEHOLDER", "[" * depth + "]" * depth))
            answers[depth] = response.status_code
    crashed = sorted(d for d, status in answers.items() if status not in (400, 401))
    assert not crashed, {d: answers[d] for d in crashed}


# --- No input answers 500 ---------------------------------------------------

any_text = st.text(alphabet=st.characters() | st.characters(categories=["Cs"]), max_size=10)
plausible_text = (
    st.sampled_from(["system", "group", "workitem", "owner", "worker", "coordinator", "2026-11-29T10:00:00Z", ""])
    | st.sampled_from(command_types())  # reach every registered handler with odd bodies
    | st.uuids().map(str)
    | st.just("x" * 300)
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats()
    | any_text
    | plausible_text
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(any_text | plausible_text, children, max_size=4),
    max_leaves=10,
)
MEMBERS = [*REQUIRED, "target", "membership_epoch", "ownership_epoch", "lease_id", "extensions"]


@st.composite
def mutations(draw: st.DrawFn, bases: list[dict[str, Any]]) -> tuple[Any, bool]:
    """A base envelope mutated 1-3 times, then re-signed or not."""
    raw: Any = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        op = draw(st.sampled_from(["delete", "set", "set_body_member", "set_target_member", "whole"]))
        if not isinstance(raw, dict):
            break
        if op == "delete" and raw:
            del raw[draw(st.sampled_from(sorted(raw)))]
        elif op == "set":
            raw[draw(st.sampled_from(MEMBERS) | any_text)] = draw(json_values)
        elif op == "set_body_member" and isinstance(raw.get("body"), dict):
            raw["body"][draw(st.sampled_from(sorted(raw["body"]) or ["x"]) | any_text)] = draw(json_values)
        elif op == "set_target_member":
            target = raw["target"] if isinstance(raw.get("target"), dict) else {}
            target[draw(st.sampled_from(["kind", "id", "revision"]) | any_text)] = draw(json_values)
            raw["target"] = target
        elif op == "whole":
            raw = draw(json_values)
    resign = draw(st.booleans())
    return raw, resign


def as_bytes(value: Any) -> bytes:
    try:
        return json.dumps(value).encode("utf-8")  # ensure_ascii: surrogates travel as \udXXX escapes
    except ValueError:  # NaN and friends are still JSON to json.dumps
        return b"null"


@pytest.fixture
def bases(mission: dict[str, str], owner: AgentKey, worker: AgentKey, outsider: AgentKey) -> list[dict[str, Any]]:
    g = mission["group"]
    target = {"kind": "group", "id": g, "revision": group_revision(g)}
    return [
        create_mission(owner),
        owner.envelope("membership.add", g, {"agent": outsider.id, "roles": ["worker"]}, target=target),
        owner.envelope("membership.set_roles", g, {"agent": worker.id, "roles": ["worker", "reviewer"]}, target=target),
        worker.envelope("work.propose", g, {"proposal": str(uuid.uuid4()), "contract": {"goal": "x"}}),
        owner.envelope("mission.cancel", g, {"reason": "done"}, target=target),
    ]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
def test_no_mutated_envelope_answers_500(
    data: st.DataObject, bases: list[dict[str, Any]], owner: AgentKey, worker: AgentKey
) -> None:
    raw, resign = data.draw(mutations(bases))
    if resign and isinstance(raw, dict):
        key = worker.private_key if raw.get("actor") == worker.id else owner.private_key
        with contextlib.suppress(ValueError):  # no canonical form: send it unsigned
            raw = signed(key, raw)
    response = post_raw(http(), COMMANDS, as_bytes(raw))
    # Accepted only when re-signed; a replay of content an earlier example
    # had accepted answers 200 before any signature check (DESIGN §3 step 1).
    # A mutation that happens to leave the signed content as it was (a member
    # set to its own value) is the base envelope itself, validly signed.
    unchanged = isinstance(raw, dict) and any(
        {k: v for k, v in raw.items() if k != "signature"} == {k: v for k, v in b.items() if k != "signature"}
        and raw.get("signature") == b["signature"]
        for b in bases
    )
    allowed = {400, 401, 403, 404, 409, 422, 200} | ({201} if resign or unchanged else set())
    assert response.status_code in allowed, show(response)
    if response.status_code == 200:
        assert response.json()["replayed"] is True
    if response.status_code >= 400:
        error_of(response, response.status_code, response.json()["code"])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(value=json_values)
def test_no_json_value_answers_500(org: dict[str, str], value: Any) -> None:
    with nothing_written():
        response = post_raw(http(), COMMANDS, as_bytes(value))
    assert response.status_code in {400, 401, 403, 404, 409, 422}, show(response)
    error_of(response, response.status_code, response.json()["code"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200))
def test_no_byte_string_answers_500(org: dict[str, str], data: bytes) -> None:
    with nothing_written():
        response = post_raw(http(), COMMANDS, data)
    assert response.status_code in {400, 401, 403, 404, 409, 422}, show(response)
