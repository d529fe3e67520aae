"""Proposal, authorization, dependencies, offers, ownership and execution approval (PROTOCOL §10.1-§10.4, §12)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings

from governance import limits
from missions.authority import AggregateRef, Decision, Emit, HandlerContext
from missions.handlers.memberships import activate_provisional
from missions.models import Approval, Membership, Mission
from missions.registry import command
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import bare, urn

from .. import state_machine as sm
from ..contract import check_contract, is_material_change, requires_approval
from ..delegation import acts_as_delegate, ancestry, check_grant
from ..documents import POLICY_VERSION, actor_of, authority_signed, work_item_document
from ..hooks import acceptance_checks
from ..models import Offer, WorkItem
from ..models import WorkProposal as Proposal
from ..wire import moment, refuse, when
from .cards import pin
from .common import (
    COORDINATING,
    EXECUTING,
    active_lease,
    check_retry_offer,
    emit,
    end_lease,
    item_ref,
    load_item,
    owner_is_live,
    ownership_lease,
    save,
    seconds,
    set_dependencies,
    withdraw_offers,
    work_item_id,
)
from .outcomes import check_within_parent

AUTHORS = ("coordinator", "work_delegate", "mission_owner")
PEOPLE = ("agent", "human")


def _mission(ctx: HandlerContext) -> Mission:
    mission = Mission.objects.get(group_id=ctx.group.id)
    if mission.status != "active":
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"the Mission is {mission.status}")
    return mission


def _first_version(contract: dict[str, Any]) -> None:
    if contract["contractVersion"] != 1:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/contract/contractVersion: a new Work Contract is version 1",
            field="/payload/contract/contractVersion",
            reason="contract_invalid",
        )


# --- proposal and authorization --------------------------------------------------

# Runaway controls (§20): WorkItems authorized and waiting for an executor, and
# WorkItems handed to Workers (offered, accepted or executing), per Mission.
_WAITING = (sm.OPEN, sm.OFFERED, sm.QUEUED)
_HANDED_OUT = (sm.OFFERED, sm.QUEUED, sm.ACTIVE, sm.BLOCKED)


def _parent(ctx: HandlerContext, new_id: str | None = None) -> WorkItem | None:
    """The WorkItem ``parentWorkItemId`` names in this Group; never the new WorkItem itself (§20: no cycle)."""
    named = ctx.payload.get("parentWorkItemId")
    if named is None:
        return None
    parent_id = bare(named, "/payload/parentWorkItemId")
    if parent_id == new_id:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/parentWorkItemId: a WorkItem cannot be its own parent (cyclic decomposition, §20)",
            field="/payload/parentWorkItemId",
            reason="cyclic-decomposition",
        )
    parent = WorkItem.objects.select_related("parent").filter(id=parent_id, group_id=ctx.group.id).first()
    if parent is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/parentWorkItemId: no such WorkItem in this Group",
            field="/payload/parentWorkItemId",
            reason="not_found",
        )
    return parent


def _check_decomposition(
    ctx: HandlerContext, mission: Mission, goal: str, parent: WorkItem | None, *, proposal_id: Any = None
) -> None:
    """The same goal twice under one parent WorkItem, or a goal an ancestor already has (§20).
    Top-level work (no parent) is the Mission's plan, not a decomposition: never refused here."""
    if parent is None:
        return
    items = WorkItem.objects.filter(mission=mission, parent=parent).exclude(state=sm.CANCELLED)
    proposals = Proposal.objects.filter(group_id=ctx.group.id, parent_id=parent.id, status="open")
    if proposal_id is not None:
        proposals = proposals.exclude(id=proposal_id)
    siblings = [i.contract["goal"] for i in items] + [p.contract["goal"] for p in proposals]
    ancestors = [parent.contract["goal"], *(a.contract["goal"] for a in ancestry(parent))]
    limits.check_decomposition(ctx, goal, siblings=siblings, ancestors=ancestors)


