"""An essential ambiguity is raised in the WorkItem Conversation before
acceptance, and the Worker cannot accept the WorkItem as it stands (spec 10.1)."""

from __future__ import annotations

from missions.models import GroupEvent
from mwportal.protocol import ErrorCode
from tests.conftest import refused
from tests.workitems.flow import Flow, contract
from workitems.models import Offer


def raise_ambiguity(flow: Flow, item: str, **body: object) -> dict[str, object]:
    return flow.worker.send(
        "work.raise_ambiguity",
        flow.group,
        {"questions": ["Which survey wave: 2026 or 2025?"], "fields": ["inputs"], **body},
        target=flow.target(item),
    )


def test_an_ambiguity_is_raised_before_acceptance_and_blocks_accepting_it(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item)
    revision = flow.item(item).revision
    receipt = raise_ambiguity(flow, item)
    event = GroupEvent.objects.get(event_id=receipt["events"][0]["event_id"])
    assert event.type == "work.ambiguity_raised"
    assert event.body["questions"] == ["Which survey wave: 2026 or 2025?"]
    assert event.body["fields"] == ["inputs"] and event.body["contract_revision"] == 1
    assert flow.item(item).revision == revision  # only the offer changed
    assert Offer.objects.get(workitem_id=item, agent_id=flow.worker.id).decline_reason == "ambiguity"
    # The Worker must not take the WorkItem into its queue as it stands.
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.accept, item)


def test_a_new_offer_with_the_corrected_contract_resolves_it(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item)
    raise_ambiguity(flow, item)
    corrected = contract(inputs=[{"kind": "dataset", "ref": "survey-2026-wave-2"}])
    flow.offer(item, contract=corrected)
    flow.accept(item)
    it = flow.item(item)
    assert it.state == "queued" and it.contract_revision == 2 and it.accepted_contract_revision == 2


def test_an_ambiguity_names_real_contract_fields(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item)
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, raise_ambiguity, flow, item, fields=["mood"])
    assert err.details["field"] == "body.fields.0"
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, raise_ambiguity, flow, item, questions=[])
    assert err.details["field"] == "body.questions"


def test_only_an_offered_worker_raises_an_ambiguity(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker2])
    refused(ErrorCode.INVALID_STATE_TRANSITION, raise_ambiguity, flow, item)
