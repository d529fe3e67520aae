"""The server's JSON: ``canonicalize`` and ``loads_strict`` over the kernel's one
canonicalizer (``jcs``, RFC 8785) and one strict parser (``strictjson``).

``canonicalize(value)`` is ``jcs.canonicalize`` raising this module's
``CanonicalizationError``, the exception the bindings, the Worker and the
Artifact store already catch, with one rule of the project's own dialect
(DESIGN v1) on top: an integer beyond 2**53 - 1 is refused rather than
rounded to its binary64 as RFC 8785 does (no value the server builds is that
large, and rounding it silently would sign a number other than the one
kept). ``signing_bytes`` likewise, over ``jcs.signing_bytes``.

``loads_strict(data)`` is ``strictjson`` (§6.4 stage 1: UTF-8, no byte-order
mark, no trailing data, no duplicate decoded member names) plus what the
server refuses on input for reasons of its own:

- the JCS data model at once (a number that overflows binary64, an
  unpaired surrogate), rather than at stage 5: the server stores and
  re-signs what it accepted, so it must have a canonical form;
- integers beyond 2**53 - 1 unless their text is their double's own RFC
  8785 spelling (what ``jcs`` writes for a large integral double, and what
  an ECMAScript peer sends), which is then read as that double: any other
  text would be read back as a different number;
- the NUL character (``\\u0000``) in any string or member name: JSON can
  carry it, but neither PostgreSQL's text columns nor its jsonb can store
  it, so a document holding one would be refused only at the database, on
  one backend and not the other (issue 16 item 6). The refusal names where
  the NUL is;
- nesting deeper than ``MAX_DEPTH``: no protocol document needs it, and it
  would let a request exhaust the recursion of any JSON walker.

Every binding (REST, WebSocket, the Worker's reader) parses with it, so a
refusal reads the same everywhere.
"""

from __future__ import annotations

import math
from json.encoder import encode_basestring_ascii as _encode_basestring_ascii
from typing import Any, NoReturn

from . import jcs, strictjson

MAX_SAFE_INTEGER = 2**53 - 1
MAX_DEPTH = 64

__all__ = ["MAX_DEPTH", "MAX_SAFE_INTEGER", "CanonicalizationError", "canonicalize", "loads_strict", "signing_bytes"]


