"""First admission and historical replay of Signed Documents (PROTOCOL §6.4).

Admission is a semantic layer *after* the six cryptographic stages: it takes a
:class:`~mwportal.protocol.verification.Verified` result and never changes its
signing bytes, signing hash, key or Principal. Its protected diagnostic stage
is ``admission``; on the wire every failure here is ``AUTH_INVALID_SIGNATURE``.

The Admission Log is a deployment seam (:class:`AdmissionLog`). Its answers
are typed values, never booleans, so that no caller can assert trust,
authentication or integrity on the log's behalf (§6.4: only the adapter's
typed result counts, never a flag the caller hands in)::

    lookup(organization_id, signing_hash)
        -> Found(record, service) | Absent() | LookupFailed(LookupFault)
    append_or_return_existing(candidate)
        -> Appended(record, service) | Existing(record, service) | AppendFailed(AppendFault)

``record`` is the stored record's exact bytes and ``service`` the accepting
service the log authenticated. The kernel re-parses and re-validates those
bytes every time: the record does not authenticate itself, and validating the
candidate alone is not enough (§6.4).

Exceptions::

    AdmissionFailed            every admission failure; .reason (Reason), .detail
    AdapterContractError       an adapter driven outside its contract (a harness defect);
                               propagates instead of becoming an admission failure

:class:`FixtureAdmissionLog` answers from one evaluation of the admission
bundle (``admission/manifest.json``), for the conformance runner.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from . import jcs, schemas, strictjson
from .errors import ErrorCode
from .registry import KeyBinding, Principal, key_valid_at
from .values import Timestamp, TimestampError, parse_timestamp
from .verification import Diagnostic, Verified, record_diagnostic

PROTOCOL_VERSION = "0.1"
STAGE = "admission"
RECORD_SCHEMA = "first-admission-record"


class Reason(StrEnum):
    """The stable protected reasons of the admission stage (the bundle's names)."""

    RECORD_MISSING = "record-missing"
    RECORD_BINDING_MISMATCH = "record-binding-mismatch"
    TRUSTED_TIME_OUTSIDE_KEY_INTERVAL = "trusted-time-outside-key-interval"
    MALFORMED_TRUSTED_TIME = "malformed-trusted-time"
    RECORD_CONFLICT = "record-conflict"
    RECORD_SCHEMA_INVALID = "record-schema-invalid"
    LOG_AUTHENTICATION_FAILED = "log-authentication-failed"
    APPEND_INTEGRITY_NOT_ESTABLISHED = "append-integrity-not-established"
    LOG_UNAVAILABLE = "log-unavailable"
    LOG_INDETERMINATE = "log-indeterminate"
    COMMIT_FAILED = "commit-failed"
    EVENT_SELF_ANCHORING = "event-self-anchoring"
    # Not a bundle name: the Organization's trusted acceptance context could
    # not be obtained (its source raised or answered something else).
    TRUSTED_CONTEXT_UNAVAILABLE = "trusted-context-unavailable"


class AdmissionFailed(Exception):
    """First admission or historical replay failed (§6.4).

    ``reason`` and ``detail`` belong in protected diagnostics only; the wire
    answer is always ``wire_code`` (``AUTH_INVALID_SIGNATURE``), which must
    not reveal which check failed. ``str()`` therefore names no reason.
    """

    stage = STAGE

    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__("admission failed")
        self.reason = reason
        self.detail = detail

    @property
    def wire_code(self) -> ErrorCode:
        return ErrorCode.AUTH_INVALID_SIGNATURE


class AdapterContractError(Exception):
    """An Admission Log adapter was used outside its contract (e.g. a fixture
    log asked to append when its evaluation declares no append outcome).

    This is a defect of the harness or deployment, not a log outcome, so the
    kernel lets it propagate instead of folding it into an admission failure
    that a conformance runner could mistake for the expected one.
    """


# -- the record --------------------------------------------------------------


def principal_json(principal: Principal) -> dict[str, str]:
    return {"type": principal.type, "id": principal.id}


@dataclass(frozen=True)
class FirstAdmissionRecord:
    """The nine fields of a First-Admission Record (§6.4).

    ``trusted_accepted_at`` keeps its lexical form (``.text``, written back
    unchanged) and compares as an exact instant, so two records that differ
    only in how they spell the same instant are equal.
    """

    protocol_version: str
    admission_record_id: str
    organization_id: str
    document_kind: str
    signing_hash: str
    key_id: str
    principal: Principal
    trusted_accepted_at: Timestamp
    accepted_by: Principal

    def to_json(self) -> dict[str, Any]:
        return {
            "protocolVersion": self.protocol_version,
            "admissionRecordId": self.admission_record_id,
            "organizationId": self.organization_id,
            "documentKind": self.document_kind,
            "signingHash": self.signing_hash,
            "keyId": self.key_id,
            "principal": principal_json(self.principal),
            "trustedAcceptedAt": self.trusted_accepted_at.text,
            "acceptedBy": principal_json(self.accepted_by),
        }

    def canonical_bytes(self) -> bytes:
        """The JCS bytes an Admission Log stores for this record."""
        return jcs.canonicalize(self.to_json())

    @property
    def logical_key(self) -> tuple[str, str]:
        """The Admission Log's lookup and append key (§6.4)."""
        return (self.organization_id, self.signing_hash)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> FirstAdmissionRecord:
        """Build from a schema-valid record object; TimestampError on a bad time."""
        return cls(
            protocol_version=value["protocolVersion"],
            admission_record_id=value["admissionRecordId"],
            organization_id=value["organizationId"],
            document_kind=value["documentKind"],
            signing_hash=value["signingHash"],
            key_id=value["keyId"],
            principal=Principal(type=value["principal"]["type"], id=value["principal"]["id"]),
            trusted_accepted_at=parse_timestamp(value["trustedAcceptedAt"]),
            accepted_by=Principal(type=value["acceptedBy"]["type"], id=value["acceptedBy"]["id"]),
        )


def parse_record(data: bytes) -> FirstAdmissionRecord:
    """Strictly parse and schema-validate record bytes (§6.4 record validation).

    Raises AdmissionFailed(``record-schema-invalid``) or
    (``malformed-trusted-time``). The bindings are not checked here.
    """
    try:
        value = strictjson.parse(data)
    except strictjson.StrictJSONError as exc:
        raise AdmissionFailed(Reason.RECORD_SCHEMA_INVALID, f"record is not strict JSON: {exc.reason}") from exc
    return _record_from_value(value)


def _record_from_value(value: Any) -> FirstAdmissionRecord:
    try:
        schemas.validate(RECORD_SCHEMA, value)
    except schemas.SchemaError as exc:
        raise AdmissionFailed(Reason.RECORD_SCHEMA_INVALID, "; ".join(exc.errors) or "schema refused") from exc
    try:
        return FirstAdmissionRecord.from_json(value)
    except TimestampError as exc:
        # The schema asserts the timestamp format, so this is a second line of
        # defence should the two ever disagree.
        raise AdmissionFailed(Reason.MALFORMED_TRUSTED_TIME, str(exc)) from exc


# -- the Admission Log seam --------------------------------------------------


class LookupFault(StrEnum):
    """Why a lookup established neither found nor authoritative absence."""

    UNAUTHENTICATED = "unauthenticated"
    INTEGRITY_FAILED = "integrity-failed"
    UNAVAILABLE = "unavailable"
    INDETERMINATE = "indeterminate"


class AppendFault(StrEnum):
    """Why append-or-return-existing returned no authenticated record."""

    CONFLICT = "conflict"
    UNAUTHENTICATED = "unauthenticated"
    INTEGRITY_FAILED = "integrity-failed"
    UNAVAILABLE = "unavailable"
    INDETERMINATE = "indeterminate"
    COMMIT_FAILED = "commit-failed"


@dataclass(frozen=True)
class Found:
    """An authoritative record under the logical key: its stored bytes and the
    service the log authenticated for it."""

    record: bytes
    service: Principal


@dataclass(frozen=True)
class Absent:
    """Authoritative absence: the log establishes that no record exists."""


@dataclass(frozen=True)
class LookupFailed:
    fault: LookupFault


@dataclass(frozen=True)
class Appended:
    """The candidate was committed; ``record`` is the stored bytes."""

    record: bytes
    service: Principal


@dataclass(frozen=True)
class Existing:
    """A record already existed under the logical key (a concurrent winner or
    an earlier admission) and was returned instead of appending."""

    record: bytes
    service: Principal


@dataclass(frozen=True)
class AppendFailed:
    fault: AppendFault


LookupResult = Found | Absent | LookupFailed
AppendResult = Appended | Existing | AppendFailed


class AdmissionLog(Protocol):
    """The Admission Log adapter contract (§6.4).

    ``lookup`` is authoritative: ``Absent`` only when the log can establish
    that no record exists under ``(organization_id, signing_hash)``.
    ``append_or_return_existing`` is one atomic operation on that key: it
    stores ``candidate.canonical_bytes()`` or returns the record already there,
    never both, never a replacement. It authenticates the accepting service,
    refuses writes from services the Organization has not authorized
    (``AppendFailed(UNAUTHENTICATED)``) and reports a record under the same key
    with another document kind, key ID or Principal as ``CONFLICT``.

    Both return one of the typed results; anything else is treated as
    indeterminate. An exception other than AdapterContractError is treated as
    an unavailable (lookup) or indeterminate (append) log.
    """

    def lookup(self, organization_id: str, signing_hash: str) -> LookupResult: ...

    def append_or_return_existing(self, candidate: FirstAdmissionRecord) -> AppendResult: ...


@dataclass(frozen=True)
class TrustedContext:
    """What the accepting Organization supplies for a new admission.

    ``trusted_accepted_at`` is the lexical text as the trusted clock gave it;
    the kernel parses it, so a malformed value fails ``malformed-trusted-time``.
    """

    admission_record_id: str
    trusted_accepted_at: str
    accepted_by: Principal


class Outcome(StrEnum):
    FOUND = "found"  # an earlier, compatible record: idempotent success, nothing appended
    COMMITTED = "committed"
    EXISTING = "existing"  # a concurrent winner's record


@dataclass(frozen=True)
class Admitted:
    """A validated, authenticated First-Admission Record for a verified document."""

    record: FirstAdmissionRecord
    record_bytes: bytes
    service: Principal
    outcome: Outcome


_LOOKUP_REASONS = {
    LookupFault.UNAUTHENTICATED: Reason.LOG_AUTHENTICATION_FAILED,
    LookupFault.INTEGRITY_FAILED: Reason.LOG_AUTHENTICATION_FAILED,
    LookupFault.UNAVAILABLE: Reason.LOG_UNAVAILABLE,
    LookupFault.INDETERMINATE: Reason.LOG_INDETERMINATE,
}

_APPEND_REASONS = {
    AppendFault.CONFLICT: Reason.RECORD_CONFLICT,
    AppendFault.UNAUTHENTICATED: Reason.LOG_AUTHENTICATION_FAILED,
    AppendFault.INTEGRITY_FAILED: Reason.APPEND_INTEGRITY_NOT_ESTABLISHED,
    AppendFault.UNAVAILABLE: Reason.LOG_UNAVAILABLE,
    AppendFault.INDETERMINATE: Reason.LOG_INDETERMINATE,
    AppendFault.COMMIT_FAILED: Reason.COMMIT_FAILED,
}


# -- validation --------------------------------------------------------------


def _expected(verified: Verified) -> dict[str, Any]:
    """The five record fields that must equal the six-stage evidence."""
    return {
        "organizationId": verified.organization_id,
        "documentKind": verified.profile,
        "signingHash": verified.signing_hash,
        "keyId": verified.key_id,
        "principal": principal_json(verified.principal),
    }


def check_trusted_time(binding: KeyBinding, t: Timestamp) -> None:
    """§6.4: the trusted acceptance instant must lie in the key's half-open
    interval, using the effective (earliest retained) boundaries. This is
    what stops a signer from backdating the protected time past a revocation.
    """
    if not key_valid_at(binding, t):
        raise AdmissionFailed(
            Reason.TRUSTED_TIME_OUTSIDE_KEY_INTERVAL,
            f"trustedAcceptedAt {t.text} outside the interval of {binding.key_id}",
        )


def _is_self_anchor(verified: Verified, value: Any) -> bool:
    """§6.4: a Signed Event must not serve as its own First-Admission Record.

    The returned "record" is the Event itself when it carries the Event's own
    signature envelope or the Event's exact signed content.
    """
    if verified.profile != "event" or not isinstance(value, dict):
        return False
    if value == verified.document:
        return True
    if "signature" in value and value["signature"] == verified.document.get("signature"):
        return True
    try:
        return jcs.signing_bytes(value) == verified.signing_bytes
    except jcs.DataModelError:
        return False


def validate_record(
    verified: Verified, record_bytes: bytes, service: Principal, *, candidate: FirstAdmissionRecord | None = None
) -> FirstAdmissionRecord:
    """Validate an authenticated record the log returned (§6.4 record validation).

    In order: strict parse; Event self-anchoring; schema; exact equality with
    the six-stage evidence; ``acceptedBy`` equal to the service the log
    authenticated; ``trustedAcceptedAt`` inside the key's interval. With
    ``candidate`` (the append path), a record under the candidate's logical
    key is a conflict when its document kind, key ID or Principal differs.
    """
    if not isinstance(record_bytes, (bytes, bytearray, memoryview)):
        raise AdmissionFailed(Reason.RECORD_SCHEMA_INVALID, f"record is a {type(record_bytes).__name__}, not bytes")
    try:
        value = strictjson.parse(record_bytes)
    except strictjson.StrictJSONError as exc:
        raise AdmissionFailed(Reason.RECORD_SCHEMA_INVALID, f"record is not strict JSON: {exc.reason}") from exc
    if _is_self_anchor(verified, value):
        raise AdmissionFailed(Reason.EVENT_SELF_ANCHORING, "a Signed Event cannot be its own admission record")
    record = _record_from_value(value)
    actual = record.to_json()
    mismatched = [name for name, want in _expected(verified).items() if actual[name] != want]
    if mismatched:
        same_key = candidate is not None and record.logical_key == candidate.logical_key
        reason = Reason.RECORD_CONFLICT if same_key else Reason.RECORD_BINDING_MISMATCH
        raise AdmissionFailed(reason, f"record differs from the six-stage evidence in {', '.join(mismatched)}")
    if record.accepted_by != service:
        raise AdmissionFailed(
            Reason.LOG_AUTHENTICATION_FAILED,
            f"acceptedBy {record.accepted_by.id} is not the authenticated service {service.id}",
        )
    check_trusted_time(verified.binding, record.trusted_accepted_at)
    return record


def prepare_candidate(verified: Verified, context: TrustedContext) -> FirstAdmissionRecord:
    """A candidate record for a new admission; appends nothing, admits nothing.

    The trusted time is checked here already so that an out-of-interval
    admission never reaches the log (§6.4: a backdated protected time alone
    must not be accepted).
    """
    try:
        accepted_at = parse_timestamp(context.trusted_accepted_at)
    except TimestampError as exc:
        raise AdmissionFailed(Reason.MALFORMED_TRUSTED_TIME, str(exc)) from exc
    check_trusted_time(verified.binding, accepted_at)
    candidate = FirstAdmissionRecord(
        protocol_version=PROTOCOL_VERSION,
        admission_record_id=context.admission_record_id,
        organization_id=verified.organization_id,
        document_kind=verified.profile,
        signing_hash=verified.signing_hash,
        key_id=verified.key_id,
        principal=verified.principal,
        trusted_accepted_at=accepted_at,
        accepted_by=context.accepted_by,
    )
    # A candidate the log would hold must itself be a valid record (e.g. a
    # non-service acceptedBy or a relative admissionRecordId is refused here).
    _record_from_value(candidate.to_json())
    return candidate


# -- the two paths -----------------------------------------------------------


def _diagnose(verified: Verified, failure: AdmissionFailed) -> None:
    """§6.4: retain stage ``admission`` and the stable reason, protected."""
    record_diagnostic(
        Diagnostic(
            profile=verified.profile,
            stage=STAGE,
            reason=failure.reason.value,
            organization_id=verified.organization_id,
            key_id=verified.key_id,
            signing_hash=verified.signing_hash,
        )
    )


def _lookup(verified: Verified, log: AdmissionLog) -> LookupResult:
    try:
        result = log.lookup(verified.organization_id, verified.signing_hash)
    except AdapterContractError:
        raise
    except Exception as exc:  # fail closed: a log that raises is an unavailable log (§6.4)
        raise AdmissionFailed(Reason.LOG_UNAVAILABLE, f"lookup raised {type(exc).__name__}: {exc}") from exc
    if isinstance(result, LookupFailed):
        raise AdmissionFailed(_LOOKUP_REASONS.get(result.fault, Reason.LOG_INDETERMINATE), f"lookup: {result.fault}")
    if isinstance(result, (Found, Absent)):
        return result
    raise AdmissionFailed(Reason.LOG_INDETERMINATE, f"lookup returned an untyped {type(result).__name__}")


def _append(log: AdmissionLog, candidate: FirstAdmissionRecord) -> Appended | Existing:
    try:
        result = log.append_or_return_existing(candidate)
    except AdapterContractError:
        raise
    except Exception as exc:  # fail closed: whether it committed is unknown (§6.4)
        raise AdmissionFailed(Reason.LOG_INDETERMINATE, f"append raised {type(exc).__name__}: {exc}") from exc
    if isinstance(result, AppendFailed):
        raise AdmissionFailed(_APPEND_REASONS.get(result.fault, Reason.LOG_INDETERMINATE), f"append: {result.fault}")
    if isinstance(result, (Appended, Existing)):
        return result
    raise AdmissionFailed(Reason.LOG_INDETERMINATE, f"append returned an untyped {type(result).__name__}")


def _obtain_context(source: Callable[[], TrustedContext]) -> TrustedContext:
    # A failure to obtain trusted acceptance context is a candidate-preparation
    # failure, which §6.4 maps to AUTH_INVALID_SIGNATURE like every other.
    try:
        context = source()
    except AdapterContractError:
        raise
    except Exception as exc:
        raise AdmissionFailed(Reason.TRUSTED_CONTEXT_UNAVAILABLE, f"source raised {type(exc).__name__}") from exc
    if not isinstance(context, TrustedContext) or not isinstance(context.accepted_by, Principal):
        raise AdmissionFailed(Reason.TRUSTED_CONTEXT_UNAVAILABLE, f"source answered a {type(context).__name__}")
    return context


def admit_first(verified: Verified, log: AdmissionLog, trusted_context: Callable[[], TrustedContext]) -> Admitted:
    """First admission of a six-stage-verified document (§6.4).

    The Registry evidence behind ``verified`` must be current for a new
    admission decision (the caller's duty). ``trusted_context`` is called only
    after the log establishes authoritative absence: a found record is
    validated and returned without appending (idempotent retry), and any
    lookup failure fails closed. First admission completes only when the
    record the log returns (ours or a concurrent winner's) validates.

    Raises AdmissionFailed, already recorded in protected diagnostics.
    """
    try:
        found = _lookup(verified, log)
        if isinstance(found, Found):
            record = validate_record(verified, found.record, found.service)
            return Admitted(record, found.record, found.service, Outcome.FOUND)
        candidate = prepare_candidate(verified, _obtain_context(trusted_context))
        appended = _append(log, candidate)
        record = validate_record(verified, appended.record, appended.service, candidate=candidate)
        outcome = Outcome.COMMITTED if isinstance(appended, Appended) else Outcome.EXISTING
        return Admitted(record, appended.record, appended.service, outcome)
    except AdmissionFailed as failure:
        _diagnose(verified, failure)
        raise


def replay_historical(verified: Verified, log: AdmissionLog) -> Admitted:
    """Historical replay (§6.4): ``verified`` must come from historical
    Registry evidence with the complete retained validity history. Requires a
    found record and validates it; never obtains trusted context, never
    appends. A later expiry or revocation does not invalidate the document
    when both the protected time and ``trustedAcceptedAt`` were in the key's
    interval (the interval uses the effective boundaries, so a revocation
    moved before ``trustedAcceptedAt`` does invalidate it).
    """
    try:
        found = _lookup(verified, log)
        if not isinstance(found, Found):
            raise AdmissionFailed(Reason.RECORD_MISSING, "historical replay found no First-Admission Record")
        record = validate_record(verified, found.record, found.service)
        return Admitted(record, found.record, found.service, Outcome.FOUND)
    except AdmissionFailed as failure:
        _diagnose(verified, failure)
        raise


# -- the bundle's fixture log ------------------------------------------------


def fixture_principal(value: Mapping[str, Any]) -> Principal:
    return Principal(type=value["type"], id=value["id"])


def fixture_trusted_context(entry: Mapping[str, Any]) -> TrustedContext:
    """An evaluation's ``trustedContext`` entry as a TrustedContext."""
    return TrustedContext(
        admission_record_id=entry["admissionRecordId"],
        trusted_accepted_at=entry["trustedAcceptedAt"],
        accepted_by=fixture_principal(entry["acceptedBy"]),
    )


@dataclass
class FixtureAdmissionLog:
    """An AdmissionLog answering from one admission-bundle evaluation.

    ``lookup`` and ``append`` are the evaluation's entries (``append`` may be
    None); ``read`` maps a bundle path (``admission/records/...`` or
    ``cryptography/...``) to that artifact's bytes. The statuses map one to
    one onto the typed results: ``found`` -> Found, ``authoritative-absence``
    -> Absent, ``committed`` -> Appended, ``existing`` -> Existing, anything
    else -> LookupFailed/AppendFailed with the fault of the same name.

    ``committed`` means the log stored the candidate, so the fixture's record
    must equal the candidate the kernel prepared (compared as parsed JSON, the
    fixture's bytes being pretty-printed): otherwise AdapterContractError.
    An append on an evaluation with no append entry is AdapterContractError
    too. ``lookups``, ``appends`` and ``candidates`` let a runner check that
    no path looked up twice or appended when it must not have.
    """

    lookup_entry: Mapping[str, Any]
    append_entry: Mapping[str, Any] | None
    read: Callable[[str], bytes]
    lookups: int = 0
    appends: int = 0
    candidates: list[FirstAdmissionRecord] = field(default_factory=list)

    def lookup(self, organization_id: str, signing_hash: str) -> LookupResult:
        self.lookups += 1
        status = self.lookup_entry["status"]
        if status == "found":
            return Found(
                self.read(self.lookup_entry["record"]), fixture_principal(self.lookup_entry["authenticatedService"])
            )
        if status == "authoritative-absence":
            return Absent()
        return LookupFailed(LookupFault(status))

    def append_or_return_existing(self, candidate: FirstAdmissionRecord) -> AppendResult:
        self.appends += 1
        self.candidates.append(candidate)
        if self.append_entry is None:
            raise AdapterContractError("the evaluation declares no append outcome")
        status = self.append_entry["status"]
        if status not in ("committed", "existing"):
            return AppendFailed(AppendFault(status))
        stored = self.read(self.append_entry["record"])
        service = fixture_principal(self.append_entry["authenticatedService"])
        if status == "existing":
            return Existing(stored, service)
        if strictjson.parse(stored) != candidate.to_json():
            raise AdapterContractError("the fixture's committed record is not the kernel's candidate")
        return Appended(stored, service)


class TrustedContextSource:
    """A trusted-context provider that counts how often it was asked (the
    kernel may ask only after authoritative absence, at most once)."""

    def __init__(self, context: TrustedContext | None) -> None:
        self.context = context
        self.calls = 0

    def __call__(self) -> TrustedContext:
        self.calls += 1
        if self.context is None:
            raise AdapterContractError("the evaluation declares no trusted context")
        return self.context
