"""Event shape, the canonical bytes the chain hashes, and the generator itself."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mwportal.protocol import CanonicalizationError, canonicalize, event_hash, first_break
from mwworker import MalformedEvent
from mwworker.events import chain_hash, check_event, content_bytes, text
from mwworker.projection import GROUP_EVENT_TYPES, ITEM_EVENT_TYPES
from tests.worker.streams import Event, World


def by_group(events: list[Event]) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = {}
    for e in events:
        out.setdefault(e["group"], []).append(e)
    return out


def test_the_generated_streams_are_valid_hash_chains(medium: tuple[World, list[Event]]) -> None:
    _, events = medium
    for group_events in by_group(events).values():
        assert first_break(group_events) is None


def test_the_generated_stream_covers_every_event_type_the_worker_folds(medium: tuple[World, list[Event]]) -> None:
    _, events = medium
    seen = {e["type"] for e in events}
    assert set(ITEM_EVENT_TYPES) | set(GROUP_EVENT_TYPES) <= seen
    # and the administrative Group's own Events
    assert {"org.created", "agent.registered", "agent_card.published", "agent.session_opened"} <= seen


def test_content_bytes_are_the_bytes_event_hash_covers(medium: tuple[World, list[Event]]) -> None:
    _, events = medium
    for event in events:
        content, same_values = content_bytes(event)
        assert content == canonicalize({k: v for k, v in event.items() if k != "hash"})
        assert chain_hash(event["prev_hash"], content) == event_hash(event["prev_hash"], event) == event["hash"]


def test_an_integral_float_takes_the_exact_path_and_says_so() -> None:
    event = {"a": 1.0, "b": [0.5, 1e-7, 2**53 + 0.0], "c": "é"}
    content, same_values = content_bytes({**event, "hash": "x"})
    assert content == canonicalize(event)
    assert not same_values
    assert text({"n": 1.0}) == text({"n": 1}) == '{"n":1}'


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8).filter(lambda t: not any(0xD800 <= ord(c) <= 0xDFFF for c in t)),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)


def _typed(value: Any) -> Any:
    """``value`` with every scalar tagged by its type: ``1`` and ``1.0`` differ."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), json_values, max_size=5))
def test_it_says_the_bytes_read_back_unchanged_only_when_they_do(event: dict[str, Any]) -> None:
    try:
        content, same_values = content_bytes({**event, "hash": "x"})
    except CanonicalizationError:
        return  # no canonical form (an unsafe integer): nothing is stored
    event.pop("hash", None)
    if same_values:
        assert _typed(json.loads(content)) == _typed(event)


def test_check_event_accepts_the_wire_shape(small: tuple[World, list[Event]]) -> None:
    _, events = small
    assert check_event(events[0]) is events[0]


@pytest.mark.parametrize(
    "breakage",
    [
        lambda e: e.pop("hash"),
        lambda e: e.update(extra=1),
        lambda e: e.update(sequence=0),
        lambda e: e.update(sequence=True),
        lambda e: e.update(prev_hash="ab"),
        lambda e: e.update(hash="Z" * 64),
        lambda e: e.update(aggregate={"kind": "workitem", "id": "x"}),
        lambda e: e["aggregate"].update(revision=-1),
        lambda e: e.update(body=[]),
        lambda e: e.update(group=""),
    ],
)
def test_check_event_refuses_what_is_not_an_event(small: tuple[World, list[Event]], breakage: Any) -> None:
    event = copy.deepcopy(small[1][5])
    breakage(event)
    with pytest.raises(MalformedEvent):
        check_event(event)
