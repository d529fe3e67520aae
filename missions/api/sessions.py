"""Agent Sessions over REST (DESIGN §5, PROTOCOL §6.3): the four-phase HELLO in two requests.

The WebSocket runs the four HELLO phases on one connection; the REST binding
runs the same ``mwportal.protocol.handshake`` in two requests:

1. ``POST /api/v0.1/sessions/challenge`` with a ``HELLO/client_init`` frame
   answers ``HELLO/server_challenge``. Nothing is stored and nothing looked
   up: the server nonce carries the challenge's ID and expiry under an HMAC
   keyed by the installation's secret and bound to the Agent ID, key ID and
   client nonce, so any process of the installation can check the response
   (an unknown key is refused in step 2, like a bad signature).
2. ``POST /api/v0.1/sessions`` with the ``HELLO/client_response`` frame: the
   challenge is rebuilt from its server nonce (refused unless its MAC is
   this server's), ``verify_response`` checks the expiry and the signature
   over the transcript against the key the Registry binds to the Agent, and
   the control plane's ``ext.missionweaveprotocol.identity.session_open``
   Command issues the new Session Epoch (fencing every older session and
   revoking the Agent's leases, §6.3, §11.3) and the token:
   ``HELLO/server_accept`` (201). That Command's action ID is derived from
   the challenge ID, so a challenge opens one session at most: a second
   response is an ``ACTION_ID_COLLISION`` of the control plane's, answered
   as a failed proof.

Every failure of step 2 that concerns the proof (no such challenge, used
already, expired, unknown Agent or key, a key of another Principal, a wrong
signature) is one AUTH_INVALID_SIGNATURE, so a caller learns nothing about
which Agents or keys exist. A refusal of the handshake module says
``fatal: true`` for the WebSocket; REST has no connection to close, so the
member is dropped here.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mwportal.protocol import ErrorCode, ProtocolError, frames, handshake, jcs
from mwportal.protocol.errors import occurred_at_text
from mwportal.protocol.ids import bare, urn
from mwportal.protocol.registry import UNKNOWN_KEY, KeyBinding, KeyResolutionError
from mwportal.protocol.values import b64url_decode, b64url_encode

from ..auth import session_expires_at
from ..authority import accept
from ..commands import service_command
from ..handlers.sessions import SESSION_OPEN
from ..keyregistry import DjangoRegistry
from ..models import Agent
from ..views import BODY_ERRORS, read_body
from .openapi import hello

# How long a challenge may be answered (the reference implementation allows 30 s).
CHALLENGE_SECONDS = 60
_T = TypeVar("_T")


def _rest(step: Callable[[], _T]) -> _T:
    """Run a handshake step; a refusal loses ``fatal``, which names a connection REST does not have."""
    try:
        return step()
    except ProtocolError as exc:
        exc.fatal = None
        raise


def _frame(request: Request, phase: str) -> frames.Frame:
    """The body as a ``HELLO/<phase>`` frame (strict JSON, then the frame schema), else its refusal."""
    frame = _rest(lambda: frames.parse(read_body(request)))
    doc = frame.doc
    if doc.get("frameType") != "HELLO" or doc.get("phase") != phase:
        raise ProtocolError(
            ErrorCode.PROTOCOL_VIOLATION,
            f"body: this route takes a HELLO/{phase} frame",
            details={"reason": "unexpected-frame", "expected": f"HELLO/{phase}", "field": "body"},
            related_frame_id=frames.usable_id(doc.get("frameId")),
        )
    return frame


# serverNonce = base64url(random 16 | challenge ID 16 | expiry in ms 8 | HMAC-SHA256 32).
_RANDOM, _HEAD, _NONCE = 16, 40, 72
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _mac(head: bytes, agent_id: str, key_id: str, client_nonce: str) -> bytes:
    """The server nonce's MAC: over its head and the three members the client echoes, keyed by the
    installation's secret, so only this server's challenges (for exactly that Agent, key and client
    nonce) are answered."""
    secret = hashlib.sha256(b"mwp.rest.hello-challenge:" + settings.SECRET_KEY.encode()).digest()
    bound = jcs.canonicalize([agent_id, key_id, client_nonce])
    return hmac.new(secret, head + bound, hashlib.sha256).digest()


def _challenge(agent_id: str, key_id: str, client_nonce: str, server_nonce: str) -> handshake.Challenge | None:
    """The challenge ``server_nonce`` carries, rebuilt from it; None unless this server issued it."""
    try:
        raw = b64url_decode(server_nonce)
    except ValueError:
        return None
    head = raw[:_HEAD]
    if len(raw) != _NONCE or not hmac.compare_digest(raw[_HEAD:], _mac(head, agent_id, key_id, client_nonce)):
        return None
    expires = _EPOCH + timedelta(milliseconds=int.from_bytes(head[_RANDOM + 16 :], "big"))
    members = {  # DESIGN §5's transcript, as handshake.issue_challenge writes it
        "agentId": agent_id,
        "keyId": key_id,
        "clientNonce": client_nonce,
        "serverNonce": server_nonce,
        "protocolVersion": frames.PROTOCOL_VERSION,
        "challengeId": urn(uuid.UUID(bytes=head[_RANDOM : _RANDOM + 16])),
        "expiresAt": occurred_at_text(expires),
    }
    return handshake.Challenge.from_transcript(jcs.canonicalize(members))


def issue_challenge(client_init: frames.Frame, now: datetime) -> dict[str, Any]:
    """The ``HELLO/server_challenge`` answering ``client_init``.

    ``handshake.issue_challenge`` judges the frame (the phase, ``supportedVersions``); the challenge
    sent is one whose server nonce carries its ID and expiry under this server's MAC, so the
    response can be checked by any process of the installation with nothing stored between the
    two requests. Single use is the database's: the session it opens is a Command whose action ID
    is derived from the challenge ID (``open_session``).
    """
    _rest(lambda: handshake.issue_challenge(client_init, now, ttl=CHALLENGE_SECONDS))
    doc = client_init.doc
    expires_ms = (now - _EPOCH) // timedelta(milliseconds=1) + CHALLENGE_SECONDS * 1000
    head = secrets.token_bytes(_RANDOM) + uuid.uuid4().bytes + expires_ms.to_bytes(8, "big")
    mac = _mac(head, doc["agentId"], doc["keyId"], doc["clientNonce"])
    challenge = _challenge(doc["agentId"], doc["keyId"], doc["clientNonce"], b64url_encode(head + mac))
    assert challenge is not None  # built just now with this server's MAC
    return challenge.frame()


def agent_key_resolver(agent_id: str) -> Callable[[str], KeyBinding]:
    """``resolve_key`` for the Agent ``agent_id`` (``urn:uuid:``): its Organization's Registry."""

    def resolve(key_id: str) -> KeyBinding:
        try:
            agent = Agent.objects.select_related("organization").filter(id=bare(agent_id, "agentId")).first()
        except ProtocolError:
            agent = None
        if agent is None or agent.kind != Agent.KIND_AGENT:
            raise KeyResolutionError(UNKNOWN_KEY)
        return DjangoRegistry(agent.organization).resolve(key_id)

    return resolve


