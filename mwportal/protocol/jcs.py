"""RFC 8785 JSON Canonicalization Scheme: the bytes every MWP signature and hash covers.

MWP 0.1 §6.4 stage 5 ("canonicalization") is this module: a value that
stage 1 (``strictjson``) parsed but that lies outside the I-JSON data model
— a number that overflowed binary64 (``1e400``), an integer whose binary64
is infinite, a string or member name holding an unpaired surrogate — has no
canonical form, and ``canonicalize`` refuses it with ``DataModelError``
naming the JSON Pointer (RFC 6901) of the offending value.

RFC 8785 in brief: no whitespace; members sorted by their names' UTF-16
code units (§3.2.3); strings with only ``"``, ``\\`` and U+0000-U+001F
escaped, the latter as ``\\b \\t \\n \\f \\r`` or lower-case ``\\u00xx``
(§3.2.2.2); numbers as ECMAScript's Number.prototype.toString writes the
binary64 value (§3.2.2.3), integers included — an integer literal beyond
2**53 is first rounded to the nearest binary64, as any I-JSON peer reads it.

One encoder, in Python over the stdlib's C string escaper (whose
``ensure_ascii=False`` output is exactly RFC 8785's string form). The
stdlib's C ``json.dumps(sort_keys=True)`` was measured as the alternative,
behind a walk proving its output RFC 8785 for the value (exact types, safe
integers, ``repr``-compatible floats, no supplementary-plane member names):
on a 1.7 KB Command the walk plus the C encoder took longer than this
encoder alone, and it cannot take the golden vector's floats or its
supplementary-plane member name at all.
"""

from __future__ import annotations

import codecs
import hashlib
import math
import re
from json.encoder import encode_basestring as _escape
from typing import Any

# Integers up to 2**53 in magnitude are exact binary64 values, and ECMAScript
# writes every integral value below 1e21 as plain digits: str() is their form.
_EXACT = 2**53
_astral = re.compile("[\U00010000-\U0010ffff]").search
_utf16_be = codecs.utf_16_be_encode

__all__ = ["DataModelError", "canonicalize", "sha256_hash", "signing_bytes", "signing_hash"]


class DataModelError(ValueError):
    """The value has no RFC 8785 form (§6.4 stage 5).

    ``reason`` is a short token (``non-finite-number``, ``integer-overflow``,
    ``unpaired-surrogate``, ``member-name-not-string``, ``unsupported-type``,
    ``too-deep``, ``not-an-object``); ``path`` the JSON Pointer of the value
    (``""`` for the whole document).
    """

    def __init__(self, reason: str, path: str, detail: str = "") -> None:
        where = path or "the document"
        super().__init__(f"{where}: {detail or reason}")
        self.reason = reason
        self.path = path


