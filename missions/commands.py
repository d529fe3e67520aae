"""Building Commands on the server side: the system actor and portal users.

Management commands, Celery tasks and portal views use these and then call
``accept()``; none of them writes an authoritative model itself.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from mwportal.protocol import SYSTEM_ACTOR, make_envelope, parse_envelope

from .authority import Auth, Command, accept, system_action_id
from .models import Agent, Group

Receipt = dict[str, Any]


def system_command(
    type_: str,
    group: str,
    body: dict[str, Any],
    *,
    action_id: str | None = None,
    target: dict[str, Any] | None = None,
    issued_at: datetime | None = None,
) -> Command:
    """A Command by the system actor. A deterministic ``action_id`` with a
    deterministic ``issued_at`` (the deadline that triggered it, say) makes
    the same system action idempotent: issued twice, it is accepted once."""
    raw = make_envelope(
        type=type_,
        actor=SYSTEM_ACTOR,
        group=group,
        body=body,
        session_epoch=0,
        action_id=action_id,
        target=target,
        issued_at=issued_at,
    )
    return Command(parse_envelope(raw, require_signature=False), Auth.SYSTEM)


def portal_command(
    agent: Agent,
    type_: str,
    group: str,
    body: dict[str, Any],
    *,
    target: dict[str, Any] | None = None,
    action_id: str | None = None,
) -> Command:
    """A Command by a person signed in to the portal (Django session)."""
    raw = make_envelope(
        type=type_,
        actor=str(agent.id),
        group=group,
        body=body,
        session_epoch=agent.session_epoch,
        action_id=action_id,
        target=target,
    )
    return Command(parse_envelope(raw, require_signature=False), Auth.PORTAL)


def create_organization(slug: str, name: str) -> tuple[str, str]:
    """Create an Organization and its administrative Group; ``(org_id, group_id)``.

    Running it twice for one slug answers with the existing Organization.
    """
    existing = Group.objects.filter(organization__slug=slug, kind=Group.KIND_ADMIN).first()
    if existing is not None:
        return str(existing.organization_id), str(existing.id)
    org_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"mwp:org:{slug}"))
    group_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"mwp:org-admin-group:{slug}"))
    accept(
        system_command(
            "org.create",
            group_id,
            {"organization": org_id, "slug": slug, "name": name},
            action_id=system_action_id("org.create", slug),
        )
    )
    return org_id, group_id


def register_agent(
    org_slug: str, name: str, kind: str, roles: list[str], public_key: str, user: str | None = None
) -> str:
    """Register an Agent in an Organization as the system actor; its id."""
    group = Group.objects.get(organization__slug=org_slug, kind=Group.KIND_ADMIN)
    agent_id = str(uuid.uuid4())
    body: dict[str, Any] = {"agent": agent_id, "name": name, "kind": kind, "org_roles": roles, "public_key": public_key}
    if user is not None:
        body["user"] = user
    accept(system_command("agent.register", str(group.id), body))
    return agent_id
