"""Bearer-token authentication of Agent Sessions for REST reads.

A token is valid while its session is the Agent's current one: opening a new
session fences the old token at once (MWP-WRK-014).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from mwportal.protocol import ErrorCode, ProtocolError

from .handlers import token_digest
from .models import Agent, AgentSession


@dataclass
class AgentPrincipal:
    """``request.user`` for a bearer-token request: the Agent behind the session."""

    agent: Agent
    session_epoch: int
    is_authenticated: bool = True
    is_anonymous: bool = False


def agent_for_token(token: str) -> tuple[Agent, int]:
    """The Agent and Session Epoch of a current session token, else AUTH_STALE_SESSION."""
    session = (
        AgentSession.objects.select_related("agent")
        .filter(token_hash=token_digest(token), revoked_at__isnull=True)
        .first()
    )
    if session is None or session.agent.session_epoch != session.epoch:
        raise ProtocolError(ErrorCode.AUTH_STALE_SESSION, "the session token is unknown, revoked or replaced")
    return session.agent, session.epoch


class BearerTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != b"bearer":
            return None
        if len(header) != 2:
            raise ProtocolError(
                ErrorCode.PROTOCOL_VIOLATION,
                "Authorization: expected 'Bearer <token>'",
                details={"field": "Authorization"},
            )
        agent, epoch = agent_for_token(header[1].decode("ascii", "replace"))
        return AgentPrincipal(agent, epoch), epoch

    def authenticate_header(self, request: Request) -> str:
        return "Bearer"


def request_agent(request: Request) -> Agent:
    """The Agent making this request (bearer token or a Django user's person Agent)."""
    user = request.user
    if isinstance(user, AgentPrincipal):
        return user.agent
    if user is not None and user.is_authenticated and user.pk is not None:
        agent = Agent.objects.filter(user_id=user.pk).first()
        if agent is not None:
            return agent
        raise ProtocolError(ErrorCode.AUTH_FORBIDDEN, "this user has no Agent in any Organization")
    raise ProtocolError(ErrorCode.AUTH_REQUIRED, "authentication required: send Authorization: Bearer <token>")


class BearerTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """Describes the bearer token to the OpenAPI schema."""

    target_class = "missions.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "the token of POST /api/v1/sessions"}
