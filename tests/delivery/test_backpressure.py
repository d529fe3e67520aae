"""Per-Group BACKPRESSURE on ``/mwp/0.1`` (PROTOCOL §17.3, §8: a noisy Group must not starve another).

The daphne under test bounds each Group of a connection to ``WINDOW`` Events
sent and not acknowledged. One Group is flooded toward a consumer that
takes ``SLOW_S`` per Event of it; another Group on the same connection gets
an Event now and then. Without the bound the flood's whole backlog would sit
in the connection ahead of the quiet Group's Events (seconds); with it, at
most a window of them does.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from missions.feed import Cursor
from mwportal.protocol import frames
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey, make_agent
from tests.delivery.conftest import Client, Daphne, in_db_thread
from tests.delivery.test_agent_socket import POLICY, churn, head, policy_payload
from tests.protocol.normative import require_bundle

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW = 8
RETRY_MS = 200
FLOOD = 120
QUIET = 8
SLOW_S = 0.05


IN_FLIGHT = 1
SENDERS = 8


@pytest.fixture
def daphne_env() -> dict[str, str | None]:
    return {
        "MWP_WS_GROUP_WINDOW": str(WINDOW),
        "MWP_WS_BACKPRESSURE_RETRY_MS": str(RETRY_MS),
        # The Commands of the daphne under test: one at a time, no wait for a slot.
        "MWP_MAX_INFLIGHT_COMMANDS": str(IN_FLIGHT),
        "MWP_BACKPRESSURE_WAIT_MS": "0",
        "MWP_BACKPRESSURE_RETRY_AFTER_MS": "50",
    }


def test_a_flooded_group_is_paused_while_another_keeps_its_latency_spec_17_3(
    daphne: Daphne,
    mission: dict[str, str],
    org: dict[str, str],
    owner: AgentKey,
    worker: AgentKey,
    worker2: AgentKey,
    planner: AgentKey,
) -> None:
    require_bundle()
    noisy, quiet = mission["group"], org["admin_group"]
    sent_at: dict[str, float] = {}

    def flood() -> None:
        from django.db import connection

        try:
            churn(owner, noisy, worker2, FLOOD)
        finally:
            connection.close()

    def trickle() -> None:
        from django.db import connection

        try:
            for _ in range(QUIET):
                time.sleep(0.25)
                doc = planner.command(POLICY, quiet, policy_payload())
                planner.send_document(doc)
                sent_at[doc["actionId"]] = time.monotonic()
        finally:
            connection.close()

    async def scenario() -> tuple[list[int], list[float], list[dict[str, Any]]]:
        client = await Client.open(daphne, worker)
        start_noisy, start_quiet = await in_db_thread(head, noisy), await in_db_thread(head, quiet)
        await client.send(frames.subscribe([(urn(noisy), start_noisy), (urn(quiet), start_quiet)]))
        threads = [threading.Thread(target=flood), threading.Thread(target=trickle)]
        for thread in threads:
            thread.start()
        noisy_seen: list[int] = []
        latencies: list[float] = []
        pauses: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        try:
            while len(latencies) < QUIET or len(noisy_seen) < FLOOD:
                assert time.monotonic() < deadline, (len(noisy_seen), len(latencies))
                frame = await client.recv(timeout=30)
                if frame["frameType"] == "ERROR":
                    pauses.append(frame["error"])
                    continue
                event = frame["event"]
                if event["groupId"] == urn(quiet):
                    # sent_at is written just after the commit returns: wait for it.
                    while event["cause"]["id"] not in sent_at:
                        await asyncio.sleep(0.001)
                    latencies.append(time.monotonic() - sent_at[event["cause"]["id"]])
                    await client.send(frames.ack([(urn(quiet), event["sequence"])]))
                    continue
                noisy_seen.append(event["sequence"])
                await asyncio.sleep(SLOW_S)  # the slow part of this consumer
                await client.send(frames.ack([(urn(noisy), event["sequence"])]))
        finally:
            for thread in threads:
                thread.join()
            await client.close()
        assert noisy_seen[0] == start_noisy + 1
        return noisy_seen, latencies, pauses

    noisy_seen, latencies, pauses = asyncio.run(scenario())
    # The flooded Group lost nothing and kept its order ...
    assert noisy_seen == list(range(noisy_seen[0], noisy_seen[0] + FLOOD))
    # ... was paused, and told so, with retry guidance, for that Group only ...
    assert pauses, "the flooded Group was never paused"
    for pause in pauses:
        assert pause["code"] == "BACKPRESSURE" and pause["retryable"] is True
        assert pause["groupId"] == pause["details"]["groupId"] == urn(noisy)
        assert pause["retryAfterMs"] == pause["details"]["retryAfterMs"] == RETRY_MS
    # ... while the quiet Group's Events kept arriving promptly: behind at
    # most a window of the flood (WINDOW * SLOW_S), never its backlog.
    assert len(latencies) == QUIET
    assert max(latencies) < 1.0, latencies


def test_a_window_pauses_at_its_bound_and_an_ack_of_half_resumes_it_spec_17_3() -> None:
    """The feed core's bound (``missions.feed.Cursor``), by plain calls."""
    cursor = Cursor("g", 0, window=4)
    events = [{"sequence": s} for s in range(1, 11)]
    batch = cursor.unsent(events)
    assert [e["sequence"] for e in batch] == [1, 2, 3, 4]
    assert cursor.delivered(batch, True) and cursor.paused
    assert cursor.unsent(events) == []
    assert not cursor.ack(1)  # three still in flight: more than half the window
    assert cursor.ack(2) and not cursor.paused
    assert [e["sequence"] for e in cursor.unsent(events)] == [5, 6]


