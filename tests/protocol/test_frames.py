"""The WebSocket frame layer (PROTOCOL §17, §17.1, §17.3, §17.4, §19, §21).

Every builder's frame validates against the kernel's schema and against the
bundle's normative ``websocket-frame.schema.json`` (python-jsonschema, the
same registry as test_schemas_agree.py); malformed messages get the code of
the rule they break.
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from referencing import Registry, Resource

from mwportal.protocol import frames, schemas, values
from mwportal.protocol.errors import ErrorCode, ProtocolError

from .bundle import bundle_root

NOW = datetime(2026, 12, 1, 15, 0, 0, 123456, tzinfo=UTC)
AGENT = "urn:uuid:6f1c2553-0000-4000-8000-000000000001"
KEY = "urn:uuid:6f1c2553-0000-4000-8000-000000000002"
GROUP = "urn:uuid:6f1c2553-0000-4000-8000-000000000003"
ACTION = "urn:uuid:6f1c2553-0000-4000-8000-000000000004"
NONCE = values.b64url_encode(b"n" * 32)


def _format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker()
    checker.checks("uri")(lambda s: not isinstance(s, str) or values.is_absolute_uri(s))
    checker.checks("date-time")(lambda s: not isinstance(s, str) or values.is_timestamp(s))
    return checker


@functools.cache
def _normative_validator(root: Path) -> jsonschema.Draft202012Validator:
    loaded = [json.loads(p.read_text()) for p in (root / "schemas").glob("*.schema.json")]
    registry: Registry[Any] = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in loaded)
    frame_schema = next(s for s in loaded if s["$id"].endswith("/websocket-frame.schema.json"))
    return jsonschema.Draft202012Validator(frame_schema, registry=registry, format_checker=_format_checker())


def normative_errors(frame: dict[str, Any]) -> list[str]:
    validator = _normative_validator(bundle_root())
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(frame)]


def _bundle_document(name: str) -> dict[str, Any]:
    path = bundle_root() / "cryptography" / "vectors" / "signed-documents" / "valid" / name
    if not path.is_file():
        pytest.skip(f"no {path.name} in the bundle")
    document: dict[str, Any] = json.loads(path.read_bytes())
    return document


def _presence() -> dict[str, Any]:
    return {
        "agentId": AGENT,
        "sessionEpoch": 3,
        "status": "online",
        "capacity": {"maxSlots": 4, "activeSlots": 1, "availableSlots": 3, "queuedItems": 0},
        "capabilityAvailability": [{"capability": {"id": "code.review", "version": "1.0.0"}, "status": "available"}],
        "lastHeartbeat": "2026-12-01T15:00:00.000Z",
        "expiresAt": "2026-12-01T15:01:00.000Z",
    }


def _built_frames() -> dict[str, dict[str, Any]]:
    err = ProtocolError(ErrorCode.REVISION_CONFLICT, "stale", expected_revision=3, current_revision=4)
    return {
        "hello_client_init": frames.hello_client_init(AGENT, KEY, NONCE),
        "hello_server_challenge": frames.hello_server_challenge(NONCE, NONCE, values.b64url_encode(b"{}")),
        "hello_client_response": frames.hello_client_response(
            AGENT, KEY, NONCE, NONCE, values.b64url_encode(b"s" * 64)
        ),
        "hello_server_accept": frames.hello_server_accept("t" * 32, 7, NOW),
        "subscribe": frames.subscribe(
            [(GROUP, 0), ("urn:uuid:6f1c2553-0000-4000-8000-000000000009", 12)],
            attention={GROUP: {"eventKinds": ["message.posted"], "mentionsOnly": True}},
        ),
        "ack": frames.ack([(GROUP, 5)], NOW),
        "ping": frames.ping(NOW),
        "ping_reply_with_presence": frames.ping(NOW, reply_to_nonce=NONCE, presence=_presence()),
        "error": frames.error_frame(err, related_action_id=ACTION, group_id=GROUP, occurred_at=NOW),
        "error_without_ids": frames.error_frame(ProtocolError(ErrorCode.INTERNAL_ERROR, "boom")),
        "backpressure": frames.backpressure_frame(GROUP, 250, occurred_at=NOW),
        "refuse_binary": frames.refuse_binary(),
    }


BUILT = sorted(_built_frames())


@pytest.mark.parametrize("name", BUILT)
def test_every_builder_makes_a_frame_both_schemas_accept_PROTOCOL_17(name: str) -> None:
    frame = _built_frames()[name]
    schemas.validate("websocket-frame", frame)
    assert normative_errors(frame) == []
    assert frame["protocolVersion"] == "0.1"
    assert frame["frameId"].startswith("urn:uuid:")
    again = frames.parse(frames.encode(frame))
    assert again.doc == frame
    assert again.nested is None


def test_command_and_event_frames_wrap_the_bundles_signed_documents_PROTOCOL_17_1() -> None:
    for name, build, member in (
        ("command.json", frames.command, "command"),
        ("event.json", frames.event, "event"),
    ):
        document = _bundle_document(name)
        frame = build(document)
        schemas.validate("websocket-frame", frame)
        assert normative_errors(frame) == []
        parsed = frames.parse(frames.encode(frame).encode())
        assert parsed.type == member.upper()
        assert json.loads(parsed.nested or b"") == document


def test_event_text_embeds_the_stored_text_unchanged_PROTOCOL_17_4() -> None:
    document = _bundle_document("event.json")
    stored = json.dumps(document, separators=(",", ":"), sort_keys=True)
    text = frames.event_text(stored)
    parsed = frames.parse(text)
    assert parsed.nested == stored.encode()
    assert normative_errors(parsed.doc) == []


def test_nested_bytes_are_exactly_as_received_PROTOCOL_6_4_stage_1() -> None:
    # Spacing, escapes, a literal beyond binary64 and an escaped lone surrogate are
    # left for the six stages to classify: the frame layer hands them over verbatim.
    inner = '{ "b" : [1e400, 123456789012345678901234567890],\n "a":"\\u00e9\\udc00", "c":{"d":null} }'
    text = f'{{"protocolVersion":"0.1","frameId":"{ACTION}","command" :  {inner} ,"frameType":"COMMAND"}}'
    parsed = frames.parse(text.encode())
    assert parsed.nested == inner.encode()
    assert frames.parse(text).nested == inner.encode()


def test_backpressure_is_an_error_frame_naming_the_group_PROTOCOL_17_3() -> None:
    error = frames.backpressure_frame(GROUP, 1500)["error"]
    assert error["code"] == "BACKPRESSURE"
    assert error["retryable"] is True
    assert (error["groupId"], error["retryAfterMs"]) == (GROUP, 1500)
    assert error["details"] == {"groupId": GROUP, "retryAfterMs": 1500}


def test_binary_messages_are_refused_PROTOCOL_17_1() -> None:
    error = frames.refuse_binary()["error"]
    assert (error["code"], error["details"]["reason"]) == ("PROTOCOL_VIOLATION", "binary-message")


def test_error_frames_keep_the_errors_own_members_PROTOCOL_19() -> None:
    err = ProtocolError(ErrorCode.GROUP_NOT_FOUND, "no such Group", related_frame_id=ACTION, group_id=GROUP)
    error = frames.error_frame(err)["error"]
    assert (error["relatedFrameId"], error["groupId"]) == (ACTION, GROUP)
    assert "relatedActionId" not in error


def test_error_frames_are_ascii_so_a_lone_surrogate_stays_sendable_PROTOCOL_17_4() -> None:
    err = ProtocolError(ErrorCode.INVALID_COMMAND, "bad", details={"echo": "\udc00\u00e9"})
    text = frames.encode(frames.error_frame(err))
    assert text.isascii()
    text.encode("utf-8")


def test_a_builder_refuses_to_make_an_invalid_frame() -> None:
    with pytest.raises(ValueError, match="invalid ACK"):
        frames.ack([("not a uri", 1)])
    with pytest.raises(ValueError, match="invalid HELLO"):
        frames.hello_server_accept("short", 1, NOW)


# --- malformed frames ---


def _refusal(data: str | bytes) -> ProtocolError:
    with pytest.raises(ProtocolError) as raised:
        frames.parse(data)
    return raised.value


def _ping_text(**changes: Any) -> str:
    frame = frames.ping(NOW)
    frame.update(changes)
    return json.dumps({k: v for k, v in frame.items() if v is not None})


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ("", "invalid-json"),
        ("{", "invalid-json"),
        ('{"frameType": "PING",}', "invalid-json"),
        ("{} {}", "trailing-data"),
        ('{"frameType": NaN}', "non-finite-literal"),
        (b"\xff{}", "invalid-utf8"),
        (b"\xc0\xaf", "invalid-utf8"),
        ('\ufeff{"a": 1}', "byte-order-mark"),
        ('{"a": 1, "a": 1}', "duplicate-member"),
        ('{"a": 1, "\\u0061": 2}', "duplicate-member"),
        ("\udc00", "invalid-utf8"),
    ],
)
def test_a_message_that_is_not_one_strict_json_value_is_a_protocol_violation_PROTOCOL_17_4(
    data: str | bytes, reason: str
) -> None:
    err = _refusal(data)
    assert (err.code, err.details["reason"]) == (ErrorCode.PROTOCOL_VIOLATION, reason)


def test_duplicates_are_refused_before_the_schema_PROTOCOL_17_4() -> None:
    # Invalid under the schema too (no frameType), yet the duplicate decides.
    err = _refusal('{"nested": {"x": 1, "x": 2}}')
    assert err.code is ErrorCode.PROTOCOL_VIOLATION


def test_a_duplicate_inside_a_nested_command_is_refused_PROTOCOL_17_4() -> None:
    text = f'{{"protocolVersion":"0.1","frameId":"{ACTION}","frameType":"COMMAND","command":{{"k":1,"k":2}}}}'
    assert _refusal(text).details["reason"] == "duplicate-member"


@pytest.mark.parametrize(
    ("data", "reason", "field"),
    [
        ("[]", "not-an-object", "/"),
        ('"PING"', "not-an-object", "/"),
        (_ping_text(frameType="PONG"), "unknown-frame-type", "/frameType"),
        (_ping_text(frameType="BACKPRESSURE"), "unknown-frame-type", "/frameType"),
        (_ping_text(frameType=None), "unknown-frame-type", "/frameType"),
        (_ping_text(frameType="HELLO", phase="client_hello"), "unknown-hello-phase", "/phase"),
        (_ping_text(nonce=None), "schema", "/"),
        (_ping_text(nonce="a"), "schema", "/nonce"),
        (_ping_text(sentAt="2026-12-01T15:00:60Z"), "schema", "/sentAt"),
        (_ping_text(extra=1), "schema", "/"),
        (_ping_text(frameId="not an id"), "schema", "/frameId"),
        (_ping_text(protocolVersion=1), "schema", "/protocolVersion"),
    ],
)
def test_a_frame_of_no_frame_shape_fails_schema_validation_PROTOCOL_17_1(data: str, reason: str, field: str) -> None:
    err = _refusal(data)
    assert err.code is ErrorCode.SCHEMA_VALIDATION_FAILED
    assert (err.details["reason"], err.details["field"]) == (reason, field)
    assert normative_errors(json.loads(data)) != []
    document = err.document()
    assert document["message"]


def test_a_schema_refusal_names_the_frame_and_the_command_PROTOCOL_19() -> None:
    frame = frames.command(_bundle_document("command.json"))
    frame["extra"] = True
    err = _refusal(json.dumps(frame))
    assert err.related_frame_id == frame["frameId"]
    assert err.related_action_id == frame["command"]["actionId"]
    assert normative_errors(frames.error_frame(err)) == []


def test_a_command_frame_must_hold_an_object_PROTOCOL_17_1() -> None:
    frame = {**frames.command({"x": 1}), "command": "text"}
    err = _refusal(json.dumps(frame))
    assert (err.code, err.details["field"]) == (ErrorCode.SCHEMA_VALIDATION_FAILED, "/command")


def test_another_protocol_version_is_unsupported_PROTOCOL_21() -> None:
    err = _refusal(_ping_text(protocolVersion="0.2"))
    assert err.code is ErrorCode.UNSUPPORTED_VERSION
    assert err.details["supportedVersions"] == ["0.1"]
    init = {**frames.hello_client_init(AGENT, KEY, NONCE), "supportedVersions": ["0.2", "1.0"]}
    assert _refusal(json.dumps(init)).code is ErrorCode.UNSUPPORTED_VERSION


def test_check_judges_documents_as_parse_does_PROTOCOL_17_1() -> None:
    assert frames.check(frames.ping(NOW)) == "ping"
    with pytest.raises(ProtocolError) as raised:
        frames.check({"frameType": "ACK"})
    assert raised.value.code is ErrorCode.SCHEMA_VALIDATION_FAILED


# --- the parser against the kernel's schema (hypothesis) ---

_scalars = st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.text(max_size=8)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_members = st.sampled_from(
    ["protocolVersion", "frameId", "frameType", "phase", "nonce", "sentAt", "replyToNonce", "groups", "error"]
)


@st.composite
def _mutated_frames(draw: st.DrawFn) -> dict[str, Any]:
    frame = dict(draw(st.sampled_from([_built_frames()[name] for name in BUILT])))
    for _ in range(draw(st.integers(0, 3))):
        member = draw(_members | st.sampled_from(sorted(frame)))
        if draw(st.booleans()):
            frame.pop(member, None)
        else:
            frame[member] = draw(_json)
    return frame


@settings(max_examples=300, deadline=None)
@given(_mutated_frames())
def test_parse_accepts_exactly_what_the_schema_accepts_PROTOCOL_17_1(frame: dict[str, Any]) -> None:
    text = json.dumps(frame)
    try:
        parsed = frames.parse(text)
    except ProtocolError as err:
        assert err.code in {ErrorCode.SCHEMA_VALIDATION_FAILED, ErrorCode.UNSUPPORTED_VERSION}
        assert not schemas.is_valid("websocket-frame", frame)
        assert err.details["reason"]
        # Whatever the refusal, its ERROR frame is itself a valid frame.
        frames.check(frames.error_frame(err))
    else:
        assert schemas.is_valid("websocket-frame", frame)
        assert parsed.doc == frame


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64) | st.text(max_size=32).map(str.encode))
def test_parse_never_fails_untyped_PROTOCOL_17_4(data: bytes) -> None:
    try:
        frames.parse(data)
    except ProtocolError as err:
        assert err.code in {
            ErrorCode.PROTOCOL_VIOLATION,
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            ErrorCode.UNSUPPORTED_VERSION,
        }


def test_a_refusal_echoes_little_of_a_huge_value_PROTOCOL_19() -> None:
    err = _refusal(_ping_text(nonce="!" * 100_000))
    assert len(json.dumps(err.document())) < 4000
