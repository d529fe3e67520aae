"""Registering Principals and enrolling their keys (issue 16 item 5, PROTOCOL §6.3, §6.4, DESIGN §4).

The review's attack on the private dialect: an Organization admin's signed
registration bound a Django user outside the Organization to a key whose
private half the admin held, and then signed Commands as that person. On the
normative wire:

- only the Organization's services register Principals
  (``ext.mwportal.registry.principal_register``): an admin Agent's own signed
  registration is refused whatever it names;
- every key is bound in the Organization's Registry under a ``urn:uuid:`` key
  ID, once: the Registry refuses a key ID rebound and a key under two IDs, so a
  key an admin (or anyone) already holds is never bound to a person;
- a person enrolls their own key (``ext.mwportal.registry.principal_key_enroll``),
  only as themselves, and then signs as themselves.

Personas: acme's admin Ada (a signed Agent), Pia (a person of acme registered
without a key, user ``pia``), Vic (a Django user with no Principal).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from missions.authority import accept
from missions.commands import register_principal, service_command
from missions.keyregistry import DjangoRegistry
from missions.models import Agent, GroupEvent, Organization, SigningKey
from mwportal.protocol import ErrorCode, catalogue
from mwportal.protocol.command import Key, format_timestamp
from mwportal.protocol.ids import new_urn, urn
from tests.conftest import AgentKey, Because, make_agent, refused

REGISTER = "ext.mwportal.registry.principal_register"
ENROLL = "ext.mwportal.registry.principal_key_enroll"


def public_key_of(key: Key, key_id: str | None = None) -> dict[str, Any]:
    """The common ``publicKey`` object a registration or enrolment carries."""
    return {
        "keyId": key_id or key.key_id,
        "algorithm": "Ed25519",
        "publicKey": key.public_key,
        "validFrom": format_timestamp(datetime.now(UTC)),
    }


def registration(kind: str = "human", key: Key | None = None, username: str | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "principal": {"type": kind, "id": new_urn()},
        "name": "Claimed",
        "organizationRoles": ["mission_owner"],
    }
    if key is not None:
        payload["publicKey"] = public_key_of(key)
    if username is not None:
        payload["username"] = username
    return payload


def as_control_plane(org: dict[str, str], payload: dict[str, Any]) -> dict[str, Any]:
    return accept(service_command(REGISTER, org["admin_group"], payload, organization_id=org["id"]))


def enrol_for(person: Agent, payload: dict[str, Any], org_id: str | None = None) -> dict[str, Any]:
    """What the portal does for a person its sign-in authenticated (``portal.signing.enrol``): the
    control plane binds the public key the person's browser made to that person."""
    org_id = org_id or str(person.organization_id)
    group = str(Agent.objects.get(id=person.id).organization.groups.get(kind="admin").id)
    named = {"principal": {"type": "human", "id": urn(str(person.id))}, **payload}
    return accept(service_command(ENROLL, group, named, organization_id=org_id))


def last_event(org: dict[str, str], kind: str) -> GroupEvent:
    return GroupEvent.objects.filter(group_id=org["admin_group"], type=kind).latest("sequence")


@pytest.fixture
def ada(org: dict[str, str]) -> AgentKey:
    return make_agent("acme", "Ada Admin", ["admin"])


@pytest.fixture
def vic(db: None) -> Any:
    return get_user_model().objects.create_user("vic", password="pw-vic")


@pytest.fixture
def pia(org: dict[str, str]) -> Agent:
    get_user_model().objects.create_user("pia", password="pw-pia")
    principal_id, key_id = register_principal("acme", "Pia", "person", ["mission_owner"], None, user="pia")
    assert key_id is None
    return Agent.objects.get(id=principal_id)


