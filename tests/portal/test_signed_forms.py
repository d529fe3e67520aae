"""The portal's own pages for a person's Commands, signed by the person (issue 19 item 2, DESIGN §4):
enrolling a browser key, revoking one (an Organization admin), creating a Mission, assigning its
Coordinator, cancelling it, and a Cooperation Override Grant (§20).

The server-side half: what each page renders as the Command's context, and that the
Command the page builds from it (``from_page``, signed with the person's key) is
accepted, or refused with the normative error, through ``/api/v0.1/commands``.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from missions.models import Mission, SigningKey, SigningKeyValidity
from mwportal.protocol import ErrorCode
from mwportal.protocol.command import Key, format_timestamp
from mwportal.protocol.ids import new_urn, urn
from tests.conftest import AgentKey, nothing_written, refused
from tests.portal.conftest import Person, admin_group, documents_of, ensure_card, from_page, make_person, post_command
from tests.workitems.flow import Flow

REVOKE = "ext.mwportal.registry.principal_key_revoke"


def enrol(person: Person, body: dict[str, Any]) -> Any:
    return person.client.post("/keys/enrol", json.dumps(body), content_type="application/json")


def test_enrolment_binds_the_public_key_to_the_signed_in_person_under_a_new_key_id_design_4(pat: Person) -> None:
    browser_key = Key.generate()
    response = enrol(pat, {"publicKey": browser_key.public_key})
    assert response.status_code == 201, response.json()
    key_id = response.json()["keyId"]
    row = SigningKey.objects.get(key_id=key_id)
    assert (row.principal_type, row.principal_id, row.public_key) == ("human", pat.actor["id"], browser_key.public_key)
    (event,) = [e for e in documents_of(admin_group(), "ext.mwportal.registry.principal_key_enrolled")
                if e["payload"]["keyId"] == key_id]  # fmt: skip
    assert event["actor"]["type"] == "service" and event["payload"]["principal"] == pat.actor
    # The key now signs for Pat.
    signer = AgentKey(pat.key.id, Key(key_id, browser_key.seed, ("human", pat.key.id), None), "acme", "person")
    policy = {"classes": {"normal": 1}, "default_class": "normal"}
    signer.send("ext.mwportal.scheduling.priority_policy_set", admin_group(), {"policy": policy})


def test_enrolment_takes_a_public_key_and_nothing_else_design_4(pat: Person) -> None:
    browser_key = Key.generate()
    with nothing_written():
        leaked = enrol(pat, {"publicKey": browser_key.public_key, "privateKey": "x" * 43})
        assert leaked.status_code == 400 and leaked.json()["code"] == "SCHEMA_VALIDATION_FAILED"
        assert enrol(pat, {"publicKey": "A" * 43}).json()["code"] == "SCHEMA_VALIDATION_FAILED"  # not a point
    assert enrol(pat, {"publicKey": browser_key.public_key}).status_code == 201
    again = enrol(pat, {"publicKey": browser_key.public_key})  # one key, one key ID (§6.4)
    assert again.status_code == 422 and again.json()["code"] == "INVALID_STATE_TRANSITION"


def test_an_admin_revokes_a_key_and_a_command_it_signs_afterwards_is_refused_design_4(flow: Flow, pat: Person) -> None:
    ada = make_person("ada", ["admin"])
    html = ada.page("/keys/")
    element = f"cmd-revoke-{SigningKey.objects.get(key_id=pat.key.key.key_id).pk}"
    response = post_command(from_page(ada.key, html, element, {"reason": "laptop lost"}))
    assert response.status_code == 201, response.json()
    (event,) = documents_of(admin_group(), "ext.mwportal.registry.principal_key_revoked")
    assert event["payload"]["keyId"] == pat.key.key.key_id and event["payload"]["reason"] == "laptop lost"
    assert SigningKeyValidity.objects.get(key__key_id=pat.key.key.key_id).revoked_at == event["payload"]["revokedAt"]
    with nothing_written():
        refused(ErrorCode.AUTH_INVALID_SIGNATURE, pat.key.send, "mission.cancel", flow.group, {"reason": "x"},
                expected_revision=1)  # fmt: skip
    # Revoked once: a second revocation is refused.
    refused(ErrorCode.INVALID_STATE_TRANSITION, ada.key.send, REVOKE, admin_group(), {"keyId": pat.key.key.key_id})


def test_only_an_admin_revokes_and_sees_revoke_forms_design_4(pat: Person) -> None:
    ada = make_person("ada", ["admin"])
    assert 'name="revoke"' not in pat.page("/keys/") and 'name="revoke"' in ada.page("/keys/")
    assert ada.key.key.key_id not in pat.page("/keys/")  # a person sees only their own keys
    with nothing_written():
        refused(ErrorCode.AUTH_FORBIDDEN, pat.key.send, REVOKE, admin_group(), {"keyId": ada.key.key.key_id})


def test_a_missionowner_creates_a_mission_from_the_new_mission_page_spec_7_1(
    pat: Person, coordinator: AgentKey
) -> None:
    ensure_card(coordinator)
    html = pat.page("/missions/new/")
    group, mission = str(uuid.uuid4()), str(uuid.uuid4())
    built = {"groupId": urn(group), "missionId": urn(mission),
             "definitionOfDone": [{"criterionId": "done", "description": "ok", "evidenceRequired": ["human_review"]}],
             "deadline": format_timestamp(datetime.now(UTC) + timedelta(days=7)),
             "budget": {"currency": "EUR", "financialLimit": 100}}  # fmt: skip
    typed = {"title": "Q report", "objective": "Write it.", "coordinator": coordinator.urn}
    document = from_page(pat.key, html.replace('"groupId": null', f'"groupId": "{urn(group)}"'), "cmd-create", typed,
                         built)  # fmt: skip
    assert not {"membershipEpoch", "sessionEpoch"} & set(document)  # §15.1: mission.create carries no epoch
    response = post_command(document)
    assert response.status_code == 201, response.json()
    created = Mission.objects.get(id=mission)
    assert (created.title, str(created.created_by_id), str(created.coordinator_id)) == ("Q report", pat.key.id,
                                                                                         coordinator.id)  # fmt: skip


def test_a_person_without_the_missionowner_role_cannot_create_a_mission_spec_7_1(
    obi: Person, coordinator: AgentKey
) -> None:
    assert obi.client.get("/missions/new/").status_code == 403
    assert 'id="nav-new-mission"' not in obi.page("/")
    ensure_card(coordinator)
    group = str(uuid.uuid4())
    terms = {"missionId": new_urn(), "groupId": urn(group), "coordinatorId": coordinator.urn, "title": "x",
             "objective": "x", "deadline": format_timestamp(datetime.now(UTC) + timedelta(days=1)),
             "definitionOfDone": [{"criterionId": "d", "description": "d", "evidenceRequired": ["human_review"]}],
             "budget": {"currency": "EUR", "financialLimit": 1}}  # fmt: skip
    with nothing_written():
        refused(ErrorCode.AUTH_FORBIDDEN, obi.key.send, "mission.create", group, terms)


def test_the_owner_cancels_the_mission_from_its_page_spec_7_1(flow: Flow, pat: Person, obi: Person) -> None:
    item = flow.drive_to("queued")
    assert 'id="cmd-cancel-mission"' not in obi.page(f"/missions/{flow.group}/")
    url = f"/missions/{flow.group}/"
    with nothing_written():
        assert pat.submit(url, "cmd-cancel-mission", {"reason": ""}).json()["code"] == "SCHEMA_VALIDATION_FAILED"
    response = pat.submit(url, "cmd-cancel-mission", {"reason": "the board meeting moved"})
    assert response.status_code == 201, response.json()
    assert Mission.objects.get(group_id=flow.group).status == "cancelled"
    assert flow.item(item).state == "cancelled"  # propagated to unfinished WorkItems
    (event,) = documents_of(flow.group, "mission.cancelled")
    assert event["actor"] == pat.actor and event["payload"]["reason"] == "the board meeting moved"


def test_the_owner_assigns_a_new_coordinator_with_a_higher_epoch_spec_7_2(
    flow: Flow, pat: Person, obi: Person, worker2: AgentKey
) -> None:
    ensure_card(worker2)
    url = f"/missions/{flow.group}/"
    html = pat.page(url)
    assert f'value="{worker2.urn}"' in html
    # An observer signing the same Command is refused.
    as_obi = html.replace(urn(pat.agent.id), urn(obi.agent.id))
    with nothing_written():
        response = post_command(from_page(obi.key, as_obi, "cmd-assign", {"coordinator": worker2.urn}))
    assert response.status_code == 403 and response.json()["code"] == "AUTH_FORBIDDEN"
    # §7.2: the replacement receives a signed Context Package, generated by the Group Authority when the
    # Coordinator never published one.
    response = post_command(from_page(pat.key, html, "cmd-assign", {"coordinator": worker2.urn}))
    assert response.status_code == 201, response.json()
    mission = Mission.objects.get(group_id=flow.group)
    assert str(mission.coordinator_id) == worker2.id and mission.coordinator_epoch == 2
    (assigned,) = documents_of(flow.group, "mission.coordinator.assigned")
    assert assigned["payload"]["contextPackageId"] and assigned["payload"]["contextPackageHash"]
    # The page's Command carried the revision it was rendered at: sent again, it is stale.
    with nothing_written():
        response = post_command(from_page(pat.key, html, "cmd-assign", {"coordinator": worker2.urn}))
    assert response.status_code == 409 and response.json()["code"] == "REVISION_CONFLICT"


def test_the_owner_grants_a_cooperation_override_from_the_mission_page_spec_20(flow: Flow, pat: Person) -> None:
    url = f"/missions/{flow.group}/"
    html = pat.page(url)
    typed = {"policy_name": "message_rate", "target_kind": "message.post", "target_action": new_urn(),
             "reason": "the incident needs it"}  # fmt: skip
    beneficiary = {"type": "agent", "id": flow.worker.urn}
    past = {"beneficiary": beneficiary, "expiresAt": format_timestamp(datetime.now(UTC) - timedelta(minutes=1))}
    with nothing_written():
        response = post_command(from_page(pat.key, html, "cmd-override", typed, past))
    assert response.status_code == 400 and response.json()["code"] == "INVALID_COMMAND"
    future = {"beneficiary": beneficiary, "expiresAt": format_timestamp(datetime.now(UTC) + timedelta(hours=1))}
    response = post_command(from_page(pat.key, html, "cmd-override", typed, future))
    assert response.status_code == 201, response.json()
    (event,) = documents_of(flow.group, "policy.cooperation_override.granted")
    assert event["actor"] == pat.actor
