"""The lexical values of MWP 0.1 (PROTOCOL §2): identifiers, timestamps, base64url, hashes.

Each check consumes the whole string and never normalizes: a value is either
spelled exactly as §2 allows or refused. The JSON Schema ``format`` assertions
(``uri``, ``date-time``) of :mod:`mwportal.protocol.schemas` call these.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

__all__ = [
    "Timestamp",
    "TimestampError",
    "b64url_decode",
    "b64url_encode",
    "is_absolute_uri",
    "is_sha256",
    "is_timestamp",
    "parse_timestamp",
]

# --- identifiers: RFC 3986 section 3 "URI" (scheme ":" hier-part ["?" query] ["#" fragment]) -----
# Written out from the RFC's ABNF.  Every class is ASCII, so a non-ASCII letter
# (an IRI-only spelling) or any whitespace or control character fails to match;
# re.fullmatch (never "$", which also matches before a final "\n") consumes
# the whole string.
#
# pct-encoded ("%" HEXDIG HEXDIG) is checked once for the whole string
# (_BAD_ESCAPE); the grammar below then admits "%" as a character wherever
# pct-encoded may occur.  That is equivalent: the two hex digits after a "%"
# are unreserved characters, allowed wherever "%" is, and the places that
# admit no escape (scheme, port, IP literals) do not admit "%" either.  It
# keeps the expression to character classes, which is what makes it fast.
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_UNRESERVED = r"A-Za-z0-9._~\-"
_SUB_DELIMS = r"!$&'()*+,;="
_PCHAR = rf"[{_UNRESERVED}{_SUB_DELIMS}:@%]"
_H16 = r"[0-9A-Fa-f]{1,4}"
_DEC_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
_IPV4 = rf"{_DEC_OCTET}\.{_DEC_OCTET}\.{_DEC_OCTET}\.{_DEC_OCTET}"
_LS32 = rf"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6 = (
    "(?:"
    + "|".join(
        [
            rf"(?:{_H16}:){{6}}{_LS32}",
            rf"::(?:{_H16}:){{5}}{_LS32}",
            rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
            rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
            rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
            rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
            rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
            rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
            rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
        ]
    )
    + ")"
)
_IPVFUTURE = rf"v[0-9A-Fa-f]+\.[{_UNRESERVED}{_SUB_DELIMS}:]+"
_IP_LITERAL = rf"\[(?:{_IPV6}|{_IPVFUTURE})\]"
# IPv4address is a special case of reg-name, so the reg-name alternative covers it.
_REG_NAME = rf"[{_UNRESERVED}{_SUB_DELIMS}%]*"
_USERINFO = rf"[{_UNRESERVED}{_SUB_DELIMS}:%]*"
_AUTHORITY = rf"(?:{_USERINFO}@)?(?:{_IP_LITERAL}|{_REG_NAME})(?::[0-9]*)?"
# Without an authority, path-absolute / path-rootless / path-empty together are
# "any pchars and slashes, not starting with //" (only the first segment of
# path-absolute must be non-empty, and that is what excludes a leading "//").
_HIER_PART = rf"(?://{_AUTHORITY}(?:/{_PCHAR}*)*|(?!//)[{_UNRESERVED}{_SUB_DELIMS}:@%/]*)"
_QUERY = rf"[{_UNRESERVED}{_SUB_DELIMS}:@%/?]*"
_URI = re.compile(rf"[A-Za-z][A-Za-z0-9+.-]*:{_HIER_PART}(?:\?{_QUERY})?(?:#{_QUERY})?")


def is_absolute_uri(s: Any) -> bool:
    """§2: an absolute RFC 3986 URI, ASCII only, the whole string, no normalization."""
    return (
        isinstance(s, str)
        and s.isascii()
        and _URI.fullmatch(s) is not None
        and ("%" not in s or _BAD_ESCAPE.search(s) is None)
    )


# --- timestamps: RFC 3339 date-time under the §2 profile ------------------------------------
# [0-9], never \d: \d also matches non-ASCII digits.  T and Z are case-insensitive
# (RFC 3339 section 5.6 note); the range checks below are done on the numbers.
_TIMESTAMP = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]+))?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))"
)
_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class TimestampError(ValueError):
    """A text that is not a §2 timestamp."""


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


@dataclass(frozen=True, order=True)
class Timestamp:
    """A §2 timestamp: the exact text as it was serialized, and its exact instant.

    Equality, hashing and ordering use ``instant`` only, so ``...00.10Z`` equals
    ``...00.1Z`` while each keeps its own ``text`` (which is what gets hashed
    and signed, never a re-serialization).  ``instant`` is ``(whole UTC seconds
    since 1970-01-01, fraction of a second)``: exact, every digit counts.
    """

    text: str = field(compare=False)
    instant: tuple[int, Fraction] = field(repr=False)

    @property
    def is_utc_z(self) -> bool:
        """The text ends in the uppercase ``Z`` that §6.4 requires of protected times."""
        return self.text.endswith("Z")

    @property
    def epoch_seconds(self) -> int:
        return self.instant[0]


def _check_timestamp(text: Any) -> tuple[int, str | None]:
    """The UTC seconds and fraction digits of a §2 timestamp, or :class:`TimestampError`."""
    if not isinstance(text, str):
        raise TimestampError("a timestamp is a string")
    m = _TIMESTAMP.fullmatch(text)
    if m is None:
        raise TimestampError("not an RFC 3339 date-time")
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    digits, zulu, sign, off_hour, off_minute = m.group(7, 8, 9, 10, 11)
    if not 1 <= year <= 9999:
        raise TimestampError("the year is outside 0001-9999")
    if not 1 <= month <= 12:
        raise TimestampError("the month is outside 01-12")
    last_day = 29 if month == 2 and _is_leap(year) else _DAYS_IN_MONTH[month - 1]
    if not 1 <= day <= last_day:
        raise TimestampError("no such day in that month")
    if hour > 23 or minute > 59:
        raise TimestampError("the time of day is out of range")
    if second > 59:
        raise TimestampError("leap seconds are not supported in v0.1")
    offset = 0
    if zulu is None:
        oh, om = int(off_hour), int(off_minute)
        if oh > 23 or om > 59:
            raise TimestampError("the offset is out of range")
        if sign == "-" and oh == 0 and om == 0:
            raise TimestampError("the unknown-local-offset spelling -00:00 is not permitted")
        offset = (oh * 60 + om) * 60 * (1 if sign == "+" else -1)
    return _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second - offset, digits


def parse_timestamp(text: Any) -> Timestamp:
    """The §2 profile, or :class:`TimestampError` naming what is wrong."""
    seconds, digits = _check_timestamp(text)
    fraction = Fraction(int(digits), 10 ** len(digits)) if digits else Fraction(0)
    return Timestamp(text, (seconds, fraction))


# The same profile with the fixed ranges in the expression, so that the common
# case costs one match: the schemas' date-time format calls is_timestamp for
# every timestamp of every document.  Left to code: year 0000, the length of
# the month (only days 29-31 need it), and -00:00.  tests/protocol/test_values.py
# proves it equal to parse_timestamp.
_FAST_TIMESTAMP = re.compile(
    r"([0-9]{4})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    r"(?:\.[0-9]+)?(?:[Zz]|([+-])(?:[01][0-9]|2[0-3]):[0-5][0-9])"
)


def is_timestamp(text: Any) -> bool:
    if not isinstance(text, str):
        return False
    m = _FAST_TIMESTAMP.fullmatch(text)
    if m is None or m[1] == "0000":
        return False
    if m[3] > "28":
        year, month, day = int(m[1]), int(m[2]), int(m[3])
        if day > (29 if month == 2 and _is_leap(year) else _DAYS_IN_MONTH[month - 1]):
            return False
    return not (m[4] == "-" and text.endswith("00:00"))


# --- base64url: RFC 4648 section 5, unpadded, zero pad bits ---------------------------------
_B64URL = re.compile(r"[A-Za-z0-9_-]*")
_B64URL_VALUE = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")}


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: Any) -> bytes:
    """Decode the one canonical spelling; ``ValueError`` for any other (§2).

    Refused: padding, the standard alphabet's ``+``/``/``, whitespace, a length
    that no byte string encodes to (``len % 4 == 1``) and nonzero unused bits
    in the last character, which would let two texts decode to the same bytes.
    """
    if not isinstance(text, str) or _B64URL.fullmatch(text) is None:
        raise ValueError("expected unpadded base64url text")
    rest = len(text) % 4
    if rest == 1:
        raise ValueError("no byte string has a base64url text of this length")
    # The last character of a 2- or 3-character group carries 4 or 2 unused bits.
    if rest and _B64URL_VALUE[text[-1]] & (0x0F if rest == 2 else 0x03):
        raise ValueError("not the canonical base64url spelling (nonzero unused bits)")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-rest % 4))
    except (binascii.Error, ValueError) as exc:  # pragma: no cover - the checks above leave none
        raise ValueError(f"not base64url: {exc}") from exc


# --- content hashes ------------------------------------------------------------------------
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")


def is_sha256(text: Any) -> bool:
    """§2: ``sha256:`` and 64 lower-case hex digits, nothing else."""
    return isinstance(text, str) and _SHA256.fullmatch(text) is not None