def open_session(client_response: frames.Frame, now: datetime) -> dict[str, Any]:
    """``HELLO/server_accept`` for a ``client_response`` answering a challenge of ours, else the refusal."""
    doc = client_response.doc
    challenge = _challenge(doc["agentId"], doc["keyId"], doc["clientNonce"], doc["serverNonce"])
    if challenge is None:
        raise _not_verified(doc)
    proven = _rest(
        lambda: handshake.verify_response(challenge, client_response, now, agent_key_resolver(challenge.agent_id))
    )
    agent = Agent.objects.only("organization_id").get(id=bare(proven.agent_id, "agentId"))
    # The control plane's session_open Command: epoch n + 1, fencing n and lower. Its action ID is
    # the challenge's, so a second response to one challenge is refused by the receipts' unique
    # (actor, actionId) whichever process it reaches.
    command = service_command(
        SESSION_OPEN,
        None,
        {"agentId": urn(str(agent.pk))},
        organization_id=str(agent.organization_id),
        action_id=str(uuid.uuid5(uuid.NAMESPACE_URL, "mwp:rest-hello:" + challenge.challenge_id)),
    )
    try:
        receipt = accept(command)
    except ProtocolError as exc:
        if exc.code is ErrorCode.ACTION_ID_COLLISION:
            raise _not_verified(doc) from None
        raise
    if receipt.get("replayed"):
        raise _not_verified(doc)
    grants = receipt["grants"]
    return frames.hello_server_accept(grants["sessionToken"], grants["sessionEpoch"], session_expires_at(now))


def _not_verified(doc: dict[str, Any]) -> ProtocolError:
    """The one answer for a response that answers no live challenge of ours (unknown, used, forged)."""
    return ProtocolError(
        ErrorCode.AUTH_INVALID_SIGNATURE,
        "the HELLO challenge signature could not be verified",
        related_frame_id=doc["frameId"],
    )


class SessionChallengeView(APIView):
    """HELLO phases 1 and 2 (§6.3): a ``HELLO/client_init`` frame in, ``HELLO/server_challenge`` out."""

    authentication_classes: list[Any] = []

    @extend_schema(
        request={"application/json": hello("helloClientInit")},
        responses={200: OpenApiResponse(hello("helloServerChallenge")), **BODY_ERRORS},
    )
    def post(self, request: Request) -> Response:
        return Response(issue_challenge(_frame(request, "client_init"), datetime.now(UTC)))


class SessionsView(APIView):
    """HELLO phases 3 and 4 (§6.3): ``HELLO/client_response`` in, ``HELLO/server_accept`` (a new Session) out."""

    authentication_classes: list[Any] = []

    @extend_schema(
        request={"application/json": hello("helloClientResponse")},
        responses={201: OpenApiResponse(hello("helloServerAccept")), **BODY_ERRORS},
    )
    def post(self, request: Request) -> Response:
        return Response(open_session(_frame(request, "client_response"), datetime.now(UTC)), status=201)
