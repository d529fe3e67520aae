"""Small field helpers shared by the server and clients: UUID and time fields, the
idempotency key of an external operation, the Command size limit.

The Command document itself is ``command.py`` (PROTOCOL §15.1).
"""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import UTC, datetime
from typing import Any

from .errors import malformed

MAX_COMMAND_BYTES = 1024 * 1024
_RFC3339_Z = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z")


def parse_uuid(value: Any, name: str) -> str:
    """The canonical lower-case text of a UUID, or SCHEMA_VALIDATION_FAILED naming ``name``."""
    if not isinstance(value, str):
        raise malformed(name, "must be a UUID string")
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        raise malformed(name, f"{value[:64]!r} is not a UUID") from None
    if str(parsed) != value.lower() or len(value) != 36:
        raise malformed(name, "must be a UUID in its 8-4-4-4-12 form")
    return str(parsed)


def parse_time(value: Any, name: str) -> datetime:
    """An RFC 3339 UTC time ending in ``Z``."""
    if not isinstance(value, str) or not _RFC3339_Z.fullmatch(value):
        raise malformed(name, "must be an RFC 3339 UTC time ending in Z")
    text = value[:-1]
    if "." in text:  # Python parses at most microseconds
        head, frac = text.split(".")
        text = f"{head}.{frac[:6]:0<6}"
    try:
        return datetime.fromisoformat(text).replace(tzinfo=UTC)
    except ValueError:
        raise malformed(name, "is not a valid date and time") from None


def format_time(value: datetime) -> str:
    """RFC 3339 UTC with ``Z`` and microseconds: the one form the log uses."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def attempt_key(mission_id: str, workitem_id: str, ownership_epoch: int, operation_id: str) -> str:
    """The stable idempotency key of an external operation (spec 16; MWP-WRK-031).

    Built only from the Mission ID, the WorkItem ID, the Ownership Epoch and
    the logical operation ID, so every retry of the same operation under the same
    ownership sends the same key, and a new owner's attempt a different one.
    """
    material = "\x1f".join([mission_id, workitem_id, str(ownership_epoch), operation_id])
    return hashlib.sha256(material.encode("utf-8")).hexdigest()