@command(
    "work.propose",
    group_roles=("mission_owner", "coordinator", "worker", "reviewer", "observer", "work_delegate"),
    actors=PEOPLE,
)
def propose(ctx: HandlerContext) -> Decision:
    """Any member proposes work; no WorkItem exists yet (§10.2 first row)."""
    p = ctx.payload
    proposal_id = bare(p["proposalId"], "/payload/proposalId")
    contract = check_contract(p["contract"], now=ctx.now)
    _first_version(contract)
    if Proposal.objects.filter(id=proposal_id).exists():
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            "/payload/proposalId: this ID cannot be used",
            field="/payload/proposalId",
        )
    mission = _mission(ctx)
    limits.check_proposal_rate(ctx)
    parent = _parent(ctx)
    _check_decomposition(ctx, mission, contract["goal"], parent)
    Proposal.objects.create(
        id=proposal_id, group_id=ctx.group.id, proposer_id=ctx.actor.id, contract=contract, created_at=ctx.now,
        parent_id=parent.id if parent else None,
    )  # fmt: skip
    proposal: dict[str, Any] = {
        "id": urn(proposal_id),
        "missionId": urn(mission.id),
        "groupId": urn(ctx.group.id),
        "proposedBy": actor_of(ctx),
        "contract": contract,
        "dependencyIds": list(p.get("dependencyIds") or []),
        "status": "open",
        "createdAt": when(ctx.now),
        "updatedAt": when(ctx.now),
    }
    if p.get("parentWorkItemId") is not None:
        proposal["parentWorkItemId"] = p["parentWorkItemId"]
    ref = AggregateRef("work_proposal", proposal_id, 1)
    return Decision([Emit("work.proposed", ref, {"proposal": proposal})], ref)


@command("work.authorize", group_roles=AUTHORS, actors=PEOPLE)
def authorize(ctx: HandlerContext) -> Decision:
    """The Coordinator (or a scoped delegate) creates the WorkItem under its Work Contract (state ``open``)."""
    p = ctx.payload
    sm.check_transition(None, "work.authorize")
    item_id = work_item_id(ctx)
    mission = _mission(ctx)
    contract = check_contract(p["contract"], now=ctx.now, mission_budget=mission.budgets)
    check_within_parent(contract, mission)  # a child Mission's work stays within its parent WorkItem (§14)
    _first_version(contract)
    parent = _parent(ctx, item_id)
    grant = None
    if acts_as_delegate(ctx):
        grant = check_grant(ctx, contract=contract, within=parent, now=ctx.now)
    depth = parent.depth + 1 if parent else 1
    limits.check_delegation_depth(ctx, depth)
    proposal_cited = bare(p["proposalId"], "/payload/proposalId") if p.get("proposalId") is not None else None
    _check_decomposition(ctx, mission, contract["goal"], parent, proposal_id=proposal_cited)
    limits.check_queued_work_items(ctx, WorkItem.objects.filter(mission=mission, state__in=_WAITING).count() + 1)
    if p.get("dependencyIds") is not None and sorted(p["dependencyIds"]) != sorted(contract["dependencyWorkItemIds"]):
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/dependencyIds: must be the contract's dependencyWorkItemIds",
            field="/payload/dependencyIds",
        )
    proposal = None
    if p.get("proposalId") is not None:
        proposal_id = bare(p["proposalId"], "/payload/proposalId")
        proposal = Proposal.objects.select_for_update().filter(id=proposal_id, group_id=ctx.group.id).first()
        if proposal is None:
            raise refuse(
                ErrorCode.INVALID_COMMAND,
                "/payload/proposalId: no such Work Proposal in this Group",
                field="/payload/proposalId",
                reason="not_found",
            )
        if proposal.status != "open":
            raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "the Work Proposal is already authorized")
    if WorkItem.objects.filter(id=item_id).exists():
        # WorkItem IDs are global, so a taken one is refused wherever it was
        # taken, in words that name neither (issue 16 item 8).
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            "/payload/workItemId: this ID cannot be used; authorize with a new UUID",
            field="/payload/workItemId",
        )
    item = WorkItem.objects.create(
        id=item_id,
        group_id=ctx.group.id,
        mission=mission,
        proposal=proposal,
        state=sm.OPEN,
        contract=contract,
        contract_revision=1,
        parent=parent,
        depth=depth,
        delegation_grant=grant,
        created_at=ctx.now,
        updated_at=ctx.now,
    )
    if contract["dependencyWorkItemIds"]:  # a new WorkItem has no edges to replace
        set_dependencies(item, contract, mission.id)
    if proposal is not None:
        proposal.status = "authorized"
        proposal.save(update_fields=["status"])
    payload: dict[str, Any] = {"workItem": work_item_document(item, actor_of(ctx))}
    for member in ("proposalId", "delegationGrantId"):
        if p.get(member) is not None:
            payload[member] = p[member]
    return Decision([emit("work.authorized", item, payload)], item_ref(item))


