"""Group Snapshots (PROTOCOL §7.4, §16): the state they commit to, signing one, taking one, archiving.

A snapshot is two things kept together in ``GroupSnapshot``:

- ``document``: the normative Group Snapshot (``group-snapshot.schema.json``)
  signed by the Organization's Group Authority: the Group, the sequence it
  covers, every Event ID through it, ``stateHash`` (``sha256:`` of the JCS
  bytes of the state) and the policy-log entry that decided it;
- ``state``: the state it commits to, as a Worker restores it (the Mission
  and Group objects, the Memberships, the priority policy of an
  administrative Group, and what other apps contribute, WorkItems).

Two kinds, one way each:

- the FINAL snapshot is an authoritative fact: ``group.snapshot.created`` and
  ``group.archived`` are appended together, only by
  ``ext.missionweaveprotocol.core.group_archive`` (§15.2), whose handler
  checks the signed document against the Group's head under the Group lock.
  Its state also carries the Group's decisions, its Approvals and (from the
  artifacts app's contributor) its Artifact references (§7.4);
- a LIVE snapshot (a cadence, or a cursor outside the replay window, §16) is
  rebuildable delivery state, like a Cursor: signed by the Group Authority,
  read and written under the Group lock so it is exactly the state at the
  sequence it names, but no Event and no Command. Snapshot cadence is an
  operational decision; it cannot add facts to the log.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from mwportal.protocol import ErrorCode, ProtocolError, jcs
from mwportal.protocol.command import format_timestamp
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import sign_document

from . import service_keys
from .authority import accept, system_action_id
from .models import Agent, Approval, Group, GroupEvent, GroupSnapshot, Membership, Mission, Organization
from .registry import group_archived_hooks, snapshot_contributors

GROUP_ARCHIVE = "ext.missionweaveprotocol.core.group_archive"
# The Mission row's terminal statuses: only a finished Mission's Group is archived (§7.4).
FINISHED = ("approved", "failed", "cancelled")
# The Event kinds that record a decision of the Group (§7.4: the final snapshot contains decisions):
# the Mission's and Memberships' transitions, Approvals, policy, archival and tombstones, and the
# WorkItem transitions someone decided (authorisation, acceptance, review outcome, failure, cancellation).
DECISION_PREFIXES = ("mission.", "membership.", "approval.", "policy.", "group.", "ext.mwportal.audit.")
DECISION_KINDS = frozenset(
    {"work.authorized", "work.offer.accepted", "work.contract.revised", "work.result.accepted", "work.failed",
     "work.cancelled"}
)  # fmt: skip


def group_state(group_id: str) -> dict[str, Any]:
    """The Group's state as a Worker restores it, in normative shapes where the protocol has one."""
    from .handlers.common import WIRE_TYPE, main_conversation_id, row_membership_docs
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
            "state": "archived" if is_archived(group_id) else "active",
            "mainConversationId": urn(main_conversation_id(group_id)),
            "createdAt": format_timestamp(group.created_at),
        }
        kinds = dict(Agent.objects.filter(memberships__group_id=group_id).values_list("id", "kind"))
        state["memberships"] = [
            doc
            for m in Membership.objects.filter(group_id=group_id, active=True).order_by("agent_id")
            for doc in row_membership_docs(
                m, str(row.id), {"type": WIRE_TYPE[kinds[m.agent_id]], "id": urn(str(m.agent_id))}
            )
        ]
    if group.kind == Group.KIND_ADMIN:
        org = Organization.objects.get(id=group.organization_id)
        state["priorityPolicy"] = {"policy": org.priority_policy, "revision": org.policy_revision}
    if mission is not None:
        state["decisions"] = decisions(group_id)
        state["approvals"] = approvals(group_id)
    for contribute in snapshot_contributors:
        key, value = contribute(group_id)
        state[key] = value
    return state


def decisions(group_id: str) -> list[dict[str, Any]]:
    """A reference to every decision Event of the Group, in sequence order."""
    rows = GroupEvent.objects.filter(group_id=group_id).order_by("sequence")
    return [
        {"eventId": urn(str(event_id)), "sequence": sequence, "kind": kind, "occurredAt": format_timestamp(at)}
        for event_id, sequence, kind, at in rows.values_list("event_id", "sequence", "type", "occurred_at")
        if kind in DECISION_KINDS or kind.startswith(DECISION_PREFIXES)
    ]


