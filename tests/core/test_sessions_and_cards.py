"""Agent Sessions and Agent Cards: the Organization-scoped bootstrap Commands (PROTOCOL §6.1, §6.3, §15.1, §15.2).

``ext.missionweaveprotocol.identity.session_open`` issues Session Epoch n + 1
and fences every session at n or lower; ``..._session_opened`` is an
Organization-scoped Event (no Group ID, sequence or aggregate revision),
signed by the Group Authority. ``ext.missionweaveprotocol.registry.agent_card_register``
registers a card the Organization signed, listing only keys its Registry
binds to the Agent.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from missions import registry
from missions.authority import accept
from missions.commands import open_session, service_command
from missions.handlers.sessions import capability, card_document, issue_agent_card
from missions.keyregistry import DjangoRegistry
from missions.models import Agent, AgentCard, AgentSession, Organization, OrganizationEvent
from missions.service_keys import CONTROL_PLANE, principal_id
from mwportal.protocol import ErrorCode, catalogue
from mwportal.protocol.command import Key, format_timestamp
from mwportal.protocol.eventdoc import verify_event
from mwportal.protocol.ids import new_urn, urn
from tests.conftest import AgentKey, Because, make_agent, make_person, refused
from tests.protocol.normative import normative_problems

OPEN = "ext.missionweaveprotocol.identity.session_open"
REGISTER_CARD = "ext.missionweaveprotocol.registry.agent_card_register"
EVIDENCE = "urn:uuid:00000000-0000-4000-8000-0000000e0001"


def org_events(kind: str) -> list[OrganizationEvent]:
    return list(OrganizationEvent.objects.filter(type=kind).order_by("occurred_at", "id"))


def as_service(org: dict[str, str], kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return accept(service_command(kind, None, payload, organization_id=org["id"]))


def signed_card(
    org: dict[str, str],
    agent: AgentKey,
    *,
    version: int = 1,
    signer: Key | None = None,
    keys: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    from missions.service_keys import control_plane

    row = Agent.objects.get(id=agent.id)
    public = {
        "keyId": agent.key.key_id,
        "algorithm": "Ed25519",
        "publicKey": agent.public_key,
        "validFrom": format_timestamp(row.created_at),
    }
    return card_document(
        organization_id=org["id"],
        agent=row,
        version=version,
        owner={"type": "service", "id": urn(principal_id(org["id"], CONTROL_PLANE))},
        capabilities=[capability("text.summarize", "1.0.0", verified_evidence=[EVIDENCE])],
        max_concurrency=2,
        public_keys=keys if keys is not None else [public],
        endpoint="wss://localhost/mwp/0.1",
        signer=signer or control_plane(org["id"]),
        issued_at=datetime.now(UTC),
    )


def test_a_new_session_epoch_fences_every_older_one_PROTOCOL_6_3(org: dict[str, str], worker: AgentKey) -> None:
    old_epoch, old_token = worker.session_epoch, worker.extra["token"]
    stale = worker.command("ext.mwportal.scheduling.priority_policy_set", org["admin_group"], {"policy": {}})
    token, epoch = open_session(worker.id)
    assert epoch == old_epoch + 1 and token != old_token
    sessions = AgentSession.objects.filter(agent_id=worker.id).order_by("epoch")
    assert [(s.epoch, s.revoked_at is None) for s in sessions] == [(old_epoch, False), (epoch, True)]
    assert Agent.objects.get(id=worker.id).session_epoch == epoch
    # A Command signed under the replaced epoch is fenced, even though its signature is good.
    refused(ErrorCode.AUTH_STALE_SESSION, worker.send_document, stale)


def test_session_opened_is_organization_scoped_and_signed_by_the_group_authority_PROTOCOL_15_2(
    org: dict[str, str], worker: AgentKey
) -> None:
    receipt = as_service(org, OPEN, {"agentId": worker.urn})
    assert [e["kind"] for e in receipt["events"]] == ["ext.missionweaveprotocol.identity.session_opened"]
    assert "sequence" not in receipt["events"][0]
    assert set(receipt["grants"]) == {"sessionToken", "sessionEpoch"}
    event = org_events("ext.missionweaveprotocol.identity.session_opened")[-1]
    document = event.as_wire()
    assert document["payload"] == {"agentId": worker.urn, "sessionEpoch": receipt["grants"]["sessionEpoch"]}
    assert not {"groupId", "sequence", "aggregateRevision"} & set(document)
    assert document["cause"] == {"type": "command", "id": receipt["actionId"]}
    verified = verify_event(event.document.encode(), DjangoRegistry(Organization.objects.get(id=org["id"])))
    assert verified.principal.type == "service"
    assert normative_problems("event", document) == []
    catalogue.validate_payload(document["kind"], document["payload"])


def test_a_session_is_an_agents_and_only_a_service_opens_one_PROTOCOL_6_3(
    org: dict[str, str], worker: AgentKey
) -> None:
    person = make_person("acme", "Hana Human", ["mission_owner"])
    error = refused(ErrorCode.INVALID_COMMAND, as_service, org, OPEN, {"agentId": person.urn})
    assert error.details["field"] == "/payload/agentId"
    refused(Because(ErrorCode.INVALID_COMMAND, "not_found"), as_service, org, OPEN, {"agentId": new_urn()})
    # An Agent does not open its own session with a Command (the binding's HELLO does, through the
    # control plane): the normative Command schema itself admits only a service actor for this kind.
    refused(ErrorCode.SCHEMA_VALIDATION_FAILED, worker.send, OPEN, None, {"agentId": worker.urn})


def test_the_session_replaced_hooks_get_the_agent_and_its_new_epoch_PROTOCOL_11_3(
    org: dict[str, str], worker: AgentKey
) -> None:
    """The hooks revoke the Agent's leases in every Group (§11.3); they are told whose session and which epoch."""
    seen: list[tuple[str, str, int]] = []

    def record(ctx: Any, agent_id: str, epoch: int) -> list[Any]:
        seen.append((ctx.actor.type, agent_id, epoch))
        return []

    registry.session_replaced_hooks.append(record)
    try:
        _, epoch = open_session(worker.id)
    finally:
        registry.session_replaced_hooks.remove(record)
    assert seen == [("service", worker.id, epoch)]


