"""The review's attacks of issue 16, replayed over HTTP against a real daphne.

The unit of each fix has its own tests next to its code (tests/artifacts,
tests/api, tests/core); these drive the served path the review attacked —
daphne, the ASGI stack, the backpressure gate, the middleware, the views —
with a signed client speaking plain HTTP/1.1, on whichever backend the suite
runs (SQLite, or PostgreSQL where items 6's 500s came from).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from missions.commands import create_organization
from mwportal.protocol import generate_keypair, signed
from tests.conftest import AgentKey, make_agent
from tests.delivery.conftest import Daphne  # the daphne fixture comes from tests/deploy/conftest.py

pytestmark = pytest.mark.django_db(transaction=True)


def call(
    server: Daphne,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    token: str | None = None,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    sent = {"Content-Type": content_type, **(headers or {})}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    return server.http(method, path, body, sent)


def command(server: Daphne, envelope: dict[str, Any] | bytes) -> tuple[int, dict[str, Any]]:
    raw = envelope if isinstance(envelope, bytes) else json.dumps(envelope).encode()
    status, _, data = call(server, "POST", "/api/v1/commands", raw)
    return status, json.loads(data)


def code_of(answer: dict[str, Any]) -> str:
    return str(answer["code"])


@pytest.fixture
def acme(org: dict[str, str]) -> dict[str, Any]:
    """Organization A (the test personas' acme): an owner with a Mission and a worker in it."""
    owner = make_agent("acme", "Ann Owner", ["mission_owner"])
    worker = make_agent("acme", "Walt Worker", ["worker"])
    group = str(uuid.uuid4())
    owner.send("mission.create", group, {"mission": str(uuid.uuid4()), "title": "Ours", "objective": "Map it"})
    owner.send(
        "membership.add", group, {"agent": worker.id, "roles": ["worker"]},
        target={"kind": "group", "id": group, "revision": 1},
    )  # fmt: skip
    return {"owner": owner, "worker": worker, "group": group}


@pytest.fixture
def globex(org: dict[str, str]) -> dict[str, Any]:
    """Organization B, with its own Mission."""
    create_organization("globex", "Globex")
    owner = make_agent("globex", "Gina Owner", ["mission_owner"])
    group = str(uuid.uuid4())
    owner.send("mission.create", group, {"mission": str(uuid.uuid4()), "title": "Theirs", "objective": "Secret"})
    return {"owner": owner, "group": group}


def test_it_stops_the_cross_organization_read_by_hash_at_every_step_item_1(
    daphne: Daphne, acme: dict[str, Any], globex: dict[str, Any]
) -> None:
    """The review's chain: B's owner uploads bytes; A's worker, knowing only
    the hash, sends a signed ``artifact.upload`` into its own Group (was 201)
    and downloads B's bytes (was 200)."""
    b: AgentKey = globex["owner"]
    status, _, data = call(
        daphne, "POST", f"/api/v1/artifacts?group={globex['group']}", b"globex trade secret",
        token=b.extra["token"], content_type="text/plain",
    )  # fmt: skip
    assert status == 201, data
    sha = json.loads(data)["sha256"]

    a: AgentKey = acme["worker"]
    status, answer = command(daphne, a.envelope("artifact.upload", acme["group"], {"sha256": sha}))
    assert (status, code_of(answer)) == (403, "AUTH_FORBIDDEN"), answer
    status, _, data = call(daphne, "GET", f"/api/v1/artifacts/{sha}", token=a.extra["token"])
    assert status == 404 and json.loads(data)["code"] == "GROUP_NOT_FOUND", data
    # And the answer is the one for bytes that exist nowhere (item 8: no oracle).
    status, _, absent = call(daphne, "GET", f"/api/v1/artifacts/{'0' * 64}", token=a.extra["token"])
    assert status == 404
    assert json.loads(data)["message"].replace(sha, "H") == json.loads(absent)["message"].replace("0" * 64, "H")


def test_it_answers_400_not_500_for_a_nul_and_an_overlong_media_type_item_6(
    daphne: Daphne, acme: dict[str, Any]
) -> None:
    """Both were PostgreSQL-only 500s; the suite runs this on both backends."""
    owner: AgentKey = acme["owner"]
    group = str(uuid.uuid4())
    status, answer = command(
        daphne,
        owner.envelope("mission.create", group, {"mission": str(uuid.uuid4()), "title": "a\u0000b", "objective": "x"}),
    )
    assert (status, code_of(answer)) == (400, "SCHEMA_VALIDATION_FAILED"), answer
    assert "body.title" in answer["message"]

    worker: AgentKey = acme["worker"]
    media_type = "text/" + "x" * 201
    single, resumable = f"/api/v1/artifacts?group={acme['group']}", f"/api/v1/artifacts/uploads?group={acme['group']}"
    for path, body, extra in ((single, b"bytes", {}), (resumable, None, {"Upload-Length": "5"})):
        status, _, data = call(
            daphne, "POST", path, body, token=worker.extra["token"], content_type=media_type, headers=extra
        )
        assert status == 400, (path, status, data)
        error = json.loads(data)
        assert error["code"] == "SCHEMA_VALIDATION_FAILED" and "media type" in error["message"], error


def test_it_verifies_before_replaying_and_checks_freshness_item_8(daphne: Daphne, acme: dict[str, Any]) -> None:
    """A forged copy of a known envelope got the stored receipt back, and
    ``issued_at`` in 2001 and 2999 were accepted."""
    owner: AgentKey = acme["owner"]
    group = str(uuid.uuid4())
    genuine = owner.envelope("mission.create", group, {"mission": str(uuid.uuid4()), "title": "T", "objective": "O"})
    status, receipt = command(daphne, genuine)
    assert status == 201, receipt
    assert command(daphne, genuine)[0] == 200  # the owner's own retry is a replay

    forger_key, _ = generate_keypair()
    # The same signed content, signed by someone else's key.
    forged = signed(forger_key, {k: v for k, v in genuine.items() if k != "signature"})
    assert forged != genuine
    status, answer = command(daphne, forged)
    assert (status, code_of(answer)) == (401, "AUTH_INVALID_SIGNATURE"), answer
    assert "events" not in answer

    for year in (2001, 2999):
        stale = owner.envelope(
            "mission.create", str(uuid.uuid4()), {"mission": str(uuid.uuid4()), "title": "T", "objective": "O"},
            issued_at=datetime(year, 1, 1, tzinfo=UTC),
        )  # fmt: skip
        status, answer = command(daphne, stale)
        assert (status, code_of(answer)) == (401, "AUTH_INVALID_SIGNATURE"), (year, answer)
        assert "issued_at" in answer["message"]