def approvals(group_id: str) -> list[dict[str, Any]]:
    """Every recorded Approval of the Group: execution gates and final Approvals."""
    return [
        {
            "approvalId": urn(str(a.id)),
            "kind": a.kind,
            "subject": {"kind": a.subject_kind, "id": urn(a.subject_id), "revision": a.subject_revision},
            "grantedBy": urn(str(a.granted_by_id)),
            "grantedAt": format_timestamp(a.granted_at),
        }
        for a in Approval.objects.filter(group_id=group_id).order_by("granted_at", "id")
    ]


def state_hash(state: dict[str, Any]) -> str:
    """``sha256:`` of the state's JCS bytes: what a snapshot's ``stateHash`` commits to."""
    return jcs.sha256_hash(jcs.canonicalize(state))


def snapshot_document(
    *,
    group_id: str,
    organization_id: str,
    through_sequence: int,
    state: dict[str, Any],
    now: datetime,
    decision: str,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The normative Group Snapshot of ``group_id`` through ``through_sequence``, signed by the Group Authority.

    ``decision`` is the policy-log entry's text: why this snapshot was taken;
    ``details`` what the entry links (the final snapshot: the Mission's
    terminal status and the retention policy that archived it).
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
                "entryId": urn(policy_entry_id(snapshot_id)),
                "decision": decision,
                "actor": authority,
                "occurredAt": when,
                "details": {"throughSequence": through_sequence, **(details or {})},
            }
        ],
        "createdBy": authority,
        "createdAt": when,
    }
    key = service_keys.group_authority(organization_id)
    return sign_document(document, key_id=key.key_id, seed=key.seed, profile="group-snapshot")


def policy_entry_id(snapshot_id: str) -> str:
    """The policy-log entry a snapshot links: derived from the snapshot, so the link is checkable."""
    from .handlers.common import derived_id

    return derived_id("snapshot-policy", snapshot_id)


def snapshot_now(group_id: str) -> GroupSnapshot:
    """Take (or find) a live snapshot at the Group's current head (§16).

    Rebuildable delivery state, not a fact: the Group row is locked while the
    state is read and the snapshot written, so the state is exactly the
    state through the head it names; no Event is appended.
    """
    with transaction.atomic():
        group = Group.objects.select_for_update().get(id=group_id)
        existing = GroupSnapshot.objects.filter(group_id=group_id, sequence=group.last_sequence).first()
        if existing is not None:
            return existing
        now = datetime.now(UTC)
        state = group_state(group_id)
        document = snapshot_document(
            group_id=group_id, organization_id=str(group.organization_id), through_sequence=group.last_sequence,
            state=state, now=now, decision="live snapshot for replay outside the online window (§16)",
        )  # fmt: skip
        return GroupSnapshot.objects.create(
            group_id=group_id, sequence=group.last_sequence, head_hash=group.head_hash, document=document,
            state=state, final=False, created_at=now,
        )  # fmt: skip


def archive_group(
    group_id: str, *, now: datetime | None = None, retention: dict[str, Any] | None = None
) -> GroupSnapshot:
    """Archive a finished Mission's Group: the signed final snapshot and ``group.archived`` (§7.4).

    The control plane signs the snapshot of the current head and issues
    ``ext.missionweaveprotocol.core.group_archive`` with it; the Group
    Authority checks it against the head under the Group lock. If the head
    moved in between, the snapshot is taken again. ``retention`` is the
    Organization policy that decided the archival, recorded in the policy-log
    entry the snapshot links. After commit, ``group_archived_hooks`` run (the
    artifacts app seals the encrypted audit archive).
    """
    from .commands import group_service_command

    conflict: ProtocolError | None = None
    for _ in range(5):
        moment = now or datetime.now(UTC)
        group = Group.objects.get(id=group_id)
        status = Mission.objects.filter(group_id=group_id).values_list("status", flat=True).first()
        details = {"missionStatus": status, "retention": retention or {"trigger": "operator"}}
        document = snapshot_document(
            group_id=group_id, organization_id=str(group.organization_id), through_sequence=group.last_sequence,
            state=group_state(group_id), now=moment, decision="final snapshot: the Group is archived",
            details=details,
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
        for hook in group_archived_hooks:
            hook(group_id)
        return GroupSnapshot.objects.get(group_id=group_id, final=True)
    assert conflict is not None
    raise conflict


def is_archived(group_id: str) -> bool:
    return GroupSnapshot.objects.filter(group_id=group_id, final=True).exists()


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
