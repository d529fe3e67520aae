"""``message.post``, ``message.correct``, ``message.retract``, ``message.redact`` through
``POST /api/v0.1/commands`` (PROTOCOL §9, §9.1), and a Group's Conversations over REST."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from missions.models import GroupEvent
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import urn
from tests.api.support import API, bearer, http
from tests.conftest import AgentKey, Because, refused
from tests.conversations.conftest import amend, planning, post
from tests.protocol.normative import normative_problems, require_bundle
from tests.workitems.flow import Flow
from workitems.documents import conversation_id

pytestmark = pytest.mark.usefixtures("rest")


@pytest.fixture(autouse=True)
def _bundle() -> None:
    require_bundle()


def events_of(flow: Flow, kind: str) -> list[dict[str, Any]]:
    rows = GroupEvent.objects.filter(group_id=flow.group, type=kind).order_by("sequence")
    return [row.as_wire() for row in rows]


def test_any_member_posts_a_message_that_has_no_authority_9(flow: Flow) -> None:
    message_id = post(flow, flow.worker, "Draft is ready.", mentions=[flow.coordinator.actor])
    (event,) = events_of(flow, "message.posted")
    payload = event["payload"]
    assert payload["messageId"] == message_id and payload["authority"] is False
    message = payload["message"]
    assert normative_problems("message", message) == []
    assert message["authority"] is False and message["kind"] == "message"
    assert message["author"] == flow.worker.actor
    assert message["content"] == [{"type": "text", "text": "Draft is ready."}]
    assert message["mentions"] == [flow.coordinator.actor]
    assert event["conversationId"] == planning(flow) and "workItemId" not in event


def test_a_message_claiming_authority_is_refused_9(flow: Flow) -> None:
    refused(ErrorCode.SCHEMA_VALIDATION_FAILED, post, flow, flow.worker, "deploy immediately", authority=True)


def test_only_a_member_posts_9(flow: Flow, outsider: AgentKey) -> None:
    payload = {"messageId": urn(uuid.uuid4()), "conversationId": planning(flow), "content": "hello"}
    refused(ErrorCode.GROUP_NOT_FOUND, outsider.send, "message.post", flow.group, payload, membership_epoch=1)


def test_a_message_goes_to_a_conversation_of_its_group_9(flow: Flow) -> None:
    refused(Because(ErrorCode.INVALID_COMMAND, "not_found"), post, flow, flow.worker, "hi", urn(uuid.uuid4()))


def test_each_work_item_owns_its_conversation_9(flow: Flow) -> None:
    item = flow.authorize()
    conversation = conversation_id(flow.item(item))
    post(flow, flow.worker, "Which survey wave?", conversation)
    (event,) = events_of(flow, "message.posted")
    assert event["conversationId"] == conversation and event["workItemId"] == urn(item)
    assert event["payload"]["message"]["conversationId"] == conversation


def test_large_binary_data_travels_as_an_artifact_reference_9(flow: Flow, settings: Any) -> None:
    settings.MWP_MESSAGE_MAX_BYTES = 4096
    refused(Because(ErrorCode.INVALID_COMMAND, "too_large"), post, flow, flow.worker, "A" * 5000)
    sha = "sha256:" + flow.blob()
    post(flow, flow.worker, [{"type": "text", "text": "the dump"}, {"type": "artifact_ref", "artifactHash": sha}])
    (event,) = events_of(flow, "message.posted")
    assert event["payload"]["message"]["content"][1] == {"type": "artifact_ref", "artifactHash": sha}


def test_the_author_corrects_a_message_by_a_new_event_9_1(flow: Flow) -> None:
    message_id = post(flow, flow.worker, "Draft 1 is ready.")
    before = events_of(flow, "message.posted")
    amend(flow, flow.worker, "message.correct", message_id, "wrong draft", replacementContent="Draft 2 is ready.")
    (event,) = events_of(flow, "message.corrected")
    assert event["payload"]["messageId"] == message_id and event["payload"]["reason"] == "wrong draft"
    assert event["payload"]["replacementContent"] == [{"type": "text", "text": "Draft 2 is ready."}]
    assert events_of(flow, "message.posted") == before  # the accepted Message is immutable


def test_only_the_author_corrects_or_retracts_9_1(flow: Flow) -> None:
    message_id = post(flow, flow.worker, "Draft 1 is ready.")
    refused(ErrorCode.AUTH_FORBIDDEN, amend, flow, flow.worker2, "message.correct", message_id, replacementContent="x")
    refused(ErrorCode.AUTH_FORBIDDEN, amend, flow, flow.worker2, "message.retract", message_id)
    unknown = urn(uuid.uuid4())
    refused(Because(ErrorCode.INVALID_COMMAND, "not_found"), amend, flow, flow.worker, "message.retract", unknown)


def test_the_author_retracts_a_message_and_the_original_stays_9_1(flow: Flow) -> None:
    message_id = post(flow, flow.worker, "Posted too early.")
    amend(flow, flow.worker, "message.retract", message_id, "posted too early")
    (event,) = events_of(flow, "message.retracted")
    assert event["payload"]["messageId"] == message_id and event["payload"]["reason"] == "posted too early"
    assert events_of(flow, "message.posted")[0]["payload"]["message"]["content"][0]["text"] == "Posted too early."
    # Retracted is final for its author: no later correction.
    refused(ErrorCode.INVALID_STATE_TRANSITION, amend, flow, flow.worker, "message.correct", message_id,
            replacementContent="again")  # fmt: skip


@pytest.mark.parametrize("who", ["owner", "coordinator"])
def test_the_mission_owner_or_coordinator_redacts_with_a_policy_reason_7_4_9_1(flow: Flow, who: str) -> None:
    message_id = post(flow, flow.worker, "the password is hunter2")
    amend(flow, getattr(flow, who), "message.redact", message_id, "contained a credential")
    (event,) = events_of(flow, "message.redacted")
    assert event["payload"]["messageId"] == message_id
    assert event["payload"]["reason"] == "contained a credential"
    refused(ErrorCode.INVALID_STATE_TRANSITION, amend, flow, flow.owner, "message.redact", message_id)
    refused(ErrorCode.INVALID_STATE_TRANSITION, amend, flow, flow.worker, "message.retract", message_id)


def test_a_worker_cannot_redact_and_a_redaction_needs_a_reason_7_4_9_1(flow: Flow) -> None:
    message_id = post(flow, flow.worker2, "the password is hunter2")
    refused(ErrorCode.AUTH_FORBIDDEN, amend, flow, flow.worker, "message.redact", message_id, "mine now")
    refused(ErrorCode.AUTH_FORBIDDEN, amend, flow, flow.worker2, "message.redact", message_id, "my own")
    refused(ErrorCode.SCHEMA_VALIDATION_FAILED, amend, flow, flow.owner, "message.redact", message_id, "")


def test_a_group_lists_its_conversations_9(flow: Flow, worker: AgentKey, outsider: AgentKey) -> None:
    item = flow.authorize()
    client = http()
    response = client.get(f"{API}/groups/{urn(flow.group)}/conversations", **bearer(worker.extra["token"]))
    assert response.status_code == 200, response.content
    body = response.json()
    for document in body["conversations"]:
        assert normative_problems("conversation", document) == []
    kinds = [(c["type"], c["conversationId"], c.get("primaryWorkItemId")) for c in body["conversations"]]
    assert kinds == [("group", planning(flow), None), ("work_item", conversation_id(flow.item(item)), urn(item))]
    assert body["conversations"][0]["createdBy"] == flow.owner.actor
    assert body["conversations"][1]["createdBy"] == flow.coordinator.actor
    hidden = client.get(f"{API}/groups/{urn(flow.group)}/conversations", **bearer(outsider.extra["token"]))
    assert hidden.status_code == 404 and hidden.json()["code"] == "GROUP_NOT_FOUND"


def test_a_runaway_message_rate_is_rate_limited_20(flow: Flow, org: dict[str, str]) -> None:
    """message.post counts against the Organization's message_rate (governance.limits): up to the hard
    limit the Messages are accepted, one more is RATE_LIMITED and writes nothing."""
    from tests.workitems.test_runaway_controls import set_policy

    set_policy(flow.owner, org, {"message_rate": {"windowSeconds": 600, "hard": 2}})
    post(flow, flow.worker, "one")
    post(flow, flow.worker, "two")
    err = refused(ErrorCode.RATE_LIMITED, post, flow, flow.worker, "three")
    assert err.details["policyName"] == "message_rate"
    post(flow, flow.worker2, "another member's own rate")


def test_a_redaction_is_kept_in_the_policy_log_for_auditors_7_4_20(flow: Flow) -> None:
    """The redaction's policy reason is auditable: the Policy Log entry names the Message and the tombstone."""
    from tests.conftest import make_agent

    auditor = make_agent("acme", "Audrey Auditor", ["auditor"])
    message_id = post(flow, flow.worker, "the password is hunter2")
    amend(flow, flow.worker, "message.retract", message_id, "posted too early")  # not a policy decision
    receipt = amend(flow, flow.owner, "message.redact", message_id, "contained a credential")
    response = http().get(f"{API}/policy-log", **bearer(auditor.extra["token"]))
    assert response.status_code == 200, response.content
    (entry,) = [e for e in response.json()["entries"] if e["groupId"] == urn(flow.group)]
    assert entry["kind"] == "redaction" and entry["reference"] == message_id
    assert entry["detail"]["reason"] == "contained a credential" and entry["detail"]["messageId"] == message_id
    assert entry["eventId"] == receipt["events"][0]["eventId"]
    assert "hunter2" not in response.content.decode()
