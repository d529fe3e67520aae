"""First admission and historical replay (PROTOCOL §6.4), kernel rules.

Documents are signed here with the kernel's signer and verified through the
six stages against an in-memory Registry, so every ``Verified`` is real. The
Admission Log is a small dict-backed log or a scripted one that returns a
given typed result. The expected reasons are the specification's rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mwportal.protocol import ed25519
from mwportal.protocol.admission import (
    Absent,
    AdapterContractError,
    AdmissionFailed,
    Appended,
    AppendFailed,
    AppendFault,
    AppendResult,
    Existing,
    FirstAdmissionRecord,
    FixtureAdmissionLog,
    Found,
    LookupFailed,
    LookupFault,
    LookupResult,
    Outcome,
    Reason,
    TrustedContext,
    admit_first,
    parse_record,
    replay_historical,
)
from mwportal.protocol.errors import ErrorCode
from mwportal.protocol.jcs import canonicalize
from mwportal.protocol.registry import MemoryRegistry, Principal
from mwportal.protocol.values import parse_timestamp
from mwportal.protocol.verification import Diagnostic, Verified, add_diagnostic_sink, sign_document, verify_document

ORG = "urn:uuid:0f000000-0000-4000-8000-000000000001"
AGENT = Principal("agent", "urn:uuid:0a000000-0000-4000-8000-000000000001")
AUTHORITY = Principal("service", "urn:uuid:05000000-0000-4000-8000-000000000001")
OTHER_SERVICE = Principal("service", "urn:uuid:05000000-0000-4000-8000-000000000002")
AGENT_SEED, AUTHORITY_SEED = bytes([7]) * 32, bytes([9]) * 32
AGENT_KEY, AUTHORITY_KEY = (
    "urn:uuid:0c000000-0000-4000-8000-00000000000a",
    "urn:uuid:0c000000-0000-4000-8000-00000000000b",
)
VALID_FROM = "2026-07-15T00:00:00Z"
SIGNED_AT = "2026-07-15T00:00:00Z"  # the protected time, at validFrom (inclusive)


def registry(valid_until: str | None = None, revoked_at: str | None = None) -> MemoryRegistry:
    r = MemoryRegistry(ORG)
    r.register(AGENT_KEY, AGENT, ed25519.public_key(AGENT_SEED), VALID_FROM)
    r.register(AUTHORITY_KEY, AUTHORITY, ed25519.public_key(AUTHORITY_SEED), VALID_FROM)
    if valid_until or revoked_at:
        r.record_status(AGENT_KEY, "2026-07-15T00:00:00Z", valid_until=valid_until, revoked_at=revoked_at)
    return r


def command(issued_at: str = SIGNED_AT) -> bytes:
    doc = {
        "protocolVersion": "0.1",
        "actionId": "urn:uuid:ac000000-0000-4000-8000-000000000001",
        "actor": AGENT.as_json(),
        "sessionEpoch": 1,
        "membershipEpoch": 1,
        "groupId": "urn:uuid:06000000-0000-4000-8000-000000000001",
        "kind": "message.post",
        "correlationId": "urn:uuid:cc000000-0000-4000-8000-000000000001",
        "issuedAt": issued_at,
        "payload": {"text": "hello"},
    }
    return json.dumps(sign_document(doc, key_id=AGENT_KEY, seed=AGENT_SEED, profile="command")).encode()


def event() -> bytes:
    doc = {
        "protocolVersion": "0.1",
        "eventId": "urn:uuid:e0000000-0000-4000-8000-000000000001",
        "groupId": "urn:uuid:06000000-0000-4000-8000-000000000001",
        "sequence": 1,
        "aggregateRevision": 1,
        "kind": "message.posted",
        "actor": AGENT.as_json(),
        "cause": {"type": "command", "id": "urn:uuid:ac000000-0000-4000-8000-000000000001"},
        "correlationId": "urn:uuid:cc000000-0000-4000-8000-000000000001",
        "occurredAt": "2026-07-15T00:00:01Z",
        "payload": {"text": "hello"},
        "acceptedBy": AUTHORITY.as_json(),
        "commandHash": "sha256:" + "a" * 64,
    }
    return json.dumps(sign_document(doc, key_id=AUTHORITY_KEY, seed=AUTHORITY_SEED, profile="event")).encode()


def verified(data: bytes | None = None, profile: str = "command", **interval: str) -> Verified:
    return verify_document(data or command(), profile, registry(**interval))


def context(at: str = "2026-07-15T00:05:00Z", by: Principal = AUTHORITY) -> TrustedContext:
    return TrustedContext("urn:uuid:ad000000-0000-4000-8000-000000000001", at, by)


class MemoryLog:
    """A dict-backed Admission Log writing as one authenticated service."""

    def __init__(self, service: Principal = AUTHORITY) -> None:
        self.service = service
        self.rows: dict[tuple[str, str], bytes] = {}
        self.lookups = self.appends = 0

    def lookup(self, organization_id: str, signing_hash: str) -> LookupResult:
        self.lookups += 1
        stored = self.rows.get((organization_id, signing_hash))
        return Absent() if stored is None else Found(stored, self.service)

    def append_or_return_existing(self, candidate: FirstAdmissionRecord) -> AppendResult:
        self.appends += 1
        stored = self.rows.get(candidate.logical_key)
        if stored is not None:
            return Existing(stored, self.service)
        self.rows[candidate.logical_key] = candidate.canonical_bytes()
        return Appended(self.rows[candidate.logical_key], self.service)


class ScriptedLog:
    """Answers with the given results; an append it was not given is a test failure."""

    def __init__(self, lookup: Any, append: Any = None) -> None:
        self.lookup_result, self.append_result = lookup, append
        self.appends = 0

    def lookup(self, organization_id: str, signing_hash: str) -> Any:
        if isinstance(self.lookup_result, Exception):
            raise self.lookup_result
        return self.lookup_result

    def append_or_return_existing(self, candidate: FirstAdmissionRecord) -> Any:
        self.appends += 1
        if self.append_result is None:
            raise AdapterContractError("no append expected")
        if isinstance(self.append_result, Exception):
            raise self.append_result
        return self.append_result


class Never:
    """A trusted-context source that must not be asked."""

    def __call__(self) -> TrustedContext:
        raise AdapterContractError("trusted context asked for")


def record_bytes(v: Verified, **changes: Any) -> bytes:
    value: dict[str, Any] = {
        "protocolVersion": "0.1",
        "admissionRecordId": "urn:uuid:ad000000-0000-4000-8000-000000000001",
        "organizationId": v.organization_id,
        "documentKind": v.profile,
        "signingHash": v.signing_hash,
        "keyId": v.key_id,
        "principal": v.principal.as_json(),
        "trustedAcceptedAt": "2026-07-15T00:05:00Z",
        "acceptedBy": AUTHORITY.as_json(),
    } | changes
    return json.dumps(value, indent=2).encode()


@pytest.fixture
def diagnostics() -> Iterator[list[Diagnostic]]:
    seen: list[Diagnostic] = []
    remove = add_diagnostic_sink(seen.append)
    yield seen
    remove()


def fails(reason: Reason, call: Any, *args: Any) -> AdmissionFailed:
    with pytest.raises(AdmissionFailed) as info:
        call(*args)
    assert info.value.reason == reason, info.value.detail
    assert info.value.stage == "admission"
    assert info.value.wire_code == ErrorCode.AUTH_INVALID_SIGNATURE
    assert reason.value not in str(info.value)  # the reason never travels with the exception's text
    return info.value


# -- first admission ------------------------------------------------------------------


def test_absent_then_committed_record_binds_the_six_stage_evidence_PROTOCOL_6_4() -> None:
    v, log = verified(), MemoryLog()
    admitted = admit_first(v, log, lambda: context("2026-07-15T09:05:00.000+09:00"))
    assert admitted.outcome == Outcome.COMMITTED and log.appends == 1
    assert json.loads(admitted.record_bytes) == {
        "protocolVersion": "0.1",
        "admissionRecordId": "urn:uuid:ad000000-0000-4000-8000-000000000001",
        "organizationId": ORG,
        "documentKind": "command",
        "signingHash": v.signing_hash,
        "keyId": AGENT_KEY,
        "principal": AGENT.as_json(),
        "trustedAcceptedAt": "2026-07-15T09:05:00.000+09:00",  # the lexical form is kept
        "acceptedBy": AUTHORITY.as_json(),
    }
    assert admitted.record_bytes == canonicalize(json.loads(admitted.record_bytes))
    assert admitted.record.trusted_accepted_at == parse_timestamp("2026-07-15T00:05:00Z")  # compared as an instant


def test_found_compatible_record_is_idempotent_success_without_append_PROTOCOL_6_4() -> None:
    v, log = verified(), MemoryLog()
    first = admit_first(v, log, context)
    again = admit_first(verified(), log, Never())
    assert again.outcome == Outcome.FOUND
    assert (again.record, again.record_bytes) == (first.record, first.record_bytes)
    assert log.appends == 1 and log.lookups == 2


def test_concurrent_winner_is_returned_and_validated_PROTOCOL_6_4() -> None:
    v = verified()
    winner = record_bytes(v, admissionRecordId="urn:uuid:ad000000-0000-4000-8000-0000000000ff")
    admitted = admit_first(v, ScriptedLog(Absent(), Existing(winner, AUTHORITY)), context)
    assert admitted.outcome == Outcome.EXISTING
    assert admitted.record.admission_record_id == "urn:uuid:ad000000-0000-4000-8000-0000000000ff"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("documentKind", "approval"),
        ("keyId", "urn:uuid:0c000000-0000-4000-8000-0000000000ff"),
        ("principal", {"type": "agent", "id": "urn:uuid:0a000000-0000-4000-8000-0000000000ff"}),
        ("organizationId", "urn:uuid:0f000000-0000-4000-8000-0000000000ff"),
        ("signingHash", "sha256:" + "b" * 64),
    ],
)
def test_found_record_under_other_bindings_is_refused_PROTOCOL_6_4(field: str, value: Any) -> None:
    v = verified()
    log = ScriptedLog(Found(record_bytes(v, **{field: value}), AUTHORITY))
    fails(Reason.RECORD_BINDING_MISMATCH, admit_first, v, log, Never())
    fails(Reason.RECORD_BINDING_MISMATCH, replay_historical, v, log)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("documentKind", "approval"),
        ("keyId", "urn:uuid:0c000000-0000-4000-8000-0000000000ff"),
        ("principal", {"type": "human", "id": AGENT.id}),
    ],
)
def test_existing_record_under_the_same_key_with_other_bindings_is_a_conflict_PROTOCOL_6_4(
    field: str, value: Any
) -> None:
    v = verified()
    log = ScriptedLog(Absent(), Existing(record_bytes(v, **{field: value}), AUTHORITY))
    fails(Reason.RECORD_CONFLICT, admit_first, v, log, context)


def test_log_reported_conflict_fails_closed() -> None:
    fails(
        Reason.RECORD_CONFLICT,
        admit_first,
        verified(),
        ScriptedLog(Absent(), AppendFailed(AppendFault.CONFLICT)),
        context,
    )


# -- the trusted-time interval ------------------------------------------------------------


@pytest.mark.parametrize(
    ("interval", "at", "ok"),
    [
        ({}, "2026-07-15T00:00:00Z", True),  # == validFrom: inclusive
        ({}, "2026-07-14T23:59:59.999999999Z", False),  # before validFrom, every digit counts
        ({"valid_until": "2026-07-16T00:00:00Z"}, "2026-07-15T23:59:59.9Z", True),
        ({"valid_until": "2026-07-16T00:00:00Z"}, "2026-07-16T00:00:00Z", False),  # == validUntil: exclusive
        ({"valid_until": "2026-07-16T00:00:00Z"}, "2026-07-16T02:00:00+02:00", False),  # the same instant
        ({"revoked_at": "2026-07-15T01:00:00Z"}, "2026-07-15T01:00:00Z", False),  # == revokedAt: rejected
        ({"revoked_at": "2026-07-15T01:00:00Z"}, "2026-07-15T01:00:01Z", False),
        ({"revoked_at": "2026-07-15T01:00:00Z"}, "2026-07-15T00:59:59.999Z", True),
    ],
)
def test_trusted_acceptance_time_is_checked_against_the_key_interval_PROTOCOL_6_4(
    interval: dict[str, Any], at: str, ok: bool
) -> None:
    v, log = verified(**interval), MemoryLog()
    if ok:
        assert admit_first(v, log, lambda: context(at)).outcome == Outcome.COMMITTED
    else:
        fails(Reason.TRUSTED_TIME_OUTSIDE_KEY_INTERVAL, admit_first, v, log, lambda: context(at))
        assert log.appends == 0  # refused before the log is asked to write


def test_returned_record_outside_the_interval_is_refused_PROTOCOL_6_4() -> None:
    """A concurrent winner's trustedAcceptedAt is checked too, not only ours."""
    v = verified(revoked_at="2026-07-15T01:00:00Z")
    late = record_bytes(v, trustedAcceptedAt="2026-07-15T01:00:00Z")
    fails(
        Reason.TRUSTED_TIME_OUTSIDE_KEY_INTERVAL,
        admit_first,
        v,
        ScriptedLog(Absent(), Existing(late, AUTHORITY)),
        context,
    )


