"""The apply cycle (DESIGN §6; PROTOCOL §16): signed Event documents into the local store.

One local transaction per Event: skip a known Event, apply only the next
contiguous sequence, verify the Group Authority's signature (§6.4) and the
payload against the catalogue, fold, persist intents, advance the Cursor, commit.
"""

from __future__ import annotations

import copy
import json
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from mwportal.protocol.catalogue import PROJECT
from mwportal.protocol.catalogue import examples as ex
from mwworker import (
    ChainBroken,
    MalformedEvent,
    ProjectionError,
    SignatureRefused,
    Store,
    StoreLocked,
    StoreMismatch,
)
from tests.worker.streams import DROP, ME, Authority, Chain, Event, World, contract, payload

OpenStore = Callable[..., Store]
OTHER = "urn:uuid:00000000-0000-4000-8000-0000000000aa"
OWNER = "urn:uuid:00000000-0000-4000-8000-0000000000bb"


def group_events(events: list[Event], group: str) -> list[Event]:
    return [e for e in events if e["groupId"] == group]


def busiest_group(events: list[Event]) -> list[Event]:
    counts: dict[str, int] = {}
    for e in events:
        counts[e["groupId"]] = counts.get(e["groupId"], 0) + 1
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
    assert store.cursor(events[0]["groupId"]).sequence == 50
    assert store.cursor(events[0]["groupId"]).last_event_id == events[-1]["eventId"]
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
    group = e[0]["groupId"]
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
    group = e[0]["groupId"]
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
        expected[e["groupId"]] = e["sequence"]
    assert store.ack_positions() == dict(sorted(expected.items()))


def test_the_inbox_gives_back_the_signed_documents_as_received(
    open_store: OpenStore, small: tuple[World, list[Event]]
) -> None:
    events = busiest_group(small[1])[:40]
    store = open_store()
    for e in events:
        store.apply(e)
    assert list(store.inbox(events[0]["groupId"])) == events
    assert list(store.inbox(events[0]["groupId"], after=35)) == events[35:]


# --- signatures and positions ------------------------------------------------------------


def test_a_tampered_event_is_refused_and_nothing_is_written_spec_6_4(
    open_store: OpenStore, small: tuple[World, list[Event]]
) -> None:
    """The Group Authority's signature covers the whole document (§6.4): one
    changed member and the Event is refused before anything is written."""
    e = busiest_group(small[1])[:5]
    store = open_store()
    for event in e[:3]:
        store.apply(event)
    before = store.projection_dump()
    tampered = copy.deepcopy(e[3])
    tampered["occurredAt"] = "2026-11-29T23:59:59.000000Z"
    with pytest.raises(SignatureRefused):
        store.apply(tampered)
    assert store.projection_dump() == before
    assert store.cursor(e[0]["groupId"]).sequence == 3
    assert store.apply(e[3]) == [4]  # the genuine Event still applies


def test_an_event_signed_by_a_key_the_registry_does_not_hold_is_refused_spec_6_4(open_store: OpenStore) -> None:
    chain = Chain(seed=1)
    stranger = Authority.for_seed(999)  # its key is not in the Worker's Registry
    store = open_store()
    with pytest.raises(SignatureRefused):
        store.apply(chain.forge(key=stranger.key))
    assert store.cursor(chain.group).sequence == 0
    assert rows(store, "SELECT count(*) FROM inbox") == [(0,)]


def test_an_event_the_catalogue_refuses_is_refused_even_when_signed(open_store: OpenStore) -> None:
    """A signed Event of a catalogue kind whose payload its schema refuses is not folded (DESIGN §2)."""
    chain = Chain(seed=1)
    bad = chain.forge(kind="work.started", body={"workItemId": chain.uuid()})  # no lease
    store = open_store()
    with pytest.raises(MalformedEvent, match="catalogue refuses"):
        store.apply(bad)
    assert store.cursor(chain.group).sequence == 0


def test_a_different_event_at_an_applied_position_is_refused(open_store: OpenStore) -> None:
    chain = Chain(seed=2)
    chain.add("message.posted", {"messageId": chain.uuid(), "authority": False})
    store = open_store()
    store.apply(chain.events[0])
    fork = chain.forge(sequence=1)
    with pytest.raises(ChainBroken, match="claims the position"):
        store.apply(fork)


def test_an_event_id_reused_at_another_position_is_refused(open_store: OpenStore) -> None:
    chain = Chain(seed=3)
    first = chain.add("message.posted", {"messageId": chain.uuid(), "authority": False})
    store = open_store()
    store.apply(first)
    reused = chain.forge(sequence=2)
    reused = {**reused, "eventId": first["eventId"]}
    reused = Chain.resign(reused, chain.authority)
    with pytest.raises(ChainBroken, match="already applied"):
        store.apply(reused)
    assert store.cursor(chain.group).sequence == 1


