"""Creating a Mission: its Group, its Conversation, its MissionOwner and its Coordinator (§7.1, §7.2).

``mission.create`` is a human's Command (§7.1: a root Mission's MissionOwner
is human); ``found_mission`` is shared with ``mission.create_child`` (the
workitems app), whose new Group is a consequence of a Command in the parent
Group and whose MissionOwner is the parent Coordinator.

The Mission's terms (objective, definition of done, deadline, budget,
approval policy) are §7.1's MUSTs: the catalogue leaves most of them optional
because the bundle's valid vector carries only the IDs and the Coordinator,
so this handler requires them. The ``mission.created`` Event carries the
whole normative Mission and Group; it is the record the Mission's terms are
read back from (``mission_document``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from mwportal.protocol import GENESIS_HASH, ErrorCode
from mwportal.protocol.ids import urn
from mwportal.protocol.values import parse_timestamp

from ..authority import AggregateRef, Decision, Emit, HandlerContext
from ..coordinator import expires_at, lease_seconds
from ..guards import refuse
from ..models import Agent, AgentCard, Group, GroupEvent, Membership, Mission
from ..registry import command
from .common import actor_doc, derived_id, main_conversation_id, payload_id, stamp

# §7.1: a Mission declares its risk/approval policy; absent, the strictest one.
DEFAULT_APPROVAL_POLICY = {"finalHumanApproval": True, "highRiskExecutionApproval": True}
# The normative Mission states (mission.schema.json) are the Mission row's statuses; an archived
# Mission keeps the terminal state it was archived in.
MISSION_STATES = frozenset({"active", "awaiting_approval", "approved", "failed", "cancelled"})
_REQUIRED_TERMS = ("objective", "definitionOfDone", "deadline", "budget")


def mission_terms(payload: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The Mission's terms from a creation payload, §7.1's MUSTs checked.

    Returns the members of the normative Mission they fill (``objective``,
    ``definitionOfDone``, ``deadline``, ``budget``, ``approvalPolicy``) and the
    portal's ``title``.
    """
    for name in _REQUIRED_TERMS:
        if payload.get(name) is None:
            raise refuse(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                f"/payload/{name}: a Mission declares its objective, definition of done, deadline and budget (§7.1)",
                field=f"/payload/{name}",
            )
    deadline = payload["deadline"]
    if parse_timestamp(deadline) <= parse_timestamp(stamp(now)):
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/deadline: a Mission's deadline is in the future",
            field="/payload/deadline",
            reason="deadline-passed",
        )
    criteria = [c["criterionId"] for c in payload["definitionOfDone"]]
    if len(set(criteria)) != len(criteria):
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "/payload/definitionOfDone: each criterionId is listed once",
            field="/payload/definitionOfDone",
        )
    objective = payload["objective"]
    return {
        "title": payload.get("title") or objective.strip().splitlines()[0][:300],
        "objective": objective,
        "definitionOfDone": payload["definitionOfDone"],
        "deadline": deadline,
        "budget": payload["budget"],
        "approvalPolicy": payload.get("approvalPolicy") or DEFAULT_APPROVAL_POLICY,
        "leaseSeconds": lease_seconds(payload.get("coordinatorLeaseSeconds")),
        "permissions": sorted(set(payload.get("permissions") or [])),
    }


def coordinator_of(organization_id: str, payload: dict[str, Any]) -> tuple[Agent, int]:
    """The Coordinator a creation payload names, and the Agent Card version its lease pins.

    ``coordinatorAgentId`` (the bundle's name) or ``coordinatorId`` (the
    reference implementation's): the catalogue admits exactly one. The
    Coordinator is an Agent of this Organization with a registered Agent
    Card: an assignment pins the card version (§6.1).
    """
    name = "coordinatorAgentId" if payload.get("coordinatorAgentId") is not None else "coordinatorId"
    if payload.get(name) is None:
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "/payload/coordinatorId: a Mission is created with a Coordinator lease (§7.1)",
            field="/payload/coordinatorId",
        )
    field = f"/payload/{name}"
    agent = Agent.objects.filter(id=payload_id(payload, name), organization_id=organization_id).first()
    if agent is None or agent.kind != Agent.KIND_AGENT:
        raise refuse(
            ErrorCode.INVALID_COMMAND, f"{field}: no such Agent in this Organization", field=field, reason="not_found"
        )
    version = AgentCard.objects.filter(agent=agent).order_by("-version").values_list("version", flat=True).first()
    if version is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"{field}: the Coordinator has no registered Agent Card; its lease pins one (§6.1)",
            field=field,
            reason="no-agent-card",
        )
    return agent, version


def coordinator_lease_id(mission_id: str, coordinator_epoch: int) -> str:
    """The Coordinator lease of an epoch (§7.2): one per (Mission, Coordinator Epoch)."""
    return derived_id("coordinator-lease", mission_id, coordinator_epoch)


