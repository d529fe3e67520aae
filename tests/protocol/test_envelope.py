"""The Command envelope of DESIGN §4: ``parse_envelope`` checks shape only.

Every refusal is ``ProtocolError(SCHEMA_VALIDATION_FAILED)`` whose message starts with the
field's name and whose ``details["field"]`` names it. No database.
"""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mwportal.protocol import (
    Envelope,
    ErrorCode,
    ProtocolError,
    Target,
    generate_keypair,
    make_envelope,
    parse_envelope,
)

PRIVATE_KEY, PUBLIC_KEY = generate_keypair()
ACTOR = "6f1c2a3b-4d5e-4f60-8172-839405a6b7c8"
GROUP = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
WORKITEM = "11111111-2222-4333-8444-555555555555"
LEASE = "99999999-8888-4777-8666-555555555555"
ACTION = "abcdefab-cdef-4abc-8def-abcdefabcdef"


def valid(**overrides: Any) -> dict[str, Any]:
    """A full, signed ``work.checkpoint`` envelope using every optional member."""
    raw = make_envelope(
        type="work.checkpoint",
        actor=ACTOR,
        group=GROUP,
        body={"checkpoint": {"step": 1}},
        session_epoch=4,
        private_key=PRIVATE_KEY,
        action_id=ACTION,
        target={"kind": "workitem", "id": WORKITEM, "revision": 3},
        membership_epoch=2,
        ownership_epoch=1,
        lease_id=LEASE,
        issued_at=datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC),
    )
    raw["extensions"] = {}
    raw.update(overrides)
    return raw


def refusal(data: Any, **kw: Any) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        parse_envelope(data, **kw)
    assert info.value.code is ErrorCode.SCHEMA_VALIDATION_FAILED
    return info.value


def assert_names(err: ProtocolError, field: str) -> None:
    assert err.details.get("field") == field, err.details
    assert err.message.startswith(f"{field}:"), err.message
    assert err.as_dict()["code"] == "SCHEMA_VALIDATION_FAILED"


# --- Accepted ---------------------------------------------------------------


def test_it_accepts_a_valid_envelope() -> None:
    raw = valid()
    env = parse_envelope(raw)
    assert isinstance(env, Envelope)
    assert env.type == "work.checkpoint"
    assert env.action_id == ACTION
    assert env.actor == ACTOR
    assert env.group == GROUP
    assert env.session_epoch == 4
    assert env.issued_at == datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
    assert env.body == {"checkpoint": {"step": 1}}
    assert env.target == Target(kind="workitem", id=WORKITEM, revision=3)
    assert (env.membership_epoch, env.ownership_epoch, env.lease_id) == (2, 1, LEASE)
    assert env.signature == raw["signature"]
    assert env.raw == raw


def test_it_accepts_the_minimal_envelope_with_optional_members_omitted() -> None:
    raw = make_envelope(
        type="mission.create", actor=ACTOR, group=GROUP, body={}, session_epoch=0, private_key=PRIVATE_KEY
    )
    env = parse_envelope(raw)
    assert env.target is None
    assert (env.membership_epoch, env.ownership_epoch, env.lease_id, env.extensions) == (None, None, None, {})


@pytest.mark.parametrize("name", ["target", "membership_epoch", "ownership_epoch", "lease_id", "extensions"])
def test_it_accepts_null_for_an_optional_member(name: str) -> None:
    parse_envelope(valid(**{name: None}))


def test_it_accepts_a_target_without_revision() -> None:
    env = parse_envelope(valid(target={"kind": "workitem", "id": WORKITEM}))
    assert env.target == Target("workitem", WORKITEM, None)


@pytest.mark.parametrize(
    "issued_at", ["2026-11-29T10:00:00Z", "2026-11-29T10:00:00.5Z", "2026-11-29T10:00:00.123456789Z"]
)
def test_it_accepts_rfc3339_utc_times(issued_at: str) -> None:
    assert parse_envelope(valid(issued_at=issued_at)).issued_at.tzinfo is not None