class CanonicalizationError(ValueError):
    """The input is not strict JSON, or the value has no canonical form here.

    ``field`` is the JSON path of the offending member inside the parsed
    document (``body.title``, ``body.contract.criteria[0]``) when it is a
    member's text the server refuses (a NUL, an unpaired surrogate), else
    None; a binding names it in its answer. ``reason`` is the underlying
    ``strictjson``/``jcs`` reason, or ``nul``, ``unsafe-integer``,
    ``too-deep`` for the server's own refusals.
    """

    def __init__(self, message: str, field: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.field = field
        self.reason = reason


def canonicalize(value: Any) -> bytes:
    """The RFC 8785 canonical UTF-8 bytes of a JSON value (``jcs.canonicalize``),
    refusing integers beyond the safe range."""
    try:
        out = jcs.canonicalize(value)
    except jcs.DataModelError as exc:
        raise CanonicalizationError(str(exc), reason=exc.reason) from None
    _refuse_unsafe_integers(out, value)
    return out


def signing_bytes(document: dict[str, Any]) -> bytes:
    """What a signature covers: the canonical document without its top-level
    ``signature`` member (``jcs.signing_bytes``), under ``canonicalize``'s rule."""
    try:
        out = jcs.signing_bytes(document)
    except jcs.DataModelError as exc:
        raise CanonicalizationError(str(exc), reason=exc.reason) from None
    _refuse_unsafe_integers(out, document)
    return out


# An integer beyond 2**53 - 1 is written as 16 digits or more, or with an
# "e+" exponent (1e21 and over): with every digit mapped to "0", a run of 16
# zeros or an "e+" is the only way one can be in the bytes.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_SIXTEEN_DIGITS = b"0" * 16


def _refuse_unsafe_integers(out: bytes, value: Any) -> None:
    if b"e+" not in out and _SIXTEEN_DIGITS not in out.translate(_DIGITS_AS_ZERO):
        return
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > MAX_SAFE_INTEGER:
            raise CanonicalizationError(f"integer {item} is outside the safe range", reason="unsafe-integer")


def loads_strict(data: str | bytes) -> Any:
    """Parse untrusted JSON, refusing what canonicalisation could not preserve.

    Raises ``CanonicalizationError`` for everything ``strictjson.parse``
    refuses and for the server's own refusals listed in the module text.
    """
    try:
        text = _text(data)
        value = strictjson.parse_text(text)
    except strictjson.StrictJSONError as exc:
        raise CanonicalizationError(f"not valid JSON: {exc}", reason=exc.reason) from None
    # A NUL or a surrogate reaches a parsed string only through an escape
    # (raw NUL is no JSON; raw surrogates are no UTF-8 and reach only a str):
    # without one in the text, no string needs looking at.
    if "\\u0000" in text or "\\ud" in text or "\\uD" in text or (type(data) is str and _raw_surrogate(text)):
        _check_text(value)
    return _check_numbers(value)


def _text(data: str | bytes) -> str:
    if isinstance(data, str):
        return data
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        strictjson.parse(data)  # raises StrictJSONError, naming the fault
        raise


def _raw_surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _number(n: int | float) -> int | float:
    """``n`` as the server keeps it (a canonical large integer as its double),
    or CanonicalizationError."""
    if type(n) is float:
        if math.isinf(n):
            raise CanonicalizationError(f"number {n} overflows a double", reason="non-finite-number")
        return n
    if -MAX_SAFE_INTEGER <= n <= MAX_SAFE_INTEGER:
        return n
    try:
        as_double = float(n)
    except OverflowError:
        raise CanonicalizationError("an integer overflows a double", reason="unsafe-integer") from None
    if jcs.canonicalize(as_double) != str(n).encode("ascii"):
        raise CanonicalizationError(
            f"integer {n} is outside the safe range and would be rounded", reason="unsafe-integer"
        )
    return as_double


def _check_numbers(value: Any) -> Any:
    """Refuse nesting deeper than MAX_DEPTH and numbers the server does not
    keep, iteratively (no recursion limit to trip over); large integers in
    their double's spelling become that double, in place (the value is the
    parser's own)."""
    kind = type(value)
    if kind is int or kind is float:
        return _number(value)
    if kind is not dict and kind is not list:
        return value
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth >= MAX_DEPTH:
            raise CanonicalizationError(f"nesting is deeper than {MAX_DEPTH} levels", reason="too-deep")
        pairs = item.items() if type(item) is dict else enumerate(item)
        replaced = None
        for key, child in pairs:
            ckind = type(child)
            if ckind is str:
                continue
            if ckind is dict or ckind is list:
                stack.append((child, depth + 1))
            elif (ckind is int and not -MAX_SAFE_INTEGER <= child <= MAX_SAFE_INTEGER) or (
                ckind is float and math.isinf(child)
            ):
                replaced = replaced or []
                replaced.append((key, _number(child)))
        if replaced:
            for key, number in replaced:
                item[key] = number
    return value


def _bad_text(s: str) -> str | None:
    """Why ``s`` cannot be protocol text, or None when it can."""
    if "\x00" in s:
        return "holds a NUL character (\\u0000), which no text column can store"
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate, which is not Unicode text"
    return None


def _check_text(value: Any) -> None:
    """Refuse strings and member names that are not protocol text (NUL, lone
    surrogates), iteratively; the path is built only once something is wrong."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is str:
            if _bad_text(item) is not None:
                _refuse(value)
        elif type(item) is dict:
            for key, child in item.items():
                if _bad_text(key) is not None:
                    _refuse(value)
                stack.append(child)
        elif type(item) is list:
            stack.extend(item)


def _member_path(parent: str, key: str) -> str:
    """``parent.key`` for a name that reads as one, else ``parent["..."]``
    with the name JSON-escaped (so a NUL or a dot in it stays visible)."""
    if key.isidentifier() and key.isascii():
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{_encode_basestring_ascii(key)}]"


def _reason(problem: str) -> str:
    return "nul" if "NUL" in problem else "unpaired-surrogate"


def _refuse(value: Any) -> NoReturn:
    """Raise for the first bad string or member name of ``value``, naming its path.

    Called only once ``_check_text`` saw one, so the walk finds it; it is
    iterative too, and a path is at most ``MAX_DEPTH`` deep."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            problem = _bad_text(item)
            if problem is not None:
                where = path or "the document"
                raise CanonicalizationError(f"{where}: a string {problem}", path or None, _reason(problem))
        elif isinstance(item, dict):
            for key, child in item.items():
                problem = _bad_text(key)
                child_path = _member_path(path, key)
                if problem is not None:
                    raise CanonicalizationError(f"{child_path}: an object key {problem}", child_path, _reason(problem))
                stack.append((child, child_path))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(item))
    raise AssertionError("_refuse found nothing to refuse")
