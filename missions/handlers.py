"""Handlers of the core commands (DESIGN §4a): Organizations, Agents,
sessions, Agent Cards, the priority policy, Missions and Memberships.

Each handler runs inside ``accept()`` with the Group row locked; it checks,
writes its own aggregate's rows and returns the Events to append. Membership
rows need no lock of their own: every change to a Group's Memberships holds
that Group's row lock.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection

from mwportal.protocol import GENESIS_HASH, ErrorCode, format_time, parse_time
from mwportal.protocol.signing import verify
from mwportal.protocol.snapshot import build_snapshot

from .authority import (
    COMBINED_STATEMENTS,
    AggregateRef,
    Decision,
    Emit,
    HandlerContext,
    check_revision,
    check_target_kind,
    db_time,
    db_uuid,
    system_action_id,
)
from .delivery import membership_notice, session_notice
from .guards import check_int, check_members, check_roles, check_text, check_uuid, refuse
from .models import (
    BUDGET_DIMENSIONS,
    GROUP_ROLES,
    ORG_ROLES,
    Agent,
    AgentCard,
    AgentSession,
    Group,
    GroupSnapshot,
    Membership,
    Mission,
    Organization,
)
from .policy import DEFAULT_POLICY, check_policy
from .registry import command, membership_removed_hooks, session_replaced_hooks
from .server_key import server_keypair
from .snapshots import group_state

# --- Organizations and Agents (administrative Group) -----------------------


@command("org.create", scope="admin", creates_group=True, actors=("system",))
def create_org(ctx: HandlerContext) -> Decision:
    body = ctx.body
    check_members(body, ["organization", "slug", "name"])
    org_id = check_uuid(body, "organization")
    slug = check_text(body, "slug", max_length=50)
    name = check_text(body, "name", max_length=200)
    if Organization.objects.filter(slug=slug).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"an Organization with slug {slug!r} exists", slug=slug)
    org = Organization.objects.create(
        id=org_id, slug=slug, name=name, priority_policy=DEFAULT_POLICY, created_at=ctx.now
    )
    Group.objects.create(
        id=ctx.group.id,
        organization=org,
        kind=Group.KIND_ADMIN,
        head_hash=GENESIS_HASH,
        revision=1,
        created_at=ctx.now,
    )
    ctx.group.organization_id = org_id
    ref = AggregateRef("group", ctx.group.id, 1)
    return Decision(
        [Emit("org.created", ref, {"organization": org_id, "slug": slug, "name": name, "policy": DEFAULT_POLICY})],
        ref,
    )


@command("agent.register", scope="admin", org_roles=("admin",), actors=("system", "agent"))
def register_agent(ctx: HandlerContext) -> Decision:
    """Register an Agent (a machine with its key) or a person (issue 16 item 5).

    A person's Django user and signing key are bound only as
    ``check_person_enrollment`` allows: an Organization admin never binds a
    user outside their Organization and never supplies a person's key; the
    person supplies it themselves, signed in (``agent.enroll``).
    """
    body = ctx.body
    check_members(body, ["agent", "name", "kind", "org_roles"], ["public_key", "user"])
    agent_id = check_uuid(body, "agent")
    name = check_text(body, "name", max_length=200)
    kind = body["kind"]
    if kind not in (Agent.KIND_AGENT, Agent.KIND_PERSON):
        raise refuse(ErrorCode.SCHEMA_VALIDATION_FAILED, "body.kind: must be 'agent' or 'person'", field="body.kind")
    roles = check_roles(body, "org_roles", ORG_ROLES)
    public_key = body.get("public_key") or ""
    if public_key:
        check_public_key(public_key)
    elif kind == Agent.KIND_AGENT:
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "body.public_key: an agent needs an Ed25519 public key",
            field="body.public_key",
        )
    user = check_person_enrollment(ctx, kind, public_key)
    if Agent.objects.filter(id=agent_id).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"agent {agent_id} exists", agent=agent_id)
    Agent.objects.create(
        id=agent_id,
        organization_id=ctx.group.organization_id,
        name=name,
        kind=kind,
        org_roles=roles,
        public_key=public_key,
        user=user,
        created_at=ctx.now,
    )
    ref = AggregateRef("agent", agent_id, 1)
    event_body = {"agent": agent_id, "name": name, "kind": kind, "org_roles": roles, "public_key": public_key}
    return Decision([Emit("agent.registered", ref, event_body)], ref)


def check_public_key(public_key: Any) -> None:
    """``body.public_key`` is an Ed25519 public key (base64url)."""
    from mwportal.protocol.signing import load_public_key

    try:
        load_public_key(public_key)
    except (TypeError, ValueError) as exc:
        raise refuse(ErrorCode.SCHEMA_VALIDATION_FAILED, f"body.public_key: {exc}", field="body.public_key") from None


def check_person_enrollment(ctx: HandlerContext, kind: str, public_key: str) -> Any:
    """The Django user ``body.user`` names, if any, checked against who enrolls (issue 16 item 5).

    A Django user belongs to an Organization through its person Agent
    (``Agent.user`` is one-to-one, ``Agent.organization`` the Organization):
    there is no other relation, and a user without an Agent belongs to none.
    So:

    - only a person is linked to a user: a user bound to a machine Agent's
      key would let whoever holds that key act as the person;
    - an Organization admin (an Agent actor) never supplies a person's key:
      the admin registers the person without one, and the person enrolls
      their own, signed in to the portal (``agent.enroll``);
    - an admin never links a user that does not already belong to the
      admin's Organization. Such a user already has their Agent, so an
      admin's Command never links a user; linking one stays with the
      server's operator (``mwp create-agent --kind person --user``, the
      demo), who registers the person without a key as well.

    Unknown users and users of other Organizations get the same answer, so
    the refusal tells an admin nothing about who exists elsewhere.
    """
    body = ctx.body
    if kind == Agent.KIND_PERSON and public_key and not ctx.actor.is_system:
        raise refuse(
            ErrorCode.AUTH_FORBIDDEN,
            "body.public_key: a person's key comes from the person: register them without one;"
            " they supply theirs signed in to the portal (agent.enroll)",
            field="body.public_key",
        )
    if body.get("user") is None:
        return None
    username = check_text(body, "user", max_length=150)
    if kind != Agent.KIND_PERSON:
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED, "body.user: only a person Agent is linked to a user", field="body.user"
        )
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.filter(username=username).first()
    if not ctx.actor.is_system:
        if user is None or not Agent.objects.filter(user=user, organization_id=ctx.group.organization_id).exists():
            raise refuse(
                ErrorCode.AUTH_FORBIDDEN,
                f"user {username!r} does not belong to this Organization; a person is enrolled by themselves"
                " or by an admin of an Organization they belong to",
                field="body.user",
            )
    elif user is None:
        raise refuse(ErrorCode.INVALID_COMMAND, f"no user {username!r}", field="body.user", reason="not_found")
    if Agent.objects.filter(user=user).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"user {username!r} already has an Agent")
    return user


@command("agent.enroll", scope="admin")
def enroll_agent(ctx: HandlerContext) -> Decision:
    """A person supplies their own Ed25519 public key (issue 16 item 5).

    Only a person without a key may, and only as themselves: a keyless Agent
    cannot sign, the system actor may not send this, so the one way to speak
    as it is a portal Command of the signed-in user whose Agent it is
    (``Auth.PORTAL``, the actor resolved from ``request.user``). The key is
    the one the person's browser (or tool) generated; nobody else ever held
    the private half. Replacing a key is not this Command.
    """
    check_members(ctx.body, ["public_key"])
    public_key = ctx.body["public_key"]
    if not isinstance(public_key, str) or not public_key:
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED, "body.public_key: must be a non-empty string", field="body.public_key"
        )
    check_public_key(public_key)
    # The Agent row is written only under its Organization's administrative
    # Group lock, which accept() holds: no concurrent enroll or register races.
    agent = Agent.objects.get(id=ctx.actor.id)
    if agent.kind != Agent.KIND_PERSON:
        raise refuse(
            ErrorCode.AUTH_FORBIDDEN, "agent.enroll is for a person; an agent's key is set when it is registered"
        )
    if agent.public_key:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "this person already has a key", agent=ctx.actor.id)
    if Agent.objects.filter(public_key=public_key).exists():
        # A key already bound to another Agent was not generated for this
        # person: whoever holds it could act as both.
        raise refuse(
            ErrorCode.AUTH_FORBIDDEN, "body.public_key: this key belongs to another Agent", field="body.public_key"
        )
    Agent.objects.filter(id=ctx.actor.id).update(public_key=public_key)
    # The Agent's second state: registered (revision 1), then enrolled.
    ref = AggregateRef("agent", ctx.actor.id, 2)
    return Decision([Emit("agent.enrolled", ref, {"agent": ctx.actor.id, "public_key": public_key})], ref)


@command("agent.open_session", scope="admin", self_authenticating=True)
def open_session(ctx: HandlerContext) -> Decision:
    """Open a new Agent Session and fence every older one (MWP-WRK-014).

    The body carries the signed session request of DESIGN §4; it is its own
    proof of identity, checked here against the Agent's key, its freshness and
    its single use.
    """
    check_members(ctx.body, ["request"])
    request = ctx.body["request"]
    if not isinstance(request, dict) or set(request) != {"agent", "issued_at", "nonce", "signature"}:
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "body.request: needs exactly agent, issued_at, nonce, signature",
            field="body.request",
        )
    if request["agent"] != ctx.actor.id:
        raise refuse(ErrorCode.SCHEMA_VALIDATION_FAILED, "agent: does not match the actor", field="agent")
    nonce = request["nonce"]
    if not isinstance(nonce, str) or not 8 <= len(nonce) <= 200:
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED, "nonce: must be a string of 8 to 200 characters", field="nonce"
        )
    issued_at = parse_time(request["issued_at"], "issued_at")
    if not isinstance(request["signature"], str) or not verify(ctx.actor.public_key, request, request["signature"]):
        raise refuse(ErrorCode.AUTH_INVALID_SIGNATURE, "the session request's signature does not verify")
    skew = timedelta(seconds=settings.MWP_SESSION_REQUEST_MAX_SKEW_SECONDS)
    if abs(ctx.now - issued_at) > skew:
        raise refuse(ErrorCode.AUTH_INVALID_SIGNATURE, "issued_at is not within 5 minutes of the server's clock")
    if AgentSession.objects.filter(agent_id=ctx.actor.id, nonce=nonce).exists():
        raise refuse(ErrorCode.AUTH_INVALID_SIGNATURE, "this session request was already used (replay)")
    epoch = ctx.actor.session_epoch + 1
    token = secrets.token_urlsafe(32)
    AgentSession.objects.filter(agent_id=ctx.actor.id, revoked_at__isnull=True).update(revoked_at=ctx.now)
    AgentSession.objects.create(
        agent_id=ctx.actor.id, epoch=epoch, token_hash=token_digest(token), nonce=nonce, created_at=ctx.now
    )
    Agent.objects.filter(id=ctx.actor.id).update(session_epoch=epoch)
    ref = AggregateRef("agent", ctx.actor.id, epoch)
    also = [consequence for hook in session_replaced_hooks for consequence in hook(ctx)]
    return Decision(
        [Emit("agent.session_opened", ref, {"agent": ctx.actor.id, "session_epoch": epoch})],
        ref,
        grants={"token": token, "session_epoch": epoch},
        also=also,
        notices=[session_notice(ctx.actor.id, epoch)],
    )


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@command("agent_card.publish", scope="admin")
def publish_agent_card(ctx: HandlerContext) -> Decision:
    """A new version of the actor's own Agent Card (capabilities, max concurrency)."""
    body = ctx.body
    check_members(body, ["capabilities", "max_concurrency"])
    capabilities = body["capabilities"]
    if not isinstance(capabilities, list):
        raise refuse(ErrorCode.SCHEMA_VALIDATION_FAILED, "body.capabilities: must be a list", field="body.capabilities")
    seen = set()
    for i, cap in enumerate(capabilities):
        if not isinstance(cap, dict) or set(cap) != {"id", "version"}:
            raise refuse(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                f"body.capabilities.{i}: needs exactly id and version",
                field=f"body.capabilities.{i}",
            )
        check_text(cap, "id", max_length=200)
        check_text(cap, "version", max_length=50)
        if cap["id"] in seen:
            raise refuse(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                f"body.capabilities.{i}: {cap['id']!r} is listed twice",
                field=f"body.capabilities.{i}",
            )
        seen.add(cap["id"])
    max_concurrency = check_int(body, "max_concurrency", minimum=1, maximum=1024)
    # Plain statements: this is a hot path (bench/commands.py). The
    # administrative Group's lock serialises an Agent's card versions.
    with connection.cursor() as cur:
        cur.execute(f"SELECT MAX(version) FROM {_T_CARD} WHERE agent_id = %s", [db_uuid(ctx.actor.id)])
        current = cur.fetchone()[0] or 0
        if ctx.envelope.target is not None:
            check_target_kind(ctx.envelope, "agent_card", ctx.actor.id)
            check_revision(ctx.envelope, current)
        version = current + 1
        cur.execute(
            f"INSERT INTO {_T_CARD} (agent_id, version, capabilities, max_concurrency, published_at)"
            f" VALUES (%s, %s, %s, %s, %s)",
            [db_uuid(ctx.actor.id), version, json.dumps(capabilities), max_concurrency, db_time(ctx.now)],
        )
    ref = AggregateRef("agent_card", ctx.actor.id, version)
    event_body = {
        "agent": ctx.actor.id,
        "version": version,
        "capabilities": capabilities,
        "max_concurrency": max_concurrency,
    }
    return Decision([Emit("agent_card.published", ref, event_body)], ref)


