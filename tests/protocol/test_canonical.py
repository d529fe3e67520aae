"""RFC 8785 (JCS) canonical JSON and the strict parser of untrusted input.

The vectors are the ones RFC 8785 publishes: Appendix B (number
serialisation), §3.2.3 (member sorting by UTF-16 code units) and the §3.2.2
example (literals, numbers, string escaping). No database, no event loop.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from mwportal.protocol import CanonicalizationError, canonicalize, jcs, loads_strict
from mwportal.protocol.canonical import MAX_SAFE_INTEGER, signing_bytes
from tests.protocol.test_jcs import APPENDIX_B, from_bits

# RFC 8785 Appendix B's number rows are written once, in test_jcs.py; the
# server's canonicalize must give the same spellings.


@pytest.mark.parametrize(("bits", "expected"), APPENDIX_B, ids=[b for b, _ in APPENDIX_B])
def test_it_serialises_the_rfc8785_appendix_b_numbers(bits: str, expected: str) -> None:
    assert canonicalize(from_bits(bits)) == expected.encode("ascii")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1e21, "1e+21"),
        (1e-7, "1e-7"),
        (0.000001, "0.000001"),
        (-0.0, "0"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (123456789012345680000.0, "123456789012345680000"),
        (1e30, "1e+30"),
        (4.50, "4.5"),
        (2e-3, "0.002"),
        (1e-27, "1e-27"),
        (333333333.33333329, "333333333.3333333"),
        (1.0, "1"),
        (-1.5, "-1.5"),
        (0, "0"),
        (-7, "-7"),
        (MAX_SAFE_INTEGER, "9007199254740991"),
        (-MAX_SAFE_INTEGER, "-9007199254740991"),
    ],
)
def test_it_serialises_numbers_like_ecmascript(value: float, expected: str) -> None:
    assert canonicalize(value) == expected.encode("ascii")


@pytest.mark.parametrize(
    "bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"], ids=["NaN", "Infinity", "-Infinity"]
)
def test_it_refuses_the_appendix_b_non_finite_numbers(bits: str) -> None:
    with pytest.raises(CanonicalizationError):
        canonicalize(from_bits(bits))


@pytest.mark.parametrize("value", [MAX_SAFE_INTEGER + 1, -(MAX_SAFE_INTEGER + 1), 2**64])
def test_it_refuses_integers_outside_the_safe_range(value: int) -> None:
    # The project dialect's rule over RFC 8785 (which would round them):
    # jcs.canonicalize writes them, canonical.canonicalize refuses them.
    assert jcs.canonicalize({"n": value})
    with pytest.raises(CanonicalizationError) as info:
        canonicalize({"n": value})
    assert info.value.reason == "unsafe-integer"
    with pytest.raises(CanonicalizationError):
        signing_bytes({"signature": "s", "payload": [value]})


@pytest.mark.parametrize("value", [1e20, 1e21, 2.0**60, "12345678901234567890", "1e+30"])
def test_it_still_writes_large_doubles_and_digit_strings(value: Any) -> None:
    assert canonicalize({"n": value}) == jcs.canonicalize({"n": value})


@pytest.mark.parametrize(
    "value",
    [10**400, float("inf"), "\ud800", {"\udc00": 1}, {1: 2}, object()],
    # Stable ids: repr(object()) holds an address, which differs between the
    # xdist workers, and they must collect the same tests.
    ids=["huge-int", "inf", "lone-surrogate", "surrogate-name", "int-name", "object"],
)
def test_it_raises_its_own_error_for_what_jcs_refuses(value: Any) -> None:
    # Callers catch CanonicalizationError; jcs's DataModelError must not leak.
    with pytest.raises(CanonicalizationError) as info:
        canonicalize(value)
    assert info.value.reason in {
        "integer-overflow",
        "non-finite-number",
        "unpaired-surrogate",
        "member-name-not-string",
        "unsupported-type",
    }
    with pytest.raises(CanonicalizationError):
        signing_bytes({"signature": 1, "x": value})


def test_signing_bytes_is_the_kernel_one() -> None:
    document = {"signature": "s", "payload": {"signature": "kept"}, "a": 1}
    assert signing_bytes(document) == jcs.signing_bytes(document) == b'{"a":1,"payload":{"signature":"kept"}}'


# --- RFC 8785 §3.2.3: member order by UTF-16 code units ---------------------


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


def test_it_puts_a_surrogate_pair_key_before_u_fb33() -> None:
    # By code point U+1F600 sorts after U+FB33; by UTF-16 code units its
    # high surrogate 0xD83D sorts before 0xFB33, which is what JCS requires.
    assert canonicalize({"\ufb33": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\ufb33":1}'.encode()


def test_it_sorts_nested_members_and_a_prefix_first() -> None:
    value = {"b": {"z": 1, "a": [{"y": 2, "x": 1}]}, "a": None, "ab": True, "": False}
    assert canonicalize(value) == b'{"":false,"a":null,"ab":true,"b":{"a":[{"x":1,"y":2}],"z":1}}'


# --- RFC 8785 §3.2.2: the example, literals and strings ---------------------


def test_it_canonicalises_the_rfc8785_3_2_2_example() -> None:
    text = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonicalize(loads_strict(text)) == expected.encode("utf-8")


@pytest.mark.parametrize("code", [c for c in range(0x20) if c not in (0x08, 0x09, 0x0A, 0x0C, 0x0D)])
def test_it_escapes_other_control_characters_as_lowercase_u00xx(code: int) -> None:
    assert canonicalize(chr(code)) == f'"\\u{code:04x}"'.encode("ascii")


@pytest.mark.parametrize(
    ("char", "escape"),
    [("\b", "\\b"), ("\f", "\\f"), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"), ('"', '\\"'), ("\\", "\\\\")],
)
def test_it_uses_the_short_escapes(char: str, escape: str) -> None:
    assert canonicalize(char) == f'"{escape}"'.encode("ascii")


@pytest.mark.parametrize("text", ["/", "\x7f", "\u0080", "\u00e9", "\u2028", "\u20ac", "\U0001f600", "\ufeff"])
def test_it_leaves_everything_else_unescaped_as_utf8(text: str) -> None:
    assert canonicalize(text) == b'"' + text.encode("utf-8") + b'"'


def test_it_writes_literals_and_no_whitespace() -> None:
    assert canonicalize([None, True, False, [], {}, ""]) == b'[null,true,false,[],{},""]'


def test_it_treats_tuples_as_arrays() -> None:
    assert canonicalize((1, "a")) == b'[1,"a"]'


@pytest.mark.parametrize("value", [{1: "a"}, {None: 1}, {1.5, 2.5}, b"bytes", object()])
def test_it_refuses_values_with_no_json_form(value: Any) -> None:
    with pytest.raises(CanonicalizationError):
        canonicalize(value)


@pytest.mark.parametrize("value", ["\ud800", "a\udfffb", {"\udc00": 1}, ["\ud83d"]], ids=repr)
def test_it_refuses_lone_surrogates_with_canonicalization_error(value: Any) -> None:
    # A lone surrogate has no UTF-8 form (RFC 8785 §3.2.2.2 requires valid
    # Unicode); the refusal must be the kernel's own error, not UnicodeEncodeError.
    with pytest.raises(CanonicalizationError):
        canonicalize(value)


# --- Hypothesis properties --------------------------------------------------

safe_ints = st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | safe_ints | finite_floats | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=25,
)
# What the strict parser reads back: it refuses NUL characters (tests/protocol/test_nul.py).
nul_free_text = st.text(alphabet=st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=20)
strict_values = st.recursive(
    st.none() | st.booleans() | safe_ints | finite_floats | nul_free_text,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(nul_free_text, children, max_size=5),
    max_leaves=25,
)


@given(strict_values)
def test_it_is_idempotent_through_the_strict_parser(value: Any) -> None:
    once = canonicalize(value)
    assert canonicalize(loads_strict(once)) == once


@given(finite_floats)
def test_it_round_trips_every_finite_float(value: float) -> None:
    text = canonicalize(value).decode("ascii")
    assert float(text) == value
    if value != 0:
        assert math.copysign(1.0, float(text)) == math.copysign(1.0, value)


@pytest.mark.parametrize("value", [2.0**53, 1e20, 123456789012345680000.0, -(2.0**60)])
def test_it_reparses_large_integral_floats_it_writes(value: float) -> None:
    # canonicalize(1e20) is "100000000000000000000"; the strict parser reads
    # that text as an integer outside the safe range and refuses it, so a
    # canonical document does not survive its own parser.
    once = canonicalize({"x": value})
    assert canonicalize(loads_strict(once)) == once


@given(safe_ints)
def test_it_writes_safe_integers_as_their_digits(value: int) -> None:
    assert canonicalize(value) == str(value).encode("ascii")


@given(json_values)
def test_its_output_is_what_the_standard_parser_reads_back(value: Any) -> None:
    # Numbers compared as doubles: JCS writes 6.146489450449686e16 as the
    # digits 61464894504496860, which an int parse would read inexactly.
    assert json.loads(canonicalize(value), parse_int=float) == json.loads(json.dumps(value), parse_int=float)


@given(st.dictionaries(st.text(max_size=6), st.integers(0, 9), min_size=2, max_size=8))
def test_it_orders_members_independently_of_insertion(value: dict[str, int]) -> None:
    reordered = dict(reversed(list(value.items())))
    assert canonicalize(reordered) == canonicalize(value)


# --- loads_strict: untrusted input ------------------------------------------


@pytest.mark.parametrize(
    "text",
    ['{"a":1,"a":2}', '{"a":1,"b":{"c":1,"c":1}}', '[{"x":0},{"x":0,"x":0}]', '{"a":{},"a":{}}'],
)
def test_it_refuses_duplicate_member_names(text: str) -> None:
    with pytest.raises(CanonicalizationError):
        loads_strict(text)


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", '{"a":NaN}', "[1,Infinity]"])
def test_it_refuses_nan_and_infinity(text: str) -> None:
    with pytest.raises(CanonicalizationError):
        loads_strict(text)


@pytest.mark.parametrize("text", ["1e400", "-1e400", '{"a":[2e308]}'])
def test_it_refuses_numbers_that_overflow_to_infinity(text: str) -> None:
    # json.loads turns 1e400 into float("inf"), which has no JSON form.
    with pytest.raises(CanonicalizationError):
        loads_strict(text)


@pytest.mark.parametrize(
    "text", ["9007199254740993", "-9007199254740993", '{"n":18446744073709551615}', "[123456789012345678901234567890]"]
)
def test_it_refuses_unsafe_integers(text: str) -> None:
    """Integer text beyond 2**53 that a double would round is refused; text
    that is a double's own canonical spelling (2**53, 1e20) is that double."""
    with pytest.raises(CanonicalizationError):
        loads_strict(text)


