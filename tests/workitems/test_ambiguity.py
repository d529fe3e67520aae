"""An essential ambiguity is raised in the WorkItem Conversation before
acceptance, and the Worker cannot accept the WorkItem as it stands (PROTOCOL §10.1)."""

from __future__ import annotations

from typing import Any

from missions.models import GroupEvent
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import bare, urn
from tests.conftest import refused
from tests.workitems.flow import AMBIGUITY, Flow, contract
from workitems.models import Offer


def raise_ambiguity(flow: Flow, item: str, **payload: Any) -> dict[str, Any]:
    body = {"questions": ["Which survey wave: 2026 or 2025?"], "fields": ["inputArtifacts"], **payload}
    return flow.send(flow.worker, AMBIGUITY, item, body)


def test_an_ambiguity_is_raised_before_acceptance_and_blocks_accepting_it_spec_10_1(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item)
    revision = flow.revision(item)
    receipt = raise_ambiguity(flow, item)
    event = GroupEvent.objects.get(event_id=bare(receipt["events"][0]["eventId"], "eventId"))
    assert event.type == "ext.mwportal.work.ambiguity_raised"
    assert event.body == {
        "workItemId": urn(item),
        "agentId": flow.worker.urn,
        "questions": ["Which survey wave: 2026 or 2025?"],
        "fields": ["inputArtifacts"],
    }
    assert flow.revision(item) == revision  # only the offer changed
    assert Offer.objects.get(workitem_id=item, agent_id=flow.worker.id).decline_reason == "ambiguity"
    # The Worker must not take the WorkItem into its queue as it stands.
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.accept, item)


def test_a_new_offer_with_the_corrected_contract_resolves_it_spec_10_1(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item)
    raise_ambiguity(flow, item)
    corrected = contract(inputArtifacts=["sha256:" + "ab" * 32], contractVersion=2)
    flow.offer(item, contract=corrected)
    flow.accept(item)
    it = flow.item(item)
    assert it.state == "queued" and it.contract_revision == 2 and it.accepted_contract_revision == 2


def test_an_ambiguity_names_real_contract_members_spec_10_1(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item)
    err = refused(ErrorCode.INVALID_COMMAND, raise_ambiguity, flow, item, fields=["mood"])
    assert err.details["field"] == "/payload/fields/0"
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, raise_ambiguity, flow, item, questions=[])
    assert err.details["field"] == "/payload/questions"


def test_only_an_offered_worker_raises_an_ambiguity_spec_10_1(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker2])
    refused(ErrorCode.INVALID_STATE_TRANSITION, raise_ambiguity, flow, item)
