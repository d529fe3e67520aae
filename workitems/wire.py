"""Small pieces of the wire every WorkItem module shares: refusals and §2 timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.values import parse_timestamp


def refuse(code: ErrorCode, message: str, **details: Any) -> ProtocolError:
    """A normative refusal; ``details`` name the member (``field``) and the finer ``reason``."""
    return ProtocolError(code, message, details=details)


def when(moment: datetime) -> str:
    """RFC 3339 UTC with ``Z`` and microseconds (§2), the form the portal writes."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def moment(text: str) -> datetime:
    """A §2 timestamp (already schema-valid) as an aware datetime, to the microsecond."""
    seconds, fraction = parse_timestamp(text).instant
    return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=int(fraction * 1_000_000))
