"""A WebSocket relay between a Worker and the portal's ``/mwp/0.1``, for fault injection.

The Worker under test connects to the relay (``RelayedWorker``: the agent
WebSocket goes through the relay, HTTP straight to the portal), and the relay
forwards every frame both ways, except that it can

- hold back one Group's EVENT frames for a while on each connection (a
  slow replay: ``hold``), keeping their order, while other Groups' frames
  and errors pass at once;
- swallow chosen Commands on their way to the server and drop the client's
  connection a while later (an answer lost with the transport: ``swallow``).

Every Command the Worker sends is handed to ``on_command`` as it passes, so a
test can look at the Worker's state at the moment it sent it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import connect
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from mwworker import Worker


class Relay:
    def __init__(self, upstream: str):
        self.upstream = upstream  # ws://host:port/mwp/0.1
        self.hold: dict[str, float] = {}  # Group -> seconds its Events wait from the first one of a connection
        self.swallow: Callable[[dict[str, Any]], bool] = lambda document: False
        self.drop_after = 0.0  # seconds after a swallowed Command before the client's connection is cut
        self.on_command: Callable[[dict[str, Any]], None] = lambda document: None
        self.connections = 0
        self._server: Server | None = None

    async def __aenter__(self) -> Relay:
        self._server = await serve(self._relay, "127.0.0.1", 0, max_size=None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = next(iter(self._server.sockets)).getsockname()[1]
        return f"ws://127.0.0.1:{port}/mwp/0.1"

    async def _relay(self, client: ServerConnection) -> None:
        self.connections += 1
        async with connect(self.upstream, max_size=None) as server:
            held: dict[str, asyncio.Queue[str]] = {}
            tasks: list[asyncio.Task[None]] = []

            async def release(queue: asyncio.Queue[str], delay: float) -> None:
                await asyncio.sleep(delay)
                while True:
                    await client.send(await queue.get())

            async def drop_later() -> None:
                await asyncio.sleep(self.drop_after)
                client.transport.abort()

            async def to_server() -> None:
                async for text in client:
                    frame = json.loads(text)
                    if frame.get("frameType") == "COMMAND":
                        document = frame["command"]
                        self.on_command(document)
                        if self.swallow(document):
                            tasks.append(asyncio.create_task(drop_later()))
                            continue
                    await server.send(text)

            async def to_client() -> None:
                async for text in server:
                    frame = json.loads(text)
                    group = frame["event"].get("groupId") if frame.get("frameType") == "EVENT" else None
                    if group in self.hold:
                        if group not in held:
                            held[group] = asyncio.Queue()
                            tasks.append(asyncio.create_task(release(held[group], self.hold[group])))
                        held[group].put_nowait(str(text))
                    else:
                        await client.send(text)

            pumps = [asyncio.create_task(to_server()), asyncio.create_task(to_client())]
            try:
                with contextlib.suppress(ConnectionClosed):
                    await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in pumps + tasks:
                    task.cancel()
                await asyncio.gather(*pumps, *tasks, return_exceptions=True)


class RelayedWorker(Worker):
    """A Worker whose agent WebSocket goes through a ``Relay``; HTTP goes straight to the portal."""

    relay_url = ""

    def _ws_url(self) -> str:
        return self.relay_url
