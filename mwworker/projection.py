"""The per-Group projection as a pure fold (spec 11.1; DESIGN §5; MWP-WRK-008).

Everything the store writes about a Group comes from here, from two places:

- ``fold(event, me=..., meta=..., row=...)``: one accepted Event folded onto
  the rows it touches (the Group's ``GroupMeta`` and at most one WorkItem's
  ``WorkRow``), returning a ``Change``: the new rows plus the checkpoint and
  outbox intents the Event implies. ``reads(event)`` says which rows to load.
- ``restore(document, state, me=...)``: the rows of a verified Group snapshot.

Both are pure functions of their arguments (no clock, no randomness, no I/O),
so the incremental apply cycle and ``Store.rebuild()`` produce the same rows,
byte for byte. ``me`` is the Worker's own Agent ID: it decides "my
Membership", "offered to me" and "my lease".

The rows mirror the server's WorkItem (``workitems/models.py``) as far as the
Event bodies tell. A field an Event leaves unknown is ``None`` (not a guess):
the server sets a new ``start_by`` on ``work.checkpointed``,
``work.unblocked``, ``work.attempt_failed`` and ``work.lease_revoked``
without putting it in the body, so after those Events ``start_by`` is
``None`` until an Event states it again. A snapshot carries neither Lease IDs
nor open offers, so rows restored from one have ``lease_id`` and
``offered_to`` unknown until the next Event that sets them.

JSON-valued columns hold ``events.text()`` (sorted, compact), so equal values
are equal text.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

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
    contract: str  # the Work Contract with its revision, as JSON text
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


@dataclass(frozen=True, slots=True)
class GroupMeta:
    """What the Worker knows of a Group as a whole (table ``group_meta``)."""

    group_id: str
    kind: str | None  # "mission" or "admin"
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
    ``work.blocked``): what a later owner resumes from (spec 11.5; MWP-WRK-019)."""

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


# --- which rows an Event touches -------------------------------------------------

_META_TYPES = frozenset(
    {
        "org.created", "org.priority_policy_set", "mission.created", "membership.added", "membership.removed",
        "membership.roles_set", "mission.approved", "mission.failed", "mission.cancelled", "mission.archived",
        "group.snapshot_taken", "event.redacted",
    }
)  # fmt: skip
# WorkItem Events that may charge usage to the Mission (charge_usage on the server).
_USAGE_TYPES = frozenset({"work.checkpointed", "work.blocked", "work.submitted"})


def _usage_delta(event: Event) -> dict[str, Any]:
    usage = event["body"].get("usage")
    delta = usage.get("delta") if isinstance(usage, dict) else None
    return delta if isinstance(delta, dict) else {}


def reads(event: Event) -> tuple[bool, str | None]:
    """``(needs the GroupMeta, WorkItem ID or None)``: the rows ``fold`` needs."""
    agg = event["aggregate"]
    kind = agg["kind"]
    etype = event["type"]
    needs_meta = (
        etype in _META_TYPES
        or (kind == "group" and agg["id"] == event["group"])
        or (etype in _USAGE_TYPES and bool(_usage_delta(event)))
    )
    return needs_meta, (agg["id"] if kind == "workitem" else None)


# --- the fold ----------------------------------------------------------------------


def fold(event: Event, *, me: str, meta: GroupMeta | None, row: WorkRow | None) -> Change:
    """Fold one accepted Event onto the rows ``reads(event)`` named.

    ``meta``/``row`` are the current rows (``None`` when absent). Raises
    ``ProjectionError`` when a WorkItem Event names a WorkItem the projection
    does not have; the caller writes nothing then.
    """
    new_meta = None
    needs_meta, item_id = reads(event)
    if needs_meta:
        folded = _fold_meta(meta or GroupMeta.empty(event["group"]), event, me)
        if folded != meta:
            new_meta = folded
    if item_id is None:
        redactions: tuple[int, ...] = ()
        if event["type"] == "event.redacted" and isinstance(event["body"].get("sequence"), int):
            redactions = (event["body"]["sequence"],)
        return Change(meta=new_meta, redact_sequences=redactions)
    folder = _ITEM_FOLDERS.get(event["type"])
    if folder is None:
        # A WorkItem Event this Worker does not know: its only certain effect
        # is the aggregate revision, which later compare-and-set Commands need.
        if row is None:
            return Change(meta=new_meta)
        new_row = replace(row, revision=event["aggregate"]["revision"], updated_sequence=event["sequence"])
        return Change(meta=new_meta, row=new_row)
    if row is None and event["type"] != "work.authorized":
        raise ProjectionError(f"{event['type']} at sequence {event['sequence']} names unknown WorkItem {item_id}")
    change = folder(row, event)
    change["revision"] = event["aggregate"]["revision"]
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


