"""The per-Group hash chain (DESIGN §3 step 6, MWP-EVT-005):
``hash = sha256(prev_hash || canonical(event without "hash"))``."""

from __future__ import annotations

import copy
import hashlib
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mwportal.protocol import GENESIS_HASH, canonicalize, event_hash, first_break

GROUP = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
ACTOR = "6f1c2a3b-4d5e-4f60-8172-839405a6b7c8"


def make_chain(n: int, *, start_sequence: int = 1, start_hash: str = GENESIS_HASH) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    prev = start_hash
    for i in range(n):
        seq = start_sequence + i
        event: dict[str, Any] = {
            "event_id": str(uuid.UUID(int=seq)),
            "group": GROUP,
            "sequence": seq,
            "type": "work.checkpointed",
            "aggregate": {"kind": "workitem", "id": str(uuid.UUID(int=1000 + seq)), "revision": seq},
            "actor": ACTOR,
            "action_id": str(uuid.UUID(int=2000 + seq)),
            "occurred_at": f"2026-11-29T10:00:{seq % 60:02d}.000000Z",
            "body": {"step": seq, "note": f"event {seq}"},
            "prev_hash": prev,
        }
        event["hash"] = prev = event_hash(prev, event)
        events.append(event)
    return events


def rehash_from(events: list[dict[str, Any]], index: int) -> None:
    """Recompute hashes from ``index`` on, keeping each event's own prev_hash."""
    for event in events[index:]:
        event["hash"] = event_hash(event["prev_hash"], event)


def test_genesis_hash_is_64_zeros() -> None:
    assert GENESIS_HASH == "0" * 64


def test_event_hash_is_sha256_of_prev_hash_and_canonical_event() -> None:
    event = make_chain(1)[0]
    content = {k: v for k, v in event.items() if k != "hash"}
    expected = hashlib.sha256(GENESIS_HASH.encode("ascii") + canonicalize(content)).hexdigest()
    assert event["hash"] == expected


def test_same_content_same_hash_MWP_EVT_005() -> None:
    event = make_chain(1)[0]
    reordered = dict(reversed(list(event.items())))
    assert event_hash(GENESIS_HASH, reordered) == event["hash"]
    assert event_hash(GENESIS_HASH, {**event, "hash": "anything"}) == event["hash"]


def test_a_different_predecessor_gives_a_different_hash() -> None:
    event = make_chain(1)[0]
    assert event_hash("f" * 64, event) != event["hash"]


def test_it_finds_no_break_in_an_intact_chain() -> None:
    assert first_break(make_chain(10)) is None
    assert first_break([]) is None


def test_it_checks_a_suffix_from_a_known_position() -> None:
    events = make_chain(10)
    assert first_break(events[4:], start_sequence=5, start_hash=events[3]["hash"]) is None
    assert first_break(events[4:]) == (1, "expected sequence 1, found 5")
    assert first_break(events[4:], start_sequence=5)[0] == 5  # type: ignore[index]


@pytest.mark.parametrize("position", [1, 4, 10])
def test_it_finds_a_changed_body_at_its_sequence(position: int) -> None:
    events = make_chain(10)
    events[position - 1]["body"]["step"] = -1
    assert first_break(events) == (position, "hash does not match the event's content")


@pytest.mark.parametrize("member", ["type", "actor", "occurred_at", "event_id", "aggregate"])
def test_it_finds_any_changed_member(member: str) -> None:
    events = make_chain(5)
    events[2][member] = {"changed": True} if member == "aggregate" else events[2][member] + "x"
    assert first_break(events) == (3, "hash does not match the event's content")


def test_it_finds_a_changed_body_even_with_its_hash_recomputed() -> None:
    events = make_chain(6)
    events[2]["body"] = {"step": "rewritten"}
    rehash_from(events, 2)  # the rewriter fixes the event's own hash only
    assert first_break(events) == (4, "prev_hash does not match the previous event's hash")


@pytest.mark.parametrize("missing", [1, 5, 9])
def test_it_finds_a_gap_at_the_missing_sequence(missing: int) -> None:
    events = make_chain(10)
    del events[missing - 1]
    assert first_break(events) == (missing, f"expected sequence {missing}, found {missing + 1}")


def test_it_finds_a_missing_tail_only_given_the_head() -> None:
    # A truncated tail is a valid prefix; the head (Group.last_sequence) tells.
    events = make_chain(10)[:7]
    assert first_break(events) is None


@pytest.mark.parametrize("duplicated", [1, 5, 10])
def test_it_finds_a_duplicate_at_the_next_sequence(duplicated: int) -> None:
    events = make_chain(10)
    events.insert(duplicated, copy.deepcopy(events[duplicated - 1]))
    assert first_break(events) == (duplicated + 1, f"expected sequence {duplicated + 1}, found {duplicated}")


def test_it_finds_swapped_events() -> None:
    events = make_chain(6)
    events[2], events[3] = events[3], events[2]
    assert first_break(events) == (3, "expected sequence 3, found 4")


@pytest.mark.parametrize("position", [1, 3, 8])
def test_it_finds_a_wrong_prev_hash(position: int) -> None:
    events = make_chain(8)
    events[position - 1]["prev_hash"] = "a" * 64
    rehash_from(events, position - 1)  # hashes consistent with the wrong link
    assert first_break(events) == (position, "prev_hash does not match the previous event's hash")


def test_it_finds_a_changed_hash_member() -> None:
    events = make_chain(5)
    events[3]["hash"] = "0" * 64
    assert first_break(events) == (4, "hash does not match the event's content")


@pytest.mark.parametrize("bad", [None, "1", 1.5, 0], ids=repr)
def test_it_finds_a_bad_sequence_value(bad: Any) -> None:
    events = make_chain(3)
    events[0]["sequence"] = bad
    assert first_break(events) == (1, f"expected sequence 1, found {bad}")


@given(st.integers(min_value=1, max_value=25), st.data())
def test_it_reports_the_first_tampered_event(n: int, data: st.DataObject) -> None:
    events = make_chain(n)
    position = data.draw(st.integers(min_value=1, max_value=n))
    kind = data.draw(st.sampled_from(["body", "gap", "duplicate", "prev_hash"]))
    if kind == "body":
        events[position - 1]["body"] = data.draw(
            st.dictionaries(st.text(max_size=3), st.integers(-1000, 1000), max_size=2)
        )
        if events[position - 1]["body"] == {"step": position, "note": f"event {position}"}:
            return
        expected = position
    elif kind == "gap":
        if position == n:
            return  # a missing tail is a valid prefix
        del events[position - 1]
        expected = position
    elif kind == "duplicate":
        events.insert(position, copy.deepcopy(events[position - 1]))
        expected = position + 1
    else:
        events[position - 1]["prev_hash"] = data.draw(st.text("0123456789abcdef", min_size=64, max_size=64))
        if events[position - 1]["prev_hash"] == (GENESIS_HASH if position == 1 else events[position - 2]["hash"]):
            return
        rehash_from(events, position - 1)
        expected = position
    found = first_break(events)
    assert found is not None
    assert found[0] == expected
