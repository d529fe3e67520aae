"""``accept_document`` and ``accept()``: the Group Authority's one write path (DESIGN §3).

Commands arrive as normative MWP 0.1 Command documents (PROTOCOL §15.1),
verified in the six stages of §6.4, checked for freshness, admitted, and
accepted in one transaction whose Events are signed Event documents (§15.2)
by the Group Authority service Principal.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from missions import registry as command_registry
from missions.authority import AggregateRef, Decision, Emit, accept_document
from missions.commands import register_principal
from missions.keyregistry import DjangoRegistry
from missions.models import ActionReceipt, AdmissionRecord, Agent, Group, GroupEvent, Organization, OrganizationEvent
from missions.service_keys import GROUP_AUTHORITY, principal_id
from mwportal.protocol import ErrorCode, ProtocolError, jcs
from mwportal.protocol.command import Key, format_timestamp
from mwportal.protocol.eventdoc import verify_event
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import sign_document
from tests.conftest import AgentKey, add_member, group_revision, make_agent, nothing_written, refused
from tests.protocol.normative import normative_problems, require_bundle


def _bytes(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def _post(doc: dict[str, Any]) -> dict[str, Any]:
    return accept_document(_bytes(doc))


POLICY = "ext.mwportal.scheduling.priority_policy_set"


@pytest.fixture
def planner(org: dict[str, str]) -> AgentKey:
    """An Agent with the Organization's admin role: it sets the priority policy in the
    administrative Group. Its key is valid from an hour ago, so that only freshness
    (not the key's validity, §6.4 stage 4) judges a Command issued minutes ago."""
    key = Key.generate()
    since = format_timestamp(datetime.now(UTC) - timedelta(hours=1))
    public_key = {"keyId": key.key_id, "algorithm": "Ed25519", "publicKey": key.public_key, "validFrom": since}
    principal_id, key_id = register_principal("acme", "Pat Planner", "agent", ["admin"], public_key)  # type: ignore[arg-type]
    assert key_id == key.key_id
    planner = AgentKey(principal_id, Key(key.key_id, key.seed, ("agent", principal_id), org["id"]), "acme")
    planner.open_session()
    return planner


def _policy(agent: AgentKey, group: str, weight: int = 1, **kw: Any) -> dict[str, Any]:
    """A simple signed Agent Command: the Organization's priority policy (administrative Group)."""
    return agent.command(POLICY, group, {"policy": {"classes": {"normal": weight}, "default_class": "normal"}}, **kw)


def _add(by: AgentKey, group: str, member: AgentKey, **kw: Any) -> dict[str, Any]:
    """A Mission Group Command: ``membership.change`` granting ``member`` the worker role."""
    if "expected_revision" not in kw:
        kw["expected_revision"] = group_revision(group)
    return by.command("membership.change", group, {"principal": member.actor, "roles": ["worker"]}, **kw)


# --- §15.1: idempotency -----------------------------------------------------------------------


def test_same_action_and_content_returns_the_original_receipt_spec_15_1(org: dict[str, str], planner: AgentKey) -> None:
    doc = _policy(planner, org["admin_group"])
    first = _post(doc)
    assert first["replayed"] is False and first["actionId"] == doc["actionId"]
    events = GroupEvent.objects.count()
    again = _post(doc)
    assert again == {**first, "replayed": True}
    assert GroupEvent.objects.count() == events


def test_changed_content_under_the_same_action_id_is_a_collision_spec_15_1(
    org: dict[str, str], planner: AgentKey
) -> None:
    doc = _policy(planner, org["admin_group"])
    _post(doc)
    other = _policy(planner, org["admin_group"], 2, action_id=doc["actionId"].removeprefix("urn:uuid:"))
    err = refused(ErrorCode.ACTION_ID_COLLISION, _post, other)
    assert err.related_action_id == doc["actionId"]


def test_a_forged_copy_of_a_known_command_gets_invalid_signature_not_the_receipt_issue_18_item_1(
    org: dict[str, str], planner: AgentKey
) -> None:
    doc = _policy(planner, org["admin_group"])
    _post(doc)
    forged = sign_document(doc, key_id=doc["signature"]["keyId"], seed=Key.generate().seed, profile="command")
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, _post, forged)


# --- §6.4: the six stages decide the wire code ------------------------------------------------


def test_bytes_that_are_not_one_json_value_are_a_protocol_violation_spec_6_4_stage_1(org: dict[str, str]) -> None:
    for data in (b"{", b'{"a":1}{}', b'{"a":1,"a":2}', b"\xef\xbb\xbf{}"):
        with nothing_written(), pytest.raises(ProtocolError) as info:
            accept_document(data)
        assert info.value.code == ErrorCode.PROTOCOL_VIOLATION, data