@command("ext.missionweaveprotocol.core.work_dependency_add", group_roles=COORDINATING)
def add_dependency(ctx: HandlerContext) -> Decision:
    """A new edge of the Mission's DAG revises the Work Contract (§10.4); a cycle is refused.
    An owner must accept the revised contract again before it starts (§10.1)."""
    item = load_item(ctx)
    sm.check_transition(item.state, sm.DEPENDENCY_ADD)
    dependency = ctx.payload["dependencyId"]
    bare(dependency, "/payload/dependencyId")
    if dependency in item.contract["dependencyWorkItemIds"]:
        raise refuse(
            ErrorCode.INVALID_COMMAND, "/payload/dependencyId: already a dependency", field="/payload/dependencyId"
        )
    revised = {
        **item.contract,
        "contractVersion": item.contract_revision + 1,
        "dependencyWorkItemIds": [*item.contract["dependencyWorkItemIds"], dependency],
    }
    set_dependencies(item, revised, item.mission_id, field="/payload")
    item.contract, item.contract_revision = revised, revised["contractVersion"]
    save(item, ctx.now, contract=True)
    payload = {
        "workItemId": urn(item.id),
        "revision": item.contract_revision,
        "dependencyId": dependency,
        "contract": revised,
    }
    return Decision([emit("work.contract.revised", item, payload)], item_ref(item))


# --- offers and ownership (§10.3) -------------------------------------------------


def _offer_expiry(ctx: HandlerContext) -> Any:
    p = ctx.payload
    at, within = p.get("offerExpiresAt"), p.get("offerExpiresInSeconds")
    if (at is None) == (within is None):
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/offerExpiresInSeconds: name exactly one of offerExpiresAt, offerExpiresInSeconds",
            field="/payload/offerExpiresInSeconds",
        )
    expires = moment(at) if at is not None else ctx.now + timedelta(seconds=int(within or 0))
    if expires <= ctx.now:
        raise refuse(
            ErrorCode.INVALID_COMMAND, "/payload/offerExpiresAt: must be in the future", field="/payload/offerExpiresAt"
        )
    return expires


def _candidates(ctx: HandlerContext) -> list[str]:
    agents = [bare(a, f"/payload/candidateAgentIds/{i}") for i, a in enumerate(ctx.payload["candidateAgentIds"])]
    limit = settings.MWP_MAX_OFFER_CANDIDATES
    if len(agents) > limit:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"/payload/candidateAgentIds: at most {limit}",
            field="/payload/candidateAgentIds",
        )
    roles = {
        str(m.agent_id): m.roles
        for m in Membership.objects.filter(group_id=ctx.group.id, agent_id__in=agents, active=True)
    }
    for i, agent in enumerate(agents):
        if not set(roles.get(agent, [])) & set(EXECUTING):
            raise refuse(
                ErrorCode.INVALID_COMMAND,
                f"/payload/candidateAgentIds/{i}: not a worker or reviewer of this Group",
                field=f"/payload/candidateAgentIds/{i}",
            )
    return agents


@command("work.offer", group_roles=AUTHORS, actors=(*PEOPLE, "service"))
def offer(ctx: HandlerContext) -> Decision:
    """Create or replace durable offers; they reserve nothing until accepted (§10.3).

    One candidate is a sequential offer; several form a bounded candidate set
    whose first valid acceptance wins. An expired owner is fenced first; a
    live one makes the offer INVALID_STATE_TRANSITION. A ``contract`` with a
    material change carries the next contract version and needs renewed
    acceptance (§10.1); an unchanged one keeps its version.
    """
    p = ctx.payload
    item = load_item(ctx)
    sm.check_transition(item.state, "work.offer")
    if owner_is_live(item, ctx.now):
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            "the WorkItem has a live owner; it cannot be offered",
            ownerId=urn(str(item.owner_id)),
        )
    if ctx.actor.is_service:
        check_retry_offer(ctx, item)  # the Organization's retry policy (§11.4)
    elif acts_as_delegate(ctx):
        grant = check_grant(ctx, contract=p.get("contract") or item.contract, within=item, now=ctx.now, offered=True)
        WorkItem.objects.filter(id=item.id).update(offered_under_grant=grant)
    handed_out = WorkItem.objects.filter(mission_id=item.mission_id, state__in=_HANDED_OUT).exclude(id=item.id)
    limits.check_active_work_items(ctx, handed_out.count() + 1)
    agents = _candidates(ctx)
    expires_at = _offer_expiry(ctx)
    events: list[Emit] = []
    # Fence an expired owner before the new offer (§10.2, work.offer row).
    if item.owner_id is not None:
        fenced = urn(item.owner_id)
        end_lease(active_lease(item), "expired", "ownership expired", ctx.now)
        item.owner, item.owner_expires_at, item.start_by = None, None, None
        item.revision += 1
        events.append(
            emit(
                "ext.mwportal.work.ownership_fenced",
                item,
                {
                    "workItemId": urn(item.id),
                    "ownershipEpoch": item.ownership_epoch,
                    "reason": "ownership_expired",
                    "agentId": fenced,
                },
            )
        )
    changed = _revise_contract(ctx, item)
    withdraw_offers(item, ctx.now)
    basis = p["selectionBasis"]
    Offer.objects.bulk_create(
        [
            Offer(
                workitem=item,
                agent_id=a,
                contract_revision=item.contract_revision,
                selection_basis=basis,
                created_at=ctx.now,
                expires_at=expires_at,
            )
            for a in agents
        ]
    )
    item.state = sm.OFFERED
    save(item, ctx.now, contract=changed is not None)
    offered: dict[str, Any] = {
        "workItemId": urn(item.id),
        "candidateAgentIds": [urn(a) for a in agents],
        "offerExpiresAt": when(expires_at),
        "selectionBasis": basis,
        "contractVersion": item.contract_revision,
    }
    if changed is not None:
        offered["contract"], offered["contractChanged"] = item.contract, changed
    for member in ("contextPackageId", "delegationGrantId"):
        if p.get(member) is not None:
            offered[member] = p[member]
    events.append(emit("work.offer.created", item, offered))
    return Decision(events, item_ref(item))