def _fold_meta(meta: GroupMeta, event: Event, me: str) -> GroupMeta:
    etype = event["type"]
    body = event["body"]
    agg = event["aggregate"]
    if agg["kind"] == "group" and agg["id"] == event["group"] and agg["revision"] > meta.revision:
        # The Group revision moves on Membership and Mission status Events only
        # (DESIGN §4a); the server keeps the highest one emitted.
        meta = replace(meta, revision=agg["revision"])
    if etype == "mission.created":
        parent = body.get("parent") if isinstance(body.get("parent"), dict) else {}
        meta = replace(
            meta, kind="mission", organization=body.get("organization"), mission=body.get("mission"),
            mission_title=body.get("title"), mission_objective=body.get("objective"), mission_status="active",
            mission_budgets=text(body.get("budgets") or {}), mission_usage=text({}),
            parent_group=parent.get("group"), parent_workitem=parent.get("workitem"),
        )  # fmt: skip
    elif etype == "org.created":
        meta = replace(
            meta,
            kind="admin",
            organization=body.get("organization"),
            priority_policy=text(body.get("policy")),
            policy_revision=0,  # Organization.policy_revision starts at 0
        )
    elif etype == "org.priority_policy_set":
        meta = replace(meta, priority_policy=text(body.get("policy")), policy_revision=body.get("revision"))
    elif etype in ("membership.added", "membership.roles_set") and body.get("agent") == me:
        meta = replace(
            meta, my_roles=text(body.get("roles") or []), my_membership_epoch=body.get("membership_epoch"),
            my_active=True,
        )  # fmt: skip
    elif etype == "membership.removed" and body.get("agent") == me:
        meta = replace(meta, my_roles=text([]), my_membership_epoch=body.get("membership_epoch"), my_active=False)
    elif etype in _MISSION_STATUS:
        meta = replace(meta, mission_status=_MISSION_STATUS[etype])
        if etype == "mission.archived":
            meta = replace(meta, final_snapshot_at=body.get("final_snapshot_at"))
    elif etype == "group.snapshot_taken":
        meta = replace(meta, server_snapshot_sequence=body.get("sequence"))
    elif etype == "event.redacted" and isinstance(body.get("sequence"), int):
        known = _loads_list(meta.redacted)
        meta = replace(meta, redacted=text(sorted({*known, body["sequence"]})))
    delta = _usage_delta(event) if etype in _USAGE_TYPES else {}
    if delta:
        usage = _loads_dict(meta.mission_usage)
        for dim, value in delta.items():
            usage[dim] = usage.get(dim, 0) + value  # the server's charge_usage order and arithmetic
        meta = replace(meta, mission_usage=text(usage))
    return meta


_MISSION_STATUS = {
    "mission.approved": "completed",
    "mission.failed": "failed",
    "mission.cancelled": "cancelled",
    "mission.archived": "archived",
}


def _loads_list(value: str | None) -> list[Any]:
    parsed = json.loads(value) if value else []
    return parsed if isinstance(parsed, list) else []


def _loads_dict(value: str | None) -> dict[str, Any]:
    parsed = json.loads(value) if value else {}
    return parsed if isinstance(parsed, dict) else {}


# --- WorkItem rows: one folder per Event type, mirroring workitems/handlers/ --------

# A folder returns the columns that change; ``fold`` applies them in one step.
_Folder = Callable[[Any, Event], dict[str, Any]]
_NONE: list[Any] = []
_EMPTY_LIST = "[]"
_EMPTY_OBJECT = "{}"


