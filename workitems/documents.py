"""Normative objects the WorkItem Events embed: the WorkItem (``work-item.schema.json``),
actors, and documents the Group Authority signs itself."""

from __future__ import annotations

import uuid
from typing import Any

from missions.authority import HandlerContext
from missions.service_keys import group_authority
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import sign_document

from .models import WorkItem
from .wire import when

# The acceptance policy the portal applies to the approvals it records.
POLICY_VERSION = "1.0.0"
# The UUID namespace of WorkItem Conversation IDs: one Conversation per WorkItem (§9).
_CONVERSATIONS = uuid.UUID("0c7e5a8e-2f4b-4d35-8a1e-6b9d3f2c4e71")


def actor_of(ctx: HandlerContext) -> dict[str, str]:
    """The Command's actor as the common ``actor`` object."""
    return ctx.actor.principal


def conversation_id(item: WorkItem) -> str:
    """The WorkItem Conversation's ID (stable, derived from the WorkItem's)."""
    return urn(uuid.uuid5(_CONVERSATIONS, str(item.id)))


def work_item_document(item: WorkItem, created_by: dict[str, str]) -> dict[str, Any]:
    """A new WorkItem as ``work-item.schema.json`` has it (state ``open``: no owner yet)."""
    return {
        "workItemId": urn(item.id),
        "missionId": urn(item.mission_id),
        "groupId": urn(item.group_id),
        "conversationId": conversation_id(item),
        "revision": item.revision,
        "state": item.state,
        "exclusive": True,
        "contract": item.contract,
        "createdBy": created_by,
        "createdAt": when(item.created_at),
        "authorizedBy": created_by,
        "updatedAt": when(item.updated_at),
    }


def authority_signed(profile: str, document: dict[str, Any], ctx: HandlerContext) -> dict[str, Any]:
    """``document`` signed with the Group Authority's key (§6.4)."""
    key = group_authority(str(ctx.group.organization_id))
    return sign_document(document, key_id=key.key_id, seed=key.seed, profile=profile)


def authority_actor(ctx: HandlerContext) -> dict[str, str]:
    key = group_authority(str(ctx.group.organization_id))
    assert key.principal is not None
    return {"type": key.principal[0], "id": urn(key.principal[1])}
