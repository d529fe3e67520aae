"""§2 lexical values: identifiers, the timestamp profile, canonical base64url, sha256 hashes.

The rows are the specification's (PROTOCOL §2 and the cryptography bundle's
timestamp-profile notes); the properties check the parsers against an
independent oracle (``datetime``, the standard library's base64).
"""

from __future__ import annotations

import base64
import re
import string
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mwportal.protocol.values import (
    Timestamp,
    TimestampError,
    b64url_decode,
    b64url_encode,
    is_absolute_uri,
    is_sha256,
    is_timestamp,
    parse_timestamp,
)

# --- identifiers (§2: absolute RFC 3986 URI, whole string, ASCII, no normalization) ----------

GOOD_URIS = [
    "urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66",
    "https://example.org/a/b?c=d#e",
    "mailto:someone@example.org",
    "urn:",  # empty hier-part: path-empty is a hier-part (the bundle's valid vector)
    "x:",
    "a+b.c-d:rest",
    "https://user:pw@[2001:db8::1]:8443/p",
    "https://[v7.fe80::a+b]/",
    "https://[::ffff:192.0.2.1]/",
    "https://192.0.2.1:/",
    "file:///etc/hosts",
    "urn:x:%C3%A9",  # non-ASCII percent-encoded as UTF-8, as §2 requires
    "tag:a,b;c=d!$&'()*+:@/?x#/?",
    "wss://example.org/mwp",
    "https://EXAMPLE.org/%7e",  # kept as written: no case or escape normalization
]

BAD_URIS = [
    "",
    "relative/path",  # a relative reference, not an absolute URI
    "/absolute-path",
    "//example.org/x",
    "1http://x",  # a scheme starts with a letter
    ":no-scheme",
    "urn:uuid:6e8bc430\n",  # trailing line feed (the bundle's invalid vector)
    "urn:x\r\n",
    "urn: x",
    "urn:x y",
    "urn:x\t",
    "urn:\x00",
    "urn:\x7f",
    "urn:caf\u00e9",  # IRI-only spelling
    "urn:x%",
    "urn:x%4",
    "urn:x%GG",
    "https://example.org/<x>",
    'urn:"q"',
    "urn:a\\b",
    "urn:{x}",
    "urn:x|y",
    "urn:x^y",
    "urn:x`",
    "https://[2001:db8::1/",  # unclosed IP-literal
    "https://[not-an-ip]/",
    "https://[1:2:3:4:5:6:7:8:9]/",
    "https://exa[mple.org/",
    "https://host:port/",
    "urn:x#a#b",  # "#" is not a fragment character
    "urn:x#[",
]


@pytest.mark.parametrize("uri", GOOD_URIS)
def test_it_accepts_absolute_uris_PROTOCOL_2(uri: str) -> None:
    assert is_absolute_uri(uri)


@pytest.mark.parametrize("uri", BAD_URIS)
def test_it_refuses_what_is_not_a_whole_absolute_ascii_uri_PROTOCOL_2(uri: str) -> None:
    assert not is_absolute_uri(uri)


@pytest.mark.parametrize("value", [None, 1, b"urn:x", ["urn:x"]])
def test_it_refuses_non_strings_as_uris(value: Any) -> None:
    assert not is_absolute_uri(value)


_PCHARS = string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@"
_segment = st.text(alphabet=_PCHARS, max_size=8) | st.sampled_from(["%00", "%7E", "%c3%A9"])
_scheme = st.from_regex(r"[A-Za-z][A-Za-z0-9+.-]{0,6}", fullmatch=True)


@st.composite
def _uris(draw: st.DrawFn) -> str:
    first = draw(_segment.filter(bool))
    rest = "".join("/" + seg for seg in draw(st.lists(_segment, max_size=4)))
    form = draw(st.sampled_from(["authority", "absolute", "rootless", "empty"]))
    hier = {
        "authority": "//" + draw(st.sampled_from(["", "host", "u:p@h.example:8080", "[::1]", "192.0.2.1"])) + rest,
        "absolute": "/" + (first + rest if draw(st.booleans()) else ""),
        "rootless": first + rest,
        "empty": "",
    }[form]
    uri = draw(_scheme) + ":" + hier
    for mark in "?#":
        part = draw(st.none() | st.text(alphabet=_PCHARS + "/?", max_size=8))
        if part is not None:
            uri += mark + part
    return uri


@given(_uris())
def test_it_accepts_uris_built_from_the_rfc_3986_grammar(uri: str) -> None:
    assert is_absolute_uri(uri), uri


