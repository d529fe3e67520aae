"""One mapping from protocol error codes to plain words for people (issue 7).

Portal pages and admin actions show a refused Command with ``explain()``: the
sentence a person can act on first, the protocol's own message after it.
"""

from __future__ import annotations

from mwportal.protocol import ErrorCode, ProtocolError

PLAIN_WORDS: dict[ErrorCode, str] = {
    ErrorCode.MALFORMED: "something in the form is not valid",
    ErrorCode.INVALID_SIGNATURE: "your sign-in could not be verified; sign in again",
    ErrorCode.STALE_SESSION: "your session has ended; sign in again",
    ErrorCode.NOT_A_MEMBER: "you are not a member of this Mission",
    ErrorCode.FORBIDDEN: "your role does not allow this",
    ErrorCode.ACTION_ID_COLLISION: "this action was already sent with different content; reload and try again",
    ErrorCode.REVISION_MISMATCH: "someone changed this item; reload",
    ErrorCode.INVALID_TRANSITION: "this is not possible in the item's current state; reload to see where it is",
    ErrorCode.STALE_OWNERSHIP: "the item has changed hands since this page was loaded; reload",
    ErrorCode.STALE_LEASE: "the work session this refers to is no longer current; reload",
    ErrorCode.LEASE_EXPIRED: "the work session this refers to has expired",
    ErrorCode.OFFER_EXPIRED: "the offer has expired",
    ErrorCode.APPROVAL_REQUIRED: "this needs an execution Approval first",
    ErrorCode.CONTRACT_INVALID: "the Work Contract is not valid",
    ErrorCode.DEPENDENCY_CYCLE: "these dependencies would go round in a circle",
    ErrorCode.DEPENDENCY_UNMET: "the work this depends on is not finished yet",
    ErrorCode.BUDGET_EXCEEDED: "this would go over budget",
    ErrorCode.EVIDENCE_REQUIRED: "Evidence is required for every acceptance criterion",
    ErrorCode.NOT_FOUND: "it does not exist (any more)",
    ErrorCode.CURSOR_TOO_OLD: "this history is no longer online; reload",
    ErrorCode.ARTIFACT_HASH_MISMATCH: "a stored file no longer matches its fingerprint; do not trust it",
    ErrorCode.OFFLINE_BINDING_INVALID: "work recorded while offline could not be reconciled",
    ErrorCode.RATE_LIMITED: "too many requests for now; wait a moment and try again",
    ErrorCode.BACKPRESSURE: "the server is busy; wait a moment and try again",
    ErrorCode.INTERNAL_ERROR: "the server failed and changed nothing; try again",
}


def explain(error: ProtocolError) -> str:
    """``"REVISION_MISMATCH: someone changed this item; reload (expected revision 3, …)"``."""
    words = PLAIN_WORDS.get(error.code, "the request was refused")
    return f"{error.code}: {words} ({error.message})"
