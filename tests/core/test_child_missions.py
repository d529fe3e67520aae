"""Parent and child Missions (PROTOCOL §14), through the REST binding.

§14 as the specification writes it: the Parent Coordinator is the child's
MissionOwner; the parent WorkItem and the child link to each other; the graph
is acyclic; the child's budget, deadline and permissions are subsets of the
parent's; beyond the Organization's default maximum depth a child needs
explicit approval (here: a Cooperation Override Grant, §20); the child's
approved result becomes Evidence and Artifacts of the parent WorkItem.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from missions.authority import accept
from missions.commands import group_service_command
from missions.models import GroupEvent, Membership, Mission
from mwportal.protocol import ErrorCode, schemas
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey, add_member, refused
from tests.core.mission_support import (
    approve,
    flow_fixture,  # noqa: F401  (the flow fixture)
    held,
    rest_fixture,  # noqa: F401  (every Command over REST)
    status,
    submit,
    verified,
)
from tests.workitems.flow import Flow, contract, give_card, stamp

POLICY_SET = "ext.mwportal.governance.cooperation_policy_set"


def child_payload(flow: Flow, item: str, coordinator: AgentKey, **over: Any) -> dict[str, Any]:
    """A ``mission.create_child`` payload within the parent WorkItem's terms (§14)."""
    budget = flow.item(item).contract["budget"]
    payload = {
        "coordinatorId": coordinator.urn, "missionId": urn(uuid.uuid4()), "groupId": urn(uuid.uuid4()),
        "parentWorkItemId": urn(item), "title": "Deep dive", "objective": "Research the free-text answers",
        "definitionOfDone": [{"criterionId": "done", "description": "done", "evidenceRequired": ["human_review"]}],
        "deadline": stamp(datetime.now(UTC) + timedelta(hours=12)),
        "budget": {k: v if k == "currency" else v // 2 for k, v in budget.items()},
        "failurePolicy": "fail_parent_work_item",
    }  # fmt: skip
    payload.update(over)
    return payload


def create_child(flow: Flow, item: str, payload: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return flow.coordinator.send(
        "mission.create_child", flow.group, payload, expected_revision=flow.revision(item), work_item_id=item,
        coordinator_epoch=1, **kw,
    )  # fmt: skip


def test_the_parent_coordinator_owns_the_child_and_both_link_14(flow: Flow) -> None:
    item = flow.authorize()
    payload = child_payload(flow, item, give_card(flow.worker2))
    create_child(flow, item, payload)
    child = Mission.objects.get(id=payload["missionId"].removeprefix("urn:uuid:"))
    owner = Membership.objects.get(group_id=child.group_id, agent_id=flow.coordinator.id)
    assert owner.roles == ["mission_owner"] and str(child.created_by_id) == flow.coordinator.id
    assert str(child.parent_workitem_id) == item and str(flow.item(item).child_mission_id) == str(child.id)
    created = GroupEvent.objects.get(group_id=child.group_id, type="mission.created").body["mission"]
    schemas.validate("mission", created)
    assert created["missionOwner"] == flow.coordinator.actor  # an Agent owns a child Mission


def test_a_child_budget_is_a_subset_of_the_parent_14(flow: Flow) -> None:
    item = flow.authorize()
    budget = flow.item(item).contract["budget"]
    coordinator = give_card(flow.worker2)
    over = {**budget, "financialLimit": budget["financialLimit"] + 1}
    err = refused(
        ErrorCode.INVALID_COMMAND, create_child, flow, item, child_payload(flow, item, coordinator, budget=over)
    )
    assert err.details["field"] == "/payload/budget/financialLimit"
    unbounded = {k: v for k, v in budget.items() if k != "modelTokenLimit"}  # no token limit: more than the parent
    err = refused(ErrorCode.INVALID_COMMAND, create_child, flow, item,
                  child_payload(flow, item, coordinator, budget=unbounded))  # fmt: skip
    assert err.details["field"] == "/payload/budget/modelTokenLimit"
    other_currency = {**budget, "currency": "USD", "financialLimit": 1}
    refused(ErrorCode.INVALID_COMMAND, create_child, flow, item,
            child_payload(flow, item, coordinator, budget=other_currency))  # fmt: skip


def test_a_child_deadline_is_no_later_than_the_parent_14(flow: Flow) -> None:
    item = flow.authorize(contract(deadline=stamp(datetime.now(UTC) + timedelta(days=2))))
    late = stamp(datetime.now(UTC) + timedelta(days=3))
    err = refused(ErrorCode.INVALID_COMMAND, create_child, flow, item,
                  child_payload(flow, item, give_card(flow.worker2), deadline=late))  # fmt: skip
    assert err.details["field"] == "/payload/deadline"


def test_child_permissions_are_a_subset_of_the_parent_missions_14(flow: Flow) -> None:
    item = flow.authorize()
    payload = child_payload(flow, item, give_card(flow.worker2), permissions=["email.send"])
    err = refused(ErrorCode.INVALID_COMMAND, create_child, flow, item, payload)
    assert err.details["field"] == "/payload/permissions"
    create_child(flow, item, {**payload, "permissions": []})


def test_the_mission_graph_stays_acyclic_14(flow: Flow) -> None:
    """A child is always a new Mission in a new Group: naming an ancestor's Mission or Group is refused."""
    item = flow.authorize()
    coordinator = give_card(flow.worker2)
    refused(ErrorCode.INVALID_STATE_TRANSITION, create_child, flow, item,
            child_payload(flow, item, coordinator, missionId=urn(flow.mission)))  # fmt: skip
    refused(ErrorCode.REVISION_CONFLICT, create_child, flow, item,
            child_payload(flow, item, coordinator, groupId=urn(flow.group)))  # fmt: skip


def _set_depth(flow: Flow, org: dict[str, str], hard: int) -> None:
    policy = {"delegation_depth": {"hard": hard}}
    flow.owner.send(POLICY_SET, org["admin_group"], {"policy": policy}, expected_revision=0)


def test_beyond_the_default_depth_a_child_needs_an_explicit_grant_14_20(flow: Flow, org: dict[str, str]) -> None:
    _set_depth(flow, org, 1)
    item = flow.authorize()
    walt = give_card(flow.worker2)
    payload = child_payload(flow, item, walt)
    create_child(flow, item, payload)  # depth 1: within the default
    child = Flow({"group": payload["groupId"].removeprefix("urn:uuid:"),
                  "mission": payload["missionId"].removeprefix("urn:uuid:")},
                 flow.coordinator, walt, flow.worker, flow.worker)  # fmt: skip
    add_member(flow.coordinator, child.group, flow.worker, ["worker"])
    small = {k: v if k == "currency" else 2 for k, v in flow.item(item).contract["budget"].items()}
    deep_item = child.authorize(contract(budget=small, deadline=stamp(datetime.now(UTC) + timedelta(hours=6))))
    deeper = child_payload(
        child, deep_item, give_card(flow.worker), deadline=stamp(datetime.now(UTC) + timedelta(hours=3))
    )
    document = walt.command("mission.create_child", child.group, deeper, expected_revision=child.revision(deep_item),
                            work_item_id=deep_item, coordinator_epoch=1)  # fmt: skip
    err = refused(ErrorCode.RATE_LIMITED, walt.send_document, document)
    assert err.details["policyName"] == "delegation_depth"
    grant = str(uuid.uuid4())
    approval = {
        "grantId": urn(grant), "policyName": "delegation_depth", "beneficiary": walt.actor,
        "targetCommandKind": "mission.create_child", "targetActionId": document["actionId"],
        "reason": "the research needs one more level", "expiresAt": stamp(datetime.now(UTC) + timedelta(hours=1)),
    }  # fmt: skip
    accept(group_service_command("policy.grant_cooperation_override", child.group, approval))
    same = document["actionId"].removeprefix("urn:uuid:")  # the grant names exactly this Command
    cited = walt.command("mission.create_child", child.group, deeper, expected_revision=child.revision(deep_item),
                         work_item_id=deep_item, coordinator_epoch=1, action_id=same,
                         cooperation_override_grant_id=grant)  # fmt: skip
    walt.send_document(cited)
    grandchild = Mission.objects.get(id=deeper["missionId"].removeprefix("urn:uuid:"))
    created = GroupEvent.objects.get(group_id=grandchild.group_id, type="mission.created").body["mission"]
    assert created["parent"]["depth"] == 2


def test_the_childs_approved_result_becomes_evidence_and_artifacts_of_the_parent_workitem_14(flow: Flow) -> None:
    item = flow.authorize()
    walt = give_card(flow.worker2)
    payload = child_payload(flow, item, walt)
    create_child(flow, item, payload)
    group = payload["groupId"].removeprefix("urn:uuid:")
    child = Flow({"group": group, "mission": payload["missionId"].removeprefix("urn:uuid:")},
                 flow.coordinator, walt, flow.worker, flow.worker)  # fmt: skip
    add_member(flow.coordinator, group, flow.worker, ["worker"])
    small = {k: v if k == "currency" else 1 for k, v in flow.item(item).contract["budget"].items()}
    verified_in_child(
        child, contract(goal="Read", budget=small, deadline=stamp(datetime.now(UTC) + timedelta(hours=6)))
    )
    hashes = [held(group, flow.worker)]
    refused(ErrorCode.INVALID_STATE_TRANSITION, approve, flow.coordinator, group, hashes)  # not submitted yet
    submit(walt, group, hashes)  # the child's Coordinator submits
    approve(flow.coordinator, group, hashes)  # the Parent Coordinator, as the child's MissionOwner, approves
    assert status(group) == "approved"
    assert flow.item(item).state == "verified"
    accepted = GroupEvent.objects.get(group_id=flow.group, type="work.result.accepted", aggregate_id=item).body
    evidence = accepted["evidence"][0]
    schemas.validate("evidence", evidence)
    assert evidence["result"] == "passed" and evidence["artifactHashes"] == hashes
    approval = GroupEvent.objects.get(group_id=group, type="mission.approved").body["approval"]
    assert approval["kind"] == "child_mission" and approval["approver"] == flow.coordinator.actor
    # The child's approved Artifacts are the parent Group's: its Coordinator submits them (§14, §7.3).
    submit(flow.coordinator, flow.group, hashes)
    assert status(flow.group) == "awaiting_approval"


def test_only_an_approved_childs_artifacts_reach_the_parent_14(flow: Flow) -> None:
    item = flow.authorize()
    walt = give_card(flow.worker2)
    payload = child_payload(flow, item, walt)
    create_child(flow, item, payload)
    group = payload["groupId"].removeprefix("urn:uuid:")
    hashes = [held(group, flow.worker)]
    submit(walt, group, hashes)
    flow.cancel(item)  # the parent WorkItem is given up; the child is not approved
    err = refused(ErrorCode.INVALID_COMMAND, submit, flow.coordinator, flow.group, hashes)
    assert err.details["field"] == "/payload/artifactHashes"


def verified_in_child(child: Flow, terms: dict[str, Any]) -> str:
    item = child.authorize(terms)
    child.offer(item)
    child.accept(item)
    child.start(item)
    child.submit(item)
    child.accept_result(item)
    return item


def test_a_child_needs_an_active_parent_mission_14(flow: Flow) -> None:
    item = verified(flow)
    submit(flow.coordinator, flow.group, [held(flow.group, flow.worker)])
    payload = child_payload(flow, item, give_card(flow.worker2))
    err = refused(ErrorCode.INVALID_STATE_TRANSITION, create_child, flow, item, payload)
    assert "awaiting_approval" in err.message


def test_a_childs_work_needs_only_the_parents_capabilities_and_data_access_14(flow: Flow) -> None:
    item = flow.authorize()
    walt = give_card(flow.worker2)
    payload = child_payload(flow, item, walt)
    create_child(flow, item, payload)
    child = Flow({"group": payload["groupId"].removeprefix("urn:uuid:"),
                  "mission": payload["missionId"].removeprefix("urn:uuid:")},
                 flow.coordinator, walt, flow.worker, flow.worker)  # fmt: skip
    small = {k: v if k == "currency" else 1 for k, v in flow.item(item).contract["budget"].items()}
    terms = {"budget": small, "deadline": stamp(datetime.now(UTC) + timedelta(hours=6))}
    other = contract(goal="Translate", requiredCapabilities=[{"id": "text.translate", "version": "1.0.0"}], **terms)
    err = refused(ErrorCode.INVALID_COMMAND, child.authorize, other)
    assert err.details["field"] == "/payload/contract/requiredCapabilities/0"
    wider = [{"resource": "urn:example:survey-2026", "operations": ["read", "write"]}]
    err = refused(ErrorCode.INVALID_COMMAND, child.authorize, contract(goal="Edit", allowedResources=wider, **terms))
    assert err.details["field"] == "/payload/contract/allowedResources/0"
    child.authorize(contract(goal="Read", **terms))  # the parent's capability and read access
