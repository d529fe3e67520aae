"""The hub's sends: framed once for daphne connections (missions.direct_send), and its inline fan-out.

The real daphne suites (test_agent_socket, test_live_path, test_ui_socket)
receive every Event through this path; these tests pin down when it is taken
and that it keeps daphne's own checks."""

from __future__ import annotations

import functools
import json
from collections import deque
from typing import Any

import pytest
from autobahn.websocket.protocol import PreparedMessage
from daphne.server import Server
from daphne.ws_protocol import WebSocketProtocol

from missions.direct_send import direct_sender
from missions.readers import wire
from tests.conftest import AgentKey


class _Transport:
    """A Twisted TCP transport as far as the sender uses it: ``write``
    buffers, ``doWrite`` (the reactor's step for a writable socket) puts the
    buffer on the wire."""

    connected = True

    def __init__(self) -> None:
        self.buffer: list[bytes] = []
        self.wire: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.buffer.append(data)

    def fileno(self) -> int:
        return 99

    def doWrite(self) -> None:  # noqa: N802
        self.wire += self.buffer
        self.buffer = []


class _Protocol(WebSocketProtocol):  # type: ignore[misc]
    def __init__(self) -> None:
        self.state = WebSocketProtocol.STATE_OPEN
        self._perMessageCompress = None  # daphne does not negotiate compression
        self.send_queue: deque[Any] = deque()
        self.transport = _Transport()

    @property
    def sent(self) -> list[bytes]:
        return self.transport.wire + self.transport.buffer

    def __repr__(self) -> str:
        return "<test protocol>"


def _server(protocol: _Protocol) -> Server:
    server = Server.__new__(Server)
    server.connections = {protocol: {"connected": 0.0}}
    return server


def _event() -> Any:
    return wire({"sequence": 7, "type": "membership.roles_set", "body": {"roles": ["worker"]}})


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


def test_the_frame_is_on_the_socket_when_send_returns() -> None:
    """Twisted's write only buffers until its reactor finds the socket
    writable, a turn of the event loop later; under daphne's asyncio reactor
    the sender takes that step itself."""
    from twisted.internet import asyncioreactor, reactor

    assert isinstance(reactor, asyncioreactor.AsyncioSelectorReactor)  # daphne installs it
    protocol = _Protocol()
    sender = direct_sender(functools.partial(_server(protocol).handle_reply, protocol))
    assert sender is not None
    assert sender.send(_event())
    assert protocol.transport.buffer == [] and len(protocol.transport.wire) == 1


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


@pytest.mark.django_db(transaction=True)
def test_one_subscriber_failing_to_send_does_not_hold_up_the_others_of_its_group(
    org: dict[str, str], planner: AgentKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub's inline fan-out serves a Group's subscribers one after the
    other in one task: a subscriber whose send raises is dropped (its Agent
    subscribes again when it is back) and the next one still gets the Event."""
    import asyncio

    from tests.delivery.test_agent_socket import head
    from tests.delivery.test_carried_events import Following

    g = org["admin_group"]
    top = head(g)
    following = Following(g, monkeypatch)
    got: list[int] = []

    class Broken:
        async def deliver(self, batch: list[Any]) -> bool:
            raise ConnectionError("the peer is gone")

    class Healthy:
        async def deliver(self, batch: list[Any]) -> bool:
            got.extend(e["sequence"] for e in batch)
            return True

    async def scenario() -> tuple[bool, bool]:
        first, second = await following.subscribe(top, Broken(), Healthy())
        await following.commit(planner, 1)
        await following.hub.head_moved(g, top + 1)
        await asyncio.sleep(0)  # the dropped subscription's unsubscribe runs
        closed = first.closed, second.closed
        await following.close()
        return closed

    assert asyncio.run(scenario()) == (True, False)
    assert got == [top + 1]


def _tcp_pair(sndbuf: int | None = None) -> tuple[Any, Any]:
    """A real Twisted TCP server transport on one end of a socket pair, and the peer."""
    import socket

    from twisted.internet import reactor, tcp
    from twisted.internet.protocol import Protocol

    ours, peer = socket.socketpair()
    if sndbuf is not None:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    ours.setblocking(False)
    peer.settimeout(5)
    transport = tcp.Server(ours, Protocol(), ("127.0.0.1", 1), None, 1, reactor)  # type: ignore[arg-type]
    return transport, peer


def _close(transport: Any) -> None:
    from twisted.internet import error
    from twisted.python.failure import Failure

    transport.connectionLost(Failure(error.ConnectionDone()))  # type: ignore[no-untyped-call]


def _read(peer: Any, n: int) -> bytes:
    data = b""
    while len(data) < n:
        data += peer.recv(n - len(data))
    return data


def test_with_nothing_buffered_the_frame_goes_straight_to_the_socket() -> None:
    """One send: nothing is left for Twisted's buffers or its writer registration."""
    from missions.direct_send import _send_now

    transport, peer = _tcp_pair()
    registered: list[bool] = []
    transport.startWriting = lambda: registered.append(True)
    try:
        _send_now(transport, b"frame-1")
        assert registered == []  # never registered with the event loop for writing
        assert transport._tempDataBuffer == [] and transport.dataBuffer == b""
        assert _read(peer, 7) == b"frame-1"
    finally:
        _close(transport)
        peer.close()


def test_bytes_buffered_by_twisted_go_first_and_what_the_socket_refuses_follows_in_order() -> None:
    """The direct write never overtakes bytes Twisted still holds, and what
    the socket does not take is left to Twisted, after which the peer reads
    every byte in the order sent."""
    from missions.direct_send import _send_now

    transport, peer = _tcp_pair(sndbuf=4096)
    try:
        transport._tempDataBuffer.append(b"earlier|")
        transport._tempDataLen += 8
        _send_now(transport, b"frame-2|")  # something buffered: through Twisted, in order
        big = bytes(range(256)) * 4096  # 1 MiB: more than the socket takes at once
        _send_now(transport, big)
        assert transport._tempDataBuffer or len(transport.dataBuffer) > transport.offset  # the rest waits in Twisted
        expected = b"earlier|frame-2|" + big
        got = b""
        while len(got) < len(expected):
            got += peer.recv(65536)
            transport.doWrite()  # the reactor's step once the socket is writable again
        assert got == expected
    finally:
        _close(transport)
        peer.close()