def test_a_forged_waiting_event_loses_to_the_genuine_one(open_store: OpenStore) -> None:
    chain = Chain(seed=1)
    for _ in range(3):
        chain.add("message.posted", {"messageId": chain.uuid(), "authority": False})
    e = chain.events
    forged = {**copy.deepcopy(e[2]), "eventId": chain.uuid()}  # the signature no longer covers it
    store = open_store()
    store.apply(e[0])
    store.apply(forged)
    store.apply(e[2])
    assert store.apply(e[1]) == [2, 3]
    assert [x["eventId"] for x in store.inbox(chain.group)] == [x["eventId"] for x in e]


def test_a_waiting_event_that_fails_verification_reports_what_was_applied(open_store: OpenStore) -> None:
    chain = Chain(seed=2)
    for _ in range(2):
        chain.add("message.posted", {"messageId": chain.uuid(), "authority": False})
    forged = chain.forge(sequence=3, key=Authority.for_seed(998).key)
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
    del broken["groupId"]
    with pytest.raises(MalformedEvent):
        store.apply(broken)
    with pytest.raises(MalformedEvent):
        store.apply("not an event")
    assert store.ack_positions() == {}


def test_a_store_without_a_verifier_applies_nothing(open_store: OpenStore, small: tuple[World, list[Event]]) -> None:
    """Every Event is verified before it is applied (DESIGN §6): no verifier, no apply."""
    store = open_store(verifier=None)
    with pytest.raises(RuntimeError, match="EventVerifier"):
        store.apply(small[1][0])


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


def scripted() -> tuple[Chain, str, list[Event]]:
    """A Mission in which this Worker is offered, accepts, runs, checkpoints and loses its lease."""
    c = Chain(seed=1)
    g, item = c.group, c.uuid()
    mission, lease1, lease2 = c.uuid(), c.uuid(), c.uuid()
    work = contract(__import__("random").Random(1), approval=True)
    doc = {**ex.mission(), "missionId": mission, "groupId": g, "objective": "O"}
    c.add("mission.created", payload("mission.created", mission=doc, group={**ex.group(), "groupId": g,
                                                                            "missionId": mission}),
          actor=OWNER, aggregate="mission")  # fmt: skip
    member = {**ex.membership(), "groupId": g, "missionId": mission, "member": {"type": "agent", "id": ME}}
    c.add("membership.changed", payload("membership.changed", membership=member), aggregate="mission")
    item_doc = {**ex.work_item(), "workItemId": item, "groupId": g, "missionId": mission, "contract": work}
    c.add("work.authorized", payload("work.authorized", workItem=item_doc))
    c.add("work.offer.created", payload("work.offer.created", workItemId=item, candidateAgentIds=[OTHER, ME],
                                        offerExpiresAt="2026-11-29T11:00:00Z"))  # fmt: skip
    c.add(f"{PROJECT}.work.offer_declined", payload(f"{PROJECT}.work.offer_declined", workItemId=item,
                                                     agentId=OTHER, reason="capacity"), actor=OTHER)  # fmt: skip
    ownership = {**ex.lease("ownership"), "workItemId": item, "holderAgentId": ME, "startBy": "2026-11-29T10:15:00Z"}
    c.add("work.offer.accepted", payload("work.offer.accepted", workItemId=item, assigneeId=ME, ownershipEpoch=1,
                                         ownershipLease=ownership, contractVersion=1))  # fmt: skip
    approval = {**ex.approval("work_execution"), "workItemId": item}
    c.add("approval.execution.granted", payload("approval.execution.granted", approval=approval, contractVersion=1),
          actor=OWNER)  # fmt: skip
    lease = {**ex.lease(), "leaseId": lease1, "workItemId": item, "holderAgentId": ME}
    c.add("work.started", payload("work.started", workItemId=item, executionLease=lease,
                                  executionLeaseExpiresAt="2026-11-29T10:05:00Z", attempt=1))  # fmt: skip
    c.add("work.progressed", payload("work.progressed", workItemId=item, executionLease={**lease, "renewalCount": 1},
                                     executionLeaseExpiresAt="2026-11-29T10:10:00Z"))  # fmt: skip
    usage = "ext.missionweaveprotocol.core.resource_usage_recorded"
    c.add(usage, payload(usage, workItemId=item, executionLeaseId=lease1, usageDelta={"modelTokens": 900},
                         cumulativeUsage={"modelTokens": 900}))  # fmt: skip
    c.add("work.checkpointed", payload("work.checkpointed", workItemId=item, startBy="2026-11-29T10:30:00Z"))
    lease = {**lease, "leaseId": lease2}
    c.add("work.started", payload("work.started", workItemId=item, executionLease=lease,
                                  executionLeaseExpiresAt="2026-11-29T10:20:00Z"))  # fmt: skip
    revoked = "ext.missionweaveprotocol.core.work_execution_lease_revoked"
    c.add(revoked, payload(revoked, workItemId=item, executionLeaseId=lease2, sessionEpoch=DROP))
    redacted = f"{PROJECT}.audit.event_redacted"
    c.add(redacted, payload(redacted, sequence=c.events[10]["sequence"], eventId=c.events[10]["eventId"]),
          actor=OWNER, aggregate="group")  # fmt: skip
    return c, item, c.events