def test_a_document_the_schema_refuses_is_schema_validation_failed_spec_6_4_stage_2(
    org: dict[str, str], planner: AgentKey
) -> None:
    doc = _policy(planner, org["admin_group"])
    del doc["correlationId"]
    refused(ErrorCode.SCHEMA_VALIDATION_FAILED, _post, doc)


def test_the_wire_message_does_not_tell_which_check_failed_spec_6_4(org: dict[str, str], planner: AgentKey) -> None:
    tampered = _policy(planner, org["admin_group"])
    tampered["payload"]["policy"] = {"classes": {"normal": 9}, "default_class": "normal"}
    unknown_key = sign_document(
        _policy(planner, org["admin_group"]), key_id=urn(uuid.uuid4()), seed=planner.key.seed, profile="command"
    )
    messages = {refused(ErrorCode.AUTH_INVALID_SIGNATURE, _post, d).message for d in (tampered, unknown_key)}
    assert len(messages) == 1


def test_a_key_bound_to_another_principal_is_refused_spec_6_4_stage_4(
    org: dict[str, str], planner: AgentKey, worker2: AgentKey
) -> None:
    doc = _policy(planner, org["admin_group"])
    as_walt = sign_document(doc, key_id=worker2.key.key_id, seed=worker2.key.seed, profile="command")
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, _post, as_walt)


def test_identifiers_other_than_urn_uuid_are_refused_naming_the_member_design_4(
    org: dict[str, str], planner: AgentKey
) -> None:
    doc = _policy(planner, org["admin_group"])
    doc["groupId"] = "urn:example:group:1"
    doc = sign_document(doc, key_id=planner.key.key_id, seed=planner.key.seed, profile="command")
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, _post, doc)
    assert err.details == {"field": "groupId", "reason": "not-urn-uuid"}


def test_a_payload_the_catalogue_refuses_names_the_member_design_2(org: dict[str, str], planner: AgentKey) -> None:
    doc = planner.command(POLICY, org["admin_group"], {"policy": 7})
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, _post, doc)
    assert err.details["field"] == "/payload/policy"


def test_an_extension_kind_nobody_handles_is_an_invalid_command(org: dict[str, str], planner: AgentKey) -> None:
    doc = planner.command("ext.example.unknown.thing_do", org["admin_group"], {})
    err = refused(ErrorCode.INVALID_COMMAND, _post, doc)
    assert err.details["reason"] == "unsupported-kind"


# --- freshness (DESIGN §3: 300 s either way) ---------------------------------------------------


@pytest.mark.parametrize(("offset", "reason"), [(-301, "stale"), (301, "ahead")])
def test_a_new_command_outside_the_freshness_window_is_refused_design_3(
    org: dict[str, str], planner: AgentKey, offset: int, reason: str
) -> None:
    doc = _policy(planner, org["admin_group"], issued_at=datetime.now(UTC) + timedelta(seconds=offset))
    err = refused(ErrorCode.AUTH_INVALID_SIGNATURE, _post, doc)
    assert err.details["reason"] == reason


def test_a_command_inside_the_window_is_accepted_design_3(org: dict[str, str], planner: AgentKey) -> None:
    _post(_policy(planner, org["admin_group"], issued_at=datetime.now(UTC) - timedelta(seconds=250)))


# --- §6.4 first admission ----------------------------------------------------------------------


def test_every_accepted_signed_command_leaves_one_first_admission_record_spec_6_4(
    org: dict[str, str], planner: AgentKey
) -> None:
    doc = _policy(planner, org["admin_group"])
    before = AdmissionRecord.objects.count()
    _post(doc)
    _post(doc)  # a replay admits nothing new
    assert AdmissionRecord.objects.count() == before + 1
    record = AdmissionRecord.objects.latest("id")
    assert record.signing_hash == jcs.signing_hash(doc)


# --- §15.2: Events are signed documents ---------------------------------------------------------


