"""``Store.rebuild()``: drop the projection, replay snapshot + inbox, get the
same bytes (DESIGN §6: the same fold over the same verified documents)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from mwworker import ChainBroken, Store
from mwworker.schema import PROJECTION_TABLES
from tests.worker.streams import Event, World, snapshot_document
from tests.worker.test_snapshots import snapshots_in_stream

OpenStore = Callable[..., Store]


def test_rebuild_reproduces_the_incremental_projection_byte_for_byte(
    open_store: OpenStore, medium: tuple[World, list[Event]]
) -> None:
    _, events = medium
    store = open_store(synchronous="NORMAL")
    for e in events:
        store.apply(e)
    incremental = store.projection_dump()
    cursors = store.ack_positions()
    store.rebuild()
    assert store.projection_dump() == incremental
    assert store.ack_positions() == cursors
    # and the rebuilt store carries on where the incremental one was
    assert all(store.apply(e) == [] for e in events[-50:])


def test_rebuild_starts_from_the_latest_restored_snapshot(
    open_store: OpenStore, medium: tuple[World, list[Event]]
) -> None:
    """Incremental: some Groups restored from a snapshot (a long gap), then the
    rest of their Events; rebuild: snapshot + inbox after it. Same bytes."""
    world, events = medium
    chosen = dict(snapshots_in_stream(world, events))  # the last snapshot of each Group
    documents = {g: snapshot_document(world, g, i) for g, i in chosen.items()}
    store = open_store(synchronous="NORMAL")
    restored: set[str] = set()
    for e in events:
        group = e["groupId"]
        if group in documents and group not in restored:
            document, state = documents[group]
            if e["sequence"] > document["throughSequence"] // 2:
                # Half the Group was applied; the rest is "too old" and comes as a snapshot.
                store.restore_snapshot(document, state, group)
                restored.add(group)
        store.apply(e)
    assert len(restored) >= 3
    incremental = store.projection_dump()
    store.rebuild()
    assert store.projection_dump() == incremental


def test_rebuild_refuses_a_tampered_inbox_and_keeps_the_projection_spec_6_4(
    open_store: OpenStore, small: tuple[World, list[Event]], tmp_path: Path
) -> None:
    _, events = small
    store = open_store(synchronous="NORMAL")
    for e in events[:400]:
        store.apply(e)
    before = store.projection_dump()
    raw = sqlite3.connect(tmp_path / "worker.sqlite3", isolation_level=None)
    try:
        # A changed payload member: the stored document no longer verifies.
        raw.execute(
            "UPDATE inbox SET event = replace(event, '\"aggregateRevision\":', '\"aggregateRevision\":1')"
            " WHERE sequence = 12"
        )
    finally:
        raw.close()
    with pytest.raises(ChainBroken, match="does not verify"):
        store.rebuild()
    assert store.projection_dump() == before


def test_rebuild_drops_and_recreates_every_projection_table(
    open_store: OpenStore, small: tuple[World, list[Event]], tmp_path: Path
) -> None:
    _, events = small
    store = open_store(synchronous="NORMAL")
    for e in events[:200]:
        store.apply(e)
    incremental = store.projection_dump()
    raw = sqlite3.connect(tmp_path / "worker.sqlite3", isolation_level=None)
    try:
        # A projection damaged behind the Worker's back (the inbox stays intact).
        raw.execute("UPDATE group_queue SET state = 'verified'")
        raw.execute("DELETE FROM cursor")
    finally:
        raw.close()
    store.rebuild()
    assert store.projection_dump() == incremental
    assert set(PROJECTION_TABLES) == {"cursor", "processed_event", "group_meta", "group_queue", "checkpoint", "outbox"}
