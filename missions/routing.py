"""WebSocket URL routes (DESIGN §4).

Agents authenticate with a bearer token in ``hello`` and send no ``Origin``;
browsers authenticate with the Django session cookie, so the UI route
requires ``Origin`` to be the portal's own, scheme, host and port
(``missions/ws_limits.py``; cross-site WebSocket hijacking). The Agents'
route refuses a foreign ``Origin`` too: a page that holds a bearer token in
JavaScript is as exposed as one that holds a cookie.

Any other path is refused at the handshake (daphne answers 403), not with
the 500 that URLRouter's "no route" error gave (issue 16 item 8).
"""

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import WebsocketDenier
from django.urls import path, re_path

from . import consumers
from .ws_limits import SameOrigin

websocket_urlpatterns = [
    path("ws/v1/agent", SameOrigin(consumers.AgentConsumer.as_asgi(), require=False)),
    path(
        "ws/v1/ui/groups/<str:group_id>",
        SameOrigin(AuthMiddlewareStack(consumers.GroupUIConsumer.as_asgi()), require=True),
    ),
    # Last: whatever the routes above did not match closes before accepting.
    re_path(r"", WebsocketDenier.as_asgi()),
]