def test_events_a_filter_leaves_out_take_no_room_in_the_window_spec_17_2() -> None:
    cursor = Cursor("g", 0, window=2, wants=lambda e: e["sequence"] % 3 == 0)
    events = [{"sequence": s} for s in range(1, 11)]
    batch = cursor.unsent(events)
    # 3 and 6 are wanted and fill the window; the others up to 9, the next
    # wanted one, ride along and only move the position.
    assert [e["sequence"] for e in batch] == [1, 2, 3, 4, 5, 6, 7, 8]
    cursor.delivered(batch, True)
    assert list(cursor.in_flight) == [3, 6] and cursor.paused
    assert cursor.resume() and not cursor.paused and not cursor.in_flight


def test_commands_past_the_bound_in_flight_get_backpressure_and_a_retry_is_accepted_spec_19(
    daphne: Daphne, org: dict[str, str]
) -> None:
    """The socket's COMMAND frames share the process's bound with the REST
    binding (issue 16 item 9): past it, BACKPRESSURE naming the Command, with
    retry guidance, before any database work; the same Command sent again
    later is accepted (§19: retryable, unchanged)."""
    require_bundle()
    admin = org["admin_group"]
    senders = [make_agent("acme", f"Admin {i}", ["admin"]) for i in range(SENDERS)]
    top = head(admin)

    async def one(agent: AgentKey, client: Client) -> tuple[int, list[dict[str, Any]]]:
        document = await in_db_thread(lambda: agent.command(POLICY, admin, policy_payload()))
        refusals: list[dict[str, Any]] = []
        await client.command(document)
        while True:
            frame = await client.recv(timeout=30)
            if frame["frameType"] == "EVENT" and frame["event"]["cause"]["id"] == document["actionId"]:
                return len(refusals), refusals
            if frame["frameType"] == "ERROR":
                assert frame["error"]["relatedActionId"] == document["actionId"], frame
                refusals.append(frame["error"])
                await asyncio.sleep(frame["error"]["retryAfterMs"] / 1000)
                await client.command(document)  # the same Command, unchanged

    async def scenario() -> list[tuple[int, list[dict[str, Any]]]]:
        clients = [await Client.open(daphne, agent) for agent in senders]
        for client in clients:
            await client.subscribe(admin, top)
        await asyncio.gather(*(c.send(frames.ping()) for c in clients))
        for client in clients:  # frames are handled in order: every one is subscribed
            assert (await client.recv())["frameType"] == "PING"
        try:
            return await asyncio.gather(*(one(a, c) for a, c in zip(senders, clients, strict=True)))
        finally:
            for client in clients:
                await client.close()

    results = asyncio.run(scenario())
    refusals = [r for _, rs in results for r in rs]
    assert refusals, "no Command was ever shed"
    assert {(r["code"], r["retryable"], r["retryAfterMs"]) for r in refusals} == {("BACKPRESSURE", True, 50)}
    assert head(admin) == top + SENDERS  # every Command accepted once, none twice