@pytest.mark.parametrize("text", ["9007199254740991", "-9007199254740991"])
def test_it_accepts_the_largest_safe_integers(text: str) -> None:
    assert loads_strict(text) == int(text)


@pytest.mark.parametrize(
    "data",
    [b'"\xff"', b'{"a":"\xc3\x28"}', b'"\xc0\xaf"', b'["\xe2\x82"]', b"\x80", b'"\xed\xa0\x80"', b'"\xed\xbf\xbf"'],
    ids=["ff", "bad-continuation", "overlong", "truncated", "lone-continuation", "cesu-high", "cesu-low"],
)
def test_it_refuses_invalid_utf8(data: bytes) -> None:
    # The last two are UTF-8-encoded surrogates (CESU-8), invalid in UTF-8;
    # json.loads decodes bytes with "surrogatepass" and would let them in.
    with pytest.raises(CanonicalizationError):
        loads_strict(data)


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16", "utf-32"])
def test_it_refuses_json_that_is_not_utf8(encoding: str) -> None:
    # RFC 8259 §8.1: JSON exchanged between systems MUST be UTF-8.
    with pytest.raises(CanonicalizationError):
        loads_strict('{"a":1}'.encode(encoding))


@pytest.mark.parametrize("text", ['"\\ud800"', '{"\\udc00":1}', '["a\\ud83db"]'])
def test_it_refuses_escaped_lone_surrogates(text: str) -> None:
    with pytest.raises(CanonicalizationError):
        loads_strict(text)


