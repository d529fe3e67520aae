"""Real threads against PostgreSQL (STYLE §5): the Group row lock serialises appends, compare-and-set
picks exactly one winner, a retried Command is accepted once, and concurrent sessions of one Agent get
one epoch each (PROTOCOL §6.3, §15.1, §15.2, §15.3)."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from typing import Any

import pytest
from django.db import connection

from missions.commands import open_session
from missions.models import Agent, AgentSession, Group, GroupEvent, Organization
from missions.verify import verify_group_log
from mwportal.protocol import ErrorCode, ProtocolError
from tests.conftest import ON_POSTGRES, AgentKey, group_revision, make_person
from tests.core.test_missions_and_memberships import create_mission, with_card

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="races need PostgreSQL row locks (MWP_DATABASE_URL=postgres://...)"),
    pytest.mark.django_db(transaction=True),
]


def run_threads(n: int, work: Any) -> list[Any]:
    """Run ``work(i)`` in ``n`` threads released together; results or exceptions."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def body(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        except Exception as exc:  # collected and asserted on by the test
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def test_sixteen_threads_append_to_one_group_without_gap_or_duplicate_PROTOCOL_15_2(org: dict[str, str]) -> None:
    """Sixteen people set the priority policy twelve times each: 192 Events, sequences without a gap,
    and the policy's revision moved once per Event, in the Group's order."""
    people = [make_person("acme", f"racer-{i}", ["mission_owner"]) for i in range(16)]
    per_thread = 12
    admin = org["admin_group"]
    kind = "ext.mwportal.scheduling.priority_policy_set"

    def work(i: int) -> int:
        for k in range(per_thread):
            policy = {"classes": {f"c{i}": k + 1}, "default_class": f"c{i}"}
            people[i].send(kind, admin, {"policy": policy})
            # Back to the pool after each Command, as a request ends: sixteen threads share
            # MWP_DB_POOL_MAX connections, and one kept for twelve Commands starves the others.
            connection.close()
        return per_thread

    results = run_threads(16, work)
    assert results == [per_thread] * 16
    group = Group.objects.get(id=admin)
    rows = GroupEvent.objects.filter(group=group).order_by("sequence")
    assert list(rows.values_list("sequence", flat=True)) == list(range(1, group.last_sequence + 1))
    changed = [
        body["revision"] for body in rows.filter(type=kind.replace("_set", "_changed")).values_list("body", flat=True)
    ]
    assert changed == list(range(1, 16 * per_thread + 1))
    assert Organization.objects.get(id=org["id"]).policy_revision == 16 * per_thread
    count, broken = verify_group_log(group)
    assert broken is None and count == group.last_sequence


def test_eight_threads_racing_one_cas_command_exactly_one_wins_PROTOCOL_15_3(
    owner: AgentKey, coordinator: AgentKey, worker: AgentKey
) -> None:
    g, _, _ = create_mission(owner, with_card(coordinator))
    revision = group_revision(g)
    head = Group.objects.get(id=g).last_sequence
    roles = [["worker"], ["reviewer"], ["observer"], ["worker", "reviewer"]]

    def work(i: int) -> dict[str, Any]:
        return owner.send(
            "membership.change",
            g,
            {"principal": worker.actor, "roles": roles[i % 4]},
            expected_revision=revision,
            action_id=str(uuid.uuid4()),
        )

    results = run_threads(8, work)
    winners = [r for r in results if isinstance(r, dict)]
    losers = [r for r in results if isinstance(r, ProtocolError)]
    assert len(winners) == 1, results
    assert Counter(e.code for e in losers) == Counter({ErrorCode.REVISION_CONFLICT: 7})
    group = Group.objects.get(id=g)
    assert (group.revision, group.last_sequence) == (revision + 1, head + len(winners[0]["events"]))


def test_same_command_from_eight_threads_is_accepted_once_PROTOCOL_15_1(
    owner: AgentKey, coordinator: AgentKey, worker: AgentKey
) -> None:
    """Concurrent retries of one signed document: one acceptance, seven replays of its receipt."""
    g, _, _ = create_mission(owner, with_card(coordinator))
    document = owner.command(
        "membership.change",
        g,
        {"principal": worker.actor, "roles": ["reviewer"]},
        expected_revision=group_revision(g),
    )
    head = Group.objects.get(id=g).last_sequence
    results = run_threads(8, lambda i: owner.send_document(document))
    assert all(isinstance(r, dict) for r in results), results
    assert sorted(r["replayed"] for r in results) == [False] + [True] * 7
    assert len({r["events"][0]["eventId"] for r in results}) == 1
    assert Group.objects.get(id=g).last_sequence == head + 1


def test_eight_concurrent_sessions_of_one_agent_get_one_epoch_each_PROTOCOL_6_3(worker: AgentKey) -> None:
    """Each session_open issues the next epoch and fences every older one: eight epochs, one live session."""
    start = Agent.objects.get(id=worker.id).session_epoch
    results = run_threads(8, lambda i: open_session(worker.id))
    assert all(isinstance(r, tuple) for r in results), results
    assert sorted(epoch for _, epoch in results) == list(range(start + 1, start + 9))
    live = AgentSession.objects.filter(agent_id=worker.id, revoked_at__isnull=True)
    assert list(live.values_list("epoch", flat=True)) == [start + 8]
    assert Agent.objects.get(id=worker.id).session_epoch == start + 8