def test_malformed_trusted_time_is_refused_before_append() -> None:
    log = MemoryLog()
    fails(Reason.MALFORMED_TRUSTED_TIME, admit_first, verified(), log, lambda: context("2026-07-15 00:05:00"))
    assert log.appends == 0


def test_non_service_acceptor_is_refused_before_append() -> None:
    log = MemoryLog()
    fails(Reason.RECORD_SCHEMA_INVALID, admit_first, verified(), log, lambda: context(by=AGENT))
    assert log.appends == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(-3, 12), st.integers(0, 10), st.integers(0, 10))
def test_trusted_time_interval_matches_an_integer_oracle(t: int, until: int, revoked: int) -> None:
    """In minutes after validFrom: admitted iff 0 <= t < until and t < revoked."""

    def at(minutes: int) -> str:
        return (
            f"2026-07-15T{(minutes // 60) % 24:02d}:{minutes % 60:02d}:00Z"
            if minutes >= 0
            else (f"2026-07-14T23:{60 + minutes:02d}:00Z")
        )

    # The protected time must itself be valid, so only intervals that contain validFrom qualify.
    if until == 0 or revoked == 0:
        return
    v = verified(valid_until=at(until), revoked_at=at(revoked))
    expected = 0 <= t < until and t < revoked
    try:
        admit_first(v, MemoryLog(), lambda: context(at(t)))
        admitted = True
    except AdmissionFailed as exc:
        assert exc.reason == Reason.TRUSTED_TIME_OUTSIDE_KEY_INTERVAL
        admitted = False
    assert admitted == expected