def test_the_projection_follows_a_scripted_mission(open_store: OpenStore) -> None:
    chain, item, events = scripted()
    store = open_store()
    seen: dict[str, Any] = {}
    for e in events:
        store.apply(e)
        (row,) = store.queue(chain.group) or [None]
        seen[f"{e['sequence']}:{e['kind']}"] = row
    offered = seen["4:work.offer.created"]
    assert (offered.state, offered.revision, json.loads(offered.offered_to)) == ("offered", 2, sorted([OTHER, ME]))
    assert json.loads(seen[f"5:{PROJECT}.work.offer_declined"].offered_to) == [ME]
    queued = seen["6:work.offer.accepted"]
    assert (queued.state, queued.owner, queued.ownership_epoch, queued.start_by) == (
        "queued", ME, 1, "2026-11-29T10:15:00Z"
    )  # fmt: skip
    assert queued.requires_approval and not queued.execution_approved
    assert seen["7:approval.execution.granted"].execution_approved is True
    active = seen["9:work.progressed"]
    assert (active.state, active.lease_expires_at, active.attempt, active.start_by) == (
        "active", "2026-11-29T10:10:00Z", 1, None
    )  # fmt: skip
    assert json.loads(seen["10:ext.missionweaveprotocol.core.resource_usage_recorded"].usage) == {"modelTokens": 900}
    checkpointed = seen["11:work.checkpointed"]
    assert (checkpointed.state, checkpointed.lease_id, checkpointed.checkpoint_count) == ("queued", None, 1)
    # The start-by deadline the checkpoint set travels in its payload (docs/protocol-choices.md).
    assert checkpointed.start_by == "2026-11-29T10:30:00Z"
    revoked = seen["13:ext.missionweaveprotocol.core.work_execution_lease_revoked"]
    assert (revoked.state, revoked.lease_id, revoked.needs_new_attempt) == ("queued", None, True)

    meta = store.meta(chain.group)
    assert meta is not None
    assert (meta.kind, meta.mission, meta.mission_status, meta.revision) == ("mission", events[0]["payload"][
        "mission"]["missionId"], "active", 2)  # fmt: skip
    assert (json.loads(meta.my_roles or "[]"), meta.my_membership_epoch, meta.my_active) == (["worker"], 1, True)
    assert json.loads(meta.mission_usage or "{}") == {"modelTokens": 900}
    assert json.loads(meta.redacted or "[]") == [11]

    (checkpoint,) = store.checkpoints(chain.group, item)
    assert (checkpoint.number, checkpoint.ownership_epoch, checkpoint.sequence) == (1, 1, 11)
    assert checkpoint.redacted and checkpoint.state is None  # the tombstone withdrew it

    intents = [(o.kind, o.sequence) for o in store.pending_outbox()]
    assert intents == [("offer.respond", 4), ("schedule.disclose", 6), ("work.stop", 13)]


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
    document = {"kind": "work.checkpoint", "actionId": "urn:uuid:00000000-0000-4000-8000-000000000001", "payload": {}}
    binding = {"graceDeadline": "2026-11-29T10:30:00Z"}
    command_id = store.buffer_command(events[0]["groupId"], item, document, binding)
    store.rebuild()
    assert store.buffered_commands() == [(command_id, document, binding)]
    store.drop_buffered_command(command_id)
    assert store.buffered_commands() == []


def test_a_kind_this_worker_does_not_fold_still_advances_the_cursor(open_store: OpenStore) -> None:
    chain, item, events = scripted()
    revision = events[12]["aggregateRevision"]  # the WorkItem's, at its lease revocation
    chain.add("artifact.published", payload("artifact.published", artifact={
        **ex.artifact(), "workItemId": item}), aggregate=item)  # fmt: skip
    foreign = chain.forge(kind="ext.example.notes.noted", body={}, sequence=len(chain.events) + 1)
    chain.events.append(foreign)
    store = open_store()
    for e in events:
        store.apply(e)
    assert store.cursor(chain.group).sequence == foreign["sequence"]
    (row,) = store.queue(chain.group)
    # artifact.published is about the Artifact aggregate: the WorkItem's revision stays.
    assert (row.revision, row.state) == (revision, "queued")


def test_a_workitem_event_before_its_authorization_is_refused(open_store: OpenStore) -> None:
    chain = Chain(seed=2)
    event = chain.add("work.offer.created", payload("work.offer.created", workItemId=chain.uuid()))
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
