"""Protocol errors: the codes and HTTP statuses of DESIGN §4.

Exception tree::

    ProtocolError            every refusal the protocol defines; carries ``code``
    └── (no subclasses)      the code, not the class, is the contract

A ``ProtocolError`` raised anywhere inside ``accept()`` rolls the whole
transaction back: nothing is written for a refused Command.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    MALFORMED = "MALFORMED"
    INVALID_SIGNATURE = "INVALID_SIGNATURE"
    STALE_SESSION = "STALE_SESSION"
    NOT_A_MEMBER = "NOT_A_MEMBER"
    FORBIDDEN = "FORBIDDEN"
    ACTION_ID_COLLISION = "ACTION_ID_COLLISION"
    REVISION_MISMATCH = "REVISION_MISMATCH"
    INVALID_TRANSITION = "INVALID_TRANSITION"
    STALE_OWNERSHIP = "STALE_OWNERSHIP"
    STALE_LEASE = "STALE_LEASE"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    OFFER_EXPIRED = "OFFER_EXPIRED"
    APPROVAL_REQUIRED = "APPROVAL_REQUIRED"
    CONTRACT_INVALID = "CONTRACT_INVALID"
    DEPENDENCY_CYCLE = "DEPENDENCY_CYCLE"
    DEPENDENCY_UNMET = "DEPENDENCY_UNMET"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    EVIDENCE_REQUIRED = "EVIDENCE_REQUIRED"
    NOT_FOUND = "NOT_FOUND"
    CURSOR_TOO_OLD = "CURSOR_TOO_OLD"
    ARTIFACT_HASH_MISMATCH = "ARTIFACT_HASH_MISMATCH"
    OFFLINE_BINDING_INVALID = "OFFLINE_BINDING_INVALID"
    # Policy rate or quota reached (spec §20); retry after ``retryAfterMs``.
    RATE_LIMITED = "RATE_LIMITED"
    # The receiver cannot take more traffic now (spec §19); retry after ``retryAfterMs``.
    BACKPRESSURE = "BACKPRESSURE"
    # The Authority failed without accepting the transition (spec §19): a
    # database outage, an exhausted connection pool. Always retryable.
    INTERNAL_ERROR = "INTERNAL_ERROR"


# DESIGN §4: 400 malformed/contract, 401 signature/session, 403 membership,
# 404, 409 collision/revision/stale/expired, 410 cursor, 422 rule refusals.
HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.MALFORMED: 400,
    ErrorCode.CONTRACT_INVALID: 400,
    ErrorCode.INVALID_SIGNATURE: 401,
    ErrorCode.STALE_SESSION: 401,
    ErrorCode.NOT_A_MEMBER: 403,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.ACTION_ID_COLLISION: 409,
    ErrorCode.REVISION_MISMATCH: 409,
    ErrorCode.STALE_OWNERSHIP: 409,
    ErrorCode.STALE_LEASE: 409,
    ErrorCode.LEASE_EXPIRED: 409,
    ErrorCode.OFFER_EXPIRED: 409,
    ErrorCode.ARTIFACT_HASH_MISMATCH: 409,
    ErrorCode.OFFLINE_BINDING_INVALID: 409,
    ErrorCode.CURSOR_TOO_OLD: 410,
    ErrorCode.INVALID_TRANSITION: 422,
    ErrorCode.EVIDENCE_REQUIRED: 422,
    ErrorCode.DEPENDENCY_CYCLE: 422,
    ErrorCode.DEPENDENCY_UNMET: 422,
    ErrorCode.BUDGET_EXCEEDED: 422,
    ErrorCode.APPROVAL_REQUIRED: 422,
    # Both are flow control the sender must honour (wait retryAfterMs), not a
    # failure of the server: 429 keeps 5xx for INTERNAL_ERROR alone, so a
    # proxy's or a monitor's "server errors" count only real failures, and
    # an overloaded Authority answers no 5xx at all (issue 16).
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.BACKPRESSURE: 429,
    ErrorCode.INTERNAL_ERROR: 500,
}

# Codes whose unchanged retry may succeed once the cause passes (spec §19):
# the sender keeps the Action ID and signed content and waits ``retryAfterMs``.
RETRYABLE: frozenset[ErrorCode] = frozenset({ErrorCode.RATE_LIMITED, ErrorCode.BACKPRESSURE, ErrorCode.INTERNAL_ERROR})


class ProtocolError(Exception):
    """A refusal with a protocol ``code``, a human ``message`` and ``details``."""

    def __init__(
        self,
        code: ErrorCode | str,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        retry_after_ms: int | None = None,
    ):
        self.code = ErrorCode(code)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        self.retry_after_ms = retry_after_ms
        super().__init__(f"{self.code}: {message}")

    @property
    def retryable(self) -> bool:
        return self.code in RETRYABLE

    @property
    def http_status(self) -> int:
        return HTTP_STATUS[self.code]

    def as_dict(self) -> dict[str, Any]:
        """The wire form: ``{"error": {"code", "message", "retryable", "details"}}``,
        with ``retryAfterMs`` when the sender should wait before retrying."""
        error: dict[str, Any] = {
            "code": str(self.code),
            "message": self.message,
            "retryable": self.retryable,
            "details": self.details,
        }
        if self.retry_after_ms is not None:
            error["retryAfterMs"] = self.retry_after_ms
        return {"error": error}

    def retry_after_header(self) -> str | None:
        """``Retry-After`` (whole seconds, at least 1) for an HTTP answer, or None."""
        if self.retry_after_ms is None:
            return None
        return str(max(1, -(-self.retry_after_ms // 1000)))


def malformed(field: str, problem: str) -> ProtocolError:
    """MALFORMED naming the offending field, as every bad-input answer must."""
    return ProtocolError(ErrorCode.MALFORMED, f"{field}: {problem}", {"field": field})
