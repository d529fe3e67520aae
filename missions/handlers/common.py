"""What the missions handlers share: Principals on the wire, and the normative objects they embed.

A Principal is a ``missions.models.Agent`` row whose ``kind`` is ``agent``,
``person`` or ``service``; on the wire its type is ``agent``, ``human`` or
``service`` and its identifier a ``urn:uuid:`` URI (DESIGN §4). The database
keeps bare UUIDs: every identifier read from a payload goes through
``mwportal.protocol.ids.bare``, which names the member when it refuses one.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from mwportal.protocol import ErrorCode
from mwportal.protocol.command import format_timestamp
from mwportal.protocol.ids import bare, urn

from ..guards import refuse
from ..models import Agent

# Agent.kind -> the wire's actor type, and back (§3: agent, human, service).
WIRE_TYPE = {"agent": "agent", "person": "human", "service": "service"}
MODEL_KIND = {wire: kind for kind, wire in WIRE_TYPE.items()}

# The scopes each Group role's Membership carries (membership.schema.json: at
# least one, lower-case). They name what the role is for; the Group
# Authority's role checks are what enforce it.
ROLE_SCOPES: dict[str, tuple[str, ...]] = {
    "mission_owner": ("group.read", "membership.manage", "mission.approve", "mission.cancel"),
    "coordinator": ("group.read", "membership.manage", "work.coordinate"),
    "worker": ("group.read", "work.execute"),
    "reviewer": ("group.read", "work.review"),
    "observer": ("group.read",),
    "work_delegate": ("group.read", "work.delegate"),
}


def stamp(moment: datetime) -> str:
    """A timestamp as the portal writes it (RFC 3339 UTC, ``Z``)."""
    return format_timestamp(moment)


def actor_doc(kind: str, principal_id: str) -> dict[str, str]:
    """The normative ``actor`` of a Principal row's kind and bare id."""
    return {"type": WIRE_TYPE[kind], "id": urn(principal_id)}


def payload_id(payload: dict[str, Any], name: str) -> str:
    """The bare UUID of the ``urn:uuid:`` member ``name`` (SCHEMA_VALIDATION_FAILED naming it otherwise)."""
    return bare(payload.get(name), f"/payload/{name}")


def principal_in(organization_id: str, actor: dict[str, Any], field: str) -> Agent:
    """The Principal row a payload's ``actor`` names in this Organization.

    An unknown Principal and one of another Organization get the same answer,
    and so does a known one named with the wrong type: the refusal tells
    nothing about who exists elsewhere.
    """
    principal_id = bare(actor.get("id"), f"{field}/id")
    row = Agent.objects.filter(id=principal_id, organization_id=organization_id).first()
    if row is None or WIRE_TYPE.get(row.kind) != actor.get("type"):
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"{field}: no such Principal in this Organization",
            field=field,
            reason="not_found",
        )
    return row


def derived_id(*parts: object) -> str:
    """A stable UUID derived from ``parts``, for the identifiers of objects the
    Group Authority derives rather than stores (a role's Membership, a Group's
    main Conversation, a Coordinator lease of an epoch)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "mwp:portal:" + ":".join(str(p) for p in parts)))


def main_conversation_id(group_id: str) -> str:
    """The Group-level Conversation that Mission creation allocates (§7.1, §9)."""
    return derived_id("main-conversation", group_id)


def membership_doc(
    *,
    group_id: str,
    mission_id: str,
    member: dict[str, str],
    role: str,
    epoch: int,
    now: datetime,
    state: str = "active",
    visibility_start: int = 0,
    context_package_id: str | None = None,
    provisional_expires: datetime | None = None,
) -> dict[str, Any]:
    """One normative Membership (membership.schema.json): one Principal's one role in one Group.

    The project keeps a Principal's roles in one row with one epoch; each role
    is its own Membership on the wire, with a stable ID per (Group,
    Principal, role) and the row's epoch.
    """
    when = stamp(now)
    doc: dict[str, Any] = {
        "membershipId": urn(derived_id("membership", group_id, member["id"], role)),
        "missionId": urn(mission_id),
        "groupId": urn(group_id),
        "member": member,
        "role": role,
        "state": state,
        "membershipEpoch": epoch,
        "scopes": list(ROLE_SCOPES[role]),
        "visibilityStartSequence": visibility_start,
        "grantedAt": when,
    }
    if state == "provisional" and provisional_expires is not None:
        doc["provisionalExpiresAt"] = stamp(provisional_expires)
    if state == "active":
        doc["activatedAt"] = when
    elif state == "ended":
        doc["endedAt"] = when
    if context_package_id is not None:
        doc["contextPackageId"] = urn(context_package_id)
    return doc


def row_membership_docs(row: Any, mission_id: str, member: dict[str, str]) -> list[dict[str, Any]]:
    """The normative Memberships of a stored ``Membership`` row, one per role (sorted): its state
    (``provisional`` until an offer's acceptance activates it), epoch, visibility start, Context
    Package and provisional expiry, as reads and snapshots serve them."""
    return [
        membership_doc(
            group_id=str(row.group_id),
            mission_id=mission_id,
            member=member,
            role=role,
            epoch=row.epoch,
            now=row.updated_at,
            state="provisional" if row.provisional else ("active" if row.active else "ended"),
            visibility_start=row.visibility_start,
            context_package_id=row.context_package_id or None,
            provisional_expires=row.provisional_expires_at,
        )  # fmt: skip
        for role in sorted(row.roles)
    ]
