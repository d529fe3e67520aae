"""``access_*`` gates: the only way to fetch what an actor may read."""

from __future__ import annotations

from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from mwportal.protocol import ErrorCode, ProtocolError

from .models import Agent, Group, Membership


def group_not_found() -> ProtocolError:
    """The one answer for a Group the caller may not see, whether it is absent
    or exists without them: spec §17.2 and DESIGN §4 (GROUP_NOT_FOUND "absent
    or intentionally undisclosed"). Anything that differs between the two
    cases (status, code, message, details) would tell an outsider that a
    Group ID exists (issue 16 item 8). It names no Group: the caller knows
    which one it asked for, and a gate reached through another object (a
    WorkItem, a Context Package) must not hand out that object's Group ID."""
    return ProtocolError(ErrorCode.GROUP_NOT_FOUND, "no such Group, or you are not a member of it")


def access_group(agent: Agent, group_id: str) -> Group:
    """The Group if ``agent`` may read it: an active member of a Mission Group,
    or any Agent of the Organization for its administrative Group. Else
    ``group_not_found``, the same answer as for an absent Group.

    One query decides both "exists" and "visible", so an unseen Group does
    not cost a second query that an absent one would not (timing)."""
    # A provisional Membership past its expiry reads nothing more (§8): it lapsed with its offer.
    current = Q(provisional=False) | Q(provisional_expires_at__gt=timezone.now())
    membership = Membership.objects.filter(current, group_id=OuterRef("pk"), agent=agent, active=True)
    visible = Q(kind=Group.KIND_ADMIN, organization_id=agent.organization_id) | (
        ~Q(kind=Group.KIND_ADMIN) & Q(Exists(membership))
    )
    group = Group.objects.filter(visible, id=group_id).first()
    if group is None:
        raise group_not_found()
    return group


def visible_from(agent: Agent, group: Group) -> int:
    """The first sequence of ``group``'s history that ``agent`` reads (§8): its Membership's
    ``visibilityStartSequence`` (0: all of it; the administrative Group is read whole). Every
    read path starts there: REST Event pages, WebSocket replay, snapshots."""
    if group.kind == Group.KIND_ADMIN:
        return 0
    start = (
        Membership.objects.filter(group_id=group.id, agent=agent, active=True)
        .values_list("visibility_start", flat=True)
        .first()
    )
    return int(start or 0)


def replay_floor(agent: Agent, group_id: str) -> int:
    """The sequence a WebSocket subscription of ``agent`` replays after at the earliest (§8): one
    before its Membership's visibility start (0 without a restricted Membership; whether it may
    read the Group at all is checked on subscribing)."""
    start = (
        Membership.objects.filter(group_id=group_id, agent=agent, active=True)
        .values_list("visibility_start", flat=True)
        .first()
    )
    return max(int(start or 0) - 1, 0)