def found_mission(
    *,
    group_id: str,
    mission_id: str,
    organization_id: str,
    owner: Agent,
    coordinator: Agent,
    card_version: int,
    terms: dict[str, Any],
    now: datetime,
    parent: dict[str, Any] | None = None,
    parent_event_id: str | None = None,
    follow_up_of: str | None = None,
) -> list[Emit]:
    """Create the Mission, its Group and the MissionOwner's and Coordinator's Memberships.

    Returns the new Group's first Event, ``mission.created``, carrying the
    normative Mission (revision 1, Coordinator Epoch 1) and Group.
    ``parent`` is a child Mission's ``{"missionId", "workItemId", "depth",
    "groupId"}`` (bare UUIDs), ``parent_event_id`` the parent Group's
    ``mission.child.created`` Event. ``follow_up_of``: the approved Mission a
    follow-up links to (its first Event is then ``mission.follow_up.created``).
    The Coordinator lease is epoch 1 for ``terms["leaseSeconds"]`` (§7.2).
    """
    if Mission.objects.filter(id=mission_id).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"mission {urn(mission_id)} exists", missionId=urn(mission_id))
    if Group.objects.filter(id=group_id).exists():
        raise refuse(ErrorCode.REVISION_CONFLICT, f"group {urn(group_id)} already exists", groupId=urn(group_id))
    group = Group.objects.create(
        id=group_id, organization_id=organization_id, kind=Group.KIND_MISSION, head_hash=GENESIS_HASH, revision=1,
        created_at=now,
    )  # fmt: skip
    Mission.objects.create(
        id=mission_id, organization_id=organization_id, group=group, title=terms["title"],
        objective=terms["objective"], created_by=owner, created_at=now, budgets=terms["budget"],
        parent_group_id=parent["groupId"] if parent else None,
        parent_workitem_id=parent["workItemId"] if parent else None, follow_up_of_id=follow_up_of,
        permissions=terms["permissions"],
        coordinator=coordinator, coordinator_epoch=1, coordinator_card_version=card_version,
        coordinator_lease_id=coordinator_lease_id(mission_id, 1), coordinator_lease_seconds=terms["leaseSeconds"],
        coordinator_lease_expires_at=expires_at(now, terms["leaseSeconds"]),
    )  # fmt: skip
    Membership.objects.bulk_create(
        [
            Membership(group=group, agent=owner, roles=["mission_owner"], epoch=1, updated_at=now),
            Membership(group=group, agent=coordinator, roles=["coordinator"], epoch=1, updated_at=now),
        ]
    )
    mission: dict[str, Any] = {
        "missionId": urn(mission_id),
        "groupId": urn(group_id),
        "revision": 1,
        "objective": terms["objective"],
        "definitionOfDone": terms["definitionOfDone"],
        "missionOwner": actor_doc(owner.kind, str(owner.id)),
        "coordinator": {
            "agentId": urn(str(coordinator.id)),
            "agentCardVersion": card_version,
            "coordinatorEpoch": 1,
            "leaseId": urn(coordinator_lease_id(mission_id, 1)),
        },
        "state": "active",
        "budget": terms["budget"],
        "deadline": terms["deadline"],
        "approvalPolicy": terms["approvalPolicy"],
        "createdAt": stamp(now),
    }
    if follow_up_of is not None:
        mission["followUpToMissionId"] = urn(follow_up_of)
    if parent:
        mission["parent"] = {
            "missionId": urn(parent["missionId"]),
            "workItemId": urn(parent["workItemId"]),
            "depth": parent["depth"],
        }
    group_doc = {
        "groupId": urn(group_id),
        "missionId": urn(mission_id),
        "state": "active",
        "mainConversationId": urn(main_conversation_id(group_id)),
        "createdAt": stamp(now),
    }
    payload: dict[str, Any] = {"mission": mission, "group": group_doc}
    if parent_event_id is not None:
        payload["parentEventId"] = urn(parent_event_id)
    if follow_up_of is not None:
        payload["followUpOfMissionId"] = urn(follow_up_of)
        return [Emit("mission.follow_up.created", AggregateRef("group", group_id, 1), payload)]
    return [Emit("mission.created", AggregateRef("group", group_id, 1), payload)]