def _revise_contract(ctx: HandlerContext, item: WorkItem) -> bool | None:
    """Apply the offer's corrected contract; whether it changed materially (None: no contract sent)."""
    sent = ctx.payload.get("contract")
    if sent is None:
        return None
    mission = Mission.objects.get(id=item.mission_id)
    new = check_contract(sent, now=ctx.now, mission_budget=mission.budgets)
    material = is_material_change(item.contract, new)
    wanted = item.contract_revision + 1 if material else item.contract_revision
    if new["contractVersion"] != wanted:
        why = "a material revision increments it" if material else "an unchanged contract keeps it"
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"/payload/contract/contractVersion: must be {wanted} ({why}, §10.1)",
            field="/payload/contract/contractVersion",
            reason="contract_invalid",
        )
    if material:
        item.contract_revision = wanted
        item.accepted_contract_revision = None
    item.contract = new
    set_dependencies(item, new, item.mission_id)
    return material


def _my_open_offer(ctx: HandlerContext, item: WorkItem) -> Offer:
    mine = Offer.objects.select_for_update().filter(workitem=item, agent_id=ctx.actor.id, status="open").first()
    if mine is None:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "there is no open offer of this WorkItem to you")
    return mine


@command("work.accept_offer", group_roles=EXECUTING)
def accept_offer(ctx: HandlerContext) -> Decision:
    """The first valid acceptance wins a new Ownership Epoch and start-by deadline;
    every other offer is withdrawn in the same transaction (§10.3, §11.3).
    Compare-and-set on the WorkItem revision makes concurrent acceptances of a
    candidate set pick exactly one winner (§15.3)."""
    item = load_item(ctx)
    if item.state != sm.OFFERED and item.owner_id is not None and str(item.owner_id) != ctx.actor.id:
        lost = Offer.objects.filter(workitem=item, agent_id=ctx.actor.id, status="withdrawn").exists()
        if lost:
            # §19: another candidate won exclusive ownership of the offer this one held.
            raise refuse(ErrorCode.WORK_ALREADY_OWNED, "another candidate accepted this WorkItem first")
    sm.check_transition(item.state, "work.accept_offer")
    mine = _my_open_offer(ctx, item)
    if mine.expires_at <= ctx.now:
        raise refuse(ErrorCode.WORK_OFFER_EXPIRED, f"the offer expired at {when(mine.expires_at)}")
    if mine.contract_revision != item.contract_revision:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "the offer is for an older contract version")
    for check in acceptance_checks:  # an open essential ambiguity (§10.1, conversations)
        check(ctx, item)
    pins = pin(ctx.actor.id, item.contract)  # the Organization-verified card, not the Worker's word (§6.1)
    mine.status, mine.closed_at = "accepted", ctx.now
    mine.save(update_fields=["status", "closed_at"])
    withdrawn = withdraw_offers(item, ctx.now)
    item.ownership_epoch += 1
    item.owner_id = uuid.UUID(ctx.actor.id)
    item.start_by = ctx.now + seconds("MWP_START_BY_SECONDS", ctx.payload.get("ownershipLeaseSeconds"))
    item.owner_expires_at = item.start_by
    item.accepted_contract_revision = item.contract_revision
    item.selection_basis = mine.selection_basis
    item.pins = pins
    item.state = sm.QUEUED
    save(item, ctx.now)
    payload: dict[str, Any] = {
        "workItemId": urn(item.id),
        "assigneeId": urn(ctx.actor.id),
        "ownershipEpoch": item.ownership_epoch,
        "ownershipLeaseExpiresAt": when(item.start_by),
        "agentCardVersion": pins["agentCardVersion"],
        "ownershipLease": ownership_lease(item, ctx.actor.session_epoch or 1, ctx.now),
        "contractVersion": item.contract_revision,
        "selectionBasis": mine.selection_basis,
        "withdrawnAgentIds": withdrawn,
        "capabilityPins": pins["capabilities"],
    }
    # §8 step 3: a just-in-time member's acceptance activates its Membership.
    activated, notices = activate_provisional(ctx)
    return Decision([emit("work.offer.accepted", item, payload), *activated], item_ref(item), notices=notices)