def test_an_agent_is_registered_with_its_key_bound_in_the_registry_under_a_urn_key_id_PROTOCOL_6_4(
    org: dict[str, str],
) -> None:
    key = Key.generate()
    payload = registration("agent", key)
    receipt = as_control_plane(org, payload)
    assert [e["kind"] for e in receipt["events"]] == ["ext.mwportal.registry.principal_registered"]
    event = last_event(org, "ext.mwportal.registry.principal_registered")
    assert event.body == {
        "principal": payload["principal"],
        "name": "Claimed",
        "organizationRoles": ["mission_owner"],
        "keyId": key.key_id,
    }
    catalogue.validate_payload(event.type, event.body)
    binding = DjangoRegistry(Organization.objects.get(id=org["id"])).resolve(key.key_id)
    assert (binding.principal.type, binding.principal.id) == ("agent", payload["principal"]["id"])
    assert key.key_id.startswith("urn:uuid:")


def test_an_agent_without_a_key_and_a_service_principal_are_refused_PROTOCOL_6_3(org: dict[str, str]) -> None:
    error = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, as_control_plane, org, registration("agent"))
    assert error.details["field"] == "/payload/publicKey"
    error = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, as_control_plane, org, registration("service", Key.generate()))
    assert error.details["field"] == "/payload/principal/type"


def test_a_key_id_that_is_not_a_urn_uuid_is_refused_DESIGN_4(org: dict[str, str]) -> None:
    payload = registration("agent", Key.generate())
    payload["publicKey"]["keyId"] = "https://keys.example.org/k1"
    error = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, as_control_plane, org, payload)
    assert error.details == {"field": "/payload/publicKey/keyId", "reason": "not-urn-uuid"}


def test_an_admin_agents_own_registration_is_refused_whatever_it_names_issue_16(
    ada: AgentKey, org: dict[str, str], vic: Any
) -> None:
    """The reviewed attack, signed by the admin over the normative wire: refused, nothing written."""
    held = Key.generate()
    for payload in (registration("human", held, "vic"), registration("agent", held), registration("human")):
        refused(ErrorCode.AUTH_FORBIDDEN, ada.send, REGISTER, org["admin_group"], payload)
    assert not Agent.objects.filter(user=vic).exists()
    assert not SigningKey.objects.filter(public_key=held.public_key).exists()


def test_a_key_already_bound_is_never_bound_again_to_anyone_PROTOCOL_6_4(ada: AgentKey, org: dict[str, str]) -> None:
    """Ada's key (or any bound key) under a new key ID for someone else is public-key reuse."""
    stolen = Key(new_urn(), ada.key.seed)
    error = refused(
        Because(ErrorCode.INVALID_STATE_TRANSITION, "public-key-reuse"),
        as_control_plane,
        org,
        registration("human", stolen),
    )
    assert error.details["field"] == "/payload/publicKey"
    # And Ada's key ID rebound to another key.
    rebound = registration("agent", Key.generate())
    rebound["publicKey"]["keyId"] = ada.key.key_id
    refused(Because(ErrorCode.INVALID_STATE_TRANSITION, "key-id-rebinding"), as_control_plane, org, rebound)


def test_only_a_person_is_linked_to_a_user_and_only_a_user_without_a_principal(
    org: dict[str, str], pia: Agent, vic: Any
) -> None:
    error = refused(
        ErrorCode.SCHEMA_VALIDATION_FAILED, as_control_plane, org, registration("agent", Key.generate(), "vic")
    )
    assert error.details["field"] == "/payload/username"
    refused(ErrorCode.INVALID_STATE_TRANSITION, as_control_plane, org, registration("human", username="pia"))
    refused(
        Because(ErrorCode.INVALID_COMMAND, "not_found"), as_control_plane, org, registration("human", username="nobody")
    )
    as_control_plane(org, registration("human", username="vic"))
    person = Agent.objects.get(user=vic)
    assert (person.kind, person.public_key) == ("person", "")


