"""Restoring a signed snapshot after CURSOR_TOO_OLD (spec 16; persistence guide
"Snapshots and long gaps"): verify, replace the Group's projection, resume
strictly after the snapshot's sequence."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from mwportal.protocol import generate_keypair
from mwportal.protocol.snapshot import build_snapshot
from mwworker import SnapshotRefused, Store
from mwworker.projection import WorkRow
from tests.worker.streams import Event, World, snapshot_document

OpenStore = Callable[..., Store]


def snapshots_in_stream(world: World, events: list[Event]) -> list[tuple[str, int]]:
    """(group, index) of every snapshot the server took within the stream, after a few Events."""
    heads: dict[str, int] = {}
    for e in events:
        heads[e["group"]] = e["sequence"]
    return [
        (gid, i)
        for gid, g in sorted(world.groups.items())
        for i, (seq, _, _) in enumerate(g.snapshots)
        if 10 < seq < heads.get(gid, 0) - 5
    ]


def a_snapshot(world: World, events: list[Event], key: tuple[str, str]) -> tuple[str, dict[str, Any], list[Event]]:
    group, index = next((g, i) for g, i in snapshots_in_stream(world, events) if world.groups[g].kind == "mission")
    document = snapshot_document(world, group, index, key[0])
    return group, document, [e for e in events if e["group"] == group]


def test_a_verified_snapshot_replaces_the_projection_and_sets_the_cursor(
    open_store: OpenStore, medium: tuple[World, list[Event]], server_key: tuple[str, str]
) -> None:
    world, events = medium
    group, document, group_events = a_snapshot(world, events, server_key)
    store = open_store()
    assert store.restore_snapshot(document, server_key[1], world.org, group) == []
    assert store.cursor(group).sequence == document["sequence"]
    assert store.cursor(group).last_hash == document["head_hash"]
    restored = {row.workitem: row for row in store.queue(group)}
    assert set(restored) == {item["id"] for item in document["state"]["workitems"]}
    for item in document["state"]["workitems"]:
        row = restored[item["id"]]
        assert (row.state, row.revision, row.owner, row.ownership_epoch) == (
            item["state"], item["revision"], item["owner"], item["ownership_epoch"]
        )  # fmt: skip
    meta = store.meta(group)
    assert meta is not None
    assert (meta.mission, meta.restored_snapshot_sequence) == (document["state"]["mission"]["id"], document["sequence"])


def test_replay_continues_strictly_after_the_snapshot(
    open_store: OpenStore, medium: tuple[World, list[Event]], server_key: tuple[str, str]
) -> None:
    world, events = medium
    group, document, group_events = a_snapshot(world, events, server_key)
    s = document["sequence"]
    store = open_store()
    store.restore_snapshot(document, server_key[1], world.org, group)
    for e in group_events[:s]:
        assert store.apply(e) == []  # at or before the snapshot: already in its state
    assert store.apply(group_events[s]) == [s + 1]
    assert [e["sequence"] for e in store.inbox(group)] == [s + 1]


def test_events_waiting_beyond_the_snapshot_apply_once_it_is_restored(
    open_store: OpenStore, medium: tuple[World, list[Event]], server_key: tuple[str, str]
) -> None:
    world, events = medium
    group, document, group_events = a_snapshot(world, events, server_key)
    s = document["sequence"]
    store = open_store()
    for e in group_events[s : s + 4]:
        assert store.apply(e) == []  # a gap from 0: they wait
    assert store.restore_snapshot(document, server_key[1], world.org, group) == [s + 1, s + 2, s + 3, s + 4]


TAMPERING = [
    (lambda d: d["state"]["workitems"].append({"id": "x"}), "hash"),
    (lambda d: d.update(sequence=d["sequence"] + 1), "signature"),
    (lambda d: d.update(head_hash="0" * 64), "signature"),
    (lambda d: d.update(schema="mwp.group-snapshot/0"), "schema"),
    # One character of the signature changed (always to a different one).
    (
        lambda d: d.update(signature=d["signature"][:10] + "AB"[d["signature"][10] == "A"] + d["signature"][11:]),
        "signature",
    ),  # fmt: skip
    (lambda d: d.pop("head_hash"), "schema"),
]


@pytest.mark.parametrize(("tamper", "check"), TAMPERING)
def test_a_tampered_snapshot_is_refused_and_changes_nothing(
    open_store: OpenStore,
    medium: tuple[World, list[Event]],
    server_key: tuple[str, str],
    tamper: Any,
    check: str,
) -> None:
    world, events = medium
    group, document, group_events = a_snapshot(world, events, server_key)
    store = open_store()
    for e in group_events[:5]:
        store.apply(e)
    before = store.projection_dump()
    document = copy.deepcopy(document)
    tamper(document)
    with pytest.raises(SnapshotRefused) as info:
        store.restore_snapshot(document, server_key[1], world.org, group)
    assert info.value.check == check
    assert store.projection_dump() == before


def test_a_snapshot_signed_by_another_key_or_bound_elsewhere_is_refused(
    open_store: OpenStore, medium: tuple[World, list[Event]], server_key: tuple[str, str]
) -> None:
    world, events = medium
    group, document, _ = a_snapshot(world, events, server_key)
    store = open_store()
    with pytest.raises(SnapshotRefused) as info:
        store.restore_snapshot(document, generate_keypair()[1], world.org, group)
    assert info.value.check == "signature"
    with pytest.raises(SnapshotRefused) as info:
        store.restore_snapshot(document, server_key[1], world.org, world.admin.id)
    assert info.value.check == "group"
    with pytest.raises(SnapshotRefused) as info:
        store.restore_snapshot(document, server_key[1], group, group)
    assert info.value.check == "organization"


def test_a_snapshot_behind_the_cursor_is_refused(
    open_store: OpenStore, medium: tuple[World, list[Event]], server_key: tuple[str, str]
) -> None:
    world, events = medium
    group, document, group_events = a_snapshot(world, events, server_key)
    store = open_store()
    for e in group_events[: document["sequence"] + 1]:
        store.apply(e)
    with pytest.raises(SnapshotRefused) as info:
        store.restore_snapshot(document, server_key[1], world.org, group)
    assert info.value.check == "sequence"


def test_a_snapshot_at_the_cursor_must_name_the_same_head(
    open_store: OpenStore, medium: tuple[World, list[Event]], server_key: tuple[str, str]
) -> None:
    world, events = medium
    group, document, group_events = a_snapshot(world, events, server_key)
    s = document["sequence"]
    store = open_store()
    for e in group_events[:s]:
        store.apply(e)
    before = store.projection_dump()
    # The same head: nothing to restore, and the richer projection (Lease IDs, offers) stays.
    assert store.restore_snapshot(document, server_key[1], world.org, group) == []
    assert store.projection_dump() == before
    forked = build_snapshot(private_key=server_key[0], organization=world.org, group=group, sequence=s,
                            head_hash="e" * 64, state=document["state"], created_at=document["created_at"])  # fmt: skip
    with pytest.raises(SnapshotRefused) as info:
        store.restore_snapshot(forked, server_key[1], world.org, group)
    assert info.value.check == "head_hash"


# What a snapshot cannot tell, by design of its state (missions/snapshots.py,
# workitems/handlers/outcomes.py _item_state): the restored row says "unknown" (None).
NOT_IN_SNAPSHOT = {
    "lease_id", "lease_expires_at", "offered_to", "offer_expires_at", "needs_new_attempt", "retry_not_before",
    "child_mission", "child_group", "child_failure_policy", "resolution_required", "late_results", "updated_sequence",
}  # fmt: skip
# What some Event bodies leave out (start_by after a checkpoint, an unblock, a
# failed attempt, a revoked lease): None in the history fold, known in the snapshot.
UNKNOWN_AFTER_SOME_EVENTS = {"start_by"}


def test_restored_rows_agree_with_the_history_on_everything_the_snapshot_carries(
    open_store: OpenStore, medium: tuple[World, list[Event]], server_key: tuple[str, str]
) -> None:
    """The replay property (STYLE §5, zulip's verify_action) across the snapshot
    boundary: folding the Events up to S gives the rows a snapshot at S restores."""
    world, events = medium
    checked = gaps = 0
    for n, (group, index) in enumerate(snapshots_in_stream(world, events)):
        document = snapshot_document(world, group, index, server_key[0])
        history = open_store(f"history-{n}", synchronous="NORMAL")
        for e in events:
            if e["group"] == group and e["sequence"] <= document["sequence"]:
                history.apply(e)
        restored = open_store(f"restored-{n}", synchronous="NORMAL")
        restored.restore_snapshot(document, server_key[1], world.org, group)
        by_history = {r.workitem: r for r in history.queue(group)}
        by_snapshot = {r.workitem: r for r in restored.queue(group)}
        assert set(by_history) == set(by_snapshot)
        for item, row in by_snapshot.items():
            for field in WorkRow.__dataclass_fields__:
                if field in NOT_IN_SNAPSHOT:
                    assert field == "updated_sequence" or getattr(row, field) in (None, 0)
                    continue
                ours, theirs = getattr(by_history[item], field), getattr(row, field)
                if field in UNKNOWN_AFTER_SOME_EVENTS and ours is None and theirs is not None:
                    gaps += 1
                    continue
                assert ours == theirs, (group, item, field)
            checked += 1
        h, r = history.meta(group), restored.meta(group)
        assert h is not None and r is not None
        for field in ("kind", "organization", "revision", "mission", "mission_title", "mission_objective",
                      "mission_status", "mission_budgets", "mission_usage", "my_roles", "my_membership_epoch",
                      "my_active", "priority_policy", "policy_revision"):  # fmt: skip
            assert getattr(h, field) == getattr(r, field), (group, field)
    assert checked > 50
    assert gaps > 0  # start_by really is missing from some Event bodies (reported)


def test_restore_keeps_the_verified_document(
    open_store: OpenStore, medium: tuple[World, list[Event]], server_key: tuple[str, str]
) -> None:
    world, events = medium
    group, document, _ = a_snapshot(world, events, server_key)
    store = open_store()
    store.restore_snapshot(document, server_key[1], world.org, group)
    ((stored,),) = store._conn.execute("SELECT document FROM snapshot WHERE group_id = ?", (group,)).fetchall()
    assert json.loads(stored) == document
