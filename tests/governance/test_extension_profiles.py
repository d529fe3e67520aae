"""Extension Profiles (PROTOCOL §18, §21) through the REST binding: registration of a signed, Organization-approved
profile, Groups pinning major versions, UNKNOWN_CRITICAL_EXTENSION, and noncritical extensions kept as sent.

§18, in short: a profile names a globally unique profile URI, a semantic version, a schema URI with its hash,
the capabilities it requires, its criticality and the Organization's approval signature; each Group fixes the
major versions of the profiles it relies on; an extension kind lives under ext.<organization>.<profile>.<name>.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from governance.models import ExtensionProfile, GroupProfilePin
from missions.service_keys import control_plane
from missions.snapshots import group_state
from mwportal.protocol import jcs
from mwportal.protocol.command import format_timestamp
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import sign_document
from tests.api.support import COMMANDS, error_of, events_url, http, nothing_written, post_json, show
from tests.conftest import AgentKey, make_person
from tests.workitems.flow import contract

PROFILE_URI = "https://profiles.acme.example/mwp/geodata"
HASH = "sha256:" + "5e" * 32


def profile_document(org_id: str, signer: Any = None, **changes: Any) -> dict[str, Any]:
    """A geodata profile approved and signed by the Organization's control plane (or ``signer``:
    ``(actor, key)``)."""
    if signer is None:
        key = control_plane(org_id)
        signer = ({"type": "service", "id": urn(key.principal[1])}, key)
    actor, key = signer
    document = {
        "profileUri": PROFILE_URI,
        "name": "Acme geodata",
        "version": "1.2.0",
        "schemaUri": "https://profiles.acme.example/mwp/geodata/1.2.0/schema.json",
        "schemaHash": HASH,
        "requiredCapabilities": [{"id": "geo.render", "version": "1.0.0"}],
        "critical": True,
        "commandKinds": ["ext.acme.geodata.tile_render"],
        "eventKinds": ["ext.acme.geodata.tile_rendered"],
        "overridesCoreInvariants": False,
        "approvedBy": actor,
        "approvedAt": format_timestamp(datetime.now(UTC)),
        **changes,
    }
    return sign_document(document, key_id=key.key_id, seed=key.seed, profile="extension-profile")


def post(sender: AgentKey, kind: str, group: str, payload: dict[str, Any], **kw: Any) -> Any:
    return post_json(http(), COMMANDS, sender.command(kind, group, payload, **kw))


def register(admin: AgentKey, org: dict[str, str], document: dict[str, Any]) -> Any:
    return post(admin, "ext.mwportal.extension.profile_register", org["admin_group"], {"profile": document})


def pin(by: AgentKey, group: str, major: int) -> Any:
    return post(by, "ext.mwportal.extension.profile_pin", group, {"profileUri": PROFILE_URI, "major": major})


@pytest.fixture
def admin(org: dict[str, str]) -> AgentKey:
    return make_person("acme", "Ada Admin", ["admin"])


def proposal(sender: AgentKey, group: str, extensions: dict[str, Any]) -> dict[str, Any]:
    """A member's ``work.propose`` carrying ``extensions`` (any member may send it, §9)."""
    payload = {"proposalId": urn(uuid.uuid4()), "contract": contract()}
    return sender.command("work.propose", group, payload, extensions=extensions)


def geodata(version: str, *, critical: bool = True) -> dict[str, Any]:
    return {PROFILE_URI: {"version": version, "critical": critical, "data": {"tiles": [3, 4], "zoom": 12}}}


# --- registration (§18) ----------------------------------------------------------------------------------


def test_a_signed_profile_is_registered_with_every_declared_field_18(admin: AgentKey, org: dict[str, str]) -> None:
    document = profile_document(org["id"])
    response = register(admin, org, document)
    assert response.status_code == 201, show(response)
    row = ExtensionProfile.objects.get(profile_uri=PROFILE_URI)
    assert (row.version, row.major, row.schema_uri, row.schema_hash, row.critical) == (
        "1.2.0", 1, "https://profiles.acme.example/mwp/geodata/1.2.0/schema.json", HASH, True,
    )  # fmt: skip
    assert row.required_capabilities == [{"id": "geo.render", "version": "1.0.0"}]
    assert row.document["signature"] == document["signature"]  # the Organization's approval, kept as signed
    [event] = response.json()["events"]
    assert event["kind"] == "ext.mwportal.extension.profile_registered"


def test_a_profile_not_approved_by_an_organization_service_key_is_refused_18(
    admin: AgentKey, org: dict[str, str]
) -> None:
    by_person = profile_document(org["id"], signer=(admin.actor, admin.key))
    with nothing_written():
        error_of(register(admin, org, by_person), 403, "AUTH_FORBIDDEN")
    tampered = {**profile_document(org["id"]), "schemaHash": "sha256:" + "00" * 32}
    with nothing_written():
        error_of(register(admin, org, tampered), 401, "AUTH_INVALID_SIGNATURE")
    assert not ExtensionProfile.objects.exists()


