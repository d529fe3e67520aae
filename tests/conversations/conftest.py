"""The Survey Mission of tests/workitems (Olivia owns it, Carl coordinates, Wanda and Walt work), and
helpers that post and amend Messages with signed Commands (PROTOCOL §9)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from missions.handlers.common import main_conversation_id
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey
from tests.workitems.conftest import _artifact_root, flow, mission, rest  # noqa: F401 (fixtures)
from tests.workitems.flow import COORDINATOR_EPOCH, Flow


def planning(on: Flow) -> str:
    """The Group's planning Conversation (urn)."""
    return urn(main_conversation_id(on.group))


def post(on: Flow, agent: AgentKey, content: Any, conversation: str | None = None, **more: Any) -> str:
    """``message.post`` by ``agent``; the Message ID (urn)."""
    message_id = urn(uuid.uuid4())
    payload = {"messageId": message_id, "conversationId": conversation or planning(on), "content": content, **more}
    kw = {"coordinator_epoch": COORDINATOR_EPOCH} if agent is on.coordinator else {}
    agent.send("message.post", on.group, payload, **kw)
    return message_id


def amend(on: Flow, agent: AgentKey, kind: str, message_id: str, reason: str = "wrong", **more: Any) -> dict[str, Any]:
    """``message.correct``, ``message.retract`` or ``message.redact`` of ``message_id`` by ``agent``; the receipt."""
    payload = {"amendmentId": urn(uuid.uuid4()), "messageId": message_id, "reason": reason, **more}
    kw = {"coordinator_epoch": COORDINATOR_EPOCH} if agent is on.coordinator else {}
    return agent.send(kind, on.group, payload, **kw)


@pytest.fixture
def secret() -> str:
    return f"the staging password is {uuid.uuid4().hex}"
