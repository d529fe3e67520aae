"""The caller's Memberships as normative documents (``membership.schema.json``, PROTOCOL §8).

The project keeps a Principal's roles in a Group in one ``Membership`` row
with one epoch; on the wire each role is its own Membership
(``missions.handlers.common.membership_doc``: a stable ID per Group,
Principal and role, the row's epoch, the role's scopes), as the
``membership.changed`` Events carry them. The administrative Group is no
Mission's Group, so it has no Membership document; its ID comes as
``administrativeGroupId`` (every Principal of the Organization reads it).
"""

from __future__ import annotations

from typing import Any

from mwportal.protocol.ids import urn

from ..handlers.common import actor_doc, row_membership_docs
from ..models import Agent, Group, Membership, Mission


def membership_documents(principal: Agent) -> list[dict[str, Any]]:
    """One document per role of each active Membership of ``principal`` in a Mission Group, by Group then role."""
    rows = list(
        Membership.objects.filter(agent=principal, active=True, group__kind=Group.KIND_MISSION).order_by("group_id")
    )
    missions = dict(Mission.objects.filter(group_id__in=[m.group_id for m in rows]).values_list("group_id", "id"))
    member = actor_doc(principal.kind, str(principal.id))
    return [
        doc for m in rows if m.group_id in missions for doc in row_membership_docs(m, str(missions[m.group_id]), member)
    ]


def administrative_group_id(principal: Agent) -> str | None:
    group_id = (
        Group.objects.filter(organization_id=principal.organization_id, kind=Group.KIND_ADMIN)
        .values_list("id", flat=True)
        .first()
    )
    return None if group_id is None else urn(str(group_id))