def test_profile_kinds_outside_the_organizations_namespace_are_refused_18(admin: AgentKey, org: dict[str, str]) -> None:
    for kinds in (["ext.other.geodata.tile_render"], ["ext.mwportal.geodata.tile_render"], ["ext.acme.tile_render"]):
        response = register(admin, org, profile_document(org["id"], commandKinds=kinds))
        assert response.status_code in (400, 422), show(response)
        assert response.json()["code"] in ("INVALID_COMMAND", "SCHEMA_VALIDATION_FAILED")
    assert not ExtensionProfile.objects.exists()


def test_only_an_organization_admin_registers_and_a_version_once_18(
    admin: AgentKey, owner: AgentKey, org: dict[str, str]
) -> None:
    document = profile_document(org["id"])
    with nothing_written():
        error_of(register(owner, org, document), 403, "AUTH_FORBIDDEN")
    assert register(admin, org, document).status_code == 201
    error_of(register(admin, org, profile_document(org["id"])), 422, "INVALID_STATE_TRANSITION")
    assert register(admin, org, profile_document(org["id"], version="1.3.0")).status_code == 201


# --- pinning and critical extensions (§18) -----------------------------------------------------------------


def test_a_group_pins_the_major_version_of_a_registered_profile_18(
    admin: AgentKey, owner: AgentKey, worker: AgentKey, org: dict[str, str], mission: dict[str, str]
) -> None:
    g = mission["group"]
    error_of(pin(owner, g, 1), 400, "INVALID_COMMAND")  # nothing registered yet
    assert register(admin, org, profile_document(org["id"])).status_code == 201
    error_of(pin(owner, g, 2), 400, "INVALID_COMMAND")  # no 2.x registered
    error_of(pin(worker, g, 1), 403, "AUTH_FORBIDDEN")
    assert group_state(g)["extensionProfiles"] == []
    response = pin(owner, g, 1)
    assert response.status_code == 201, show(response)
    assert list(GroupProfilePin.objects.filter(group_id=g).values_list("profile_uri", "major")) == [(PROFILE_URI, 1)]
    assert group_state(g)["extensionProfiles"] == [{"profileUri": PROFILE_URI, "major": 1}]  # a restored Worker knows
    error_of(pin(owner, g, 1), 422, "INVALID_STATE_TRANSITION")


def test_an_unknown_critical_extension_is_refused_until_registered_and_pinned_18(
    admin: AgentKey, owner: AgentKey, worker: AgentKey, org: dict[str, str], mission: dict[str, str]
) -> None:
    g = mission["group"]

    def refused_unknown(extensions: dict[str, Any]) -> None:
        with nothing_written():
            response = post_json(http(), COMMANDS, proposal(worker, g, extensions))
        error = error_of(response, 400, "UNKNOWN_CRITICAL_EXTENSION")
        assert error["details"]["field"] == f"extensions.{next(iter(extensions))}"

    refused_unknown(geodata("1.2.0"))  # not registered
    assert register(admin, org, profile_document(org["id"])).status_code == 201
    refused_unknown(geodata("1.2.0"))  # registered, not pinned by this Group
    assert pin(owner, g, 1).status_code == 201
    refused_unknown(geodata("2.0.0"))  # another major than the pinned one
    refused_unknown({"https://profiles.acme.example/mwp/other": {"version": "1.0.0", "critical": True, "data": {}}})
    accepted = post_json(http(), COMMANDS, proposal(worker, g, geodata("1.0.1")))
    assert accepted.status_code == 201, show(accepted)


def test_a_noncritical_unknown_extension_is_kept_and_served_by_rest_as_sent_21(
    worker: AgentKey, mission: dict[str, str]
) -> None:
    g = mission["group"]
    value = {"version": "3.1.0", "critical": False, "data": {"ünïcode": "Zürich ✓", "n": [1, 2.5, -0], "z": None}}
    name = "urn:example:unregistered-hint"
    document = proposal(worker, g, {name: value})
    response = post_json(http(), COMMANDS, document)
    assert response.status_code == 201, show(response)
    sequence = response.json()["events"][0]["sequence"]
    page = http().get(events_url(g, f"afterSequence={sequence - 1}&limit=1"), **worker_auth(worker))
    assert page.status_code == 200, show(page)
    exact = jcs.canonicalize({name: value})  # the extension's bytes, as the signed Command carries them
    assert exact[1:-1] in page.content
    [event] = page.json()["events"]
    assert event["extensions"] == {name: value}


def worker_auth(agent: AgentKey) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {agent.extra['token']}"}
