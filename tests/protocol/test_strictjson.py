"""Strict JSON (MWP 0.1 §6.4 stage 1, §2, §17.4): ``mwportal.protocol.strictjson``.

Stage 1 refuses what is not exactly one UTF-8 JSON value; it does not refuse
values outside the I-JSON data model, which stage 5 classifies.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mwportal.protocol import jcs, strictjson
from mwportal.protocol.strictjson import StrictJSONError, parse, parse_text

from .bundle import bundle_root


def refused(data: bytes) -> str:
    with pytest.raises(StrictJSONError) as info:
        parse(data)
    return info.value.reason


# --- the refusals of stage 1 ---------------------------------------------------------


@pytest.mark.parametrize("data", [b'\xef\xbb\xbf{"a":1}', b"\xef\xbb\xbf1", b"\xef\xbb\xbf"])
def test_a_byte_order_mark_is_stage_1_PROTOCOL_6_4(data: bytes) -> None:
    assert refused(data) == "byte-order-mark"


def test_a_decoded_byte_order_mark_is_refused_by_parse_text() -> None:
    with pytest.raises(StrictJSONError) as info:
        parse_text('\ufeff{"a":1}')
    assert info.value.reason == "byte-order-mark"


@pytest.mark.parametrize("data", [b"1 2", b'{"a":1}{}', b"[]]", b'{"a":1} x', b"null\x00", b'"a""b"', b"0 ,"])
def test_trailing_data_is_stage_1_PROTOCOL_6_4(data: bytes) -> None:
    assert refused(data) == "trailing-data"


@pytest.mark.parametrize(
    "data",
    [
        b'"\xff"',
        b'{"a":"\xc3\x28"}',  # a lead byte without its continuation
        b'"\xc0\xaf"',  # overlong "/"
        b'"\xe0\x80\xaf"',  # overlong, three bytes
        b'["\xe2\x82"]',  # truncated sequence
        b'"\x80"',  # lone continuation byte
        b'"\xed\xa0\x80"',  # U+D800 encoded (CESU-8)
        b'"\xed\xbf\xbf"',  # U+DFFF encoded
        b'"\xf4\x90\x80\x80"',  # above U+10FFFF
        b'{"a":1}\xfe',
    ],
)
def test_invalid_utf8_is_stage_1_PROTOCOL_6_4(data: bytes) -> None:
    assert refused(data) == "invalid-utf8"


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16", "utf-32"])
def test_json_in_another_encoding_is_refused(encoding: str) -> None:
    assert refused('{"a":1}'.encode(encoding)) in {"invalid-utf8", "invalid-json"}


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":1,"a":2}',
        b'{"a":1,"\\u0061":2}',  # the same name once escaped
        b'{"\\u00e9":1,"\xc3\xa9":2}',  # an escaped and a literal e-acute
        b'{"\\ud83d\\ude00":1,"\xf0\x9f\x98\x80":2}',  # a surrogate pair escape and the literal character
        b'{"x":{"b":1,"b":1}}',
        b'[{"ok":1},{"k":0,"k":0}]',
        b'{"a":{},"a":{}}',
    ],
)
def test_a_duplicate_member_is_stage_1_after_escape_decoding_PROTOCOL_6_4(data: bytes) -> None:
    assert refused(data) == "duplicate-member"


def test_names_that_differ_only_after_escape_decoding_are_distinct() -> None:
    assert parse(b'{"a":1,"\\u0062":2,"A":3}') == {"a": 1, "b": 2, "A": 3}


@pytest.mark.parametrize("data", [b"NaN", b"Infinity", b"-Infinity", b'{"a":NaN}', b"[1,Infinity]"])
def test_nan_and_infinity_literals_are_not_json(data: bytes) -> None:
    assert refused(data) == "non-finite-literal"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b" \t\r\n",
        b"01",
        b"-01",
        b"+1",
        b".5",
        b"1.",
        b"1e",
        b"1e+",
        b"-",
        b"0x10",
        b"[1,]",
        b"[,1]",
        b'{"a":1,}',
        b"{'a':1}",
        b'{"a" 1}',
        b"{a:1}",
        b"[1 2]",
        b"[",
        b'"abc',
        b'"\t"',  # a raw control character in a string
        b'"\x00"',
        b'"\\x41"',  # not a JSON escape
        b'"\\u12"',
        b"tru",
        b"True",
        b"nul",
        b"// comment\n1",
        b"\x0b1",  # vertical tab is not JSON whitespace
        b"\xc2\xa01",  # nor is NO-BREAK SPACE
        b"\x0c1",  # nor form feed
    ],
)
def test_what_the_rfc8259_grammar_refuses_is_invalid_json(data: bytes) -> None:
    assert refused(data) in {"invalid-json", "trailing-data"}


def test_deep_nesting_is_refused_not_crashed() -> None:
    assert refused(b"[" * 100_000 + b"]" * 100_000) == "too-deep"


# --- what stage 1 lets through, for stage 5 ------------------------------------------


def test_a_number_beyond_binary64_becomes_an_infinity() -> None:
    value = parse(b'{"a":1e400,"b":-1e400,"c":1e-400}')
    assert value["a"] == math.inf
    assert value["b"] == -math.inf
    assert value["c"] == 0.0


def test_a_long_integer_literal_stays_an_exact_int() -> None:
    assert parse(b"123456789012345678901234567890") == 123456789012345678901234567890
    digits = "9" * 4300  # the longest int() reads by default
    assert parse(digits.encode()) == int(digits[:2000]) * 10**2300 + int(digits[2000:])


def test_an_integer_literal_longer_than_int_reads_is_an_infinity_in_linear_time() -> None:
    # Exact conversion is quadratic (half a minute for a megabyte); the value
    # is beyond binary64 anyway, so stage 5 refuses it as it refuses 1e400.
    started = time.monotonic()
    value = parse(b'{"a":[' + b"7" * 1_000_000 + b'],"b":-' + b"1" * 5000 + b"}")
    assert time.monotonic() - started < 5
    assert value == {"a": [math.inf], "b": -math.inf}
    with pytest.raises(jcs.DataModelError) as info:
        jcs.canonicalize(value)
    assert info.value.path == "/a/0"


def test_an_unpaired_surrogate_escape_stays_a_lone_surrogate() -> None:
    assert parse(b'"\\ud800"') == "\ud800"
    assert parse(b'{"\\udc00x":1}') == {"\udc00x": 1}


def test_a_surrogate_pair_escape_is_one_character() -> None:
    assert parse(b'"\\ud83d\\ude00"') == "\U0001f600"


@pytest.mark.parametrize(
    ("data", "value"),
    [
        (b" \t\r\n{} \t\r\n", {}),
        (b"1", 1),
        (b"-0", 0),
        (b"-0.0", -0.0),
        (b"1E2", 100.0),
        (b'"\\u0000"', "\x00"),
        (b'"\x7f"', "\x7f"),
        (b"[true,false,null]", [True, False, None]),
        (b'{"a":[{"b":{}}]}', {"a": [{"b": {}}]}),
    ],
)
def test_it_reads_any_one_json_value(data: bytes, value: Any) -> None:
    assert parse(data) == value
    assert type(parse(data)) is type(value)


def test_it_accepts_other_bytes_like_input() -> None:
    assert parse(bytearray(b"[1]")) == [1]
    assert parse(memoryview(b"[1]")) == [1]


# --- the bundle's stage-1 vectors ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("command-utf8-bom.json", "byte-order-mark"),
        ("command-trailing-data.json", "trailing-data"),
        ("command-invalid-utf8.bin", "invalid-utf8"),
        ("command-duplicate-decoded-member.json", "duplicate-member"),
    ],
)
def test_the_bundle_stage_1_vectors_are_refused(name: str, reason: str) -> None:
    root = bundle_root()
    assert refused((root / "cryptography" / "vectors" / "signed-documents" / "invalid" / name).read_bytes()) == reason


@pytest.mark.parametrize("name", ["command-number-1e400.json", "command-unpaired-surrogate.json"])
def test_the_bundle_stage_5_vectors_parse(name: str) -> None:
    root = bundle_root()
    assert isinstance(
        parse((root / "cryptography" / "vectors" / "signed-documents" / "invalid" / name).read_bytes()), dict
    )


# --- properties --------------------------------------------------------------------------

# Lone surrogates included: a conforming writer sends them as escapes.
text = st.text(alphabet=st.characters(exclude_categories=[]), max_size=10)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(text, children, max_size=5),
    max_leaves=30,
)


@given(json_values, st.booleans())
def test_it_reads_back_what_a_conforming_writer_wrote(value: Any, ascii_only: bool) -> None:
    try:
        data = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8")
    except UnicodeEncodeError:
        data = json.dumps(value).encode("ascii")  # a lone surrogate has no UTF-8 form, only an escape
    assert parse(data) == value


@given(st.dictionaries(st.text(min_size=1, max_size=6), st.integers(), min_size=1, max_size=5), st.data())
def test_any_name_written_twice_in_any_spelling_is_a_duplicate(obj: dict[str, int], data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(obj)))
    escaped = "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else c for c in name)
    body = ",".join(f"{json.dumps(k, ensure_ascii=False)}:{v}" for k, v in obj.items())
    document = f'{{{body},"{escaped}":0}}'.encode()
    assert refused(document) == "duplicate-member"


@given(json_values, st.sampled_from(["x", "1", "{}", "[]", '"s"', ",", "\x00", "\u00a0"]))
def test_anything_after_the_value_is_trailing_data(value: Any, tail: str) -> None:
    assert refused((json.dumps(value) + " " + tail).encode("utf-8")) == "trailing-data"


@given(st.binary(max_size=64))
def test_arbitrary_bytes_raise_nothing_but_strict_json_error(data: bytes) -> None:
    try:
        parse(data)
    except StrictJSONError as exc:
        assert exc.reason in {
            "invalid-utf8",
            "byte-order-mark",
            "trailing-data",
            "duplicate-member",
            "non-finite-literal",
            "invalid-json",
        }


def test_the_module_exports_the_agreed_interface() -> None:
    assert {"StrictJSONError", "parse"} <= set(strictjson.__all__)
    assert issubclass(StrictJSONError, ValueError)