@given(
    _uris(),
    st.integers(min_value=0),
    st.sampled_from(
        [" ", "\t", "\n", "\r", "\x00", "\x1f", "\x7f", "\u00e9", "\u2028", "\ufeff", "<", '"', "%g", "%z1", "%%"]
    ),
)
def test_it_refuses_any_uri_with_a_character_outside_the_grammar(uri: str, at: int, bad: str) -> None:
    at = at % (len(uri) + 1)
    assert not is_absolute_uri(uri[:at] + bad + uri[at:])


# The RFC 3986 ABNF transcribed literally (pct-encoded as an alternative in every
# production); values.py uses an equivalent, faster formulation and must agree.
_P = "%[0-9A-Fa-f]{2}"
_U = "A-Za-z0-9._~\\-"
_S = "!$&'()*+,;="
_PC = f"(?:[{_U}{_S}:@]|{_P})"
_H = "[0-9A-Fa-f]{1,4}"
_D = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
_V4 = f"{_D}\\.{_D}\\.{_D}\\.{_D}"
_L = f"(?:{_H}:{_H}|{_V4})"
_V6 = "|".join(
    [
        f"(?:{_H}:){{6}}{_L}",
        f"::(?:{_H}:){{5}}{_L}",
        f"(?:{_H})?::(?:{_H}:){{4}}{_L}",
        f"(?:(?:{_H}:){{0,1}}{_H})?::(?:{_H}:){{3}}{_L}",
        f"(?:(?:{_H}:){{0,2}}{_H})?::(?:{_H}:){{2}}{_L}",
        f"(?:(?:{_H}:){{0,3}}{_H})?::{_H}:{_L}",
        f"(?:(?:{_H}:){{0,4}}{_H})?::{_L}",
        f"(?:(?:{_H}:){{0,5}}{_H})?::{_H}",
        f"(?:(?:{_H}:){{0,6}}{_H})?::",
    ]
)
_AUTH = f"(?:(?:[{_U}{_S}:]|{_P})*@)?(?:\\[(?:{_V6}|v[0-9A-Fa-f]+\\.[{_U}{_S}:]+)\\]|(?:[{_U}{_S}]|{_P})*)(?::[0-9]*)?"
_HIER = f"(?://{_AUTH}(?:/{_PC}*)*|/(?:{_PC}+(?:/{_PC}*)*)?|{_PC}+(?:/{_PC}*)*|)"
_Q = f"(?:{_PC}|[/?])*"
_ABNF_URI = re.compile(f"[A-Za-z][A-Za-z0-9+.-]*:{_HIER}(?:\\?{_Q})?(?:#{_Q})?")

_uri_soup = st.text(alphabet="aZ09:/?#[]@%fF.-_~!$&'()*+,;=v \n\u00e9", max_size=24)


@given(st.sampled_from(["", "s:", "urn:x:", "h://", "h://[", "h://u@", "h://[::1]:"]), _uri_soup)
def test_it_agrees_with_the_rfc_3986_abnf_transcribed_literally(prefix: str, rest: str) -> None:
    candidate = prefix + rest
    assert is_absolute_uri(candidate) == (_ABNF_URI.fullmatch(candidate) is not None), candidate


@pytest.mark.parametrize("uri", GOOD_URIS + BAD_URIS)
def test_the_abnf_oracle_agrees_on_the_rows(uri: str) -> None:
    assert is_absolute_uri(uri) == (_ABNF_URI.fullmatch(uri) is not None)


# --- timestamps (§2 profile) -----------------------------------------------------------------

GOOD_TIMESTAMPS = [
    "2026-01-01T00:00:00Z",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "2026-01-01T00:00:00+23:59",
    "2026-01-01T00:00:00-23:59",
    "2026-01-01t00:00:00z",
    "2026-01-01t00:00:00Z",
    "2024-02-29T12:00:00Z",
    "2000-02-29T12:00:00Z",
    "2026-01-01T00:00:00.1Z",
    "2026-01-01T00:00:00.1000001Z",
    "2026-01-01T00:00:00.000000000000000000001Z",
    "2026-01-01T00:00:00+00:00",
    "2026-06-30T23:59:59.999999+05:30",
]

BAD_TIMESTAMPS = [
    "0000-01-01T00:00:00Z",  # year 0000
    "2026-12-31T23:59:60Z",  # leap second
    "2016-12-31T23:59:60Z",
    "2026-01-01T00:00:00-00:00",  # unknown local offset
    "2026-02-29T00:00:00Z",  # not a leap year
    "1900-02-29T00:00:00Z",  # divisible by 100, not by 400
    "2026-04-31T00:00:00Z",
    "2026-13-01T00:00:00Z",
    "2026-00-01T00:00:00Z",
    "2026-01-00T00:00:00Z",
    "2026-01-01T24:00:00Z",
    "2026-01-01T00:60:00Z",
    "2026-01-01T00:00:00+24:00",
    "2026-01-01T00:00:00+23:60",
    "2026-01-01T00:00:00",  # no offset
    "2026-01-01 00:00:00Z",  # space separator
    "2026-01-01T00:00:00.Z",  # empty fraction
    "2026-01-01T00:00Z",
    "2026-1-01T00:00:00Z",
    "10000-01-01T00:00:00Z",
    "2026-01-01T00:00:00Z\n",
    " 2026-01-01T00:00:00Z",
    "2026-01-01T00:00:00+0100",
    "2026-01-01T00:00:00\u0661Z",  # a non-ASCII digit
    "\u0662026-01-01T00:00:00Z",
    "",
]


