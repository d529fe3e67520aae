"""Proposal, authorization, offers, ownership and execution approval (spec 10.1-10.3)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from missions.authority import (
    AggregateRef,
    Decision,
    Emit,
    HandlerContext,
)
from missions.guards import check_members, check_uuid, refuse
from missions.models import Approval, Membership, Mission
from missions.registry import command
from mwportal.protocol import ErrorCode, format_time, malformed, parse_time

from .. import state_machine as sm
from ..contract import check_contract, is_material_change, requires_approval
from ..guards import (
    DECLINE_REASONS,
    check_selection_basis,
)
from ..models import Offer, WorkItem
from ..models import WorkProposal as Proposal
from .common import (
    COORDINATING,
    EXECUTING,
    active_lease,
    end_lease,
    item_ref,
    load_item,
    owner_is_live,
    save,
    seconds,
    set_dependencies,
    withdraw_offers,
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
    item.start_by = ctx.now + seconds("MWP_START_BY_SECONDS")
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
