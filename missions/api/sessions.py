"""Agent Sessions over REST (DESIGN §5, PROTOCOL §6.3): the four-phase HELLO in two requests.

The WebSocket runs the four HELLO phases on one connection; the REST binding
runs the same ``mwportal.protocol.handshake`` in two requests:

1. ``POST /api/v0.1/sessions/challenge`` with a ``HELLO/client_init`` frame
   answers ``HELLO/server_challenge``. Between the two requests the server
   keeps only the challenge's transcript bytes, in the cache under its server
   nonce, for the challenge's lifetime (``CHALLENGE_SECONDS``); nothing
   reaches the database before the Agent has proven its key, and the key is
   not looked up yet (an unknown one is refused in step 2, like a bad
   signature).
2. ``POST /api/v0.1/sessions`` with the ``HELLO/client_response`` frame: the
   challenge named by ``serverNonce`` is taken out of the cache (used once,
   whatever the outcome), ``verify_response`` checks the signature over it
   against the key the Registry binds to the Agent, and the control plane's
   ``ext.missionweaveprotocol.identity.session_open`` Command issues the new
   Session Epoch (fencing every older session and revoking the Agent's
   leases, §6.3, §11.3) and the token: ``HELLO/server_accept`` (201).

Every failure of step 2 that concerns the proof (no such challenge, used
already, expired, unknown Agent or key, a key of another Principal, a wrong
signature) is one AUTH_INVALID_SIGNATURE, so a caller learns nothing about
which Agents or keys exist. A refusal of the handshake module says
``fatal: true`` for the WebSocket; REST has no connection to close, so the
member is dropped here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from django.core.cache import cache
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mwportal.protocol import ErrorCode, ProtocolError, frames, handshake
from mwportal.protocol.ids import bare
from mwportal.protocol.registry import UNKNOWN_KEY, KeyBinding, KeyResolutionError

from .. import commands
from ..auth import session_expires_at
from ..keyregistry import DjangoRegistry
from ..models import Agent
from ..views import BODY_ERRORS, read_body
from .openapi import hello

# How long a challenge may be answered (the reference implementation allows 30 s).
CHALLENGE_SECONDS = 60
_CACHE_PREFIX = "mwp.hello.challenge:"
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


def issue_challenge(client_init: frames.Frame, now: datetime) -> dict[str, Any]:
    """The ``HELLO/server_challenge`` answering ``client_init``; its transcript is kept for the response."""
    challenge = _rest(lambda: handshake.issue_challenge(client_init, now, ttl=CHALLENGE_SECONDS))
    cache.set(_CACHE_PREFIX + challenge.server_nonce, challenge.transcript, timeout=CHALLENGE_SECONDS)
    return challenge.frame()


def take_challenge(server_nonce: str) -> handshake.Challenge | None:
    """The challenge issued with ``server_nonce``, removed so that no second response can use it."""
    key = _CACHE_PREFIX + server_nonce
    transcript = cache.get(key)
    # delete() is true for one caller only: two racing responses cannot both use it.
    if not isinstance(transcript, bytes) or not cache.delete(key):
        return None
    try:
        return handshake.Challenge.from_transcript(transcript)
    except ValueError:
        return None


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
    challenge = take_challenge(doc["serverNonce"])
    if challenge is None:
        raise ProtocolError(
            ErrorCode.AUTH_INVALID_SIGNATURE,
            "the HELLO challenge signature could not be verified",
            related_frame_id=doc["frameId"],
        )
    proven = _rest(
        lambda: handshake.verify_response(challenge, client_response, now, agent_key_resolver(challenge.agent_id))
    )
    # The control plane's session_open Command: epoch n + 1, fencing n and lower.
    token, epoch = commands.open_session(bare(proven.agent_id, "agentId"))
    return frames.hello_server_accept(token, epoch, session_expires_at(now))


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
