"""Snapshots, archival and tombstones (§7.4, §16).

The final snapshot arrives signed in ``ext.missionweaveprotocol.core.group_archive``
(``missions.snapshots.archive_group`` builds it), the only Command that appends
``group.snapshot.created`` (with ``group.archived``, §15.2). It is checked
against the Group before it is kept: its signer, its Group, the sequence it
covers, every Event ID through it, the state it commits to and the policy-log
entry it links. Live snapshots for replay are not Events (``missions.snapshots``).
A redaction is a tombstone Event: the
redacted Event keeps its ID, sequence and signature (the table refuses any
rewrite), and the tombstone says which Event is withdrawn and why.
"""

from __future__ import annotations

from typing import Any

from mwportal.protocol import ErrorCode, ProtocolError, jcs
from mwportal.protocol.ids import bare, urn
from mwportal.protocol.values import parse_timestamp
from mwportal.protocol.verification import VerificationFailed, verify_document

from .. import policylog, service_keys
from ..authority import AggregateRef, Decision, Emit, HandlerContext, check_revision
from ..guards import refuse
from ..keyregistry import DjangoRegistry
from ..models import GroupEvent, GroupSnapshot, Mission, Organization
from ..registry import command
from ..snapshots import FINISHED, GROUP_ARCHIVE, group_state, policy_entry_id, state_hash
from .common import stamp

EVENT_REDACT = "ext.mwportal.audit.event_redact"
EVENT_REDACTED = "ext.mwportal.audit.event_redacted"


@command(GROUP_ARCHIVE, actors=("service",))
def archive_group(ctx: HandlerContext) -> Decision:
    """Archive a finished Mission's Group with its signed final snapshot, in one transaction (§7.4, §15.2).

    An archived Group accepts no further Command, this one included: ``accept()``
    refuses every Command to it before any handler runs.
    """
    check_revision(ctx.command, ctx.group.revision)
    mission_id, status = Mission.objects.values_list("id", "status").get(group_id=ctx.group.id)
    if status not in FINISHED:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"a Mission that is {status} is not archived (§7.4)")
    document = ctx.payload["snapshot"]
    state = group_state(ctx.group.id)
    _check_final_snapshot(ctx, document, state)
    entry = _check_policy_link(ctx, document, status)
    snapshot = GroupSnapshot.objects.create(
        group_id=ctx.group.id, sequence=document["throughSequence"], head_hash=ctx.group.head_hash,
        document=document, state=state, final=True, created_at=ctx.now,
    )  # fmt: skip
    payload = {
        "snapshotId": document["snapshotId"],
        "throughSequence": document["throughSequence"],
        "stateHash": document["stateHash"],
        # The content address of what a client restores (the REST snapshot artifact, §16).
        "snapshotArtifactHash": jcs.sha256_hash(jcs.canonicalize({"snapshot": document, "state": snapshot.state})),
    }
    # The Policy Log keeps the archival decision; the snapshot's policy-log entry is its reference (§15.2).
    ctx.policy_records.append(
        policylog.Entry(
            organization_id=ctx.group.organization_id, kind="final_snapshot", group_id=ctx.group.id,
            mission_id=str(mission_id), actor=ctx.command.actor, action_id=ctx.command.action_id,
            command_kind=ctx.command.kind, reference=entry["entryId"],
            detail={"snapshotId": document["snapshotId"], "decision": entry["decision"], **entry["details"]},
        )
    )  # fmt: skip
    created = Emit("group.snapshot.created", AggregateRef("group", ctx.group.id, ctx.group.revision), payload)
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision + 1)
    archived = Emit("group.archived", ref, {"snapshotId": document["snapshotId"], "archivedAt": stamp(ctx.now)})
    return Decision([created, archived], ref)