# -- historical replay --------------------------------------------------------------------


def test_historical_replay_survives_a_later_revocation_PROTOCOL_6_4() -> None:
    log = MemoryLog()
    admit_first(verified(), log, lambda: context("2026-07-15T00:05:00Z"))
    later = verified(revoked_at="2026-07-15T01:00:00Z")  # after both the protected and the trusted time
    replayed = replay_historical(later, log)
    assert replayed.outcome == Outcome.FOUND and log.appends == 1


def test_historical_replay_fails_when_revocation_precedes_trusted_acceptance_PROTOCOL_6_4() -> None:
    log = MemoryLog()
    admit_first(verified(), log, lambda: context("2026-07-15T00:05:00Z"))
    moved = verified(revoked_at="2026-07-15T00:04:00Z")  # still after the protected time
    fails(Reason.TRUSTED_TIME_OUTSIDE_KEY_INTERVAL, replay_historical, moved, log)


def test_missing_record_on_replay_fails_and_appends_nothing_PROTOCOL_6_4() -> None:
    log = ScriptedLog(Absent())
    fails(Reason.RECORD_MISSING, replay_historical, verified(), log)
    assert log.appends == 0


# -- the log's authenticated answer -------------------------------------------------------


def test_accepted_by_other_than_the_authenticated_service_is_refused_PROTOCOL_6_4() -> None:
    v = verified()
    log = ScriptedLog(Found(record_bytes(v), OTHER_SERVICE))
    fails(Reason.LOG_AUTHENTICATION_FAILED, replay_historical, v, log)
    fails(
        Reason.LOG_AUTHENTICATION_FAILED,
        admit_first,
        v,
        ScriptedLog(Absent(), Appended(record_bytes(v), OTHER_SERVICE)),
        context,
    )


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (LookupFault.UNAUTHENTICATED, Reason.LOG_AUTHENTICATION_FAILED),
        (LookupFault.INTEGRITY_FAILED, Reason.LOG_AUTHENTICATION_FAILED),
        (LookupFault.UNAVAILABLE, Reason.LOG_UNAVAILABLE),
        (LookupFault.INDETERMINATE, Reason.LOG_INDETERMINATE),
    ],
)
def test_lookup_failures_fail_closed_PROTOCOL_6_4(fault: LookupFault, reason: Reason) -> None:
    log = ScriptedLog(LookupFailed(fault))
    fails(reason, admit_first, verified(), log, Never())
    fails(reason, replay_historical, verified(), log)
    assert log.appends == 0


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (AppendFault.CONFLICT, Reason.RECORD_CONFLICT),
        (AppendFault.UNAUTHENTICATED, Reason.LOG_AUTHENTICATION_FAILED),
        (AppendFault.INTEGRITY_FAILED, Reason.APPEND_INTEGRITY_NOT_ESTABLISHED),
        (AppendFault.UNAVAILABLE, Reason.LOG_UNAVAILABLE),
        (AppendFault.INDETERMINATE, Reason.LOG_INDETERMINATE),
        (AppendFault.COMMIT_FAILED, Reason.COMMIT_FAILED),
    ],
)
def test_append_failures_fail_closed_PROTOCOL_6_4(fault: AppendFault, reason: Reason) -> None:
    fails(reason, admit_first, verified(), ScriptedLog(Absent(), AppendFailed(fault)), context)


