"""The one catalogue of Command and Event kinds (issue 18 item 3, DESIGN §2 and §5, PROTOCOL §15).

The kind lists below are written from PROTOCOL §15.1 and §15.2, not read from
the module; the example payloads use the member names of the reference
implementation (``docs/protocol-choices.md``) and embed the bundle's own valid
objects where a payload carries a normative object.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mwportal.protocol import catalogue
from mwportal.protocol.catalogue import PayloadError, UnknownKind
from mwportal.protocol.schemas import is_valid
from tests.test_core_kinds_evidence import COMMAND_KINDS, EVENT_KINDS

from .bundle import bundle_root

# §15.1's and §15.2's lists of core kinds, written out once for the tests (tests/test_core_kinds_evidence.py).
CORE_COMMANDS_SPEC_15_1 = set(COMMAND_KINDS)
CORE_EVENTS_SPEC_15_2 = set(EVENT_KINDS)

# §15.1's reference-core extensions (registration, session, dependency insertion, lease renewal,
# usage recording, archival), then the project's own profile.
REFERENCE_EXTENSION_COMMANDS = {
    "ext.missionweaveprotocol.registry.agent_card_register",
    "ext.missionweaveprotocol.identity.session_open",
    "ext.missionweaveprotocol.core.work_dependency_add",
    "ext.missionweaveprotocol.core.work_execution_lease_renew",
    "ext.missionweaveprotocol.core.resource_usage_record",
    "ext.missionweaveprotocol.core.group_archive",
}
PROJECT_COMMANDS = {
    "ext.mwportal.admin.organization_create",
    "ext.mwportal.registry.principal_register",
    "ext.mwportal.registry.principal_key_enroll",
    "ext.mwportal.registry.principal_key_revoke",
    "ext.mwportal.scheduling.priority_policy_set",
    "ext.mwportal.audit.event_redact",
    "ext.mwportal.context.package_publish",
    "ext.mwportal.context.package_forward",
    "ext.mwportal.work.offer_decline",
    "ext.mwportal.work.lease_expire",
    "ext.mwportal.work.late_result_record",
    "ext.mwportal.artifact.content_store",
    "ext.mwportal.review.result_record",
    "ext.mwportal.governance.cooperation_policy_set",
    "ext.mwportal.extension.profile_register",
    "ext.mwportal.extension.profile_pin",
    "ext.mwportal.mission.coordinator_lease_expire",
    "ext.mwportal.mission.coordinator_reconcile",
}
ORGANIZATION_SCOPED = {
    "ext.missionweaveprotocol.registry.agent_card_register": "ext.missionweaveprotocol.registry.agent_card_registered",
    "ext.missionweaveprotocol.identity.session_open": "ext.missionweaveprotocol.identity.session_opened",
}
COORDINATOR_EPOCH_SPEC_15_1 = {
    "mission.renew_coordinator",
    "mission.submit_for_approval",
    "mission.create_child",
    "membership.grant_delegation",
    "work.accept_result",
    "mission.terminate",
}
ALWAYS_COMPARE_AND_SET_SPEC_15_3 = {
    "work.accept_offer",
    "ext.missionweaveprotocol.core.work_execution_lease_renew",
    "membership.change",
    "membership.end",
    "mission.approve",
    "approval.grant_execution",
}
CITES_THE_LEASE_SPEC_11_3 = {
    "ext.missionweaveprotocol.core.work_execution_lease_renew",
    "work.checkpoint",
    "work.block",
    "artifact.publish",
    "work.submit",
}


def _vector(name: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((bundle_root() / "conformance/vectors/valid" / f"{name}.json").read_text())
    return value


def uid(n: int) -> str:
    return f"urn:uuid:10000000-0000-4000-8000-{n:012d}"


H = "sha256:" + "0" * 64
T = "2026-03-02T10:00:00Z"
AGENT = {"type": "agent", "id": uid(1)}
HUMAN = {"type": "human", "id": uid(2)}
CRITERION = {"criterionId": "done", "description": "It is done.", "evidenceRequired": ["human_review"]}
BUDGET6 = {
    "currency": "USD",
    "financialLimit": 5,
    "modelTokenLimit": 1000,
    "toolCallLimit": 10,
    "computeSecondsLimit": 60,
    "wallClockSecondsLimit": 600,
    "externalSideEffectLimit": 1,
}
CAP = {"id": "code.review", "version": "2.0.0"}
BASIS = {
    "requiredCapabilities": [CAP],
    "verifiedMatches": [CAP],
    "authorizationEligible": True,
    "availabilityEstimate": T,
    "expectedCost": 1,
    "reliabilityEvidence": [],
    "policyRulesApplied": ["highest ranked"],
}
CHECKPOINT = {"phase": "testing", "completedMilestones": ["build"], "createdAt": T}
OWNED = {"workItemId": uid(3), "ownershipEpoch": 2}
LEASED = {**OWNED, "executionLeaseId": uid(4)}


def command_examples() -> dict[str, dict[str, Any]]:
    """One valid payload per Command kind, as an Agent of the reference implementation writes it."""
    contract = _vector("work-contract")
    evidence = [_vector("evidence")]
    mission: dict[str, Any] = {
        "missionId": uid(5),
        "groupId": uid(6),
        "coordinatorId": AGENT["id"],
        "title": "T",
        "objective": "O",
    }
    mission |= {"definitionOfDone": [CRITERION], "deadline": T, "budget": {"toolCallLimit": 3}}
    return {
        "mission.create": mission,
        "mission.create_follow_up": {**mission, "followUpOfMissionId": uid(7)},
        "mission.create_child": {**mission, "parentWorkItemId": uid(3), "failurePolicy": "fail_parent_work_item"},
        "mission.assign_coordinator": {"coordinatorId": uid(8), "leaseSeconds": 120},
        "mission.renew_coordinator": {"leaseSeconds": 120},
        "mission.submit_for_approval": {"artifactHashes": [H]},
        "mission.approve": {
            "approvalId": uid(9),
            "missionRevision": 2,
            "artifactHashes": [H],
            "acceptancePolicyVersion": "2.1.0",
            "comments": "fine",
        },
        "mission.request_changes": {"missionRevision": 2, "feedback": "More tests."},
        "ext.mwportal.mission.coordinator_lease_expire": {"coordinatorEpoch": 2},
        "ext.mwportal.mission.coordinator_reconcile": {
            "contextPackageId": uid(26),
            "contextPackageHash": H,
            "throughSequence": 9,
        },
        "mission.cancel": {"reason": "no longer needed"},
        "mission.terminate": {"reason": "cannot be done"},
        "membership.change": {"principal": AGENT, "roles": ["worker", "reviewer"], "provisional": True},
        "membership.end": {"principal": AGENT},
        "membership.grant_delegation": {
            "grantId": uid(10),
            "granteeAgentId": AGENT["id"],
            "targetWorkItemId": uid(3),
            "allowedCapabilities": [CAP],
            "budget": BUDGET6,
            "maxDescendantDepth": 2,
            "expiresAt": T,
        },
        "message.post": {"messageId": uid(11), "conversationId": uid(12), "content": "hello", "mentions": [AGENT]},
        "message.correct": {
            "amendmentId": uid(13),
            "messageId": uid(11),
            "replacementContent": "hello, all",
            "reason": "typo",
        },
        "message.retract": {"amendmentId": uid(14), "messageId": uid(11), "reason": "wrong thread"},
        "message.redact": {"amendmentId": uid(15), "messageId": uid(11), "reason": "secret"},
        "work.propose": {"proposalId": uid(16), "contract": contract, "dependencyIds": [uid(17)]},
        "work.authorize": {"workItemId": uid(3), "contract": contract, "delegationGrantId": uid(10)},
        "work.offer": {
            "workItemId": uid(3),
            "candidateAgentIds": [AGENT["id"], uid(18)],
            "selectionBasis": BASIS,
            "offerExpiresInSeconds": 60,
        },
        "work.accept_offer": {"workItemId": uid(3), "ownershipLeaseSeconds": 600},
        "work.start": {**OWNED, "executionLeaseSeconds": 60},
        "work.checkpoint": {**LEASED, "checkpoint": CHECKPOINT, "resumeWithinSeconds": 60},
        "work.block": {**LEASED, "reason": "waiting for credentials", "checkpoint": CHECKPOINT},
        "work.unblock": {"workItemId": uid(3)},
        "work.submit": {**LEASED, "artifactIds": [uid(19)], "evidence": evidence},
        "work.accept_result": {"workItemId": uid(3), "evidence": evidence},
        "work.fail": {"workItemId": uid(3), "reason": "gave up", "ownershipEpoch": None, "executionLeaseId": None},
        "work.cancel": {"workItemId": uid(3), "reason": "obsolete"},
        "artifact.publish": {"artifact": _vector("artifact"), "ownershipEpoch": 2, "executionLeaseId": uid(4)},
        "approval.grant_execution": {
            "approvalId": uid(20),
            **OWNED,
            "operations": ["deploy.production"],
            "budget": {"externalSideEffectLimit": 1},
        },
        "policy.grant_cooperation_override": {
            "grantId": uid(21),
            "policyName": "message_rate",
            "beneficiary": AGENT,
            "targetCommandKind": "message.post",
            "targetActionId": uid(22),
            "reason": "incident channel",
            "expiresAt": T,
        },
        "ext.missionweaveprotocol.registry.agent_card_register": {"card": _vector("agent-card")},
        "ext.missionweaveprotocol.identity.session_open": {"agentId": AGENT["id"]},
        "ext.missionweaveprotocol.core.work_dependency_add": {"workItemId": uid(3), "dependencyId": uid(17)},
        "ext.missionweaveprotocol.core.work_execution_lease_renew": {**LEASED, "leaseSeconds": 60},
        "ext.missionweaveprotocol.core.resource_usage_record": {**LEASED, "usageDelta": {"computeSeconds": 4}},
        "ext.missionweaveprotocol.core.group_archive": {"snapshot": _vector("group-snapshot")},
        "ext.mwportal.admin.organization_create": {"organizationId": uid(23), "slug": "org", "name": "Org"},
        "ext.mwportal.registry.principal_register": {
            "principal": AGENT,
            "name": "builder",
            "organizationRoles": [],
            "publicKey": {"keyId": uid(24), "algorithm": "Ed25519", "publicKey": "AAAA", "validFrom": T},
        },
        "ext.mwportal.registry.principal_key_enroll": {
            "publicKey": {"keyId": uid(25), "algorithm": "Ed25519", "publicKey": "AAAA", "validFrom": T}
        },
        "ext.mwportal.registry.principal_key_revoke": {"keyId": uid(25), "reason": "The laptop was lost."},
        "ext.mwportal.scheduling.priority_policy_set": {"policy": {"weights": {}}},
        "ext.mwportal.governance.cooperation_policy_set": {"policy": {"queued_work_items": {"hard": 10}}},
        "ext.mwportal.audit.event_redact": {"sequence": 3, "reason": "legal request"},
        "ext.mwportal.extension.profile_register": {"profile": _vector("extension-profile")},
        "ext.mwportal.extension.profile_pin": {"profileUri": "https://profiles.example.org/geo", "major": 2},
        "ext.mwportal.context.package_publish": {"contextPackage": _vector("context-package")},
        "ext.mwportal.context.package_forward": {"contextPackageId": uid(26), "version": 2, "toGroupId": uid(27)},
        "ext.mwportal.work.offer_decline": {"workItemId": uid(3), "reason": "deadline"},
        "ext.mwportal.work.lease_expire": {**OWNED, "leaseType": "ownership"},
        "ext.mwportal.work.late_result_record": {**OWNED, "artifactIds": [], "evidence": [uid(28)]},
        "ext.mwportal.artifact.content_store": {"contentHash": H},
        "ext.mwportal.review.result_record": {
            "workItemId": uid(3),
            "submissionId": uid(29),
            "evidence": evidence,
            "requestReview": ["done"],
        },
    }


def _required(kind: str) -> list[str]:
    return list(catalogue.command(kind).payload_schema.get("required", []))


# --- the kinds --------------------------------------------------------------------------------


def test_the_core_command_kinds_are_those_of_spec_15_1() -> None:
    core = {k for k in catalogue.COMMAND_KINDS if not k.startswith("ext.")}
    assert core == CORE_COMMANDS_SPEC_15_1


def test_the_core_event_kinds_are_those_of_spec_15_2() -> None:
    core = {k for k in catalogue.EVENT_KINDS if not k.startswith("ext.")}
    assert core == CORE_EVENTS_SPEC_15_2


def test_the_extension_commands_are_the_reference_cores_and_the_projects_spec_15_1_and_18() -> None:
    extensions = {k for k in catalogue.COMMAND_KINDS if k.startswith("ext.")}
    assert extensions == REFERENCE_EXTENSION_COMMANDS | PROJECT_COMMANDS


def test_it_has_the_lease_renewal_yielding_work_progressed_issue_18_item_2() -> None:
    renew = catalogue.command("ext.missionweaveprotocol.core.work_execution_lease_renew")
    assert renew.events == ("work.progressed",)
    assert catalogue.commands_yielding("work.progressed") == (renew.kind,)


def test_every_yielded_event_kind_is_in_the_catalogue() -> None:
    for kind in catalogue.COMMAND_KINDS:
        definition = catalogue.command(kind)
        assert definition.events, kind
        for event_kind in definition.events:
            assert catalogue.is_event(event_kind), (kind, event_kind)


def test_every_event_kind_is_yielded_by_some_command() -> None:
    for kind in catalogue.EVENT_KINDS:
        assert catalogue.commands_yielding(kind), kind


def test_the_organization_scoped_kinds_stand_outside_every_group_spec_15_1_15_2() -> None:
    commands = {k for k in catalogue.COMMAND_KINDS if catalogue.command(k).scope == "organization"}
    events = {k for k in catalogue.EVENT_KINDS if catalogue.event(k).scope == "organization"}
    assert commands == set(ORGANIZATION_SCOPED)
    assert events == set(ORGANIZATION_SCOPED.values())
    for kind, fact in ORGANIZATION_SCOPED.items():
        assert fact in catalogue.command(kind).events
        assert catalogue.command(kind).issuers == ("service",)
        assert catalogue.command(kind).epochs == {"service": ()}


def test_coordinator_commands_carry_the_coordinator_epoch_spec_15_1() -> None:
    for kind in COORDINATOR_EPOCH_SPEC_15_1:
        definition = catalogue.command(kind)
        assert "coordinator" in definition.issuers, kind
        assert "coordinatorEpoch" in definition.epochs["coordinator"], kind
        assert "sessionEpoch" in definition.epochs["coordinator"], kind


def test_the_always_compare_and_set_transitions_require_expected_revision_spec_15_3() -> None:
    for kind in ALWAYS_COMPARE_AND_SET_SPEC_15_3:
        assert catalogue.command(kind).compare_and_set, kind
        assert catalogue.as_data()["commands"][kind]["compareAndSet"] is True


def test_commands_of_the_lease_holder_cite_the_current_lease_spec_11_3() -> None:
    for kind in CITES_THE_LEASE_SPEC_11_3:
        definition = catalogue.command(kind)
        assert definition.epochs["work_owner"][-2:] == ("ownershipEpoch", "executionLeaseId"), kind
        assert {"ownershipEpoch", "executionLeaseId"} <= set(_required(kind)), kind
    # A Worker-reported failure cites both or, from the Coordinator, neither.
    fail = catalogue.command("work.fail")
    assert "executionLeaseId" in fail.epochs["work_owner"]
    assert not catalogue.is_valid_payload("work.fail", {"workItemId": uid(3), "reason": "x", "ownershipEpoch": 2})


def test_mission_creation_carries_no_epochs_spec_15_1() -> None:
    for kind in ("mission.create", "mission.create_follow_up"):
        assert catalogue.command(kind).epochs == {"mission_owner": ()}


# --- the schemas ------------------------------------------------------------------------------


def _all_schemas() -> list[tuple[str, dict[str, Any]]]:
    data = catalogue.as_data()
    return [(k, v["payloadSchema"]) for k, v in {**data["commands"], **data["events"]}.items()]


def test_every_payload_schema_is_a_valid_draft_2020_12_schema() -> None:
    for kind, schema in _all_schemas():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema", kind


def test_every_payload_schema_compiles_with_a_distinct_id() -> None:
    catalogue.compile_all()
    ids = [schema["$id"] for _, schema in _all_schemas()]
    assert len(ids) == len(set(ids))


def test_as_data_has_the_shape_of_design_5() -> None:
    data = catalogue.as_data()
    assert set(data) == {"commands", "events"}
    assert set(data["commands"]) == set(catalogue.COMMAND_KINDS)
    assert set(data["events"]) == set(catalogue.EVENT_KINDS)
    for entry in data["commands"].values():
        assert {"payloadSchema", "issuers", "epochs", "aggregate", "events"} <= set(entry)
        assert set(entry["epochs"]) == set(entry["issuers"])
    for entry in data["events"].values():
        assert "payloadSchema" in entry


def test_as_data_is_a_copy() -> None:
    data = catalogue.as_data()
    data["commands"]["work.start"]["payloadSchema"]["required"].append("nonsense")
    assert "nonsense" not in catalogue.as_data()["commands"]["work.start"]["payloadSchema"]["required"]


def test_the_examples_here_cover_every_command_kind() -> None:
    assert set(command_examples()) == set(catalogue.COMMAND_KINDS)


@pytest.mark.parametrize("kind", sorted(CORE_COMMANDS_SPEC_15_1 | REFERENCE_EXTENSION_COMMANDS | PROJECT_COMMANDS))
def test_a_reference_implementation_payload_validates_and_a_mutated_one_does_not(kind: str) -> None:
    payload = command_examples()[kind]
    catalogue.validate_payload(kind, payload)
    for member in _required(kind):
        broken = {k: v for k, v in payload.items() if k != member}
        assert not catalogue.is_valid_payload(kind, broken), (kind, "without", member)
    # Every member the example gives has a shape: an array of nulls fits none of them.
    for member in payload:
        assert not catalogue.is_valid_payload(kind, {**payload, member: [None]}), (kind, member)
    assert not catalogue.is_valid_payload(kind, [payload])


def test_embedded_normative_objects_are_checked_in_full() -> None:
    payload = command_examples()["work.authorize"]
    contract = copy.deepcopy(payload["contract"])
    del contract["acceptanceCriteria"]
    assert not catalogue.is_valid_payload("work.authorize", {**payload, "contract": contract})
    lease = _vector("lease")
    assert is_valid("lease", lease)
    started = {"workItemId": uid(3), "ownershipEpoch": 2, "executionLease": lease, "executionLeaseExpiresAt": T}
    catalogue.validate_payload("work.started", started)
    assert not catalogue.is_valid_payload("work.started", {**started, "executionLease": {**lease, "leaseType": "x"}})


def test_the_mission_create_coordinator_is_named_once() -> None:
    payload = {"missionId": uid(5), "groupId": uid(6)}
    assert not catalogue.is_valid_payload("mission.create", payload)
    assert catalogue.is_valid_payload("mission.create", {**payload, "coordinatorAgentId": uid(1)})
    assert catalogue.is_valid_payload("mission.create", {**payload, "coordinatorId": uid(1)})
    assert not catalogue.is_valid_payload(
        "mission.create", {**payload, "coordinatorId": uid(1), "coordinatorAgentId": uid(1)}
    )


def test_a_refusal_names_the_payload_member() -> None:
    with pytest.raises(PayloadError) as caught:
        catalogue.validate_payload("work.start", {"workItemId": "not a uri", "ownershipEpoch": 0})
    text = "; ".join(caught.value.errors)
    assert "/payload/workItemId" in text
    assert "/payload/ownershipEpoch" in text


def test_an_unknown_kind_is_refused() -> None:
    for lookup in (catalogue.command, catalogue.event):
        with pytest.raises(UnknownKind):
            lookup("work.dance")
    with pytest.raises(UnknownKind):
        catalogue.validate_payload("work.dance", {})
    with pytest.raises(UnknownKind):
        catalogue.commands_yielding("work.start")


def test_a_message_never_carries_authority_spec_9() -> None:
    post = command_examples()["message.post"]
    assert not catalogue.is_valid_payload("message.post", {**post, "authority": True})
    assert not catalogue.is_valid_payload("message.posted", {"messageId": uid(11), "authority": True})


# --- the bundle's vectors ---------------------------------------------------------------------


def _documents_with_payloads(root: Path) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for folder in ("conformance/vectors/valid", "cryptography/vectors/signed-documents/valid"):
        for path in sorted((root / folder).glob("*.json")):
            document = json.loads(path.read_text())
            if isinstance(document, dict) and "kind" in document and "payload" in document:
                out.append((f"{folder}/{path.name}", document))
    return out


def test_the_payloads_of_the_bundles_valid_commands_and_events_validate() -> None:
    documents = _documents_with_payloads(bundle_root())
    assert {d["kind"] for _, d in documents} >= {"mission.create", "message.posted", "mission.submit_for_approval"}
    for name, document in documents:
        kind = document["kind"]
        assert catalogue.is_command(kind) or catalogue.is_event(kind), name
        assert catalogue.is_command(kind) == ("actionId" in document), name
        catalogue.validate_payload(kind, document["payload"])


# --- properties -------------------------------------------------------------------------------

KINDS = st.sampled_from((*catalogue.COMMAND_KINDS, *catalogue.EVENT_KINDS))
MEMBER = st.text(st.characters(categories=("Ll", "Lu")), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(KINDS)
def test_as_data_round_trips_through_json_and_each_schema_holds_its_examples(kind: str) -> None:
    data = catalogue.as_data()
    assert json.loads(json.dumps(data)) == data
    section = "commands" if catalogue.is_command(kind) else "events"
    schema = data[section][kind]["payloadSchema"]
    assert schema["examples"]
    for example in schema["examples"]:
        catalogue.validate_payload(kind, example)


@settings(max_examples=80, deadline=None)
@given(KINDS, MEMBER, st.integers() | st.text(max_size=5) | st.booleans())
def test_commands_carry_unknown_members_and_events_do_not(kind: str, member: str, value: Any) -> None:
    definition = catalogue.command(kind) if catalogue.is_command(kind) else catalogue.event(kind)
    known = set(definition.payload_schema["properties"])
    example = definition.examples[0]
    extra = f"x{member}"
    if extra in known:
        return
    # Command payloads are open (a signed bundle vector carries an extra member); what the Group
    # Authority writes is closed.
    assert catalogue.is_valid_payload(kind, {**example, extra: value}) == catalogue.is_command(kind)


# --- the catalogue and the Command envelope agree ----------------------------------------------

ACTOR_TYPES = {
    # A child Mission's owner is the parent's Coordinator, an Agent (§14).
    "mission_owner": ("human", "agent"),
    "coordinator": ("agent",),
    "work_delegate": ("agent",),
    "worker": ("agent",),
    "work_owner": ("agent",),
    "member": ("human", "agent"),
    "service": ("service",),
}
ENVELOPE_EPOCHS = {"sessionEpoch", "membershipEpoch", "coordinatorEpoch"}


def _envelope(kind: str, actor_type: str, epochs: tuple[str, ...], payload: dict[str, Any]) -> dict[str, Any]:
    envelope: dict[str, Any] = {
        "protocolVersion": "0.1",
        "actionId": uid(90),
        "actor": {"type": actor_type, "id": uid(91)},
        "kind": kind,
        "correlationId": uid(92),
        "issuedAt": T,
        "payload": payload,
        "signature": {"algorithm": "Ed25519", "keyId": uid(93), "createdAt": T, "value": "AAAA"},
    }
    if catalogue.command(kind).scope == "group":
        envelope["groupId"] = uid(94)
    carried = set(epochs) & ENVELOPE_EPOCHS
    if actor_type == "agent":
        carried.add("sessionEpoch")  # every Agent Command (§15.1)
    for name in carried:
        envelope[name] = 3
    return envelope


def test_each_issuer_with_its_epochs_makes_an_envelope_the_command_schema_admits_spec_15_1() -> None:
    examples = command_examples()
    for kind in catalogue.COMMAND_KINDS:
        definition = catalogue.command(kind)
        for role, epochs in definition.epochs.items():
            # Creating a root or follow-up Mission is a human's, before any Membership (§7.1).
            types = ("human",) if kind in {"mission.create", "mission.create_follow_up"} else ACTOR_TYPES[role]
            for actor_type in types:
                envelope = _envelope(kind, actor_type, epochs, examples[kind])
                assert is_valid("command", envelope), (kind, role, actor_type)


def test_the_command_schema_refuses_an_issuer_without_its_epochs_spec_15_1() -> None:
    examples = command_examples()
    for kind in COORDINATOR_EPOCH_SPEC_15_1:
        envelope = _envelope(kind, "agent", catalogue.command(kind).epochs["coordinator"], examples[kind])
        del envelope["coordinatorEpoch"]
        assert not is_valid("command", envelope), kind


def test_it_selects_kinds_by_aggregate_and_scope() -> None:
    work = catalogue.event_kinds(aggregate="work_item")
    assert {"work.offer.created", "work.progressed", "ext.missionweaveprotocol.core.resource_usage_recorded"} <= set(
        work
    )
    assert "mission.created" not in work
    assert set(catalogue.event_kinds(scope="organization")) == set(ORGANIZATION_SCOPED.values())
    assert set(catalogue.command_kinds(scope="organization")) == set(ORGANIZATION_SCOPED)
    assert catalogue.command_kinds(aggregate="message") == (
        "message.correct",
        "message.post",
        "message.redact",
        "message.retract",
    )
    assert set(catalogue.command_kinds()) == set(catalogue.COMMAND_KINDS)
    with pytest.raises(ValueError):
        catalogue.event_kinds(aggregate="workitem")
