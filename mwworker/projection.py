"""The per-Group projection as a pure fold (PROTOCOL §11, §16; DESIGN §6; MWP-WRK-008).

Everything the store writes about a Group comes from here, from two places:

- ``fold(event, me=..., meta=..., row=...)``: one verified Event document
  folded onto the rows it touches (the Group's ``GroupMeta`` and at most one
  WorkItem's ``WorkRow``), returning a ``Change``: the new rows plus the
  checkpoint and outbox intents the Event implies. ``reads(event)`` says
  which rows to load.
- ``restore(document, state, me=...)``: the rows of a verified Group snapshot.

Both are pure functions of their arguments (no clock, no randomness, no I/O),
so the incremental apply cycle and ``Store.rebuild()`` produce the same rows,
byte for byte. ``me`` is the Worker's own Agent ID (``urn:uuid:``): it
decides "my Membership", "offered to me" and "my lease".

The fold reads Event kinds and payloads through the catalogue
(``mwportal.protocol.catalogue``, DESIGN §2): which aggregate a kind is about
comes from its definition, every folded kind must be one the catalogue
defines (checked at import: ``FOLDED_KINDS``), and the store hands the fold
only payloads the catalogue's schema accepted, so a folder reads the members
the schema requires without guessing. A kind the catalogue lacks, or one the
Worker does not fold, still advances the Cursor (and a WorkItem's revision).

Every timer an Event sets travels in its payload (docs/protocol-choices.md:
``startBy`` on ``work.offer.accepted``'s ownership lease, ``work.checkpointed``,
``work.unblocked`` and ``ext.mwportal.work.lease_expired``), so ``start_by`` is what the Group
Authority set, never a guess. A snapshot carries neither Lease IDs nor open
offers, so rows restored from one have ``lease_id`` and ``offered_to``
unknown until the next Event that sets them.

JSON-valued columns hold ``events.text()`` (RFC 8785), so equal values are
equal text.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from mwportal.protocol import catalogue
from mwportal.protocol.catalogue import PROJECT

from .errors import ProjectionError
from .events import Event, text

# --- rows ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkRow:
    """One WorkItem in its Group's Work queue (table ``group_queue``)."""

    group_id: str
    workitem: str
    state: str
    revision: int
    contract: str  # the Work Contract (work-contract.schema.json), as JSON text
    contract_revision: int
    accepted_contract_revision: int | None
    approved_contract_revision: int | None
    requires_approval: bool
    execution_approved: bool  # the start gate: no Approval needed, or granted for this contract revision
    deadline: str | None
    urgency: str | None
    business_impact: str | None
    risk_class: str | None
    dependencies: str  # [{"workitem", "policy"}] sorted by workitem, JSON text
    owner: str | None
    ownership_epoch: int
    start_by: str | None
    attempt: int
    needs_new_attempt: bool | None
    retry_not_before: str | None
    lease_id: str | None
    lease_expires_at: str | None
    checkpoint_count: int
    usage: str  # the WorkItem's usage totals, JSON text
    offered_to: str | None  # open offers' agents, JSON list; None: unknown (restored from a snapshot)
    offer_expires_at: str | None
    child_mission: str | None
    child_group: str | None
    child_failure_policy: str | None
    resolution_required: str | None
    late_results: int
    updated_sequence: int
    # What the owner's acceptance pinned (§6.1), JSON text: {"agentId", "agentCardVersion", "capabilities"};
    # an Artifact's manifest names them as its producer. None: no acceptance seen.
    pins: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMeta:
    """What the Worker knows of a Group as a whole (table ``group_meta``)."""

    group_id: str
    kind: str | None  # "mission" or "admin" (the Organization's administrative Group)
    organization: str | None
    revision: int
    mission: str | None
    mission_title: str | None
    mission_objective: str | None
    mission_status: str | None
    mission_budgets: str | None
    mission_usage: str | None
    parent_group: str | None
    parent_workitem: str | None
    my_roles: str | None  # JSON list; None: never a member as far as this log tells
    my_membership_epoch: int | None
    my_active: bool
    priority_policy: str | None  # administrative Groups: the Organization priority policy
    policy_revision: int | None
    server_snapshot_sequence: int | None  # the latest group.snapshot_taken
    restored_snapshot_sequence: int | None  # the snapshot this projection was restored from
    redacted: str | None  # sequences withdrawn by event.redacted, JSON list; None: unknown before a snapshot
    final_snapshot_at: int | None

    @staticmethod
    def empty(group_id: str) -> GroupMeta:
        return GroupMeta(
            group_id=group_id, kind=None, organization=None, revision=0, mission=None, mission_title=None,
            mission_objective=None, mission_status=None, mission_budgets=None, mission_usage=None, parent_group=None,
            parent_workitem=None, my_roles=None, my_membership_epoch=None, my_active=False, priority_policy=None,
            policy_revision=None, server_snapshot_sequence=None, restored_snapshot_sequence=None, redacted="[]",
            final_snapshot_at=None,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    """A checkpoint accepted into the Group log (``work.checkpointed`` or
    ``work.blocked``): what a later owner resumes from (§11.3, §11.5; MWP-WRK-019).
    ``state`` is the normative checkpoint object, ``number`` counts them per WorkItem."""

    group_id: str
    workitem: str
    number: int
    ownership_epoch: int
    lease_id: str | None
    sequence: int
    occurred_at: str
    state: str | None  # None once redacted
    progress: str | None
    redacted: bool


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """An intent the runtime must act on after commit (persist before dispatch).

    ``kind``: ``offer.respond`` (an offer names this Worker: admission control
    then ``work.accept_offer`` or ``work.decline_offer``, spec 10.3),
    ``schedule.disclose`` (this Worker accepted: publish the estimated start
    window, spec 11.2) or ``work.stop`` (this Worker's lease was ended by
    someone else: the slot stops at its next safe point, spec 11.3).
    The ID is deterministic, so a rebuild recreates the same intents.
    """

    intent_id: str
    group_id: str
    sequence: int
    kind: str
    workitem: str | None
    payload: str


@dataclass(frozen=True, slots=True)
class Change:
    """The result of folding one Event: rows to write (``None``: unchanged)."""

    meta: GroupMeta | None = None
    row: WorkRow | None = None
    checkpoints: tuple[CheckpointRow, ...] = ()
    outbox: tuple[OutboxRow, ...] = ()
    redact_sequences: tuple[int, ...] = ()


# --- which rows an Event touches: the catalogue says which aggregate it is about -------------

_MISSION_KINDS = frozenset(
    {
        "mission.created", "mission.follow_up.created", "mission.approved", "mission.cancelled",
        "mission.terminated", "mission.submitted_for_approval", "mission.changes_requested",
    }
)  # fmt: skip
_META_KINDS = frozenset(
    {
        *_MISSION_KINDS, "membership.changed", "membership.ended", "group.snapshot.created", "group.archived",
        f"{PROJECT}.admin.organization_created", f"{PROJECT}.scheduling.priority_policy_changed",
        f"{PROJECT}.audit.event_redacted",
    }
)  # fmt: skip
_USAGE_KIND = "ext.missionweaveprotocol.core.resource_usage_recorded"
_GROUP_AGGREGATES = frozenset({"mission", "group", "membership"})


def _aggregate(kind: str) -> str | None:
    """The catalogue's aggregate for ``kind``; None for a kind the catalogue lacks."""
    return catalogue.event(kind).aggregate if catalogue.is_event(kind) else None


def _item_of(event: Event) -> str | None:
    """The WorkItem a WorkItem-aggregate Event is about: its payload names it (the
    catalogue's ``workItemId``, a ``work.authorized``'s ``workItem``), else the envelope."""
    payload = event["payload"]
    if event["kind"] == "work.authorized":
        return str(payload["workItem"]["workItemId"])
    if event["kind"] == "mission.child.created":
        return str(payload["parentWorkItemId"])
    if event["kind"] == "approval.execution.granted" and "workItemId" in payload["approval"]:
        return str(payload["approval"]["workItemId"])
    found = payload.get("workItemId", event.get("workItemId"))
    return found if isinstance(found, str) else None


def reads(event: Event) -> tuple[bool, str | None]:
    """``(needs the GroupMeta, WorkItem ID or None)``: the rows ``fold`` needs."""
    kind = event["kind"]
    aggregate = _aggregate(kind)
    # The Group's revision follows every Mission, Group and Membership Event, folded or not.
    needs_meta = kind in _META_KINDS or kind == _USAGE_KIND or aggregate in _GROUP_AGGREGATES
    if kind not in FOLDED_KINDS:
        # Not folded: a WorkItem Event still moves its row's revision.
        return needs_meta, (_item_of(event) if aggregate == "work_item" else None)
    return needs_meta, (_item_of(event) if kind in _ITEM_FOLDERS else None)


# --- the fold ----------------------------------------------------------------------


def fold(event: Event, *, me: str, meta: GroupMeta | None, row: WorkRow | None) -> Change:
    """Fold one verified Event onto the rows ``reads(event)`` named.

    ``meta``/``row`` are the current rows (``None`` when absent). Raises
    ``ProjectionError`` when a WorkItem Event names a WorkItem the projection
    does not have; the caller writes nothing then.
    """
    new_meta = None
    needs_meta, item_id = reads(event)
    kind = event["kind"]
    if needs_meta:
        folded = _fold_meta(meta or GroupMeta.empty(event["groupId"]), event, me)
        if folded != meta:
            new_meta = folded
    if item_id is None:
        redactions: tuple[int, ...] = ()
        if kind == f"{PROJECT}.audit.event_redacted":
            redactions = (event["payload"]["sequence"],)
        return Change(meta=new_meta, redact_sequences=redactions)
    folder = _ITEM_FOLDERS.get(kind)
    revision = event.get("aggregateRevision", 0)
    if folder is None:
        # A WorkItem Event this Worker does not fold: its only certain effect
        # is the aggregate revision, which later compare-and-set Commands need.
        if row is None:
            return Change(meta=new_meta)
        return Change(meta=new_meta, row=replace(row, revision=revision, updated_sequence=event["sequence"]))
    if row is None and kind != "work.authorized":
        raise ProjectionError(f"{kind} at sequence {event['sequence']} names unknown WorkItem {item_id}")
    change = folder(row, event)
    if kind != "mission.child.created":  # about the child Mission: the WorkItem's revision stays
        change["revision"] = revision
    change["updated_sequence"] = event["sequence"]
    if row is None:
        new_row = WorkRow(**change)
        new_row = replace(new_row, execution_approved=_gate_open(new_row))
    else:
        values = list(_ROW_VALUES(row))
        for name, value in change.items():
            values[_ROW_INDEX[name]] = value
        values[_GATE] = not values[_REQUIRES] or values[_APPROVED] == values[_CONTRACT_REV]
        new_row = WorkRow(*values)
    checkpoints, outbox = _effects(row, new_row, event, me)
    return Change(meta=new_meta, row=new_row, checkpoints=checkpoints, outbox=outbox)


# Positional access to WorkRow: one tuple out, one constructor call in (replace() is slow on 33 fields).
_ROW_FIELDS = tuple(f.name for f in fields(WorkRow))
_ROW_VALUES = operator.attrgetter(*_ROW_FIELDS)
_ROW_INDEX = {name: i for i, name in enumerate(_ROW_FIELDS)}
_GATE, _REQUIRES = _ROW_INDEX["execution_approved"], _ROW_INDEX["requires_approval"]
_APPROVED, _CONTRACT_REV = _ROW_INDEX["approved_contract_revision"], _ROW_INDEX["contract_revision"]


def _gate_open(row: WorkRow) -> bool:
    return not row.requires_approval or row.approved_contract_revision == row.contract_revision


# --- Group rows ------------------------------------------------------------------

_MISSION_STATE = {
    "mission.submitted_for_approval": "awaiting_approval",
    "mission.changes_requested": "active",
    "mission.approved": "approved",
    "mission.cancelled": "cancelled",
    "mission.terminated": "failed",
}


def _fold_meta(meta: GroupMeta, event: Event, me: str) -> GroupMeta:
    kind = event["kind"]
    payload = event["payload"]
    if _aggregate(kind) in _GROUP_AGGREGATES:
        # The Group's own revision: the highest revision of its Mission, Group
        # and Membership aggregates the log has shown.
        revision = event.get("aggregateRevision", 0)
        if revision > meta.revision:
            meta = replace(meta, revision=revision)
    if kind in ("mission.created", "mission.follow_up.created"):
        mission = payload["mission"]
        parent = mission.get("parent") or {}
        meta = replace(
            meta, kind="mission", mission=mission["missionId"], mission_title=mission.get("title"),
            mission_objective=mission["objective"], mission_status=mission["state"],
            mission_budgets=text(mission["budget"]), mission_usage=text({}),
            parent_group=None, parent_workitem=parent.get("workItemId"),
        )  # fmt: skip
    elif kind == f"{PROJECT}.admin.organization_created":
        meta = replace(meta, kind="admin", organization=payload["organizationId"])
    elif kind == f"{PROJECT}.scheduling.priority_policy_changed":
        meta = replace(meta, priority_policy=text(payload["policy"]), policy_revision=payload["revision"])
    elif kind == "membership.changed":
        meta = _membership(meta, payload["membership"], me)
    elif kind == "membership.ended" and payload["principal"].get("id") == me:
        epoch = payload.get("membership", {}).get("membershipEpoch", meta.my_membership_epoch)
        meta = replace(meta, my_roles=text([]), my_membership_epoch=epoch, my_active=False)
    elif kind in _MISSION_STATE:
        meta = replace(meta, mission_status=_MISSION_STATE[kind])
    elif kind == "group.archived":
        meta = replace(meta, mission_status="archived")
    elif kind == "group.snapshot.created":
        meta = replace(meta, server_snapshot_sequence=payload["throughSequence"])
    elif kind == f"{PROJECT}.audit.event_redacted":
        known = _loads_list(meta.redacted)
        meta = replace(meta, redacted=text(sorted({*known, payload["sequence"]})))
    elif kind == _USAGE_KIND:
        usage = _loads_dict(meta.mission_usage)
        for dim, value in payload["usageDelta"].items():
            usage[dim] = usage.get(dim, 0) + value  # charged to the whole budget ancestry (§12)
        meta = replace(meta, mission_usage=text(usage))
    return meta


def _membership(meta: GroupMeta, membership: dict[str, Any], me: str) -> GroupMeta:
    """One ``membership.changed`` per role (docs/protocol-choices.md): this Worker's
    roles are the roles whose latest Membership is active."""
    if membership["member"].get("id") != me:
        return meta
    roles = set(_loads_list(meta.my_roles))
    if membership["state"] == "active":
        roles.add(membership["role"])
    else:
        roles.discard(membership["role"])
    return replace(
        meta, my_roles=text(sorted(roles)), my_membership_epoch=membership["membershipEpoch"], my_active=bool(roles)
    )


def _loads_list(value: str | None) -> list[Any]:
    parsed = json.loads(value) if value else []
    return parsed if isinstance(parsed, list) else []


def _loads_dict(value: str | None) -> dict[str, Any]:
    parsed = json.loads(value) if value else {}
    return parsed if isinstance(parsed, dict) else {}


# --- WorkItem rows: one folder per catalogue Event kind -----------------------------------

# A folder returns the columns that change; ``fold`` applies them in one step.
_Folder = Callable[[Any, Event], dict[str, Any]]
_EMPTY_LIST = "[]"
_EMPTY_OBJECT = "{}"
# Every dependency of a Work Contract must be verified before its dependant starts (§10.4).
DEPENDENCY_POLICY = "verified"


def contract_columns(contract: dict[str, Any]) -> dict[str, Any]:
    """The Work Contract (``work-contract.schema.json``) and the scheduling fields read from it."""
    deps = sorted(set(contract["dependencyWorkItemIds"]))
    return {
        "contract": text(contract),
        "contract_revision": contract["contractVersion"],
        "requires_approval": contract["executionApproval"] != "not_required",
        "deadline": contract["deadline"],
        "urgency": contract["requestedUrgency"],
        "business_impact": contract["businessImpact"],
        "risk_class": contract["sideEffectRisk"],
        "dependencies": text([{"workitem": w, "policy": DEPENDENCY_POLICY} for w in deps]),
    }


def _authorized(row: WorkRow | None, event: Event) -> dict[str, Any]:
    if row is not None:
        raise ProjectionError(f"work.authorized at sequence {event['sequence']}: WorkItem exists")
    item = event["payload"]["workItem"]
    return {
        "group_id": event["groupId"], "workitem": item["workItemId"], "state": item["state"], "revision": 0,
        "accepted_contract_revision": None, "approved_contract_revision": None,
        "execution_approved": False, "owner": None, "ownership_epoch": 0, "start_by": None, "attempt": 0,
        "needs_new_attempt": True, "retry_not_before": None, "lease_id": None, "lease_expires_at": None,
        "checkpoint_count": 0, "usage": _EMPTY_OBJECT, "offered_to": _EMPTY_LIST, "offer_expires_at": None,
        "child_mission": None, "child_group": None, "child_failure_policy": None, "resolution_required": None,
        "late_results": 0, "updated_sequence": 0, **contract_columns(item["contract"]),
    }  # fmt: skip


def _offered(row: WorkRow, event: Event) -> dict[str, Any]:
    payload = event["payload"]
    change: dict[str, Any] = {
        "state": "offered", "offered_to": text(sorted(payload["candidateAgentIds"])),
        "offer_expires_at": payload["offerExpiresAt"],
    }  # fmt: skip
    if "contract" in payload:
        change.update(contract_columns(payload["contract"]))
        if payload.get("contractChanged"):
            change["accepted_contract_revision"] = None  # renewed acceptance needed (§10.1)
    elif "contractVersion" in payload:
        change["contract_revision"] = payload["contractVersion"]
    return change


def _offer_accepted(row: WorkRow, event: Event) -> dict[str, Any]:
    payload = event["payload"]
    return {
        "state": "queued", "owner": payload["assigneeId"], "ownership_epoch": payload["ownershipEpoch"],
        # The ownership lease's start-by deadline is what the owner must honour (§11.3).
        "start_by": payload["ownershipLease"].get("startBy"),
        "accepted_contract_revision": payload.get("contractVersion", row.contract_revision),
        "offered_to": _EMPTY_LIST, "offer_expires_at": None,  # every other offer is withdrawn (§10.3)
        "pins": _pins(payload["assigneeId"], payload["agentCardVersion"], payload.get("capabilityPins")),
    }  # fmt: skip


def _pins(agent: str, card_version: int, capabilities: list[dict[str, str]] | None) -> str | None:
    """The ``pins`` column: the Agent Card and capability versions an acceptance pinned (§6.1)."""
    if capabilities is None:
        return None
    return text({"agentId": agent, "agentCardVersion": card_version, "capabilities": capabilities})


def _offer_declined(row: WorkRow, event: Event) -> dict[str, Any]:
    if row.offered_to is None:
        return {}
    agent = event["payload"]["agentId"]
    return {"offered_to": text([a for a in _loads_list(row.offered_to) if a != agent])}


def _execution_granted(row: WorkRow, event: Event) -> dict[str, Any]:
    return {"approved_contract_revision": event["payload"].get("contractVersion", row.contract_revision)}


def _started(row: WorkRow, event: Event) -> dict[str, Any]:
    payload = event["payload"]
    lease = payload["executionLease"]
    return {
        "state": "active", "owner": lease["holderAgentId"], "ownership_epoch": payload["ownershipEpoch"],
        "lease_id": lease["leaseId"], "lease_expires_at": payload["executionLeaseExpiresAt"],
        "attempt": payload.get("attempt", row.attempt), "needs_new_attempt": False, "start_by": None,
    }  # fmt: skip


def _progressed(row: WorkRow, event: Event) -> dict[str, Any]:
    payload = event["payload"]
    return {"lease_id": payload["executionLease"]["leaseId"], "lease_expires_at": payload["executionLeaseExpiresAt"]}


def _checkpointed(row: WorkRow, event: Event) -> dict[str, Any]:
    # The Execution Lease is released with durable progress; the owner keeps
    # the WorkItem and must start again before the Event's startBy (§11.3).
    return {
        "state": "queued", "lease_id": None, "lease_expires_at": None,
        "checkpoint_count": row.checkpoint_count + 1, "start_by": event["payload"].get("startBy"),
    }  # fmt: skip


def _blocked(row: WorkRow, event: Event) -> dict[str, Any]:
    payload = event["payload"]
    change: dict[str, Any] = {
        "state": "blocked", "lease_id": None, "lease_expires_at": None, "start_by": None,
        "resolution_required": payload["reason"],
    }  # fmt: skip
    if "checkpoint" in payload:
        change["checkpoint_count"] = row.checkpoint_count + 1
    if "childMissionId" in payload:
        change["child_mission"] = payload["childMissionId"]
    return change


def _unblocked(row: WorkRow, event: Event) -> dict[str, Any]:
    payload = event["payload"]
    if payload["status"] == "open":
        return {"state": "open", "owner": None, "start_by": None, "resolution_required": None}
    return {"state": "queued", "start_by": payload.get("startBy"), "resolution_required": None}


def _submitted(row: WorkRow, event: Event) -> dict[str, Any]:
    return {"state": "submitted", "lease_id": None, "lease_expires_at": None, "start_by": None}


def _verified(row: WorkRow, event: Event) -> dict[str, Any]:
    return {"state": "verified"}


def _ended(state: str) -> dict[str, Any]:
    """Fail or cancel: leases revoked, offers withdrawn, no owner."""
    return {
        "state": state, "owner": None, "start_by": None, "lease_id": None, "lease_expires_at": None,
        "offered_to": _EMPTY_LIST, "offer_expires_at": None,
    }  # fmt: skip


def _failed(row: WorkRow, event: Event) -> dict[str, Any]:
    # A failed attempt: a later start, after a retry policy's or the Coordinator's
    # new work.offer (failed -> offered, §10.2, §11.4), is a new attempt.
    return {**_ended("failed"), "needs_new_attempt": True}


def _cancelled(row: WorkRow, event: Event) -> dict[str, Any]:
    return _ended("cancelled")


def _fenced(row: WorkRow, event: Event) -> dict[str, Any]:
    """The owner loses its Ownership Epoch (§11.5); the state keeps its place."""
    return {"owner": None, "start_by": None, "lease_id": None, "lease_expires_at": None}


def _lease_expired(row: WorkRow, event: Event) -> dict[str, Any]:
    payload = event["payload"]
    change: dict[str, Any] = {
        "lease_id": None, "lease_expires_at": None, "start_by": payload.get("startBy"),
        "retry_not_before": payload.get("retryNotBefore"), "attempt": payload.get("attempt", row.attempt),
    }  # fmt: skip
    if "status" in payload:
        change["state"] = payload["status"]
        if payload["status"] in ("open", "offered"):
            change["owner"] = None
    if payload["leaseType"] == "execution":
        change["needs_new_attempt"] = True  # an execution that ended without a checkpoint (§11.4)
    return change


def _lease_revoked(row: WorkRow, event: Event) -> dict[str, Any]:
    # Session replacement (§11.3): the WorkItem returns to its queue.
    status = event["payload"]["status"]
    change: dict[str, Any] = {"state": status, "lease_id": None, "lease_expires_at": None, "needs_new_attempt": True}
    change["start_by"] = event["payload"].get("startBy")
    if status == "open":
        change["owner"] = None
    return change


def _usage_recorded(row: WorkRow, event: Event) -> dict[str, Any]:
    return {"usage": text(event["payload"]["cumulativeUsage"])}


def _late_result(row: WorkRow, event: Event) -> dict[str, Any]:
    # Kept for audit only; it never completes the WorkItem (§11.5).
    return {"late_results": row.late_results + 1}


def _contract_revised(row: WorkRow, event: Event) -> dict[str, Any]:
    payload = event["payload"]
    if "contract" in payload:
        return contract_columns(payload["contract"])
    if "dependencyId" in payload:
        deps = {d["workitem"] for d in _loads_list(row.dependencies)} | {payload["dependencyId"]}
        return {"dependencies": text([{"workitem": w, "policy": DEPENDENCY_POLICY} for w in sorted(deps)])}
    return {}


def _child_created(row: WorkRow, event: Event) -> dict[str, Any]:
    payload = event["payload"]
    return {"child_mission": payload["childMissionId"], "child_group": payload["childGroupId"]}


_ITEM_FOLDERS: dict[str, _Folder] = {
    "work.authorized": _authorized,
    "work.offer.created": _offered,
    "work.offer.accepted": _offer_accepted,
    f"{PROJECT}.work.offer_declined": _offer_declined,
    "approval.execution.granted": _execution_granted,
    "work.started": _started,
    "work.progressed": _progressed,
    "work.checkpointed": _checkpointed,
    "work.blocked": _blocked,
    "work.unblocked": _unblocked,
    "work.submitted": _submitted,
    "work.result.accepted": _verified,
    "work.failed": _failed,
    "work.cancelled": _cancelled,
    "work.contract.revised": _contract_revised,
    f"{PROJECT}.work.ownership_fenced": _fenced,
    f"{PROJECT}.work.lease_expired": _lease_expired,
    f"{PROJECT}.work.late_result_recorded": _late_result,
    "ext.missionweaveprotocol.core.work_execution_lease_revoked": _lease_revoked,
    _USAGE_KIND: _usage_recorded,
    "mission.child.created": _child_created,
}

ITEM_EVENT_KINDS = frozenset(_ITEM_FOLDERS)
GROUP_EVENT_KINDS = _META_KINDS
FOLDED_KINDS = ITEM_EVENT_KINDS | GROUP_EVENT_KINDS
"""Every Event kind the fold reads: each one the catalogue defines (checked at import)."""


def check_folded_kinds(kinds: frozenset[str]) -> None:
    """``RuntimeError`` unless every kind is one the catalogue defines: a fold of
    a kind nobody emits is a copy of a payload that drifted (DESIGN §2)."""
    unknown = sorted(k for k in kinds if not catalogue.is_event(k))
    if unknown:
        raise RuntimeError(f"the Worker folds Event kinds the catalogue lacks: {unknown}")


check_folded_kinds(FOLDED_KINDS)


# --- checkpoint and outbox intents -------------------------------------------------


def _effects(
    prev: WorkRow | None, new: WorkRow, event: Event, me: str
) -> tuple[tuple[CheckpointRow, ...], tuple[OutboxRow, ...]]:
    kind = event["kind"]
    payload = event["payload"]
    group, seq = event["groupId"], event["sequence"]
    checkpoints: tuple[CheckpointRow, ...] = ()
    if kind in ("work.checkpointed", "work.blocked") and "checkpoint" in payload:
        checkpoints = (
            CheckpointRow(
                group_id=group, workitem=new.workitem, number=new.checkpoint_count,
                ownership_epoch=new.ownership_epoch, lease_id=prev.lease_id if prev else None, sequence=seq,
                occurred_at=event["occurredAt"], state=text(payload["checkpoint"]),
                progress=text(payload.get("progress", {})), redacted=False,
            ),
        )  # fmt: skip
    outbox: list[OutboxRow] = []

    def intent(kind_: str, body: dict[str, Any]) -> None:
        outbox.append(OutboxRow(f"{group}/{seq}/{kind_}", group, seq, kind_, new.workitem, text(body)))

    if kind == "work.offer.created" and me in payload["candidateAgentIds"]:
        intent(
            "offer.respond",
            {"revision": new.revision, "contract_revision": new.contract_revision, "expires_at": new.offer_expires_at},
        )
    elif kind == "work.offer.accepted" and payload["assigneeId"] == me:
        intent("schedule.disclose", {"ownership_epoch": new.ownership_epoch, "start_by": new.start_by})
    actor = event.get("actor") or {}
    if (
        prev is not None
        and prev.owner == me
        and prev.lease_id is not None
        and new.lease_id is None
        and (kind == "ext.missionweaveprotocol.core.work_execution_lease_revoked" or actor.get("id") != me)
    ):
        intent("work.stop", {"lease_id": prev.lease_id, "ownership_epoch": prev.ownership_epoch, "reason": kind})
    return checkpoints, tuple(outbox)


# --- snapshots ----------------------------------------------------------------------

SNAPSHOT_STATE_MEMBERS = ("mission", "group", "memberships", "workItems")
"""What a Group Snapshot's state holds, each in its normative shape: the
Mission, the Group, this Organization's Memberships and every WorkItem (with
its ``owner`` and ``offers``). Optional beside them: ``ownershipLeases``
(``{workItemId, startBy}`` of each owned WorkItem's start-by deadline),
``executionApprovals`` (``{workItemId, contractVersion}`` in force),
``executionLeases`` (the active Execution Leases, lease.schema.json),
``checkpoints`` (``{workItemId, number, ownershipEpoch, executionLeaseId,
checkpoint, progress, createdAt}``, the latest of each WorkItem),
``missionUsage`` (the six usage dimensions) and, in an administrative Group,
``priorityPolicy {policy, revision}`` (``workitems/snapshot.py`` writes them)."""


def restore(
    document: dict[str, Any], state: dict[str, Any], *, me: str
) -> tuple[GroupMeta, list[WorkRow], list[CheckpointRow]]:
    """The rows of a verified snapshot: ``document`` is the signed Group Snapshot
    (``group-snapshot.schema.json``), ``state`` its verified state.

    What the state does not carry is unknown: attempts and retry timers, the
    parent Group, redactions before it, child Missions, checkpoints older than
    each WorkItem's latest.
    """
    group, sequence = document["groupId"], document["throughSequence"]
    mission = state.get("mission") if isinstance(state.get("mission"), dict) else None
    policy = state.get("priorityPolicy") if isinstance(state.get("priorityPolicy"), dict) else None
    meta = GroupMeta.empty(group)
    for membership in state.get("memberships") or []:
        meta = _membership(meta, membership, me)
    parent = (mission or {}).get("parent") or {}
    archived = (state.get("group") or {}).get("state") == "archived"
    meta = replace(
        meta, kind="mission" if mission else ("admin" if policy else None),
        revision=mission["revision"] if mission else 0,
        mission=mission["missionId"] if mission else None,
        mission_title=mission.get("title") if mission else None,
        mission_objective=mission["objective"] if mission else None,
        mission_status=("archived" if archived else mission["state"]) if mission else None,
        mission_budgets=text(mission["budget"]) if mission else None,
        mission_usage=text(state.get("missionUsage") or {}) if mission else None,
        parent_workitem=parent.get("workItemId"),
        priority_policy=text(policy["policy"]) if policy else None,
        policy_revision=policy["revision"] if policy else None,
        server_snapshot_sequence=sequence, restored_snapshot_sequence=sequence, redacted=None,
    )  # fmt: skip
    start_by = {str(x["workItemId"]): x.get("startBy") for x in state.get("ownershipLeases") or []}
    approved = {str(x["workItemId"]): x["contractVersion"] for x in state.get("executionApprovals") or []}
    leases = {str(x["workItemId"]): x for x in state.get("executionLeases") or [] if "workItemId" in x}
    latest = {str(x["workItemId"]): x for x in state.get("checkpoints") or []}
    rows = []
    for item in state.get("workItems") or []:
        owner = item.get("owner") or {}
        pending = [o for o in item.get("offers") or [] if o.get("status") == "pending"]
        row = WorkRow(
            group_id=group, workitem=item["workItemId"], state=item["state"], revision=item["revision"],
            accepted_contract_revision=None, approved_contract_revision=approved.get(item["workItemId"]),
            execution_approved=False, owner=owner.get("agentId"), ownership_epoch=owner.get("ownershipEpoch", 0),
            start_by=start_by.get(item["workItemId"]) if owner else None, attempt=0, needs_new_attempt=None,
            retry_not_before=None,
            lease_id=leases[item["workItemId"]]["leaseId"] if item["workItemId"] in leases else None,
            lease_expires_at=leases[item["workItemId"]]["expiresAt"] if item["workItemId"] in leases else None,
            checkpoint_count=latest[item["workItemId"]]["number"] if item["workItemId"] in latest else 0,
            usage=_EMPTY_OBJECT,
            offered_to=text(sorted(o["agentId"] for o in pending)),
            offer_expires_at=max((o["expiresAt"] for o in pending), default=None),
            child_mission=None, child_group=None, child_failure_policy=None, resolution_required=None,
            late_results=0, updated_sequence=sequence, **contract_columns(item["contract"]),
            pins=_pins(owner["agentId"], owner["agentCardVersion"], owner.get("capabilityPins")) if owner else None,
        )  # fmt: skip
        rows.append(replace(row, execution_approved=_gate_open(row)))
    rows.sort(key=lambda r: r.workitem)
    # The latest checkpoint of each WorkItem: where a new owner resumes (§11.5). Its Event's
    # sequence is not in the state; 0 matches no redaction.
    checkpoints = [
        CheckpointRow(
            group_id=group, workitem=str(c["workItemId"]), number=c["number"], ownership_epoch=c["ownershipEpoch"],
            lease_id=c.get("executionLeaseId"), sequence=0, occurred_at=str(c.get("createdAt", "")),
            state=text(c["checkpoint"]), progress=text(c.get("progress") or {}), redacted=False,
        )
        for c in sorted(latest.values(), key=lambda c: str(c["workItemId"]))
    ]  # fmt: skip
    return meta, rows, checkpoints