@pytest.mark.parametrize("answer", [True, "found", None, {"status": "found"}])
def test_an_untyped_answer_never_stands_in_for_the_typed_result_PROTOCOL_6_4(answer: Any) -> None:
    fails(Reason.LOG_INDETERMINATE, replay_historical, verified(), ScriptedLog(answer))
    fails(Reason.LOG_INDETERMINATE, admit_first, verified(), ScriptedLog(Absent(), answer or True), context)


def test_a_log_that_raises_fails_closed() -> None:
    fails(Reason.LOG_UNAVAILABLE, replay_historical, verified(), ScriptedLog(OSError("down")))
    fails(Reason.LOG_INDETERMINATE, admit_first, verified(), ScriptedLog(Absent(), TimeoutError()), context)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"protocolVersion": "0.1", "protocolVersion": "0.1"}',  # duplicate member: not strict JSON
        b"\xef\xbb\xbf{}",  # byte-order mark
        b"[]",
    ],
)
def test_returned_record_must_be_strict_json_and_schema_valid_PROTOCOL_6_4(raw: bytes) -> None:
    fails(Reason.RECORD_SCHEMA_INVALID, replay_historical, verified(), ScriptedLog(Found(raw, AUTHORITY)))


def test_a_record_with_a_signature_is_not_a_record_PROTOCOL_6_4() -> None:
    v = verified()
    signed = record_bytes(
        v, signature={"algorithm": "Ed25519", "keyId": AGENT_KEY, "createdAt": SIGNED_AT, "value": "x"}
    )
    fails(Reason.RECORD_SCHEMA_INVALID, replay_historical, v, ScriptedLog(Found(signed, AUTHORITY)))