@command("org.set_priority_policy", scope="admin", org_roles=("mission_owner", "admin"))
def set_priority_policy(ctx: HandlerContext) -> Decision:
    """Set the Organization priority policy. Escalating Organization priority
    goes through policy or the MissionOwner, never a Coordinator (spec 11.1;
    MWP-WRK-009): the org role check of the spec refuses everyone else."""
    check_members(ctx.body, ["policy"])
    policy = check_policy(ctx.body["policy"])
    org = Organization.objects.get(id=ctx.group.organization_id)
    if ctx.envelope.target is not None:
        check_target_kind(ctx.envelope, "organization", str(org.id))
        check_revision(ctx.envelope, org.policy_revision)
    revision = org.policy_revision + 1
    Organization.objects.filter(id=org.id).update(priority_policy=policy, policy_revision=revision)
    ref = AggregateRef("organization", str(org.id), revision)
    return Decision([Emit("org.priority_policy_set", ref, {"policy": policy, "revision": revision})], ref)


# --- Missions and Memberships (Mission Groups) ------------------------------


def check_mission_budgets(body: dict[str, Any]) -> dict[str, Any]:
    """Optional Mission-wide budgets: ``{dimension: non-negative number or null}``."""
    budgets = body.get("budgets") or {}
    if not isinstance(budgets, dict):
        raise refuse(ErrorCode.SCHEMA_VALIDATION_FAILED, "body.budgets: must be an object", field="body.budgets")
    for name, value in budgets.items():
        if name not in BUDGET_DIMENSIONS:
            raise refuse(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                f"body.budgets.{name}: not a budget dimension",
                field=f"body.budgets.{name}",
            )
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
            raise refuse(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                f"body.budgets.{name}: must be a non-negative number or null",
                field=f"body.budgets.{name}",
            )
    return budgets