def test_it_accepts_an_escaped_surrogate_pair() -> None:
    assert loads_strict('"\\ud83d\\ude00"') == "\U0001f600"


@pytest.mark.parametrize("data", ["", " ", "{", "[1,]", "{'a':1}", "tru", '{"a" 1}', "1 2", b"", "[" * 100_000])
def test_it_refuses_text_that_is_not_json(data: str | bytes) -> None:
    with pytest.raises(CanonicalizationError):
        loads_strict(data)


@given(st.binary(max_size=64))
def test_it_never_raises_anything_but_canonicalization_error_on_bytes(data: bytes) -> None:
    try:
        value = loads_strict(data)
    except CanonicalizationError:
        return
    canonicalize(value)  # what the parser lets in has a canonical form


@given(
    st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from('{}[]",:\\u0123456789eE.-+ntrfalsd'), max_size=40)
)
def test_it_never_raises_anything_but_canonicalization_error_on_text(text: str) -> None:
    try:
        value = loads_strict(text)
    except CanonicalizationError:
        return
    canonicalize(value)


@pytest.mark.parametrize("text", ["9007199254740992", "18446744073709552000", "123456789012345680000"])
def test_it_reads_large_integers_that_are_canonical_doubles(text: str) -> None:
    assert canonicalize(loads_strict(text)).decode() == text


