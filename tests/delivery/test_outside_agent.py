"""An outside Agent written from the specification alone, on the WebSocket binding (issue 18, "Done when").

It completes the four-phase HELLO (PROTOCOL §6.3, DESIGN §5), SUBSCRIBEs to its
Organization's administrative Group from the start (§17.2, §16), sends a
COMMAND (§15.1), and verifies the Group Authority's signature over every Event
it receives (§15.2, §6.4) with the key ``GET /api/v0.1/keys/{keyId}`` serves.

It uses none of the portal's code: ``websockets``, ``urllib``, the standard
library's JSON written in the JCS form (RFC 8785: sorted members, no
whitespace; these documents hold only ASCII text and integers) and the
``cryptography`` package's Ed25519. Only the set-up (an admin registering
the Agent's public key) goes through the portal.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from websockets.asyncio.client import connect

from missions.commands import register_principal
from tests.delivery.conftest import Daphne
from tests.protocol.normative import normative_problems, require_bundle

pytestmark = pytest.mark.django_db(transaction=True)


def jcs(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def now(offset: float = 0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def frame(frame_type: str, **members: Any) -> str:
    return json.dumps(
        {"protocolVersion": "0.1", "frameId": f"urn:uuid:{uuid.uuid4()}", "frameType": frame_type, **members}
    )


class Verifier:
    """Verifies Event signatures with keys fetched from ``GET /api/v0.1/keys/{keyId}``."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.keys: dict[str, Ed25519PublicKey] = {}

    def key(self, key_id: str) -> Ed25519PublicKey:
        if key_id not in self.keys:
            with urllib.request.urlopen(f"{self.base}/api/v0.1/keys/{key_id}", timeout=10) as response:  # noqa: S310 (the test server, http)
                binding = json.load(response)
            assert binding["keyId"] == key_id and binding["principal"]["type"] == "service"
            self.keys[key_id] = Ed25519PublicKey.from_public_bytes(unb64(binding["publicKey"]))
        return self.keys[key_id]

    def verify(self, event: dict[str, Any]) -> None:
        signature = event["signature"]
        assert signature["createdAt"] == event["occurredAt"]
        body = {k: v for k, v in event.items() if k != "signature"}
        self.key(signature["keyId"]).verify(unb64(signature["value"]), jcs(body))  # raises InvalidSignature


def test_an_outside_agent_says_hello_subscribes_commands_and_verifies_every_event_spec_6_3_15_17(
    daphne: Daphne, org: dict[str, str]
) -> None:
    require_bundle()
    private = Ed25519PrivateKey.generate()
    public = b64(private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
    key_id = f"urn:uuid:{uuid.uuid4()}"
    binding = {"keyId": key_id, "algorithm": "Ed25519", "publicKey": public, "validFrom": now(-60)}
    agent_id, _ = register_principal("acme", "Olga Outside", "agent", ["admin"], binding)  # type: ignore[arg-type]
    agent = f"urn:uuid:{agent_id}"
    base = daphne.url.replace("ws://", "http://")

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
        async with connect(f"{daphne.url}/mwp/0.1", open_timeout=10) as ws:
            nonce = b64(os.urandom(32))
            await ws.send(
                frame(
                    "HELLO",
                    phase="client_init",
                    agentId=agent,
                    keyId=key_id,
                    clientNonce=nonce,
                    supportedVersions=["0.1"],
                )
            )
            challenge = json.loads(await ws.recv())
            assert (challenge["phase"], challenge["clientNonce"]) == ("server_challenge", nonce)
            signed = b64(private.sign(unb64(challenge["challenge"])))
            await ws.send(
                frame(
                    "HELLO", phase="client_response", agentId=agent, keyId=key_id, clientNonce=nonce,
                    serverNonce=challenge["serverNonce"], challengeSignature=signed,
                )
            )  # fmt: skip
            accepted = json.loads(await ws.recv())
            assert accepted["phase"] == "server_accept"
            request = urllib.request.Request(  # noqa: S310
                f"{base}/api/v0.1/memberships", headers={"Authorization": f"Bearer {accepted['sessionToken']}"}
            )
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (the test server, http)
                admin = json.load(response)["administrativeGroupId"]
            await ws.send(frame("SUBSCRIBE", subscriptionId=f"urn:uuid:{uuid.uuid4()}", groups=[
                {"groupId": admin, "afterSequence": 0}
            ]))  # fmt: skip
            command: dict[str, Any] = {
                "protocolVersion": "0.1",
                "actionId": f"urn:uuid:{uuid.uuid4()}",
                "actor": {"type": "agent", "id": agent},
                "kind": "ext.mwportal.scheduling.priority_policy_set",
                "correlationId": f"urn:uuid:{uuid.uuid4()}",
                "issuedAt": now(),
                "groupId": admin,
                "sessionEpoch": accepted["sessionEpoch"],
                "membershipEpoch": 1,
                "payload": {"policy": {"classes": {"normal": 3}, "default_class": "normal"}},
            }
            command["signature"] = {
                "algorithm": "Ed25519",
                "keyId": key_id,
                "createdAt": command["issuedAt"],
                "value": b64(private.sign(jcs(command))),
            }
            await ws.send(frame("COMMAND", command=command))
            events: list[dict[str, Any]] = []
            mine: dict[str, Any] | None = None
            while mine is None:
                received = json.loads(await asyncio.wait_for(ws.recv(), 10))
                assert received["frameType"] == "EVENT", received
                events.append(received["event"])
                if received["event"]["cause"]["id"] == command["actionId"]:
                    mine = received["event"]
            last = events[-1]
            await ws.send(
                frame("ACK", acknowledgements=[{"groupId": admin, "sequence": last["sequence"]}], sentAt=now())
            )
            return events, mine, command

    events, mine, command = asyncio.run(scenario())
    verifier = Verifier(base)
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    for event in events:
        assert normative_problems("event", event) == []
        verifier.verify(event)
    assert mine["kind"] == "ext.mwportal.scheduling.priority_policy_changed"
    assert mine["actor"] == command["actor"] and mine["correlationId"] == command["correlationId"]
    tampered = {**mine, "payload": {**mine["payload"], "policy": {"classes": {"normal": 9}}}}
    with pytest.raises(InvalidSignature):
        verifier.verify(tampered)