def found_mission(
    *,
    group_id: str,
    mission_id: str,
    org_id: str,
    title: str,
    objective: str,
    owner_id: str,
    now: datetime,
    budgets: dict[str, Any],
    parent: dict[str, str] | None = None,
) -> list[Emit]:
    """Create a Mission, its Group and the owner's Membership; the Group's first Events.

    Used by ``mission.create`` and by ``mission.create_child`` (whose new Group
    is a consequence of a Command in the parent Group).
    """
    if Mission.objects.filter(id=mission_id).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"mission {mission_id} exists", mission=mission_id)
    if Group.objects.filter(id=group_id).exists():
        raise refuse(ErrorCode.REVISION_CONFLICT, f"group {group_id} already exists", group=group_id)
    group = Group.objects.create(
        id=group_id,
        organization_id=org_id,
        kind=Group.KIND_MISSION,
        head_hash=GENESIS_HASH,
        revision=1,
        created_at=now,
    )
    Mission.objects.create(
        id=mission_id, organization_id=org_id, group=group, title=title, objective=objective,
        created_by_id=owner_id, created_at=now, budgets=budgets,
        parent_group_id=parent["group"] if parent else None,
        parent_workitem_id=parent["workitem"] if parent else None,
    )  # fmt: skip
    Membership.objects.create(group=group, agent_id=owner_id, roles=["owner"], epoch=1, updated_at=now)
    ref = AggregateRef("group", group_id, 1)
    created: dict[str, Any] = {
        "mission": mission_id,
        "organization": org_id,
        "title": title,
        "objective": objective,
        "budgets": budgets,
    }
    if parent:
        created["parent"] = parent
    return [
        Emit("mission.created", ref, created),
        Emit("membership.added", ref, {"agent": owner_id, "roles": ["owner"], "membership_epoch": 1}),
    ]


