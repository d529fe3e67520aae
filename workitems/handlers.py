"""Handlers of the WorkItem commands (spec 10, 11.3-11.5; DESIGN §4a).

Every handler runs inside ``accept()`` with the Group row locked, then locks
the WorkItem row (Group first, then the aggregate: the one lock order of the
write path). Each begins with ``check_transition()`` against the table in
``state_machine.py`` (then lease-bound Commands check their fencing), then its
``check_*`` guards, then writes the rows and returns the Events.

Timing (DESIGN §6 settings): an owner must start within
``MWP_START_BY_SECONDS`` of acceptance or of a checkpoint; an Execution Lease
lasts ``MWP_LEASE_SECONDS`` unless renewed; a blocked owner keeps ownership
for ``MWP_BLOCKED_LEASE_SECONDS``.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, Prefetch

from missions.authority import (
    AggregateRef,
    Decision,
    Emit,
    GroupHead,
    HandlerContext,
    RefusedWithRecord,
    check_revision,
    check_target_kind,
    system_action_id,
)
from missions.guards import check_members, check_text, check_uuid, refuse
from missions.handlers import check_mission_budgets, found_mission
from missions.models import Approval, Membership, Mission
from missions.registry import command, membership_removed_hooks, session_replaced_hooks, snapshot_contributors
from mwportal.protocol import GENESIS_HASH, ErrorCode, ProtocolError, format_time, malformed, parse_time

from . import state_machine as sm
from .contract import check_contract, criteria_ids, is_material_change, requires_approval
from .guards import (
    DECLINE_REASONS,
    check_evidence_list,
    check_progress,
    check_selection_basis,
    check_usage,
)
from .models import BUDGET_DIMENSIONS, Checkpoint, ExecutionLease, Offer, Submission, WorkDependency, WorkItem
from .models import WorkProposal as Proposal
from .offline import OFFLINE_EXTENSION, USAGE_RECORDED, OfflineBinding, check_binding, parse_binding

COORDINATING = ("coordinator", "owner")
# Who executes under offers and leases: workers, and reviewers for the review
# WorkItems the review pipeline offers them (spec 13.2). The offer is the gate.
EXECUTING = ("worker", "reviewer")


# --- shared pieces -------------------------------------------------------------


def _seconds(name: str) -> timedelta:
    return timedelta(seconds=getattr(settings, name))


def item_ref(item: WorkItem) -> AggregateRef:
    return AggregateRef("workitem", str(item.id), item.revision)


def load_item(ctx: HandlerContext) -> WorkItem:
    """The target WorkItem, locked (after the Group row: the write path's lock order)."""
    env = ctx.envelope
    if env.target is None:
        raise malformed("target", f"{env.type} needs a workitem target")
    check_target_kind(env, "workitem")
    assert env.target is not None
    try:
        item = WorkItem.objects.select_for_update().get(id=env.target.id, group_id=ctx.group.id)
    except WorkItem.DoesNotExist:
        item = None
    if item is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"no WorkItem {env.target.id} in this Group",
            workitem=env.target.id,
            reason="not_found",
        )
    check_revision(env, item.revision)
    return item


# Every column a handler may change, except the contract: the Work Contract
# is the largest value of the row and changes only in work.offer.
_MUTABLE = [
    f.attname for f in WorkItem._meta.concrete_fields
    if f.name not in ("id", "group", "mission", "proposal", "contract", "created_at")
]  # fmt: skip


def save(item: WorkItem, now: datetime, *, bump: bool = True, contract: bool = False) -> None:
    """Write the WorkItem row (one UPDATE); ``contract=True`` also writes the contract."""
    if bump:
        item.revision += 1
    item.updated_at = now
    item.save(update_fields=[*_MUTABLE, "contract"] if contract else _MUTABLE)


def owner_is_live(item: WorkItem, now: datetime) -> bool:
    """An owner whose ownership lease (start-by, execution or blocked lease) is still running."""
    return item.owner_id is not None and item.owner_expires_at is not None and item.owner_expires_at > now


def active_lease(item: WorkItem) -> ExecutionLease | None:
    # Locked after the WorkItem row, per the lock order.
    return ExecutionLease.objects.select_for_update().filter(workitem=item, status="active").first()


def end_lease(lease: ExecutionLease | None, status: str, reason: str, now: datetime) -> None:
    if lease is None:
        return
    lease.status, lease.end_reason, lease.ended_at = status, reason, now
    lease.save(update_fields=["status", "end_reason", "ended_at"])


def withdraw_offers(item: WorkItem, now: datetime, *, except_agent: str | None = None) -> list[str]:
    offers = Offer.objects.filter(workitem=item, status="open")
    if except_agent is not None:
        offers = offers.exclude(agent_id=except_agent)
    withdrawn = sorted(str(a) for a in offers.values_list("agent_id", flat=True))
    offers.update(status="withdrawn", closed_at=now)
    return withdrawn


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_role(ctx: HandlerContext, roles: tuple[str, ...]) -> None:
    held = ctx.actor.membership_roles or frozenset()
    if not held & set(roles):
        raise refuse(ErrorCode.AUTH_FORBIDDEN, f"{ctx.envelope.type} needs the Group role {' or '.join(roles)}")


def check_lease(ctx: HandlerContext, item: WorkItem) -> ExecutionLease:
    """Fencing of lease-bound Commands (spec 11.3; MWP-WRK-013).

    The envelope must name the current Lease ID of an active lease held by the
    actor; an older Lease ID is WORK_LEASE_EXPIRED (reason ``stale_lease``)
    even under the same Ownership Epoch, a changed Ownership Epoch is
    WORK_STALE_OWNERSHIP, an elapsed lease is WORK_LEASE_EXPIRED (reason
    ``lease_expired``).
    """
    env = ctx.envelope
    if env.lease_id is None:
        raise malformed("lease_id", f"{env.type} must name the current Execution Lease")
    if env.ownership_epoch is not None and env.ownership_epoch != item.ownership_epoch:
        raise refuse(
            ErrorCode.WORK_STALE_OWNERSHIP,
            f"ownership_epoch {env.ownership_epoch} is not current ({item.ownership_epoch})",
            current=item.ownership_epoch,
        )
    lease = active_lease(item)
    if lease is None or str(lease.id) != env.lease_id or str(lease.agent_id) != ctx.actor.id:
        raise refuse(
            ErrorCode.WORK_LEASE_EXPIRED,
            f"lease {env.lease_id} is not the current Execution Lease",
            lease_id=env.lease_id,
            reason="stale_lease",
        )
    if lease.expires_at <= ctx.now:
        raise refuse(
            ErrorCode.WORK_LEASE_EXPIRED,
            f"lease {env.lease_id} expired at {format_time(lease.expires_at)}",
            reason="lease_expired",
        )
    return lease


def charge_usage(ctx: HandlerContext, item: WorkItem, usage: dict[str, float]) -> dict[str, Any]:
    """Record a usage delta against the WorkItem and its Mission (spec 11.4).

    An overflow of either budget is BUDGET_EXCEEDED, raised before anything is
    written, so the charge and the Command fail together.
    """
    if not usage:
        return {}
    budgets = item.contract["budgets"]
    new_item = {dim: item.usage.get(dim, 0) + usage.get(dim, 0) for dim in BUDGET_DIMENSIONS if
                item.usage.get(dim, 0) + usage.get(dim, 0)}  # fmt: skip
    for dim, total in new_item.items():
        limit = budgets.get(dim)
        if limit is not None and total > limit:
            raise refuse(
                ErrorCode.BUDGET_EXCEEDED,
                f"WorkItem budget {dim} would reach {total} of {limit}",
                dimension=dim,
                limit=limit,
                total=total,
            )
    mission = Mission.objects.get(id=item.mission_id)  # guarded by the Group lock
    new_mission = dict(mission.usage)
    for dim, value in usage.items():
        new_mission[dim] = new_mission.get(dim, 0) + value
        limit = mission.budgets.get(dim)
        if limit is not None and new_mission[dim] > limit:
            raise refuse(
                ErrorCode.BUDGET_EXCEEDED,
                f"Mission budget {dim} would reach {new_mission[dim]} of {limit}",
                dimension=dim,
                limit=limit,
                total=new_mission[dim],
            )
    item.usage = new_item
    Mission.objects.filter(id=mission.id).update(usage=new_mission)
    return {"delta": usage, "workitem_total": new_item}


