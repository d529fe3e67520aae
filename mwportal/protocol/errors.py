"""Protocol errors (spec §19): the 27 core codes, the normative error
document, and the retry rules, each in one place.

Exception tree::

    ProtocolError            every refusal the protocol defines; carries ``code``
    └── (no subclasses)      the code, not the class, is the contract

A ``ProtocolError`` raised anywhere inside ``accept()`` rolls the whole
transaction back: nothing is written for a refused Command.

The project's private codes of DESIGN version 1 are gone; each one's specific
meaning survives as ``details["reason"]`` under the core code that covers it
(``INVALID_COMMAND`` with ``{"reason": "dependency_cycle"}``, ...), so a
person or a log can still tell the cases apart while a peer switches only on
the 27 codes. ``reason`` is the old code in lower case:

=========================  ===========================================================
old (DESIGN v1)            now
=========================  ===========================================================
MALFORMED                  SCHEMA_VALIDATION_FAILED (a member's shape or value);
                           PROTOCOL_VIOLATION (not one strict JSON value, framing,
                           a value outside the JCS data model: §6.4)
INVALID_SIGNATURE          AUTH_INVALID_SIGNATURE
STALE_SESSION              AUTH_STALE_SESSION; AUTH_REQUIRED when there is no session
NOT_A_MEMBER               MEMBERSHIP_REQUIRED; MEMBERSHIP_STALE for an old epoch
FORBIDDEN                  AUTH_FORBIDDEN
REVISION_MISMATCH          REVISION_CONFLICT (with expectedRevision/currentRevision)
INVALID_TRANSITION         INVALID_STATE_TRANSITION
STALE_OWNERSHIP            WORK_STALE_OWNERSHIP
STALE_LEASE                WORK_LEASE_EXPIRED, reason ``stale_lease``
LEASE_EXPIRED              WORK_LEASE_EXPIRED, reason ``lease_expired``
OFFER_EXPIRED              WORK_OFFER_EXPIRED
CONTRACT_INVALID           WORK_CONTRACT_INCOMPLETE (a required member missing) or
                           INVALID_COMMAND (present but wrong), reason ``contract_invalid``
DEPENDENCY_CYCLE           INVALID_COMMAND, reason ``dependency_cycle``
DEPENDENCY_UNMET           INVALID_STATE_TRANSITION, reason ``dependency_unmet``
EVIDENCE_REQUIRED          INVALID_STATE_TRANSITION, reason ``evidence_required``
OFFLINE_BINDING_INVALID    INVALID_COMMAND, reason ``offline_binding_invalid``
ARTIFACT_HASH_MISMATCH     INVALID_COMMAND (an upload's bytes are not the hash the
                           client named) or INTERNAL_ERROR (stored bytes no longer
                           match: the Authority's store failed), reason
                           ``artifact_hash_mismatch``
NOT_FOUND                  the rule for absent things below
critical extension         UNKNOWN_CRITICAL_EXTENSION
=========================  ===========================================================

Absent things (the one rule, issue 16's existence oracle kept):

- A Group that is absent, and a Group the caller may not see, are the same
  answer: ``GROUP_NOT_FOUND`` (404), byte for byte.
- A REST read of anything else that is absent or undisclosed (a WorkItem, an
  Artifact blob, an upload, a snapshot, a Context Package) is also 404
  ``GROUP_NOT_FOUND``: everything the portal serves is held by a Group and
  reached through that Group's gate, so "this item is absent" and "its Group
  is hidden from you" must not be told apart by the code. The message and
  details name only what the request asked for, never what exists.
- A Command naming something absent inside its (visible) Group, other than
  the Group itself (a WorkItem target, an Artifact, an Agent, an Event), is
  ``INVALID_COMMAND`` (400) with ``{"reason": "not_found"}``: the Command is
  well-formed but refers to nothing. A Command naming another Group the
  sender is not in (``context.forward``'s ``to_group``) is GROUP_NOT_FOUND.
- A path the REST binding does not have is ``PROTOCOL_VIOLATION`` with HTTP
  404, as a wrong method is ``PROTOCOL_VIOLATION`` with 405: the HTTP
  binding's own refusals keep HTTP's status (``ProtocolError(..., http_status=)``).

HTTP status decisions that are the project's, not §19's: ``RATE_LIMITED`` and
``BACKPRESSURE`` are 429 so that 5xx means ``INTERNAL_ERROR`` alone (issue
16); ``UNSUPPORTED_VERSION`` is 400, not 426, because 426 obliges an
``Upgrade`` header naming a protocol to switch to, and MWP 0.1 has no other
version to offer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    """Exactly the core codes of §19 (and of ``error.schema.json``'s enum)."""

    UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"
    AUTH_REQUIRED = "AUTH_REQUIRED"
    AUTH_INVALID_SIGNATURE = "AUTH_INVALID_SIGNATURE"
    AUTH_STALE_SESSION = "AUTH_STALE_SESSION"
    AUTH_STALE_COORDINATOR = "AUTH_STALE_COORDINATOR"
    AUTH_FORBIDDEN = "AUTH_FORBIDDEN"
    GROUP_NOT_FOUND = "GROUP_NOT_FOUND"
    MEMBERSHIP_REQUIRED = "MEMBERSHIP_REQUIRED"
    MEMBERSHIP_STALE = "MEMBERSHIP_STALE"
    SCHEMA_VALIDATION_FAILED = "SCHEMA_VALIDATION_FAILED"
    INVALID_COMMAND = "INVALID_COMMAND"
    INVALID_STATE_TRANSITION = "INVALID_STATE_TRANSITION"
    REVISION_CONFLICT = "REVISION_CONFLICT"
    ACTION_ID_COLLISION = "ACTION_ID_COLLISION"
    UNKNOWN_CRITICAL_EXTENSION = "UNKNOWN_CRITICAL_EXTENSION"
    WORK_CONTRACT_INCOMPLETE = "WORK_CONTRACT_INCOMPLETE"
    WORK_OFFER_EXPIRED = "WORK_OFFER_EXPIRED"
    WORK_ALREADY_OWNED = "WORK_ALREADY_OWNED"
    WORK_LEASE_EXPIRED = "WORK_LEASE_EXPIRED"
    WORK_STALE_OWNERSHIP = "WORK_STALE_OWNERSHIP"
    APPROVAL_REQUIRED = "APPROVAL_REQUIRED"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    RATE_LIMITED = "RATE_LIMITED"
    BACKPRESSURE = "BACKPRESSURE"
    CURSOR_TOO_OLD = "CURSOR_TOO_OLD"
    PROTOCOL_VIOLATION = "PROTOCOL_VIOLATION"
    INTERNAL_ERROR = "INTERNAL_ERROR"


class RetryRule(StrEnum):
    """What a sender may do after a refusal (§19)."""

    # Resend the very same signed Command (same Action ID, same bytes), after
    # ``retryAfterMs`` when given. The only rule whose document says
    # ``retryable: true``.
    RETRY_SAME_COMMAND = "RETRY_SAME_COMMAND"
    # AUTH_INVALID_SIGNATURE: never resend as it is; once the envelope, the
    # key or the admission state is fixed, the old Action ID may be reused
    # while its protected content is still good, else (freshness expired) a
    # new Command.
    RETRY_SAME_AFTER_CORRECTION = "RETRY_SAME_AFTER_CORRECTION"
    # A new Command with a new Action ID (ACTION_ID_COLLISION by §19; every
    # refusal of the Command's content by the same logic: changed content
    # under the old Action ID would be a collision).
    NEW_COMMAND = "NEW_COMMAND"
    # Fenced by an epoch: fetch the current one, then sign a new Command with
    # a new Action ID.
    NEW_COMMAND_AFTER_EPOCH_REFRESH = "NEW_COMMAND_AFTER_EPOCH_REFRESH"
    # The same request fails again; what helps is not a retry (a snapshot for
    # CURSOR_TOO_OLD, a Membership, another version, a fixed peer).
    DO_NOT_RETRY = "DO_NOT_RETRY"


@dataclass(frozen=True)
class CodeRule:
    http_status: int
    retry: RetryRule

    @property
    def retryable(self) -> bool:
        """The document's ``retryable``: whether an unchanged retry is safe (§19)."""
        return self.retry is RetryRule.RETRY_SAME_COMMAND


_R = RetryRule
# The one table: every code's HTTP status and retry rule.
RULES: dict[ErrorCode, CodeRule] = {
    ErrorCode.UNSUPPORTED_VERSION: CodeRule(400, _R.DO_NOT_RETRY),
    ErrorCode.AUTH_REQUIRED: CodeRule(401, _R.RETRY_SAME_AFTER_CORRECTION),
    ErrorCode.AUTH_INVALID_SIGNATURE: CodeRule(401, _R.RETRY_SAME_AFTER_CORRECTION),
    ErrorCode.AUTH_STALE_SESSION: CodeRule(401, _R.NEW_COMMAND_AFTER_EPOCH_REFRESH),
    ErrorCode.AUTH_STALE_COORDINATOR: CodeRule(409, _R.NEW_COMMAND_AFTER_EPOCH_REFRESH),
    ErrorCode.AUTH_FORBIDDEN: CodeRule(403, _R.DO_NOT_RETRY),
    ErrorCode.GROUP_NOT_FOUND: CodeRule(404, _R.DO_NOT_RETRY),
    ErrorCode.MEMBERSHIP_REQUIRED: CodeRule(403, _R.DO_NOT_RETRY),
    ErrorCode.MEMBERSHIP_STALE: CodeRule(409, _R.NEW_COMMAND_AFTER_EPOCH_REFRESH),
    ErrorCode.SCHEMA_VALIDATION_FAILED: CodeRule(400, _R.NEW_COMMAND),
    ErrorCode.INVALID_COMMAND: CodeRule(400, _R.NEW_COMMAND),
    ErrorCode.INVALID_STATE_TRANSITION: CodeRule(422, _R.NEW_COMMAND),
    ErrorCode.REVISION_CONFLICT: CodeRule(409, _R.NEW_COMMAND),
    ErrorCode.ACTION_ID_COLLISION: CodeRule(409, _R.NEW_COMMAND),
    ErrorCode.UNKNOWN_CRITICAL_EXTENSION: CodeRule(400, _R.NEW_COMMAND),
    ErrorCode.WORK_CONTRACT_INCOMPLETE: CodeRule(400, _R.NEW_COMMAND),
    ErrorCode.WORK_OFFER_EXPIRED: CodeRule(409, _R.DO_NOT_RETRY),
    ErrorCode.WORK_ALREADY_OWNED: CodeRule(409, _R.DO_NOT_RETRY),
    ErrorCode.WORK_LEASE_EXPIRED: CodeRule(409, _R.NEW_COMMAND),
    ErrorCode.WORK_STALE_OWNERSHIP: CodeRule(409, _R.NEW_COMMAND_AFTER_EPOCH_REFRESH),
    ErrorCode.APPROVAL_REQUIRED: CodeRule(422, _R.NEW_COMMAND),
    ErrorCode.BUDGET_EXCEEDED: CodeRule(422, _R.NEW_COMMAND),
    # Flow control the sender must honour, not a failure of the server: 429
    # keeps 5xx for INTERNAL_ERROR alone, so an overloaded Authority answers
    # no 5xx at all (issue 16).
    ErrorCode.RATE_LIMITED: CodeRule(429, _R.RETRY_SAME_COMMAND),
    ErrorCode.BACKPRESSURE: CodeRule(429, _R.RETRY_SAME_COMMAND),
    ErrorCode.CURSOR_TOO_OLD: CodeRule(410, _R.DO_NOT_RETRY),
    ErrorCode.PROTOCOL_VIOLATION: CodeRule(400, _R.DO_NOT_RETRY),
    # Nothing was accepted (one transaction), and an unchanged retry of an
    # accepted Command answers its receipt, so the same Command is safe.
    ErrorCode.INTERNAL_ERROR: CodeRule(500, _R.RETRY_SAME_COMMAND),
}

HTTP_STATUS: dict[ErrorCode, int] = {code: rule.http_status for code, rule in RULES.items()}
RETRYABLE: frozenset[ErrorCode] = frozenset(code for code, rule in RULES.items() if rule.retryable)

MAX_MESSAGE = 2000  # error.schema.json: message 1-2000 characters
_MAX_SAFE = 2**53 - 1  # common.schema.json safeInteger


def occurred_at_text(when: datetime) -> str:
    """RFC 3339 in UTC with ``Z`` and milliseconds, the §2 timestamp profile."""
    if when.tzinfo is None:
        raise ValueError("occurredAt needs an aware datetime")
    utc = when.astimezone(UTC)
    # Not strftime: its %Y drops the leading zeros of a year before 1000.
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"
        f".{utc.microsecond // 1000:03d}Z"
    )


