"""Offers, admission and ownership (spec 10.3)."""

from __future__ import annotations

import pytest

from missions.models import GroupEvent
from mwportal.protocol import ErrorCode, ProtocolError
from tests.workitems.flow import BASIS, Flow
from workitems.models import Offer


def test_offer_reserves_nothing_before_acceptance(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker, flow.worker2])
    it = flow.item(item)
    assert (it.owner_id, it.ownership_epoch, it.state) == (None, 0, "offered")


def test_first_acceptance_wins_and_other_offers_are_withdrawn(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker, flow.worker2])
    receipt = flow.accept(item, flow.worker2)
    event = GroupEvent.objects.get(event_id=receipt["events"][0]["event_id"])
    assert event.body["withdrawn"] == [flow.worker.id]
    assert event.body["selection_basis"] == BASIS
    assert event.body["ownership_epoch"] == 1
    statuses = {
        str(agent): status for agent, status in Offer.objects.filter(workitem_id=item).values_list("agent_id", "status")
    }
    assert statuses == {flow.worker.id: "withdrawn", flow.worker2.id: "accepted"}
    with pytest.raises(ProtocolError) as info:
        flow.accept(item, flow.worker)
    assert info.value.code == ErrorCode.INVALID_STATE_TRANSITION


def test_decline_records_a_structured_reason(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker, flow.worker2])
    flow.worker.send(
        "work.decline_offer", flow.group, {"reason": "capacity", "detail": "all slots busy"}, target=flow.target(item)
    )
    offer = Offer.objects.get(workitem_id=item, agent_id=flow.worker.id)
    assert (offer.status, offer.decline_reason) == ("declined", "capacity")
    with pytest.raises(ProtocolError) as info:
        flow.worker2.send("work.decline_offer", flow.group, {"reason": "bored"}, target=flow.target(item))
    assert info.value.details["field"] == "body.reason"
    flow.accept(item, flow.worker2)  # the decline did not move the revision


def test_selection_basis_is_structured_and_refuses_free_text(flow: Flow) -> None:
    item = flow.authorize()
    with pytest.raises(ProtocolError) as info:
        flow.offer(item, selection_basis={**BASIS, "reasoning": "I thought about it"})
    assert info.value.code == ErrorCode.SCHEMA_VALIDATION_FAILED
    assert info.value.details["field"] == "body.selection_basis.reasoning"


def test_offer_only_to_worker_members(flow: Flow) -> None:
    item = flow.authorize()
    with pytest.raises(ProtocolError) as info:
        flow.offer(item, agents=[flow.coordinator])
    assert info.value.details["field"] == "body.agents.0"


def test_a_material_contract_revision_needs_renewed_acceptance(flow: Flow) -> None:
    from tests.workitems.flow import contract

    item = flow.authorize()
    flow.offer(item)
    receipt = flow.offer(item, contract=contract(goal="Summarise only the free-text answers"))
    event = GroupEvent.objects.get(event_id=receipt["events"][-1]["event_id"])
    assert event.body["contract_changed"] is True
    assert flow.item(item).contract_revision == 2
    flow.offer(item, contract=contract(goal="Summarise only the free-text answers", notes="prose only"))
    assert flow.item(item).contract_revision == 2  # notes are not material
    flow.accept(item)
    assert flow.item(item).accepted_contract_revision == 2
