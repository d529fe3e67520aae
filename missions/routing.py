"""WebSocket URL routes (DESIGN §4).

Agents authenticate with a bearer token in ``hello`` and send no ``Origin``;
browsers authenticate with the Django session cookie, so the UI route checks
``Origin`` against ALLOWED_HOSTS (cross-site WebSocket hijacking).
"""

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import path

from . import consumers

websocket_urlpatterns = [
    path("ws/v1/agent", consumers.AgentConsumer.as_asgi()),
    path(
        "ws/v1/ui/groups/<str:group_id>",
        AllowedHostsOriginValidator(AuthMiddlewareStack(consumers.GroupUIConsumer.as_asgi())),
    ),
]
