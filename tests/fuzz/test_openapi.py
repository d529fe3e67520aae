"""Schemathesis against the REST binding's own OpenAPI document (DESIGN §5): no request answers
5xx, and every refusal is the normative error document (PROTOCOL §19) (issue 16, "Done when": 0
server errors on SQLite and on PostgreSQL, in a bounded run in CI; issue 18: on ``/api/v0.1/``).

Every operation of the document ``GET /api/v0.1/schema/`` serves is fuzzed in-process through
Django's WSGI handler, inside the test's transaction, with schema-valid and schema-violating
requests (schemathesis' positive and negative modes), without a token and with a valid bearer
token (a ``sessionToken``; a negative case whose headers are the violated part may drop it, and
is then refused AUTH_REQUIRED, checked like any refusal), and with the path parameters either
generated or set to real objects the token's Agent can see, written as the wire writes them (a
Mission Group's ``urn:uuid:`` ``groupId``, a stored Artifact's ``sha256:<hex>``
``contentHash``, a WorkItem's ``workItemId``, a resumable upload's ``uploadId``, the Agent's
own ``keyId``, a published ``contextPackageId``, a snapshot's ``sequence``), so the fuzz
reaches past the first lookup.

Two checks per request: schemathesis' ``not_a_server_error``, and that a 4xx body is one JSON
document the bundle's ``error.schema.json`` accepts (``tests.protocol.normative``; without the
bundle, only that it has the document's required members). A failure prints the request to
reproduce it.

Bounded: ``FUZZ_EXAMPLES`` examples per operation and token mode. ``MWP_FUZZ_EXAMPLES`` raises it
for a longer local hunt.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import schemathesis
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err

from missions.api.openapi import openapi_document
from missions.models import GroupEvent
from missions.snapshots import snapshot_now
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import sign_document
from tests.api.support import API, bearer, http, show
from tests.api.support import SCHEMA as SCHEMA_URL
from tests.artifacts.conftest import Artifacts, give_card, new_mission, now_text
from tests.conftest import AgentKey, add_member
from tests.protocol.normative import normative_problems, require_bundle

FUZZ_EXAMPLES = int(os.environ.get("MWP_FUZZ_EXAMPLES", "25"))
PACKAGE_PUBLISH = "ext.mwportal.context.package_publish"

# The resumable upload's chunk body (tus: application/offset+octet-stream) is
# raw bytes, as application/octet-stream is.
schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")


def load_schema() -> Any:
    """The document ``/api/v0.1/schema/`` serves, built without a request
    (no table is read: this runs at collection time)."""
    return schemathesis.openapi.from_dict(json.loads(json.dumps(openapi_document(), default=str)))


def operations(schema: Any) -> list[tuple[str, str]]:
    """(METHOD, path) of every operation; an operation schemathesis cannot
    read is an error here, not a silently skipped route."""
    found = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            raise result.err()
        found.append((result.ok().method.upper(), result.ok().path))
    return sorted(found)


SCHEMA = load_schema()
OPERATIONS = operations(SCHEMA)


@pytest.fixture
def app(settings: Any, tmp_path: Any) -> WSGIHandler:
    """Django's WSGI handler, on the test's connection and transaction."""
    settings.MWP_ARTIFACT_ROOT = str(tmp_path / "artifacts")
    settings.MWP_REVIEW_ON_SUBMIT = "off"
    return WSGIHandler()


@contextmanager
def connection_kept_open() -> Iterator[None]:
    """As Django's test client does around each request: ``close_old_connections``
    off ``request_started`` and ``request_finished``, which would otherwise
    close the test's connection (and with it its transaction)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


def context_package(art: Artifacts, artifact: str) -> dict[str, Any]:
    """A normative Context Package (§13.3, ``context-package.schema.json``) citing the Group's log,
    signed by the Coordinator."""
    events = [urn(e) for e in GroupEvent.objects.filter(group_id=art.group).order_by("sequence").values_list(
        "event_id", flat=True
    )]  # fmt: skip
    doc = {
        "contextPackageId": urn(uuid.uuid4()),
        "version": 1,
        "missionId": urn(art.mission),
        "groupId": urn(art.group),
        "sourceEventRange": {"fromSequence": 1, "toSequence": len(events), "eventIds": events},
        "artifactHashes": [artifact],
        "summary": "The survey so far.",
        "decisions": [{"description": "survey 2026 only", "sourceEventIds": [events[0]]}],
        "constraints": [],
        "unresolvedQuestions": [],
        "generatedBy": art.coordinator.actor,
        "generatedAt": now_text(),
    }
    key = art.coordinator.key
    return sign_document(doc, key_id=key.key_id, seed=key.seed, profile="context-package")


