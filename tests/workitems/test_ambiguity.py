"""An essential ambiguity is a Message in the WorkItem's Conversation, raised before acceptance;
from then on no candidate accepts the contract it names until the Coordinator offers a corrected
contract (a higher revision) or authorizes a replacement WorkItem (PROTOCOL §10.1, §9)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from conversations.handlers import AMBIGUITY_SCHEMA
from missions.handlers.common import main_conversation_id
from missions.models import GroupEvent
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey, refused
from tests.workitems.flow import Flow, contract
from workitems.documents import conversation_id

pytestmark = pytest.mark.usefixtures("rest")


def ambiguity(questions: list[str] | None = None, fields: list[str] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"questions": ["Which survey wave: 2026 or 2025?"] if questions is None else questions}
    data["fields"] = ["inputArtifacts"] if fields is None else fields
    return {"type": "data_ref", "schema": AMBIGUITY_SCHEMA, "data": data}


def raise_ambiguity(flow: Flow, item: str, agent: AgentKey | None = None, conversation: str | None = None,
                    **mark: Any) -> str:  # fmt: skip
    """``message.post`` of an essential ambiguity in the WorkItem's Conversation; the Message ID."""
    message_id = urn(uuid.uuid4())
    content = [{"type": "text", "text": "The contract does not say which wave."}, ambiguity(**mark)]
    payload = {"messageId": message_id, "conversationId": conversation or conversation_id(flow.item(item)),
               "content": content}  # fmt: skip
    (agent or flow.worker).send("message.post", flow.group, payload)
    return message_id


def test_an_ambiguity_is_a_message_in_the_work_item_conversation_10_1(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker, flow.worker2])
    revision = flow.revision(item)
    message_id = raise_ambiguity(flow, item)
    event = GroupEvent.objects.get(group_id=flow.group, type="message.posted").as_wire()
    assert event["workItemId"] == urn(item) and event["conversationId"] == conversation_id(flow.item(item))
    assert event["payload"]["messageId"] == message_id and event["payload"]["message"]["authority"] is False
    assert event["payload"]["message"]["content"][1] == ambiguity()
    assert flow.revision(item) == revision  # a Message changes no WorkItem


def test_no_candidate_accepts_the_contract_just_called_ambiguous_10_1(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker, flow.worker2])
    raise_ambiguity(flow, item)
    # Not the Worker that raised it, and not its sibling candidate either.
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.accept, item, flow.worker)
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.accept, item, flow.worker2)
    # An offer of the same contract resolves nothing.
    flow.offer(item, agents=[flow.worker2])
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.accept, item, flow.worker2)


def test_without_an_ambiguity_a_candidate_accepts_10_3(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker, flow.worker2])
    flow.accept(item, flow.worker2)
    assert flow.item(item).state == "queued"


def test_a_new_offer_with_the_corrected_contract_resolves_it_10_1(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker, flow.worker2])
    raise_ambiguity(flow, item)
    corrected = contract(inputArtifacts=["sha256:" + "ab" * 32], contractVersion=2)
    flow.offer(item, agents=[flow.worker, flow.worker2], contract=corrected)
    flow.accept(item, flow.worker2)
    it = flow.item(item)
    assert it.state == "queued" and it.contract_revision == 2 and it.accepted_contract_revision == 2


def test_a_replacement_work_item_can_be_accepted_10_1(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker, flow.worker2])
    raise_ambiguity(flow, item)
    replacement = flow.authorize(contract(inputArtifacts=["sha256:" + "cd" * 32]))
    flow.offer(replacement, agents=[flow.worker2])
    flow.accept(replacement, flow.worker2)
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.accept, item, flow.worker2)


def test_an_ambiguity_names_real_contract_members_and_asks_something_10_1(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item)
    err = refused(ErrorCode.INVALID_COMMAND, raise_ambiguity, flow, item, fields=["mood"])
    assert err.details["field"] == "/payload/content/1/data/fields/0"
    err = refused(ErrorCode.INVALID_COMMAND, raise_ambiguity, flow, item, questions=[])
    assert err.details["field"] == "/payload/content/1/data/questions"


def test_only_an_offered_candidate_raises_it_in_the_work_item_conversation_10_1(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker2])
    refused(ErrorCode.INVALID_STATE_TRANSITION, raise_ambiguity, flow, item)  # Wanda holds no offer
    planning = urn(main_conversation_id(flow.group))
    refused(ErrorCode.INVALID_COMMAND, raise_ambiguity, flow, item, flow.worker2, planning)
    flow.accept(item, flow.worker2)
    refused(ErrorCode.INVALID_STATE_TRANSITION, raise_ambiguity, flow, item, flow.worker2)  # after acceptance
