"""The Organization's administrative Group: its bootstrap, its Principals and their keys, the priority policy.

These are the project's own kinds (``ext.mwportal.*``, §18: what MWP 0.1
leaves to an Extension Profile). Every key a Principal signs with is bound in
the Organization's Registry (``missions.keyregistry``, §6.4) under a
``urn:uuid:`` key ID when the Principal or the key is registered; the
verifier resolves keys there and nowhere else.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from mwportal.protocol import GENESIS_HASH, ErrorCode
from mwportal.protocol.ids import bare, urn
from mwportal.protocol.registry import Principal, RegistrationError
from mwportal.protocol.values import b64url_decode

from ..authority import AggregateRef, Decision, Emit, HandlerContext, check_revision
from ..guards import refuse
from ..keyregistry import record_validity, register_key
from ..models import ORG_ROLES, Agent, Group, Organization, SigningKey, SigningKeyValidity
from ..policy import DEFAULT_POLICY, check_policy
from ..registry import command
from ..service_keys import AGENTS, CONTEXT_PACKAGER, CONTROL_PLANE, ROLES, principal_id, service_key
from .common import MODEL_KIND, WIRE_TYPE, payload_id, stamp

ORGANIZATION_CREATE = "ext.mwportal.admin.organization_create"
PRINCIPAL_REGISTER = "ext.mwportal.registry.principal_register"
PRINCIPAL_KEY_ENROLL = "ext.mwportal.registry.principal_key_enroll"
PRINCIPAL_KEY_REVOKE = "ext.mwportal.registry.principal_key_revoke"
PRIORITY_POLICY_SET = "ext.mwportal.scheduling.priority_policy_set"

_SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")


@command(ORGANIZATION_CREATE, scope="admin", creates_group=True, actors=("service",), bootstrap=True)
def create_organization(ctx: HandlerContext) -> Decision:
    """The Organization, its administrative Group and its service Principals.

    The Group Authority (which signs Events and snapshots) and the control
    plane come into being with the Organization, each with its key bound in
    the Registry, so that the first Event can be verified by anyone; so does
    its context packager Agent (``organization_agent``).
    """
    payload = ctx.payload
    org_id = payload_id(payload, "organizationId")
    if ctx.actor.id != principal_id(org_id, CONTROL_PLANE):
        # The bootstrap actor exists only once the handler creates it: it must be this Organization's own.
        raise refuse(ErrorCode.AUTH_FORBIDDEN, "an Organization is created by its own control plane")
    slug, name = payload["slug"], payload["name"]
    if not _SLUG.match(slug):
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "/payload/slug: letters, digits, '-' and '_' only",
            field="/payload/slug",
        )
    if Organization.objects.filter(slug=slug).exists() or Organization.objects.filter(id=org_id).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"an Organization with slug {slug!r} exists", slug=slug)
    org = Organization.objects.create(
        id=org_id, slug=slug, name=name, priority_policy=DEFAULT_POLICY, created_at=ctx.now
    )
    Group.objects.create(
        id=ctx.group.id, organization=org, kind=Group.KIND_ADMIN, head_hash=GENESIS_HASH, revision=1, created_at=ctx.now
    )
    ctx.group.organization_id = org_id
    for role, service_name in ROLES.items():
        key = service_key(org_id, role)
        service_id = principal_id(org_id, role)
        Agent.objects.create(
            id=service_id,
            organization=org,
            name=service_name,
            kind="service",
            org_roles=[],
            public_key=key.public_key,
            created_at=ctx.now,
        )
        bind_key(org, principal=Principal("service", urn(service_id)), key_id=key.key_id,
                 public_key=key.public_key, valid_from=stamp(ctx.now), field="service")  # fmt: skip
    for role in AGENTS:
        organization_agent(org, role, ctx.now)
    ref = AggregateRef("organization", org_id, 1)
    event = {"organizationId": urn(org_id), "slug": slug, "name": name}
    return Decision([Emit("ext.mwportal.admin.organization_created", ref, event)], ref)


def organization_agent(org: Organization, role: str, now: datetime) -> Agent:
    """The Organization-owned Agent Principal of ``role`` (``service_keys.AGENTS``), registered with its
    key bound in the Registry the first time it is needed: with the Organization, or on first use in an
    Organization created before the role existed (idempotent; called only inside ``accept()``)."""
    agent_id = principal_id(str(org.id), role)
    agent = Agent.objects.filter(id=agent_id).first()
    if agent is not None:
        return agent
    key = service_key(str(org.id), role)
    agent = Agent.objects.create(id=agent_id, organization=org, name=AGENTS[role], kind=Agent.KIND_AGENT,
                                 org_roles=[], public_key=key.public_key, created_at=now)  # fmt: skip
    bind_key(org, principal=Principal("agent", urn(agent_id)), key_id=key.key_id, public_key=key.public_key,
             valid_from=stamp(now), field=role)  # fmt: skip
    return agent


def context_packager_agent(org: Organization, now: datetime) -> Agent:
    """The Agent that generates and signs the Context Package a replacement Coordinator receives (§7.2)."""
    return organization_agent(org, CONTEXT_PACKAGER, now)


def bind_key(
    org: Organization, *, principal: Principal, key_id: str, public_key: str, valid_from: str, field: str
) -> SigningKey:
    """Bind a Principal's key in the Registry (§6.4), refusing what the Registry refuses.

    The key ID is a ``urn:uuid:`` URI (DESIGN §4); the Registry's own checks
    (a point on the curve, no key ID rebound, no key under two IDs) answer
    SCHEMA_VALIDATION_FAILED or INVALID_STATE_TRANSITION naming the rule.
    """
    bare(key_id, f"{field}/keyId")
    try:
        raw = b64url_decode(public_key)
    except ValueError:
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED, f"{field}/publicKey: not base64url", field=f"{field}/publicKey"
        ) from None
    try:
        return register_key(org, key_id=key_id, principal=principal, public_key=raw, valid_from=valid_from)
    except RegistrationError as exc:
        reason = exc.reason
        if reason in ("key-id-rebinding", "key-id-alias", "public-key-reuse"):
            raise refuse(
                ErrorCode.INVALID_STATE_TRANSITION,
                f"{field}: the Registry refuses this key ({reason})",
                field=field,
                reason=reason,
            ) from None
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"{field}: the Registry refuses this key ({reason})",
            field=field,
            reason=reason,
        ) from None


@command(PRINCIPAL_REGISTER, scope="admin", actors=("service",))
def register_principal(ctx: HandlerContext) -> Decision:
    """Register a human or Agent Principal, with its key when it has one (issue 16 item 5).

    Only the Organization's services issue it: an Organization admin acts
    through the control plane, which never passes a person's key on the
    admin's behalf. An Agent is registered with its key; a person is
    registered without one and enrolls their own (``principal_key_enroll``),
    or, for scripts and tests, with a software key the operator made
    (``mwp create-human``). A Django user is linked only to a person, and
    only a user who has no Principal yet.
    """
    payload = ctx.payload
    actor = payload["principal"]
    kind = MODEL_KIND.get(actor["type"])
    if kind not in (Agent.KIND_AGENT, Agent.KIND_PERSON):
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "/payload/principal/type: an Organization registers agent and human Principals; its services come with it",
            field="/payload/principal/type",
        )
    principal_id = bare(actor["id"], "/payload/principal/id")
    roles = list(payload["organizationRoles"])
    for role in roles:
        if role not in ORG_ROLES:
            raise refuse(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                f"/payload/organizationRoles: {role!r} is not one of {', '.join(ORG_ROLES)}",
                field="/payload/organizationRoles",
            )
    public_key = payload.get("publicKey")
    if public_key is None and kind == Agent.KIND_AGENT:
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "/payload/publicKey: an Agent is registered with its Ed25519 key (§6.3)",
            field="/payload/publicKey",
        )
    user = _user_to_link(payload.get("username"), kind)
    if Agent.objects.filter(id=principal_id).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "this Principal is registered", principal=urn(principal_id))
    org = Organization.objects.get(id=ctx.group.organization_id)
    Agent.objects.create(
        id=principal_id,
        organization=org,
        name=payload["name"],
        kind=kind,
        org_roles=sorted(roles),
        public_key=public_key["publicKey"] if public_key else "",
        user=user,
        created_at=ctx.now,
    )
    event: dict[str, Any] = {
        "principal": {"type": actor["type"], "id": urn(principal_id)},
        "name": payload["name"],
        "organizationRoles": sorted(roles),
    }
    if public_key is not None:
        _enroll(org, actor["type"], principal_id, public_key, ctx)
        event["keyId"] = public_key["keyId"]
    ref = AggregateRef("agent", principal_id, 1)
    return Decision([Emit("ext.mwportal.registry.principal_registered", ref, event)], ref)


def _user_to_link(username: str | None, kind: str) -> Any:
    """The Django user ``username`` names: only a person is linked, and only a user with no Principal yet."""
    if username is None:
        return None
    if kind != Agent.KIND_PERSON:
        raise refuse(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "/payload/username: only a human Principal is linked to a user",
            field="/payload/username",
        )
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise refuse(ErrorCode.INVALID_COMMAND, f"no user {username!r}", field="/payload/username", reason="not_found")
    if Agent.objects.filter(user=user).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"user {username!r} already has a Principal")
    return user


def _enroll(
    org: Organization, wire_type: str, principal_id: str, public_key: dict[str, Any], ctx: HandlerContext
) -> None:
    """Bind ``public_key`` (the common ``publicKey`` object) to the Principal in the Registry.

    A key given with validity boundaries is refused: a new binding starts
    valid, and its end is a later, append-only record (§6.4).
    """
    for boundary in ("validUntil", "revokedAt"):
        if public_key.get(boundary) is not None:
            raise refuse(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                f"/payload/publicKey/{boundary}: a key is enrolled valid; its end is recorded later",
                field=f"/payload/publicKey/{boundary}",
            )
    if SigningKey.objects.filter(organization=org, key_id=public_key["keyId"]).exists():
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            "/payload/publicKey/keyId: this key ID is bound already; a new key is a new key ID",
            field="/payload/publicKey/keyId",
            reason="key-id-rebinding",
        )
    bind_key(
        org,
        principal=Principal(wire_type, urn(principal_id)),
        key_id=public_key["keyId"],
        public_key=public_key["publicKey"],
        valid_from=public_key["validFrom"],
        field="/payload/publicKey",
    )


@command(PRINCIPAL_KEY_ENROLL, scope="admin", actors=("human", "service"))
def enroll_principal_key(ctx: HandlerContext) -> Decision:
    """The public half of a key a person's own browser (or tool) generated is bound to them (issue 19 item 2).

    Either the person signs it with a key already enrolled (only as
    themselves), or the portal's control plane issues it for the person whose
    Django sign-in it authenticated, naming them in ``principal``: the first
    key of a browser has nothing to sign with yet. Nobody else binds a key to
    a person, and the private half never leaves where it was made. A new
    device is a new key ID (DESIGN §4); a key ID or a key already bound, to
    anyone, is refused by the Registry.
    """
    named = ctx.payload.get("principal")
    if ctx.actor.type == "service":
        if named is None or named["type"] != "human":
            raise refuse(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                "/payload/principal: the control plane enrolls a key for the person it names",
                field="/payload/principal",
            )
        agent = Agent.objects.filter(id=bare(named["id"], "/payload/principal/id"), kind=Agent.KIND_PERSON).first()
        if agent is None or str(agent.organization_id) != str(ctx.group.organization_id):
            raise refuse(ErrorCode.INVALID_COMMAND, "no such person in this Organization", reason="not_found")
    else:
        agent = Agent.objects.get(id=ctx.actor.id)
        if agent.kind != Agent.KIND_PERSON or (named is not None and named != {"type": "human", "id": urn(agent.id)}):
            raise refuse(ErrorCode.AUTH_FORBIDDEN, f"{PRINCIPAL_KEY_ENROLL}: a person enrolls only their own key")
    public_key = ctx.payload["publicKey"]
    org = Organization.objects.get(id=agent.organization_id)
    _enroll(org, WIRE_TYPE[agent.kind], str(agent.id), public_key, ctx)
    if not agent.public_key:
        Agent.objects.filter(id=agent.id).update(public_key=public_key["publicKey"])
    principal_urn = urn(str(agent.id))
    ref = AggregateRef("agent", str(agent.id), _principal_revision(org, principal_urn))
    event = {"principal": {"type": "human", "id": principal_urn}, "keyId": public_key["keyId"]}
    return Decision([Emit("ext.mwportal.registry.principal_key_enrolled", ref, event)], ref)


def _principal_revision(org: Organization, principal_urn: str) -> int:
    """The Principal's states: registered (revision 1), then one per key enrolled and per key revoked."""
    keys = SigningKey.objects.filter(organization=org, principal_type="human", principal_id=principal_urn)
    revoked = SigningKeyValidity.objects.filter(key__in=keys, revoked_at__isnull=False).count()
    return 1 + keys.count() + revoked


