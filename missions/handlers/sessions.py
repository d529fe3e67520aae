"""Agent Sessions and Agent Cards: the two Organization-scoped bootstrap Commands (§6.1, §6.3, §15.1).

Both are issued by an Organization service and name no Group; their Events
(``..._session_opened``, ``..._agent_card_registered``) carry no Group
position (§15.2). The Group Authority appends them outside every Group
sequence; no Group lock is held, so each handler locks the Agent's row, which
serialises that Agent's sessions and card versions.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import UTC, datetime
from typing import Any

from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.command import Key
from mwportal.protocol.ids import urn
from mwportal.protocol.jcs import canonicalize, sha256_hash
from mwportal.protocol.registry import KeyResolutionError
from mwportal.protocol.values import b64url_decode
from mwportal.protocol.verification import VerificationFailed, sign_document, verify_document

from ..authority import AggregateRef, Decision, Emit, HandlerContext, check_revision
from ..delivery import session_notice
from ..guards import refuse
from ..keyregistry import DjangoRegistry
from ..models import Agent, AgentCard, AgentSession, Organization, SigningKey
from ..registry import card_registered_hooks, command, session_replaced_hooks
from .common import payload_id, principal_in, stamp

SESSION_OPEN = "ext.missionweaveprotocol.identity.session_open"
SESSION_OPENED = "ext.missionweaveprotocol.identity.session_opened"
AGENT_CARD_REGISTER = "ext.missionweaveprotocol.registry.agent_card_register"
AGENT_CARD_REGISTERED = "ext.missionweaveprotocol.registry.agent_card_registered"


def token_digest(token: str) -> str:
    """What is stored of a session token: its SHA-256 (the token leaves once, in the grant)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@command(SESSION_OPEN, scope="organization", actors=("service",))
def open_session(ctx: HandlerContext) -> Decision:
    """A new Session Epoch for the Agent; every older session is fenced (§6.3).

    The binding (the four-phase HELLO, or its REST form) has verified the
    Agent's signature over the challenge before the control plane issues
    this; the handler issues epoch n + 1, revokes every session at n or
    lower, and, in the same transaction, revokes the Agent's active
    Execution Leases in every Group (§11.3, the session-replaced hooks). The
    session token is in the receipt's grants only, never in an Event.
    """
    agent_id = payload_id(ctx.payload, "agentId")
    agent = _organization_agent(ctx, agent_id, "/payload/agentId", lock=True)
    epoch = agent.session_epoch + 1
    token = secrets.token_urlsafe(32)
    AgentSession.objects.filter(agent_id=agent_id, revoked_at__isnull=True).update(revoked_at=ctx.now)
    AgentSession.objects.create(
        agent_id=agent_id, epoch=epoch, token_hash=token_digest(token), nonce=ctx.command.action_id, created_at=ctx.now
    )
    Agent.objects.filter(id=agent_id).update(session_epoch=epoch)
    also = [consequence for hook in session_replaced_hooks for consequence in hook(ctx, agent_id, epoch)]
    ref = AggregateRef("agent", agent_id, epoch)
    return Decision(
        [Emit(SESSION_OPENED, ref, {"agentId": urn(agent_id), "sessionEpoch": epoch})],
        ref,
        grants={"sessionToken": token, "sessionEpoch": epoch},
        also=also,
        notices=[session_notice(agent_id, epoch)],
    )


def _organization_agent(ctx: HandlerContext, agent_id: str, field: str, *, lock: bool = False) -> Agent:
    """The Agent Principal ``agent_id`` of the issuing service's Organization.

    Humans and services have no Agent Session (§6.3: their Commands carry
    none) and no Agent Card. ``lock``: the row is locked (an Organization-scoped
    Command holds no Group lock, so the Agent's row serialises its sessions).
    """
    rows = Agent.objects.select_for_update() if lock else Agent.objects
    agent = rows.filter(id=agent_id, organization_id=ctx.actor.organization_id).first()
    if agent is None:
        raise refuse(ErrorCode.INVALID_COMMAND, f"{field}: no such Agent in this Organization",
                     field=field, reason="not_found")  # fmt: skip
    if agent.kind != Agent.KIND_AGENT:
        raise refuse(ErrorCode.INVALID_COMMAND, f"{field}: names a {agent.kind}, not an Agent", field=field)
    return agent


