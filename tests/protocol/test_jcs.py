"""RFC 8785 canonicalization (MWP 0.1 §6.4 stage 5): ``mwportal.protocol.jcs``.

The oracles are the bundle's canonicalization vectors (read from the bundle,
never copied), the rows of RFC 8785 Appendix B and §3.2.3 written out here,
and IEEE 754 rounding facts for integers beyond 2**53.
"""

from __future__ import annotations

import json
import math
import re
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mwportal.protocol import jcs, strictjson
from mwportal.protocol.jcs import DataModelError, canonicalize, sha256_hash, signing_bytes, signing_hash

from .bundle import bundle_root


def from_bits(hex_bits: str) -> float:
    value: float = struct.unpack(">d", bytes.fromhex(hex_bits))[0]
    return value


# --- the bundle's vectors ----------------------------------------------------


def _manifest() -> tuple[Path, dict[str, Any]]:
    root = bundle_root()
    manifest: dict[str, Any] = json.loads((root / "cryptography" / "manifest.json").read_bytes())
    return root, manifest


def _canonicalization_cases() -> list[dict[str, Any]]:
    _, manifest = _manifest()
    return [e for c in manifest["cases"] if c["kind"] == "canonicalization" for e in c["evaluations"]]


def _signing_cases() -> list[dict[str, Any]]:
    """Every evaluation that names the signing bytes of an unfaulted document."""
    _, manifest = _manifest()
    found = {}
    for case in manifest["cases"]:
        for evaluation in case["evaluations"]:
            verified = (evaluation.get("expect") or {}).get("verified")
            if verified and evaluation.get("fault") is None:
                found[evaluation["document"]] = verified
    return [{"document": d, **v} for d, v in sorted(found.items())]


def test_it_writes_the_bundle_rfc8785_section_3_2_2_vector_byte_for_byte() -> None:
    root, _ = _manifest()
    cases = _canonicalization_cases()
    assert cases, "the manifest names no canonicalization vector"
    for case in cases:
        value = strictjson.parse((root / case["input"]).read_bytes())
        expected = (root / case["expectedJcs"]).read_bytes()
        assert canonicalize(value) == expected, case["input"]
        assert sha256_hash(canonicalize(value)) == case["sha256"]


def test_it_gives_the_signing_bytes_and_hash_of_every_valid_bundle_document_PROTOCOL_6_4() -> None:
    root, _ = _manifest()
    cases = _signing_cases()
    # The nine profiles' documents plus the two alternate spellings.
    assert len(cases) >= 11
    for case in cases:
        document = strictjson.parse((root / case["document"]).read_bytes())
        assert signing_bytes(document) == (root / case["signingBytes"]).read_bytes(), case["document"]
        assert signing_hash(document) == case["signingHash"], case["document"]


@pytest.mark.parametrize(
    ("name", "reason", "path"),
    [
        ("command-number-1e400.json", "non-finite-number", "/extensions/{ext}/data/large"),
        ("command-unpaired-surrogate.json", "unpaired-surrogate", "/extensions/{ext}/data/unpairedSurrogate"),
    ],
)
def test_a_bundle_document_outside_i_json_parses_but_fails_at_stage_5(name: str, reason: str, path: str) -> None:
    root = bundle_root()
    data = (root / "cryptography" / "vectors" / "signed-documents" / "invalid" / name).read_bytes()
    document = strictjson.parse(data)  # stage 1 accepts it
    with pytest.raises(DataModelError) as info:
        signing_bytes(document)
    assert info.value.reason == reason
    assert info.value.path == path.format(ext="urn:missionweaveprotocol:extension:crypto-vector")


# --- RFC 8785 Appendix B: numbers -----------------------------------------------

APPENDIX_B = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "expected"), APPENDIX_B, ids=[b for b, _ in APPENDIX_B])
def test_it_writes_the_rfc8785_appendix_b_numbers(bits: str, expected: str) -> None:
    assert canonicalize(from_bits(bits)) == expected.encode("ascii")
    assert canonicalize([from_bits(bits)]) == f"[{expected}]".encode("ascii")


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
def test_it_refuses_the_appendix_b_non_finite_numbers(bits: str) -> None:
    with pytest.raises(DataModelError) as info:
        canonicalize({"a": [1, from_bits(bits)]})
    assert (info.value.reason, info.value.path) == ("non-finite-number", "/a/1")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # ECMAScript's layout boundaries: plain digits below 1e21, fixed
        # notation down to 1e-6, exponent (no padding, explicit +) outside.
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e16, "10000000000000000"),
        (1.5e16, "15000000000000000"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (1e-10, "1e-10"),
        (0.0001, "0.0001"),
        (1.0, "1"),
        (-1.5, "-1.5"),
        (123.0, "123"),
        (1e30, "1e+30"),
        (-0.0, "0"),
    ],
)
def test_it_lays_out_numbers_as_ecmascript_number_to_string(value: float, expected: str) -> None:
    assert canonicalize(value) == expected.encode("ascii")