def unmet_dependencies(item: WorkItem) -> list[str]:
    """Dependencies whose policy does not hold yet (spec 10.4)."""
    if not item.contract["dependencies"]:
        return []  # the contract names the edges; none, no query
    satisfied = {
        "verified": {sm.VERIFIED},
        "submitted": {sm.SUBMITTED, sm.VERIFIED},
        "terminal": {sm.VERIFIED, sm.FAILED, sm.CANCELLED},
    }
    return [
        str(dep.depends_on_id)
        for dep in WorkDependency.objects.filter(workitem=item).select_related("depends_on")
        if dep.depends_on.state not in satisfied[dep.policy]
    ]


def set_dependencies(item: WorkItem, contract: dict[str, Any], mission_id: Any) -> None:
    """Replace the WorkItem's edges in the Mission DAG; a cycle is
    INVALID_COMMAND, reason ``dependency_cycle`` (spec 10.4)."""
    wanted = {d["workitem"]: d["policy"] for d in contract["dependencies"]}
    if str(item.id) in wanted:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "a WorkItem cannot depend on itself",
            workitem=str(item.id),
            reason="dependency_cycle",
        )
    known = set(
        str(i) for i in WorkItem.objects.filter(mission_id=mission_id, id__in=list(wanted)).values_list("id", flat=True)
    )
    for i, dep in enumerate(contract["dependencies"]):
        if dep["workitem"] not in known:
            field = f"contract.dependencies.{i}.workitem"
            raise refuse(
                ErrorCode.INVALID_COMMAND,
                f"{field}: no WorkItem {dep['workitem']} in this Mission",
                field=field,
                reason="contract_invalid",
            )
    # Cycle check: walk the existing edges from each new dependency; reaching
    # this WorkItem again closes a cycle.
    edges: dict[str, set[str]] = {}
    for src, dst in WorkDependency.objects.filter(workitem__mission_id=mission_id).values_list(
        "workitem_id", "depends_on_id"
    ):
        edges.setdefault(str(src), set()).add(str(dst))
    edges[str(item.id)] = set(wanted)
    stack, seen = list(wanted), set()
    while stack:
        node = stack.pop()
        if node == str(item.id):
            raise refuse(
                ErrorCode.INVALID_COMMAND,
                "the dependencies would form a cycle",
                workitem=str(item.id),
                reason="dependency_cycle",
            )
        if node not in seen:
            seen.add(node)
            stack.extend(edges.get(node, ()))
    WorkDependency.objects.filter(workitem=item).delete()
    WorkDependency.objects.bulk_create(
        [WorkDependency(workitem=item, depends_on_id=dep, policy=policy) for dep, policy in wanted.items()]
    )


# --- proposal and authorization --------------------------------------------------


@command("work.propose")
def propose(ctx: HandlerContext) -> Decision:
    """Any member proposes work; no WorkItem exists yet (spec 10.2)."""
    check_members(ctx.body, ["proposal", "contract"])
    proposal_id = check_uuid(ctx.body, "proposal")
    contract = check_contract(ctx.body["contract"])
    if Proposal.objects.filter(id=proposal_id).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"proposal {proposal_id} exists")
    Proposal.objects.create(
        id=proposal_id, group_id=ctx.group.id, proposer_id=ctx.actor.id, contract=contract, created_at=ctx.now
    )
    ref = AggregateRef("proposal", proposal_id, 1)
    return Decision([Emit("work.proposed", ref, {"proposal": proposal_id, "contract": contract})], ref)


@command("work.authorize", group_roles=COORDINATING)
def authorize(ctx: HandlerContext) -> Decision:
    """A Coordinator creates the WorkItem with its Work Contract (state ``open``)."""
    check_members(ctx.body, ["workitem", "contract"], ["proposal"])
    sm.check_transition(None, "work.authorize")
    item_id = check_uuid(ctx.body, "workitem")
    contract = check_contract(ctx.body["contract"])
    proposal = None
    if ctx.body.get("proposal") is not None:
        proposal_id = check_uuid(ctx.body, "proposal")
        proposal = Proposal.objects.select_for_update().filter(id=proposal_id, group_id=ctx.group.id).first()
        if proposal is None:
            raise refuse(ErrorCode.INVALID_COMMAND, f"no proposal {proposal_id} in this Group", reason="not_found")
        if proposal.status != "open":
            raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"proposal {proposal_id} is already authorized")
    if WorkItem.objects.filter(id=item_id).exists():
        # WorkItem IDs are global, so a taken one must be refused wherever it
        # was taken; the answer is the same for one in this Group and one in a
        # Group the Coordinator cannot see, and names neither (issue 16 item 8:
        # "WorkItem ... exists" was an oracle on other Groups' items).
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            "body.workitem: this ID cannot be used; authorize with a new UUID",
            field="body.workitem",
        )
    mission = Mission.objects.get(group_id=ctx.group.id)
    if mission.status != "active":
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"the Mission is {mission.status}")
    contract = {**contract, "revision": 1}
    item = WorkItem.objects.create(
        id=item_id, group_id=ctx.group.id, mission=mission, proposal=proposal, state=sm.OPEN, contract=contract,
        created_at=ctx.now, updated_at=ctx.now,
    )  # fmt: skip
    if contract["dependencies"]:  # a new WorkItem has no edges to replace
        set_dependencies(item, contract, mission.id)
    if proposal is not None:
        proposal.status = "authorized"
        proposal.save(update_fields=["status"])
    body = {"workitem": item_id, "contract": contract, "proposal": str(proposal.id) if proposal else None}
    return Decision([Emit("work.authorized", item_ref(item), body)], item_ref(item))


# --- offers and ownership (spec 10.3) -------------------------------------------


@command("work.offer", group_roles=COORDINATING, cas=True)
def offer(ctx: HandlerContext) -> Decision:
    """Create or replace durable offers; they reserve nothing until accepted.

    One agent is a sequential offer; several form a bounded candidate set
    whose first valid acceptance wins. An expired owner is fenced first; a
    live one makes the offer INVALID_STATE_TRANSITION. A ``contract`` with a
    material change increments the contract revision (spec 10.1).
    """
    body = ctx.body
    check_members(body, ["agents", "expires_at", "selection_basis"], ["contract"])
    item = load_item(ctx)
    sm.check_transition(item.state, "work.offer")
    if owner_is_live(item, ctx.now):
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            "the WorkItem has a live owner; it cannot be offered",
            owner=str(item.owner_id),
        )
    agents = body["agents"]
    limit = settings.MWP_MAX_OFFER_CANDIDATES
    if not isinstance(agents, list) or not 1 <= len(agents) <= limit or len(set(map(str, agents))) != len(agents):
        raise malformed("body.agents", f"must list 1 to {limit} distinct agents")
    agents = [check_uuid({"a": a}, "a") for a in agents]
    members = {
        str(m.agent_id): m.roles
        for m in Membership.objects.filter(group_id=ctx.group.id, agent_id__in=agents, active=True)
    }
    for i, agent in enumerate(agents):
        if "worker" not in members.get(agent, []):
            raise malformed(f"body.agents.{i}", f"agent {agent} is not a worker member of this Group")
    expires_at = parse_time(body["expires_at"], "body.expires_at")
    if expires_at <= ctx.now:
        raise malformed("body.expires_at", "must be in the future")
    basis = check_selection_basis(body["selection_basis"])
    events: list[Emit] = []
    # Fence an expired owner before the new offer (spec 10.2, work.offer row).
    if item.owner_id is not None:
        fenced = str(item.owner_id)
        end_lease(active_lease(item), "expired", "ownership expired", ctx.now)
        item.owner, item.owner_expires_at, item.start_by = None, None, None
        item.revision += 1
        events.append(
            Emit("work.owner_fenced", item_ref(item), {"agent": fenced, "ownership_epoch": item.ownership_epoch})
        )
    contract_changed = False
    if body.get("contract") is not None:
        new = check_contract(body["contract"])
        if is_material_change(item.contract, new):
            item.contract_revision += 1
            item.accepted_contract_revision = None
            contract_changed = True
        item.contract = {**new, "revision": item.contract_revision}
        set_dependencies(item, item.contract, item.mission_id)
    withdraw_offers(item, ctx.now)
    Offer.objects.bulk_create([
        Offer(workitem=item, agent_id=a, contract_revision=item.contract_revision, selection_basis=basis,
              created_at=ctx.now, expires_at=expires_at)
        for a in agents
    ])  # fmt: skip
    item.state = sm.OFFERED
    save(item, ctx.now, contract=True)
    offered: dict[str, Any] = {
        "agents": agents,
        "expires_at": format_time(expires_at),
        "selection_basis": basis,
        "contract_revision": item.contract_revision,
    }
    if body.get("contract") is not None:
        offered["contract"] = item.contract
        offered["contract_changed"] = contract_changed
    events.append(Emit("work.offered", item_ref(item), offered))
    return Decision(events, item_ref(item))