def test_events_are_documents_signed_by_the_group_authority_spec_15_2(org: dict[str, str], planner: AgentKey) -> None:
    doc = _policy(planner, org["admin_group"])
    receipt = _post(doc)
    [ref] = receipt["events"]
    row = GroupEvent.objects.get(event_id=ref["eventId"].removeprefix("urn:uuid:"))
    event = row.as_wire()
    authority = {"type": "service", "id": urn(principal_id(org["id"], GROUP_AUTHORITY))}
    assert event["acceptedBy"] == authority
    assert event["cause"] == {"type": "command", "id": doc["actionId"]}
    assert event["correlationId"] == doc["correlationId"]
    assert event["commandHash"] == jcs.signing_hash(doc)
    assert event["actor"] == planner.actor
    assert (event["groupId"], event["sequence"], event["kind"]) == (
        urn(org["admin_group"]),
        ref["sequence"],
        ref["kind"],
    )
    verified = verify_event(row.document.encode(), DjangoRegistry(Organization.objects.get(id=org["id"])))
    assert verified.principal.id == authority["id"]


def test_every_event_of_a_group_validates_against_the_bundle_and_sequences_start_at_1_spec_15_2(
    org: dict[str, str], mission: dict[str, str], planner: AgentKey
) -> None:
    require_bundle()
    _post(_policy(planner, org["admin_group"]))
    rows = list(GroupEvent.objects.filter(group_id__in=[mission["group"], org["admin_group"]]).order_by("sequence"))
    rows = [r for r in rows if str(r.group_id) == mission["group"]] + [
        r for r in rows if str(r.group_id) == org["admin_group"]
    ]
    for group in (mission["group"], org["admin_group"]):
        mine = [r.sequence for r in rows if str(r.group_id) == group]
        assert mine == list(range(1, len(mine) + 1))
    for row in rows:
        document = row.as_wire()
        assert normative_problems("event", document) == [], document["kind"]
        assert document["eventId"].startswith("urn:uuid:")


def test_organization_scoped_events_carry_no_group_position_spec_15_2(org: dict[str, str]) -> None:
    require_bundle()
    agent = make_agent("acme", "Sam Session", ["worker"])
    row = OrganizationEvent.objects.filter(type="ext.missionweaveprotocol.identity.session_opened").latest("id")
    document = row.as_wire()
    assert not {"groupId", "sequence", "aggregateRevision"} & set(document)
    assert document["payload"] == {"agentId": agent.urn, "sessionEpoch": agent.session_epoch}
    assert normative_problems("event", document) == []


