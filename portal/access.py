"""``access_*`` gates of the portal: what a signed-in person may see.

A person is a Django user linked to an Agent of kind ``person``. A Mission
Group they are not an active member of does not exist for them (404, never
403, so its existence is not revealed either); the Organization policy editor
is for the org roles ``mission_owner`` and ``admin`` only (403).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404

from missions.models import Agent, Group, Membership, Mission
from workitems.models import WorkItem

# The Organization roles that may set the priority policy; the handler of
# ext.mwportal.scheduling.priority_policy_set asks the same (spec 11.1, MWP-WRK-009: never a
# Coordinator).
POLICY_ROLES = frozenset({"mission_owner", "admin"})
# The Membership role of the Mission's owner (membership.schema.json ``role``).
OWNER = "mission_owner"
COORDINATING = frozenset({"coordinator", OWNER})


def person_agent(user: Any) -> Agent:
    """The signed-in user's Agent; 403 for a user without one."""
    if user is None or not user.is_authenticated:
        raise PermissionDenied("sign in first")
    agent = Agent.objects.filter(user_id=user.pk).select_related("organization").first()
    if agent is None:
        raise PermissionDenied("this user has no Agent in any Organization")
    return agent


@dataclass(frozen=True, slots=True)
class MissionAccess:
    """A Mission Group as one member sees it."""

    agent: Agent
    group: Group
    mission: Mission
    roles: frozenset[str]

    @property
    def is_owner(self) -> bool:
        return OWNER in self.roles

    @property
    def coordinates(self) -> bool:
        return bool(self.roles & COORDINATING)


def access_mission(agent: Agent, group_id: str) -> MissionAccess:
    """The Mission Group if ``agent`` is an active member; otherwise 404."""
    membership = (
        Membership.objects.filter(group_id=_uuid_or_404(group_id), agent=agent, active=True, group__kind="mission")
        .select_related("group", "group__mission")
        .first()
    )
    if membership is None:
        raise Http404("no such Mission")
    return MissionAccess(agent, membership.group, membership.group.mission, frozenset(membership.roles))


def access_workitem(access: MissionAccess, workitem_id: str) -> WorkItem:
    """A WorkItem of that Mission Group; 404 for any other (another Group's included)."""
    item = WorkItem.objects.filter(id=_uuid_or_404(workitem_id), group_id=access.group.id).first()
    if item is None:
        raise Http404("no such WorkItem in this Mission")
    return item


def member_groups(agent: Agent) -> list[Membership]:
    """The agent's active Mission Memberships, with their Group and Mission."""
    return list(
        Membership.objects.filter(agent=agent, active=True, group__kind="mission")
        .select_related("group", "group__mission")
        .order_by("group__mission__created_at")
    )


def may_edit_policy(agent: Agent) -> bool:
    return bool(POLICY_ROLES & set(agent.org_roles))


def access_policy(agent: Agent) -> None:
    """403 unless the agent holds an Organization role that sets the policy."""
    if not may_edit_policy(agent):
        raise PermissionDenied("only a MissionOwner or an Organization admin edits the priority policy")


def _uuid_or_404(value: str) -> str:
    import uuid

    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise Http404("no such object") from None
