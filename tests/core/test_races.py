"""Real threads against PostgreSQL (STYLE §5): the Group row lock serialises
appends, compare-and-set picks exactly one winner (MWP-EVT-005, MWP-EVT-007)."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from typing import Any

import pytest
from django.db import connection

from missions.models import Group, GroupEvent
from missions.verify import verify_group_log
from mwportal.protocol import ErrorCode, ProtocolError
from tests.conftest import ON_POSTGRES, AgentKey, group_revision, make_agent

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


def test_sixteen_threads_append_to_one_group_without_gap_or_duplicate_MWP_EVT_005(org: dict[str, str]) -> None:
    agents = [make_agent("acme", f"racer-{i}", ["worker"]) for i in range(16)]
    per_thread = 12
    admin = org["admin_group"]

    def work(i: int) -> int:
        for k in range(per_thread):
            agents[i].send(
                "agent_card.publish", admin, {"capabilities": [{"id": f"c{k}", "version": "1"}], "max_concurrency": 1}
            )
        return per_thread

    results = run_threads(16, work)
    assert results == [per_thread] * 16
    group = Group.objects.get(id=admin)
    sequences = list(GroupEvent.objects.filter(group=group).order_by("sequence").values_list("sequence", flat=True))
    assert sequences == list(range(1, group.last_sequence + 1))
    published = GroupEvent.objects.filter(group=group, type="agent_card.published").count()
    assert published == 16 * per_thread
    count, broken = verify_group_log(group)
    assert broken is None and count == group.last_sequence


def test_eight_threads_racing_one_cas_command_exactly_one_wins_MWP_EVT_007(
    mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]
    revision = group_revision(g)
    head = Group.objects.get(id=g).last_sequence
    roles = [["worker"], ["reviewer"], ["worker", "reviewer"], ["coordinator"]]

    def work(i: int) -> dict[str, Any]:
        return owner.send(
            "membership.set_roles",
            g,
            {"agent": worker.id, "roles": roles[i % 4]},
            target={"kind": "group", "id": g, "revision": revision},
            action_id=str(uuid.uuid4()),
        )

    results = run_threads(8, work)
    winners = [r for r in results if isinstance(r, dict)]
    losers = [r for r in results if isinstance(r, ProtocolError)]
    assert len(winners) == 1, results
    assert Counter(e.code for e in losers) == Counter({ErrorCode.REVISION_CONFLICT: 7})
    group = Group.objects.get(id=g)
    assert (group.revision, group.last_sequence) == (revision + 1, head + 1)


def test_same_command_from_eight_threads_is_accepted_once_MWP_EVT_003(
    mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    """Concurrent retries of one Command: one acceptance, seven replays of its receipt."""
    from missions.authority import Auth, Command, accept
    from mwportal.protocol import parse_envelope

    g = mission["group"]
    raw = owner.envelope(
        "membership.set_roles",
        g,
        {"agent": worker.id, "roles": ["reviewer"]},
        target={"kind": "group", "id": g, "revision": group_revision(g)},
    )
    head = Group.objects.get(id=g).last_sequence
    results = run_threads(8, lambda i: accept(Command(parse_envelope(raw), Auth.SIGNED)))
    assert all(isinstance(r, dict) for r in results), results
    assert sorted(r["replayed"] for r in results) == [False] + [True] * 7
    assert len({r["events"][0]["event_id"] for r in results}) == 1
    assert Group.objects.get(id=g).last_sequence == head + 1
