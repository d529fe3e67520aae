"""An outside client written from the specification alone (issue 18, "Done when"), on the REST binding
(DESIGN §5): it completes the HELLO (§6.3), sends a signed Command (§15.1) with the epochs the
Authority issued, finds the Event its Command caused (§15.2) and verifies the Group Authority's
signature over it with the key ``GET /api/v0.1/keys/{keyId}`` serves (§6.4).

It uses none of the portal's code: plain HTTP, the standard library's JSON written in the JCS form
(RFC 8785: sorted members, no whitespace; these documents hold no floating-point numbers) and the
``cryptography`` package's Ed25519.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from mwportal.protocol import catalogue
from tests.api.support import http, normative
from tests.conftest import AgentKey

API = "/api/v0.1"


def jcs(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def call(method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
    client = http()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    if body is None:
        response = getattr(client, method)(path, **headers)
    else:
        response = getattr(client, method)(path, json.dumps(body), content_type="application/json", **headers)
    return response.status_code, response.json()


def signed(document: dict[str, Any], key: Ed25519PrivateKey, key_id: str, created_at: str) -> dict[str, Any]:
    """§6.4: the signature covers the JCS bytes of the document without its top-level ``signature``."""
    value = key.sign(jcs(document))
    return {
        **document,
        "signature": {"algorithm": "Ed25519", "keyId": key_id, "createdAt": created_at, "value": b64(value)},
    }


def verify(document: dict[str, Any]) -> dict[str, Any]:
    """The signer's key binding, after checking the document's signature with it."""
    signature = document["signature"]
    status, binding = call("get", f"{API}/keys/{signature['keyId']}")
    assert status == 200, binding
    body = {k: v for k, v in document.items() if k != "signature"}
    Ed25519PublicKey.from_public_bytes(unb64(binding["publicKey"])).verify(unb64(signature["value"]), jcs(body))
    return binding  # type: ignore[no-any-return]


def test_an_outside_client_says_hello_commands_and_verifies_what_it_caused_spec_6_3_15_1_15_2(
    mission: dict[str, str], worker: AgentKey
) -> None:
    # Its key: the one the Organization registered for it (here the test persona's seed).
    key = Ed25519PrivateKey.from_private_bytes(worker.key.seed)
    agent_id, key_id = worker.urn, worker.key.key_id

    # HELLO (§6.3): client_init -> server_challenge -> client_response -> server_accept.
    client_nonce = b64(os.urandom(32))
    init = {
        "protocolVersion": "0.1", "frameId": f"urn:uuid:{uuid.uuid4()}", "frameType": "HELLO",
        "phase": "client_init", "agentId": agent_id, "keyId": key_id, "clientNonce": client_nonce,
        "supportedVersions": ["0.1"],
    }  # fmt: skip
    status, challenge = call("post", f"{API}/sessions/challenge", init)
    assert status == 200, challenge
    normative("websocket-frame", challenge)
    transcript = unb64(challenge["challenge"])
    members = json.loads(transcript)
    assert (members["agentId"], members["keyId"], members["clientNonce"]) == (agent_id, key_id, client_nonce)
    response = {
        "protocolVersion": "0.1", "frameId": f"urn:uuid:{uuid.uuid4()}", "frameType": "HELLO",
        "phase": "client_response", "agentId": agent_id, "keyId": key_id, "clientNonce": client_nonce,
        "serverNonce": challenge["serverNonce"], "challengeSignature": b64(key.sign(transcript)),
    }  # fmt: skip
    status, accepted = call("post", f"{API}/sessions", response)
    assert status == 201, accepted
    normative("websocket-frame", accepted)
    token, session_epoch = accepted["sessionToken"], accepted["sessionEpoch"]

    # Its Membership in the Mission's Group, and the epoch to cite.
    status, memberships = call("get", f"{API}/memberships", token=token)
    assert status == 200, memberships
    (membership,) = [m for m in memberships["memberships"] if m["groupId"] == f"urn:uuid:{mission['group']}"]

    # A Command (§15.1), its payload as the catalogue describes it.
    status, cat = call("get", f"{API}/catalogue")
    assert status == 200 and "work.propose" in cat["commands"], cat
    contract = {
        **catalogue.command("work.propose").examples[0]["contract"],
        "deadline": (datetime.now(UTC) + timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    action_id, issued_at = f"urn:uuid:{uuid.uuid4()}", now()
    command = signed(
        {
            "protocolVersion": "0.1", "actionId": action_id, "actor": {"type": "agent", "id": agent_id},
            "kind": "work.propose", "groupId": membership["groupId"], "correlationId": action_id,
            "issuedAt": issued_at, "sessionEpoch": session_epoch, "membershipEpoch": membership["membershipEpoch"],
            "payload": {"proposalId": f"urn:uuid:{uuid.uuid4()}", "contract": contract},
        },
        key, key_id, issued_at,
    )  # fmt: skip
    status, receipt = call("post", f"{API}/commands", command)
    assert status == 201, receipt
    assert receipt["actionId"] == action_id and receipt["replayed"] is False

    # The Events it caused, read and verified (§15.2, §6.4).
    first = min(ref["sequence"] for ref in receipt["events"])
    status, page = call("get", f"{API}/groups/{membership['groupId']}/events?afterSequence={first - 1}", token=token)
    assert status == 200, page
    caused = [e for e in page["events"] if e["cause"] == {"type": "command", "id": action_id}]
    assert [e["eventId"] for e in caused] == [ref["eventId"] for ref in receipt["events"]]
    for event in caused:
        normative("event", event)
        signer = verify(event)
        assert signer["principal"] == event["acceptedBy"] and signer["principal"]["type"] == "service"
        # commandHash: the Command's signing hash (§6.4), over what the client signed.
        unsigned = {k: v for k, v in command.items() if k != "signature"}
        assert event["commandHash"] == "sha256:" + hashlib.sha256(jcs(unsigned)).hexdigest()
