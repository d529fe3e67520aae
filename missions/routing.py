"""WebSocket URL routes (DESIGN §4)."""

from django.urls import path

from . import consumers

websocket_urlpatterns = [
    path("ws/v1/agent", consumers.AgentConsumer.as_asgi()),
    path("ws/v1/ui/groups/<str:group_id>", consumers.GroupUIConsumer.as_asgi()),
]