def _contract_columns(contract: Any) -> dict[str, Any]:
    """The contract and the scheduling metadata the Scheduler reads from it."""
    c: dict[str, Any] = contract if isinstance(contract, dict) else {}
    risk: dict[str, Any] = c["risk"] if isinstance(c.get("risk"), dict) else {}
    deps: dict[str, Any] = {}
    for dep in c.get("dependencies") or _NONE:
        if isinstance(dep, dict) and isinstance(dep.get("workitem"), str):
            deps[dep["workitem"]] = dep.get("policy")  # as set_dependencies: the last entry wins
    return {
        "contract": text(c),
        "requires_approval": bool(risk.get("requires_execution_approval")),
        "deadline": c.get("deadline"),
        "urgency": c.get("urgency"),
        "business_impact": c.get("business_impact"),
        "risk_class": risk.get("class"),
        "dependencies": text([{"workitem": w, "policy": deps[w]} for w in sorted(deps)]),
    }


def _authorized(row: WorkRow | None, event: Event) -> dict[str, Any]:
    if row is not None:
        raise ProjectionError(f"work.authorized at sequence {event['sequence']}: WorkItem exists")
    contract = event["body"].get("contract")
    revision = contract.get("revision", 1) if isinstance(contract, dict) else 1
    return {
        "group_id": event["group"], "workitem": event["aggregate"]["id"], "state": "open", "revision": 0,
        "contract_revision": revision, "accepted_contract_revision": None, "approved_contract_revision": None,
        "execution_approved": False, "owner": None, "ownership_epoch": 0, "start_by": None, "attempt": 0,
        "needs_new_attempt": True, "retry_not_before": None, "lease_id": None, "lease_expires_at": None,
        "checkpoint_count": 0, "usage": _EMPTY_OBJECT, "offered_to": _EMPTY_LIST, "offer_expires_at": None,
        "child_mission": None, "child_group": None, "child_failure_policy": None, "resolution_required": None,
        "late_results": 0, "updated_sequence": 0, **_contract_columns(contract),
    }  # fmt: skip


def _offered(row: WorkRow, event: Event) -> dict[str, Any]:
    body = event["body"]
    change = {
        "state": "offered", "offered_to": text(list(body.get("agents") or _NONE)),
        "offer_expires_at": body.get("expires_at"),
        "contract_revision": body.get("contract_revision", row.contract_revision),
    }  # fmt: skip
    if body.get("contract") is not None:
        change.update(_contract_columns(body["contract"]))
        if body.get("contract_changed"):
            change["accepted_contract_revision"] = None  # renewed acceptance needed (spec 10.1)
    return change


def _offer_accepted(row: WorkRow, event: Event) -> dict[str, Any]:
    body = event["body"]
    return {
        "state": "queued", "owner": body.get("agent"),
        "ownership_epoch": body.get("ownership_epoch", row.ownership_epoch), "start_by": body.get("start_by"),
        "accepted_contract_revision": body.get("contract_revision"),
        "offered_to": _EMPTY_LIST, "offer_expires_at": None,  # every other offer is withdrawn (spec 10.3)
    }  # fmt: skip


def _offer_declined(row: WorkRow, event: Event) -> dict[str, Any]:
    if row.offered_to is None:
        return {}
    agent = event["body"].get("agent")
    return {"offered_to": text([a for a in _loads_list(row.offered_to) if a != agent])}


def _execution_granted(row: WorkRow, event: Event) -> dict[str, Any]:
    return {"approved_contract_revision": event["body"].get("contract_revision")}


def _started(row: WorkRow, event: Event) -> dict[str, Any]:
    body = event["body"]
    return {
        "state": "active", "owner": body.get("agent"),
        "ownership_epoch": body.get("ownership_epoch", row.ownership_epoch), "lease_id": body.get("lease_id"),
        "lease_expires_at": body.get("lease_expires_at"), "attempt": body.get("attempt", row.attempt),
        "needs_new_attempt": False,
    }  # fmt: skip


def _lease_renewed(row: WorkRow, event: Event) -> dict[str, Any]:
    return {"lease_expires_at": event["body"].get("lease_expires_at")}