def test_it_normalises_upper_case_uuids() -> None:
    env = parse_envelope(valid(action_id=ACTION.upper(), group=GROUP.upper()))
    assert (env.action_id, env.group) == (ACTION, GROUP)


def test_it_leaves_the_system_actor_to_the_authority() -> None:
    assert parse_envelope(valid(actor="system")).actor == "system"


def test_it_needs_no_signature_for_portal_commands() -> None:
    raw = valid()
    del raw["signature"]
    assert parse_envelope(raw, require_signature=False).signature is None


def test_same_content_same_hash_MWP_EVT_003() -> None:
    raw = valid()
    reordered = dict(reversed(list(raw.items())))
    resigned = {**raw, "signature": "something-else"}
    unsigned = {k: v for k, v in raw.items() if k != "signature"}
    expected = parse_envelope(raw).content_hash()
    assert parse_envelope(reordered).content_hash() == expected
    assert parse_envelope(resigned).content_hash() == expected
    assert parse_envelope(unsigned, require_signature=False).content_hash() == expected


def test_different_content_different_hash_MWP_EVT_003() -> None:
    base = parse_envelope(valid()).content_hash()
    assert parse_envelope(valid(body={"checkpoint": {"step": 2}})).content_hash() != base
    assert parse_envelope(valid(session_epoch=5)).content_hash() != base


# --- Refused: shape ---------------------------------------------------------


@pytest.mark.parametrize(
    "data", [[], "envelope", None, 5, [valid()]], ids=["empty-array", "string", "null", "number", "array-of-envelope"]
)
def test_it_refuses_what_is_not_an_object(data: Any) -> None:
    assert_names(refusal(data), "envelope")


REQUIRED = ["type", "action_id", "actor", "group", "session_epoch", "issued_at", "body", "signature"]


@pytest.mark.parametrize("name", REQUIRED)
def test_it_refuses_a_missing_required_member(name: str) -> None:
    raw = valid()
    del raw[name]
    assert_names(refusal(raw), name)


@pytest.mark.parametrize("name", ["note", "Type", "sig", "target_id", "", "signature "])
def test_it_refuses_an_unknown_member(name: str) -> None:
    assert_names(refusal(valid(**{name: 1})), name)


# --- Refused: wrong types, field by field -----------------------------------

BAD_UUIDS = [
    "not-a-uuid",
    "",
    "6f1c2a3b4d5e4f608172839405a6b7c8",
    "{6f1c2a3b-4d5e-4f60-8172-839405a6b7c8}",
    "urn:uuid:6f1c2a3b-4d5e-4f60-8172-839405a6b7c8",
    " 6f1c2a3b-4d5e-4f60-8172-839405a6b7c8",
    "6f1c2a3b-4d5e-4f60-8172-839405a6b7c",
    "6f1c2a3b-4d5e-4f60-8172-839405a6b7c8x",
    "6f1c2a3b4-d5e-4f60-8172-839405a6b7c8",
    "gf1c2a3b-4d5e-4f60-8172-839405a6b7c8",
    123,
    True,
    ["6f1c2a3b-4d5e-4f60-8172-839405a6b7c8"],
    {"id": "6f1c2a3b-4d5e-4f60-8172-839405a6b7c8"},
]


@pytest.mark.parametrize("name", ["action_id", "group", "lease_id"])
@pytest.mark.parametrize("bad", BAD_UUIDS, ids=repr)
def test_it_refuses_a_bad_uuid(name: str, bad: Any) -> None:
    assert_names(refusal(valid(**{name: bad})), name)


@pytest.mark.parametrize("bad", [*BAD_UUIDS, None, "System", "SYSTEM"], ids=repr)
def test_it_refuses_a_bad_actor(bad: Any) -> None:
    assert_names(refusal(valid(actor=bad)), "actor")


@pytest.mark.parametrize("bad", BAD_UUIDS, ids=repr)
def test_it_refuses_a_bad_target_id(bad: Any) -> None:
    assert_names(refusal(valid(target={"kind": "workitem", "id": bad, "revision": 3})), "target.id")


