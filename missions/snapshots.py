"""Group snapshots: the state they carry, and finding or taking one.

A snapshot is taken by the system Command ``group.snapshot`` (a Celery task at
a cadence, on demand when a cursor is too old, and on archival), so it is an
Event in the log like every other authoritative act: ``group.snapshot_taken``.
The state is read under the Group lock, so it is exactly the state at the
sequence it names.
"""

from __future__ import annotations

import contextlib
from typing import Any

from django.conf import settings

from mwportal.protocol import ProtocolError

from .authority import accept, system_action_id
from .models import Group, GroupSnapshot, Membership, Mission, Organization
from .registry import snapshot_contributors


def group_state(group_id: str) -> dict[str, Any]:
    """The Group's state as a Worker restores it: Mission, Memberships and
    what other apps contribute (WorkItems)."""
    group = Group.objects.get(id=group_id)
    state: dict[str, Any] = {"kind": group.kind, "revision": group.revision}
    mission = Mission.objects.filter(group_id=group_id).first()
    state["mission"] = None if mission is None else {
        "id": str(mission.id), "title": mission.title, "objective": mission.objective, "status": mission.status,
        "budgets": mission.budgets, "usage": mission.usage,
    }  # fmt: skip
    state["memberships"] = [
        {"agent": str(m.agent_id), "roles": m.roles, "membership_epoch": m.epoch, "active": m.active}
        for m in Membership.objects.filter(group_id=group_id).order_by("agent_id")
    ]
    if group.kind == Group.KIND_ADMIN:
        org = Organization.objects.get(id=group.organization_id)
        state["priority_policy"] = {"policy": org.priority_policy, "revision": org.policy_revision}
    for contribute in snapshot_contributors:
        key, value = contribute(group_id)
        state[key] = value
    return state


def snapshot_now(group_id: str, *, final: bool = False) -> GroupSnapshot:
    """Take (or find) a snapshot at the Group's current head."""
    from .commands import system_command

    for _ in range(5):
        group = Group.objects.get(id=group_id)
        existing = GroupSnapshot.objects.filter(group_id=group_id, sequence=group.last_sequence).first()
        if existing is not None:
            return existing
        # The snapshot_taken Event itself moves the head, so "the latest
        # snapshot" is at most one Event behind the head.
        last = GroupSnapshot.objects.filter(group_id=group_id).order_by("-sequence").first()
        if last is not None and last.sequence == group.last_sequence - 1 and not final:
            return last
        with contextlib.suppress(ProtocolError):  # the head moved under us: look again
            accept(
                system_command(
                    "group.snapshot",
                    group_id,
                    {"at": group.last_sequence, "final": final},
                    action_id=system_action_id("snapshot", group_id, group.last_sequence),
                )
            )
    return GroupSnapshot.objects.filter(group_id=group_id).latest("sequence")


def snapshot_for_cursor(group: Group, after: int) -> GroupSnapshot | None:
    """The snapshot to restore when ``after`` is outside the online replay
    window (CURSOR_TOO_OLD), or None when replay from ``after`` is online."""
    window = settings.MWP_ONLINE_REPLAY_EVENTS
    if group.last_sequence - after <= window:
        return None
    snap = (
        GroupSnapshot.objects.filter(group=group, sequence__gte=group.last_sequence - window)
        .order_by("-sequence")
        .first()
    )
    return snap or snapshot_now(str(group.id))