@command(AGENT_CARD_REGISTER, scope="organization", actors=("service",))
def register_agent_card(ctx: HandlerContext) -> Decision:
    """The Registry service registers a signed Agent Card version (§6.1).

    The card is the Organization's, not the Agent's own word: it must be
    signed by a service Principal of this Organization whose key is in the
    Registry (the ``agent-card`` profile of §6.4), name this Organization,
    list only keys the Registry binds to this Agent, and carry a higher
    version than the Agent's current card.
    """
    card = ctx.payload["card"]
    org = Organization.objects.get(id=ctx.actor.organization_id)
    if card["organizationId"] != urn(str(org.id)):
        raise refuse(
            ErrorCode.AUTH_FORBIDDEN,
            "/payload/card/organizationId: an Organization registers its own Agents' cards",
            field="/payload/card/organizationId",
        )
    agent_id = payload_id(card, "agentId")
    agent = _organization_agent(ctx, agent_id, "/payload/card/agentId", lock=True)
    _verify_card_signature(org, card)
    _check_card_keys(org, agent, card)
    _refuse_credentials(card)
    principal_in(str(org.id), card["owner"], "/payload/card/owner")
    current = AgentCard.objects.filter(agent_id=agent_id).order_by("-version").values_list("version", flat=True).first()
    current = current or 0
    check_revision(ctx.command, current)
    version = card["cardVersion"]
    if version <= current:
        raise ProtocolError(
            ErrorCode.REVISION_CONFLICT,
            f"an Agent Card version must increase: the Agent is at version {current}",
            details={"field": "/payload/card/cardVersion"},
            current_revision=current,
        )
    AgentCard.objects.create(
        agent_id=agent_id,
        version=version,
        capabilities=card["capabilities"],
        max_concurrency=card["maxConcurrency"],
        published_at=ctx.now,
        document=card,
    )
    also = [c for hook in card_registered_hooks for c in hook(ctx, agent_id, version, card["capabilities"])]
    ref = AggregateRef("agent", agent_id, version)
    return Decision([Emit(AGENT_CARD_REGISTERED, ref, {"agentId": urn(agent_id), "version": version})], ref, also=also)


# What a card must not carry (§6.1: no reusable credentials). A member whose name, lowercased without
# "-" and "_", is one of these, anywhere in the card but its signature (the schema closes every object
# except a capability's ``constraints`` and ``extensions``, where such a member could hide) ...
CREDENTIAL_NAMES = frozenset(
    {
        "password", "passwd", "passphrase", "secret", "clientsecret", "token", "accesstoken", "refreshtoken",
        "bearertoken", "sessiontoken", "apikey", "apitoken", "privatekey", "credential", "credentials",
        "authorization", "cookie", "seed",
    }
)  # fmt: skip
# ... and any string that is one: a PEM private key, an HTTP ``Bearer``/``Basic`` authorization value (the
# scheme and one token, nothing else), or a URI with a password in its userinfo (``wss://user:pass@host``).
_CREDENTIAL_TEXT = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----|^\s*(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}\s*$"
    r"|^[a-z][a-z0-9+.-]*://[^/@\s]*:[^/@\s]*@",
    re.IGNORECASE,
)


def credential_in(value: Any, pointer: str = "") -> str | None:
    """The JSON pointer of the first credential-looking member or string of ``value``, else None."""
    if isinstance(value, dict):
        for name, member in value.items():
            here = f"{pointer}/{name}"
            if here == "/signature":
                continue  # the Organization's signature over the card, public by construction
            if re.sub(r"[-_]", "", str(name)).lower() in CREDENTIAL_NAMES:
                return here
            found = credential_in(member, here)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, member in enumerate(value):
            found = credential_in(member, f"{pointer}/{i}")
            if found is not None:
                return found
    elif isinstance(value, str) and _CREDENTIAL_TEXT.search(value):
        return pointer
    return None


def _refuse_credentials(card: dict[str, Any]) -> None:
    """§6.1: an Agent Card never carries reusable credentials (``CREDENTIAL_NAMES``, ``_CREDENTIAL_TEXT``)."""
    found = credential_in(card)
    if found is not None:
        field = f"/payload/card{found}"
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"{field}: an Agent Card must not carry credentials (§6.1)",
            field=field,
            reason="credential-in-card",
        )


def _verify_card_signature(org: Organization, card: dict[str, Any]) -> None:
    """The six stages over the card (profile ``agent-card``), then: the signer is a service of this Organization."""
    try:
        verified = verify_document(canonicalize(card), "agent-card", DjangoRegistry(org))
    except VerificationFailed as exc:
        raise refuse(exc.wire_code, f"/payload/card: {exc.wire_message}", field="/payload/card") from None
    signer = verified.principal
    if (
        signer.type != "service"
        or not Agent.objects.filter(organization=org, kind="service", id=signer.id.removeprefix("urn:uuid:")).exists()
    ):
        raise refuse(
            ErrorCode.AUTH_INVALID_SIGNATURE,
            "/payload/card/signature: an Agent Card is signed by a service of its Organization (§6.1)",
            field="/payload/card/signature",
        )