def test_the_registry_service_registers_a_signed_card_PROTOCOL_6_1(org: dict[str, str], worker: AgentKey) -> None:
    version = issue_agent_card(worker.id, [capability("text.summarize", "1.0.0", verified_evidence=[EVIDENCE])])
    assert version == 1
    card = AgentCard.objects.get(agent_id=worker.id, version=1)
    assert [c["id"] for c in card.capabilities] == ["text.summarize"]
    event = org_events("ext.missionweaveprotocol.registry.agent_card_registered")[-1]
    document = json.loads(event.document)
    assert document["payload"] == {"agentId": worker.urn, "version": 1}
    assert not {"groupId", "sequence", "aggregateRevision"} & set(document)
    assert normative_problems("event", document) == []
    assert issue_agent_card(worker.id, card.capabilities, max_concurrency=3) == 2


def test_a_card_is_the_organizations_word_not_the_agents_PROTOCOL_6_1(org: dict[str, str], worker: AgentKey) -> None:
    """Signed by the Agent itself, or tampered with after signing: refused."""
    self_signed = signed_card(org, worker, signer=worker.key)
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, as_service, org, REGISTER_CARD, {"card": self_signed})
    tampered = {**signed_card(org, worker), "maxConcurrency": 64}
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, as_service, org, REGISTER_CARD, {"card": tampered})
    assert not AgentCard.objects.filter(agent_id=worker.id).exists()


def test_a_card_lists_only_keys_the_registry_binds_to_the_agent_PROTOCOL_6_1(
    org: dict[str, str], worker: AgentKey, worker2: AgentKey
) -> None:
    others = {"keyId": worker2.key.key_id, "algorithm": "Ed25519", "publicKey": worker2.public_key,
              "validFrom": "2026-01-01T00:00:00Z"}  # fmt: skip
    error = refused(
        Because(ErrorCode.INVALID_COMMAND, "key-not-registered"),
        as_service, org, REGISTER_CARD, {"card": signed_card(org, worker, keys=[others])},
    )  # fmt: skip
    assert error.details["field"] == "/payload/card/publicKeys/0"


def test_a_card_version_only_increases_PROTOCOL_6_1(org: dict[str, str], worker: AgentKey) -> None:
    as_service(org, REGISTER_CARD, {"card": signed_card(org, worker, version=2)})
    for version in (1, 2):
        refused(ErrorCode.REVISION_CONFLICT, as_service, org, REGISTER_CARD,
                {"card": signed_card(org, worker, version=version)})  # fmt: skip
    as_service(org, REGISTER_CARD, {"card": signed_card(org, worker, version=3)})
    assert list(AgentCard.objects.filter(agent_id=worker.id).values_list("version", flat=True).order_by("version")) == [
        2,
        3,
    ]


def test_an_organization_registers_only_its_own_agents_cards_PROTOCOL_6_1(
    org: dict[str, str], worker: AgentKey
) -> None:
    card = signed_card(org, worker)
    card["organizationId"] = new_urn()
    from missions.service_keys import control_plane
    from mwportal.protocol.verification import sign_document

    key = control_plane(org["id"])
    resigned = sign_document({k: v for k, v in card.items() if k != "signature"}, key_id=key.key_id,
                             seed=key.seed, profile="agent-card")  # fmt: skip
    error = refused(ErrorCode.AUTH_FORBIDDEN, as_service, org, REGISTER_CARD, {"card": resigned})
    assert error.details["field"] == "/payload/card/organizationId"
    # And a card for a person is no Agent Card.
    person = make_person("acme", "Hana Human", ["mission_owner"])
    refused(ErrorCode.INVALID_COMMAND, as_service, org, REGISTER_CARD,
            {"card": {**signed_card(org, worker), "agentId": person.urn}})  # fmt: skip


@pytest.fixture
def late_agent(org: dict[str, str]) -> AgentKey:
    return make_agent("acme", "Lena Late", ["worker"], open_session=False)


def test_a_first_session_is_epoch_one(late_agent: AgentKey) -> None:
    assert late_agent.session_epoch == 0
    late_agent.open_session()
    assert late_agent.session_epoch == 1
