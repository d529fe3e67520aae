"""Spec §19: the 27 core codes, the normative error document, the retry rules.

The codes, statuses and retry rows are written here from the specification
(and the project's HTTP decisions), not read from the module under test; the
documents are checked against the bundle's own ``error.schema.json``.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mwportal.protocol.errors import (
    HTTP_STATUS,
    RETRYABLE,
    ErrorCode,
    ProtocolError,
    RetryRule,
    malformed,
)
from tests.protocol.bundle import bundle_root
from tests.protocol.normative import error_validator, normative_errors

# §19's table, in its order.
CORE_CODES = (
    "UNSUPPORTED_VERSION",
    "AUTH_REQUIRED",
    "AUTH_INVALID_SIGNATURE",
    "AUTH_STALE_SESSION",
    "AUTH_STALE_COORDINATOR",
    "AUTH_FORBIDDEN",
    "GROUP_NOT_FOUND",
    "MEMBERSHIP_REQUIRED",
    "MEMBERSHIP_STALE",
    "SCHEMA_VALIDATION_FAILED",
    "INVALID_COMMAND",
    "INVALID_STATE_TRANSITION",
    "REVISION_CONFLICT",
    "ACTION_ID_COLLISION",
    "UNKNOWN_CRITICAL_EXTENSION",
    "WORK_CONTRACT_INCOMPLETE",
    "WORK_OFFER_EXPIRED",
    "WORK_ALREADY_OWNED",
    "WORK_LEASE_EXPIRED",
    "WORK_STALE_OWNERSHIP",
    "APPROVAL_REQUIRED",
    "BUDGET_EXCEEDED",
    "RATE_LIMITED",
    "BACKPRESSURE",
    "CURSOR_TOO_OLD",
    "PROTOCOL_VIOLATION",
    "INTERNAL_ERROR",
)

# The HTTP binding's statuses (DESIGN v2 §5 "mapped once"; the departures
# are explained in errors.py's docstring).
HTTP_ROWS = {
    "UNSUPPORTED_VERSION": 400,
    "AUTH_REQUIRED": 401,
    "AUTH_INVALID_SIGNATURE": 401,
    "AUTH_STALE_SESSION": 401,
    "AUTH_STALE_COORDINATOR": 409,
    "AUTH_FORBIDDEN": 403,
    "GROUP_NOT_FOUND": 404,
    "MEMBERSHIP_REQUIRED": 403,
    "MEMBERSHIP_STALE": 409,
    "SCHEMA_VALIDATION_FAILED": 400,
    "INVALID_COMMAND": 400,
    "INVALID_STATE_TRANSITION": 422,
    "REVISION_CONFLICT": 409,
    "ACTION_ID_COLLISION": 409,
    "UNKNOWN_CRITICAL_EXTENSION": 400,
    "WORK_CONTRACT_INCOMPLETE": 400,
    "WORK_OFFER_EXPIRED": 409,
    "WORK_ALREADY_OWNED": 409,
    "WORK_LEASE_EXPIRED": 409,
    "WORK_STALE_OWNERSHIP": 409,
    "APPROVAL_REQUIRED": 422,
    "BUDGET_EXCEEDED": 422,
    "RATE_LIMITED": 429,
    "BACKPRESSURE": 429,
    "CURSOR_TOO_OLD": 410,
    "PROTOCOL_VIOLATION": 400,
    "INTERNAL_ERROR": 500,
}

# The retry rules of §19 (in our words), each with the codes it speaks of and
# the rule a sender must follow.
RETRY_ROWS = [
    pytest.param(
        ("RATE_LIMITED", "BACKPRESSURE", "INTERNAL_ERROR"),
        "RETRY_SAME_COMMAND",
        True,
        id="flow-control-and-failure-retry-the-same-command",
    ),
    pytest.param(
        ("AUTH_INVALID_SIGNATURE",),
        "RETRY_SAME_AFTER_CORRECTION",
        False,
        id="bad-signature-retried-only-after-correction",
    ),
    pytest.param(
        ("ACTION_ID_COLLISION",),
        "NEW_COMMAND",
        False,
        id="collision-needs-a-new-action-id",
    ),
    pytest.param(
        ("AUTH_STALE_SESSION", "AUTH_STALE_COORDINATOR", "MEMBERSHIP_STALE", "WORK_STALE_OWNERSHIP"),
        "NEW_COMMAND_AFTER_EPOCH_REFRESH",
        False,
        id="stale-epoch-needs-refresh-and-a-new-command",
    ),
]

WHEN = datetime(2026, 12, 1, 11, 52, 47, 123456, tzinfo=UTC)
ALL_MEMBERS = {
    "details": {"reason": "dependency_cycle", "field": "body.contract"},
    "retry_after_ms": 1500,
    "related_action_id": "urn:uuid:6c4f0d1a-0b7e-4c65-9a43-1f2d3c4b5a69",
    "related_frame_id": "urn:mwp:frame:42",
    "group_id": "https://portal.example/groups/g-1",
    "expected_revision": 3,
    "current_revision": 4,
    "snapshot_artifact_hash": "sha256:" + "ab" * 32,
    "fatal": False,
}


def normative() -> None:
    bundle_root()  # skips without the bundle
    assert error_validator() is not None


def test_it_has_exactly_the_27_core_codes_PROTOCOL_19() -> None:
    assert len(CORE_CODES) == 27
    assert [str(c) for c in ErrorCode] == list(CORE_CODES)


def test_its_codes_are_the_normative_schemas_enum() -> None:
    schema = json.loads((bundle_root() / "schemas" / "error.schema.json").read_text())
    assert set(schema["properties"]["code"]["enum"]) == set(CORE_CODES)


@pytest.mark.parametrize("code", CORE_CODES)
def test_every_codes_minimal_document_is_normative_PROTOCOL_19(code: str) -> None:
    normative()
    document = ProtocolError(code, "refused").document(WHEN)
    assert document == {
        "code": code,
        "message": "refused",
        "retryable": code in ("RATE_LIMITED", "BACKPRESSURE", "INTERNAL_ERROR"),
        "occurredAt": "2026-12-01T11:52:47.123Z",
    }
    assert normative_errors(document) == []


@pytest.mark.parametrize("code", CORE_CODES)
def test_every_codes_full_document_is_normative_PROTOCOL_19(code: str) -> None:
    normative()
    document = ProtocolError(code, "refused", **ALL_MEMBERS).document(WHEN)  # type: ignore[arg-type]
    assert normative_errors(document) == []
    assert {k: document[k] for k in document if k not in ("code", "message", "retryable", "occurredAt")} == {
        "details": {"reason": "dependency_cycle", "field": "body.contract"},
        "retryAfterMs": 1500,
        "relatedActionId": "urn:uuid:6c4f0d1a-0b7e-4c65-9a43-1f2d3c4b5a69",
        "relatedFrameId": "urn:mwp:frame:42",
        "groupId": "https://portal.example/groups/g-1",
        "expectedRevision": 3,
        "currentRevision": 4,
        "snapshotArtifactHash": "sha256:" + "ab" * 32,
        "fatal": False,
    }


def test_the_schema_oracle_can_fail() -> None:
    # The check above means something: the normative schema refuses a
    # document with a private code, a snake_case member, or no occurredAt.
    normative()
    good = ProtocolError("INVALID_COMMAND", "x").document(WHEN)
    assert normative_errors({**good, "code": "MALFORMED"})
    assert normative_errors({**good, "retry_after_ms": 5})
    assert normative_errors({k: v for k, v in good.items() if k != "occurredAt"})
    assert normative_errors({**good, "occurredAt": "2026-12-01 11:52:47Z"})


@pytest.mark.parametrize(("code", "status"), sorted(HTTP_ROWS.items()))
def test_it_maps_each_code_to_its_http_status_once(code: str, status: int) -> None:
    assert HTTP_STATUS[ErrorCode(code)] == status
    assert ProtocolError(code, "x").http_status == status


def test_only_internal_error_is_a_5xx() -> None:
    # issue 16: an overloaded Authority answers 429, never 5xx.
    assert {str(c) for c, status in HTTP_STATUS.items() if status >= 500} == {"INTERNAL_ERROR"}


def test_a_binding_refusal_may_keep_http_status_of_its_own() -> None:
    err = ProtocolError("PROTOCOL_VIOLATION", "no API route /api/x", http_status=404)
    assert err.http_status == 404 and ProtocolError("PROTOCOL_VIOLATION", "x").http_status == 400


@pytest.mark.parametrize(("codes", "rule", "retryable"), RETRY_ROWS)
def test_the_retry_rules_of_PROTOCOL_19(codes: tuple[str, ...], rule: str, retryable: bool) -> None:
    for code in codes:
        err = ProtocolError(code, "x")
        assert err.retry is RetryRule(rule), code
        assert err.retryable is retryable, code
        assert err.document(WHEN)["retryable"] is retryable, code


def test_only_an_unchanged_retry_rule_says_retryable() -> None:
    # §19: an error says whether a retry is safe; ``retryable`` means an
    # unchanged retry, which only the three flow/failure codes allow.
    assert {str(c) for c in RETRYABLE} == {"RATE_LIMITED", "BACKPRESSURE", "INTERNAL_ERROR"}
    for code in CORE_CODES:
        err = ProtocolError(code, "x")
        assert err.retryable is (err.retry is RetryRule.RETRY_SAME_COMMAND), code


def test_it_leaves_out_every_optional_member_that_is_not_set() -> None:
    document = ProtocolError("REVISION_CONFLICT", "x", expected_revision=0).document(WHEN)
    assert set(document) == {"code", "message", "retryable", "occurredAt", "expectedRevision"}
    assert document["expectedRevision"] == 0  # zero is set, not absent


def test_it_writes_occurred_at_in_utc_with_z() -> None:
    plus_two = datetime(2026, 12, 1, 13, 52, 47, 5000, tzinfo=timezone(timedelta(hours=2)))
    assert ProtocolError("INTERNAL_ERROR", "x").document(plus_two)["occurredAt"] == "2026-12-01T11:52:47.005Z"
    now = ProtocolError("INTERNAL_ERROR", "x").document()["occurredAt"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", now), now
    with pytest.raises(ValueError):
        ProtocolError("INTERNAL_ERROR", "x").document(datetime(2026, 12, 1))  # noqa: DTZ001 (naive: no instant)


def test_it_keeps_the_message_within_1_to_2000_characters() -> None:
    assert len(ProtocolError("INVALID_COMMAND", "m" * 5000).document(WHEN)["message"]) == 2000
    assert ProtocolError("INVALID_COMMAND", "").document(WHEN)["message"] == "INVALID_COMMAND"


@pytest.mark.parametrize("bad", [-1, 2**53, True])
def test_it_refuses_an_integer_member_outside_the_safe_range(bad: int) -> None:
    with pytest.raises(ValueError):
        ProtocolError("RATE_LIMITED", "x", retry_after_ms=bad)


def test_it_refuses_a_code_that_is_not_core() -> None:
    for private in ("MALFORMED", "NOT_FOUND", "REVISION_MISMATCH", "INVALID_SIGNATURE"):
        with pytest.raises(ValueError):
            ProtocolError(private, "x")


def test_malformed_is_schema_validation_naming_the_field() -> None:
    err = malformed("body.title", "must be a string")
    assert err.code is ErrorCode.SCHEMA_VALIDATION_FAILED
    assert err.document(WHEN)["details"] == {"field": "body.title"}
    assert err.message == "body.title: must be a string"


def test_as_dict_is_the_bare_document() -> None:
    document = ProtocolError("GROUP_NOT_FOUND", "no such Group").as_dict()
    assert "error" not in document and document["code"] == "GROUP_NOT_FOUND"


def test_retry_after_header_rounds_up_to_whole_seconds() -> None:
    assert ProtocolError("BACKPRESSURE", "x", retry_after_ms=1).retry_after_header() == "1"
    assert ProtocolError("BACKPRESSURE", "x", retry_after_ms=1001).retry_after_header() == "2"
    assert ProtocolError("BACKPRESSURE", "x").retry_after_header() is None


@given(
    code=st.sampled_from(CORE_CODES),
    message=st.text(max_size=2500),
    details=st.dictionaries(st.text(max_size=10), st.integers() | st.text(max_size=10), max_size=3),
    retry_after_ms=st.none() | st.integers(0, 2**53 - 1),
    # hypothesis takes naive bounds and attaches ``timezones`` itself.
    when=st.datetimes(
        timezones=st.just(UTC),
        min_value=datetime(1, 1, 1),  # noqa: DTZ001
        max_value=datetime(9999, 12, 31),  # noqa: DTZ001
    ),
)
def test_every_document_it_builds_is_normative(
    code: str, message: str, details: dict[str, object], retry_after_ms: int | None, when: datetime
) -> None:
    if error_validator() is None:
        pytest.skip("no MWP 0.1 bundle (set MWP_PROTOCOL_ROOT)")
    document = ProtocolError(code, message, details=details, retry_after_ms=retry_after_ms).document(when)
    assert normative_errors(document) == [], document
