"""WebSocket URL routes (PROTOCOL §17, DESIGN §5).

- ``/mwp/0.1``: the Agents' binding (``missions.agent_socket``). Agents
  authenticate in the HELLO handshake and send no ``Origin``; a foreign
  ``Origin`` is refused all the same, since a page holding an Agent's key or
  session token in JavaScript is as exposed as one holding a cookie.
- ``/ws/ui/groups/{id}``: the browser's live view (``missions.consumers``),
  by the Django session cookie, so ``Origin`` must be the portal's own,
  scheme, host and port (``missions/ws_limits.py``; cross-site WebSocket
  hijacking).

Any other path, the retired version-1 routes among them, is refused at the
handshake (daphne answers 403), not with the 500 that URLRouter's "no route"
error gave (issue 16 item 8).
"""

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import WebsocketDenier
from django.urls import path, re_path

from .agent_socket import AgentConsumer
from .consumers import GroupUIConsumer
from .ws_limits import SameOrigin

websocket_urlpatterns = [
    path("mwp/0.1", SameOrigin(AgentConsumer.as_asgi(), require=False)),
    path(
        "ws/ui/groups/<str:group_id>",
        SameOrigin(AuthMiddlewareStack(GroupUIConsumer.as_asgi()), require=True),
    ),
    # Last: whatever the routes above did not match closes before accepting.
    re_path(r"", WebsocketDenier.as_asgi()),
]