def test_a_handler_emitting_a_payload_the_catalogue_refuses_fails_design_2(
    org: dict[str, str], planner: AgentKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = command_registry.spec_for(POLICY)
    assert spec is not None

    def broken(ctx: Any) -> Decision:
        ref = AggregateRef("organization", ctx.actor.organization_id, 1)
        return Decision([Emit("ext.mwportal.scheduling.priority_policy_changed", ref, {"policy": 7})], ref)

    monkeypatch.setitem(command_registry._REGISTRY, POLICY, dataclasses.replace(spec, handler=broken))
    with nothing_written(), pytest.raises(RuntimeError, match="catalogue refuses"):
        _post(_policy(planner, org["admin_group"]))


# --- §15.1 epochs and membership ------------------------------------------------------------------


def test_a_stale_session_epoch_is_refused_after_a_new_session_spec_6_3(org: dict[str, str], planner: AgentKey) -> None:
    old = _policy(planner, org["admin_group"])
    planner.open_session()
    err = refused(ErrorCode.AUTH_STALE_SESSION, _post, old)
    assert err.details["current"] == planner.session_epoch
    _post(_policy(planner, org["admin_group"]))


def test_a_stale_membership_epoch_is_refused_spec_8(
    mission: dict[str, str], coordinator: AgentKey, outsider: AgentKey
) -> None:
    refused(ErrorCode.MEMBERSHIP_STALE, _post, _add(coordinator, mission["group"], outsider, membership_epoch=99))
    _post(_add(coordinator, mission["group"], outsider))


def test_a_non_member_and_an_absent_group_are_indistinguishable_spec_17_2(
    mission: dict[str, str], outsider: AgentKey
) -> None:
    outside = refused(ErrorCode.GROUP_NOT_FOUND, _post, _add(outsider, mission["group"], outsider, membership_epoch=1))
    absent_group = str(uuid.uuid4())
    absent = refused(
        ErrorCode.GROUP_NOT_FOUND,
        _post,
        _add(outsider, absent_group, outsider, membership_epoch=1, expected_revision=1),
    )
    assert (outside.message, outside.details) == (absent.message, absent.details)
    one, two = outside.document(), absent.document()
    one.pop("occurredAt"), two.pop("occurredAt")
    assert one == two


def test_membership_change_is_compare_and_set_spec_15_3(
    mission: dict[str, str], owner: AgentKey, outsider: AgentKey
) -> None:
    payload = {"principal": outsider.actor, "roles": ["worker"]}
    refused(ErrorCode.SCHEMA_VALIDATION_FAILED, owner.send, "membership.change", mission["group"], payload)
    stale = group_revision(mission["group"]) - 1
    err = refused(
        ErrorCode.REVISION_CONFLICT, owner.send, "membership.change", mission["group"], payload, expected_revision=stale
    )
    assert (err.expected_revision, err.current_revision) == (stale, group_revision(mission["group"]))
    add_member(owner, mission["group"], outsider, ["worker"])


def test_an_agent_cannot_issue_a_service_command_spec_15_1(org: dict[str, str], worker: AgentKey) -> None:
    payload = {"principal": {"type": "agent", "id": urn(uuid.uuid4())}, "name": "Mallory", "organizationRoles": []}
    refused(
        ErrorCode.AUTH_FORBIDDEN, worker.send, "ext.mwportal.registry.principal_register", org["admin_group"], payload
    )


def test_an_internal_kind_from_a_client_is_forbidden_issue_16(mission: dict[str, str], worker: AgentKey) -> None:
    payload = {"contentHash": "sha256:" + "0" * 64, "sizeBytes": 1, "mediaType": "text/plain"}
    with pytest.raises(ProtocolError) as info:
        worker.send("ext.mwportal.artifact.content_store", mission["group"], payload)
    assert info.value.code in (ErrorCode.AUTH_FORBIDDEN, ErrorCode.SCHEMA_VALIDATION_FAILED)


def test_receipts_name_the_events_appended_spec_15_1(org: dict[str, str], planner: AgentKey) -> None:
    doc = _policy(planner, org["admin_group"])
    receipt = _post(doc)
    assert set(receipt) == {"actionId", "events", "aggregateRevision", "replayed"}
    stored = ActionReceipt.objects.get(actor=planner.id, action_id=doc["actionId"].removeprefix("urn:uuid:"))
    assert stored.content_hash == jcs.signing_hash(doc)


def test_the_organization_has_its_service_principals_in_the_registry_design_4(org: dict[str, str]) -> None:
    services = Agent.objects.filter(organization_id=org["id"], kind=Agent.KIND_SERVICE)
    assert services.count() == 2
    registry = DjangoRegistry(Organization.objects.get(id=org["id"]))
    admin = Group.objects.get(id=org["admin_group"])
    event = GroupEvent.objects.filter(group=admin).order_by("sequence").first()
    assert event is not None
    verify_event(event.document.encode(), registry)


def test_organization_scoped_events_are_immutable_spec_15_2(org: dict[str, str], planner: AgentKey) -> None:
    from django.db import DatabaseError, transaction

    row = OrganizationEvent.objects.latest("id")
    for change in (
        lambda: OrganizationEvent.objects.filter(pk=row.pk).update(body={}),
        lambda: OrganizationEvent.objects.filter(pk=row.pk).delete(),
    ):
        with pytest.raises(DatabaseError), transaction.atomic():
            change()
    assert OrganizationEvent.objects.get(pk=row.pk).document == row.document


def test_a_nul_character_is_refused_naming_the_member_on_every_binding_issue_16(
    org: dict[str, str], planner: AgentKey
) -> None:
    """PostgreSQL cannot store a NUL; accept_document refuses it for REST and the WebSocket alike."""
    policy = {"classes": {"normal": 1}, "default_class": "normal", "groups": {"a\x00": {"class": "normal"}}}
    doc = planner.command(POLICY, org["admin_group"], {"policy": policy})
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, _post, doc)
    assert err.details == {"field": "/payload/policy/groups/a\x00", "reason": "nul-character"}
    literal = planner.command(POLICY, org["admin_group"], {"policy": {**policy, "groups": {"a\\u0000": {}}}})
    with pytest.raises(ProtocolError) as info:
        _post(literal)  # a backslash and "u0000" are six characters, not a NUL: the policy's own check decides
    assert info.value.details.get("reason") != "nul-character"


def test_a_command_signed_after_its_key_was_revoked_is_refused_spec_6_4_stage_4(
    org: dict[str, str], planner: AgentKey
) -> None:
    from missions.keyregistry import record_validity
    from missions.models import SigningKey

    _post(_policy(planner, org["admin_group"]))
    revoked = format_timestamp(datetime.now(UTC) - timedelta(seconds=1))
    record_validity(SigningKey.objects.get(key_id=planner.key.key_id), revoked_at=revoked)
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, _post, _policy(planner, org["admin_group"], 3))