@command("ext.mwportal.work.offer_decline", group_roles=EXECUTING)
def decline_offer(ctx: HandlerContext) -> Decision:
    """A structured decline (§10.3). It changes only the offer, so the WorkItem
    revision stays and other candidates' compare-and-set still holds."""
    item = load_item(ctx)
    sm.check_transition(item.state, sm.DECLINE)
    mine = _my_open_offer(ctx, item)
    detail = ctx.payload.get("detail") or ""
    mine.status, mine.closed_at = "declined", ctx.now
    mine.decline_reason, mine.decline_detail = ctx.payload["reason"], detail
    mine.save()
    payload = {"workItemId": urn(item.id), "agentId": urn(ctx.actor.id), "reason": ctx.payload["reason"]}
    if detail:
        payload["detail"] = detail
    return Decision([emit("ext.mwportal.work.offer_declined", item, payload)], item_ref(item))


@command("approval.grant_execution", group_roles=("mission_owner",), actors=PEOPLE)
def grant_execution(ctx: HandlerContext) -> Decision:
    """The MissionOwner's signed execution Approval (§12): satisfies the start
    gate of a contract that asks for one, for its current contract version and
    the current Ownership Epoch."""
    p = ctx.payload
    item = load_item(ctx)
    sm.check_transition(item.state, "approval.grant_execution")
    if not requires_approval(item.contract):
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "this contract requires no execution Approval")
    if p["ownershipEpoch"] != item.ownership_epoch:
        raise refuse(
            ErrorCode.WORK_STALE_OWNERSHIP,
            f"ownershipEpoch {p['ownershipEpoch']} is not current ({item.ownership_epoch})",
            currentOwnershipEpoch=item.ownership_epoch,
        )
    if item.approved_contract_revision == item.contract_revision:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "execution is already approved for this contract version")
    approval_id = bare(p["approvalId"], "/payload/approvalId")
    expires_at = ctx.now + seconds("MWP_START_BY_SECONDS", p.get("expiresInSeconds"))
    item.approved_contract_revision = item.contract_revision
    save(item, ctx.now)
    Approval.objects.create(
        group_id=ctx.group.id,
        kind=Approval.KIND_EXECUTION,
        subject_kind="workitem",
        subject_id=str(item.id),
        subject_revision=item.contract_revision,
        granted_by_id=ctx.actor.id,
        note=(p.get("comments") or "")[:2000],
        granted_at=ctx.now,
    )
    approval = authority_signed(
        "approval",
        {
            "approvalId": urn(approval_id),
            "kind": "work_execution",
            "decision": "approved",
            "missionId": urn(item.mission_id),
            "groupId": urn(item.group_id),
            "missionRevision": ctx.group.revision,
            "artifactHashes": [],
            "acceptancePolicyVersion": POLICY_VERSION,
            "approver": actor_of(ctx),
            "comments": p.get("comments") or "",
            "conditions": [],
            "occurredAt": when(ctx.now),
            "workItemId": urn(item.id),
        },
        ctx,
    )
    payload: dict[str, Any] = {
        "approval": approval,
        "ownershipEpoch": item.ownership_epoch,
        "operations": p["operations"],
        "expiresAt": when(expires_at),
        "contractVersion": item.contract_revision,
    }
    for member in ("resources", "budget"):
        if p.get(member) is not None:
            payload[member] = p[member]
    return Decision([emit("approval.execution.granted", item, payload)], item_ref(item))
