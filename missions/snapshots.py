"""Group snapshots: state, signing, and the handlers that take them.

A snapshot is taken by the system Command ``group.snapshot`` (a Celery task at
a cadence, on demand when a cursor is too old, and on archival), so it is an
Event in the log like every other authoritative act: ``group.snapshot_taken``.
The state is read under the Group lock, so it is exactly the state at the
sequence it names.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from mwportal.protocol import ErrorCode, format_time
from mwportal.protocol.snapshot import build_snapshot

from .authority import AggregateRef, Decision, Emit, HandlerContext, accept, system_action_id
from .guards import check_members, refuse
from .models import Group, GroupSnapshot, Membership, Mission, Organization
from .registry import command, snapshot_contributors
from .server_key import server_keypair


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


def take_snapshot(ctx: HandlerContext, *, final: bool) -> GroupSnapshot:
    """Sign the state at the current head (inside ``accept()``, Group locked)."""
    private_key, _ = server_keypair()
    head = ctx.group
    document = build_snapshot(
        private_key=private_key, organization=head.organization_id, group=head.id, sequence=head.last_sequence,
        head_hash=head.head_hash, state=group_state(head.id), created_at=format_time(ctx.now),
    )  # fmt: skip
    return GroupSnapshot.objects.create(
        group_id=head.id,
        sequence=head.last_sequence,
        head_hash=head.head_hash,
        document=document,
        final=final,
        created_at=ctx.now,
    )


@command("group.snapshot", scope="any", actors=("system",))
def snapshot_group(ctx: HandlerContext) -> Decision:
    check_members(ctx.body, ["at"], ["final"])
    if ctx.body["at"] != ctx.group.last_sequence:
        # The head moved since the snapshot was asked for; the caller asks again.
        raise refuse(ErrorCode.REVISION_MISMATCH, "the Group head moved", current=ctx.group.last_sequence)
    if GroupSnapshot.objects.filter(group_id=ctx.group.id, sequence=ctx.group.last_sequence).exists():
        raise refuse(ErrorCode.INVALID_TRANSITION, "a snapshot at this sequence exists")
    snap = take_snapshot(ctx, final=bool(ctx.body.get("final")))
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision)
    body = {
        "sequence": snap.sequence,
        "head_hash": snap.head_hash,
        "state_hash": snap.document["state_hash"],
        "final": snap.final,
    }
    return Decision([Emit("group.snapshot_taken", ref, body)], ref)


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
        try:
            accept(
                system_command(
                    "group.snapshot",
                    group_id,
                    {"at": group.last_sequence, "final": final},
                    action_id=system_action_id("snapshot", group_id, group.last_sequence),
                )
            )
        except Exception as exc:  # the head moved under us: look again
            from mwportal.protocol import ProtocolError

            if not isinstance(exc, ProtocolError):
                raise
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


@command("mission.archive", group_roles=("owner",), target="group", cas=True)
def archive_mission(ctx: HandlerContext) -> Decision:
    """Archive a finished Mission; a signed final snapshot follows at once (MWP-MSN-009)."""
    from .commands import system_command

    check_members(ctx.body, [])
    mission = Mission.objects.get(group_id=ctx.group.id)
    if mission.status not in ("completed", "failed", "cancelled"):
        raise refuse(ErrorCode.INVALID_TRANSITION, f"a Mission that is {mission.status} cannot be archived")
    Mission.objects.filter(id=mission.id).update(status="archived")
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision + 1)
    at = ctx.group.last_sequence + 1  # the archive Event's own sequence
    final = system_command(
        "group.snapshot",
        ctx.group.id,
        {"at": at, "final": True},
        action_id=system_action_id("final-snapshot", ctx.group.id),
        issued_at=ctx.now,
    )
    return Decision(
        [Emit("mission.archived", ref, {"mission": str(mission.id), "final_snapshot_at": at})], ref, followups=[final]
    )


@command("event.redact", group_roles=("owner",))
def redact_event(ctx: HandlerContext) -> Decision:
    """Record a legal deletion or security redaction as a tombstone Event.

    The redacted Event keeps its ID, sequence and hash (the table refuses any
    rewrite); the tombstone says which Event is withdrawn and why, so readers
    and audits can honour it without breaking the chain (MWP-MSN-009).
    """
    from .guards import check_int, check_text
    from .models import GroupEvent

    check_members(ctx.body, ["sequence", "reason"])
    sequence = check_int(ctx.body, "sequence", minimum=1)
    reason = check_text(ctx.body, "reason", max_length=2000)
    event = GroupEvent.objects.filter(group_id=ctx.group.id, sequence=sequence).first()
    if event is None:
        raise refuse(ErrorCode.NOT_FOUND, f"no Event {sequence} in this Group", sequence=sequence)
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision)
    body = {"sequence": sequence, "event_id": str(event.event_id), "reason": reason}
    return Decision([Emit("event.redacted", ref, body)], ref)
