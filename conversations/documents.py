"""The Conversations of a Group, as ``conversation.schema.json`` has them (§9).

They are derived, not stored: Mission creation allocates the Group's planning
Conversation (``missions.handlers.common.main_conversation_id``) and every
WorkItem owns a dedicated one from its authorization on
(``workitems.documents.conversation_id``). Neither is ever closed in 0.1 of
this portal, so each stays at revision 1 and ``active``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from missions.handlers.common import actor_doc, main_conversation_id
from missions.models import Group, GroupEvent, Mission
from missions.service_keys import GROUP_AUTHORITY, principal_id
from mwportal.protocol.command import format_timestamp
from mwportal.protocol.ids import urn
from workitems.documents import conversation_id as work_item_conversation
from workitems.models import WorkItem


@dataclass(frozen=True, slots=True)
class Where:
    """The Conversation a Message is posted in: the planning one (``item`` None) or a WorkItem's."""

    conversation_id: str  # bare UUID
    item: WorkItem | None


def find(group_id: str, conversation_id: str) -> Where | None:
    """The Conversation ``conversation_id`` (bare) of ``group_id``; None when the Group has no such Conversation."""
    if conversation_id == main_conversation_id(group_id):
        return Where(conversation_id, None)
    wanted = urn(conversation_id)
    # One indexed read of the Group's WorkItem IDs; each Conversation ID is derived from its WorkItem's.
    for item_id in WorkItem.objects.filter(group_id=group_id).values_list("id", flat=True):
        if work_item_conversation(WorkItem(id=item_id)) == wanted:
            return Where(conversation_id, WorkItem.objects.get(id=item_id))
    return None


def _authorizers(group_id: str) -> dict[str, dict[str, str]]:
    """Who authorized each WorkItem (and so opened its Conversation), as its ``work.authorized`` Event says."""
    rows = GroupEvent.objects.filter(group_id=group_id, type="work.authorized").values_list("aggregate_id", "body")
    return {str(aggregate): body["workItem"]["createdBy"] for aggregate, body in rows}


def conversations(group: Group) -> list[dict[str, Any]]:
    """The Group's Conversations: the planning one first, then one per WorkItem in authorization order."""
    mission = Mission.objects.select_related("created_by").get(group=group)
    common = {"missionId": urn(mission.id), "groupId": urn(group.id), "state": "active", "revision": 1}
    out: list[dict[str, Any]] = [
        {
            "conversationId": urn(main_conversation_id(str(group.id))),
            **common,
            "type": "group",
            "title": f"Planning: {mission.title}"[:500],
            "access": {"mode": "group"},
            "createdBy": actor_doc(mission.created_by.kind, str(mission.created_by_id)),
            "createdAt": format_timestamp(mission.created_at),
        }
    ]
    authority = {"type": "service", "id": urn(principal_id(str(group.organization_id), GROUP_AUTHORITY))}
    authorizers = _authorizers(str(group.id))
    for item in WorkItem.objects.filter(group=group).order_by("created_at", "id"):
        goal = str(item.contract.get("goal") or item.id)
        out.append(
            {
                "conversationId": work_item_conversation(item),
                **common,
                "type": "work_item",
                "primaryWorkItemId": urn(item.id),
                "title": f"WorkItem: {goal}"[:500],
                "access": {"mode": "group"},
                "createdBy": authorizers.get(str(item.id), authority),
                "createdAt": format_timestamp(item.created_at),
            }
        )
    return out