def _my_open_offer(ctx: HandlerContext, item: WorkItem) -> Offer:
    offer_row = Offer.objects.select_for_update().filter(workitem=item, agent_id=ctx.actor.id, status="open").first()
    if offer_row is None:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "there is no open offer of this WorkItem to you")
    return offer_row


@command("work.accept_offer", group_roles=EXECUTING, cas=True)
def accept_offer(ctx: HandlerContext) -> Decision:
    """The first valid acceptance wins a new Ownership Epoch; every other offer
    is withdrawn in the same transaction (spec 10.3). Compare-and-set on the
    WorkItem revision makes concurrent acceptances of a candidate set pick
    exactly one winner (MWP-EVT-007)."""
    check_members(ctx.body, [])
    item = load_item(ctx)
    sm.check_transition(item.state, "work.accept_offer")
    mine = _my_open_offer(ctx, item)
    if mine.expires_at <= ctx.now:
        raise refuse(ErrorCode.WORK_OFFER_EXPIRED, f"the offer expired at {format_time(mine.expires_at)}")
    if mine.contract_revision != item.contract_revision:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "the offer is for an older contract revision")
    mine.status, mine.closed_at = "accepted", ctx.now
    mine.save(update_fields=["status", "closed_at"])
    withdrawn = withdraw_offers(item, ctx.now)
    item.ownership_epoch += 1
    item.owner_id = ctx.actor.id
    item.start_by = ctx.now + _seconds("MWP_START_BY_SECONDS")
    item.owner_expires_at = item.start_by
    item.accepted_contract_revision = item.contract_revision
    item.selection_basis = mine.selection_basis
    item.state = sm.QUEUED
    save(item, ctx.now)
    body = {
        "agent": ctx.actor.id,
        "ownership_epoch": item.ownership_epoch,
        "start_by": format_time(item.start_by),
        "contract_revision": item.contract_revision,
        "selection_basis": mine.selection_basis,
        "withdrawn": withdrawn,
    }
    return Decision([Emit("work.offer_accepted", item_ref(item), body)], item_ref(item))


@command("work.decline_offer", group_roles=EXECUTING)
def decline_offer(ctx: HandlerContext) -> Decision:
    """A structured decline (spec 10.3). It changes only the offer, so the
    WorkItem revision stays and other candidates' compare-and-set still holds."""
    check_members(ctx.body, ["reason"], ["detail"])
    item = load_item(ctx)
    sm.check_transition(item.state, "work.decline_offer")
    if ctx.body["reason"] not in DECLINE_REASONS:
        raise malformed("body.reason", f"must be one of {', '.join(DECLINE_REASONS)}")
    detail = ctx.body.get("detail") or ""
    if not isinstance(detail, str) or len(detail) > 2000:
        raise malformed("body.detail", "must be a string of at most 2000 characters")
    mine = _my_open_offer(ctx, item)
    mine.status, mine.closed_at = "declined", ctx.now
    mine.decline_reason, mine.decline_detail = ctx.body["reason"], detail
    mine.save()
    body = {"agent": ctx.actor.id, "reason": ctx.body["reason"], "detail": detail}
    return Decision([Emit("work.offer_declined", item_ref(item), body)], item_ref(item))


@command("work.raise_ambiguity", group_roles=EXECUTING)
def raise_ambiguity(ctx: HandlerContext) -> Decision:
    """An offered Worker raises an essential ambiguity in the WorkItem
    Conversation before acceptance (spec 10.1). Its offer closes, so it
    cannot accept the WorkItem as it stands; the Coordinator answers with a
    new ``work.offer`` carrying the corrected contract (a material revision
    needs renewed acceptance) or authorizes a replacement WorkItem. Like a
    decline it changes only the offer: the WorkItem revision stays."""
    check_members(ctx.body, ["questions"], ["fields"])
    item = load_item(ctx)
    sm.check_transition(item.state, "work.raise_ambiguity")
    questions = ctx.body["questions"]
    if (
        not isinstance(questions, list)
        or not 1 <= len(questions) <= 20
        or not all(isinstance(q, str) and 0 < len(q) <= 2000 for q in questions)
    ):
        raise malformed("body.questions", "must be 1 to 20 non-empty strings of at most 2000 characters")
    fields = ctx.body.get("fields") or []
    known = set(item.contract)
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise malformed("body.fields", "must be a list of Work Contract member names")
    for i, name in enumerate(fields):
        if name.split(".", 1)[0] not in known:
            raise malformed(f"body.fields.{i}", f"{name!r} is not a member of the Work Contract")
    mine = _my_open_offer(ctx, item)
    mine.status, mine.closed_at = "declined", ctx.now
    mine.decline_reason, mine.decline_detail = "ambiguity", "\n".join(questions)[:2000]
    mine.save()
    body = {"agent": ctx.actor.id, "contract_revision": item.contract_revision, "questions": questions,
            "fields": fields}  # fmt: skip
    return Decision([Emit("work.ambiguity_raised", item_ref(item), body)], item_ref(item))


@command("approval.grant_execution", group_roles=("owner",), cas=True)
def grant_execution(ctx: HandlerContext) -> Decision:
    """The MissionOwner's execution Approval: satisfies the start gate of a
    contract whose risk requires it, for the current contract revision."""
    check_members(ctx.body, [], ["note"])
    note = ctx.body.get("note") or ""
    if not isinstance(note, str) or len(note) > 2000:
        raise malformed("body.note", "must be a string of at most 2000 characters")
    item = load_item(ctx)
    sm.check_transition(item.state, "approval.grant_execution")
    if not requires_approval(item.contract):
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "this contract requires no execution Approval")
    if item.approved_contract_revision == item.contract_revision:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "execution is already approved for this contract revision")
    item.approved_contract_revision = item.contract_revision
    save(item, ctx.now)
    Approval.objects.create(
        group_id=ctx.group.id,
        kind=Approval.KIND_EXECUTION,
        subject_kind="workitem",
        subject_id=str(item.id),
        subject_revision=item.contract_revision,
        granted_by_id=ctx.actor.id,
        note=note,
        granted_at=ctx.now,
    )
    body = {"workitem": str(item.id), "contract_revision": item.contract_revision, "note": note}
    return Decision([Emit("approval.execution_granted", item_ref(item), body)], item_ref(item))


# --- execution under leases (spec 11.3) ------------------------------------------


def _issue_token(lease: ExecutionLease) -> dict[str, Any]:
    """A capability token bound to the lease, expiring with it; only its hash is kept."""
    token = secrets.token_urlsafe(32)
    lease.token_hash = token_digest(token)
    lease.token_expires_at = lease.expires_at
    return {
        "lease_id": str(lease.id),
        "lease_expires_at": format_time(lease.expires_at),
        "capability_token": token,
        "capability_token_expires_at": format_time(lease.token_expires_at),
    }