# Integers are binary64 values in I-JSON: beyond 2**53 RFC 8785 writes the
# nearest double (ties to even), and one whose nearest double is infinite has
# no form. The expected texts follow from IEEE 754 rounding.
MAX_DOUBLE = 2**1024 - 2**971


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (2**53, "9007199254740992"),
        (-(2**53), "-9007199254740992"),
        (2**53 + 1, "9007199254740992"),  # tie, to even
        (2**53 + 3, "9007199254740996"),  # tie, to even (upwards)
        (2**53 + 5, "9007199254740996"),  # tie, to even (downwards)
        (2**68, "295147905179352830000"),
        (10**21, "1e+21"),
        (10**23, "1e+23"),
        (MAX_DOUBLE, "1.7976931348623157e+308"),
        (MAX_DOUBLE + 2**970 - 1, "1.7976931348623157e+308"),  # just below the halfway point
        (True, "true"),
        (False, "false"),
    ],
)
def test_it_writes_integers_as_their_correctly_rounded_binary64(value: int, expected: str) -> None:
    assert canonicalize(value) == expected.encode("ascii")


@pytest.mark.parametrize("value", [MAX_DOUBLE + 2**970, 2**1024, -(10**400)])
def test_it_refuses_integers_whose_binary64_is_infinite(value: int) -> None:
    with pytest.raises(DataModelError) as info:
        canonicalize({"n": value})
    assert (info.value.reason, info.value.path) == ("integer-overflow", "/n")


def _ecmascript(value: float) -> str:
    """Number::toString (ECMA-262 §6.1.6.1.20) transcribed step by step, over
    the shortest round-trip digits that Decimal reads from ``repr``."""
    if value == 0:
        return "0"
    if value < 0:
        return "-" + _ecmascript(-value)
    sign, digits_t, exponent = Decimal(repr(value)).normalize().as_tuple()
    s = "".join(map(str, digits_t))
    k = len(s)
    n = int(exponent) + k
    if k <= n <= 21:
        return s + "0" * (n - k)
    if 0 < n <= 21:
        return s[:n] + "." + s[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + s
    e = n - 1
    mark = "+" if e >= 0 else "-"
    return (s if k == 1 else s[0] + "." + s[1:]) + "e" + mark + str(abs(e))


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_float_round_trips_in_its_ecmascript_form(value: float) -> None:
    text = canonicalize(value).decode("ascii")
    assert float(text) == value
    assert text == _ecmascript(value)
    if value != 0:
        assert math.copysign(1.0, float(text)) == math.copysign(1.0, value)


@given(st.integers(min_value=-(2**1023), max_value=2**1023))
def test_every_integer_is_written_as_the_double_it_rounds_to(value: int) -> None:
    assert canonicalize(value) == canonicalize(float(value))
    assert float(canonicalize(value)) == float(value)


# --- RFC 8785 §3.2.3: member order by UTF-16 code units ------------------------


def test_it_sorts_members_by_utf16_code_units_as_rfc8785_3_2_3() -> None:
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    expected = (
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control",'
        '"\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign",'
        '"\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
    )
    assert canonicalize(value) == expected.encode("utf-8")


def test_a_supplementary_name_sorts_before_private_use_names() -> None:
    # U+1F600 is D83D DE00 in UTF-16, below U+E000, though its code point is above.
    assert (
        canonicalize({"\ue000": 1, "\U0001f600": 2, "\uffff": 3}) == '{"\U0001f600":2,"\ue000":1,"\uffff":3}'.encode()
    )


names = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=4)


@given(st.dictionaries(names, st.integers(0, 9), max_size=8))
def test_members_come_in_utf16_order_whatever_the_insertion_order(value: dict[str, int]) -> None:
    written = json.loads(canonicalize(value), object_pairs_hook=lambda pairs: [k for k, _ in pairs])
    assert written == sorted(value, key=lambda k: k.encode("utf-16-be"))
    assert canonicalize(dict(reversed(list(value.items())))) == canonicalize(value)


# --- RFC 8785 §3.2.2.2: strings -------------------------------------------------

SHORT = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


@pytest.mark.parametrize("code", range(0x20))
def test_it_escapes_control_characters_short_or_lowercase_u00xx(code: int) -> None:
    expected = SHORT.get(chr(code), f"\\u{code:04x}")
    assert canonicalize(chr(code)) == f'"{expected}"'.encode("ascii")