def _usage_total(row: WorkRow, event: Event) -> str:
    usage = event["body"].get("usage")
    total = usage.get("workitem_total") if isinstance(usage, dict) else None
    return text(total) if isinstance(total, dict) else row.usage


def _released(row: WorkRow, event: Event, state: str) -> dict[str, Any]:
    """Checkpoint and block: the lease is released with durable progress."""
    number = event["body"].get("checkpoint_number")
    return {
        "state": state, "lease_id": None, "lease_expires_at": None, "usage": _usage_total(row, event),
        "checkpoint_count": number if isinstance(number, int) else row.checkpoint_count,
    }  # fmt: skip


def _checkpointed(row: WorkRow, event: Event) -> dict[str, Any]:
    # The server sets a new start_by (now + MWP_START_BY_SECONDS) that the body omits.
    return {**_released(row, event, "queued"), "start_by": None}


def _blocked(row: WorkRow, event: Event) -> dict[str, Any]:
    return {**_released(row, event, "blocked"), "resolution_required": event["body"].get("resolution_required")}


def _unblocked(row: WorkRow, event: Event) -> dict[str, Any]:
    state = event["body"].get("state", "queued")
    if state == "open":
        return {"state": "open", "owner": None, "start_by": None, "resolution_required": None}
    # Back in the owner's queue with a new start_by the body omits.
    return {"state": state, "start_by": None, "resolution_required": None}


def _submitted(row: WorkRow, event: Event) -> dict[str, Any]:
    return {"state": "submitted", "lease_id": None, "lease_expires_at": None, "usage": _usage_total(row, event)}


def _verified(row: WorkRow, event: Event) -> dict[str, Any]:
    return {"state": "verified"}


def _ended(state: str) -> dict[str, Any]:
    """Fail or cancel (``_end`` on the server): lease revoked, offers withdrawn, no owner."""
    return {
        "state": state, "owner": None, "start_by": None, "lease_id": None, "lease_expires_at": None,
        "offered_to": _EMPTY_LIST, "offer_expires_at": None,
    }  # fmt: skip


def _failed(row: WorkRow, event: Event) -> dict[str, Any]:
    return _ended("failed")


def _cancelled(row: WorkRow, event: Event) -> dict[str, Any]:
    return _ended("cancelled")


def _attempt_failed(row: WorkRow, event: Event) -> dict[str, Any]:
    # start_by is retry_not_before + MWP_START_BY_SECONDS on the server; the body omits it.
    return {
        "state": "queued", "lease_id": None, "lease_expires_at": None, "needs_new_attempt": True,
        "retry_not_before": event["body"].get("retry_not_before"), "start_by": None,
    }  # fmt: skip


def _fenced(row: WorkRow, event: Event) -> dict[str, Any]:
    """work.owner_fenced, work.start_deadline_missed, work.blocked_lease_expired:
    the owner loses the WorkItem; its state keeps its place in the table."""
    return {"owner": None, "start_by": None, "lease_id": None, "lease_expires_at": None}


def _lease_expired(row: WorkRow, event: Event) -> dict[str, Any]:
    body = event["body"]
    # retry_not_before (now + backoff) is not in the body; start_by is.
    return {
        "state": "queued", "lease_id": None, "lease_expires_at": None, "needs_new_attempt": True,
        "retry_not_before": None, "start_by": body.get("start_by"), "attempt": body.get("attempt", row.attempt),
    }  # fmt: skip


def _lease_revoked(row: WorkRow, event: Event) -> dict[str, Any]:
    # Session replacement (MWP-WRK-014): back to queued under a new start_by the body omits.
    return {"state": "queued", "lease_id": None, "lease_expires_at": None, "needs_new_attempt": True, "start_by": None}


def _late_result(row: WorkRow, event: Event) -> dict[str, Any]:
    # Kept for audit only; it never completes the WorkItem (MWP-WRK-019).
    return {"late_results": row.late_results + 1}


def _child_created(row: WorkRow, event: Event) -> dict[str, Any]:
    body = event["body"]
    return {
        **_ended("blocked"), "child_mission": body.get("child_mission"), "child_group": body.get("child_group"),
        "child_failure_policy": body.get("failure_policy"),
    }  # fmt: skip


