"""Bearer-token authentication of REST requests (DESIGN §5, PROTOCOL §6.3).

The ``sessionToken`` of ``HELLO/server_accept`` (over the WebSocket or
``POST /api/v0.1/sessions``) is a bearer token (``Authorization: Bearer``)
for REST requests until ``SESSION_SECONDS`` after it was issued, or until a
newer session of the Agent fences it: issuing Session Epoch n + 1 fences
every session at n or lower (§6.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from mwportal.protocol import ErrorCode, ProtocolError

from .handlers.sessions import token_digest
from .models import Agent, AgentSession

# How long a session token authenticates REST requests (§6.3: short-lived).
SESSION_SECONDS: int = getattr(settings, "MWP_SESSION_TOKEN_SECONDS", 3600)


def session_expires_at(issued_at: datetime) -> datetime:
    """When a session token issued at ``issued_at`` stops authenticating (``HELLO/server_accept``'s ``expiresAt``)."""
    return issued_at + timedelta(seconds=SESSION_SECONDS)


# --- bearer tokens ----------------------------------------------------------------------------


@dataclass
class AgentPrincipal:
    """``request.user`` for a bearer-token request: the Agent behind the session."""

    agent: Agent
    session_epoch: int
    is_authenticated: bool = True
    is_anonymous: bool = False


def agent_for_token(token: str, now: datetime | None = None) -> tuple[Agent, int]:
    """The Agent and Session Epoch of a current session token, else AUTH_STALE_SESSION.

    Current: issued less than ``SESSION_SECONDS`` ago, not revoked, and the
    Agent's latest session (a newer Session Epoch fences it, §6.3).
    """
    session = (
        AgentSession.objects.select_related("agent")
        .filter(token_hash=token_digest(token), revoked_at__isnull=True)
        .first()
    )
    now = now or datetime.now(UTC)
    if session is None or session.agent.session_epoch != session.epoch or now >= session_expires_at(session.created_at):
        raise ProtocolError(ErrorCode.AUTH_STALE_SESSION, "the session token is unknown, expired, revoked or replaced")
    return session.agent, session.epoch


class BearerTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != b"bearer":
            return None
        if len(header) != 2:
            raise ProtocolError(
                ErrorCode.PROTOCOL_VIOLATION,
                "Authorization: expected 'Bearer <sessionToken>'",
                details={"field": "Authorization"},
            )
        agent, epoch = agent_for_token(header[1].decode("ascii", "replace"))
        return AgentPrincipal(agent, epoch), epoch

    def authenticate_header(self, request: Request) -> str:
        return "Bearer"


def request_agent(request: Request) -> Agent:
    """The Principal making this request: a bearer token's Agent, or a signed-in person."""
    user = request.user
    if isinstance(user, AgentPrincipal):
        return user.agent
    if user is not None and user.is_authenticated and user.pk is not None:
        agent = Agent.objects.filter(user_id=user.pk).first()
        if agent is not None:
            return agent
        raise ProtocolError(ErrorCode.AUTH_FORBIDDEN, "this user is no Principal of any Organization")
    raise ProtocolError(ErrorCode.AUTH_REQUIRED, "authentication required: send Authorization: Bearer <sessionToken>")


class BearerTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """Describes the bearer token to the OpenAPI schema."""

    target_class = "missions.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "the sessionToken of HELLO/server_accept (POST /api/v0.1/sessions)",
        }