@command("mission.create", creates_group=True, org_roles=("mission_owner",))
def create_mission(ctx: HandlerContext) -> Decision:
    """Create a Mission and its Group; the actor becomes its ``owner`` member."""
    body = ctx.body
    check_members(body, ["mission", "title", "objective"], ["budgets"])
    org_id = ctx.actor.organization_id
    assert org_id is not None  # an Agent always belongs to an Organization
    events = found_mission(
        group_id=ctx.group.id, mission_id=check_uuid(body, "mission"), org_id=org_id,
        title=check_text(body, "title", max_length=300), objective=check_text(body, "objective", max_length=20_000),
        owner_id=ctx.actor.id, now=ctx.now, budgets=check_mission_budgets(body),
    )  # fmt: skip
    ctx.group.organization_id = org_id
    return Decision(events, AggregateRef("group", ctx.group.id, 1))


@dataclass(frozen=True, slots=True)
class _MemberRow:
    pk: int
    roles: list[str]
    epoch: int
    active: bool


_T_MEMBERSHIP = Membership._meta.db_table
_T_CARD = AgentCard._meta.db_table


def _membership_of(ctx: HandlerContext, agent_id: str) -> _MemberRow | None:
    """The Membership row, read with one plain statement (the write path is hot).

    No FOR UPDATE: every Membership change of this Group holds its row lock.
    """
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT id, roles, epoch, active FROM {_T_MEMBERSHIP} WHERE group_id = %s AND agent_id = %s",
            [db_uuid(ctx.group.id), db_uuid(agent_id)],
        )
        row = cur.fetchone()
    if row is None:
        return None
    roles = json.loads(row[1]) if isinstance(row[1], str | bytes) else row[1]
    return _MemberRow(row[0], roles, row[2], bool(row[3]))