def check_retry_allowed(item: WorkItem, now: datetime) -> None:
    """A new attempt stays within the contract's attempts, deadline and cost (spec 11.4)."""
    retry = item.contract["retry"]
    if item.attempt >= retry["max_attempts"]:
        raise refuse(ErrorCode.BUDGET_EXCEEDED, f"all {retry['max_attempts']} attempts are used", dimension="attempts")
    if retry["deadline"] is not None and parse_time(retry["deadline"], "retry.deadline") <= now:
        raise refuse(ErrorCode.BUDGET_EXCEEDED, "the retry deadline has passed", dimension="retry_deadline")
    if retry["max_cost"] is not None and item.usage.get("financial", 0) >= retry["max_cost"]:
        raise refuse(ErrorCode.BUDGET_EXCEEDED, "the retry cost limit is reached", dimension="max_cost")


@command("work.start", group_roles=EXECUTING, cas=True)
def start(ctx: HandlerContext) -> Decision:
    """Start under a new Execution Lease bound to Agent, Session Epoch,
    WorkItem and Ownership Epoch (MWP-WRK-013). The capability token is in the
    receipt's ``grants`` only, never in the Event."""
    check_members(ctx.body, [])
    item = load_item(ctx)
    env = ctx.envelope
    if env.ownership_epoch is None:
        raise malformed("ownership_epoch", "work.start must name the Ownership Epoch")
    sm.check_transition(item.state, "work.start")
    if env.ownership_epoch != item.ownership_epoch or str(item.owner_id) != ctx.actor.id:
        raise refuse(
            ErrorCode.WORK_STALE_OWNERSHIP,
            "the actor does not own this WorkItem under that Ownership Epoch",
            current=item.ownership_epoch,
        )
    if not owner_is_live(item, ctx.now):
        raise refuse(
            ErrorCode.WORK_LEASE_EXPIRED,
            "the start-by deadline has passed; ownership has lapsed",
            reason="lease_expired",
        )
    if item.accepted_contract_revision != item.contract_revision:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "the contract changed; it needs renewed acceptance")
    if requires_approval(item.contract) and item.approved_contract_revision != item.contract_revision:
        raise refuse(ErrorCode.APPROVAL_REQUIRED, "this contract needs an execution Approval before it starts")
    unmet = unmet_dependencies(item)
    if unmet:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            "dependencies do not satisfy their policy yet",
            workitems=unmet,
            reason="dependency_unmet",
        )
    if item.needs_new_attempt:
        check_retry_allowed(item, ctx.now)
        if item.retry_not_before is not None and item.retry_not_before > ctx.now:
            raise refuse(
                ErrorCode.INVALID_STATE_TRANSITION,
                f"backing off until {format_time(item.retry_not_before)} before the next attempt",
                retry_not_before=format_time(item.retry_not_before),
            )
        item.attempt += 1
        item.needs_new_attempt = False
    lease = ExecutionLease(
        id=uuid.uuid4(), workitem=item, agent_id=ctx.actor.id, session_epoch=ctx.actor.session_epoch,
        ownership_epoch=item.ownership_epoch, started_at=ctx.now,
        expires_at=ctx.now + _seconds("MWP_LEASE_SECONDS"),
    )  # fmt: skip
    grants = _issue_token(lease)
    lease.save(force_insert=True)  # a new Lease ID: INSERT, never an UPDATE first
    item.state = sm.ACTIVE
    item.owner_expires_at = lease.expires_at
    save(item, ctx.now)
    body = {
        "agent": ctx.actor.id,
        "lease_id": str(lease.id),
        "ownership_epoch": item.ownership_epoch,
        "session_epoch": lease.session_epoch,
        "lease_expires_at": format_time(lease.expires_at),
        "attempt": item.attempt,
    }
    return Decision([Emit("work.started", item_ref(item), body)], item_ref(item), grants=grants)


@command("work.renew_lease", group_roles=EXECUTING)
def renew_lease(ctx: HandlerContext) -> Decision:
    """Extend the current lease (compare-and-set on its Lease ID) and rotate
    its capability token, which again expires with the lease."""
    check_members(ctx.body, [])
    item = load_item(ctx)
    sm.check_transition(item.state, "work.renew_lease")
    lease = check_lease(ctx, item)
    lease.expires_at = ctx.now + _seconds("MWP_LEASE_SECONDS")
    lease.renewals = [*lease.renewals, {"at": format_time(ctx.now), "expires_at": format_time(lease.expires_at)}]
    grants = _issue_token(lease)
    lease.save()
    item.owner_expires_at = lease.expires_at
    save(item, ctx.now, bump=False)
    body = {
        "lease_id": str(lease.id),
        "lease_expires_at": format_time(lease.expires_at),
        "renewal": len(lease.renewals),
    }
    return Decision([Emit("work.lease_renewed", item_ref(item), body)], item_ref(item), grants=grants)


def _release_with_checkpoint(
    ctx: HandlerContext, item: WorkItem, lease: ExecutionLease, reason: str, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Checkpoint, charge usage and release the lease (checkpoint and block)."""
    body = _record_checkpoint(ctx, item, lease, extra)
    end_lease(lease, "released", reason, ctx.now)
    return body


def _record_checkpoint(
    ctx: HandlerContext, item: WorkItem, lease: ExecutionLease, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The checkpoint row and the usage it charges; the Event body."""
    check_members(ctx.body, ["checkpoint", "progress"], ("usage", *extra))
    state = ctx.body["checkpoint"]
    if not isinstance(state, dict):
        raise malformed("body.checkpoint", "must be an object")
    progress = check_progress(ctx.body["progress"])
    usage = charge_usage(ctx, item, check_usage(ctx.body.get("usage")))
    item.checkpoint_count += 1
    Checkpoint.objects.create(
        workitem=item,
        lease=lease,
        ownership_epoch=item.ownership_epoch,
        number=item.checkpoint_count,
        state=state,
        progress=progress,
        created_at=ctx.now,
    )
    return {
        "lease_id": str(lease.id),
        "checkpoint_number": item.checkpoint_count,
        "checkpoint": state,
        "progress": progress,
        "usage": usage,
    }


@command("work.checkpoint", group_roles=EXECUTING, extensions=(OFFLINE_EXTENSION,))
def checkpoint(ctx: HandlerContext) -> Decision:
    """Durable progress releases execution while the owner keeps a bounded
    ownership lease (spec 10.2): the WorkItem returns to ``queued``.

    A checkpoint buffered offline carries the bounded-offline-execution
    binding and is reconciled against its historical lease (``offline.py``).
    """
    item = load_item(ctx)
    binding = parse_binding(ctx.envelope.extensions)
    if binding is not None:
        return _reconcile_offline_checkpoint(ctx, item, binding)
    sm.check_transition(item.state, "work.checkpoint")
    lease = check_lease(ctx, item)
    body = _release_with_checkpoint(ctx, item, lease, "checkpoint")
    return Decision([_checkpointed(ctx, item, body)], item_ref(item))


def _checkpointed(ctx: HandlerContext, item: WorkItem, body: dict[str, Any]) -> Emit:
    """Back to ``queued`` under a fresh start-by deadline; the Event."""
    item.state = sm.QUEUED
    item.start_by = ctx.now + _seconds("MWP_START_BY_SECONDS")
    item.owner_expires_at = item.start_by
    save(item, ctx.now)
    # The Event carries every timer it sets, so a Worker's projection knows them.
    body["start_by"] = format_time(item.start_by)
    return Emit("work.checkpointed", item_ref(item), body)


def _reconcile_offline_checkpoint(ctx: HandlerContext, item: WorkItem, binding: OfflineBinding) -> Decision:
    """Spec 11.5 (MWP-WRK-021/022): the offline usage is charged with its own
    Event naming both sessions, then the checkpoint applies, in this one
    transaction; a budget overflow refuses both."""
    lease = check_binding(ctx, item, binding)
    if "usage" in ctx.body:
        raise malformed("body.usage", "offline usage travels in the binding's usage_delta")
    if lease.status == "active":
        sm.check_transition(item.state, "work.checkpoint")
    elif item.state != sm.QUEUED:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"a {item.state} WorkItem takes no buffered progress")
    usage = charge_usage(ctx, item, binding.usage_delta)
    usage_body: dict[str, Any] | None = None
    if usage:
        mission_usage = Mission.objects.filter(id=item.mission_id).values_list("usage", flat=True).get()
        usage_body = {
            "workitem": str(item.id), "historical": binding.historical(),
            "reconciliation": {"session_epoch": ctx.envelope.session_epoch}, "disconnected_at":
            format_time(binding.disconnected_at), "buffered_at": format_time(binding.buffered_at),
            "delta": usage["delta"], "workitem_total": usage["workitem_total"], "mission_total": mission_usage,
        }  # fmt: skip
    offline = {"offline": {**binding.historical(), "buffered_at": format_time(binding.buffered_at)}}
    if lease.status == "active":
        # Still the current lease (the disconnection was short): an ordinary
        # checkpoint that releases it.
        body = {**_release_with_checkpoint(ctx, item, lease, "checkpoint"), **offline}
        checkpointed = _checkpointed(ctx, item, body)
    else:
        # The lease ended after the progress was buffered (expired, or revoked
        # by the new session): the checkpoint is recorded for whoever resumes;
        # the WorkItem stays queued under its current deadlines.
        body = {**_record_checkpoint(ctx, item, lease), **offline}
        save(item, ctx.now)
        checkpointed = Emit("work.checkpointed", item_ref(item), body)
    # The charge comes first in the log, then the progress it paid for.
    emits = [Emit(USAGE_RECORDED, item_ref(item), usage_body)] if usage_body is not None else []
    return Decision([*emits, checkpointed], item_ref(item))