@command("mission.create", creates_group=True, org_roles=("mission_owner",), actors=("human",))
def create_mission(ctx: HandlerContext) -> Decision:
    """A human creates a root Mission with a Coordinator lease; they become its MissionOwner (§7.1).

    The Group is the one the Command names (``groupId``, which the payload
    repeats); a Mission and its Group are created once (REVISION_CONFLICT for
    a Group that exists). A follow-up Mission is ``mission.create_follow_up``.
    """
    payload = ctx.payload
    if payload.get("followUpOfMissionId") is not None:
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "/payload/followUpOfMissionId: a follow-up Mission is created by mission.create_follow_up",
            field="/payload/followUpOfMissionId",
        )
    group_id = payload_id(payload, "groupId")
    if group_id != ctx.group.id:
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "/payload/groupId: must be the Group the Command creates (its groupId)",
            field="/payload/groupId",
        )
    organization_id = ctx.actor.organization_id
    terms = mission_terms(payload, ctx.now)
    coordinator, card_version = coordinator_of(organization_id, payload)
    events = found_mission(
        group_id=group_id, mission_id=payload_id(payload, "missionId"), organization_id=organization_id,
        owner=Agent.objects.get(id=ctx.actor.id), coordinator=coordinator, card_version=card_version, terms=terms,
        now=ctx.now,
    )  # fmt: skip
    ctx.group.organization_id = organization_id
    return Decision(events, AggregateRef("group", group_id, 1))


def mission_document(group_id: str) -> dict[str, Any] | None:
    """The Mission of a Group as a normative Mission object, now.

    Its terms are those its first Event (``mission.created`` or
    ``mission.follow_up.created``) carried; its state, revision and current
    Coordinator lease and MissionOwner are the current ones (the Group
    revision moves with every Mission and Membership change).
    """
    row = Mission.objects.filter(group_id=group_id).first()
    if row is None:
        return None
    created = GroupEvent.objects.filter(group_id=group_id, type__in=FIRST_EVENTS).values_list("body", flat=True)
    body = created.first()
    if body is None:
        return None
    mission = dict(body["mission"])
    if row.status in MISSION_STATES:
        mission["state"] = row.status
    mission["revision"] = Group.objects.values_list("revision", flat=True).get(id=group_id)
    owners = Membership.objects.filter(group_id=group_id, active=True).select_related("agent")
    owner = next((m.agent for m in owners if "mission_owner" in m.roles), None)
    if owner is not None:  # a child's MissionOwner follows the parent's Coordinator lease (§14)
        mission["missionOwner"] = actor_doc(owner.kind, str(owner.id))
    if row.coordinator_id is not None:
        mission["coordinator"] = {
            "agentId": urn(str(row.coordinator_id)),
            "agentCardVersion": row.coordinator_card_version,
            "coordinatorEpoch": row.coordinator_epoch,
            "leaseId": urn(str(row.coordinator_lease_id or coordinator_lease_id(str(row.id), row.coordinator_epoch))),
        }
    return mission


FIRST_EVENTS = ("mission.created", "mission.follow_up.created")


def _approved_original(ctx: HandlerContext, payload: dict[str, Any]) -> str:
    """The approved Mission a follow-up links to, owned by the same human (§7.1)."""
    original = payload_id(payload, "followUpOfMissionId")
    row = Mission.objects.filter(id=original, organization_id=ctx.actor.organization_id).first()
    if row is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND, "/payload/followUpOfMissionId: no such Mission in this Organization",
            field="/payload/followUpOfMissionId", reason="not_found",
        )  # fmt: skip
    if row.status != "approved":
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            f"/payload/followUpOfMissionId: a follow-up links to an approved Mission; this one is {row.status}",
            field="/payload/followUpOfMissionId",
        )
    if str(row.created_by_id) != ctx.actor.id:
        raise refuse(
            ErrorCode.AUTH_FORBIDDEN,
            "/payload/followUpOfMissionId: only the approved Mission's own MissionOwner opens its follow-up (§7.1)",
            field="/payload/followUpOfMissionId",
        )
    return original


@command("mission.create_follow_up", creates_group=True, org_roles=("mission_owner",), actors=("human",))
def create_follow_up(ctx: HandlerContext) -> Decision:
    """The same human opens a new Mission linked to an approved one (§7.1): corrections,
    revocation or remediation never reopen or rewrite the approved Mission."""
    payload = ctx.payload
    group_id = payload_id(payload, "groupId")
    if group_id != ctx.group.id:
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "/payload/groupId: must be the Group the Command creates (its groupId)",
            field="/payload/groupId",
        )
    original = _approved_original(ctx, payload)
    organization_id = ctx.actor.organization_id
    terms = mission_terms(payload, ctx.now)
    coordinator, card_version = coordinator_of(organization_id, payload)
    events = found_mission(
        group_id=group_id, mission_id=payload_id(payload, "missionId"), organization_id=organization_id,
        owner=Agent.objects.get(id=ctx.actor.id), coordinator=coordinator, card_version=card_version, terms=terms,
        now=ctx.now, follow_up_of=original,
    )  # fmt: skip
    ctx.group.organization_id = organization_id
    return Decision(events, AggregateRef("group", group_id, 1))