@pytest.mark.parametrize(
    "text", ["/", "\x7f", "\u0080", "\u2028", "\u2029", "\ufeff", "\U0001f680", "R\u00e9sum\u00e9"]
)
def test_it_writes_everything_else_literally_in_utf8(text: str) -> None:
    assert canonicalize(text) == b'"' + text.encode("utf-8") + b'"'


_RFC8785_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\["\\bfnrt]|\\u00(?:0[0-7bef]|1[0-9a-f]))*"')


@given(st.text(alphabet=st.characters(exclude_categories=["Cs"])))
def test_every_string_is_written_in_the_one_rfc8785_spelling(text: str) -> None:
    written = canonicalize(text).decode("utf-8")
    assert _RFC8785_STRING.fullmatch(written), written
    assert json.loads(written) == text


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ("\ud800", ""),
        ({"a": ["x", "b\udfffc"]}, "/a/1"),
        ({"ok": 1, "\udc00": 2}, "/\\udc00"),
        ({"a/b~c": "\ud83d"}, "/a~1b~0c"),
    ],
    ids=["top", "nested", "member-name", "pointer-escaping"],
)
def test_it_refuses_unpaired_surrogates_anywhere_naming_the_pointer(value: Any, path: str) -> None:
    with pytest.raises(DataModelError) as info:
        canonicalize(value)
    assert (info.value.reason, info.value.path) == ("unpaired-surrogate", path)


# --- types ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({1: "a"}, "member-name-not-string"),
        ({None: 1}, "member-name-not-string"),
        ({"a": {1.5, 2.5}}, "unsupported-type"),
        (b"bytes", "unsupported-type"),
        (object(), "unsupported-type"),
        (Decimal("1.5"), "unsupported-type"),
        (1j, "unsupported-type"),
    ],
)
def test_it_refuses_values_with_no_json_form(value: Any, reason: str) -> None:
    with pytest.raises(DataModelError) as info:
        canonicalize(value)
    assert info.value.reason == reason


def test_it_writes_literals_without_whitespace_and_tuples_as_arrays() -> None:
    assert canonicalize([None, True, False, [], {}, "", (1, "a")]) == b'[null,true,false,[],{},"",[1,"a"]]'


def test_subclasses_of_json_types_stand_for_their_base_type() -> None:
    from collections import OrderedDict
    from enum import IntEnum, StrEnum

    class Kind(StrEnum):
        A = "a"

    class Level(IntEnum):
        TWO = 2

    assert canonicalize(OrderedDict([("z", Kind.A), ("y", Level.TWO)])) == b'{"y":2,"z":"a"}'


def test_deep_nesting_is_refused_not_crashed() -> None:
    value: Any = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(DataModelError) as info:
        canonicalize(value)
    assert info.value.reason == "too-deep"


# --- hashes and signing bytes (§2, §6.4) -----------------------------------------


def test_sha256_hash_is_the_prefixed_lower_hex_digest() -> None:
    # FIPS 180-2 example "abc".
    assert sha256_hash(b"abc") == "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_signing_bytes_omit_exactly_the_top_level_signature_PROTOCOL_6_4() -> None:
    document = {
        "b": 1,
        "signature": {"value": "x"},
        "payload": {"signature": "kept"},
        "ext": [{"signature": 2}],
        "Signature": "kept too",
    }
    expected = b'{"Signature":"kept too","b":1,"ext":[{"signature":2}],"payload":{"signature":"kept"}}'
    assert signing_bytes(document) == expected
    assert signing_hash(document) == sha256_hash(expected)
    assert "signature" in document  # the caller's document is untouched


def test_signing_bytes_need_an_object() -> None:
    with pytest.raises(DataModelError) as info:
        signing_bytes([1, 2])  # type: ignore[arg-type]
    assert info.value.reason == "not-an-object"


# --- properties -------------------------------------------------------------------

text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(text, children, max_size=5),
    max_leaves=30,
)


@given(json_values)
def test_canonical_bytes_are_a_fixed_point_of_parse_then_canonicalize(value: Any) -> None:
    once = canonicalize(value)
    assert canonicalize(strictjson.parse(once)) == once


@given(json_values)
def test_canonical_bytes_mean_the_same_json_as_the_value(value: Any) -> None:
    # Numbers compared as doubles: RFC 8785 writes integers as binary64 values.
    assert json.loads(canonicalize(value), parse_int=float) == json.loads(json.dumps(value), parse_int=float)


def test_the_module_exports_the_agreed_interface() -> None:
    assert set(jcs.__all__) == {"DataModelError", "canonicalize", "sha256_hash", "signing_bytes", "signing_hash"}
