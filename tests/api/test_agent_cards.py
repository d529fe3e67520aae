"""``GET /api/v0.1/agents/{agentId}/card`` (PROTOCOL §6.1): the Organization-signed, versioned Agent Card,
exactly as the Registry registered it, verifiable with the Registry's public key; never credentials; read only
inside the Agent's Organization.

§6.1, in short: every Agent Card is issued, checked, versioned and signed by the Organization, and a card
carries no reusable credential and opens no access to tools or business data.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from missions.commands import create_organization
from missions.handlers.sessions import capability, issue_agent_card
from missions.keyregistry import DjangoRegistry
from missions.models import Organization
from mwportal.protocol import jcs
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import verify_document
from tests.api.support import API, bearer, error_of, http, normative, show
from tests.conftest import AgentKey, make_agent

EVIDENCE = "urn:uuid:00000000-0000-4000-8000-0000000ca4d0"
SECRETS = ("privateKey", "token", "sessionToken", "password", "secret", "seed")


def card_url(agent: str, query: str = "") -> str:
    return f"{API}/agents/{agent}/card" + (f"?{query}" if query else "")


def read(reader: AgentKey, agent: AgentKey, query: str = "") -> Any:
    return http().get(card_url(agent.urn, query), **bearer(reader.extra["token"]))


def test_the_signed_card_is_served_as_registered_and_verifies_6_1(
    org: dict[str, str], worker: AgentKey, coordinator: AgentKey
) -> None:
    issue_agent_card(worker.id, [capability("text.summarize", "1.0.0", verified_evidence=[EVIDENCE])])
    newer = [capability("text.summarize", "1.1.0", verified_evidence=[EVIDENCE])]
    issue_agent_card(worker.id, newer, max_concurrency=3)
    response = read(coordinator, worker)
    assert response.status_code == 200, show(response)
    card = normative("agent-card", response.json())
    assert (card["agentId"], card["cardVersion"], card["maxConcurrency"]) == (worker.urn, 2, 3)
    registry = DjangoRegistry(Organization.objects.get(id=org["id"]))
    verified = verify_document(jcs.canonicalize(card), "agent-card", registry)
    assert verified.principal.type == "service"  # the Organization's signature, not the Agent's own word
    first = read(coordinator, worker, "version=1")
    assert first.status_code == 200 and first.json()["cardVersion"] == 1, show(first)
    assert first.json()["capabilities"][0]["version"] == "1.0.0"
    text = json.dumps(response.json())
    assert not any(f'"{name}"' in text for name in SECRETS)  # no credentials on a card


def test_a_card_is_not_served_outside_its_organization_nor_unauthenticated_6_1(
    org: dict[str, str], worker: AgentKey
) -> None:
    issue_agent_card(worker.id, [capability("text.summarize", "1.0.0", verified_evidence=[EVIDENCE])])
    create_organization("globex", "Globex")
    stranger = make_agent("globex", "Sam Stranger", ["worker"])
    error_of(read(stranger, worker), 404, "GROUP_NOT_FOUND")
    error_of(http().get(card_url(worker.urn)), 401, "AUTH_REQUIRED")


def test_an_unknown_agent_or_version_answers_like_an_absent_card_6_1(org: dict[str, str], worker: AgentKey) -> None:
    issue_agent_card(worker.id, [capability("text.summarize", "1.0.0", verified_evidence=[EVIDENCE])])
    nobody = http().get(card_url(urn(uuid.uuid4())), **bearer(worker.extra["token"]))
    no_version = read(worker, worker, "version=9")
    assert error_of(nobody, 404, "GROUP_NOT_FOUND") == error_of(no_version, 404, "GROUP_NOT_FOUND")
    error_of(read(worker, worker, "version=0"), 400, "SCHEMA_VALIDATION_FAILED")
    error_of(read(worker, worker, "colour=red"), 400, "SCHEMA_VALIDATION_FAILED")
    uncarded = make_agent("acme", "Nora No-card", ["worker"])
    error_of(read(worker, uncarded), 404, "GROUP_NOT_FOUND")
