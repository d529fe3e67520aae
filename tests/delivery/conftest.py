"""A real daphne serving the test database, and real ``websockets`` clients."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.conftest import AgentKey, group_revision

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def database_url() -> str:
    """The test database as a URL the daphne subprocess can open."""
    cfg = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{cfg['NAME']}"
    host, port = cfg.get("HOST") or "127.0.0.1", cfg.get("PORT") or 5432
    return f"postgres://{cfg['USER']}@{host}:{port}/{cfg['NAME']}"


def _endpoint_arg(path: Path) -> str:
    """``path`` as one argument of a Twisted endpoint string (``:`` and ``\\`` escaped)."""
    return str(path).replace("\\", "\\\\").replace(":", "\\:")


class Daphne:
    """A daphne process on a free port; ``restart()`` kills it hard and starts it again.

    With ``tls=(key, cert)`` (PEM files) it serves HTTPS and ``wss`` on the
    TLS-1.3-only endpoint of ``mwportal/tls.py`` instead of plain TCP."""

    def __init__(self, env: dict[str, str], tls: tuple[Path, Path] | None = None):
        self.port = free_port()
        self.env = env
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = ROOT / "var" / f"daphne-test-{self.port}.log"

    @property
    def url(self) -> str:
        return f"{'wss' if self.tls else 'ws'}://127.0.0.1:{self.port}"

    def listen_args(self) -> list[str]:
        if self.tls is None:
            return ["-b", "127.0.0.1", "-p", str(self.port)]
        key, cert = (_endpoint_arg(p) for p in self.tls)
        return ["-e", f"tls13:{self.port}:privateKey={key}:certKey={cert}:interface=127.0.0.1"]

    def start(self) -> None:
        self.log.parent.mkdir(exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "daphne", *self.listen_args(),
                 "--websocket-max-message-size", str(16 * 1024 * 1024),
                 "--websocket-max-frame-size", str(16 * 1024 * 1024), "mwportal.asgi:application"],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daphne exited: {self.log.read_text()[-2000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        raise RuntimeError("daphne did not start within 30 s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def http(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> tuple[int, dict[str, str], bytes]:
        """One plain HTTP/1.1 request to this daphne, as a client outside the
        test process sends it: ``(status, headers with lower-case names, body)``."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()


@pytest.fixture
def head_poll_seconds() -> float:
    """How often the daphne under test re-reads Group heads; a test that must
    prove the channel-layer path overrides it with something long."""
    return 0.2


@pytest.fixture
def daphne_env() -> dict[str, str | None]:
    """More environment for the daphne under test (None removes a variable)."""
    return {}


def daphne_process_env(settings: Any, head_poll_seconds: float, extra: dict[str, str | None]) -> dict[str, str]:
    """The environment of a daphne under test: this process's, on the test
    database and the test signing key, plus ``extra`` (None removes a variable)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update({
        "MWP_DATABASE_URL": database_url(),
        "MWP_HEAD_POLL_SECONDS": str(head_poll_seconds),
        "MWP_ONLINE_REPLAY_EVENTS": str(settings.MWP_ONLINE_REPLAY_EVENTS),
        "MWP_SIGNING_KEY_FILE": str(settings.MWP_SIGNING_KEY_FILE),
        "DJANGO_SETTINGS_MODULE": "mwportal.settings",
    })  # fmt: skip
    for name, value in extra.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


@pytest.fixture
def daphne(
    transactional_db: None, settings: Any, head_poll_seconds: float, daphne_env: dict[str, str | None]
) -> Iterator[Daphne]:
    server = Daphne(daphne_process_env(settings, head_poll_seconds, daphne_env))
    server.start()
    yield server
    server.kill()


class Client:
    """A ``websockets`` client speaking the agent protocol."""

    def __init__(self, ws: ClientConnection):
        self.ws = ws

    @classmethod
    async def open(cls, server: Daphne, token: str | None = None) -> Client:
        ws = await connect(f"{server.url}/ws/v1/agent", max_size=8 * 1024 * 1024, open_timeout=10)
        client = cls(ws)
        if token is not None:
            await client.send({"op": "hello", "token": token})
            welcome = await client.recv()
            assert welcome["op"] == "welcome", welcome
        return client

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(frame))

    async def recv(self, timeout: float = 10) -> dict[str, Any]:
        frame: dict[str, Any] = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        return frame

    async def events(self, group: str, until: int, timeout: float = 20) -> list[dict[str, Any]]:
        """Receive ``event`` frames of ``group`` until its sequence ``until``."""
        got: list[dict[str, Any]] = []
        deadline = asyncio.get_running_loop().time() + timeout
        while not got or got[-1]["sequence"] < until:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise AssertionError(f"timed out at {[e['sequence'] for e in got][-5:]} waiting for {until}")
            frame = await self.recv(left)
            if frame["op"] == "event" and frame["event"]["group"] == group:
                got.append(frame["event"])
        return got

    async def until_closed(self, timeout: float = 10) -> tuple[list[dict[str, Any]], int | None]:
        """Every frame until the server closes the connection, and its close
        code; None as the code when it is still open after ``timeout`` seconds
        (then this side closes it)."""
        frames: list[dict[str, Any]] = []
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            while (left := deadline - asyncio.get_running_loop().time()) > 0:
                frames.append(await self.recv(left))
        except ConnectionClosed as closed:
            return frames, closed.rcvd.code if closed.rcvd else None
        except TimeoutError:
            pass
        await self.close()
        return frames, None

    async def close(self) -> None:
        await self.ws.close()


async def handshake(url: str, headers: dict[str, str] | None = None) -> int:
    """The HTTP status of a WebSocket handshake: 101 when it was accepted."""
    try:
        async with connect(url, additional_headers=headers or {}, open_timeout=10):
            return 101
    except InvalidStatus as exc:
        return int(exc.response.status_code)


async def in_db_thread(fn: Any, *args: Any) -> Any:
    """Run database work from a test's event loop in a worker thread, closing
    that thread's connection after, so no session outlives the test database."""
    from django.db import connection as thread_connection

    def run() -> Any:
        try:
            return fn(*args)
        finally:
            thread_connection.close()

    return await asyncio.to_thread(run)


def set_roles_envelope(by: AgentKey, group: str, member: AgentKey, roles: list[str]) -> dict[str, Any]:
    """``by``'s signed ``membership.set_roles`` of ``member`` in ``group``, at
    the Group's current revision: the ordinary Command the socket tests send."""
    return by.envelope(
        "membership.set_roles",
        group,
        {"agent": member.id, "roles": roles},
        target={"kind": "group", "id": group, "revision": group_revision(group)},
    )
