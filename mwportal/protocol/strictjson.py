"""Strict JSON: MWP 0.1 §6.4 stage 1 ("parse"), §2 and §17.4.

``parse(data)`` accepts exactly one JSON value (RFC 8259), encoded as UTF-8,
with optional JSON whitespace around it, and refuses with
``StrictJSONError``: bytes that are not UTF-8 (overlong forms and encoded
surrogates included), a leading byte-order mark, anything after the value,
anything the grammar refuses (``NaN``/``Infinity`` too), and an object with
two members of the same name — the same name *after* escapes are decoded,
so ``{"a":1,"\\u0061":2}`` is refused.

It deliberately refuses nothing the grammar allows: a number beyond binary64
(``1e400``) parses as an infinity, a long integer as a Python ``int`` (up to
4300 digits; a longer one as an infinity too, see ``_long_int``), an
unpaired surrogate escape as a lone surrogate in the ``str``. Those are
outside the I-JSON data model, which is stage 5's question (``jcs``), so the
verifier can classify them there.

Built on the stdlib's C scanner (hooks for duplicates and the non-finite
literals) rather than a Python parser: this runs on every signed document.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["StrictJSONError", "parse", "parse_text"]


class StrictJSONError(ValueError):
    """The bytes are not exactly one strict JSON value.

    ``reason`` is one of ``invalid-utf8``, ``byte-order-mark``,
    ``trailing-data``, ``duplicate-member``, ``non-finite-literal``,
    ``invalid-json``, ``too-deep``; ``position`` the character offset (the
    byte offset for ``invalid-utf8``) when known.
    """

    def __init__(self, reason: str, message: str, position: int | None = None) -> None:
        super().__init__(message if position is None else f"{message} (at {position})")
        self.reason = reason
        self.position = position


def _members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise StrictJSONError("duplicate-member", f"duplicate member name {json.dumps(name)}")
            seen.add(name)
    return obj


def _non_finite(literal: str) -> Any:
    raise StrictJSONError("non-finite-literal", f"{literal} is not JSON")


def _long_int(text: str) -> int | float:
    """An integer literal longer than ``int()`` reads (``sys.int_info``'s
    default limit, 4300 digits) becomes a signed infinity, as a float literal
    beyond binary64 does: it is far outside binary64 either way, so stage 5
    refuses it just the same, and converting it exactly would cost time
    quadratic in its length (half a minute for a megabyte of digits)."""
    try:
        return int(text)
    except ValueError:
        return -math.inf if text.startswith("-") else math.inf


_DECODE = json.JSONDecoder(object_pairs_hook=_members, parse_constant=_non_finite).decode
# Only for documents holding an integer literal longer than int()'s limit.
_DECODE_LONG = json.JSONDecoder(object_pairs_hook=_members, parse_constant=_non_finite, parse_int=_long_int).decode


def parse(data: bytes | bytearray | memoryview) -> Any:
    """The one JSON value the UTF-8 ``data`` holds; ``StrictJSONError`` otherwise."""
    if type(data) is not bytes:
        data = bytes(data)
    try:
        text = data.decode("utf-8")  # strict: no overlongs, no encoded surrogates
    except UnicodeDecodeError as exc:
        raise StrictJSONError("invalid-utf8", f"not UTF-8: {exc.reason}", exc.start) from None
    return parse_text(text)  # a byte-order mark decodes to U+FEFF, refused there


def parse_text(text: str) -> Any:
    """``parse`` for text already decoded (a WebSocket text frame)."""
    if text.startswith("\ufeff"):
        raise StrictJSONError("byte-order-mark", "a byte-order mark is not allowed", 0)
    try:
        return _DECODE(text)
    except json.JSONDecodeError as exc:
        raise _grammar_error(exc) from None
    except RecursionError:
        raise StrictJSONError("too-deep", "nesting is deeper than the parser follows") from None
    except StrictJSONError:
        raise
    except ValueError:
        # int() refused a literal longer than its digit limit; it is valid JSON.
        pass
    try:
        return _DECODE_LONG(text)
    except json.JSONDecodeError as exc:
        raise _grammar_error(exc) from None
    except RecursionError:
        raise StrictJSONError("too-deep", "nesting is deeper than the parser follows") from None
    except StrictJSONError:
        raise
    except ValueError as exc:  # nothing else in the scanner raises it; never let it escape untyped
        raise StrictJSONError("invalid-json", f"not JSON: {exc}") from None


def _grammar_error(exc: json.JSONDecodeError) -> StrictJSONError:
    if exc.msg == "Extra data":
        return StrictJSONError("trailing-data", "data after the JSON value", exc.pos)
    return StrictJSONError("invalid-json", f"not JSON: {exc.msg}", exc.pos)