def _child_failed(row: WorkRow, event: Event) -> dict[str, Any]:
    if event["body"].get("state") == "failed":
        return _ended("failed")
    # keep_blocked: the Coordinator may now unblock or reassign.
    return {"state": "blocked", "child_mission": None, "child_group": None}


_ITEM_FOLDERS: dict[str, _Folder] = {
    "work.authorized": _authorized,
    "work.offered": _offered,
    "work.offer_accepted": _offer_accepted,
    "work.offer_declined": _offer_declined,
    "approval.execution_granted": _execution_granted,
    "work.started": _started,
    "work.lease_renewed": _lease_renewed,
    "work.checkpointed": _checkpointed,
    "work.blocked": _blocked,
    "work.unblocked": _unblocked,
    "work.submitted": _submitted,
    "work.result_accepted": _verified,
    "work.failed": _failed,
    "work.attempt_failed": _attempt_failed,
    "work.cancelled": _cancelled,
    "work.owner_fenced": _fenced,
    "work.lease_expired": _lease_expired,
    "work.start_deadline_missed": _fenced,
    "work.blocked_lease_expired": _fenced,
    "work.lease_revoked": _lease_revoked,
    "work.late_result_recorded": _late_result,
    "mission.child_created": _child_created,
    "work.child_approved": _verified,
    "work.child_failed": _child_failed,
}

ITEM_EVENT_TYPES = frozenset(_ITEM_FOLDERS)
GROUP_EVENT_TYPES = _META_TYPES


# --- checkpoint and outbox intents -------------------------------------------------


def _effects(
    prev: WorkRow | None, new: WorkRow, event: Event, me: str
) -> tuple[tuple[CheckpointRow, ...], tuple[OutboxRow, ...]]:
    etype = event["type"]
    body = event["body"]
    group, seq = event["group"], event["sequence"]
    checkpoints: tuple[CheckpointRow, ...] = ()
    if etype in ("work.checkpointed", "work.blocked") and isinstance(body.get("checkpoint_number"), int):
        checkpoints = (
            CheckpointRow(
                group_id=group, workitem=new.workitem, number=body["checkpoint_number"],
                ownership_epoch=new.ownership_epoch, lease_id=body.get("lease_id"), sequence=seq,
                occurred_at=event["occurred_at"], state=text(body.get("checkpoint")),
                progress=text(body.get("progress")), redacted=False,
            ),
        )  # fmt: skip
    outbox: list[OutboxRow] = []

    def intent(kind: str, payload: dict[str, Any]) -> None:
        outbox.append(OutboxRow(f"{group}/{seq}/{kind}", group, seq, kind, new.workitem, text(payload)))

    if etype == "work.offered" and me in (body.get("agents") or []):
        intent(
            "offer.respond",
            {"revision": new.revision, "contract_revision": new.contract_revision, "expires_at": new.offer_expires_at},
        )
    elif etype == "work.offer_accepted" and body.get("agent") == me:
        intent("schedule.disclose", {"ownership_epoch": new.ownership_epoch, "start_by": new.start_by})
    if (
        prev is not None
        and prev.owner == me
        and prev.lease_id is not None
        and new.lease_id is None
        and (etype == "work.lease_revoked" or event["actor"] != me)
    ):
        intent("work.stop", {"lease_id": prev.lease_id, "ownership_epoch": prev.ownership_epoch, "reason": etype})
    return checkpoints, tuple(outbox)


# --- snapshots ----------------------------------------------------------------------