def _set_roles(ctx: HandlerContext, agent_id: str, roles: list[str]) -> tuple[int, list[str]]:
    """Change an active member's roles and bump its epoch; ``(new epoch, old roles)``.

    On PostgreSQL one statement (a hot path): the UPDATE returns the roles the
    row had. SQLite's RETURNING cannot see a joined row, so there it reads
    first. An owner losing the role is checked after either way (a refusal
    rolls the whole Command back).
    """
    if not COMBINED_STATEMENTS:
        existing = _membership_of(ctx, agent_id)
        if existing is None or not existing.active:
            raise refuse(
                ErrorCode.INVALID_COMMAND, f"agent {agent_id} is not a member", agent=agent_id, reason="not_found"
            )
        _update_membership(existing.pk, roles=roles, epoch=existing.epoch + 1, active=True, now=ctx.now)
        return existing.epoch + 1, existing.roles
    with connection.cursor() as cur:
        cur.execute(
            f"UPDATE {_T_MEMBERSHIP} SET roles = %s, epoch = {_T_MEMBERSHIP}.epoch + 1, updated_at = %s"
            f" FROM (SELECT id, roles AS old_roles FROM {_T_MEMBERSHIP}"
            f" WHERE group_id = %s AND agent_id = %s AND active) AS old"
            f" WHERE {_T_MEMBERSHIP}.id = old.id RETURNING {_T_MEMBERSHIP}.epoch, old.old_roles",
            [json.dumps(roles), db_time(ctx.now), db_uuid(ctx.group.id), db_uuid(agent_id)],
        )
        row = cur.fetchone()
    if row is None:
        raise refuse(ErrorCode.INVALID_COMMAND, f"agent {agent_id} is not a member", agent=agent_id, reason="not_found")
    return row[0], json.loads(row[1]) if isinstance(row[1], str | bytes) else row[1]


