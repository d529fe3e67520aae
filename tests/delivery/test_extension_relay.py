"""A noncritical extension no one here understands is kept and relayed byte-equivalently on ``/mwp/0.1``
(PROTOCOL §18: a noncritical extension nobody recognises may be kept and passed on uninterpreted; §21: such
an extension is passed on byte for byte so the canonical relay stays intact).
The REST side is ``tests/governance/test_extension_profiles.py``."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from mwportal.protocol import jcs
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey
from tests.delivery.conftest import Client, Daphne, in_db_thread
from tests.delivery.test_agent_socket import head
from tests.workitems.flow import contract

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "urn:example:unregistered-hint"
VALUE = {"version": "3.1.0", "critical": False, "data": {"ünïcode": "Zürich ✓", "n": [1, 2.5], "z": None}}


def test_websocket_delivery_relays_a_noncritical_extension_byte_for_byte_18_21(
    daphne: Daphne, mission: dict[str, str], worker: AgentKey, worker2: AgentKey
) -> None:
    g = mission["group"]
    top = head(g)

    async def scenario() -> str:
        listener = await Client.open(daphne, worker2)
        await listener.subscribe(g, top)
        sender = await Client.open(daphne, worker)
        payload = {"proposalId": urn(uuid.uuid4()), "contract": contract()}
        document = await in_db_thread(lambda: worker.command("work.propose", g, payload, extensions={NAME: VALUE}))
        await sender.command(document)
        deadline = asyncio.get_running_loop().time() + 20
        while True:
            text = await asyncio.wait_for(listener.ws.recv(), deadline - asyncio.get_running_loop().time())
            assert isinstance(text, str)
            frame: dict[str, Any] = json.loads(text)
            if frame["frameType"] == "EVENT" and frame["event"]["kind"] == "work.proposed":
                await listener.close()
                await sender.close()
                return text

    text = asyncio.run(scenario())
    exact = jcs.canonicalize({NAME: VALUE})[1:-1]  # the member's canonical bytes, as the signed Command has them
    assert exact in text.encode("utf-8")
    assert json.loads(text)["event"]["extensions"] == {NAME: VALUE}
