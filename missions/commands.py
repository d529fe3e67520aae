"""Building Commands on the server side: the Organization's control plane.

Management commands, Celery tasks and portal views use these and then call
``accept()``; none of them writes an authoritative model itself. Every
Command is a normative MWP 0.1 Command document (PROTOCOL §15.1), signed with
the control plane's key (``missions.service_keys``) and accepted as
``Auth.SERVICE``. People sign their own Commands in their browser with a key
that never leaves it (DESIGN §4): the server builds none for them.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from mwportal.protocol import jcs
from mwportal.protocol.command import build_command, format_timestamp, read_command
from mwportal.protocol.ids import new_urn, urn

from . import service_keys
from .authority import ADMIN_MEMBERSHIP_EPOCH, accept, system_action_id
from .intake import Auth, Command
from .models import Agent, Group, Membership, SigningKey

Receipt = dict[str, Any]


def service_command(
    kind: str,
    group: str | None,
    payload: dict[str, Any],
    *,
    organization_id: str,
    action_id: str | None = None,
    issued_at: datetime | None = None,
    expected_revision: int | None = None,
    work_item_id: str | None = None,
) -> Command:
    """A Command by the Organization's control plane. A deterministic ``action_id``
    with a deterministic ``issued_at`` (the deadline that triggered it, say)
    makes the same service action idempotent: issued twice, it is accepted once."""
    key = service_keys.control_plane(organization_id)
    assert key.principal is not None
    raw = build_command(
        kind,
        actor=key.principal,
        key=key,
        payload=payload,
        group=group,
        expected_revision=expected_revision,
        work_item_id=work_item_id,
        action_id=action_id,
        issued_at=issued_at,
    )
    return Command(read_command(raw, signing_hash=jcs.signing_hash(raw), key_id=key.key_id), Auth.SERVICE)


def group_service_command(kind: str, group: str, payload: dict[str, Any], **kw: Any) -> Command:
    """``service_command`` in ``group``'s Organization."""
    organization_id = str(Group.objects.values_list("organization_id", flat=True).get(id=group))
    return service_command(kind, group, payload, organization_id=organization_id, **kw)


def membership_epoch(agent: Agent | str, group: str) -> int | None:
    """The current Membership Epoch of ``agent`` in ``group`` (the administrative Group's is 1)."""
    kind = Group.objects.values_list("kind", flat=True).filter(id=group).first()
    if kind == Group.KIND_ADMIN:
        return ADMIN_MEMBERSHIP_EPOCH
    agent_id = agent.pk if isinstance(agent, Agent) else agent
    return (
        Membership.objects.filter(agent_id=agent_id, group_id=group, active=True)
        .values_list("epoch", flat=True)
        .first()
    )


def create_organization(slug: str, name: str) -> tuple[str, str]:
    """Create an Organization, its administrative Group and its service Principals;
    ``(org_id, admin_group_id)``. Running it twice for one slug answers the existing one."""
    existing = Group.objects.filter(organization__slug=slug, kind=Group.KIND_ADMIN).first()
    if existing is not None:
        return str(existing.organization_id), str(existing.id)
    org_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"mwp:org:{slug}"))
    group_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"mwp:org-admin-group:{slug}"))
    accept(
        service_command(
            "ext.mwportal.admin.organization_create",
            group_id,
            {"organizationId": urn(org_id), "slug": slug, "name": name},
            organization_id=org_id,
            action_id=system_action_id("org.create", slug),
        )
    )
    return org_id, group_id


def register_principal(
    org_slug: str,
    name: str,
    kind: str,
    roles: list[str],
    public_key: str | None,
    user: str | None = None,
) -> tuple[str, str | None]:
    """Register a Principal (``kind``: ``agent`` or ``person``) as the control plane;
    ``(principal_id, key_id)`` (no key ID when no key was given)."""
    group = Group.objects.get(organization__slug=org_slug, kind=Group.KIND_ADMIN)
    principal_id = str(uuid.uuid4())
    payload: dict[str, Any] = {
        "principal": {"type": Agent.ACTOR_TYPES[kind], "id": urn(principal_id)},
        "name": name,
        "organizationRoles": roles,
    }
    if public_key is not None:
        # The catalogue's publicKey is the common object; a bare key gets a new key ID, valid from now.
        payload["publicKey"] = (
            {"keyId": new_urn(), "algorithm": "Ed25519", "publicKey": public_key,
             "validFrom": format_timestamp(datetime.now().astimezone())}
            if isinstance(public_key, str)
            else public_key
        )  # fmt: skip
    if user is not None:
        payload["username"] = user
    accept(service_command(
        "ext.mwportal.registry.principal_register", str(group.id), payload, organization_id=str(group.organization_id)
    ))  # fmt: skip
    key_id = (
        SigningKey.objects.filter(principal_id=urn(principal_id)).values_list("key_id", flat=True).first()
        if public_key is not None
        else None
    )
    return principal_id, key_id


def register_agent(
    org_slug: str, name: str, kind: str, roles: list[str], public_key: str, user: str | None = None
) -> str:
    """Register an Agent (or a person) as the control plane; its id."""
    return register_principal(org_slug, name, kind, roles, public_key, user)[0]


def open_session(agent_id: str) -> tuple[str, int]:
    """Open a new Session for an Agent, as the bindings do after HELLO (§6.3):
    ``(session token, Session Epoch)``. The new epoch fences every older one."""
    agent = Agent.objects.only("organization_id").get(id=agent_id)
    receipt = accept(
        service_command(
            "ext.missionweaveprotocol.identity.session_open",
            None,
            {"agentId": urn(agent_id)},
            organization_id=str(agent.organization_id),
        )
    )
    grants = receipt["grants"]
    return str(grants["sessionToken"]), int(grants["sessionEpoch"])
