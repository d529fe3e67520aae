"""``access_*`` gates: the only way to fetch what an actor may read."""

from __future__ import annotations

from mwportal.protocol import ErrorCode, ProtocolError

from .models import Agent, Group, Membership


def access_group(agent: Agent, group_id: str) -> Group:
    """The Group if ``agent`` may read it: an active member of a Mission Group,
    or any Agent of the Organization for its administrative Group."""
    group = Group.objects.filter(id=group_id).first()
    if group is None:
        raise ProtocolError(ErrorCode.NOT_FOUND, f"group {group_id} does not exist", {"group": group_id})
    if group.kind == Group.KIND_ADMIN:
        if group.organization_id != agent.organization_id:
            raise ProtocolError(ErrorCode.NOT_A_MEMBER, "not an Agent of this Organization")
        return group
    if not Membership.objects.filter(group=group, agent=agent, active=True).exists():
        raise ProtocolError(ErrorCode.NOT_A_MEMBER, "not a member of this Group")
    return group
