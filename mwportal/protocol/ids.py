"""Identifiers on the wire (DESIGN §4): the portal mints UUIDs and writes them as ``urn:uuid:`` URIs.

The database keeps the bare UUID text; every identifier a document carries is
``urn:uuid:`` followed by the canonical lower-case 8-4-4-4-12 form. ``bare``
reads one back and refuses anything else with SCHEMA_VALIDATION_FAILED naming
the member, so an identifier the portal cannot store never reaches a query.
"""

from __future__ import annotations

import uuid
from typing import Any

from .errors import ErrorCode, ProtocolError

PREFIX = "urn:uuid:"
_LENGTH = len(PREFIX) + 36


def urn(value: str | uuid.UUID) -> str:
    """``urn:uuid:<uuid>`` for a UUID (object or text in any case)."""
    return PREFIX + (str(value) if isinstance(value, uuid.UUID) else str(uuid.UUID(value)))


def new_urn() -> str:
    return PREFIX + str(uuid.uuid4())


def is_portal_id(value: Any) -> bool:
    if not isinstance(value, str) or len(value) != _LENGTH or not value.startswith(PREFIX):
        return False
    try:
        return str(uuid.UUID(value[len(PREFIX) :])) == value[len(PREFIX) :]
    except ValueError:
        return False


def bare(value: Any, field: str) -> str:
    """The UUID text of a ``urn:uuid:`` identifier; SCHEMA_VALIDATION_FAILED otherwise."""
    if is_portal_id(value):
        return str(value)[len(PREFIX) :]
    raise ProtocolError(
        ErrorCode.SCHEMA_VALIDATION_FAILED,
        f"{field}: this Organization's identifiers are urn:uuid: URIs in lower case",
        details={"field": field, "reason": "not-urn-uuid"},
    )


def bare_or_none(value: Any, field: str) -> str | None:
    return None if value is None else bare(value, field)
