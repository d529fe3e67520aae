"""Delegation Grants through the REST binding (PROTOCOL §9.1, §15.1, §20): signed Commands on
``POST /api/v0.1/commands``; the expected outcomes are the specification's, written out here."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from missions.models import GroupEvent, Membership
from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey, Because, add_member, group_revision, make_agent, nothing_written, refused
from tests.workitems.flow import BASIS, CAPABILITY, COORDINATOR_EPOCH, Flow, contract, stamp
from workitems.models import DelegationGrant, WorkItem

pytestmark = pytest.mark.usefixtures("rest")

GRANT = "membership.grant_delegation"
CEILINGS = {
    "currency": "EUR", "financialLimit": 150, "modelTokenLimit": 300000, "toolCallLimit": 150,
    "computeSecondsLimit": 10800, "wallClockSecondsLimit": 21600, "externalSideEffectLimit": 15,
}  # fmt: skip


@pytest.fixture
def delegate(flow: Flow) -> AgentKey:
    agent = make_agent("acme", "Dora Delegate", ["worker"])
    add_member(flow.owner, flow.group, agent, ["work_delegate"])
    return agent


def grant_payload(grantee: AgentKey, target: str, **overrides: Any) -> dict[str, Any]:
    payload = {
        "grantId": urn(uuid.uuid4()),
        "granteeAgentId": grantee.urn,
        "targetWorkItemId": urn(target),
        "allowedCapabilities": [CAPABILITY],
        "budget": CEILINGS,
        "maxDescendantDepth": 2,
        "expiresAt": stamp(datetime.now(UTC) + timedelta(hours=1)),
    }
    return {**payload, **overrides}


def grant(flow: Flow, grantee: AgentKey, target: str, **overrides: Any) -> str:
    payload = grant_payload(grantee, target, **overrides)
    flow.coordinator.send(GRANT, flow.group, payload, coordinator_epoch=COORDINATOR_EPOCH)
    return str(payload["grantId"])


def delegated_authorize(
    flow: Flow, delegate: AgentKey, grant_id: str, parent: str, envelope: dict[str, Any] | None = None, **changes: Any
) -> str:
    """A delegate's work.authorize under ``parent``; each gets a goal of its own unless given
    (the same goal twice under one parent is duplicate decomposition, §20)."""
    item = str(uuid.uuid4())
    changes.setdefault("goal", f"Part {item}")
    payload = {"contract": contract(**changes), "parentWorkItemId": urn(parent), "delegationGrantId": grant_id}
    flow.send(delegate, "work.authorize", item, payload, **(envelope or {}))
    return item


def delegated_offer(flow: Flow, delegate: AgentKey, grant_id: str, item: str) -> dict[str, Any]:
    payload = {
        "candidateAgentIds": [flow.worker.urn], "offerExpiresInSeconds": 600, "selectionBasis": BASIS,
        "delegationGrantId": grant_id,
    }  # fmt: skip
    return flow.send(delegate, "work.offer", item, payload)


def forbidden(reason: str) -> Because:
    return Because(ErrorCode.AUTH_FORBIDDEN, reason)


# --- issuing -------------------------------------------------------------------------------------


def test_the_grant_records_every_member_of_section_9_1(flow: Flow, delegate: AgentKey) -> None:
    target = flow.authorize()
    grant_id = grant(flow, delegate, target, maxDescendantDepth=1)
    (body,) = GroupEvent.objects.filter(group_id=flow.group, type="membership.delegation.granted").values_list(
        "body", flat=True
    )
    recorded = body["delegationGrant"]
    epoch = Membership.objects.get(group_id=flow.group, agent_id=delegate.id).epoch
    assert {k: v for k, v in recorded.items() if k not in ("grantedAt", "expiresAt")} == {
        "grantId": grant_id,
        "granteeAgentId": delegate.urn,
        "missionId": urn(flow.mission),
        "groupId": urn(flow.group),
        "targetWorkItemId": urn(target),
        "allowedCapabilities": [CAPABILITY],
        "budget": CEILINGS,
        "maxDescendantDepth": 1,
        "granteeMembershipEpoch": epoch,
        "coordinatorEpoch": 1,
        "grantedBy": flow.coordinator.actor,
    }
    row = DelegationGrant.objects.get(id=grant_id.removeprefix("urn:uuid:"))
    assert row.document == recorded and str(row.target_id) == target and row.coordinator_epoch == 1


def test_only_the_current_coordinator_grants_spec_9_1(flow: Flow, delegate: AgentKey) -> None:
    target = flow.authorize()
    payload = grant_payload(delegate, target)
    # The MissionOwner (a person: no Coordinator Epoch is hers to carry) and a Worker are refused.
    attempts: list[tuple[AgentKey, dict[str, Any]]] = [(flow.owner, {}), (flow.worker, {"coordinator_epoch": 1})]
    for sender, envelope in attempts:
        with nothing_written(), pytest.raises(ProtocolError) as info:
            sender.send(GRANT, flow.group, payload, **envelope)
        assert info.value.code in (
            ErrorCode.AUTH_FORBIDDEN,
            ErrorCode.AUTH_STALE_COORDINATOR,
            ErrorCode.SCHEMA_VALIDATION_FAILED,
        ), info.value
    refused(ErrorCode.AUTH_STALE_COORDINATOR, flow.coordinator.send, GRANT, flow.group, payload, coordinator_epoch=2)


def test_the_grant_carries_the_coordinator_epoch_spec_15_1(flow: Flow, delegate: AgentKey) -> None:
    target = flow.authorize()
    with pytest.raises(Exception) as info:
        flow.coordinator.send(GRANT, flow.group, grant_payload(delegate, target))
    assert getattr(info.value, "code", None) in (ErrorCode.SCHEMA_VALIDATION_FAILED, ErrorCode.AUTH_STALE_COORDINATOR)


def test_a_grant_goes_only_to_a_work_delegate_spec_9_1(flow: Flow, delegate: AgentKey) -> None:
    target = flow.authorize()
    payload = grant_payload(flow.worker, target)
    refused(Because(ErrorCode.INVALID_COMMAND, "grantee-not-delegate"), flow.coordinator.send, GRANT, flow.group,
            payload, coordinator_epoch=1)  # fmt: skip


def test_a_coordinator_cannot_delegate_to_itself_cyclic_delegation_spec_20(flow: Flow) -> None:
    target = flow.authorize()
    payload = grant_payload(flow.coordinator, target)
    refused(Because(ErrorCode.INVALID_COMMAND, "cyclic-delegation"), flow.coordinator.send, GRANT, flow.group,
            payload, coordinator_epoch=1)  # fmt: skip


def test_a_grant_on_a_finished_target_is_refused_spec_9_1(flow: Flow, delegate: AgentKey) -> None:
    target = flow.drive_to("cancelled")
    payload = grant_payload(delegate, target)
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.coordinator.send, GRANT, flow.group, payload, coordinator_epoch=1)


# --- using ---------------------------------------------------------------------------------------


def test_a_delegate_authorizes_and_offers_in_the_subtree_citing_the_grant_spec_9_1(
    flow: Flow, delegate: AgentKey
) -> None:
    target = flow.authorize()
    grant_id = grant(flow, delegate, target)
    small = {**contract()["budget"], "financialLimit": 50}  # with the root's 100, within the ceiling of 150
    child = delegated_authorize(flow, delegate, grant_id, target, goal="Summarise the north", budget=small)
    row = WorkItem.objects.get(id=child)
    assert (str(row.parent_id), row.depth, str(row.delegation_grant_id)) == (target, 2, grant_id[9:])
    body = GroupEvent.objects.get(aggregate_id=child, type="work.authorized").body
    assert body["delegationGrantId"] == grant_id
    delegated_offer(flow, delegate, grant_id, child)
    assert flow.item(child).state == "offered"
    delegated_offer(flow, delegate, grant_id, target)  # the scope root itself
    assert flow.item(target).state == "offered"


def test_a_delegated_command_must_cite_the_grant_spec_9_1(flow: Flow, delegate: AgentKey) -> None:
    target = flow.authorize()
    grant(flow, delegate, target)
    payload = {"contract": contract(goal="x"), "parentWorkItemId": urn(target)}
    refused(forbidden("grant-required"), flow.send, delegate, "work.authorize", str(uuid.uuid4()), payload)
    refused(forbidden("grant-unknown"), delegated_authorize, flow, delegate, urn(uuid.uuid4()), target)


def test_a_grant_is_non_transferable_spec_9_1(flow: Flow, delegate: AgentKey) -> None:
    other = make_agent("acme", "Otto Delegate", ["worker"])
    add_member(flow.owner, flow.group, other, ["work_delegate"])
    target = flow.authorize()
    grant_id = grant(flow, delegate, target)
    refused(forbidden("grant-not-grantee"), delegated_authorize, flow, other, grant_id, target)


def test_outside_the_subtree_is_refused_spec_9_1(flow: Flow, delegate: AgentKey) -> None:
    target, elsewhere = flow.authorize(), flow.authorize()
    grant_id = grant(flow, delegate, target)
    refused(forbidden("grant-out-of-scope"), delegated_authorize, flow, delegate, grant_id, elsewhere)
    refused(forbidden("grant-out-of-scope"), delegated_offer, flow, delegate, grant_id, elsewhere)
    item = str(uuid.uuid4())  # no parentWorkItemId: not linked into the subtree
    payload = {"contract": contract(goal="loose"), "delegationGrantId": grant_id}
    refused(forbidden("grant-out-of-scope"), flow.send, delegate, "work.authorize", item, payload)


@pytest.mark.parametrize(
    "required",
    [{"id": "text.summarize", "version": "0.9.0"}, {"id": "image.render", "version": "1.0.0"}],
    ids=["below-the-minimum-version", "not-allowed"],
)
def test_capabilities_must_be_allowed_at_their_minimum_version_spec_9_1(
    flow: Flow, delegate: AgentKey, required: dict[str, str]
) -> None:
    target = flow.authorize()
    grant_id = grant(flow, delegate, target)
    refused(forbidden("grant-capability"), delegated_authorize, flow, delegate, grant_id, target,
            requiredCapabilities=[required])  # fmt: skip
    delegated_authorize(
        flow, delegate, grant_id, target, requiredCapabilities=[{"id": "text.summarize", "version": "1.2.0"}]
    )


def test_cumulative_budgets_stay_within_every_ceiling_spec_9_1(flow: Flow, delegate: AgentKey) -> None:
    target = flow.authorize()
    grant_id = grant(flow, delegate, target)  # financialLimit 150; each contract budgets 100
    delegated_authorize(flow, delegate, grant_id, target, goal="first half")
    refused(forbidden("grant-budget"), delegated_authorize, flow, delegate, grant_id, target, goal="second half")
    small = {**contract()["budget"], "financialLimit": 50}
    delegated_authorize(flow, delegate, grant_id, target, goal="second half", budget=small)


def test_descendant_depth_stays_within_the_grant_spec_9_1(flow: Flow, delegate: AgentKey) -> None:
    target = flow.authorize()
    grant_id = grant(flow, delegate, target, maxDescendantDepth=1)
    child = delegated_authorize(flow, delegate, grant_id, target, goal="one level down")
    refused(forbidden("grant-depth"), delegated_authorize, flow, delegate, grant_id, child, goal="two levels down")


# --- invalidation -------------------------------------------------------------------------------


def test_a_membership_change_invalidates_the_grant_spec_9_1(flow: Flow, delegate: AgentKey) -> None:
    target = flow.authorize()
    grant_id = grant(flow, delegate, target)
    add_member(flow.owner, flow.group, delegate, ["work_delegate", "reviewer"])  # a new Membership Epoch
    delegate_epoch = Membership.objects.get(group_id=flow.group, agent_id=delegate.id).epoch
    assert delegate_epoch == 2
    refused(forbidden("grant-membership-changed"), delegated_authorize, flow, delegate, grant_id, target)


def test_an_ended_membership_invalidates_the_grant_spec_9_1(flow: Flow, delegate: AgentKey) -> None:
    target = flow.authorize()
    grant_id = grant(flow, delegate, target)
    flow.owner.send(
        "membership.end", flow.group, {"principal": delegate.actor}, expected_revision=group_revision(flow.group)
    )
    with pytest.raises(Exception) as info:
        delegated_authorize(flow, delegate, grant_id, target, envelope={"membership_epoch": 1})
    # The former member is no member: its Group is not disclosed to it (§19), let alone its Grant honoured.
    assert getattr(info.value, "code", None) in (ErrorCode.GROUP_NOT_FOUND, ErrorCode.MEMBERSHIP_REQUIRED)


def test_an_expired_grant_is_refused_spec_9_1(flow: Flow, delegate: AgentKey) -> None:
    target = flow.authorize()
    grant_id = grant(flow, delegate, target, expiresAt=stamp(datetime.now(UTC) + timedelta(seconds=1)))
    time.sleep(1.1)
    refused(forbidden("grant-expired"), delegated_authorize, flow, delegate, grant_id, target)


@pytest.mark.parametrize("end", ["cancelled", "failed", "verified"])
def test_a_finished_target_invalidates_the_grant_spec_9_1(flow: Flow, delegate: AgentKey, end: str) -> None:
    target = flow.authorize()
    flow.offer(target)
    grant_id = grant(flow, delegate, target)
    child = delegated_authorize(flow, delegate, grant_id, target, goal="a part")
    if end == "cancelled":
        flow.cancel(target)
    elif end == "failed":
        flow.fail(target)
    else:
        flow.accept(target)
        flow.start(target)
        flow.submit(target)
        flow.accept_result(target)
    assert flow.item(target).state == end
    refused(forbidden("grant-target-ended"), delegated_offer, flow, delegate, grant_id, child)


def test_a_replaced_coordinator_invalidates_the_grant_spec_9_1(flow: Flow, delegate: AgentKey, owner: AgentKey) -> None:
    from tests.core.test_coordinator_lease import assign, publish_package
    from tests.workitems.flow import give_card

    target = flow.authorize()
    grant_id = grant(flow, delegate, target)
    publish_package(flow)  # §7.2: the replacement receives a signed Context Package
    assign(owner, flow.group, give_card(make_agent("acme", "Cleo Coordinator", ["coordinator"])))
    refused(forbidden("grant-coordinator-replaced"), delegated_authorize, flow, delegate, grant_id, target)
