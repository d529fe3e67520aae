"""A Presence Record is never an acceptance or a lease renewal (PROTOCOL §6.2: presence, above all an
out-of-date one, neither accepts an assignment nor renews a lease).

A Worker reports itself online with free slots in a PING on ``/mwp/0.1`` while it holds an offer and an
Execution Lease. The offer stays unaccepted and the lease keeps its expiry, and the beat expires the lease
on time; only ``work.accept_offer`` accepts and only the lease renewal Command renews (the positive side).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine

from mwportal.protocol import frames
from mwportal.protocol.command import format_timestamp
from tests.conftest import AgentKey
from tests.delivery.conftest import Client, Daphne, in_db_thread
from tests.workitems.flow import Flow, survey_mission
from workitems.models import ExecutionLease, WorkItem
from workitems.tasks import expire_leases

pytestmark = pytest.mark.django_db(transaction=True)


def presence_of(agent: AgentKey, *, age: timedelta) -> dict[str, Any]:
    """The Agent's Presence Record as of ``age`` ago: online, every slot free."""
    heartbeat = datetime.now(UTC) - age
    return {
        "agentId": agent.urn,
        "sessionEpoch": agent.session_epoch,
        "status": "online",
        "capacity": {"maxSlots": 4, "activeSlots": 0, "availableSlots": 4, "queuedItems": 0},
        "capabilityAvailability": [],
        "lastHeartbeat": format_timestamp(heartbeat),
        "expiresAt": format_timestamp(heartbeat + timedelta(seconds=60)),
    }


def lease_of(item_id: str) -> ExecutionLease:
    return ExecutionLease.objects.get(workitem_id=item_id, status="active")


@pytest.mark.parametrize("age", [timedelta(hours=2), timedelta(seconds=0)], ids=["stale", "fresh"])
def test_a_presence_record_is_never_an_acceptance_nor_a_lease_renewal_6_2(
    daphne: Daphne, owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey, age: timedelta
) -> None:
    flow = Flow(survey_mission(owner, coordinator, [worker, worker2]), owner, coordinator, worker, worker2)

    async def scenario() -> tuple[str, str, datetime]:
        # The HELLO opens the Worker's session first: a later session would fence its leases (§6.3).
        client = await Client.open(daphne, worker)
        offered = await in_db_thread(flow.drive_to, "offered")
        active = await in_db_thread(flow.drive_to, "active")
        expiry = await in_db_thread(lambda: lease_of(active).expires_at)
        ping = frames.ping(presence=presence_of(worker, age=age))
        await client.send(ping)
        while (frame := await client.recv())["frameType"] != "PING":
            pass
        assert frame["replyToNonce"] == ping["nonce"]
        await client.close()
        return offered, active, expiry

    offered, active, expiry = asyncio.run(scenario())
    item = WorkItem.objects.get(id=offered)
    assert (item.state, item.owner_id) == ("offered", None)  # no acceptance
    assert lease_of(active).expires_at == expiry  # no renewal
    with time_machine.travel(expiry + timedelta(seconds=1)):
        assert expire_leases() == 1  # the lease lapses on time, whatever the Worker reported
    assert not ExecutionLease.objects.filter(workitem_id=active, status="active").exists()


def test_only_the_commands_accept_and_renew_6_2(
    owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey, transactional_db: None
) -> None:
    flow = Flow(survey_mission(owner, coordinator, [worker, worker2]), owner, coordinator, worker, worker2)
    offered = flow.drive_to("offered")
    flow.accept(offered)
    assert WorkItem.objects.get(id=offered).state == "queued"
    active = flow.drive_to("active")
    before = lease_of(active).expires_at
    with time_machine.travel(before - timedelta(seconds=30)):
        flow.renew(active)
    assert lease_of(active).expires_at > before