@pytest.mark.parametrize(
    "bad",
    [
        "start",
        "work.",
        ".start",
        "work..start",
        "Work.Start",
        "work.start ",
        "work start",
        "work.st-art",
        "1work.start",
        "work.9start",
        "",
        "work.start\n",
        5,
        None,
        ["work.start"],
        {"type": "work.start"},
    ],
    ids=repr,
)
def test_it_refuses_a_type_that_is_not_dotted(bad: Any) -> None:
    assert_names(refusal(valid(type=bad)), "type")


@pytest.mark.parametrize("name", ["session_epoch", "membership_epoch", "ownership_epoch"])
@pytest.mark.parametrize("bad", ["4", "", True, False, -1, 1.5, [4], {"epoch": 4}], ids=repr)
def test_it_refuses_an_epoch_that_is_not_a_natural_number(name: str, bad: Any) -> None:
    assert_names(refusal(valid(**{name: bad})), name)


def test_it_refuses_a_null_session_epoch() -> None:
    assert_names(refusal(valid(session_epoch=None)), "session_epoch")


@pytest.mark.parametrize(
    "bad",
    [
        "2026-11-29T10:00:00",
        "2026-11-29T10:00:00+00:00",
        "2026-11-29T10:00:00.000+00:00",
        "2026-11-29T10:00:00z",
        "2026-11-29 10:00:00Z",
        "2026-11-29t10:00:00Z",
        "2026-11-29T10:00Z",
        "2026-11-29Z",
        "2026-11-29T10:00:00.Z",
        "2026-11-29T10:00:00.1234567890Z",
        "2026-02-30T10:00:00Z",
        "2026-11-29T25:00:00Z",
        "2026-11-29T23:59:60Z",
        "26-11-29T10:00:00Z",
        "2026-11-29T10:00:00Z\n",
        "\u0662\u0660\u0662\u0666-11-29T10:00:00Z",
        "",
        1764410400,
        None,
    ],
    ids=repr,
)
def test_it_refuses_issued_at_that_is_not_rfc3339_utc_with_z(bad: Any) -> None:
    assert_names(refusal(valid(issued_at=bad)), "issued_at")


@pytest.mark.parametrize("bad", [[], [{}], "{}", None, 0, True], ids=repr)
def test_it_refuses_a_body_that_is_not_an_object(bad: Any) -> None:
    assert_names(refusal(valid(body=bad)), "body")


@pytest.mark.parametrize("bad", [[], "", 0, False, "{}", "x", 5, [{}]], ids=repr)
def test_it_refuses_extensions_that_are_not_an_object(bad: Any) -> None:
    # DESIGN §4: optional members may be omitted or null; any other
    # non-object is a wrong type, falsy ones ([], "", 0, false) included.
    assert_names(refusal(valid(extensions=bad)), "extensions")


@pytest.mark.parametrize("bad", ["", 5, None, ["sig"], {"sig": 1}, True], ids=repr)
def test_it_refuses_a_signature_that_is_not_a_non_empty_string(bad: Any) -> None:
    assert_names(refusal(valid(signature=bad)), "signature")


def test_it_checks_a_signature_that_is_present_even_when_not_required() -> None:
    assert_names(refusal(valid(signature=""), require_signature=False), "signature")


@pytest.mark.parametrize("bad", [[], "workitem", 5, True, [{"kind": "workitem"}]], ids=repr)
def test_it_refuses_a_target_that_is_not_an_object(bad: Any) -> None:
    assert_names(refusal(valid(target=bad)), "target")


@pytest.mark.parametrize("member", ["x", "ID", "lease_id", "aggregate"])
def test_it_refuses_an_unknown_target_member(member: str) -> None:
    target = {"kind": "workitem", "id": WORKITEM, "revision": 3, member: 1}
    assert_names(refusal(valid(target=target)), f"target.{member}")


@pytest.mark.parametrize("bad", [None, "", 5, ["workitem"], {"k": 1}], ids=repr)
def test_it_refuses_a_bad_target_kind(bad: Any) -> None:
    assert_names(refusal(valid(target={"kind": bad, "id": WORKITEM})), "target.kind")


def test_it_refuses_a_target_without_kind() -> None:
    assert_names(refusal(valid(target={"id": WORKITEM, "revision": 1})), "target.kind")


