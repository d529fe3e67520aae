"""One Event frame to many daphne WebSocket connections, framed once.

A Group with a hundred local subscribers sends the same ``event`` frame a
hundred times. Through the ASGI ``send`` callable each send goes through the
consumer, daphne's reply handler and autobahn's framing (UTF-8 encoding, the
frame header, the payload copy): about twenty microseconds each, so the last
subscriber of a hundred waits two milliseconds for the others. autobahn can
frame a payload once and send the framed bytes to many connections
(``PreparedMessage``, its broadcast API); this module does that when the
server is daphne, with the same checks daphne's reply handler makes (the
connection is known to the server, not disconnected, and open). Under any
other ASGI server, or when daphne's ``send`` is not what this module knows,
``direct_sender`` answers None and the consumer sends through ASGI as before.

The bytes on the wire are the same either way (daphne does not negotiate
compression; should a connection have it, autobahn compresses the payload of
a prepared message itself).
"""

from __future__ import annotations

import functools
from typing import Any

from autobahn.websocket.protocol import PreparedMessage
from daphne.server import Server
from daphne.ws_protocol import WebSocketProtocol
from twisted.internet.tcp import Server as _TCPServer


class DirectSender:
    """Sends prepared frames straight to one daphne WebSocket protocol."""

    __slots__ = ("protocol", "server")

    def __init__(self, server: Server, protocol: WebSocketProtocol) -> None:
        self.server = server
        self.protocol = protocol

    def is_open(self) -> bool:
        info = self.server.connections.get(self.protocol)
        return info is not None and "disconnected" not in info and self.protocol.state == WebSocketProtocol.STATE_OPEN

    def buffered(self) -> int:
        """Bytes written to this connection and not yet taken by its socket
        (what a slow reader leaves in the server's buffers)."""
        transport = self.protocol.transport
        if transport is None:
            return 0
        pending = getattr(transport, "_tempDataLen", 0)
        data = getattr(transport, "dataBuffer", b"")
        return int(pending) + max(len(data) - int(getattr(transport, "offset", 0)), 0)

    def send(self, event: Any) -> bool:
        """Send ``event``'s frame; False when the connection is not open (the
        caller then sends through ASGI, which drops it the same way)."""
        if not self.is_open():
            return False
        prepared = event.prepared
        if prepared is None:
            prepared = event.prepared = PreparedMessage(event.frame.encode(), False, False, False)
        protocol = self.protocol
        if protocol._perMessageCompress is None and not protocol.send_queue:
            # What autobahn's sendPreparedMessage comes to without compression
            # or queued chopped writes, minus its debug log call, whose
            # arguments it formats even when the log is off.
            _send_now(protocol.transport, prepared.payloadHybi)
        else:
            protocol.sendPreparedMessage(prepared)
            _write_now(protocol.transport)
        return True


def _send_now(transport: Any, data: bytes) -> None:
    """Write ``data`` to a plain TCP connection's socket at once when nothing
    is buffered before it, as asyncio's own transports do; what the socket
    does not take (or any error) goes through Twisted's ``write``. Twisted's
    ``write`` alone would register the socket with the event loop for
    writing, write, then unregister it: three system calls and the reactor's
    bookkeeping per subscriber, where one send does."""
    if (
        type(transport) is _TCPServer
        and transport.connected
        and not transport.disconnecting
        and not transport._tempDataBuffer
        and len(transport.dataBuffer) <= transport.offset
    ):
        try:
            sent = transport.socket.send(data)
        except OSError:
            sent = 0  # full, or broken: Twisted's write below finds out which
        if sent == len(data):
            return
        data = data[sent:]
    transport.write(data)
    _write_now(transport)


def _write_now(transport: Any) -> None:
    """Put what the transport buffered on the socket now. Twisted's
    ``write`` only buffers, and the reactor writes once it finds the socket
    writable, a turn of the event loop later (after whatever else that turn
    runs). The asyncio reactor's own step for a writable socket (``doWrite``,
    then a disconnect on error) does it at once; under any other reactor the
    write waits for its turn as before."""
    step = getattr(_reactor(), "_readOrWrite", None)
    if step is not None and getattr(transport, "connected", False) and hasattr(transport, "doWrite"):
        step(transport, False)


@functools.cache
def _reactor() -> Any:
    from twisted.internet import reactor

    return reactor


def direct_sender(send: Any) -> DirectSender | None:
    """The direct sender behind an ASGI ``send`` callable when daphne made it
    (``partial(Server.handle_reply, protocol)``), else None."""
    if not isinstance(send, functools.partial) or send.keywords or len(send.args) != 1:
        return None
    server = getattr(send.func, "__self__", None)
    protocol = send.args[0]
    if not isinstance(server, Server) or getattr(send.func, "__func__", None) is not Server.handle_reply:
        return None
    if not isinstance(protocol, WebSocketProtocol):
        return None
    return DirectSender(server, protocol)