@command(PRINCIPAL_KEY_REVOKE, scope="admin", actors=("human", "agent", "service"), org_roles=("admin",))
def revoke_principal_key(ctx: HandlerContext) -> Decision:
    """An Organization admin revokes a person's key (DESIGN §4): the key's validity history gains a
    ``revokedAt`` of now (§6.4, append-only), so a Command it signs from now on is refused."""
    org = Organization.objects.get(id=ctx.group.organization_id)
    key = SigningKey.objects.filter(organization=org, key_id=ctx.payload["keyId"], principal_type="human").first()
    if key is None:
        raise refuse(ErrorCode.INVALID_COMMAND, "no such person's key in this Organization", reason="not_found")
    if SigningKeyValidity.objects.filter(key=key, revoked_at__isnull=False).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "this key is revoked already", reason="revoked")
    revoked_at = stamp(ctx.now)
    try:
        record_validity(key, revoked_at=revoked_at, now=ctx.now)
    except RegistrationError as exc:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"the Registry refuses this record ({exc.reason})") from None
    ref = AggregateRef("agent", bare(key.principal_id, "/payload/keyId"), _principal_revision(org, key.principal_id))
    event: dict[str, Any] = {"principal": {"type": "human", "id": key.principal_id}, "keyId": key.key_id,
                             "revokedAt": revoked_at}  # fmt: skip
    if ctx.payload.get("reason"):
        event["reason"] = ctx.payload["reason"]
    return Decision([Emit("ext.mwportal.registry.principal_key_revoked", ref, event)], ref)


@command(PRIORITY_POLICY_SET, scope="admin", org_roles=("mission_owner", "admin"), actors=("human", "agent", "service"))
def set_priority_policy(ctx: HandlerContext) -> Decision:
    """The Organization priority policy. Escalating Organization priority goes
    through policy or a MissionOwner, never a Coordinator (§11.1): the
    Organization role check refuses everyone else."""
    policy = check_policy(ctx.payload["policy"])
    org = Organization.objects.get(id=ctx.group.organization_id)
    check_revision(ctx.command, org.policy_revision)
    revision = org.policy_revision + 1
    Organization.objects.filter(id=org.id).update(priority_policy=policy, policy_revision=revision)
    ref = AggregateRef("organization", str(org.id), revision)
    event = {"policy": policy, "revision": revision}
    return Decision([Emit("ext.mwportal.scheduling.priority_policy_changed", ref, event)], ref)