def _update_membership(pk: int, *, roles: list[str] | None, epoch: int, active: bool, now: datetime) -> None:
    with connection.cursor() as cur:
        if roles is None:
            cur.execute(
                f"UPDATE {_T_MEMBERSHIP} SET epoch = %s, active = %s, updated_at = %s WHERE id = %s",
                [epoch, active, db_time(now), pk],
            )
        else:
            cur.execute(
                f"UPDATE {_T_MEMBERSHIP} SET roles = %s, epoch = %s, active = %s, updated_at = %s WHERE id = %s",
                [json.dumps(roles), epoch, active, db_time(now), pk],
            )


def _check_keeps_an_owner(ctx: HandlerContext, agent_id: str, new_roles: list[str] | None) -> None:
    """A Group always keeps at least one active owner."""
    if new_roles is not None and "owner" in new_roles:
        return
    others = (
        Membership.objects.filter(group_id=ctx.group.id, active=True)
        .exclude(agent_id=agent_id)
        .values_list("roles", flat=True)
    )
    if not any("owner" in roles for roles in others):
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "a Group must keep at least one owner")


@command("membership.add", group_roles=("owner",), target="group", cas=True)
def add_membership(ctx: HandlerContext) -> Decision:
    body = ctx.body
    check_members(body, ["agent", "roles"])
    agent_id = check_uuid(body, "agent")
    roles = check_roles(body, "roles", GROUP_ROLES)
    if not Agent.objects.filter(id=agent_id, organization_id=ctx.group.organization_id).exists():
        raise refuse(
            ErrorCode.INVALID_COMMAND, f"no agent {agent_id} in this Organization", agent=agent_id, reason="not_found"
        )
    existing = _membership_of(ctx, agent_id)
    if existing is not None and existing.active:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"agent {agent_id} is already a member", agent=agent_id)
    if existing is None:
        epoch = 1
        Membership.objects.create(group_id=ctx.group.id, agent_id=agent_id, roles=roles, epoch=1, updated_at=ctx.now)
    else:
        epoch = existing.epoch + 1
        _update_membership(existing.pk, roles=roles, epoch=epoch, active=True, now=ctx.now)
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision + 1)
    return Decision(
        [Emit("membership.added", ref, {"agent": agent_id, "roles": roles, "membership_epoch": epoch})],
        ref,
        notices=[membership_notice(ctx.group.id, agent_id, roles, epoch, True)],
    )


@command("membership.remove", group_roles=("owner",), target="group", cas=True)
def remove_membership(ctx: HandlerContext) -> Decision:
    body = ctx.body
    check_members(body, ["agent"])
    agent_id = check_uuid(body, "agent")
    existing = _membership_of(ctx, agent_id)
    if existing is None or not existing.active:
        raise refuse(ErrorCode.INVALID_COMMAND, f"agent {agent_id} is not a member", agent=agent_id, reason="not_found")
    _check_keeps_an_owner(ctx, agent_id, None)
    epoch = existing.epoch + 1
    _update_membership(existing.pk, roles=None, epoch=epoch, active=False, now=ctx.now)
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision + 1)
    # The removed member's work in this Group is fenced in the same
    # transaction: it may no longer execute here (its leases are revoked and
    # its ownership ends, so the Coordinator can re-offer at once).
    consequences = [emit for hook in membership_removed_hooks for emit in hook(ctx, agent_id)]
    return Decision(
        [Emit("membership.removed", ref, {"agent": agent_id, "membership_epoch": epoch}), *consequences],
        ref,
        notices=[membership_notice(ctx.group.id, agent_id, [], epoch, False)],
    )


