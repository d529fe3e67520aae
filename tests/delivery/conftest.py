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
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from mwportal.protocol import frames
from mwportal.protocol.handshake import ClientHandshake, Session
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey, group_revision
from tests.protocol.normative import normative_problems

ROOT = Path(__file__).resolve().parents[2]
AGENT_PATH = "/mwp/0.1"


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
        "MWP_SERVICE_KEY_DIR": str(settings.MWP_SERVICE_KEY_DIR),
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


def check_frame(frame: Any) -> None:
    """Every frame the server sends is one of ``websocket-frame.schema.json``'s
    shapes (PROTOCOL §17.1), by the bundle's own schema (nothing checked
    when no bundle is present; the tests that need one skip first)."""
    problems = normative_problems("websocket-frame", frame)
    assert not problems, (problems[:3], frame)


class Client:
    """A ``websockets`` client speaking MWP 0.1 on ``/mwp/0.1`` (PROTOCOL §17).

    Every frame it receives is checked against the bundle's frame schema."""

    def __init__(self, ws: ClientConnection):
        self.ws = ws
        self.session: Session | None = None

    @classmethod
    async def open(cls, server: Daphne, agent: AgentKey | None = None, **connect_kw: Any) -> Client:
        """Connect; with ``agent``, complete the HELLO handshake as that Agent
        (its ``session_epoch`` becomes the new one)."""
        connect_kw.setdefault("max_size", 8 * 1024 * 1024)
        ws = await connect(f"{server.url}{AGENT_PATH}", open_timeout=10, **connect_kw)
        client = cls(ws)
        if agent is not None:
            await client.hello(agent)
        return client

    async def hello(self, agent: AgentKey) -> Session:
        """The four phases of §6.3 with ``agent``'s Registry key."""
        handshake = ClientHandshake(agent.urn, agent.key)
        await self.send(handshake.start())
        await self.send(handshake.receive_challenge(await self.recv()))
        self.session = handshake.receive_accept(await self.recv())
        agent.session_epoch = self.session.session_epoch
        return self.session

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(frame))

    async def subscribe(self, group: str, after: int = 0, attention: dict[str, Any] | None = None) -> dict[str, Any]:
        """SUBSCRIBE to one Group (bare id) after ``after``; the frame sent."""
        frame = frames.subscribe([(urn(group), after)], attention={urn(group): attention} if attention else None)
        await self.send(frame)
        return frame

    async def command(self, document: dict[str, Any]) -> dict[str, Any]:
        """COMMAND carrying a signed Command document; the frame sent."""
        frame = frames.command(document)
        await self.send(frame)
        return frame

    async def recv(self, timeout: float = 10) -> dict[str, Any]:
        text = await asyncio.wait_for(self.ws.recv(), timeout)
        assert isinstance(text, str), "the server sent a binary message (PROTOCOL §17.1)"
        frame: dict[str, Any] = json.loads(text)
        check_frame(frame)
        return frame

    async def error(self, timeout: float = 10) -> dict[str, Any]:
        """The next ERROR frame's error document (other frames are skipped)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            frame = await self.recv(max(deadline - asyncio.get_running_loop().time(), 0.01))
            if frame["frameType"] == "ERROR":
                document: dict[str, Any] = frame["error"]
                return document

    async def events(self, group: str, until: int, timeout: float = 20) -> list[dict[str, Any]]:
        """The Event documents of EVENT frames of ``group`` (bare id) until its sequence ``until``."""
        got: list[dict[str, Any]] = []
        group_urn = urn(group)
        deadline = asyncio.get_running_loop().time() + timeout
        while not got or got[-1]["sequence"] < until:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise AssertionError(f"timed out at {[e['sequence'] for e in got][-5:]} waiting for {until}")
            frame = await self.recv(left)
            if frame["frameType"] == "EVENT" and frame["event"].get("groupId") == group_urn:
                got.append(frame["event"])
        return got

    async def until_closed(self, timeout: float = 10) -> tuple[list[dict[str, Any]], int | None]:
        """Every frame until the server closes the connection, and its close
        code; None as the code when it is still open after ``timeout`` seconds
        (then this side closes it)."""
        frames_seen: list[dict[str, Any]] = []
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            while (left := deadline - asyncio.get_running_loop().time()) > 0:
                frames_seen.append(await self.recv(left))
        except ConnectionClosed as closed:
            return frames_seen, closed.rcvd.code if closed.rcvd else None
        except TimeoutError:
            pass
        await self.close()
        return frames_seen, None

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


def set_roles_command(by: AgentKey, group: str, member: AgentKey, roles: list[str]) -> dict[str, Any]:
    """``by``'s signed ``membership.change`` of ``member``'s roles in ``group``,
    at the Group's current revision (§15.3): the ordinary Command the socket tests send."""
    return by.command(
        "membership.change",
        group,
        {"principal": member.actor, "roles": roles},
        expected_revision=group_revision(group),
    )


CRITERION = {"criterionId": "done", "description": "It is done.", "evidenceRequired": ["reviewer_assessment"]}
COORDINATE = "urn:uuid:00000000-0000-4000-8000-0000000e0003"


def new_mission(owner: AgentKey, coordinator: AgentKey, title: str = "Survey") -> str:
    """A Mission Group created by ``owner`` with ``coordinator`` as its
    Coordinator (PROTOCOL §7.1: terms, a Coordinator able to coordinate); its id."""
    from datetime import UTC, datetime, timedelta

    from missions.handlers.sessions import capability, issue_agent_card
    from missions.models import AgentCard
    from mwportal.protocol.command import format_timestamp

    if not AgentCard.objects.filter(agent_id=coordinator.id).exists():
        issue_agent_card(coordinator.id, [capability("mission.coordinate", "1.0.0", verified_evidence=[COORDINATE])])
    group_id = str(uuid.uuid4())
    owner.send(
        "mission.create",
        group_id,
        {
            "missionId": urn(uuid.uuid4()),
            "groupId": urn(group_id),
            "coordinatorId": coordinator.urn,
            "title": title,
            "objective": "Map the districts.",
            "definitionOfDone": [CRITERION],
            "deadline": format_timestamp(datetime.now(UTC) + timedelta(days=7)),
            "budget": {"currency": "EUR", "financialLimit": 100, "modelTokenLimit": 1_000_000},
        },
    )
    return group_id


@pytest.fixture
def planner(org: dict[str, str]) -> AgentKey:
    """An Agent with the Organization's admin role: it sets the priority
    policy in the administrative Group, the simplest Agent Command."""
    from tests.conftest import make_agent

    return make_agent("acme", "Pat Planner", ["admin"])
