"""The Work Contract (PROTOCOL §10.1): the kernel's ``work-contract.schema.json`` and the
rules a schema cannot say (``workitems/contract.py``); proposals and authorization (§10.2)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from missions.models import GroupEvent
from mwportal.protocol import ErrorCode, ProtocolError, schemas
from mwportal.protocol.ids import urn
from tests.conftest import Because, add_member, make_agent, refused
from tests.workitems.flow import BASIS, COORDINATOR_EPOCH, MISSION_BUDGET, Flow, contract
from workitems.contract import check_contract, is_material_change

INCOMPLETE = Because(ErrorCode.WORK_CONTRACT_INCOMPLETE, "contract_invalid")
INVALID = Because(ErrorCode.INVALID_COMMAND, "contract_invalid")


def test_the_flow_contract_is_a_normative_work_contract_spec_10_1() -> None:
    schemas.validate("work-contract", contract())
    assert check_contract(contract(), now=datetime.now(UTC), mission_budget=MISSION_BUDGET) == contract()


@pytest.mark.parametrize(
    "member", ["goal", "acceptanceCriteria", "budget", "retryPolicy", "executionApproval", "requiredCapabilities"]
)
def test_a_missing_member_is_work_contract_incomplete_naming_it_spec_10_1_spec_19(member: str) -> None:
    c = contract()
    del c[member]
    with pytest.raises(ProtocolError) as info:
        check_contract(c)
    assert (info.value.code, info.value.details) == (
        ErrorCode.WORK_CONTRACT_INCOMPLETE,
        {"field": f"/payload/contract/{member}", "reason": "contract_invalid"},
    )


def test_a_nested_missing_member_names_its_path_spec_10_1() -> None:
    c = contract()
    del c["retryPolicy"]["maxAttempts"]
    with pytest.raises(ProtocolError) as info:
        check_contract(c)
    assert info.value.code == ErrorCode.WORK_CONTRACT_INCOMPLETE
    assert info.value.details["field"] == "/payload/contract/retryPolicy/maxAttempts"


def test_a_command_with_an_incomplete_contract_is_refused_naming_the_member_spec_10_1(flow: Flow) -> None:
    c = contract()
    del c["goal"]
    err = refused(INCOMPLETE, flow.authorize, c)
    assert err.details["field"] == "/payload/contract/goal"
    c = contract()
    del c["retryPolicy"]["maxAttempts"]
    assert refused(INCOMPLETE, flow.authorize, c).details["field"] == "/payload/contract/retryPolicy/maxAttempts"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"requestedUrgency": "yesterday"}, "/payload/contract/requestedUrgency"),
        ({"opinion": "prose instead of members"}, "/payload/contract/opinion"),
    ],
)
def test_a_present_but_wrong_member_is_invalid_command_spec_10_1(change: dict[str, str], field: str) -> None:
    with pytest.raises(ProtocolError) as info:
        check_contract(contract(**change))
    assert (info.value.code, info.value.details["field"]) == (ErrorCode.INVALID_COMMAND, field)


def test_the_rules_the_schema_cannot_say_spec_10_1_spec_10_4_spec_12(flow: Flow) -> None:
    twice = contract()
    twice["acceptanceCriteria"] = [*twice["acceptanceCriteria"], twice["acceptanceCriteria"][0]]
    assert (
        refused(INVALID, flow.authorize, twice).details["field"] == "/payload/contract/acceptanceCriteria/2/criterionId"
    )
    risky = contract(sideEffectRisk="destructive")
    assert refused(INVALID, flow.authorize, risky).details["field"] == "/payload/contract/executionApproval"
    policy = contract(constraints={"dependencyPolicy": "whenever"})
    assert refused(INVALID, flow.authorize, policy).details["field"] == "/payload/contract/constraints/dependencyPolicy"
    checks = contract(constraints={"checks": {"nonexistent": [{"kind": "size", "max_bytes": 10}]}})
    assert (
        refused(INVALID, flow.authorize, checks).details["field"] == "/payload/contract/constraints/checks/nonexistent"
    )
    unknown = contract(constraints={"checks": {"complete": [{"kind": "vibes"}]}})
    assert (
        refused(INVALID, flow.authorize, unknown).details["field"]
        == "/payload/contract/constraints/checks/complete/0/kind"
    )
    late = contract(deadline="2001-01-01T00:00:00Z")
    assert refused(INVALID, flow.authorize, late).details["field"] == "/payload/contract/deadline"
    rich = contract(budget={"currency": "EUR", "financialLimit": 10**6})
    assert refused(INVALID, flow.authorize, rich).details["field"] == "/payload/contract/budget/financialLimit"
    dollars = contract(budget={"currency": "USD", "financialLimit": 1})
    assert refused(INVALID, flow.authorize, dollars).details["field"] == "/payload/contract/budget/currency"
    second = contract(contractVersion=2)
    assert refused(INVALID, flow.authorize, second).details["field"] == "/payload/contract/contractVersion"


def test_declared_checks_are_accepted_spec_13_2(flow: Flow) -> None:
    c = contract(
        constraints={"checks": {"complete": [{"kind": "size", "max_bytes": 1024, "media_type": "text/markdown"}]}}
    )
    item = flow.authorize(c)
    assert flow.item(item).contract["constraints"]["checks"]["complete"][0]["kind"] == "size"


def test_materiality_ignores_only_the_version_and_annotations_spec_10_1() -> None:
    base = contract()
    assert not is_material_change(base, {**base, "contractVersion": 2})
    assert not is_material_change(
        base, {**base, "extensions": {"urn:example:x": {"version": "1.0.0", "critical": False, "data": 1}}}
    )
    assert is_material_change(base, {**base, "businessImpact": "Investor call"})


def test_the_contract_schema_is_served_spec_10_1(client) -> None:  # type: ignore[no-untyped-def]
    response = client.get("/api/v0.1/schema/work-contract.json")
    assert response.status_code == 200
    assert response.json() == schemas.json_schema("work-contract")


def test_a_proposal_then_its_authorization_spec_10_2(flow: Flow) -> None:
    proposal = str(uuid.uuid4())
    receipt = flow.worker.send("work.propose", flow.group, {"proposalId": urn(proposal), "contract": contract()})
    proposed = GroupEvent.objects.get(group_id=flow.group, type="work.proposed").body["proposal"]
    assert (proposed["id"], proposed["proposedBy"], proposed["status"]) == (urn(proposal), flow.worker.actor, "open")
    assert receipt["events"][0]["kind"] == "work.proposed"
    item = str(uuid.uuid4())
    flow.send(flow.coordinator, "work.authorize", item, {"contract": contract(), "proposalId": urn(proposal)})
    assert str(flow.item(item).proposal_id) == proposal
    authorized = GroupEvent.objects.get(aggregate_id=item, type="work.authorized").body
    assert authorized["proposalId"] == urn(proposal)
    again = {"contract": contract(), "proposalId": urn(proposal)}
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.send, flow.coordinator, "work.authorize", str(uuid.uuid4()), again)


def test_only_coordinators_and_the_owner_authorize_spec_10_2(flow: Flow) -> None:
    payload = {"workItemId": urn(uuid.uuid4()), "contract": contract()}
    refused(ErrorCode.AUTH_FORBIDDEN, flow.worker.send, "work.authorize", flow.group, payload)


def test_a_taken_workitem_id_is_refused_without_naming_where_spec_10_2(flow: Flow) -> None:
    item = flow.authorize()
    err = refused(ErrorCode.INVALID_STATE_TRANSITION, flow.authorize, None, item)
    assert err.details["field"] == "/payload/workItemId"


def test_the_envelope_and_payload_name_the_same_workitem_spec_15_1(flow: Flow) -> None:
    item = flow.authorize()
    other = str(uuid.uuid4())
    payload = {"workItemId": urn(item), "reason": "x"}
    envelope = {"expected_revision": flow.revision(item), "work_item_id": other}
    envelope["coordinator_epoch"] = COORDINATOR_EPOCH
    send = flow.coordinator.send
    err = refused(ErrorCode.INVALID_COMMAND, send, "work.cancel", flow.group, payload, **envelope)
    assert err.details["field"] == "/workItemId"


def test_the_work_delegate_role_alone_authors_nothing_spec_9_1(flow: Flow) -> None:
    """§9.1: a delegated work.authorize or work.offer cites a persisted Grant; the role conveys no authority."""
    delegate = make_agent("acme", "Dora Delegate", ["worker"])
    add_member(flow.owner, flow.group, delegate, ["work_delegate"])
    item = flow.authorize()
    authorize = {"workItemId": urn(uuid.uuid4()), "contract": contract(), "parentWorkItemId": urn(item)}
    err = refused(ErrorCode.AUTH_FORBIDDEN, delegate.send, "work.authorize", flow.group, authorize)
    assert err.details["field"] == "/payload/delegationGrantId"
    cited = {**authorize, "delegationGrantId": urn(uuid.uuid4())}
    refused(ErrorCode.AUTH_FORBIDDEN, delegate.send, "work.authorize", flow.group, cited)
    offer = {"candidateAgentIds": [flow.worker.urn], "offerExpiresInSeconds": 60, "selectionBasis": BASIS}
    refused(ErrorCode.AUTH_FORBIDDEN, flow.send, delegate, "work.offer", item, offer)