def test_a_person_enrolls_their_own_key_signed_in_and_then_signs_as_themselves_PROTOCOL_6_4(
    org: dict[str, str], pia: Agent
) -> None:
    key = Key.generate()
    receipt = enrol_for(pia, {"publicKey": public_key_of(key)})
    assert [e["kind"] for e in receipt["events"]] == ["ext.mwportal.registry.principal_key_enrolled"]
    event = last_event(org, "ext.mwportal.registry.principal_key_enrolled")
    assert event.body == {"principal": {"type": "human", "id": urn(str(pia.id))}, "keyId": key.key_id}
    binding = DjangoRegistry(Organization.objects.get(id=org["id"])).resolve(key.key_id)
    assert (binding.principal.type, binding.principal.id) == ("human", urn(str(pia.id)))
    # Pia now signs a Command of her own (a mission_owner may set the priority policy, §11.1).
    pia_key = AgentKey(str(pia.id), Key(key.key_id, key.seed, ("human", str(pia.id)), org["id"]), "acme", "person")
    policy = {"classes": {"normal": 1}, "default_class": "normal"}
    receipt = pia_key.send("ext.mwportal.scheduling.priority_policy_set", org["admin_group"], {"policy": policy})
    assert receipt["events"][0]["kind"] == "ext.mwportal.scheduling.priority_policy_changed"


def test_a_new_device_is_a_new_key_id_and_a_key_is_enrolled_once_DESIGN_4(org: dict[str, str], pia: Agent) -> None:
    first, second = Key.generate(), Key.generate()
    enrol_for(pia, {"publicKey": public_key_of(first)})
    enrol_for(pia, {"publicKey": public_key_of(second)})
    keys = SigningKey.objects.filter(principal_type="human", principal_id=urn(str(pia.id)))
    assert sorted(keys.values_list("key_id", flat=True)) == sorted([first.key_id, second.key_id])
    refused(ErrorCode.INVALID_STATE_TRANSITION, enrol_for, pia, {"publicKey": public_key_of(first)})


def test_nobody_else_enrolls_a_persons_key_issue_16(
    ada: AgentKey, org: dict[str, str], pia: Agent, worker: AgentKey
) -> None:
    key = Key.generate()
    admin_group = org["admin_group"]
    # Signed in Pia's name by someone who holds no key of hers: no key resolves.
    forged = AgentKey(str(pia.id), Key(new_urn(), key.seed, ("human", str(pia.id)), org["id"]), "acme", "person")
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, forged.send, ENROLL, admin_group, {"publicKey": public_key_of(key)})
    # An admin Agent enrolling "for" her enrolls only itself, and it is no person.
    refused(ErrorCode.AUTH_FORBIDDEN, ada.send, ENROLL, admin_group, {"publicKey": public_key_of(key)})
    # A key another Principal holds is not Pia's.
    taken = {"publicKey": public_key_of(Key(new_urn(), worker.key.seed))}
    refused(Because(ErrorCode.INVALID_STATE_TRANSITION, "public-key-reuse"), enrol_for, pia, taken)
    # Not an Ed25519 point.
    bad = {"publicKey": {**public_key_of(key), "publicKey": "A" * 43}}
    refused(ErrorCode.SCHEMA_VALIDATION_FAILED, enrol_for, pia, bad)
    # The control plane enrols for a person only: not for an Agent, not for nobody.
    refused(ErrorCode.SCHEMA_VALIDATION_FAILED, accept, service_command(
        ENROLL, admin_group, {"publicKey": public_key_of(key)}, organization_id=org["id"]))  # fmt: skip
    agent_named = {"principal": worker.actor, "publicKey": public_key_of(key)}
    refused(ErrorCode.SCHEMA_VALIDATION_FAILED, accept, service_command(
        ENROLL, admin_group, agent_named, organization_id=org["id"]))  # fmt: skip
    assert not SigningKey.objects.filter(principal_id=urn(str(pia.id))).exists()


def test_registered_roles_are_organization_roles(org: dict[str, str]) -> None:
    payload = registration("agent", Key.generate())
    payload["organizationRoles"] = ["root"]
    error = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, as_control_plane, org, payload)
    assert error.details["field"] == "/payload/organizationRoles"