def _check_policy_link(ctx: HandlerContext, document: dict[str, Any], status: str) -> dict[str, Any]:
    """The snapshot links the policy-log entry that decided the archival (§15.2): the entry derived
    from the snapshot, by the Group Authority, through the same sequence, naming the Mission's status."""
    entries: list[dict[str, Any]] = document["policyLog"]
    snapshot_id = bare(document["snapshotId"], "snapshotId")
    entry = next((e for e in entries if e["entryId"] == urn(policy_entry_id(snapshot_id))), None)
    if entry is None or entry["actor"] != document["createdBy"]:
        raise refuse(
            ErrorCode.INVALID_COMMAND, "/payload/snapshot/policyLog: no entry of the Group Authority for this snapshot",
            field="/payload/snapshot/policyLog",
        )  # fmt: skip
    details = entry["details"]
    if details.get("throughSequence") != document["throughSequence"] or details.get("missionStatus") != status:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/snapshot/policyLog/details: the entry is not of this archival (sequence, Mission status)",
            field="/payload/snapshot/policyLog",
        )
    return entry


def _check_final_snapshot(ctx: HandlerContext, document: dict[str, Any], state: dict[str, Any]) -> None:
    """The snapshot is the Group Authority's, of this Group, through its head, over its whole history and state."""
    org = Organization.objects.get(id=ctx.group.organization_id)
    try:
        verified = verify_document(jcs.canonicalize(document), "group-snapshot", DjangoRegistry(org))
    except VerificationFailed as exc:
        raise refuse(exc.wire_code, f"/payload/snapshot: {exc.wire_message}", field="/payload/snapshot") from None
    authority = urn(service_keys.principal_id(str(org.id), service_keys.GROUP_AUTHORITY))
    if (verified.principal.type, verified.principal.id) != ("service", authority):
        raise refuse(
            ErrorCode.AUTH_FORBIDDEN,
            "/payload/snapshot/createdBy: a Group Snapshot is signed by the Organization's Group Authority",
            field="/payload/snapshot/createdBy",
        )
    if document["groupId"] != urn(ctx.group.id):
        raise refuse(
            ErrorCode.INVALID_COMMAND, "/payload/snapshot/groupId: the snapshot is of another Group",
            field="/payload/snapshot/groupId",
        )  # fmt: skip
    if document["throughSequence"] != ctx.group.last_sequence:
        raise ProtocolError(
            ErrorCode.REVISION_CONFLICT,
            f"the snapshot covers sequence {document['throughSequence']};"
            f" the Group's head is {ctx.group.last_sequence}",
            details={"field": "/payload/snapshot/throughSequence"},
        )
    events = GroupEvent.objects.filter(group_id=ctx.group.id).order_by("sequence")
    history = [urn(str(e)) for e in events.values_list("event_id", flat=True)]
    if document["eventIds"] != history:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/snapshot/eventIds: not the Group's contiguous history through its head",
            field="/payload/snapshot/eventIds",
        )
    if document["stateHash"] != state_hash(state):
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/snapshot/stateHash: does not commit to the Group's state at its head",
            field="/payload/snapshot/stateHash",
        )
    created = parse_timestamp(document["createdAt"])
    last = GroupEvent.objects.filter(group_id=ctx.group.id).order_by("-sequence").values_list("occurred_at", flat=True)
    if created > parse_timestamp(stamp(ctx.now)) or created < parse_timestamp(stamp(last[0])):
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/snapshot/createdAt: a final snapshot is taken after the Event it covers and before archival",
            field="/payload/snapshot/createdAt",
        )


@command(EVENT_REDACT, group_roles=("mission_owner",))
def redact_event(ctx: HandlerContext) -> Decision:
    """A legal deletion or security redaction as a tombstone Event (§7.4).

    The redacted Event keeps its ID, sequence and signature; the tombstone
    names it and says why, so readers and audits withhold its content without
    breaking the log. An Event is redacted once.
    """
    sequence = ctx.payload["sequence"]
    event = GroupEvent.objects.filter(group_id=ctx.group.id, sequence=sequence).values_list("event_id", flat=True)
    event_id = event.first()
    if event_id is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"/payload/sequence: no Event {sequence} in this Group",
            field="/payload/sequence",
            reason="not_found",
        )
    if GroupEvent.objects.filter(group_id=ctx.group.id, type=EVENT_REDACTED, body__sequence=sequence).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"Event {sequence} is redacted already")
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision)
    payload = {"sequence": sequence, "reason": ctx.payload["reason"], "eventId": urn(str(event_id))}
    return Decision([Emit(EVENT_REDACTED, ref, payload)], ref)