@command("work.block", group_roles=EXECUTING)
def block(ctx: HandlerContext) -> Decision:
    """Checkpoint, record the required resolution, release the lease; the
    owner keeps a bounded blocked lease (spec 11.4; MWP-WRK-017)."""
    item = load_item(ctx)
    sm.check_transition(item.state, "work.block")
    lease = check_lease(ctx, item)
    body = _release_with_checkpoint(ctx, item, lease, "blocked", ("resolution_required",))
    if "resolution_required" not in ctx.body:
        raise malformed("body.resolution_required", "is required")
    body["resolution_required"] = check_text(ctx.body, "resolution_required", max_length=5000)
    item.state = sm.BLOCKED
    item.owner_expires_at = ctx.now + _seconds("MWP_BLOCKED_LEASE_SECONDS")
    save(item, ctx.now)
    body["owner_expires_at"] = format_time(item.owner_expires_at)
    return Decision([Emit("work.blocked", item_ref(item), body)], item_ref(item))


@command("work.unblock", group_roles=COORDINATING, cas=True)
def unblock(ctx: HandlerContext) -> Decision:
    """Resolve a blocker: back to the owner's queue, or ``open`` for a new
    offer when the blocked lease has run out (spec 10.2)."""
    check_members(ctx.body, ["resolution"])
    resolution = check_text(ctx.body, "resolution", max_length=5000)
    item = load_item(ctx)
    sm.check_transition(item.state, "work.unblock")
    if item.child_mission_id is not None:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "the WorkItem waits for its child Mission")
    if owner_is_live(item, ctx.now):
        item.state = sm.QUEUED
        item.start_by = ctx.now + _seconds("MWP_START_BY_SECONDS")
        item.owner_expires_at = item.start_by
    else:
        item.state = sm.OPEN
        item.owner, item.owner_expires_at, item.start_by = None, None, None
    save(item, ctx.now)
    body = {"resolution": resolution, "state": item.state,
            "start_by": format_time(item.start_by) if item.start_by else None}  # fmt: skip
    return Decision([Emit("work.unblocked", item_ref(item), body)], item_ref(item))


def _late_result_record(ctx: HandlerContext, item: WorkItem, error: ProtocolError) -> RefusedWithRecord | None:
    """A fenced former owner's submission is refused, but kept as
    non-authoritative Evidence (spec 11.5; MWP-WRK-019)."""
    env = ctx.envelope
    if (
        env.lease_id is None
        or not ExecutionLease.objects.filter(id=env.lease_id, workitem=item, agent_id=ctx.actor.id).exists()
    ):
        return None
    from missions.commands import system_command

    record = system_command(
        "work.record_late_result", ctx.group.id,
        {"workitem": str(item.id), "agent": ctx.actor.id, "lease_id": env.lease_id,
         "ownership_epoch": env.ownership_epoch, "artifacts": env.body.get("artifacts", []),
         "evidence": env.body.get("evidence", []), "refused": str(error.code)},
        action_id=system_action_id("late-result", env.actor, env.action_id), issued_at=env.issued_at,
    )  # fmt: skip
    return RefusedWithRecord(error, record)


@command("work.submit", group_roles=EXECUTING)
def submit(ctx: HandlerContext) -> Decision:
    """Artifacts and Evidence mapped to every acceptance criterion (spec 13.2)."""
    item = load_item(ctx)
    try:
        sm.check_transition(item.state, "work.submit")
        lease = check_lease(ctx, item)
    except ProtocolError as error:
        late = _late_result_record(ctx, item, error)
        if late is not None:
            raise late from None
        raise
    check_members(ctx.body, ["artifacts", "evidence"], ["usage"])
    artifacts, evidence = check_submission(ctx.body, item)
    usage = charge_usage(ctx, item, check_usage(ctx.body.get("usage")))
    end_lease(lease, "released", "submitted", ctx.now)
    submission = Submission.objects.create(
        workitem=item,
        agent_id=ctx.actor.id,
        ownership_epoch=item.ownership_epoch,
        lease_id=lease.id,
        artifacts=artifacts,
        evidence=evidence,
        authoritative=True,
        created_at=ctx.now,
    )
    item.state = sm.SUBMITTED
    item.owner_expires_at = None
    save(item, ctx.now)
    from artifacts.handlers import record_evidence
    from artifacts.review import review_after_commit

    record_evidence(ctx, item, evidence, "submission", submission=submission)
    # The review pipeline (spec 13.2) reads the Artifacts' bytes: slow I/O,
    # so it runs after commit and records its results through accept().
    review_after_commit(str(item.id))
    body = {"lease_id": str(lease.id), "artifacts": artifacts, "evidence": evidence, "usage": usage}
    return Decision([Emit("work.submitted", item_ref(item), body)], item_ref(item))


def check_submission(body: dict[str, Any], item: WorkItem) -> tuple[list[str], list[dict[str, Any]]]:
    from artifacts.handlers import in_group
    from artifacts.store import check_sha256, missing_blobs

    artifacts = body["artifacts"]
    if not isinstance(artifacts, list):
        raise malformed("body.artifacts", "must be a list of SHA-256 hashes")
    for i, sha in enumerate(artifacts):
        check_sha256(sha, f"body.artifacts.{i}")
    evidence = check_evidence_list(body["evidence"], "body.evidence", required=True)
    known = criteria_ids(item.contract)
    for i, record in enumerate(evidence):
        for c in record["criteria"]:
            if c not in known:
                raise malformed(f"body.evidence.{i}.criteria", f"{c!r} is not an acceptance criterion of the contract")
    covered = {c for record in evidence for c in record["criteria"]}
    missing = [c for c in known if c not in covered]
    if missing:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            f"no Evidence for acceptance criteria {', '.join(missing)}",
            criteria=missing,
            reason="evidence_required",
        )
    cited = sorted({sha for record in evidence for sha in record["artifacts"]} | set(artifacts))
    # In the store, and held by this Group: another Mission's content never
    # enters this one by default (spec 13.3).
    absent = sorted(set(missing_blobs(cited)) | (set(cited) - in_group(str(item.group_id), cited))) if cited else []
    if absent:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"Artifacts not held by this Group: {', '.join(absent)}",
            artifacts=absent,
            reason="not_found",
        )
    return artifacts, evidence


