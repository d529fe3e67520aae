"""Schemathesis against the app's own OpenAPI schema: no request answers 5xx
(issue 16, "Done when": 0 server errors on SQLite and on PostgreSQL, in a
bounded run in CI).

Every operation of ``/api/v1/schema/`` is fuzzed in-process through Django's
WSGI handler, inside the test's transaction, with schema-valid and
schema-violating requests (schemathesis' positive and negative modes),
without a token and with a valid bearer token, and with the path
parameters either generated or set to real objects the token's Agent can
see (a Mission Group, a stored Artifact, a WorkItem, a resumable upload), so
the fuzz reaches past the first lookup. The check is schemathesis'
``not_a_server_error``; a server error prints the request to reproduce it.

Bounded: ``FUZZ_EXAMPLES`` examples per operation and token mode (about 30 s
for the whole module on SQLite). ``MWP_FUZZ_EXAMPLES`` raises it for a
longer local hunt.
"""

from __future__ import annotations

import hashlib
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
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err

from tests.api.support import bearer, http, show
from tests.conftest import AgentKey
from tests.workitems.flow import contract

FUZZ_EXAMPLES = int(os.environ.get("MWP_FUZZ_EXAMPLES", "25"))


# The resumable upload's chunk body (tus: application/offset+octet-stream) is
# raw bytes, as application/octet-stream is.
schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")


def load_schema() -> Any:
    """The schema ``/api/v1/schema/`` serves, generated from the URLconf
    (no request, no table: this runs at collection time)."""
    document = SchemaGenerator().get_schema(request=None, public=True)
    return schemathesis.openapi.from_dict(json.loads(json.dumps(document, default=str)))


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


@pytest.fixture
def real(mission: dict[str, str], coordinator: AgentKey, worker: AgentKey) -> dict[str, str]:
    """Path values naming real objects Wanda (``worker``) may read."""
    content = b"# findings\n"
    token = bearer(worker.extra["token"])
    uploaded = http().post(f"/api/v1/artifacts?group={mission['group']}", content, "text/markdown", **token)
    assert uploaded.status_code == 201, show(uploaded)
    resumable = http().post(
        f"/api/v1/artifacts/uploads?group={mission['group']}",
        HTTP_UPLOAD_LENGTH="10",
        HTTP_CONTENT_TYPE="text/plain",
        **token,
    )
    assert resumable.status_code == 201, show(resumable)
    item = str(uuid.uuid4())
    coordinator.send("work.authorize", mission["group"], {"workitem": item, "contract": contract()})
    return {
        "group_id": mission["group"],
        "sha256": hashlib.sha256(content).hexdigest(),
        "upload_id": resumable.json()["upload"],
        "workitem_id": item,
        "sequence": "1",
    }


@pytest.mark.parametrize("token", ["none", "bearer"])
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_no_request_answers_a_server_error(
    data: st.DataObject,
    method: str,
    path: str,
    token: str,
    app: WSGIHandler,
    real: dict[str, str],
    worker: AgentKey,
) -> None:
    operation = SCHEMA[path][method]
    headers = bearer(worker.extra["token"]) if token == "bearer" else {}
    headers = {"Authorization": headers["HTTP_AUTHORIZATION"]} if headers else {}
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
