"""RFC 8785 JSON Canonicalization Scheme (JCS).

``canonicalize(value)`` returns the UTF-8 bytes that signatures, idempotency
hashes and the Group hash chain are computed over. Numbers follow the
ECMAScript ``Number.prototype.toString`` rules of RFC 8785 §3.2.2.3; object
members are sorted by their UTF-16 code units (§3.2.3). Integers outside the
IEEE 754 safe range cannot be represented exactly by every JSON peer, so they
are refused rather than silently rounded.

``loads_strict(text)`` is the matching parser for untrusted input: it refuses
duplicate member names, NaN/Infinity and unsafe integers, so that what was
signed is exactly what is canonicalised. It also refuses the NUL character
(``\u0000``) in any string or member name: JSON can carry it, but neither
PostgreSQL's text columns nor its jsonb can store it, so a document holding
one would be refused only at the database, as a server error, on one
backend and not the other (issue 16 item 6). Every binding (REST, WebSocket,
the Worker's reader) parses with this function, so the refusal is the same
400 MALFORMED everywhere, naming where the NUL is.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from json.encoder import encode_basestring as _encode_basestring
from json.encoder import encode_basestring_ascii as _encode_basestring_ascii
from typing import Any, NoReturn

MAX_SAFE_INTEGER = 2**53 - 1
# Deeper nesting is refused on input: no protocol document needs it, and it
# would let a request exhaust the recursion of any JSON walker.
MAX_DEPTH = 64


class CanonicalizationError(ValueError):
    """The value has no RFC 8785 form (NaN, infinity, unsafe integer, bad type).

    ``field`` is the JSON path of the offending member inside the parsed
    document (``body.title``, ``body.contract.criteria[0]``) when the parser
    can tell, else None; a binding names it in its MALFORMED answer.
    """

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


def _string(s: str) -> str:
    """A JSON string as RFC 8785 §3.2.2.2 writes it: ``"`` and ``\\`` escaped,
    control characters as the short escapes (\\b \\t \\n \\f \\r) or lower-case
    \\u00xx, everything else literal. CPython's C string encoder for
    ``ensure_ascii=False`` writes exactly that; lone surrogates pass it but
    fail the final UTF-8 encoding in ``canonicalize``."""
    return _encode_basestring(s)


def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _number(value: float) -> str:
    """ECMAScript Number-to-String for a finite double (RFC 8785 §3.2.2.3)."""
    if math.isnan(value) or math.isinf(value):
        raise CanonicalizationError("NaN and Infinity have no JSON form")
    if value == 0:
        return "0"  # also -0
    sign = "-" if value < 0 else ""
    # repr() gives the shortest round-tripping digits, as ECMAScript requires.
    parts = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, parts.digits))
    exponent = int(parts.exponent)
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped.lstrip("0")
    # value == digits * 10**exponent; n is where the decimal point falls.
    n = len(digits) + exponent
    k = len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    e = n - 1
    exp = f"e+{e}" if e >= 0 else f"e-{-e}"
    if k == 1:
        return sign + digits + exp
    return sign + digits[0] + "." + digits[1:] + exp


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be")


def _encode(value: Any, out: list[str]) -> None:
    # Exact-type checks first (the common case, and cheaper than isinstance):
    # bool is not int here, and subclasses take the isinstance path below.
    kind = type(value)
    if kind is str:
        out.append(_encode_basestring(value))
    elif kind is dict:
        keys = list(value)
        for key in keys:
            if type(key) is not str and not isinstance(key, str):
                raise CanonicalizationError(f"object key {key!r} is not a string")
        # RFC 8785 orders keys by UTF-16 code units; for ASCII keys (all of
        # the protocol's) that is plain string order.
        if all(map(str.isascii, keys)):
            keys.sort()
        else:
            keys.sort(key=_utf16)
        out.append("{")
        first = True
        for key in keys:
            if first:
                first = False
            else:
                out.append(",")
            out.append(_encode_basestring(key))
            out.append(":")
            _encode(value[key], out)
        out.append("}")
    elif kind is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            out.append(str(value))
        else:
            raise CanonicalizationError(f"integer {value} is outside the safe range")
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif kind is list or kind is tuple:
        out.append("[")
        first = True
        for item in value:
            if first:
                first = False
            else:
                out.append(",")
            _encode(item, out)
        out.append("]")
    elif isinstance(value, float):
        out.append(_number(value))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, int):
        _encode(int(value), out)
    elif isinstance(value, dict):
        _encode(dict(value), out)
    elif isinstance(value, list | tuple):
        _encode(list(value), out)
    else:
        raise CanonicalizationError(f"{type(value).__name__} is not a JSON value")


def canonicalize(value: Any) -> bytes:
    """The RFC 8785 canonical UTF-8 bytes of a JSON value."""
    out: list[str] = []
    try:
        _encode(value, out)
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (in a string, or in a key being sorted by UTF-16).
        raise CanonicalizationError("a string holds a lone surrogate, which is not Unicode text") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, val in pairs:
        if key in result:
            raise CanonicalizationError(f"duplicate member {key!r}")
        result[key] = val
    return result


def _no_constant(name: str) -> Any:
    raise CanonicalizationError(f"{name} is not valid JSON")


def _safe_int(text: str) -> int | float:
    value = int(text)
    if abs(value) <= MAX_SAFE_INTEGER:
        return value
    # Beyond 2**53 integer text is a double, accepted only when it is that
    # double's own canonical spelling (what canonicalize() writes for a large
    # integral float, and what an ECMAScript peer sends). Any other text would
    # be silently rounded to a different number.
    as_float = float(value)
    if math.isinf(as_float) or _number(as_float) != text.lstrip("+"):
        raise CanonicalizationError(f"integer {text} is outside the safe range and would be rounded")
    return as_float


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise CanonicalizationError(f"number {text} overflows a double")
    return value


def _bad_text(s: str) -> str | None:
    """Why ``s`` cannot be protocol text, or None when it can."""
    if "\x00" in s:
        return "holds a NUL character (\\u0000), which no text column can store"
    if _has_surrogate(s):
        return "holds a lone surrogate, which is not Unicode text"
    return None


def _member_path(parent: str, key: str) -> str:
    """``parent.key`` for a name that reads as one, else ``parent["..."]``
    with the name JSON-escaped (so a NUL or a dot in it stays visible)."""
    if key.isidentifier() and key.isascii():
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{_encode_basestring_ascii(key)}]"


def _check_depth_and_text(value: Any) -> None:
    """Refuse nesting deeper than MAX_DEPTH and strings or member names that
    are not protocol text (NUL, lone surrogates), iteratively (no recursion
    limit to trip over). The path is built only once something is wrong: the
    common case pays for no string building."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if "\x00" in item or _has_surrogate(item):
                _refuse_bad_text(value)
        elif isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                raise CanonicalizationError(f"nesting is deeper than {MAX_DEPTH} levels")
            if isinstance(item, dict):
                for key, child in item.items():
                    if "\x00" in key or _has_surrogate(key):
                        _refuse_bad_text(value)
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)