def _safe_integer(name: str, value: int | None) -> int | None:
    if value is not None and (isinstance(value, bool) or not 0 <= value <= _MAX_SAFE):
        raise ValueError(f"{name}: must be a safe integer >= 0, not {value!r}")
    return value


class ProtocolError(Exception):
    """A refusal: a core ``code``, a human ``message``, and the optional members
    of the error document (§19), each set only when it is known."""

    def __init__(
        self,
        code: ErrorCode | str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after_ms: int | None = None,
        related_action_id: str | None = None,
        related_frame_id: str | None = None,
        group_id: str | None = None,
        expected_revision: int | None = None,
        current_revision: int | None = None,
        snapshot_artifact_hash: str | None = None,
        fatal: bool | None = None,
        http_status: int | None = None,
    ):
        self.code = ErrorCode(code)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        self.retry_after_ms = _safe_integer("retryAfterMs", retry_after_ms)
        self.related_action_id = related_action_id
        self.related_frame_id = related_frame_id
        self.group_id = group_id
        self.expected_revision = _safe_integer("expectedRevision", expected_revision)
        self.current_revision = _safe_integer("currentRevision", current_revision)
        self.snapshot_artifact_hash = snapshot_artifact_hash
        self.fatal = fatal
        # Only the HTTP binding's own refusals (no route 404, 405, 415) set
        # it; every protocol refusal takes its code's status from RULES.
        self._http_status = http_status
        super().__init__(f"{self.code}: {message}")

    @property
    def rule(self) -> CodeRule:
        return RULES[self.code]

    @property
    def retryable(self) -> bool:
        return self.rule.retryable

    @property
    def retry(self) -> RetryRule:
        return self.rule.retry

    @property
    def http_status(self) -> int:
        return self._http_status or self.rule.http_status

    def document(self, occurred_at: datetime | None = None) -> dict[str, Any]:
        """The normative error document (``error.schema.json``): the four
        required members, then each optional one only when it is set."""
        message = self.message[:MAX_MESSAGE] or str(self.code)
        doc: dict[str, Any] = {
            "code": str(self.code),
            "message": message,
            "retryable": self.retryable,
            "occurredAt": occurred_at_text(occurred_at or datetime.now(UTC)),
        }
        optional = {
            "fatal": self.fatal,
            "relatedFrameId": self.related_frame_id,
            "relatedActionId": self.related_action_id,
            "groupId": self.group_id,
            "expectedRevision": self.expected_revision,
            "currentRevision": self.current_revision,
            "retryAfterMs": self.retry_after_ms,
            "snapshotArtifactHash": self.snapshot_artifact_hash,
        }
        doc.update({name: value for name, value in optional.items() if value is not None})
        if self.details:
            doc["details"] = self.details
        return doc

    def as_dict(self) -> dict[str, Any]:
        """The wire form: the error document itself (DESIGN v2 §5), no wrapper."""
        return self.document()

    def retry_after_header(self) -> str | None:
        """``Retry-After`` (whole seconds, at least 1) for an HTTP answer, or None."""
        if self.retry_after_ms is None:
            return None
        return str(max(1, -(-self.retry_after_ms // 1000)))


def malformed(field: str, problem: str) -> ProtocolError:
    """SCHEMA_VALIDATION_FAILED naming the offending field, as every bad-input answer must."""
    return ProtocolError(ErrorCode.SCHEMA_VALIDATION_FAILED, f"{field}: {problem}", details={"field": field})
