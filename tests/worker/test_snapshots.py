"""Restoring a signed Group Snapshot after CURSOR_TOO_OLD (PROTOCOL §16): verify
the Group Authority's signature and the state's hash, replace the Group's
projection, resume strictly after the snapshot's ``throughSequence``."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from mwportal.protocol import jcs
from mwportal.protocol.verification import sign_document
from mwworker import SnapshotRefused, Store
from mwworker.projection import WorkRow
from tests.worker.streams import Authority, Event, World, snapshot_document

OpenStore = Callable[..., Store]


def snapshots_in_stream(world: World, events: list[Event]) -> list[tuple[str, int]]:
    """(group, index) of every snapshot the World took within the stream, after a few Events."""
    heads: dict[str, int] = {}
    for e in events:
        heads[e["groupId"]] = e["sequence"]
    return [
        (gid, i)
        for gid, g in sorted(world.groups.items())
        for i, (seq, _, _) in enumerate(g.snapshots)
        if 10 < seq < heads.get(gid, 0) - 5
    ]


def a_snapshot(world: World, events: list[Event]) -> tuple[str, dict[str, Any], bytes, list[Event]]:
    group, index = next((g, i) for g, i in snapshots_in_stream(world, events) if world.groups[g].kind == "mission")
    document, state = snapshot_document(world, group, index)
    return group, document, state, [e for e in events if e["groupId"] == group]


def test_a_verified_snapshot_replaces_the_projection_and_sets_the_cursor_spec_16(
    open_store: OpenStore, medium: tuple[World, list[Event]]
) -> None:
    world, events = medium
    group, document, state, _ = a_snapshot(world, events)
    store = open_store()
    assert store.restore_snapshot(document, state, group) == []
    assert store.cursor(group).sequence == document["throughSequence"]
    assert store.cursor(group).last_event_id == document["eventIds"][-1]
    restored = {row.workitem: row for row in store.queue(group)}
    items = json.loads(state)["workItems"]
    assert set(restored) == {item["workItemId"] for item in items}
    for item in items:
        row = restored[item["workItemId"]]
        owner = item.get("owner") or {}
        assert (row.state, row.revision, row.owner, row.ownership_epoch) == (
            item["state"], item["revision"], owner.get("agentId"), owner.get("ownershipEpoch", 0)
        )  # fmt: skip
    meta = store.meta(group)
    assert meta is not None
    assert (meta.mission, meta.restored_snapshot_sequence) == (world.groups[group].mission, document["throughSequence"])


def test_replay_continues_strictly_after_the_snapshot_spec_16(
    open_store: OpenStore, medium: tuple[World, list[Event]]
) -> None:
    world, events = medium
    group, document, state, group_events = a_snapshot(world, events)
    s = document["throughSequence"]
    store = open_store()
    store.restore_snapshot(document, state, group)
    for e in group_events[:s]:
        assert store.apply(e) == []  # at or before the snapshot: already in its state
    assert store.apply(group_events[s]) == [s + 1]
    assert [e["sequence"] for e in store.inbox(group)] == [s + 1]


def test_events_waiting_beyond_the_snapshot_apply_once_it_is_restored(
    open_store: OpenStore, medium: tuple[World, list[Event]]
) -> None:
    world, events = medium
    group, document, state, group_events = a_snapshot(world, events)
    s = document["throughSequence"]
    store = open_store()
    for e in group_events[s : s + 4]:
        assert store.apply(e) == []  # a gap from 0: they wait
    assert store.restore_snapshot(document, state, group) == [s + 1, s + 2, s + 3, s + 4]


def _flip(value: str) -> str:
    return value[:10] + "AB"[value[10] == "A"] + value[11:]


TAMPERING = [
    (lambda d, st: (d, st.replace(b'"workItems":[', b'"workItems":[{},', 1)), "stateHash"),
    (lambda d, st: ({**d, "throughSequence": d["throughSequence"] + 1}, st), "signature"),
    (lambda d, st: ({**d, "eventIds": []}, st), "signature"),
    (lambda d, st: ({**d, "signature": {**d["signature"], "value": _flip(d["signature"]["value"])}}, st), "signature"),
    (lambda d, st: ({k: v for k, v in d.items() if k != "stateHash"}, st), "signature"),
    (lambda d, st: ({**d, "createdBy": {"type": "agent", "id": d["createdBy"]["id"]}}, st), "signer"),
    (lambda d, st: (d, b"not json"), "state"),
]


@pytest.mark.parametrize(("tamper", "check"), TAMPERING)
def test_a_tampered_snapshot_is_refused_and_changes_nothing_spec_6_4(
    open_store: OpenStore, medium: tuple[World, list[Event]], tamper: Any, check: str
) -> None:
    world, events = medium
    group, document, state, group_events = a_snapshot(world, events)
    store = open_store()
    for e in group_events[:5]:
        store.apply(e)
    before = store.projection_dump()
    document, state = tamper(copy.deepcopy(document), state)
    with pytest.raises(SnapshotRefused) as info:
        store.restore_snapshot(document, state, group)
    assert info.value.check == check
    assert store.projection_dump() == before


def test_a_snapshot_signed_by_another_key_or_of_another_group_is_refused(
    open_store: OpenStore, medium: tuple[World, list[Event]]
) -> None:
    world, events = medium
    group, document, state, _ = a_snapshot(world, events)
    store = open_store()
    stranger = Authority.for_seed(31337)
    body = {k: v for k, v in document.items() if k != "signature"}
    forged = sign_document({**body, "createdBy": stranger.principal}, key_id=stranger.key.key_id,
                           seed=stranger.key.seed, profile="group-snapshot")  # fmt: skip
    with pytest.raises(SnapshotRefused) as info:
        store.restore_snapshot(forged, state, group)
    assert info.value.check == "signature"
    other = next(g for g in world.groups if g != group)
    with pytest.raises(SnapshotRefused) as info:
        store.restore_snapshot(document, state, other)
    assert info.value.check == "group"


def test_a_snapshot_behind_the_cursor_is_refused(open_store: OpenStore, medium: tuple[World, list[Event]]) -> None:
    world, events = medium
    group, document, state, group_events = a_snapshot(world, events)
    store = open_store()
    for e in group_events[: document["throughSequence"] + 1]:
        store.apply(e)
    with pytest.raises(SnapshotRefused) as info:
        store.restore_snapshot(document, state, group)
    assert info.value.check == "sequence"


def test_a_snapshot_at_the_cursor_must_name_the_same_event(
    open_store: OpenStore, medium: tuple[World, list[Event]]
) -> None:
    world, events = medium
    group, document, state, group_events = a_snapshot(world, events)
    s = document["throughSequence"]
    store = open_store()
    for e in group_events[:s]:
        store.apply(e)
    before = store.projection_dump()
    # The same head: nothing to restore, and the richer projection (Lease IDs, offers) stays.
    assert store.restore_snapshot(document, state, group) == []
    assert store.projection_dump() == before
    body = {k: v for k, v in document.items() if k != "signature"}
    key = world.authority.key
    forked = sign_document({**body, "eventIds": ["urn:uuid:00000000-0000-4000-8000-0000000000e1"]},
                           key_id=key.key_id, seed=key.seed, profile="group-snapshot")  # fmt: skip
    with pytest.raises(SnapshotRefused) as info:
        store.restore_snapshot(forked, state, group)
    assert info.value.check == "eventIds"


# What a Group Snapshot's state does not carry (projection.SNAPSHOT_STATE_MEMBERS):
# the restored row leaves these at their defaults, and only these.
NOT_IN_SNAPSHOT = {
    "lease_id", "lease_expires_at", "attempt", "needs_new_attempt", "retry_not_before", "checkpoint_count",
    "usage", "accepted_contract_revision", "offer_expires_at", "child_mission", "child_group",
    "child_failure_policy", "resolution_required", "late_results", "updated_sequence",
}  # fmt: skip


def test_restored_rows_agree_with_the_history_on_everything_the_snapshot_carries(
    open_store: OpenStore, medium: tuple[World, list[Event]]
) -> None:
    """The replay property (STYLE §5, zulip's verify_action) across the snapshot
    boundary: folding the Events up to S gives the rows a snapshot at S
    restores. Strict on every carried field, ``start_by`` included: every
    timer an Event sets travels in its payload (issue 18 item 3)."""
    world, events = medium
    checked = with_start_by = 0
    for n, (group, index) in enumerate(snapshots_in_stream(world, events)):
        document, state = snapshot_document(world, group, index)
        history = open_store(f"history-{n}", synchronous="NORMAL")
        for e in events:
            if e["groupId"] == group and e["sequence"] <= document["throughSequence"]:
                history.apply(e)
        restored = open_store(f"restored-{n}", synchronous="NORMAL")
        restored.restore_snapshot(document, state, group)
        by_history = {r.workitem: r for r in history.queue(group)}
        by_snapshot = {r.workitem: r for r in restored.queue(group)}
        assert set(by_history) == set(by_snapshot)
        for item, row in by_snapshot.items():
            for field in WorkRow.__dataclass_fields__:
                if field in NOT_IN_SNAPSHOT or (field in ("ownership_epoch", "pins") and row.owner is None):
                    continue  # a WorkItem object carries its Ownership Epoch and pins (§6.1) in its owner only
                assert getattr(by_history[item], field) == getattr(row, field), (group, item, field)
            with_start_by += row.start_by is not None
            checked += 1
        h, r = history.meta(group), restored.meta(group)
        assert h is not None and r is not None
        for field in ("kind", "organization", "revision", "mission", "mission_title", "mission_objective",
                      "mission_status", "mission_budgets", "mission_usage", "my_roles", "my_membership_epoch",
                      "my_active", "priority_policy", "policy_revision"):  # fmt: skip
            assert getattr(h, field) == getattr(r, field), (group, field)
    assert checked > 50
    assert with_start_by > 5  # the start-by deadlines were really compared, not absent on both sides


def test_restore_keeps_the_verified_document_and_state(
    open_store: OpenStore, medium: tuple[World, list[Event]]
) -> None:
    world, events = medium
    group, document, state, _ = a_snapshot(world, events)
    store = open_store()
    store.restore_snapshot(document, state, group)
    ((stored, kept),) = store._conn.execute(
        "SELECT document, state FROM snapshot WHERE group_id = ?", (group,)
    ).fetchall()
    assert json.loads(stored) == document
    assert jcs.canonicalize(json.loads(kept)) == state