@command("membership.set_roles", group_roles=("owner",), target="group", cas=True)
def set_membership_roles(ctx: HandlerContext) -> Decision:
    body = ctx.body
    check_members(body, ["agent", "roles"])
    agent_id = check_uuid(body, "agent")
    roles = check_roles(body, "roles", GROUP_ROLES)
    epoch, old_roles = _set_roles(ctx, agent_id, roles)
    if "owner" in old_roles:
        _check_keeps_an_owner(ctx, agent_id, roles)
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision + 1)
    return Decision(
        [Emit("membership.roles_set", ref, {"agent": agent_id, "roles": roles, "membership_epoch": epoch})],
        ref,
        notices=[membership_notice(ctx.group.id, agent_id, roles, epoch, True)],
    )


# --- snapshots, archival and tombstones (spec 16; MWP-MSN-009) ----------------


def take_snapshot(ctx: HandlerContext, *, final: bool) -> GroupSnapshot:
    """Sign the state at the current head (inside ``accept()``, Group locked)."""
    private_key, _ = server_keypair()
    head = ctx.group
    document = build_snapshot(
        private_key=private_key, organization=head.organization_id, group=head.id, sequence=head.last_sequence,
        head_hash=head.head_hash, state=group_state(head.id), created_at=format_time(ctx.now),
    )  # fmt: skip
    return GroupSnapshot.objects.create(
        group_id=head.id,
        sequence=head.last_sequence,
        head_hash=head.head_hash,
        document=document,
        final=final,
        created_at=ctx.now,
    )


@command("group.snapshot", scope="any", actors=("system",))
def snapshot_group(ctx: HandlerContext) -> Decision:
    check_members(ctx.body, ["at"], ["final"])
    if ctx.body["at"] != ctx.group.last_sequence:
        # The head moved since the snapshot was asked for; the caller asks again.
        raise refuse(ErrorCode.REVISION_CONFLICT, "the Group head moved", current=ctx.group.last_sequence)
    if GroupSnapshot.objects.filter(group_id=ctx.group.id, sequence=ctx.group.last_sequence).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "a snapshot at this sequence exists")
    snap = take_snapshot(ctx, final=bool(ctx.body.get("final")))
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision)
    body = {
        "sequence": snap.sequence,
        "head_hash": snap.head_hash,
        "state_hash": snap.document["state_hash"],
        "final": snap.final,
    }
    return Decision([Emit("group.snapshot_taken", ref, body)], ref)


@command("mission.archive", group_roles=("owner",), target="group", cas=True)
def archive_mission(ctx: HandlerContext) -> Decision:
    """Archive a finished Mission; a signed final snapshot follows at once (MWP-MSN-009)."""
    from .commands import system_command

    check_members(ctx.body, [])
    mission = Mission.objects.get(group_id=ctx.group.id)
    if mission.status not in ("completed", "failed", "cancelled"):
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"a Mission that is {mission.status} cannot be archived")
    Mission.objects.filter(id=mission.id).update(status="archived")
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision + 1)
    at = ctx.group.last_sequence + 1  # the archive Event's own sequence
    final = system_command(
        "group.snapshot",
        ctx.group.id,
        {"at": at, "final": True},
        action_id=system_action_id("final-snapshot", ctx.group.id),
        issued_at=ctx.now,
    )
    return Decision(
        [Emit("mission.archived", ref, {"mission": str(mission.id), "final_snapshot_at": at})], ref, followups=[final]
    )


@command("event.redact", group_roles=("owner",))
def redact_event(ctx: HandlerContext) -> Decision:
    """Record a legal deletion or security redaction as a tombstone Event.

    The redacted Event keeps its ID, sequence and hash (the table refuses any
    rewrite); the tombstone says which Event is withdrawn and why, so readers
    and audits can honour it without breaking the chain (MWP-MSN-009).
    """
    from .guards import check_int, check_text
    from .models import GroupEvent

    check_members(ctx.body, ["sequence", "reason"])
    sequence = check_int(ctx.body, "sequence", minimum=1)
    reason = check_text(ctx.body, "reason", max_length=2000)
    event = GroupEvent.objects.filter(group_id=ctx.group.id, sequence=sequence).first()
    if event is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND, f"no Event {sequence} in this Group", sequence=sequence, reason="not_found"
        )
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision)
    body = {"sequence": sequence, "event_id": str(event.event_id), "reason": reason}
    return Decision([Emit("event.redacted", ref, body)], ref)