class _Refused(Exception):
    """Raised inside the encoder; the public error is built with its path afterwards."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


# --- numbers (RFC 8785 §3.2.2.3) ---------------------------------------------


def _number(value: float) -> str:
    """ECMAScript Number::toString of a finite binary64.

    ``repr`` gives the shortest digits that round-trip, which is the digit
    string ECMAScript requires; only the layout (where the point goes, when
    to use an exponent, how the exponent is written) differs.
    """
    if value != value or value in (math.inf, -math.inf):
        raise _Refused("non-finite-number")
    if value == 0:
        return "0"  # -0 too
    text = repr(value)
    if "e" not in text:
        # repr uses fixed notation for 1e-4 <= |x| < 1e16, as ECMAScript does
        # there; it only adds ".0" to integral values.
        return text[:-2] if text.endswith(".0") else text
    mantissa, _, exp = text.partition("e")
    sign = ""
    if mantissa[0] == "-":
        sign, mantissa = "-", mantissa[1:]
    digits = mantissa.replace(".", "")
    k = len(digits)
    n = int(exp) + 1  # value = 0.digits * 10**n
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    e = n - 1
    body = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{sign}{body}e{'+' if e >= 0 else '-'}{abs(e)}"


def _integer(value: int) -> str:
    if -_EXACT <= value <= _EXACT:
        return str(value)
    try:
        # int -> float is correctly rounded (half to even), as RFC 8785 needs.
        as_double = float(value)
    except OverflowError:
        raise _Refused("integer-overflow") from None
    return _number(as_double)


# --- the encoder -------------------------------------------------------------


def _utf16(name: str) -> bytes:
    return _utf16_be(name)[0]  # lone surrogates raise UnicodeEncodeError


def _sorted_names(obj: dict[Any, Any]) -> list[str]:
    names = list(obj)
    try:
        joined = "".join(names)  # TypeError unless every name is a str
    except TypeError:
        raise _Refused("member-name-not-string") from None
    if joined.isascii() or _astral(joined) is None:
        names.sort()  # BMP only: code-point order is UTF-16 code-unit order
    else:
        names.sort(key=_utf16)
    return names


def _encode(value: Any, out: Any) -> None:
    kind = type(value)
    if kind is str:
        out(_escape(value))
    elif kind is dict:
        _encode_object(value, out)
    elif kind is int:
        out(str(value) if -_EXACT <= value <= _EXACT else _integer(value))
    elif kind is list or kind is tuple:
        _encode_array(value, out)
    elif value is None:
        out("null")
    elif value is True:
        out("true")
    elif value is False:
        out("false")
    elif kind is float:
        out(_number(value))
    # Subclasses (a StrEnum, an IntEnum, an OrderedDict) stand for their base type.
    elif isinstance(value, str):
        out(_escape(value))
    elif isinstance(value, int):
        out(_integer(int(value)))
    elif isinstance(value, float):
        out(_number(float(value)))
    elif isinstance(value, dict):
        _encode_object(value, out)
    elif isinstance(value, list | tuple):
        _encode_array(value, out)
    else:
        raise _Refused("unsupported-type")


def _encode_object(obj: dict[str, Any], out: Any) -> None:
    separator = "{"
    for name in _sorted_names(obj):
        out(separator)
        separator = ","
        out(_escape(name))
        out(":")
        child = obj[name]
        if type(child) is str:
            out(_escape(child))
        else:
            _encode(child, out)
    out("{}" if separator == "{" else "}")


def _encode_array(items: list[Any] | tuple[Any, ...], out: Any) -> None:
    separator = "["
    for item in items:
        out(separator)
        separator = ","
        _encode(item, out)
    out("[]" if separator == "[" else "]")


# --- errors with their path --------------------------------------------------


def _pointer_token(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _scalar_problem(value: Any) -> str | None:
    if isinstance(value, str):
        return "unpaired-surrogate" if _has_surrogate(value) else None
    if value is None or isinstance(value, bool):
        return None
    try:
        if isinstance(value, int):
            _integer(int(value))
        elif isinstance(value, float):
            _number(float(value))
        else:
            return "unsupported-type"
    except _Refused as exc:
        return exc.reason
    return None


def _locate(value: Any) -> tuple[str, str] | None:
    """The reason and JSON Pointer of the first value without a canonical
    form, in canonical order; iterative, so any depth the parser built works."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            if not all(isinstance(name, str) for name in item):
                return "member-name-not-string", path
            for name in item:
                if _has_surrogate(name):
                    return (
                        "unpaired-surrogate",
                        f"{path}/{_pointer_token(name.encode('utf-8', 'backslashreplace').decode())}",
                    )
            names = sorted(item, key=_utf16)
            stack.extend((item[n], f"{path}/{_pointer_token(n)}") for n in reversed(names))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{path}/{i}") for i, child in reversed(list(enumerate(item))))
        else:
            problem = _scalar_problem(item)
            if problem is not None:
                return problem, path
    return None


_DETAILS = {
    "non-finite-number": "a number that is not finite (NaN, an infinity, or a literal beyond binary64)",
    "integer-overflow": "an integer beyond the binary64 range",
    "unpaired-surrogate": "a string holding an unpaired surrogate, which is not Unicode text",
    "member-name-not-string": "an object member name that is not a string",
    "unsupported-type": "a value that is not a JSON type",
    "too-deep": "nesting deeper than the encoder can follow",
}


def _refuse(value: Any, fallback: str) -> DataModelError:
    found = _locate(value) if fallback != "too-deep" else None
    reason, path = found if found is not None else (fallback, "")
    return DataModelError(reason, path, _DETAILS.get(reason, reason))


# --- the interface -----------------------------------------------------------


def canonicalize(value: Any) -> bytes:
    """The RFC 8785 canonical UTF-8 bytes of ``value``; ``DataModelError`` when it has none."""
    parts: list[str] = []
    try:
        _encode(value, parts.append)
        return "".join(parts).encode("utf-8")
    except _Refused as exc:
        raise _refuse(value, exc.reason) from None
    except UnicodeEncodeError:
        raise _refuse(value, "unpaired-surrogate") from None
    except RecursionError:
        raise _refuse(value, "too-deep") from None


def sha256_hash(data: bytes) -> str:
    """``sha256:`` and the 64 lower-case hex digits of SHA-256(data) (§2)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def signing_bytes(document: dict[str, Any]) -> bytes:
    """What a signature covers (§6.4): the canonical document without its
    top-level ``signature`` member. A ``signature`` member anywhere deeper
    (a payload's, an extension's) is signed content like any other."""
    if not isinstance(document, dict):
        raise DataModelError("not-an-object", "", "a signed document is a JSON object")
    return canonicalize({name: value for name, value in document.items() if name != "signature"})


def signing_hash(document: dict[str, Any]) -> str:
    """``sha256_hash(signing_bytes(document))``: the signing hash of §6.4."""
    return sha256_hash(signing_bytes(document))
