"""A Presence Record never makes a Worker eligible (PROTOCOL §6.1, §6.2).

§6.2: an out-of-date Presence Record counts neither as accepting an assignment nor as renewing a lease; §6.1:
claiming a capability does not by itself make an Agent trusted. A Worker reports itself online with
free slots and the capability ``available`` in a PING on ``/mwp/0.1``, as of two hours ago (stale) or now; its
Organization-signed Agent Card does not verify the capability, so its acceptance is refused either way and
nothing is owned. Only a card the Registry registers with the capability makes the same acceptance succeed.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from missions.handlers.sessions import capability, issue_agent_card
from mwportal.protocol import ErrorCode, frames
from mwportal.protocol.command import format_timestamp
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey, Because, add_member, make_agent, refused
from tests.delivery.conftest import Client, Daphne
from tests.workitems.flow import CAPABILITY, Flow, survey_mission
from workitems.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


def presence_claiming(agent: AgentKey, *, age: timedelta) -> dict[str, Any]:
    heartbeat = datetime.now(UTC) - age
    return {
        "agentId": agent.urn,
        "sessionEpoch": agent.session_epoch,
        "status": "online",
        "capacity": {"maxSlots": 4, "activeSlots": 0, "availableSlots": 4, "queuedItems": 0},
        "capabilityAvailability": [{"capability": CAPABILITY, "status": "available"}],
        "lastHeartbeat": format_timestamp(heartbeat),
        "expiresAt": format_timestamp(heartbeat + timedelta(seconds=60)),
    }


@pytest.mark.parametrize("age", [timedelta(hours=2), timedelta(seconds=0)], ids=["stale", "fresh"])
def test_presence_claiming_a_capability_is_no_eligibility_6_1_6_2(
    daphne: Daphne, owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey, age: timedelta
) -> None:
    claimant = make_agent("acme", "Pam Presence", ["worker"])
    issue_agent_card(claimant.id, [capability("text.translate", "1.0.0", verified_evidence=[urn(uuid.uuid4())])])
    flow = Flow(survey_mission(owner, coordinator, [worker, worker2]), owner, coordinator, worker, worker2)
    add_member(owner, flow.group, claimant, ["worker"])
    item = flow.drive_to("open")
    flow.offer(item, agents=[claimant])

    async def report() -> None:
        client = await Client.open(daphne, claimant)
        ping = frames.ping(presence=presence_claiming(claimant, age=age))
        await client.send(ping)
        while (frame := await client.recv())["frameType"] != "PING":
            pass
        assert frame["replyToNonce"] == ping["nonce"]
        await client.close()

    asyncio.run(report())
    refused(Because(ErrorCode.AUTH_FORBIDDEN, "capability-not-verified"), flow.accept, item, claimant)
    assert (WorkItem.objects.get(id=item).state, WorkItem.objects.get(id=item).owner_id) == ("offered", None)
    # The Organization's card, not the presence, is what makes the Worker eligible.
    issue_agent_card(claimant.id, [capability("text.summarize", "1.0.0", verified_evidence=[urn(uuid.uuid4())])])
    flow.accept(item, claimant)
    assert str(WorkItem.objects.get(id=item).owner_id) == claimant.id
