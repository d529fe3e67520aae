"""The apply cycle (DESIGN §5; persistence guide "Implementation note"; spec 16).

One local transaction per Event: skip a known Event, apply only the next
contiguous sequence, verify the hash-chain link, fold, persist intents,
advance the Cursor, commit.
"""

from __future__ import annotations

import copy
import json
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from mwportal.protocol import GENESIS_HASH, event_hash
from mwworker import ChainBroken, MalformedEvent, ProjectionError, Store, StoreLocked, StoreMismatch
from tests.worker.streams import ME, Chain, Event, World

OpenStore = Callable[..., Store]
OTHER = "00000000-0000-4000-8000-0000000000aa"
OWNER = "00000000-0000-4000-8000-0000000000bb"


def group_events(events: list[Event], group: str) -> list[Event]:
    return [e for e in events if e["group"] == group]


def busiest_group(events: list[Event]) -> list[Event]:
    counts: dict[str, int] = {}
    for e in events:
        counts[e["group"]] = counts.get(e["group"], 0) + 1
    return group_events(events, max(counts, key=lambda g: counts[g]))


def rows(store: Store, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    return store._conn.execute(sql, args).fetchall()


# --- ordering, duplicates, gaps ------------------------------------------------------


def test_it_applies_a_group_in_order_and_advances_the_cursor(
    open_store: OpenStore, small: tuple[World, list[Event]]
) -> None:
    events = busiest_group(small[1])[:50]
    store = open_store()
    for e in events:
        assert store.apply(e) == [e["sequence"]]
    assert store.cursor(events[0]["group"]).sequence == 50
    assert store.cursor(events[0]["group"]).last_hash == events[-1]["hash"]
    assert rows(store, "SELECT count(*) FROM inbox") == [(50,)]
    assert rows(store, "SELECT count(*) FROM processed_event") == [(50,)]


def test_a_duplicate_event_is_skipped_MWP_WRK_029(open_store: OpenStore, small: tuple[World, list[Event]]) -> None:
    events = busiest_group(small[1])[:20]
    store = open_store(audit=True)
    for e in events:
        store.apply(e)
    before = store.projection_dump()
    for e in events:
        assert store.apply(copy.deepcopy(e)) == []
    assert store.projection_dump() == before
    assert rows(store, "SELECT max(applied), count(*) FROM apply_audit") == [(1, 20)]


def test_a_later_event_waits_in_memory_until_the_gap_fills(
    open_store: OpenStore, small: tuple[World, list[Event]]
) -> None:
    e = busiest_group(small[1])[:6]
    group = e[0]["group"]
    store = open_store()
    assert store.apply(e[0]) == [1]
    assert store.apply(e[2]) == []
    assert store.apply(e[4]) == []
    assert store.apply(e[3]) == []
    assert store.buffered(group) == [3, 4, 5]
    assert store.cursor(group).sequence == 1
    assert store.apply(e[1]) == [2, 3, 4, 5]
    assert store.buffered(group) == []
    assert store.apply(e[5]) == [6]


def test_the_cursor_never_crosses_a_gap_even_across_a_restart(
    open_store: OpenStore, small: tuple[World, list[Event]]
) -> None:
    e = busiest_group(small[1])[:30]
    group = e[0]["group"]
    store = open_store()
    for event in e[:10] + e[11:]:  # sequence 11 never arrives
        store.apply(event)
    assert store.cursor(group).sequence == 10
    assert store.ack_positions() == {group: 10}
    assert rows(store, "SELECT max(sequence) FROM inbox") == [(10,)]
    store.close()
    # Waiting Events were only in memory: after a restart the server replays from the Cursor.
    reopened = open_store()
    assert reopened.cursor(group).sequence == 10
    assert reopened.buffered(group) == []
    assert reopened.apply(e[12]) == []
    assert reopened.apply(e[10]) == [11]
    assert reopened.apply(e[11]) == [12, 13]


def test_ack_positions_are_the_highest_contiguous_cursor_per_group_MWP_WRK_030(
    open_store: OpenStore, small: tuple[World, list[Event]]
) -> None:
    store = open_store()
    expected: dict[str, int] = {}
    for e in small[1][:300]:
        store.apply(e)
        expected[e["group"]] = e["sequence"]
    assert store.ack_positions() == dict(sorted(expected.items()))


def test_the_inbox_gives_back_the_events_as_received(open_store: OpenStore, small: tuple[World, list[Event]]) -> None:
    events = busiest_group(small[1])[:40]
    store = open_store()
    for e in events:
        store.apply(e)
    assert list(store.inbox(events[0]["group"])) == events
    assert list(store.inbox(events[0]["group"], after=35)) == events[35:]


# --- the hash chain ------------------------------------------------------------------------


def test_a_tampered_event_is_refused_and_nothing_is_written(
    open_store: OpenStore, small: tuple[World, list[Event]]
) -> None:
    e = busiest_group(small[1])[:5]
    store = open_store()
    for event in e[:3]:
        store.apply(event)
    before = store.projection_dump()
    tampered = copy.deepcopy(e[3])
    tampered["body"]["injected"] = True
    with pytest.raises(ChainBroken, match="hash does not match"):
        store.apply(tampered)
    assert store.projection_dump() == before
    assert store.cursor(e[0]["group"]).sequence == 3
    assert store.apply(e[3]) == [4]  # the genuine Event still applies


def test_an_event_that_does_not_link_to_the_cursor_is_refused(open_store: OpenStore) -> None:
    chain = Chain(seed=1)
    chain.add("mission.created", ("group", chain.group, 1), {"mission": OTHER, "organization": OWNER})
    store = open_store()
    store.apply(chain.events[0])
    forged = chain.forge(sequence=2, prev_hash="f" * 64)  # consistent hash, wrong link
    with pytest.raises(ChainBroken, match="prev_hash"):
        store.apply(forged)
    assert store.cursor(chain.group).sequence == 1


def test_a_different_event_at_an_applied_position_is_refused(open_store: OpenStore) -> None:
    chain = Chain(seed=2)
    chain.add("mission.created", ("group", chain.group, 1), {"mission": OTHER, "organization": OWNER})
    store = open_store()
    store.apply(chain.events[0])
    fork = chain.forge(sequence=1, prev_hash=GENESIS_HASH)
    with pytest.raises(ChainBroken, match="claims the position"):
        store.apply(fork)


def test_an_event_id_reused_at_another_position_is_refused(open_store: OpenStore) -> None:
    chain = Chain(seed=3)
    first = chain.add("mission.created", ("group", chain.group, 1), {"mission": OTHER, "organization": OWNER})
    store = open_store()
    store.apply(first)
    reused = chain.forge(event_id=first["event_id"])
    with pytest.raises(ChainBroken, match="already applied"):
        store.apply(reused)
    assert store.cursor(chain.group).sequence == 1


def test_a_forged_waiting_event_loses_to_the_genuine_one(open_store: OpenStore) -> None:
    chain = Chain(seed=4)
    for _ in range(3):
        chain.add("group.snapshot_taken", ("group", chain.group, 1), {"sequence": 0})
    e = chain.events
    forged = copy.deepcopy(e[2])
    forged["event_id"] = chain.uuid()
    forged["prev_hash"] = "a" * 64
    forged["hash"] = event_hash(forged["prev_hash"], forged)
    store = open_store()
    store.apply(e[0])
    store.apply(forged)
    store.apply(e[2])
    assert store.apply(e[1]) == [2, 3]
    assert [x["event_id"] for x in store.inbox(chain.group)] == [x["event_id"] for x in e]


def test_a_waiting_event_that_breaks_the_chain_reports_what_was_applied(open_store: OpenStore) -> None:
    chain = Chain(seed=5)
    for _ in range(2):
        chain.add("group.snapshot_taken", ("group", chain.group, 1), {"sequence": 0})
    forged = chain.forge(sequence=3, prev_hash="b" * 64)
    store = open_store()
    store.apply(chain.events[0])
    store.apply(forged)
    with pytest.raises(ChainBroken) as info:
        store.apply(chain.events[1])
    assert info.value.applied == [2]
    assert store.cursor(chain.group).sequence == 2


def test_a_malformed_event_is_refused(open_store: OpenStore, small: tuple[World, list[Event]]) -> None:
    store = open_store()
    broken = copy.deepcopy(small[1][0])
    del broken["aggregate"]
    with pytest.raises(MalformedEvent):
        store.apply(broken)
    with pytest.raises(MalformedEvent):
        store.apply("not an event")
    assert store.ack_positions() == {}


# --- the file ------------------------------------------------------------------------------


def test_a_second_store_on_the_same_file_is_refused(open_store: OpenStore) -> None:
    open_store()
    with pytest.raises(StoreLocked):
        open_store()


def test_a_store_belongs_to_one_agent(open_store: OpenStore) -> None:
    open_store().close()
    with pytest.raises(StoreMismatch):
        open_store(agent=OTHER)


def test_the_store_runs_in_wal_mode_with_the_requested_sync(open_store: OpenStore) -> None:
    store = open_store(synchronous="NORMAL")
    assert rows(store, "PRAGMA journal_mode") == [("wal",)]
    assert rows(store, "PRAGMA synchronous") == [(1,)]  # NORMAL
    assert rows(open_store("other"), "PRAGMA synchronous") == [(2,)]  # FULL, the default


# --- the projection of a scripted Mission ----------------------------------------------------


def contract(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "goal": "Summarise the survey", "deliverables": ["summary.md"],
        "acceptance_criteria": [{"id": "complete", "description": "every response", "evidence_methods": ["test"]}],
        "inputs": [], "dependencies": [], "allowed": {"tools": [], "data": [], "operations": []}, "resources": {},
        "capabilities": [{"id": "summarize", "version": "1.0"}], "deadline": "2026-12-01T00:00:00.000000Z",
        "urgency": "high", "business_impact": "medium",
        "budgets": {"financial": 100, "tokens": None, "tool_calls": None, "compute_seconds": None,
                    "wall_clock_seconds": None, "side_effects": None},
        "retry": {"max_attempts": 3, "backoff_seconds": 0, "backoff_multiplier": 2, "deadline": None, "max_cost": None},
        "risk": {"class": "high", "requires_execution_approval": True}, "revision": 1,
    }  # fmt: skip
    base.update(overrides)
    return base


PROGRESS = {"phase": "drafting", "milestones": [], "next_checkpoint": None, "blockers": [], "estimate": None,
            "evidence": []}  # fmt: skip


def scripted() -> tuple[Chain, str, list[Event]]:
    """A Mission in which this Worker is offered, accepts, runs, checkpoints and loses its lease."""
    c = Chain(seed=9)
    g, item = c.group, c.uuid()
    mission = c.uuid()
    lease1, lease2 = c.uuid(), c.uuid()
    c.add(
        "mission.created",
        ("group", g, 1),
        {"mission": mission, "organization": OWNER, "title": "T", "objective": "O", "budgets": {}},
        actor=OWNER,
    )
    c.add("membership.added", ("group", g, 1), {"agent": OWNER, "roles": ["owner"], "membership_epoch": 1}, actor=OWNER)
    c.add("membership.added", ("group", g, 2), {"agent": ME, "roles": ["worker"], "membership_epoch": 1}, actor=OWNER)
    c.add("work.authorized", ("workitem", item, 1), {"workitem": item, "contract": contract(), "proposal": None})
    c.add(
        "work.offered",
        ("workitem", item, 2),
        {
            "agents": [OTHER, ME],
            "expires_at": "2026-11-29T11:00:00.000000Z",
            "selection_basis": {},
            "contract_revision": 1,
        },
        actor=OWNER,
    )
    c.add(
        "work.offer_declined", ("workitem", item, 2), {"agent": OTHER, "reason": "capacity", "detail": ""}, actor=OTHER
    )
    c.add(
        "work.offer_accepted",
        ("workitem", item, 3),
        {
            "agent": ME,
            "ownership_epoch": 1,
            "start_by": "2026-11-29T10:15:00.000000Z",
            "contract_revision": 1,
            "selection_basis": {},
            "withdrawn": [],
        },
    )
    c.add(
        "approval.execution_granted",
        ("workitem", item, 4),
        {"workitem": item, "contract_revision": 1, "note": ""},
        actor=OWNER,
    )
    c.add(
        "work.started",
        ("workitem", item, 5),
        {
            "agent": ME,
            "lease_id": lease1,
            "ownership_epoch": 1,
            "session_epoch": 1,
            "lease_expires_at": "2026-11-29T10:05:00.000000Z",
            "attempt": 1,
        },
    )
    c.add(
        "work.lease_renewed",
        ("workitem", item, 5),
        {"lease_id": lease1, "lease_expires_at": "2026-11-29T10:10:00.000000Z", "renewal": 1},
    )
    usage = {"delta": {"financial": 2.5, "tokens": 900}, "workitem_total": {"financial": 2.5, "tokens": 900}}
    c.add(
        "work.checkpointed",
        ("workitem", item, 6),
        {"lease_id": lease1, "checkpoint_number": 1, "checkpoint": {"step": 1}, "progress": PROGRESS, "usage": usage},
    )
    c.add(
        "work.started",
        ("workitem", item, 7),
        {
            "agent": ME,
            "lease_id": lease2,
            "ownership_epoch": 1,
            "session_epoch": 1,
            "lease_expires_at": "2026-11-29T10:20:00.000000Z",
            "attempt": 1,
        },
    )
    c.add("work.lease_revoked", ("workitem", item, 8), {"lease_id": lease2, "agent": ME, "reason": "session replaced"})
    checkpoint_seq = c.events[10]["sequence"]
    c.add(
        "event.redacted",
        ("group", g, 2),
        {"sequence": checkpoint_seq, "event_id": c.events[10]["event_id"], "reason": "personal data"},
        actor=OWNER,
    )
    return c, item, c.events


def test_the_projection_follows_a_scripted_mission(open_store: OpenStore) -> None:
    chain, item, events = scripted()
    store = open_store()
    seen: dict[str, Any] = {}
    for e in events:
        store.apply(e)
        (row,) = store.queue(chain.group) or [None]
        seen[f"{e['sequence']}:{e['type']}"] = row
    offered = seen["5:work.offered"]
    assert (offered.state, offered.revision, json.loads(offered.offered_to)) == ("offered", 2, [OTHER, ME])
    assert json.loads(seen["6:work.offer_declined"].offered_to) == [ME]
    queued = seen["7:work.offer_accepted"]
    assert (queued.state, queued.owner, queued.ownership_epoch, queued.start_by) == (
        "queued", ME, 1, "2026-11-29T10:15:00.000000Z"
    )  # fmt: skip
    assert queued.requires_approval and not queued.execution_approved
    assert seen["8:approval.execution_granted"].execution_approved is True
    active = seen["10:work.lease_renewed"]
    assert (active.state, active.lease_expires_at, active.attempt) == ("active", "2026-11-29T10:10:00.000000Z", 1)
    checkpointed = seen["11:work.checkpointed"]
    assert (checkpointed.state, checkpointed.lease_id, checkpointed.checkpoint_count) == ("queued", None, 1)
    assert json.loads(checkpointed.usage) == {"financial": 2.5, "tokens": 900}
    revoked = seen["13:work.lease_revoked"]
    assert (revoked.state, revoked.lease_id, revoked.needs_new_attempt) == ("queued", None, True)

    meta = store.meta(chain.group)
    assert meta is not None
    assert (meta.kind, meta.organization, meta.mission_status, meta.revision) == ("mission", OWNER, "active", 2)
    assert (json.loads(meta.my_roles or "[]"), meta.my_membership_epoch, meta.my_active) == (["worker"], 1, True)
    assert json.loads(meta.mission_usage or "{}") == {"financial": 2.5, "tokens": 900}
    assert json.loads(meta.redacted or "[]") == [11]

    (checkpoint,) = store.checkpoints(chain.group, item)
    assert (checkpoint.number, checkpoint.ownership_epoch, checkpoint.sequence) == (1, 1, 11)
    assert checkpoint.redacted and checkpoint.state is None  # the tombstone withdrew it (MWP-MSN-009)

    intents = [(o.kind, o.sequence) for o in store.pending_outbox()]
    assert intents == [("offer.respond", 5), ("schedule.disclose", 7), ("work.stop", 13)]


def test_dispatched_intents_leave_the_outbox_and_stay_done_after_a_rebuild(open_store: OpenStore) -> None:
    _, _, events = scripted()
    store = open_store()
    for e in events:
        store.apply(e)
    first = store.pending_outbox()[0]
    store.complete_outbox(first.intent_id, {"receipt": "accepted"})
    assert first not in store.pending_outbox()
    store.rebuild()
    assert first not in store.pending_outbox()
    assert len(store.pending_outbox()) == 2


def test_buffered_commands_are_runtime_state_a_rebuild_keeps(open_store: OpenStore) -> None:
    _, item, events = scripted()
    store = open_store()
    for e in events:
        store.apply(e)
    envelope = {"type": "work.checkpoint", "action_id": "00000000-0000-4000-8000-000000000001", "body": {}}
    binding = {"grace_deadline": "2026-11-29T10:30:00.000000Z"}
    command_id = store.buffer_command(events[0]["group"], item, envelope, binding)
    store.rebuild()
    assert store.buffered_commands() == [(command_id, envelope, binding)]
    store.drop_buffered_command(command_id)
    assert store.buffered_commands() == []


def test_an_event_type_this_worker_does_not_know_still_advances_the_cursor(open_store: OpenStore) -> None:
    chain, item, events = scripted()
    unknown = chain.add("artifact.published", ("workitem", item, 9), {"sha256": "0" * 64})
    foreign = chain.add("ext.example.noted", ("note", chain.uuid(), 1), {})
    store = open_store()
    for e in [*events, unknown, foreign]:
        store.apply(e)
    assert store.cursor(chain.group).sequence == foreign["sequence"]
    (row,) = store.queue(chain.group)
    assert (row.revision, row.state) == (9, "queued")  # the revision later compare-and-set needs


def test_a_workitem_event_before_its_authorization_is_refused(open_store: OpenStore) -> None:
    chain = Chain(seed=12)
    event = chain.add("work.started", ("workitem", chain.uuid(), 2), {"agent": ME, "lease_id": chain.uuid()})
    store = open_store()
    with pytest.raises(ProjectionError):
        store.apply(event)
    assert store.cursor(chain.group).sequence == 0
    assert rows(store, "SELECT count(*) FROM inbox") == [(0,)]


def test_another_process_may_read_while_the_worker_writes(open_store: OpenStore, tmp_path: Any) -> None:
    _, _, events = scripted()
    store = open_store()
    for e in events[:5]:
        store.apply(e)
    reader = sqlite3.connect(f"file:{tmp_path / 'worker.sqlite3'}?mode=ro", uri=True)
    try:
        assert reader.execute("SELECT max(sequence) FROM cursor").fetchone() == (5,)
        for e in events[5:]:
            store.apply(e)
        assert reader.execute("SELECT max(sequence) FROM cursor").fetchone() == (len(events),)
    finally:
        reader.close()
