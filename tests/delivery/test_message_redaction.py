"""After ``message.redact`` the WebSocket bindings withhold the Message's content: a replay on
``/mwp/0.1`` (from the database, and after a feed whose cache held the Message) and the browser's
``/ws/ui`` view; every Event they carry still verifies (PROTOCOL §7.4, §9.1, §17). Live delivery
of Messages follows a Worker's attention filter: its WorkItem Conversations, its mentions (§8)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from missions.handlers.common import main_conversation_id
from missions.keyregistry import DjangoRegistry
from missions.models import Group, Organization
from mwportal.protocol import jcs
from mwportal.protocol.eventdoc import verify_event
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey, group_revision
from tests.delivery.conftest import Client, Daphne, in_db_thread
from tests.delivery.test_ui_socket import person, stream
from tests.protocol.normative import require_bundle
from tests.workitems.flow import COORDINATOR_EPOCH, contract
from workitems.documents import conversation_id
from workitems.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "the staging password is swordfish-42"


@pytest.fixture(autouse=True)
def _bundle() -> None:
    require_bundle()


def post(agent: AgentKey, group: str, text: str, conversation: str | None = None, **more: Any) -> str:
    message_id = urn(uuid.uuid4())
    payload = {"messageId": message_id, "conversationId": conversation or urn(main_conversation_id(group)),
               "content": text, **more}  # fmt: skip
    agent.send("message.post", group, payload)
    return message_id


def redact(owner: AgentKey, group: str, message_id: str) -> int:
    payload = {"amendmentId": urn(uuid.uuid4()), "messageId": message_id, "reason": "contained a credential"}
    owner.send("message.redact", group, payload)
    return int(Group.objects.get(id=group).last_sequence)


def verified(group: str, events: list[dict[str, Any]]) -> None:
    registry = DjangoRegistry(Organization.objects.get(id=Group.objects.get(id=group).organization_id))
    for event in events:
        verify_event(jcs.canonicalize(event), registry)


def test_a_replay_on_the_agent_socket_withholds_a_redacted_message_7_4(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey, worker2: AgentKey
) -> None:
    g = mission["group"]

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], int, str]:
        # A live subscriber opens the Group's feed; the Message then enters the feed's cache.
        early = await Client.open(daphne, worker)
        await early.subscribe(g, 0)
        opened = await in_db_thread(lambda: Group.objects.get(id=g).last_sequence)
        await early.events(g, opened)
        message_id = await in_db_thread(post, worker, g, SECRET)
        before = await early.events(g, opened + 1)
        top = await in_db_thread(redact, owner, g, message_id)
        await early.events(g, top)
        # Later subscribers, while the feed and its cache live: one from where the cache begins
        # (the cache would serve the Message), one from the start (the database).
        got = []
        for after in (opened, 0):
            late = await Client.open(daphne, worker2)
            await late.subscribe(g, after)
            got.append(await late.events(g, top))
            await late.close()
        await early.close()
        return before, got[0], got[1], opened, message_id

    before, cached, replay, opened, message_id = asyncio.run(scenario())
    assert SECRET in str(before[-1]["payload"])  # delivered live before it was redacted
    assert [e["kind"] for e in cached] == ["message.posted", "message.redacted"]
    assert [e["sequence"] for e in cached] == [opened + 1, opened + 2]
    assert [e["sequence"] for e in replay] == list(range(1, opened + 3))
    for events in (cached, replay):
        assert not any(SECRET in str(e) for e in events)
        posted = next(e for e in events if e["kind"] == "message.posted")
        standing = {"messageId": message_id, "authority": False, "conversationId": posted["conversationId"]}
        assert posted["payload"] == standing
        verified(g, events)


def test_the_browser_view_withholds_a_redacted_message_7_4(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]
    cookie, person_id = person("carla")
    owner.send("membership.change", g, {"principal": {"type": "human", "id": urn(person_id)}, "roles": ["observer"]},
               expected_revision=group_revision(g))  # fmt: skip
    kept = post(worker, g, "nothing secret here")
    top = redact(owner, g, post(worker, g, SECRET))
    got, _ = asyncio.run(stream(daphne, g, cookie, top))
    events = [f["event"] for f in got if f["frameType"] == "EVENT"]
    assert events[-1]["sequence"] == top and not any(SECRET in str(e) for e in events)
    shown = next(e for e in events if e["payload"].get("messageId") == kept)
    assert shown["payload"]["message"]["content"] == [{"type": "text", "text": "nothing secret here"}]
    verified(g, events)


def test_a_workers_live_messages_follow_its_attention_filter_8(
    daphne: Daphne, mission: dict[str, str], coordinator: AgentKey, worker: AgentKey, worker2: AgentKey
) -> None:
    """Subscribed to its WorkItem's Conversation or to its mentions, a Worker is sent those
    Messages live and not the rest; the history keeps them all."""
    g = mission["group"]
    item = str(uuid.uuid4())
    coordinator.send("work.authorize", g, {"workItemId": urn(item), "contract": contract()}, work_item_id=item,
                     coordinator_epoch=COORDINATOR_EPOCH)  # fmt: skip
    topic = conversation_id(WorkItem.objects.get(id=item))

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        mentions = await Client.open(daphne, worker)
        conversation = await Client.open(daphne, worker2)
        start = await in_db_thread(lambda: Group.objects.get(id=g).last_sequence)
        await mentions.subscribe(g, start, {"eventKinds": ["message.posted"], "mentionsOnly": True})
        await conversation.subscribe(g, start, {"conversationIds": [topic]})
        await in_db_thread(lambda: post(worker2, g, "for everyone"))
        await in_db_thread(lambda: post(worker2, g, "for Wanda", mentions=[worker.actor]))
        await in_db_thread(lambda: post(worker, g, "in the WorkItem", topic))
        await in_db_thread(lambda: post(worker2, g, "marker", topic, mentions=[worker.actor]))
        top = await in_db_thread(lambda: Group.objects.get(id=g).last_sequence)
        got_mentions = await mentions.events(g, top)
        got_conversation = await conversation.events(g, top)
        await mentions.close()
        await conversation.close()
        return got_mentions, got_conversation

    got_mentions, got_conversation = asyncio.run(scenario())
    assert [e["payload"]["message"]["content"][0]["text"] for e in got_mentions] == ["for Wanda", "marker"]
    assert [e["payload"]["message"]["content"][0]["text"] for e in got_conversation] == ["in the WorkItem", "marker"]
    assert all(e["conversationId"] == topic and e["workItemId"] == urn(item) for e in got_conversation)