def _refuse_bad_text(value: Any) -> NoReturn:
    """Raise for the first bad string or member name of ``value``, naming its path.

    Called only once ``_check_depth_and_text`` saw one, so the walk finds it;
    it is iterative too, and a path is at most as deep as ``json.loads`` let
    the document be."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            problem = _bad_text(item)
            if problem is not None:
                where = path or "the document"
                raise CanonicalizationError(f"{where}: a string {problem}", path or None)
        elif isinstance(item, dict):
            for key, child in item.items():
                problem = _bad_text(key)
                child_path = _member_path(path, key)
                if problem is not None:
                    raise CanonicalizationError(f"{child_path}: an object key {problem}", child_path)
                stack.append((child, child_path))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(item))
    raise AssertionError("_refuse_bad_text found nothing to refuse")


def loads_strict(data: str | bytes) -> Any:
    """Parse untrusted JSON, refusing what canonicalisation could not preserve.

    Bytes must be UTF-8 (RFC 8259 §8.1); duplicate member names, NaN and
    Infinity, numbers that overflow or round, lone surrogates, NUL characters
    and nesting deeper than ``MAX_DEPTH`` are refused with
    ``CanonicalizationError`` (whose ``field`` names the member, when known).
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
            parse_int=_safe_int,
            parse_float=_finite_float,
        )
    except CanonicalizationError:
        raise
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise CanonicalizationError(f"not valid JSON: {exc}") from exc
    _check_depth_and_text(value)
    return value