def restore(
    document: dict[str, Any], state: dict[str, Any], *, me: str
) -> tuple[GroupMeta, list[WorkRow], list[CheckpointRow]]:
    """The rows of a verified snapshot (``missions/snapshots.py`` ``group_state``):
    the Group's row, its WorkItems' rows and each WorkItem's latest checkpoint.

    The snapshot carries each WorkItem's active lease, open offers, timers and
    latest checkpoint; what it does not carry is ``None``: the parent link,
    redactions before it, the child Mission's Group, an older snapshot's
    missing members.
    """
    group, sequence = document["group"], document["sequence"]
    mission: dict[str, Any] | None = state["mission"] if isinstance(state.get("mission"), dict) else None
    mine = next((m for m in state.get("memberships") or [] if isinstance(m, dict) and m.get("agent") == me), None)
    policy = state.get("priority_policy") if isinstance(state.get("priority_policy"), dict) else None
    meta = GroupMeta(
        group_id=group, kind=state.get("kind"), organization=document["organization"],
        revision=int(state.get("revision") or 0),
        mission=mission.get("id") if mission else None,
        mission_title=mission.get("title") if mission else None,
        mission_objective=mission.get("objective") if mission else None,
        mission_status=mission.get("status") if mission else None,
        mission_budgets=text(mission.get("budgets") or {}) if mission else None,
        mission_usage=text(mission.get("usage") or {}) if mission else None,
        parent_group=None, parent_workitem=None,
        # A removed member keeps its roles on the server's row; "my roles" are none then.
        my_roles=text(mine.get("roles") or [] if mine.get("active") else []) if mine else None,
        my_membership_epoch=mine.get("membership_epoch") if mine else None,
        my_active=bool(mine.get("active")) if mine else False,
        priority_policy=text(policy.get("policy")) if policy else None,
        policy_revision=policy.get("revision") if policy else None,
        server_snapshot_sequence=sequence, restored_snapshot_sequence=sequence, redacted=None, final_snapshot_at=None,
    )  # fmt: skip
    rows = []
    checkpoints = []
    for item in state.get("workitems") or []:
        lease = item.get("lease") if isinstance(item.get("lease"), dict) else None
        offers = item.get("offers")
        offers = [o for o in offers if isinstance(o, dict)] if isinstance(offers, list) else None
        needs_new_attempt = item.get("needs_new_attempt")
        row = WorkRow(
            group_id=group, workitem=item["id"], state=item["state"], revision=item["revision"],
            contract_revision=item["contract_revision"],
            accepted_contract_revision=item.get("accepted_contract_revision"),
            approved_contract_revision=item.get("approved_contract_revision"), execution_approved=False,
            owner=item.get("owner"), ownership_epoch=item.get("ownership_epoch", 0), start_by=item.get("start_by"),
            attempt=item.get("attempt", 0),
            needs_new_attempt=needs_new_attempt if isinstance(needs_new_attempt, bool) else None,
            retry_not_before=item.get("retry_not_before"),
            lease_id=lease.get("lease_id") if lease else None,
            lease_expires_at=lease.get("expires_at") if lease else None,
            checkpoint_count=item.get("checkpoint_count", 0),
            usage=text(item.get("usage") or {}),
            offered_to=text(sorted(str(o.get("agent")) for o in offers)) if offers is not None else None,
            offer_expires_at=max((str(o.get("expires_at")) for o in offers), default=None) if offers else None,
            child_mission=item.get("child_mission"), child_group=None,
            child_failure_policy=item.get("child_failure_policy"),
            resolution_required=None, late_results=0, updated_sequence=sequence,
            **_contract_columns(item.get("contract")),
        )  # fmt: skip
        # The snapshot's dependencies are the server's edges; they win over the contract's list.
        deps = item.get("dependencies")
        if isinstance(deps, list):
            row = replace(row, dependencies=text(sorted(deps, key=lambda d: str(d.get("workitem")))))
        rows.append(replace(row, execution_approved=_gate_open(row)))  # noqa: PERF401 (two steps read better)
        latest = item.get("latest_checkpoint")
        if isinstance(latest, dict) and isinstance(latest.get("number"), int):
            checkpoints.append(
                CheckpointRow(
                    group_id=group, workitem=item["id"], number=latest["number"],
                    ownership_epoch=int(latest.get("ownership_epoch") or 0), lease_id=latest.get("lease_id"),
                    # The Event's sequence is not in the snapshot; 0 matches no redaction.
                    sequence=0, occurred_at=str(latest.get("created_at") or ""),
                    state=text(latest.get("state")), progress=text(latest.get("progress")), redacted=False,
                )
            )  # fmt: skip
    rows.sort(key=lambda r: r.workitem)
    checkpoints.sort(key=lambda c: c.workitem)
    return meta, rows, checkpoints
