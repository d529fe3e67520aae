"""``check_*`` guards shared by handlers: body shape and simple values.

Each raises ``ProtocolError`` (SCHEMA_VALIDATION_FAILED naming the field, unless stated) and
returns the cleaned value. Handlers call them before deciding anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mwportal.protocol import ErrorCode, ProtocolError, malformed, parse_uuid


def check_members(body: dict[str, Any], required: Iterable[str], optional: Iterable[str] = ()) -> None:
    """``body`` has every ``required`` member and nothing beyond ``optional``."""
    check_object(body, required, optional, field="body")


def check_object(
    value: Any,
    required: Iterable[str],
    optional: Iterable[str] = (),
    *,
    field: str,
    unknown: str = "unknown member",
) -> dict[str, Any]:
    """``value`` is an object with every ``required`` member and nothing beyond
    ``optional``; SCHEMA_VALIDATION_FAILED names the first member that is not (``field.name``)."""
    if not isinstance(value, dict):
        raise malformed(field, "must be an object")
    required = tuple(required)
    allowed = set(required) | set(optional)
    for name in sorted(set(value) - allowed):
        raise malformed(f"{field}.{name}", unknown)
    for name in required:
        if name not in value:
            raise malformed(f"{field}.{name}", "is required")
    return value


def check_uuid(body: dict[str, Any], name: str) -> str:
    return parse_uuid(body.get(name), f"body.{name}")


def check_text(body: dict[str, Any], name: str, *, max_length: int = 10_000, allow_empty: bool = False) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise malformed(f"body.{name}", "must be a string")
    if not allow_empty and not value.strip():
        raise malformed(f"body.{name}", "must not be empty")
    if len(value) > max_length:
        raise malformed(f"body.{name}", f"must be at most {max_length} characters")
    return value


def check_int(body: dict[str, Any], name: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise malformed(f"body.{name}", "must be an integer")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise malformed(f"body.{name}", f"must be {bound}")
    return value


def check_roles(body: dict[str, Any], name: str, allowed: Iterable[str]) -> list[str]:
    """A non-empty list of distinct roles out of ``allowed``, returned sorted."""
    allowed = tuple(allowed)
    value = body.get(name)
    if not isinstance(value, list) or not value:
        raise malformed(f"body.{name}", f"must be a non-empty list of {', '.join(allowed)}")
    for role in value:
        if role not in allowed:
            raise malformed(f"body.{name}", f"{role!r} is not one of {', '.join(allowed)}")
    if len(set(value)) != len(value):
        raise malformed(f"body.{name}", "lists a role twice")
    return sorted(value)


def refuse(code: ErrorCode, message: str, **details: Any) -> ProtocolError:
    """A ``ProtocolError`` for ``raise refuse(...)`` in handlers."""
    return ProtocolError(code, message, details=details)