# --- loads_strict: the server's own limits over strictjson ------------------


def test_it_accepts_64_levels_and_refuses_65() -> None:
    assert loads_strict("[" * 64 + "]" * 64) is not None
    with pytest.raises(CanonicalizationError) as info:
        loads_strict("[" * 65 + "]" * 65)
    assert info.value.reason == "too-deep"
    with pytest.raises(CanonicalizationError):
        loads_strict('{"a":' * 65 + "1" + "}" * 65)


def _refused_by_policy(value: Any, depth: int = 0) -> bool:
    """The server's input refusals, stated on the value (the module text)."""
    if isinstance(value, str):
        return "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int):
        if abs(value) <= MAX_SAFE_INTEGER:
            return False
        try:
            return jcs.canonicalize(value).decode() != str(value)  # not its double's spelling
        except jcs.DataModelError:
            return True
    if isinstance(value, float):
        return math.isinf(value)
    if depth >= 64:
        return True
    if isinstance(value, dict):
        return any(_refused_by_policy(k) or _refused_by_policy(v, depth + 1) for k, v in value.items())
    return any(_refused_by_policy(v, depth + 1) for v in value)


any_text = st.text(alphabet=st.characters(exclude_categories=[]) | st.sampled_from("\x00\ud800\udfff"), max_size=6)
edge_integers = st.integers() | st.sampled_from([2**53, 2**53 + 1, 10**20, 10**21 + 1, 2**64, -(2**70), 10**400])
edge_values = st.recursive(
    st.none() | st.booleans() | edge_integers | st.floats(allow_nan=False, allow_infinity=False) | any_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=4),
    max_leaves=12,
)


@given(edge_values, st.integers(0, 70), st.booleans(), st.booleans())
@example({"\ud800\udfff": None}, 0, True, False)  # an escaped pair is one character, not two lone halves
def test_it_refuses_exactly_what_the_server_keeps_out(value: Any, wrap: int, ascii_only: bool, as_bytes: bool) -> None:
    # loads_strict walks only documents whose text could hold a refusal;
    # this shows that shortcut never lets one through, nor refuses more.
    for _ in range(wrap):
        value = [value]
    text = json.dumps(value, ensure_ascii=ascii_only)
    try:
        data: str | bytes = text.encode("utf-8") if as_bytes else text
    except UnicodeEncodeError:
        data = text  # a raw lone surrogate travels only in a str
    try:
        loads_strict(data)
    except CanonicalizationError:
        refused = True
    else:
        refused = False
    # The oracle judges what the text says, not the value it was made from:
    # json.dumps escapes a high and a low surrogate side by side as
    # "\\ud800\\udfff", which JSON reads as one supplementary character.
    assert refused == _refused_by_policy(json.loads(text))