@command("work.record_late_result", actors=("system",))
def record_late_result(ctx: HandlerContext) -> Decision:
    """Keep a fenced owner's late result for audit; it never completes the WorkItem."""
    body = ctx.body
    item = WorkItem.objects.select_for_update().get(id=body["workitem"], group_id=ctx.group.id)
    artifacts = [a for a in body.get("artifacts") or [] if isinstance(a, str)]
    evidence = body.get("evidence") if isinstance(body.get("evidence"), list) else []
    Submission.objects.create(
        workitem=item,
        agent_id=body["agent"],
        ownership_epoch=body.get("ownership_epoch") or 0,
        lease_id=body["lease_id"],
        artifacts=artifacts,
        evidence=evidence,
        authoritative=False,
        created_at=ctx.now,
    )
    event = {
        "agent": body["agent"],
        "lease_id": body["lease_id"],
        "artifacts": artifacts,
        "evidence": evidence,
        "refused": body["refused"],
        "authoritative": False,
    }
    return Decision([Emit("work.late_result_recorded", item_ref(item), event)], item_ref(item))


@command("work.accept_result", group_roles=COORDINATING, cas=True)
def accept_result(ctx: HandlerContext) -> Decision:
    """Coordinator review succeeds: ``verified`` (terminal for this revision)."""
    check_members(ctx.body, ["evidence"])
    item = load_item(ctx)
    sm.check_transition(item.state, "work.accept_result")
    evidence = check_evidence_list(ctx.body["evidence"], "body.evidence", required=True)
    item.state = sm.VERIFIED
    save(item, ctx.now)
    from artifacts.handlers import record_evidence

    record_evidence(ctx, item, evidence, "coordinator")
    return Decision([Emit("work.result_accepted", item_ref(item), {"evidence": evidence})], item_ref(item))


def _end(item: WorkItem, state: str, now: datetime, reason: str) -> None:
    """Fail or cancel: revoke the lease, withdraw offers, return control to the Coordinator."""
    end_lease(active_lease(item), "revoked", reason, now)
    withdraw_offers(item, now)
    item.state = state
    item.owner, item.owner_expires_at, item.start_by = None, None, None
    # A failed or cancelled WorkItem no longer waits for a child Mission; a
    # later outcome of that child finds no link and changes nothing here.
    item.child_mission = None


@command("work.fail")
def fail(ctx: HandlerContext) -> Decision:
    """Failure with Evidence: by a Coordinator, or by the lease holder.

    A lease holder may mark the failure ``retryable``; while the contract's
    attempts, deadline and cost allow (spec 11.4), the execution ends and the
    WorkItem waits in its queue for the next attempt after the backoff.
    Exhaustion ends in ``work.failed`` with the Evidence.
    """
    check_members(ctx.body, ["evidence"], ["retryable"])
    item = load_item(ctx)
    worker = ctx.envelope.lease_id is not None
    sm.check_transition(item.state, "work.fail")
    if worker:
        check_lease(ctx, item)
    else:
        check_role(ctx, COORDINATING)
        if ctx.envelope.target is None or ctx.envelope.target.revision is None:
            raise malformed("target.revision", "a Coordinator's work.fail is compare-and-set")
    evidence = check_evidence_list(ctx.body["evidence"], "body.evidence", required=True)
    retryable = ctx.body.get("retryable", False)
    if not isinstance(retryable, bool):
        raise malformed("body.retryable", "must be true or false")
    body: dict[str, Any] = {"evidence": evidence, "attempt": item.attempt}
    if worker and retryable:
        try:
            check_retry_allowed(item, ctx.now)
        except ProtocolError as exhausted:
            body["reason"] = f"retries exhausted: {exhausted.message}"
        else:
            return _schedule_retry(ctx, item, evidence, "failure reported")
    _end(item, sm.FAILED, ctx.now, "failure")
    save(item, ctx.now)
    from artifacts.handlers import record_evidence

    record_evidence(ctx, item, evidence, "failure")
    return Decision([Emit("work.failed", item_ref(item), body)], item_ref(item))


def _backoff(item: WorkItem) -> timedelta:
    retry = item.contract["retry"]
    return timedelta(seconds=retry["backoff_seconds"] * retry["backoff_multiplier"] ** max(item.attempt - 1, 0))


def _schedule_retry(ctx: HandlerContext, item: WorkItem, evidence: list[Any], reason: str) -> Decision:
    sm.check_transition(item.state, "work.retry")
    end_lease(active_lease(item), "revoked", reason, ctx.now)
    item.state = sm.QUEUED
    item.needs_new_attempt = True
    item.retry_not_before = ctx.now + _backoff(item)
    item.start_by = item.retry_not_before + _seconds("MWP_START_BY_SECONDS")
    item.owner_expires_at = item.start_by
    save(item, ctx.now)
    body = {
        "evidence": evidence,
        "attempt": item.attempt,
        "retry_not_before": format_time(item.retry_not_before),
        "start_by": format_time(item.start_by),
        "reason": reason,
    }
    from artifacts.handlers import record_evidence

    record_evidence(ctx, item, evidence, "failure")
    return Decision([Emit("work.attempt_failed", item_ref(item), body)], item_ref(item))


@command("work.cancel", group_roles=COORDINATING, cas=True)
def cancel(ctx: HandlerContext) -> Decision:
    check_members(ctx.body, ["reason"])
    reason = check_text(ctx.body, "reason", max_length=2000)
    item = load_item(ctx)
    sm.check_transition(item.state, "work.cancel")
    _end(item, sm.CANCELLED, ctx.now, "cancelled")
    save(item, ctx.now)
    return Decision([Emit("work.cancelled", item_ref(item), {"reason": reason})], item_ref(item))


# --- expiry: system Commands issued by Celery beat (workitems/tasks.py) --------


def _system_item(ctx: HandlerContext) -> WorkItem:
    check_members(ctx.body, ["workitem", "ownership_epoch"], ["lease_id"])
    item = WorkItem.objects.select_for_update().filter(id=ctx.body["workitem"], group_id=ctx.group.id).first()
    if item is None:
        raise refuse(ErrorCode.INVALID_COMMAND, "no such WorkItem", reason="not_found")
    if item.ownership_epoch != ctx.body["ownership_epoch"]:
        raise refuse(ErrorCode.WORK_STALE_OWNERSHIP, "the WorkItem changed owner since the expiry was observed")
    return item


def _system_evidence(ctx: HandlerContext, item: WorkItem, summary: str) -> dict[str, Any]:
    return {
        "subject": str(item.id),
        "criteria": criteria_ids(item.contract),
        "method": "other",
        "result": "fail",
        "producer": str(item.owner_id or item.group_id),
        "timestamp": format_time(ctx.now),
        "artifacts": [],
        "summary": summary,
    }


@command("work.expire_lease", actors=("system",))
def expire_lease(ctx: HandlerContext) -> Decision:
    """The Execution Lease timed out (spec 11.3): it expires, and the WorkItem
    returns to its queue for another attempt within the retry budget, or
    fails with Evidence when the budget is exhausted (spec 11.4)."""
    item = _system_item(ctx)
    lease = active_lease(item)
    if lease is None or str(lease.id) != ctx.body.get("lease_id") or lease.expires_at > ctx.now:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "the lease is no longer active and past its expiry")
    sm.check_transition(item.state, "expire.lease")
    end_lease(lease, "expired", "lease timeout", ctx.now)
    try:
        check_retry_allowed(item, ctx.now)
    except ProtocolError as exhausted:
        _end(item, sm.FAILED, ctx.now, "lease timeout")
        save(item, ctx.now)
        evidence = [_system_evidence(ctx, item, f"lease expired; {exhausted.message}")]
        from artifacts.handlers import record_evidence

        record_evidence(ctx, item, evidence, "failure")
        return Decision(
            [
                Emit(
                    "work.failed",
                    item_ref(item),
                    {"evidence": evidence, "attempt": item.attempt, "reason": "retries exhausted"},
                )
            ],
            item_ref(item),
        )
    item.state = sm.QUEUED
    item.needs_new_attempt = True
    item.retry_not_before = ctx.now + _backoff(item)
    item.start_by = item.retry_not_before + _seconds("MWP_START_BY_SECONDS")
    item.owner_expires_at = item.start_by
    save(item, ctx.now)
    body = {
        "lease_id": str(lease.id),
        "ownership_epoch": item.ownership_epoch,
        "attempt": item.attempt,
        "start_by": format_time(item.start_by),
        "retry_not_before": format_time(item.retry_not_before),
    }
    return Decision([Emit("work.lease_expired", item_ref(item), body)], item_ref(item))


