"""The hub's framed-once sends to daphne connections (missions.direct_send).

The real daphne suites (test_agent_socket, test_live_path, test_ui_socket)
receive every Event through this path; these tests pin down when it is taken
and that it keeps daphne's own checks."""

from __future__ import annotations

import functools
import json
from typing import Any

from autobahn.websocket.protocol import PreparedMessage
from daphne.server import Server
from daphne.ws_protocol import WebSocketProtocol

from missions.direct_send import direct_sender
from missions.hub import _wire


class _Protocol(WebSocketProtocol):  # type: ignore[misc]
    def __init__(self) -> None:
        self.state = WebSocketProtocol.STATE_OPEN
        self._perMessageCompress = None  # daphne does not negotiate compression
        self.sent: list[bytes] = []

    def sendData(self, data: bytes, sync: bool = False, chopsize: int | None = None) -> None:  # noqa: N802
        self.sent.append(data)

    def __repr__(self) -> str:
        return "<test protocol>"


def _server(protocol: _Protocol) -> Server:
    server = Server.__new__(Server)
    server.connections = {protocol: {"connected": 0.0}}
    return server


def _event() -> Any:
    return _wire({"sequence": 7, "type": "membership.roles_set", "body": {"roles": ["worker"]}})


def test_the_frame_is_framed_once_and_sent_as_a_websocket_text_frame() -> None:
    protocol = _Protocol()
    sender = direct_sender(functools.partial(_server(protocol).handle_reply, protocol))
    assert sender is not None
    event = _event()
    assert sender.send(event) and sender.send(event)
    assert isinstance(event.prepared, PreparedMessage)
    payload = event.frame.encode()
    # FIN + text opcode, unmasked, 7-bit or 16-bit length, then the payload.
    header = bytes([0x81, len(payload)]) if len(payload) < 126 else bytes([0x81, 126]) + len(payload).to_bytes(2, "big")
    assert protocol.sent == [header + payload] * 2
    assert json.loads(payload)["event"]["sequence"] == 7


def test_a_closed_or_unknown_connection_is_left_to_the_asgi_send() -> None:
    protocol = _Protocol()
    server = _server(protocol)
    sender = direct_sender(functools.partial(server.handle_reply, protocol))
    assert sender is not None
    server.connections[protocol]["disconnected"] = 1.0
    assert not sender.send(_event())
    del server.connections[protocol]
    assert not sender.send(_event())
    server.connections[protocol] = {}
    protocol.state = WebSocketProtocol.STATE_CLOSING
    assert not sender.send(_event())
    assert protocol.sent == []


def test_only_daphnes_reply_handler_is_recognised() -> None:
    protocol = _Protocol()

    async def other_send(message: dict[str, Any]) -> None:
        return None

    assert direct_sender(other_send) is None
    assert direct_sender(functools.partial(other_send)) is None
    assert direct_sender(functools.partial(_server(protocol).handle_reply, object())) is None
    assert direct_sender(functools.partial(_server(protocol).application_checker)) is None
