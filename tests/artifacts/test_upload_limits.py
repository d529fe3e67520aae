"""Upload reservations and early refusals (issue 16 item 8).

The review reserved 300 resumable uploads of 2 GiB each. Each Agent now has
at most ``MWP_ARTIFACT_UPLOAD_MAX_OPEN`` open uploads and
``MWP_ARTIFACT_UPLOAD_MAX_RESERVED_BYTES`` declared between them; past
either, 429 RATE_LIMITED with ``retryAfterMs``. A single-request upload
declaring more than ``MWP_ARTIFACT_MAX_BYTES`` is refused before its body is
read.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pytest
from django.test import RequestFactory

from artifacts.models import Blob
from artifacts.uploads import create_upload, uploads_dir
from artifacts.views import ArtifactUploadView
from missions.models import Agent, Group
from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.ids import urn
from tests.api.support import bearer, error_of, show
from tests.artifacts.conftest import Artifacts
from tests.conftest import AgentKey

UPLOADS = "/api/v0.1/artifacts/uploads"
GIB = 1024**3


def start(art: Artifacts, length: int, agent: AgentKey | None = None) -> Any:
    client, auth = art.client(agent or art.worker)
    return client.post(
        f"{UPLOADS}?groupId={urn(art.group)}", content_type="text/csv", HTTP_UPLOAD_LENGTH=str(length), **auth
    )


def opened(art: Artifacts, length: int, agent: AgentKey | None = None) -> str:
    response = start(art, length, agent)
    assert response.status_code == 201, show(response)
    return str(response.json()["uploadId"])


def rate_limited(response: Any) -> dict[str, Any]:
    error = error_of(response, 429, "RATE_LIMITED")
    assert 1000 <= error["retryAfterMs"] <= 60_000
    assert int(response["Retry-After"]) == -(-error["retryAfterMs"] // 1000)
    return error


def test_it_refuses_the_reviews_300_reservations_of_2_gib_with_the_defaults(art: Artifacts, settings: Any) -> None:
    """Issue 16 item 8: with the defaults (16 uploads, 4 GiB) two of the 300 are taken."""
    assert settings.MWP_ARTIFACT_UPLOAD_MAX_OPEN == 16
    assert settings.MWP_ARTIFACT_UPLOAD_MAX_RESERVED_BYTES == 4 * GIB
    answers = [start(art, 2 * GIB).status_code for _ in range(300)]
    assert answers.count(201) == 2 and answers.count(429) == 298
    error = rate_limited(start(art, 2 * GIB))
    assert error["details"] == {"open": 2, "maxOpen": 16, "reservedBytes": 4 * GIB,
                                "maxReservedBytes": 4 * GIB, "length": 2 * GIB}  # fmt: skip
    assert len(list(uploads_dir().glob("*.part"))) == 2


def test_it_bounds_the_open_uploads_per_agent_and_frees_a_place_on_delete_or_completion(
    art: Artifacts, settings: Any
) -> None:
    settings.MWP_ARTIFACT_UPLOAD_MAX_OPEN = 3
    mine = [opened(art, 10) for _ in range(3)]
    rate_limited(start(art, 10))
    opened(art, 10, art.coordinator)  # another Agent's quota is its own
    client, auth = art.client(art.worker)
    assert client.delete(f"{UPLOADS}/{mine[0]}", **auth).status_code == 204
    error_of(client.get(f"{UPLOADS}/{mine[0]}", **auth), 404, "GROUP_NOT_FOUND")
    error_of(client.delete(f"{UPLOADS}/{mine[1]}", **art.client(art.coordinator)[1]), 404, "GROUP_NOT_FOUND")
    fourth = opened(art, 10)
    rate_limited(start(art, 10))
    patched = client.patch(
        f"{UPLOADS}/{fourth}", data=b"0123456789", content_type="application/offset+octet-stream",
        HTTP_UPLOAD_OFFSET="0", **auth,
    )  # fmt: skip
    assert patched.status_code == 204
    assert client.post(f"{UPLOADS}/{fourth}/complete", **auth).status_code == 201
    opened(art, 10)


def test_it_bounds_the_bytes_reserved_per_agent(art: Artifacts, settings: Any) -> None:
    settings.MWP_ARTIFACT_UPLOAD_MAX_RESERVED_BYTES = 100
    opened(art, 60)
    error = rate_limited(start(art, 41))
    assert error["details"]["reservedBytes"] == 60
    opened(art, 40)  # exactly the bound
    rate_limited(start(art, 1))


def test_an_expired_reservation_no_longer_counts(art: Artifacts, settings: Any) -> None:
    settings.MWP_ARTIFACT_UPLOAD_MAX_OPEN = 1
    old = opened(art, 10)
    rate_limited(start(art, 10))
    meta_path = uploads_dir() / f"{uuid.UUID(old.removeprefix('urn:uuid:')).hex}.json"
    meta = json.loads(meta_path.read_text())
    meta["created"] = time.time() - settings.MWP_ARTIFACT_UPLOAD_TTL_SECONDS - 1
    meta_path.write_text(json.dumps(meta))
    opened(art, 10)
    assert not meta_path.exists()


def test_concurrent_reservations_cannot_both_take_the_last_place(art: Artifacts, settings: Any) -> None:
    """Real threads released together: exactly MAX_OPEN of them get an upload."""
    settings.MWP_ARTIFACT_UPLOAD_MAX_OPEN = 4
    group, agent = Group.objects.get(id=art.group), Agent.objects.get(id=art.worker.id)
    barrier, outcomes = threading.Barrier(12), []

    def reserve() -> None:
        barrier.wait()
        try:
            create_upload(group, agent, "text/csv", 10)
            outcomes.append("ok")
        except ProtocolError as exc:
            outcomes.append(exc.code.value)

    threads = [threading.Thread(target=reserve) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == [ErrorCode.RATE_LIMITED.value] * 8 + ["ok"] * 4


def test_a_single_upload_declaring_more_than_the_limit_is_refused_before_its_body_is_read(
    art: Artifacts, settings: Any
) -> None:
    """Issue 16 item 8: refused on the Content-Length alone; the body stays unread."""
    settings.MWP_ARTIFACT_MAX_BYTES = 1000
    request = RequestFactory().post(
        f"/api/v0.1/artifacts?groupId={urn(art.group)}", data=b"x" * 10, content_type="text/plain",
        CONTENT_LENGTH="1001", **bearer(art.worker.extra["token"]),
    )  # fmt: skip
    response = ArtifactUploadView.as_view()(request).render()
    assert response.status_code == 400
    error = json.loads(response.content)
    assert error["code"] == "SCHEMA_VALIDATION_FAILED" and "at most 1000 bytes" in error["message"]
    assert request.META["wsgi.input"].read_started is False
    assert not Blob.objects.exists()


@pytest.mark.parametrize("length", [0, 2 * GIB + 1])
def test_a_reservation_outside_the_artifact_bounds_is_malformed_not_counted(art: Artifacts, length: int) -> None:
    error_of(start(art, length), 400, "SCHEMA_VALIDATION_FAILED")
    assert list(uploads_dir().glob("*.json")) == []
