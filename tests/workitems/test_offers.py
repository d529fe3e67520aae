"""Offers, admission and ownership (PROTOCOL §10.1, §10.3)."""

from __future__ import annotations

from missions.models import GroupEvent
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import bare, urn
from tests.conftest import refused
from tests.workitems.flow import BASIS, DECLINE, Flow, contract
from workitems.models import Offer


def event_of(receipt: dict[str, object], index: int = 0) -> GroupEvent:
    events = receipt["events"]
    assert isinstance(events, list)
    return GroupEvent.objects.get(event_id=bare(events[index]["eventId"], "eventId"))


def test_an_offer_reserves_nothing_before_acceptance_spec_10_3(flow: Flow) -> None:
    item = flow.authorize()
    receipt = flow.offer(item, agents=[flow.worker, flow.worker2])
    it = flow.item(item)
    assert (it.owner_id, it.ownership_epoch, it.state) == (None, 0, "offered")
    offered = event_of(receipt).body
    assert offered["candidateAgentIds"] == [flow.worker.urn, flow.worker2.urn]
    assert offered["selectionBasis"] == BASIS and offered["contractVersion"] == 1


def test_the_first_acceptance_wins_and_the_other_offers_are_withdrawn_spec_10_3(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker, flow.worker2])
    accepted = event_of(flow.accept(item, flow.worker2)).body
    assert accepted["withdrawnAgentIds"] == [flow.worker.urn]
    assert accepted["selectionBasis"] == BASIS
    assert (accepted["ownershipEpoch"], accepted["assigneeId"]) == (1, flow.worker2.urn)
    statuses = {str(a): s for a, s in Offer.objects.filter(workitem_id=item).values_list("agent_id", "status")}
    assert statuses == {flow.worker.id: "withdrawn", flow.worker2.id: "accepted"}
    # §19: the losing candidate learns that another won exclusive ownership.
    refused(ErrorCode.WORK_ALREADY_OWNED, flow.accept, item, flow.worker)


def test_acceptance_is_compare_and_set_spec_15_3(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker, flow.worker2])
    stale = flow.revision(item) - 1
    refused(ErrorCode.REVISION_CONFLICT, flow.send, flow.worker, "work.accept_offer", item, {}, expected_revision=stale)


def test_a_decline_records_a_structured_reason_and_moves_no_revision_spec_10_3(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker, flow.worker2])
    revision = flow.revision(item)
    receipt = flow.send(flow.worker, DECLINE, item, {"reason": "capacity", "detail": "all slots busy"})
    assert event_of(receipt).body == {
        "workItemId": urn(item),
        "agentId": flow.worker.urn,
        "reason": "capacity",
        "detail": "all slots busy",
    }
    offer = Offer.objects.get(workitem_id=item, agent_id=flow.worker.id)
    assert (offer.status, offer.decline_reason) == ("declined", "capacity")
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, flow.send, flow.worker2, DECLINE, item, {"reason": "bored"})
    assert err.details["field"] == "/payload/reason"
    assert flow.revision(item) == revision
    flow.accept(item, flow.worker2)  # the decline did not move the revision


def test_the_selection_basis_is_structured_and_refuses_free_text_spec_10_3(flow: Flow) -> None:
    item = flow.authorize()
    err = refused(
        ErrorCode.SCHEMA_VALIDATION_FAILED, flow.offer, item, selectionBasis={**BASIS, "reasoning": "I mused"}
    )
    assert err.details["field"].startswith("/payload/selectionBasis")


def test_offers_go_only_to_worker_members_spec_10_3(flow: Flow) -> None:
    item = flow.authorize()
    err = refused(ErrorCode.INVALID_COMMAND, flow.offer, item, agents=[flow.coordinator])
    assert err.details["field"] == "/payload/candidateAgentIds/0"


def test_an_offer_names_one_expiry_spec_10_3(flow: Flow) -> None:
    item = flow.authorize()
    both = {"offerExpiresAt": "2099-01-01T00:00:00Z"}
    err = refused(ErrorCode.INVALID_COMMAND, flow.offer, item, **both)
    assert err.details["field"] == "/payload/offerExpiresInSeconds"
    err = refused(ErrorCode.INVALID_COMMAND, flow.offer, item, offerExpiresInSeconds=None,
                  offerExpiresAt="2001-01-01T00:00:00Z")  # fmt: skip
    assert err.details["field"] == "/payload/offerExpiresAt"


def test_a_material_contract_revision_increments_the_version_and_needs_renewed_acceptance_spec_10_1(
    flow: Flow,
) -> None:
    item = flow.authorize()
    flow.offer(item)
    revised = contract(goal="Summarise only the free-text answers", contractVersion=2)
    receipt = flow.offer(item, contract=revised)
    offered = event_of(receipt, -1).body
    assert (offered["contractChanged"], offered["contractVersion"]) == (True, 2)
    assert flow.item(item).contract_revision == 2
    # An annotation is not material: the version stays.
    annotated = {
        **revised,
        "extensions": {"urn:example:notes": {"version": "1.0.0", "critical": False, "data": "prose"}},
    }
    offered = event_of(flow.offer(item, contract=annotated), -1).body
    assert (offered["contractChanged"], offered["contractVersion"]) == (False, 2)
    flow.accept(item)
    assert flow.item(item).accepted_contract_revision == 2


def test_a_revision_must_carry_the_right_contract_version_spec_10_1(flow: Flow) -> None:
    item = flow.authorize()
    err = refused(ErrorCode.INVALID_COMMAND, flow.offer, item, contract=contract(goal="Something else"))
    assert err.details["field"] == "/payload/contract/contractVersion"
    err = refused(ErrorCode.INVALID_COMMAND, flow.offer, item, contract=contract(contractVersion=2))
    assert err.details["field"] == "/payload/contract/contractVersion"


def test_an_offer_after_a_contract_change_invalidates_the_older_offers_acceptance_spec_10_1(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker, flow.worker2])
    flow.offer(item, agents=[flow.worker2], contract=contract(goal="Summarise the 2025 wave", contractVersion=2))
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.accept, item, flow.worker)  # its offer was withdrawn
    flow.accept(item, flow.worker2)
