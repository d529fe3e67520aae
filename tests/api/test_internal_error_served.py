"""A real daphne whose PostgreSQL is down answers INTERNAL_ERROR, not an HTML
500 (issue 16 item 10, against the served path as the review found it).

The daphne is pointed at a PostgreSQL address where nothing listens, with a
password in its URL and a short pool timeout: every request that needs the
database fails inside the server (a refused connection, then the pool's
checkout timeout). Each must answer the JSON INTERNAL_ERROR document with
``retryable: true``, ``retryAfterMs`` and ``Retry-After``, say nothing of the
database, and leave the traceback in the server's log only.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from mwportal.protocol import handshake
from mwportal.protocol.command import Key, build_command
from mwportal.protocol.ids import new_urn, urn
from tests.delivery.conftest import Daphne, free_port

SECRET = "hunter2-outage"


@pytest.fixture
def daphne_without_database(tmp_path: Any) -> Iterator[Daphne]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update({
        "DJANGO_SETTINGS_MODULE": "mwportal.settings",
        "MWP_VAR_DIR": str(tmp_path / "var"),
        # Nothing listens on this port: PostgreSQL is "down".
        "MWP_DATABASE_URL": f"postgres://mwp:{SECRET}@127.0.0.1:{free_port()}/mwp",
        "MWP_DB_POOL_MIN": "1",
        "MWP_DB_POOL_TIMEOUT": "0.5",
    })  # fmt: skip
    env.pop("MWP_DEBUG", None)
    server = Daphne(env)
    server.start()
    yield server
    server.kill()


def request(
    server: Daphne, method: str, path: str, body: Any = None, token: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return server.http(method, path, json.dumps(body).encode() if body is not None else None, headers)


def command() -> dict[str, Any]:
    """A signed ``mission.create`` by a key no Registry knows: resolving it needs the database."""
    group = str(uuid.uuid4())
    payload = {"missionId": new_urn(), "groupId": urn(group), "title": "Survey", "objective": "Map it"}
    return build_command(
        "mission.create", actor=("human", str(uuid.uuid4())), key=Key.generate(), payload=payload, group=group
    )


def client_response(server: Daphne) -> dict[str, Any]:
    """A HELLO/client_response to a real challenge (issuing one needs no database; verifying it does)."""
    hc = handshake.ClientHandshake(new_urn(), Key.generate())
    status, _, body = request(server, "POST", "/api/v0.1/sessions/challenge", hc.start())
    assert status == 200, body
    return hc.receive_challenge(json.loads(body))


def test_it_answers_internal_error_on_every_binding_route_while_the_database_is_down(
    daphne_without_database: Daphne,
) -> None:
    server = daphne_without_database
    group = str(uuid.uuid4())
    answers = {
        "commands": request(server, "POST", "/api/v0.1/commands", command()),
        "sessions": request(server, "POST", "/api/v0.1/sessions", client_response(server)),
        "events": request(server, "GET", f"/api/v0.1/groups/{urn(group)}/events", token="A" * 43),
        "memberships": request(server, "GET", "/api/v0.1/memberships", token="A" * 43),
        "key": request(server, "GET", f"/api/v0.1/keys/{new_urn()}"),
        "artifact": request(server, "GET", "/api/v0.1/artifacts/" + "ab" * 32, token="A" * 43),
    }  # fmt: skip
    for route, (status, headers, body) in answers.items():
        assert status == 500, (route, status, body[:300])
        assert headers["content-type"].startswith("application/json"), (route, headers)
        error = json.loads(body)
        assert error["code"] == "INTERNAL_ERROR" and error["retryable"] is True, (route, error)
        assert error["retryAfterMs"] > 0 and int(headers["retry-after"]) >= 1, (route, error, headers)
        for leak in (SECRET, "127.0.0.1", "psycopg", "Traceback", "connection"):
            assert leak not in body.decode(), (route, leak, body)
    log = server.log.read_text()
    assert "Traceback" in log  # logged server-side, with the cause
