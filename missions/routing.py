"""WebSocket URL routes. Consumers for ``/ws/v1/agent`` and
``/ws/v1/ui/groups/{id}`` arrive with event delivery (issue 4)."""

from typing import Any

websocket_urlpatterns: list[Any] = []