# -- Event self-anchoring -----------------------------------------------------------------


def test_a_signed_event_is_never_its_own_admission_record_PROTOCOL_6_4() -> None:
    data = event()
    v = verify_document(data, "event", registry())
    fails(Reason.EVENT_SELF_ANCHORING, replay_historical, v, ScriptedLog(Found(data, AUTHORITY)))
    fails(Reason.EVENT_SELF_ANCHORING, admit_first, v, ScriptedLog(Absent(), Existing(data, AUTHORITY)), context)
    # Re-spelled (compact) Event bytes are the same Event.
    compact = json.dumps(json.loads(data), separators=(",", ":")).encode()
    fails(Reason.EVENT_SELF_ANCHORING, replay_historical, v, ScriptedLog(Found(compact, AUTHORITY)))


def test_a_signed_event_has_its_own_separate_record() -> None:
    v = verify_document(event(), "event", registry())
    admitted = admit_first(v, MemoryLog(), lambda: context("2026-07-15T00:00:02Z"))
    assert admitted.record.document_kind == "event" and admitted.record.principal == AUTHORITY


# -- diagnostics and the record type ----------------------------------------------------


def test_failures_are_recorded_in_protected_diagnostics_at_stage_admission(diagnostics: list[Diagnostic]) -> None:
    v = verified()
    fails(Reason.RECORD_MISSING, replay_historical, v, ScriptedLog(Absent()))
    assert diagnostics[-1] == Diagnostic(
        profile="command",
        stage="admission",
        reason="record-missing",
        organization_id=ORG,
        key_id=AGENT_KEY,
        signing_hash=v.signing_hash,
    )


def test_a_success_records_no_diagnostic(diagnostics: list[Diagnostic]) -> None:
    admit_first(verified(), MemoryLog(), context)
    assert diagnostics == []


def test_record_keeps_its_lexical_time_and_compares_as_an_instant() -> None:
    v = verified()
    a = parse_record(record_bytes(v, trustedAcceptedAt="2026-07-15T00:05:00Z"))
    b = parse_record(record_bytes(v, trustedAcceptedAt="2026-07-15T02:05:00.000+02:00"))
    assert a == b
    assert (a.to_json()["trustedAcceptedAt"], b.to_json()["trustedAcceptedAt"]) == (
        "2026-07-15T00:05:00Z",
        "2026-07-15T02:05:00.000+02:00",
    )
    assert parse_record(a.canonical_bytes()) == a