def test_it_refuses_a_target_without_id() -> None:
    assert_names(refusal(valid(target={"kind": "workitem", "revision": 1})), "target.id")


@pytest.mark.parametrize("bad", ["3", True, -1, 2.5, [3]], ids=repr)
def test_it_refuses_a_bad_target_revision(bad: Any) -> None:
    assert_names(refusal(valid(target={"kind": "workitem", "id": WORKITEM, "revision": bad})), "target.revision")


@pytest.mark.parametrize(
    "body",
    [{"x": float("nan")}, {"x": float("inf")}, {"x": 2**53}, {"x": -(2**60)}, {"x": {1: 2}}, {"x": {1, 2}}],
    ids=["nan", "inf", "2**53", "-2**60", "int-key", "set"],
)
def test_it_refuses_content_with_no_canonical_form(body: dict[str, Any]) -> None:
    refusal(valid(body=body))


@pytest.mark.parametrize(
    "raw_overrides",
    [{"body": {"x": "\ud800"}}, {"body": {"\udc00": 1}}, {"extensions": {"note": "a\udfffb"}}],
    ids=["value", "key", "extensions"],
)
def test_it_refuses_lone_surrogates_as_malformed(raw_overrides: dict[str, Any]) -> None:
    # A lone surrogate (JSON "\ud800") has no canonical UTF-8 form: SCHEMA_VALIDATION_FAILED,
    # not an escaping UnicodeEncodeError.
    refusal(valid(**raw_overrides))


# --- Hypothesis: random mutations -------------------------------------------

# Text with every code point, lone surrogates included (JSON can carry them
# as \udXXX escapes), UUID-looking strings, times and dotted names.
any_text = st.text(alphabet=st.characters() | st.characters(categories=["Cs"]), max_size=12)
plausible = st.sampled_from(
    [
        "system",
        ACTOR,
        ACTOR.upper(),
        "work.start",
        "x.y",
        "2026-11-29T10:00:00Z",
        "2026-11-29T10:00:00",
        "",
        "null",
        "0",
    ]
) | st.uuids().map(str)
scalars = (
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | any_text | plausible
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(any_text | plausible, children, max_size=4),
    max_leaves=12,
)
ALL_MEMBERS = [*REQUIRED, "target", "membership_epoch", "ownership_epoch", "lease_id", "extensions"]
member_names = st.sampled_from(ALL_MEMBERS) | any_text


@st.composite
def mutated_envelopes(draw: st.DrawFn) -> Any:
    raw: Any = copy.deepcopy(valid())
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        op = draw(st.sampled_from(["delete", "set", "set_target", "set_body", "replace_whole"]))
        if not isinstance(raw, dict):
            break
        if op == "delete" and raw:
            del raw[draw(st.sampled_from(sorted(raw)))]
        elif op == "set":
            raw[draw(member_names)] = draw(json_values)
        elif op == "set_target":
            target = raw.get("target") if isinstance(raw.get("target"), dict) else {}
            target[draw(st.sampled_from(["kind", "id", "revision"]) | any_text)] = draw(json_values)
            raw["target"] = target
        elif op == "set_body":
            raw["body"] = draw(st.dictionaries(any_text, json_values, max_size=3))
        else:
            raw = draw(json_values)
    return raw


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_envelopes(), st.booleans())
def test_it_answers_any_mutation_with_an_envelope_or_malformed(data: Any, require_signature: bool) -> None:
    try:
        env = parse_envelope(data, require_signature=require_signature)
    except ProtocolError as err:
        assert err.code is ErrorCode.SCHEMA_VALIDATION_FAILED
        assert isinstance(err.details.get("field"), str)
        assert err.message.startswith(f"{err.details['field']}:")
    else:
        assert isinstance(env, Envelope)
        env.content_hash()  # an accepted envelope always has a canonical form


@given(st.uuids())
def test_it_accepts_every_uuid_in_its_canonical_form(value: uuid.UUID) -> None:
    assert parse_envelope(valid(action_id=str(value))).action_id == str(value)