def _check_card_keys(org: Organization, agent: Agent, card: dict[str, Any]) -> None:
    """Each public key the card lists is one the Registry binds to this Agent, with the same bytes."""
    registry = DjangoRegistry(org)
    for i, listed in enumerate(card["publicKeys"]):
        field = f"/payload/card/publicKeys/{i}"
        try:
            binding = registry.resolve(listed["keyId"])
        except KeyResolutionError:
            binding = None
        if (
            binding is None
            or (binding.principal.type, binding.principal.id) != ("agent", urn(str(agent.id)))
            or binding.public_key != b64url_decode(listed["publicKey"])
        ):
            raise refuse(
                ErrorCode.INVALID_COMMAND,
                f"{field}: not a key the Registry binds to this Agent",
                field=field,
                reason="key-not-registered",
            )


def card_document(
    *,
    organization_id: str,
    agent: Agent,
    owner: dict[str, str],
    version: int,
    capabilities: list[dict[str, Any]],
    max_concurrency: int,
    public_keys: list[dict[str, Any]],
    endpoint: str,
    signer: Key,
    issued_at: datetime,
    display_name: str | None = None,
) -> dict[str, Any]:
    """A normative Agent Card (agent-card.schema.json) signed by ``signer``, a service key of the Organization.

    What the Registry service sends in ``agent_card_register``; ``public_keys``
    are the Agent's Registry bindings as common ``publicKey`` objects.
    """
    card = {
        "agentId": urn(str(agent.id)),
        "organizationId": urn(organization_id),
        "cardVersion": version,
        "displayName": display_name or agent.name,
        "owner": owner,
        "status": "active",
        "protocolVersions": ["0.1"],
        "endpoints": [{"transport": "wss", "uri": endpoint}],
        "publicKeys": public_keys,
        "capabilities": capabilities,
        "maxConcurrency": max_concurrency,
        "issuedAt": stamp(issued_at),
    }
    return sign_document(card, key_id=signer.key_id, seed=signer.seed, profile="agent-card")


def capability(
    capability_id: str,
    version: str,
    *,
    verified_evidence: list[str],
    schema_base: str = "https://schemas.mwportal.local",
) -> dict[str, Any]:
    """A card capability (agent-card.schema.json): declared input and output schemas and the
    Organization's verification Evidence for it (``urn:uuid:`` IDs, at least one, §6.1).

    The schema hashes commit to the schemas' URIs (``sha256:`` of their JCS
    text), which is all the portal knows of a schema it names but does not host.
    """
    input_schema = f"{schema_base}/{capability_id}/{version}/input"
    output_schema = f"{schema_base}/{capability_id}/{version}/output"
    return {
        "id": capability_id,
        "version": version,
        "inputSchema": input_schema,
        "inputSchemaHash": sha256_hash(canonicalize(input_schema)),
        "outputSchema": output_schema,
        "outputSchemaHash": sha256_hash(canonicalize(output_schema)),
        "constraints": {},
        "verifiedEvidence": verified_evidence,
    }


def issue_agent_card(
    agent_id: str,
    capabilities: list[dict[str, Any]],
    *,
    max_concurrency: int = 1,
    endpoint: str = "wss://localhost/mwp/0.1",
    now: datetime | None = None,
) -> int:
    """The Registry service's act (§6.1): sign the Agent's next card with the control plane's key,
    listing the keys the Registry binds to it, and register it; the new card version.

    What the operator's tools, the demo and the tests use; the card's owner is
    the control plane (the Organization), its keys every binding of the Agent.
    """
    from ..authority import accept
    from ..commands import service_command
    from ..service_keys import CONTROL_PLANE, control_plane, principal_id

    agent = Agent.objects.select_related("organization").get(id=agent_id)
    org_id = str(agent.organization_id)
    keys = SigningKey.objects.filter(
        organization_id=org_id, principal_type="agent", principal_id=urn(agent_id)
    ).order_by("registered_at", "key_id")
    public_keys = [
        {"keyId": k.key_id, "algorithm": k.algorithm, "publicKey": k.public_key, "validFrom": k.valid_from}
        for k in keys
    ]
    version = (
        AgentCard.objects.filter(agent_id=agent_id).order_by("-version").values_list("version", flat=True).first() or 0
    ) + 1
    moment = now or datetime.now(UTC)
    card = card_document(
        organization_id=org_id,
        agent=agent,
        owner={"type": "service", "id": urn(principal_id(org_id, CONTROL_PLANE))},
        version=version,
        capabilities=capabilities,
        max_concurrency=max_concurrency,
        public_keys=public_keys,
        endpoint=endpoint,
        signer=control_plane(org_id),
        issued_at=moment,
    )
    accept(service_command(AGENT_CARD_REGISTER, None, {"card": card}, organization_id=org_id, issued_at=moment))
    return version