def test_fixture_log_refuses_a_committed_record_that_is_not_the_candidate() -> None:
    v = verified()
    other = record_bytes(v, admissionRecordId="urn:uuid:ad000000-0000-4000-8000-0000000000ee")
    log = FixtureAdmissionLog(
        {"status": "authoritative-absence"},
        {"status": "committed", "record": "r", "authenticatedService": AUTHORITY.as_json()},
        lambda path: other,
    )
    with pytest.raises(AdapterContractError):
        admit_first(v, log, context)
    assert log.appends == 1


# -- properties of record validation ----------------------------------------------------

_VERIFIED = verified()
_URIS = st.from_regex(r"urn:[a-z]{1,8}:[a-z0-9-]{1,20}", fullmatch=True)
_BOUND = {
    "organizationId": _URIS,
    "documentKind": st.sampled_from(["agent-card", "approval", "artifact", "event", "evidence", "group-snapshot"]),
    "signingHash": st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True),
    "keyId": _URIS,
    "principal": st.builds(lambda t, i: {"type": t, "id": i}, st.sampled_from(["agent", "human", "service"]), _URIS),
}


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(sorted(_BOUND)).flatmap(lambda f: st.tuples(st.just(f), _BOUND[f])))
def test_any_change_to_a_bound_field_is_refused_PROTOCOL_6_4(change: tuple[str, Any]) -> None:
    field, value = change
    original = json.loads(record_bytes(_VERIFIED))
    if original[field] == value:
        return
    log = ScriptedLog(Found(record_bytes(_VERIFIED, **{field: value}), AUTHORITY))
    with pytest.raises(AdmissionFailed) as info:
        replay_historical(_VERIFIED, log)
    assert info.value.reason == Reason.RECORD_BINDING_MISMATCH


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=64),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_arbitrary_returned_bytes_only_ever_fail_as_admission(raw: bytes) -> None:
    with pytest.raises(AdmissionFailed) as info:
        replay_historical(_VERIFIED, ScriptedLog(Found(raw, AUTHORITY)))
    assert info.value.reason == Reason.RECORD_SCHEMA_INVALID


# -- hostile adapter answers: always a classified admission failure, never a crash --


@pytest.mark.parametrize("record", ["{}", None, 7.5, ["x"]])
def test_a_returned_record_that_is_not_bytes_fails_closed_PROTOCOL_6_4(record: Any) -> None:
    # §6.4: returned-record parsing failures map to AUTH_INVALID_SIGNATURE at
    # stage admission; a record of the wrong type must not escape as TypeError.
    fails(Reason.RECORD_SCHEMA_INVALID, replay_historical, verified(), ScriptedLog(Found(record, AUTHORITY)))
    fails(
        Reason.RECORD_SCHEMA_INVALID,
        admit_first,
        verified(),
        ScriptedLog(Absent(), Existing(record, AUTHORITY)),
        context,
    )


def test_an_unknown_fault_in_a_typed_failure_is_indeterminate_PROTOCOL_6_4() -> None:
    fails(Reason.LOG_INDETERMINATE, replay_historical, verified(), ScriptedLog(LookupFailed("weird")))  # type: ignore[arg-type]
    fails(Reason.LOG_INDETERMINATE, admit_first, verified(), ScriptedLog(Absent(), AppendFailed("weird")), context)  # type: ignore[arg-type]


class _Clock:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def __call__(self) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    "answer",
    [
        RuntimeError("trusted clock down"),
        None,
        "2026-07-15T00:05:00Z",
        TrustedContext("urn:uuid:ad000000-0000-4000-8000-000000000001", "2026-07-15T00:05:00Z", "svc"),  # type: ignore[arg-type]
    ],
)
def test_a_failing_trusted_context_source_fails_admission_closed_PROTOCOL_6_4(answer: Any) -> None:
    # §6.4: "Every failure after six-stage completion in ... candidate
    # preparation ... MUST map on the wire to AUTH_INVALID_SIGNATURE".
    log = ScriptedLog(Absent())
    fails(Reason.TRUSTED_CONTEXT_UNAVAILABLE, admit_first, verified(), log, _Clock(answer))
    assert log.appends == 0