def _fence_lapsed_owner(ctx: HandlerContext, transition: str, event: str, what: str) -> Decision:
    """The owner's bounded ownership lease ran out: fence it (no owner)."""
    item = _system_item(ctx)
    sm.check_transition(item.state, transition)
    if item.owner_id is None or item.owner_expires_at is None or item.owner_expires_at > ctx.now:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"the {what} has not passed")
    body = _fence_owner(item)
    save(item, ctx.now)
    return Decision([Emit(event, item_ref(item), body)], item_ref(item))


def _fence_owner(item: WorkItem) -> dict[str, Any]:
    """End the owner's ownership (no owner, no deadlines); the Event body."""
    body = {"agent": str(item.owner_id), "ownership_epoch": item.ownership_epoch}
    item.owner, item.owner_expires_at, item.start_by = None, None, None
    return body


def _revoke_lease(item: WorkItem, lease: ExecutionLease, reason: str, now: datetime) -> dict[str, Any]:
    """Revoke the active lease; the WorkItem waits in its queue for a new
    attempt (MWP-WRK-014). The ``work.lease_revoked`` body, without timers."""
    sm.check_transition(item.state, "lease.revoke")
    end_lease(lease, "revoked", reason, now)
    item.state = sm.QUEUED
    item.needs_new_attempt = True
    return {"lease_id": str(lease.id), "agent": str(lease.agent_id), "reason": reason}


@command("work.expire_start_by", actors=("system",))
def expire_start_by(ctx: HandlerContext) -> Decision:
    """The owner missed its start-by deadline: it is fenced (no owner), and the
    Coordinator may re-offer under a higher Ownership Epoch (spec 11.5)."""
    return _fence_lapsed_owner(ctx, "expire.start_by", "work.start_deadline_missed", "start-by deadline")


@command("work.expire_blocked_lease", actors=("system",))
def expire_blocked_lease(ctx: HandlerContext) -> Decision:
    """The bounded blocked lease ran out: the owner is fenced; an unblock then
    re-opens the WorkItem for a new offer (spec 10.2)."""
    return _fence_lapsed_owner(ctx, "expire.blocked_lease", "work.blocked_lease_expired", "blocked lease")


# --- session replacement (MWP-WRK-014) --------------------------------------------


def revoke_leases_of_replaced_session(ctx: HandlerContext) -> list[tuple[GroupHead, list[Emit]]]:
    """A replacement Agent Session revokes the Agent's active leases and returns
    the WorkItems to ``queued`` before the new runtime may start them again.

    Runs inside ``agent.open_session``: other Groups are locked in ascending
    id order after the administrative Group.
    """
    leases = list(
        ExecutionLease.objects.filter(agent_id=ctx.actor.id, status="active").values_list(
            "workitem__group_id", "workitem_id"
        )
    )
    by_group: dict[str, list[str]] = {}
    for lease_group, lease_item in leases:
        by_group.setdefault(str(lease_group), []).append(str(lease_item))
    out: list[tuple[GroupHead, list[Emit]]] = []
    for group_id in sorted(by_group):
        head = ctx.lock_other_group(group_id)
        events: list[Emit] = []
        for item_id in sorted(by_group[group_id]):
            item = WorkItem.objects.select_for_update().get(id=item_id)
            lease = active_lease(item)
            if lease is None or item.state != sm.ACTIVE:
                continue
            body = _revoke_lease(item, lease, "session replaced", ctx.now)
            item.start_by = ctx.now + _seconds("MWP_START_BY_SECONDS")
            item.owner_expires_at = item.start_by
            save(item, ctx.now)
            body["start_by"] = format_time(item.start_by)
            events.append(Emit("work.lease_revoked", item_ref(item), body))
        out.append((head, events))
    return out


session_replaced_hooks.append(revoke_leases_of_replaced_session)


def fence_removed_member(ctx: HandlerContext, agent_id: str) -> list[Emit]:
    """``membership.remove``: the removed member's active leases in this Group
    are revoked (the WorkItem returns to ``queued``) and its ownership of
    queued, active and blocked WorkItems ends, as when an ownership lease runs
    out, so the Coordinator may re-offer under a higher Ownership Epoch.
    Open offers to it are withdrawn."""
    events: list[Emit] = []
    # Locked after the Group row, per the write path's lock order, in id order.
    owned = WorkItem.objects.select_for_update().filter(
        group_id=ctx.group.id, owner_id=uuid.UUID(agent_id), state__in=(sm.QUEUED, sm.ACTIVE, sm.BLOCKED)
    )
    for item in owned.order_by("id"):
        lease = active_lease(item) if item.state == sm.ACTIVE else None
        revoked = _revoke_lease(item, lease, "membership removed", ctx.now) if lease is not None else None
        sm.check_transition(item.state, "expire.blocked_lease" if item.state == sm.BLOCKED else "expire.start_by")
        fenced = _fence_owner(item)
        save(item, ctx.now)
        if revoked is not None:
            events.append(Emit("work.lease_revoked", item_ref(item), {**revoked, "start_by": None}))
        events.append(Emit("work.owner_fenced", item_ref(item), fenced))
    return events


membership_removed_hooks.append(fence_removed_member)


# --- Missions: child Missions and terminal states (spec 10.2 last rows) ---------


@command("mission.create_child", group_roles=COORDINATING, cas=True)
def create_child(ctx: HandlerContext) -> Decision:
    """Run a WorkItem as a linked child Mission in a new Group. The WorkItem is
    ``blocked`` with ownership fenced while the child runs; the child's final
    Approval verifies it, its failure follows ``failure_policy``
    (``fail_parent`` or ``keep_blocked``)."""
    body = ctx.body
    check_members(body, ["mission", "group", "title", "objective", "failure_policy"], ["budgets"])
    if body["failure_policy"] not in ("fail_parent", "keep_blocked"):
        raise malformed("body.failure_policy", "must be fail_parent or keep_blocked")
    item = load_item(ctx)
    sm.check_transition(item.state, "mission.create_child")
    mission_id, group_id = check_uuid(body, "mission"), check_uuid(body, "group")
    end_lease(active_lease(item), "revoked", "child mission", ctx.now)
    withdraw_offers(item, ctx.now)
    item.owner, item.owner_expires_at, item.start_by = None, None, None
    item.state = sm.BLOCKED
    child_events = found_mission(
        group_id=group_id, mission_id=mission_id, org_id=ctx.group.organization_id,
        title=check_text(body, "title", max_length=300), objective=check_text(body, "objective", max_length=20_000),
        owner_id=ctx.actor.id, now=ctx.now, budgets=check_mission_budgets(body),
        parent={"group": ctx.group.id, "workitem": str(item.id)},
    )  # fmt: skip
    item.child_mission_id = mission_id
    item.child_failure_policy = body["failure_policy"]
    save(item, ctx.now)
    child_head = GroupHead(group_id, ctx.group.organization_id, "mission", 0, GENESIS_HASH, 1)
    parent_body = {"child_mission": mission_id, "child_group": group_id, "failure_policy": body["failure_policy"]}
    return Decision(
        [Emit("mission.child_created", item_ref(item), parent_body)], item_ref(item), also=[(child_head, child_events)]
    )


def _mission_for(ctx: HandlerContext) -> Mission:
    mission = Mission.objects.get(group_id=ctx.group.id)
    if mission.status != "active":
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"the Mission is already {mission.status}")
    return mission


def _propagate_to_items(ctx: HandlerContext, transition: str, state: str, cause: str) -> list[Emit]:
    """A terminal Mission state reaches every unfinished WorkItem (spec 10.2)."""
    events = []
    for item in WorkItem.objects.select_for_update().filter(group_id=ctx.group.id, state__in=sm.UNFINISHED):
        sm.check_transition(item.state, transition)
        _end(item, state, ctx.now, cause)
        save(item, ctx.now)
        kind = "work.failed" if state == sm.FAILED else "work.cancelled"
        body: dict[str, Any] = {"reason": cause}
        if state == sm.FAILED:
            body["evidence"] = [_system_evidence(ctx, item, cause)]
        events.append(Emit(kind, item_ref(item), body))
    return events


