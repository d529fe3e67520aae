"""Group Snapshots (PROTOCOL §7.4, §16): the state they commit to, signing one, taking one, archiving.

A snapshot is two things kept together in ``GroupSnapshot``:

- ``document``: the normative Group Snapshot (``group-snapshot.schema.json``)
  signed by the Organization's Group Authority: the Group, the sequence it
  covers, every Event ID through it, ``stateHash`` (``sha256:`` of the JCS
  bytes of the state) and the policy-log entry that decided it;
- ``state``: the state it commits to, as a Worker restores it (the Mission
  and Group objects, the Memberships, the priority policy of an
  administrative Group, and what other apps contribute, WorkItems).

Every snapshot is an Event in the log like every other authoritative act:
``group.snapshot.created``, appended by ``ext.mwportal.archive.group_snapshot_create``
(a live snapshot: a cadence, or a cursor outside the replay window, §16) or by
``ext.missionweaveprotocol.core.group_archive`` (the final one, with
``group.archived``). The state is read under the Group lock, so it is exactly
the state at the sequence it names.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from mwportal.protocol import ErrorCode, ProtocolError, jcs
from mwportal.protocol.command import format_timestamp
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import sign_document

from . import service_keys
from .authority import accept, system_action_id
from .models import Agent, Group, GroupEvent, GroupSnapshot, Membership, Mission, Organization
from .registry import snapshot_contributors

GROUP_SNAPSHOT_CREATE = "ext.mwportal.archive.group_snapshot_create"
GROUP_ARCHIVE = "ext.missionweaveprotocol.core.group_archive"


def group_state(group_id: str) -> dict[str, Any]:
    """The Group's state as a Worker restores it, in normative shapes where the protocol has one."""
    from .handlers.common import WIRE_TYPE, main_conversation_id, membership_doc
    from .handlers.missions import mission_document

    group = Group.objects.get(id=group_id)
    state: dict[str, Any] = {"groupKind": group.kind, "revision": group.revision}
    mission = mission_document(group_id)
    if mission is not None:
        row = Mission.objects.get(group_id=group_id)
        state["mission"] = {**mission, "title": row.title}
        state["missionUsage"] = row.usage
        state["group"] = {
            "groupId": urn(group_id),
            "missionId": mission["missionId"],
            "state": "archived" if GroupSnapshot.objects.filter(group_id=group_id, final=True).exists() else "active",
            "mainConversationId": urn(main_conversation_id(group_id)),
            "createdAt": format_timestamp(group.created_at),
        }
        kinds = dict(Agent.objects.filter(memberships__group_id=group_id).values_list("id", "kind"))
        state["memberships"] = [
            membership_doc(
                group_id=group_id,
                mission_id=str(row.id),
                member={"type": WIRE_TYPE[kinds[m.agent_id]], "id": urn(str(m.agent_id))},
                role=role,
                epoch=m.epoch,
                now=m.updated_at,
            )
            for m in Membership.objects.filter(group_id=group_id, active=True).order_by("agent_id")
            for role in sorted(m.roles)
        ]
    if group.kind == Group.KIND_ADMIN:
        org = Organization.objects.get(id=group.organization_id)
        state["priorityPolicy"] = {"policy": org.priority_policy, "revision": org.policy_revision}
    for contribute in snapshot_contributors:
        key, value = contribute(group_id)
        state[key] = value
    return state


def state_hash(state: dict[str, Any]) -> str:
    """``sha256:`` of the state's JCS bytes: what a snapshot's ``stateHash`` commits to."""
    return jcs.sha256_hash(jcs.canonicalize(state))


def snapshot_document(
    *, group_id: str, organization_id: str, through_sequence: int, state: dict[str, Any], now: datetime, decision: str
) -> dict[str, Any]:
    """The normative Group Snapshot of ``group_id`` through ``through_sequence``, signed by the Group Authority.

    ``decision`` is the policy-log entry's text: why this snapshot was taken.
    """
    from .handlers.common import derived_id

    snapshot_id = derived_id("snapshot", group_id, through_sequence)
    event_ids = GroupEvent.objects.filter(group_id=group_id, sequence__lte=through_sequence).order_by("sequence")
    authority = {"type": "service", "id": urn(service_keys.principal_id(organization_id, service_keys.GROUP_AUTHORITY))}
    when = format_timestamp(now)
    document = {
        "snapshotId": urn(snapshot_id),
        "groupId": urn(group_id),
        "throughSequence": through_sequence,
        "eventIds": [urn(str(e)) for e in event_ids.values_list("event_id", flat=True)],
        "stateHash": state_hash(state),
        "policyLog": [
            {
                "entryId": urn(derived_id("snapshot-policy", snapshot_id)),
                "decision": decision,
                "actor": authority,
                "occurredAt": when,
                "details": {"throughSequence": through_sequence},
            }
        ],
        "createdBy": authority,
        "createdAt": when,
    }
    key = service_keys.group_authority(organization_id)
    return sign_document(document, key_id=key.key_id, seed=key.seed, profile="group-snapshot")


def snapshot_now(group_id: str) -> GroupSnapshot:
    """Take (or find) a live snapshot at the Group's current head."""
    from .commands import group_service_command

    for _ in range(5):
        group = Group.objects.get(id=group_id)
        existing = GroupSnapshot.objects.filter(group_id=group_id, sequence=group.last_sequence).first()
        if existing is not None:
            return existing
        # The group.snapshot.created Event itself moves the head, so "the
        # latest snapshot" is at most one Event behind the head.
        last = GroupSnapshot.objects.filter(group_id=group_id).order_by("-sequence").first()
        if last is not None and last.sequence == group.last_sequence - 1:
            return last
        with contextlib.suppress(ProtocolError):  # the head moved under us: look again
            accept(
                group_service_command(
                    GROUP_SNAPSHOT_CREATE,
                    group_id,
                    {"throughSequence": group.last_sequence},
                    action_id=system_action_id("snapshot", group_id, group.last_sequence),
                )
            )
    return GroupSnapshot.objects.filter(group_id=group_id).latest("sequence")


def archive_group(group_id: str, *, now: datetime | None = None) -> GroupSnapshot:
    """Archive a finished Mission's Group: the signed final snapshot and ``group.archived`` (§7.4).

    The control plane signs the snapshot of the current head and issues
    ``ext.missionweaveprotocol.core.group_archive`` with it; the Group
    Authority checks it against the head under the Group lock. If the head
    moved in between, the snapshot is taken again.
    """
    from .commands import group_service_command

    conflict: ProtocolError | None = None
    for _ in range(5):
        moment = now or datetime.now(UTC)
        group = Group.objects.get(id=group_id)
        document = snapshot_document(
            group_id=group_id, organization_id=str(group.organization_id), through_sequence=group.last_sequence,
            state=group_state(group_id), now=moment, decision="final snapshot: the Group is archived",
        )  # fmt: skip
        command = group_service_command(
            GROUP_ARCHIVE,
            group_id,
            {"snapshot": document},
            expected_revision=group.revision,
            action_id=system_action_id("archive", group_id, group.last_sequence),
            issued_at=moment,
        )
        try:
            accept(command, now=moment)
        except ProtocolError as exc:
            if exc.code is not ErrorCode.REVISION_CONFLICT:
                raise
            conflict = exc  # the head moved between the snapshot and the lock: take it again
            continue
        return GroupSnapshot.objects.get(group_id=group_id, final=True)
    assert conflict is not None
    raise conflict


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