@pytest.mark.parametrize("text", GOOD_TIMESTAMPS)
def test_it_accepts_the_timestamp_profile_PROTOCOL_2(text: str) -> None:
    ts = parse_timestamp(text)
    assert ts.text == text
    assert is_timestamp(text)


@pytest.mark.parametrize("text", BAD_TIMESTAMPS)
def test_it_refuses_what_the_timestamp_profile_excludes_PROTOCOL_2(text: str) -> None:
    with pytest.raises(TimestampError):
        parse_timestamp(text)
    assert not is_timestamp(text)


@pytest.mark.parametrize("value", [None, 20260101, b"2026-01-01T00:00:00Z"])
def test_it_refuses_non_strings_as_timestamps(value: Any) -> None:
    with pytest.raises(TimestampError):
        parse_timestamp(value)


def test_fraction_digits_beyond_the_sixth_decide_the_order_PROTOCOL_2() -> None:
    assert parse_timestamp("2026-01-01T00:00:00.1000001Z") > parse_timestamp("2026-01-01T00:00:00.1Z")
    assert parse_timestamp("2026-01-01T00:00:00.0999999999Z") < parse_timestamp("2026-01-01T00:00:00.1Z")


def test_trailing_zero_digits_are_the_same_instant_but_keep_their_text_PROTOCOL_2() -> None:
    a, b, c = (
        parse_timestamp(t)
        for t in ("2026-01-01T00:00:00.10Z", "2026-01-01T00:00:00.1Z", "2026-01-01T00:00:00.100000000Z")
    )
    assert a == b == c
    assert hash(a) == hash(b)
    assert (a.text, b.text, c.text) == (
        "2026-01-01T00:00:00.10Z",
        "2026-01-01T00:00:00.1Z",
        "2026-01-01T00:00:00.100000000Z",
    )
    assert parse_timestamp("2026-01-01T00:00:00Z") == parse_timestamp("2026-01-01T00:00:00.000Z")


def test_offsets_compare_as_instants() -> None:
    assert parse_timestamp("2026-01-01T23:59:00+23:59") == parse_timestamp("2026-01-01T00:00:00Z")
    assert parse_timestamp("2026-01-01T00:00:00-23:59") == parse_timestamp("2026-01-01T23:59:00Z")
    assert parse_timestamp("2026-01-01t00:00:00z") == parse_timestamp("2026-01-01T00:00:00Z")
    assert parse_timestamp("1970-01-01T00:00:00Z").epoch_seconds == 0
    assert parse_timestamp("0001-01-01T00:00:00Z").epoch_seconds == -62135596800
    assert parse_timestamp("9999-12-31T23:59:59Z").epoch_seconds == 253402300799


def test_only_an_uppercase_z_is_utc_z_PROTOCOL_6_4() -> None:
    assert parse_timestamp("2026-01-01T00:00:00Z").is_utc_z
    assert parse_timestamp("2026-01-01t00:00:00Z").is_utc_z
    assert not parse_timestamp("2026-01-01T00:00:00z").is_utc_z
    assert not parse_timestamp("2026-01-01T00:00:00+00:00").is_utc_z


def test_a_timestamp_is_a_frozen_value() -> None:
    ts = parse_timestamp("2026-01-01T00:00:00Z")
    assert isinstance(ts, Timestamp)
    with pytest.raises(AttributeError):
        ts.text = "x"  # type: ignore[misc]
    assert sorted([parse_timestamp("2026-01-02T00:00:00Z"), ts])[0] is ts


_offsets = st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59)


@st.composite
def _stamped(draw: st.DrawFn) -> tuple[str, datetime]:
    minutes = draw(_offsets)
    tz = timezone(timedelta(minutes=minutes))
    naive = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30))  # noqa: DTZ001 - st.datetimes takes naive bounds
    moment = draw(naive)
    digits = draw(st.integers(min_value=0, max_value=6))
    micro = moment.microsecond // 10 ** (6 - digits) * 10 ** (6 - digits)
    moment = moment.replace(microsecond=micro, tzinfo=tz)
    m = moment  # strftime("%Y") does not zero-pad years below 1000
    text = (
        f"{m.year:04d}-{m.month:02d}-{m.day:02d}{draw(st.sampled_from('Tt'))}{m.hour:02d}:{m.minute:02d}:{m.second:02d}"
    )
    if digits:
        text += "." + f"{micro:06d}"[:digits] + "0" * draw(st.integers(min_value=0, max_value=3))
    if minutes == 0 and draw(st.booleans()):
        text += draw(st.sampled_from("Zz"))
    else:
        sign = "-" if minutes < 0 else "+"
        text += f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
    return text, moment


