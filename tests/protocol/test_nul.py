"""``loads_strict`` refuses the NUL character anywhere (issue 16 item 6).

JSON may carry ``\\u0000``; PostgreSQL's text columns and jsonb cannot store
it, so a Mission title or a contract holding one answered 500 on PostgreSQL
only. The strict parser every binding uses refuses it, naming the member.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mwportal.protocol import CanonicalizationError, canonicalize, loads_strict

clean_text = st.text(alphabet=st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=8)
names = st.from_regex(r"[a-z][a-z_]{0,6}", fullmatch=True)
clean_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | clean_text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(names, children, max_size=3),
    max_leaves=12,
)


@st.composite
def with_one_nul(draw: st.DrawFn) -> tuple[Any, str]:
    """A clean document with one string or member name replaced by one holding
    a NUL, and the path the parser must name for it."""
    root: dict[str, Any] = draw(st.dictionaries(names, clean_values, min_size=1, max_size=3))
    node: Any = root
    path = ""
    # Walk down to a random container, recording the path.
    while True:
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node)))
            child, child_path = node[key], f"{path}.{key}" if path else key
        elif isinstance(node, list) and node:
            index = draw(st.integers(0, len(node) - 1))
            child, child_path = node[index], f"{path}[{index}]"
        else:
            break
        if not isinstance(child, dict | list) or not child or draw(st.booleans()):
            break
        node, path = child, child_path
    bad = draw(clean_text) + "\x00" + draw(clean_text)
    if isinstance(node, dict) and draw(st.booleans()):
        # A member name with a NUL: named in its JSON-escaped form.
        node[bad] = None
        return root, f"{path}[{json.dumps(bad)}]"
    if isinstance(node, dict):
        key = draw(st.sampled_from(sorted(node)))
        node[key] = bad
        return root, f"{path}.{key}" if path else key
    index = draw(st.integers(0, len(node) - 1))
    node[index] = bad
    return root, f"{path}[{index}]"


@given(with_one_nul())
def test_it_refuses_a_nul_anywhere_naming_the_member(case: tuple[Any, str]) -> None:
    document, path = case
    text = canonicalize(document)  # JCS writes NUL as \u0000
    assert b"\\u0000" in text
    with pytest.raises(CanonicalizationError) as info:
        loads_strict(text)
    assert info.value.field == path, (info.value, path)
    assert str(info.value).startswith(f"{path}: ")
    assert "NUL" in str(info.value)


@given(clean_values)
def test_it_still_reads_every_document_without_a_nul(value: Any) -> None:
    assert loads_strict(canonicalize(value)) == value


@given(clean_text, clean_text)
def test_a_top_level_string_with_a_nul_is_refused_without_a_member_to_name(before: str, after: str) -> None:
    with pytest.raises(CanonicalizationError) as info:
        loads_strict(json.dumps(before + "\x00" + after))
    assert info.value.field is None
    assert "NUL" in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        '"\\\\u0000"',  # an escaped backslash, then the letters u0000: no NUL
        '{"title": "C:\\\\u0000"}',
    ],
)
def test_the_six_letters_after_an_escaped_backslash_are_not_a_nul(text: str) -> None:
    assert "\x00" not in json.dumps(loads_strict(text))


def test_a_raw_nul_byte_is_not_json_at_all() -> None:
    with pytest.raises(CanonicalizationError):
        loads_strict(b'{"title": "a\x00b"}')
