"""One mapping from protocol error codes to plain words for people (issue 7).

Portal pages and admin actions show a refused Command with ``explain()``: the
sentence a person can act on first, then the ``message`` of the normative
error document (``error.schema.json``) the Authority answered with. A
``details.reason`` (the finer meaning a core code covers, errors.py) has
words of its own where it says more than the code.
"""

from __future__ import annotations

from mwportal.protocol import ErrorCode, ProtocolError

PLAIN_WORDS: dict[ErrorCode, str] = {
    ErrorCode.UNSUPPORTED_VERSION: "this client speaks a protocol version the portal does not",
    ErrorCode.AUTH_REQUIRED: "you are not signed in; sign in first",
    ErrorCode.AUTH_INVALID_SIGNATURE: "your sign-in could not be verified; sign in again",
    ErrorCode.AUTH_STALE_SESSION: "your session has ended; sign in again",
    ErrorCode.AUTH_STALE_COORDINATOR: "the Coordinator has changed since this page was loaded; reload",
    ErrorCode.AUTH_FORBIDDEN: "your role does not allow this",
    ErrorCode.GROUP_NOT_FOUND: "it does not exist (any more), or you may not see it",
    ErrorCode.MEMBERSHIP_REQUIRED: "you are not a member of this Mission",
    ErrorCode.MEMBERSHIP_STALE: "your membership has changed since this page was loaded; reload",
    ErrorCode.SCHEMA_VALIDATION_FAILED: "something in the form is not valid",
    ErrorCode.INVALID_COMMAND: "this request does not make sense here",
    ErrorCode.INVALID_STATE_TRANSITION: "this is not possible in the item's current state; reload to see where it is",
    ErrorCode.REVISION_CONFLICT: "someone changed this item; reload",
    ErrorCode.ACTION_ID_COLLISION: "this action was already sent with different content; reload and try again",
    ErrorCode.UNKNOWN_CRITICAL_EXTENSION: "the request needs a feature the portal does not have",
    ErrorCode.WORK_CONTRACT_INCOMPLETE: "the Work Contract is missing something it needs",
    ErrorCode.WORK_OFFER_EXPIRED: "the offer has expired",
    ErrorCode.WORK_ALREADY_OWNED: "someone else has already taken this work",
    ErrorCode.WORK_LEASE_EXPIRED: "the work session this refers to has expired",
    ErrorCode.WORK_STALE_OWNERSHIP: "the item has changed hands since this page was loaded; reload",
    ErrorCode.APPROVAL_REQUIRED: "this needs an execution Approval first",
    ErrorCode.BUDGET_EXCEEDED: "this would go over budget",
    ErrorCode.RATE_LIMITED: "too many requests for now; wait a moment and try again",
    ErrorCode.BACKPRESSURE: "the server is busy; wait a moment and try again",
    ErrorCode.CURSOR_TOO_OLD: "this history is no longer online; reload",
    ErrorCode.PROTOCOL_VIOLATION: "the portal could not read this request",
    ErrorCode.INTERNAL_ERROR: "the server failed and changed nothing; try again",
}

# The old private codes' meanings, now ``details.reason`` under a core code.
REASON_WORDS: dict[str, str] = {
    "contract_invalid": "the Work Contract is not valid",
    "dependency_cycle": "these dependencies would go round in a circle",
    "dependency_unmet": "the work this depends on is not finished yet",
    "evidence_required": "Evidence is required for every acceptance criterion",
    "not_found": "it does not exist (any more)",
    "artifact_hash_mismatch": "a file does not match its fingerprint; do not trust it",
    "offline_binding_invalid": "work recorded while offline could not be reconciled",
    "stale_lease": "the work session this refers to is no longer current; reload",
}


def explain(error: ProtocolError) -> str:
    """``"REVISION_CONFLICT: someone changed this item; reload (expected revision 3, …)"``:
    the error document's ``code``, plain words for it, and its ``message``."""
    document = error.document()
    details = document.get("details") or {}
    reason = details.get("reason")
    words = REASON_WORDS.get(reason) if isinstance(reason, str) else None
    words = words or PLAIN_WORDS.get(ErrorCode(document["code"]), "the request was refused")
    return f"{document['code']}: {words} ({document['message']})"