@given(_stamped(), _stamped())
def test_timestamp_order_agrees_with_datetime(a: tuple[str, datetime], b: tuple[str, datetime]) -> None:
    ta, tb = parse_timestamp(a[0]), parse_timestamp(b[0])
    assert ta.text == a[0]
    assert (ta < tb) == (a[1] < b[1])
    assert (ta == tb) == (a[1] == b[1])
    assert ta.epoch_seconds == int((a[1] - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(seconds=1))


_timestamp_soup = st.from_regex(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{0,3})?([Zz]|[+-][0-9]{2}:[0-9]{2})?\n?",
    fullmatch=True,
)


@given(_timestamp_soup | st.text(alphabet="0123456789-:.TtZz+ ", max_size=30))
def test_is_timestamp_agrees_with_parse_timestamp(text: str) -> None:
    try:
        parse_timestamp(text)
    except TimestampError:
        assert not is_timestamp(text)
    else:
        assert is_timestamp(text)


@pytest.mark.parametrize(
    "text", GOOD_TIMESTAMPS + BAD_TIMESTAMPS + ["2024-02-30T00:00:00Z", "2026-12-31T00:00:00-00:00"]
)
def test_is_timestamp_agrees_with_parse_timestamp_on_the_rows(text: str) -> None:
    assert is_timestamp(text) == (text in GOOD_TIMESTAMPS)


# --- base64url (§2: RFC 4648 §5, no padding, zero unused bits) -------------------------------


def test_b64url_rows_PROTOCOL_2() -> None:
    assert b64url_encode(b"") == ""
    assert b64url_encode(b"\xfb\xff") == "-_8"
    assert b64url_decode("-_8") == b"\xfb\xff"
    assert b64url_decode("AA") == b"\x00"
    for bad in ["AB", "AAB", "A", "AAAAA", "AA==", "AA=", "+/8", "-_8=", "A A", "AA\n", "\u00c0A", "AAA\x00"]:
        with pytest.raises(ValueError):
            b64url_decode(bad)
    with pytest.raises(ValueError):
        b64url_decode(b"AA")  # type: ignore[arg-type]


@given(st.binary(max_size=80))
def test_b64url_round_trips_and_matches_the_standard_library(data: bytes) -> None:
    text = b64url_encode(data)
    assert "=" not in text
    assert b64url_decode(text) == data
    assert base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)) == data


def _noncanonical(text: str, data: bytes, how: int, at: int) -> str:
    rest = len(text) % 4
    if how == 0:
        return text + "=" * (1 + at % 3)  # padding, needed or not
    if how == 1:  # the standard alphabet
        std = base64.b64encode(data).rstrip(b"=").decode()
        return std if std != text else text[: at % (len(text) + 1)] + "+/"[at % 2] + text[at % (len(text) + 1) :]
    if how == 2:  # whitespace anywhere
        i = at % (len(text) + 1)
        return text[:i] + " \t\r\n"[at % 4] + text[i:]
    if how == 3 and rest:  # nonzero unused bits in the last character
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        value = alphabet.index(text[-1]) | (1 << (at % (4 if rest == 2 else 2)))
        return text[:-1] + alphabet[value]
    return text + "A" * ((1 - rest) % 4 or 4)  # a length with len % 4 == 1


@given(st.binary(max_size=60), st.integers(min_value=0, max_value=4), st.integers(min_value=0, max_value=10**6))
def test_b64url_refuses_every_noncanonical_spelling_PROTOCOL_2(data: bytes, how: int, at: int) -> None:
    text = b64url_encode(data)
    bad = _noncanonical(text, data, how, at)
    assert bad != text
    with pytest.raises(ValueError):
        b64url_decode(bad)


# --- content hashes (§2) ---------------------------------------------------------------------


def test_sha256_rows_PROTOCOL_2() -> None:
    good = "sha256:" + "0123456789abcdef" * 4
    assert is_sha256(good)
    for bad in [
        good.upper(),
        "SHA256:" + good[7:],
        good[:-1],
        good + "0",
        good + "\n",
        "sha256:" + "A" * 64,
        "sha512:" + good[7:],
        good.replace("a", "g"),
        None,
        1,
    ]:
        assert not is_sha256(bad)
