"""The review's attacks of issue 16, replayed over HTTP against a real daphne.

The unit of each fix has its own tests next to its code (tests/artifacts,
tests/api, tests/core); these drive the served path the review attacked —
daphne, the ASGI stack, the backpressure gate, the middleware, the views —
with a signed client speaking plain HTTP/1.1, on whichever backend the suite
runs (SQLite, or PostgreSQL where items 6's 500s came from).
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from missions.commands import create_organization
from missions.models import ActionReceipt
from mwportal.protocol.command import Key, build_command
from tests.conftest import AgentKey, add_member, make_agent, make_person
from tests.delivery.conftest import Daphne  # the daphne fixture comes from tests/deploy/conftest.py
from tests.portal.conftest import found_mission, mission_terms

pytestmark = pytest.mark.django_db(transaction=True)
API = "/api/v0.1"


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
    return server.http(method, f"{API}{path}", body, sent)


def command(server: Daphne, document: dict[str, Any] | bytes) -> tuple[int, dict[str, Any]]:
    raw = document if isinstance(document, bytes) else json.dumps(document).encode()
    status, _, data = call(server, "POST", "/commands", raw)
    return status, json.loads(data)


def code_of(answer: dict[str, Any]) -> str:
    return str(answer["code"])


def organization(slug: str) -> dict[str, Any]:
    """An Organization with a MissionOwner (a person with a key), a Coordinator Agent, a Worker and a Mission."""
    owner = make_person(slug, "Owner of " + slug, ["mission_owner"])
    coordinator = make_agent(slug, "Coordinator of " + slug, ["coordinator"])
    worker = make_agent(slug, "Worker of " + slug, ["worker"])
    group = found_mission(owner, coordinator, "Mission of " + slug)
    add_member(owner, group, worker, ["worker"])
    return {"owner": owner, "coordinator": coordinator, "worker": worker, "group": group}


@pytest.fixture
def acme(org: dict[str, str]) -> dict[str, Any]:
    """Organization A (the test personas' acme)."""
    return organization("acme")


@pytest.fixture
def globex(org: dict[str, str]) -> dict[str, Any]:
    """Organization B, with its own Mission."""
    create_organization("globex", "Globex")
    return organization("globex")


def test_it_stops_the_cross_organization_read_by_hash_at_every_step_item_1(
    daphne: Daphne, acme: dict[str, Any], globex: dict[str, Any]
) -> None:
    """The review's chain: B's Worker uploads bytes; A's Worker, knowing only
    the hash, claims them for its own Group (was 201) and downloads B's bytes
    (was 200). Storing bytes is now the upload path's own service Command."""
    b: AgentKey = globex["worker"]
    status, _, data = call(
        daphne, "POST", f"/artifacts?groupId=urn:uuid:{globex['group']}", b"globex trade secret",
        token=b.extra["token"], content_type="text/plain",
    )  # fmt: skip
    assert status == 201, data
    content_hash = json.loads(data)["contentHash"]

    a: AgentKey = acme["worker"]
    claim = a.command("ext.mwportal.artifact.content_store", acme["group"], {"contentHash": content_hash})
    status, answer = command(daphne, claim)
    assert (status, code_of(answer)) == (403, "AUTH_FORBIDDEN"), answer
    status, _, data = call(daphne, "GET", f"/artifacts/{content_hash}", token=a.extra["token"])
    assert status == 404 and json.loads(data)["code"] == "GROUP_NOT_FOUND", data
    # And the answer is the one for bytes that exist nowhere (item 8: no oracle).
    nowhere = "sha256:" + "0" * 64
    status, _, absent = call(daphne, "GET", f"/artifacts/{nowhere}", token=a.extra["token"])
    assert status == 404
    assert json.loads(data)["message"].replace(content_hash, "H") == json.loads(absent)["message"].replace(nowhere, "H")


def test_it_answers_400_not_500_for_a_nul_and_an_overlong_media_type_item_6(
    daphne: Daphne, acme: dict[str, Any]
) -> None:
    """Both were PostgreSQL-only 500s; the suite runs this on both backends."""
    owner: AgentKey = acme["owner"]
    group = str(uuid.uuid4())
    terms = mission_terms(str(uuid.uuid4()), group, acme["coordinator"], "a\u0000b")
    status, answer = command(daphne, owner.command("mission.create", group, terms))
    assert status == 400, answer
    assert code_of(answer) in ("SCHEMA_VALIDATION_FAILED", "PROTOCOL_VIOLATION") and answer["message"], answer

    worker: AgentKey = acme["worker"]
    media_type = "text/" + "x" * 201
    group_urn = f"urn:uuid:{acme['group']}"
    single, resumable = f"/artifacts?groupId={group_urn}", f"/artifacts/uploads?groupId={group_urn}"
    for path, body, extra in ((single, b"bytes", {}), (resumable, None, {"Upload-Length": "5"})):
        status, _, data = call(
            daphne, "POST", path, body, token=worker.extra["token"], content_type=media_type, headers=extra
        )
        assert status == 400, (path, status, data)
        error = json.loads(data)
        assert error["code"] == "SCHEMA_VALIDATION_FAILED" and "media type" in error["message"], error


def test_it_verifies_before_replaying_and_checks_freshness_item_8(daphne: Daphne, acme: dict[str, Any]) -> None:
    """§15.1, §6.4: a forged copy of a known Command got the stored receipt back,
    and ``issuedAt`` in 2001 and 2999 were accepted."""
    owner: AgentKey = acme["owner"]

    def post(**kw: Any) -> dict[str, Any]:
        group = str(uuid.uuid4())
        terms = mission_terms(str(uuid.uuid4()), group, acme["coordinator"], "T")
        return owner.command("mission.create", group, terms, **kw)

    genuine = post()
    status, receipt = command(daphne, genuine)
    assert status == 201, receipt
    assert command(daphne, genuine) == (200, {**receipt, "replayed": True})  # the owner's own retry is a replay

    # The same content under the owner's key ID, signed by someone else's key.
    forger = Key(owner.key.key_id, os.urandom(32), owner.key.principal, None)
    unsigned = {k: v for k, v in genuine.items() if k not in ("signature", "protocolVersion")}
    forged = build_command(
        genuine["kind"], actor=(owner.actor_type, owner.id), key=forger, payload=genuine["payload"],
        group=genuine["groupId"][9:], action_id=genuine["actionId"][9:],
        issued_at=datetime.fromisoformat(genuine["issuedAt"].replace("Z", "+00:00")),
    )  # fmt: skip
    assert {k: v for k, v in forged.items() if k not in ("signature", "protocolVersion")} == unsigned
    assert forged["signature"] != genuine["signature"]
    status, answer = command(daphne, forged)
    assert (status, code_of(answer)) == (401, "AUTH_INVALID_SIGNATURE"), answer
    assert "events" not in answer

    # Stale and ahead alike: the stage's code, the reason only in the protected diagnostics (DESIGN §3).
    for year in (2001, 2999):
        late = post(issued_at=datetime(year, 1, 1, tzinfo=UTC))
        status, answer = command(daphne, late)
        assert (status, code_of(answer)) == (401, "AUTH_INVALID_SIGNATURE"), (year, answer)
        assert "events" not in answer and not ActionReceipt.objects.filter(action_id=late["actionId"][9:]).exists()