@pytest.fixture
def real(owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey) -> dict[str, str]:
    """Path values, as the wire writes them, naming real objects Wanda (``worker``) may read."""
    mission = new_mission(owner, give_card(coordinator), title="Survey")
    for member in (worker, worker2):
        add_member(owner, mission["group"], member, ["worker"])
    art = Artifacts(mission, owner, coordinator, worker, worker2)
    content_hash = art.upload(b"# findings\n")
    resumable = http().post(
        f"{API}/artifacts/uploads?groupId={urn(art.group)}",
        HTTP_UPLOAD_LENGTH="10",
        content_type="text/plain",
        **bearer(worker.extra["token"]),
    )
    assert resumable.status_code == 201, show(resumable)
    item = art.authorize()
    package = context_package(art, content_hash)
    coordinator.send(PACKAGE_PUBLISH, art.group, {"contextPackage": package}, coordinator_epoch=1)
    snapshot = snapshot_now(art.group)
    return {
        "groupId": urn(art.group),
        "contentHash": content_hash,
        "uploadId": resumable.json()["uploadId"],
        "workItemId": urn(item),
        "keyId": worker.key.key_id,
        # Wanda's own Agent: her card is served to her Organization (§6.1).
        "agentId": worker.urn,
        "contextPackageId": package["contextPackageId"],
        "sequence": str(snapshot.sequence),
    }


def test_the_fuzzed_document_is_the_one_the_schema_route_serves() -> None:
    """DESIGN §5: what is fuzzed is ``GET /api/v0.1/schema/`` itself, every operation under ``/api/v0.1/``."""
    served = http().get(f"{SCHEMA_URL}?format=json")
    assert served.status_code == 200, show(served)
    assert served.json() == json.loads(json.dumps(openapi_document(), default=str))
    assert OPERATIONS and all(path.startswith(f"{API}/") for _, path in OPERATIONS), OPERATIONS


def test_the_real_values_name_every_path_parameter(real: dict[str, str]) -> None:
    """Each path parameter of the document (DESIGN §5) has a real value, so no operation is fuzzed only at its
    first lookup."""
    names = {p.name for m, path in OPERATIONS for p in SCHEMA[path][m].path_parameters}
    assert names == set(real), (names, set(real))


ERROR_MEMBERS = {"code", "message", "retryable", "occurredAt"}


def refusal_problems(status: int, content: bytes) -> list[str]:
    """What is wrong with a 4xx answer as the normative error document (§19): [] when it is one.
    Without the bundle only its required members are checked."""
    if status < 400 or not content:
        return []
    try:
        body = json.loads(content)
    except ValueError:
        return [f"not JSON: {content[:200]!r}"]
    if not isinstance(body, dict) or not set(body) >= ERROR_MEMBERS:
        return [f"not an error document: {content[:200]!r}"]
    return normative_problems("error", body)


def test_the_refusal_check_refuses_what_is_not_the_error_document_19() -> None:
    """The second check can fail: DRF's own ``{"detail"}``, HTML, and a document with a snake_case member."""
    require_bundle()
    assert refusal_problems(404, b'{"detail": "Not found."}')
    assert refusal_problems(404, b"<h1>Not Found</h1>")
    stamp = "2026-01-01T00:00:00Z"
    good = {"code": "GROUP_NOT_FOUND", "message": "no such Group", "retryable": False, "occurredAt": stamp}
    assert refusal_problems(404, json.dumps(good).encode()) == []
    assert refusal_problems(404, json.dumps({**good, "occurred_at": stamp}).encode())


@pytest.mark.parametrize("token", ["none", "bearer"])
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_no_request_answers_a_server_error_and_every_refusal_is_the_error_document_19(
    data: st.DataObject,
    method: str,
    path: str,
    token: str,
    app: WSGIHandler,
    real: dict[str, str],
    worker: AgentKey,
) -> None:
    operation = SCHEMA[path][method]
    headers = {"Authorization": bearer(worker.extra["token"])["HTTP_AUTHORIZATION"]} if token == "bearer" else {}
    names = {p.name for p in operation.path_parameters}
    known = {name: value for name, value in real.items() if name in names}
    strategies = [operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE)]
    if known:
        strategies.append(operation.as_strategy(GenerationMode.POSITIVE, path_parameters=known))
        strategies.append(operation.as_strategy(GenerationMode.NEGATIVE, path_parameters=known))
    case = data.draw(st.one_of(strategies))
    # Each example runs in a savepoint rolled back afterwards: examples do
    # not see each other's writes, and a database error that aborted the
    # transaction (PostgreSQL) cannot fail the examples after it.
    savepoint = transaction.savepoint()
    try:
        with connection_kept_open():
            response = case.call(app=app, headers=headers)
    finally:
        transaction.savepoint_rollback(savepoint)
    case.validate_response(response, checks=[not_a_server_error])
    problems = refusal_problems(response.status_code, response.content or b"")
    assert problems == [], (response.status_code, response.content[:500], problems, case.as_curl_command())