def _to_parent(ctx: HandlerContext, mission: Mission, outcome: str) -> list[tuple[GroupHead, list[Emit]]]:
    """Propagate a child Mission's approval or failure to its parent WorkItem."""
    if mission.parent_group_id is None or mission.parent_workitem_id is None:
        return []
    head = ctx.lock_other_group(str(mission.parent_group_id))
    item = WorkItem.objects.select_for_update().filter(id=mission.parent_workitem_id).first()
    if item is None or item.state != sm.BLOCKED or str(item.child_mission_id) != str(mission.id):
        return [(head, [])]
    if outcome == "approved":
        sm.check_transition(item.state, "child.approved", sm.VERIFIED)
        item.state = sm.VERIFIED
        evidence = [
            {
                "subject": str(item.id),
                "criteria": criteria_ids(item.contract),
                "method": "human",
                "result": "pass",
                "producer": ctx.actor.id,
                "timestamp": format_time(ctx.now),
                "artifacts": [],
                "summary": f"child Mission {mission.id} received final Approval",
            }
        ]
        save(item, ctx.now)
        return [
            (
                head,
                [Emit("work.child_approved", item_ref(item), {"child_mission": str(mission.id), "evidence": evidence})],
            )
        ]
    to = sm.FAILED if item.child_failure_policy == "fail_parent" else sm.BLOCKED
    sm.check_transition(item.state, "child.failed", to)
    body: dict[str, Any] = {"child_mission": str(mission.id), "outcome": outcome, "state": to}
    if to == sm.FAILED:
        _end(item, sm.FAILED, ctx.now, f"child mission {outcome}")
        body["evidence"] = [_system_evidence(ctx, item, f"child Mission {mission.id} {outcome}")]
    else:
        item.child_mission = None  # the Coordinator may now unblock or reassign
    save(item, ctx.now)
    return [(head, [Emit("work.child_failed", item_ref(item), body)])]


def _close_mission(
    ctx: HandlerContext, mission: Mission, status: str, event: str, body: dict[str, Any], item_events: list[Emit]
) -> Decision:
    """Set the Mission's terminal status (a Group revision change) and
    propagate to its parent WorkItem, if it is a child Mission."""
    Mission.objects.filter(id=mission.id).update(status=status)
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision + 1)
    outcome = {"completed": "approved", "failed": "failed", "cancelled": "cancelled"}[status]
    return Decision(
        [*item_events, Emit(event, ref, {"mission": str(mission.id), **body})],
        ref,
        also=_to_parent(ctx, mission, outcome),
    )


@command("mission.approve", group_roles=("owner",), target="group", cas=True)
def approve_mission(ctx: HandlerContext) -> Decision:
    """Final Approval of the Mission by its owner; every WorkItem must be finished."""
    check_members(ctx.body, [], ["note"])
    mission = _mission_for(ctx)
    unfinished = WorkItem.objects.filter(group_id=ctx.group.id, state__in=sm.UNFINISHED).count()
    if unfinished:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION, f"{unfinished} WorkItems are unfinished", unfinished=unfinished
        )
    note = ctx.body.get("note") or ""
    Approval.objects.create(
        group_id=ctx.group.id,
        kind=Approval.KIND_FINAL,
        subject_kind="mission",
        subject_id=str(mission.id),
        subject_revision=ctx.group.revision,
        granted_by_id=ctx.actor.id,
        note=str(note)[:2000],
        granted_at=ctx.now,
    )
    return _close_mission(ctx, mission, "completed", "mission.approved", {"note": str(note)[:2000]}, [])


@command("mission.fail", group_roles=("owner",), target="group", cas=True)
def fail_mission(ctx: HandlerContext) -> Decision:
    check_members(ctx.body, ["reason"])
    reason = check_text(ctx.body, "reason", max_length=2000)
    mission = _mission_for(ctx)
    events = _propagate_to_items(ctx, "parent.failed", sm.FAILED, f"mission failed: {reason}")
    return _close_mission(ctx, mission, "failed", "mission.failed", {"reason": reason}, events)


@command("mission.cancel", group_roles=("owner",), target="group", cas=True)
def cancel_mission(ctx: HandlerContext) -> Decision:
    check_members(ctx.body, ["reason"])
    reason = check_text(ctx.body, "reason", max_length=2000)
    mission = _mission_for(ctx)
    events = _propagate_to_items(ctx, "parent.cancelled", sm.CANCELLED, f"mission cancelled: {reason}")
    return _close_mission(ctx, mission, "cancelled", "mission.cancelled", {"reason": reason}, events)


def _when(value: datetime | None) -> str | None:
    return format_time(value) if value is not None else None


def _item_state(item: WorkItem) -> dict[str, Any]:
    """One WorkItem as a snapshot carries it: the state, and every timer,
    lease, open offer and the latest checkpoint a Worker needs to go on from
    the snapshot alone (a restored owner renews its lease, an offered Worker
    still sees its offer, a new owner resumes from the checkpoint; spec 16)."""
    # The prefetches of snapshot_workitems hold only the active lease, the
    # open offers and the latest checkpoint.
    lease = next(iter(item.leases.all()), None)
    latest = next(iter(item.checkpoints.all()), None)
    return {
        "id": str(item.id), "state": item.state, "revision": item.revision, "contract": item.contract,
        "contract_revision": item.contract_revision, "accepted_contract_revision": item.accepted_contract_revision,
        "owner": str(item.owner_id) if item.owner_id else None, "ownership_epoch": item.ownership_epoch,
        "start_by": _when(item.start_by), "owner_expires_at": _when(item.owner_expires_at),
        "approved_contract_revision": item.approved_contract_revision, "attempt": item.attempt,
        "needs_new_attempt": item.needs_new_attempt, "retry_not_before": _when(item.retry_not_before),
        "usage": item.usage, "checkpoint_count": item.checkpoint_count,
        "dependencies": sorted(
            ({"workitem": str(d.depends_on_id), "policy": d.policy} for d in item.dependencies.all()),
            key=lambda d: d["workitem"],
        ),
        # The Lease ID and its holder are in the work.started Event already;
        # the capability token is never in the log.
        "lease": {
            "lease_id": str(lease.id), "agent": str(lease.agent_id), "session_epoch": lease.session_epoch,
            "ownership_epoch": lease.ownership_epoch, "expires_at": format_time(lease.expires_at),
        } if lease else None,
        "offers": sorted(
            ({"agent": str(o.agent_id), "expires_at": format_time(o.expires_at)}
             for o in item.offers.all()),
            key=lambda o: o["agent"],
        ),
        "latest_checkpoint": {
            "number": latest.number, "ownership_epoch": latest.ownership_epoch, "lease_id": str(latest.lease_id),
            "state": latest.state, "progress": latest.progress, "created_at": format_time(latest.created_at),
        } if latest else None,
        "child_mission": str(item.child_mission_id) if item.child_mission_id else None,
        "child_failure_policy": item.child_failure_policy or None,
    }  # fmt: skip


def snapshot_workitems(group_id: str) -> tuple[str, Any]:
    """The WorkItems of a Group as its snapshot carries them (what a Worker's
    per-Group queue needs to restore)."""
    rows = (
        WorkItem.objects.filter(group_id=group_id)
        .prefetch_related(
            "dependencies",
            Prefetch("leases", queryset=ExecutionLease.objects.filter(status="active")),
            Prefetch("offers", queryset=Offer.objects.filter(status="open")),
            # Only the latest checkpoint: its number is the item's count.
            Prefetch("checkpoints", queryset=Checkpoint.objects.filter(number=F("workitem__checkpoint_count"))),
        )
        .order_by("id")
    )
    return "workitems", [_item_state(item) for item in rows]


snapshot_contributors.append(snapshot_workitems)
