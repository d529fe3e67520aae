"""What an Agent Card holds, and what it never holds (PROTOCOL §6.1).

§6.1, in short: the Organization issues, checks, versions and signs every Agent Card; a card keeps apart the
Agent's stable identity, its versioned capabilities (governed by the Organization, each with input/output
schemas, constraints and verification Evidence) and the most concurrent work it supports; and a card holds no
reusable credential.

What the Registry refuses as a credential (``missions.handlers.sessions``), written out here: a member named
(case and ``-``/``_`` aside) password, passwd, passphrase, secret, client_secret, token, access_token,
refresh_token, bearer_token, session_token, api_key, api_token, private_key, credential(s), authorization,
cookie or seed anywhere but the card's signature; a string holding a PEM private key, a string that is an HTTP
``Bearer``/``Basic`` authorization value, and a URI with a password in its userinfo.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from missions.authority import accept
from missions.commands import service_command
from missions.handlers.sessions import capability, card_document
from missions.models import Agent, AgentCard
from missions.service_keys import CONTROL_PLANE, control_plane, principal_id
from mwportal.protocol import ErrorCode
from mwportal.protocol.command import format_timestamp
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey, Because, refused
from tests.protocol.normative import normative_problems

REGISTER_CARD = "ext.missionweaveprotocol.registry.agent_card_register"
EVIDENCE = "urn:uuid:00000000-0000-4000-8000-0000000e0c01"
CREDENTIAL = Because(ErrorCode.INVALID_COMMAND, "credential-in-card")


def signed(
    org: dict[str, str],
    agent: AgentKey,
    *,
    version: int = 1,
    constraints: dict[str, Any] | None = None,
    endpoint: str = "wss://agents.example.org/mwp/0.1",
    description: str | None = None,
    max_concurrency: int = 2,
    summarize: str = "1.0.0",
) -> dict[str, Any]:
    """A card the control plane (the Registry) signs over exactly these contents."""
    row = Agent.objects.get(id=agent.id)
    held = capability("text.summarize", summarize, verified_evidence=[EVIDENCE])
    held["constraints"] = constraints or {}
    public = {"keyId": agent.key.key_id, "algorithm": "Ed25519", "publicKey": agent.public_key,
              "validFrom": format_timestamp(row.created_at)}  # fmt: skip
    card = card_document(
        organization_id=org["id"], agent=row, version=version,
        owner={"type": "service", "id": urn(principal_id(org["id"], CONTROL_PLANE))}, capabilities=[held],
        max_concurrency=max_concurrency, public_keys=[public], endpoint=endpoint, signer=control_plane(org["id"]),
        issued_at=datetime.now(UTC),
    )  # fmt: skip
    if description is not None:
        from mwportal.protocol.verification import sign_document

        key = control_plane(org["id"])
        unsigned = {k: v for k, v in card.items() if k != "signature"} | {"description": description}
        card = sign_document(unsigned, key_id=key.key_id, seed=key.seed, profile="agent-card")
    return card


def register(org: dict[str, str], card: dict[str, Any]) -> dict[str, Any]:
    return accept(service_command(REGISTER_CARD, None, {"card": card}, organization_id=org["id"]))


@pytest.mark.parametrize(
    ("contents", "pointer"),
    [
        ({"constraints": {"apiKey": "sk-live-0123456789"}}, "/capabilities/0/constraints/apiKey"),
        ({"constraints": {"upstream": {"Client_Secret": "x"}}}, "/capabilities/0/constraints/upstream/Client_Secret"),
        ({"constraints": {"auth": [{"access-token": "x"}]}}, "/capabilities/0/constraints/auth/0/access-token"),
        ({"constraints": {"seed": "AAAA"}}, "/capabilities/0/constraints/seed"),
        ({"constraints": {"header": "Bearer eyJhbGciOiJFZERTQSJ9.e30.sig"}}, "/capabilities/0/constraints/header"),
        ({"constraints": {"key": "-----BEGIN PRIVATE KEY-----\nMC4CAQ...\n"}}, "/capabilities/0/constraints/key"),
        ({"endpoint": "wss://bot:hunter2@agents.example.org/mwp/0.1"}, "/endpoints/0/uri"),
        ({"description": "Basic Ym90Omh1bnRlcjI="}, "/description"),
    ],
    ids=["api-key", "nested-client-secret", "token-in-array", "seed", "bearer", "pem", "uri-password", "basic"],
)
def test_a_card_carrying_a_credential_is_refused_6_1(
    org: dict[str, str], worker: AgentKey, contents: dict[str, Any], pointer: str
) -> None:
    card = signed(org, worker, **contents)
    error = refused(CREDENTIAL, register, org, card)
    assert error.details["field"] == f"/payload/card{pointer}"
    assert not AgentCard.objects.filter(agent_id=worker.id).exists()


def test_a_card_with_ordinary_constraints_and_words_is_registered_6_1(org: dict[str, str], worker: AgentKey) -> None:
    """The negative's other side: names that merely contain such words, and prose, are not credentials."""
    constraints = {"maxInputTokens": 4000, "tokenizer": "cl100k", "languages": ["en", "de"],
                   "secretaryStyle": True, "authorizationRequired": "by the Organization's policy"}  # fmt: skip
    card = signed(org, worker, constraints=constraints, description="Basic summaries of long survey documents",
                  endpoint="wss://agents.example.org:8443/mwp/0.1")  # fmt: skip
    register(org, card)
    assert AgentCard.objects.get(agent_id=worker.id, version=1).document == card


def test_each_registration_is_a_new_version_and_none_is_rewritten_6_1(org: dict[str, str], worker: AgentKey) -> None:
    """A changed capability and a changed maximum concurrency are each a new version; the earlier versions stay
    exactly as signed, and a registration under a taken version is refused. Identity, capabilities and
    concurrency are separate members: changing one leaves the others as they were."""
    first = signed(org, worker)
    register(org, first)
    upgraded = signed(org, worker, version=2, summarize="1.1.0")
    register(org, upgraded)
    wider = signed(org, worker, version=3, summarize="1.1.0", max_concurrency=8)
    register(org, wider)
    refused(ErrorCode.REVISION_CONFLICT, register, org, signed(org, worker, version=2, summarize="9.0.0"))
    rows = {c.version: c for c in AgentCard.objects.filter(agent_id=worker.id)}
    assert sorted(rows) == [1, 2, 3]
    assert (rows[1].document, rows[2].document, rows[3].document) == (first, upgraded, wider)
    assert [c["version"] for c in rows[1].capabilities] == ["1.0.0"]
    assert (rows[2].max_concurrency, rows[3].max_concurrency) == (2, 8)
    assert rows[3].capabilities == rows[2].capabilities
    identity = ("agentId", "organizationId", "owner", "publicKeys", "endpoints", "protocolVersions")
    assert all(rows[3].document[m] == rows[1].document[m] for m in identity)
    for row in rows.values():
        assert normative_problems("agent-card", row.document) == []
        held = row.document["capabilities"][0]
        assert {"inputSchema", "outputSchema", "constraints", "verifiedEvidence"} <= set(held)
