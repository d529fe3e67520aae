"""MWP 0.1 Event documents (PROTOCOL §15.2): built and signed by the Group Authority, verified by readers.

A Group Event carries its Group position (``groupId``, ``sequence`` from 1,
``aggregateRevision``); the Organization-scoped kinds (Agent Card registration,
Session activation) carry none of the three. ``cause`` names the Command whose
acceptance appended it, ``commandHash`` that Command's signing hash, and
``acceptedBy`` the Group Authority service Principal whose key signs it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .command import PROTOCOL_VERSION, Key, format_timestamp
from .errors import ErrorCode, ProtocolError
from .registry import RegistryEvidence
from .schemas.signed import ORGANIZATION_EVENT_KINDS
from .verification import WIRE_MESSAGES, VerificationFailed, Verified, sign_document, verify_document, wire_error

ORGANIZATION_SCOPED = frozenset(ORGANIZATION_EVENT_KINDS)


def build_event(
    *,
    event_id: str,
    kind: str,
    actor: dict[str, str],
    cause: dict[str, str],
    correlation_id: str,
    occurred_at: datetime | str,
    payload: dict[str, Any],
    accepted_by: dict[str, str],
    key: Key,
    group_id: str | None = None,
    sequence: int | None = None,
    aggregate_revision: int | None = None,
    command_hash: str | None = None,
    work_item_id: str | None = None,
    conversation_id: str | None = None,
    extensions: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A signed Event document; identifiers are given as written on the wire (``urn:uuid:``)."""
    doc: dict[str, Any] = {
        "protocolVersion": PROTOCOL_VERSION,
        "eventId": event_id,
        "kind": kind,
        "actor": actor,
        "cause": cause,
        "correlationId": correlation_id,
        "occurredAt": occurred_at if isinstance(occurred_at, str) else format_timestamp(occurred_at),
        "payload": payload,
        "acceptedBy": accepted_by,
    }
    if kind in ORGANIZATION_SCOPED:
        if group_id is not None or sequence is not None or aggregate_revision is not None:
            raise ValueError(f"{kind} is Organization-scoped: no Group position (§15.2)")
    else:
        if group_id is None or sequence is None or aggregate_revision is None:
            raise ValueError(f"{kind} is a Group Event: it needs groupId, sequence and aggregateRevision (§15.2)")
        doc.update(groupId=group_id, sequence=sequence, aggregateRevision=aggregate_revision)
    optional = {
        "commandHash": command_hash,
        "workItemId": work_item_id,
        "conversationId": conversation_id,
        "extensions": extensions,
    }
    doc.update({name: value for name, value in optional.items() if value is not None})
    return sign_document(doc, key_id=key.key_id, seed=key.seed, profile="event")


def verify_event(data: bytes, registry: RegistryEvidence) -> Verified:
    """The six stages over an Event's bytes (profile ``event``: signed by the ``acceptedBy`` service).

    Raises ``ProtocolError`` with the failing stage's wire code and its generic
    message; the stage and reason went to the protected diagnostics.
    """
    try:
        verified = verify_document(data, "event", registry)
    except VerificationFailed as exc:
        raise wire_error(exc) from None
    if verified.principal.type != "service":
        raise ProtocolError(ErrorCode.AUTH_INVALID_SIGNATURE, WIRE_MESSAGES[ErrorCode.AUTH_INVALID_SIGNATURE])
    return verified
