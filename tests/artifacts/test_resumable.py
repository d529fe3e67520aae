"""Resumable, chunked uploads (issue 8; DESIGN §5): /api/v0.1/artifacts/uploads[/{uploadId}[/complete]].

Each request carries at most ``MWP_ARTIFACT_CHUNK_BYTES``, so daphne (which
queues a request body whole) never holds more than a chunk of an Artifact.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from artifacts.models import Blob
from artifacts.store import blob_name
from artifacts.uploads import sweep_stale_uploads, uploads_dir
from mwportal.protocol.ids import urn
from tests.api.support import API, error_of, show
from tests.artifacts.conftest import Artifacts, events_of
from tests.conftest import AgentKey

UPLOADS = f"{API}/artifacts/uploads"
CHUNK_MAX = 64 * 1024


@pytest.fixture(autouse=True)
def _small_chunks(settings) -> None:  # type: ignore[no-untyped-def]
    settings.MWP_ARTIFACT_CHUNK_BYTES = CHUNK_MAX


def content_of(size: int) -> bytes:
    return (hashlib.sha256(b"seed").digest() * (size // 32 + 1))[:size]


def start(art: Artifacts, length: int, agent: AgentKey | None = None, media_type: str = "text/csv") -> Any:
    client, auth = art.client(agent or art.worker)
    return client.post(
        f"{UPLOADS}?groupId={urn(art.group)}", content_type=media_type, HTTP_UPLOAD_LENGTH=str(length), **auth
    )


def patch(art: Artifacts, upload: str, offset: int, chunk: bytes, agent: AgentKey | None = None) -> Any:
    client, auth = art.client(agent or art.worker)
    return client.patch(
        f"{UPLOADS}/{upload}", data=chunk, content_type="application/offset+octet-stream",
        HTTP_UPLOAD_OFFSET=str(offset), **auth,
    )  # fmt: skip


def complete(art: Artifacts, upload: str, sha256: str | None = None, agent: AgentKey | None = None) -> Any:
    client, auth = art.client(agent or art.worker)
    query = f"?contentHash={sha256}" if sha256 else ""
    return client.post(f"{UPLOADS}/{upload}/complete{query}", **auth)


def new_upload(art: Artifacts, length: int) -> str:
    response = start(art, length)
    assert response.status_code == 201, show(response)
    body = response.json()
    assert body["offset"] == 0 and body["chunkMax"] == CHUNK_MAX
    assert body["uploadId"].startswith("urn:uuid:") and response["Location"] == f"{UPLOADS}/{body['uploadId']}"
    return str(body["uploadId"])


def part(upload: str, suffix: str = "part") -> Path:
    return uploads_dir() / f"{uuid.UUID(upload.removeprefix('urn:uuid:')).hex}.{suffix}"


def send_all(art: Artifacts, upload: str, content: bytes, start_at: int = 0) -> None:
    offset = start_at
    while offset < len(content):
        response = patch(art, upload, offset, content[offset : offset + CHUNK_MAX])
        assert response.status_code == 204, show(response)
        offset = int(response["Upload-Offset"])
    assert offset == len(content)


def test_a_multi_chunk_upload_is_stored_under_its_sha256_with_an_event(art: Artifacts) -> None:
    content = content_of(3 * CHUNK_MAX + 123)
    hex_sha = hashlib.sha256(content).hexdigest()
    sha = f"sha256:{hex_sha}"
    upload = new_upload(art, len(content))
    send_all(art, upload, content)
    response = complete(art, upload, sha)
    assert response.status_code == 201, show(response)
    assert response.json() == {"contentHash": sha, "sizeBytes": len(content), "mediaType": "text/csv"}
    assert (Path(settings.MWP_ARTIFACT_ROOT) / blob_name(hex_sha)).read_bytes() == content
    blob = Blob.objects.get(sha256=hex_sha)
    assert (blob.size, blob.integrity) == (len(content), "verified")
    (event,) = events_of(art.group, "ext.mwportal.artifact.content_stored")
    assert event["payload"] == {
        "contentHash": sha,
        "sizeBytes": len(content),
        "mediaType": "text/csv",
        "uploadedBy": art.worker.actor,
    }
    download = art.download(sha, art.coordinator)
    assert b"".join(download.streaming_content) == content
    # The staging files are gone.
    assert list(uploads_dir().iterdir()) == []
    error_of(patch(art, upload, len(content), b"x"), 404, "GROUP_NOT_FOUND")


def test_a_wrong_offset_is_409_with_the_current_offset_and_appends_nothing(art: Artifacts) -> None:
    content = content_of(2 * CHUNK_MAX)
    upload = new_upload(art, len(content))
    assert patch(art, upload, 0, content[:CHUNK_MAX]).status_code == 204
    for wrong in (0, CHUNK_MAX + 1, 5):
        response = patch(art, upload, wrong, content[CHUNK_MAX:])
        error = error_of(response, 409, "REVISION_CONFLICT")
        assert error["details"]["offset"] == CHUNK_MAX
        assert response["Upload-Offset"] == str(CHUNK_MAX)
    assert part(upload).stat().st_size == CHUNK_MAX


def test_resume_after_a_lost_patch_response(art: Artifacts) -> None:
    content = content_of(2 * CHUNK_MAX + 7)
    sha = "sha256:" + hashlib.sha256(content).hexdigest()
    upload = new_upload(art, len(content))
    # The first chunk arrives but its answer is "lost": the client asks where to resume.
    assert patch(art, upload, 0, content[:CHUNK_MAX]).status_code == 204
    client, auth = art.client(art.worker)
    head = client.head(f"{UPLOADS}/{upload}", **auth)
    assert head.status_code == 200 and head["Upload-Offset"] == str(CHUNK_MAX)
    got = client.get(f"{UPLOADS}/{upload}", **auth).json()
    assert (got["offset"], got["length"], got["mediaType"]) == (CHUNK_MAX, len(content), "text/csv")
    assert (got["uploadId"], got["groupId"]) == (upload, urn(art.group))
    # A client that did not ask and resends the chunk is told the same.
    assert patch(art, upload, 0, content[:CHUNK_MAX]).status_code == 409
    send_all(art, upload, content, start_at=CHUNK_MAX)
    assert complete(art, upload, sha).json()["contentHash"] == sha


def test_an_oversize_chunk_or_one_past_the_length_is_malformed(art: Artifacts) -> None:
    upload = new_upload(art, 2 * CHUNK_MAX)
    error_of(patch(art, upload, 0, content_of(CHUNK_MAX + 1)), 400, "SCHEMA_VALIDATION_FAILED")
    assert patch(art, upload, 0, content_of(CHUNK_MAX)).status_code == 204
    short = new_upload(art, 10)
    error_of(patch(art, short, 0, b"eleven byte"), 400, "SCHEMA_VALIDATION_FAILED")
    assert part(short).stat().st_size == 0
    error_of(start(art, settings.MWP_ARTIFACT_MAX_BYTES + 1), 400, "SCHEMA_VALIDATION_FAILED")
    client, auth = art.client(art.worker)
    error_of(
        client.post(f"{UPLOADS}?groupId={urn(art.group)}", content_type="text/csv", **auth),
        400,
        "SCHEMA_VALIDATION_FAILED",
    )


def test_only_the_agent_that_started_an_upload_sees_it(art: Artifacts) -> None:
    upload = new_upload(art, 10)
    error_of(patch(art, upload, 0, b"0123456789", agent=art.worker2), 404, "GROUP_NOT_FOUND")
    client, auth = art.client(art.worker2)
    assert client.head(f"{UPLOADS}/{upload}", **auth).status_code == 404
    error_of(client.get(f"{UPLOADS}/{upload}", **auth), 404, "GROUP_NOT_FOUND")
    assert patch(art, upload, 0, b"0123456789").status_code == 204
    error_of(complete(art, upload, agent=art.worker2), 404, "GROUP_NOT_FOUND")
    error_of(patch(art, "..", 0, b"x"), 404, "GROUP_NOT_FOUND")
    error_of(patch(art, "not-an-upload-id", 0, b"x"), 404, "GROUP_NOT_FOUND")
    error_of(patch(art, upload.removeprefix("urn:uuid:"), 0, b"x"), 404, "GROUP_NOT_FOUND")  # the v1 form
    assert complete(art, upload).status_code == 201


def test_complete_before_all_bytes_is_refused(art: Artifacts) -> None:
    content = content_of(CHUNK_MAX + 1)
    upload = new_upload(art, len(content))
    assert patch(art, upload, 0, content[:CHUNK_MAX]).status_code == 204
    error = error_of(complete(art, upload), 400, "SCHEMA_VALIDATION_FAILED")
    assert error["details"]["offset"] == CHUNK_MAX
    assert not Blob.objects.exists()
    assert patch(art, upload, CHUNK_MAX, content[CHUNK_MAX:]).status_code == 204
    assert complete(art, upload).status_code == 201


def test_an_expected_hash_mismatch_is_refused_and_nothing_is_stored(art: Artifacts) -> None:
    content = content_of(100)
    upload = new_upload(art, len(content))
    assert patch(art, upload, 0, content).status_code == 204
    wrong = "sha256:" + hashlib.sha256(b"something else").hexdigest()
    error = error_of(complete(art, upload, wrong), 400, "INVALID_COMMAND")
    assert error["details"] == {
        "contentHash": "sha256:" + hashlib.sha256(content).hexdigest(),
        "expected": wrong,
        "reason": "artifact_hash_mismatch",
    }
    assert not Blob.objects.exists()
    assert not events_of(art.group, "ext.mwportal.artifact.content_stored")
    assert not (Path(settings.MWP_ARTIFACT_ROOT) / blob_name(hashlib.sha256(content).hexdigest())).exists()
    error_of(complete(art, upload), 404, "GROUP_NOT_FOUND")  # dropped
    error_of(complete(art, upload, "not-a-hash"), 400, "SCHEMA_VALIDATION_FAILED")
    error_of(complete(art, upload, wrong.removeprefix("sha256:")), 400, "SCHEMA_VALIDATION_FAILED")


def test_non_members_cannot_start_an_upload(art: Artifacts, outsider: AgentKey) -> None:
    error_of(start(art, 10, agent=outsider), 404, "GROUP_NOT_FOUND")
    client, auth = art.client(art.worker)
    error_of(
        client.post(f"{UPLOADS}?groupId=urn:uuid:00000000-0000-4000-8000-000000000000", content_type="text/csv",
                    HTTP_UPLOAD_LENGTH="10", **auth),
        404, "GROUP_NOT_FOUND",
    )  # fmt: skip
    assert list(uploads_dir().iterdir()) == []


def test_stale_uploads_are_deleted(art: Artifacts, settings) -> None:  # type: ignore[no-untyped-def]
    old = new_upload(art, 10)
    meta_path = part(old, "json")
    meta = json.loads(meta_path.read_text())
    meta["created"] = time.time() - settings.MWP_ARTIFACT_UPLOAD_TTL_SECONDS - 1
    meta_path.write_text(json.dumps(meta))
    fresh = new_upload(art, 10)  # the sweep on creation removes the stale one
    assert not part(old).exists()
    error_of(patch(art, old, 0, b"0123456789"), 404, "GROUP_NOT_FOUND")
    assert patch(art, fresh, 0, b"0123456789").status_code == 204
    # On access too.
    meta = json.loads(part(fresh, "json").read_text())
    meta["created"] = 0
    part(fresh, "json").write_text(json.dumps(meta))
    error_of(complete(art, fresh), 404, "GROUP_NOT_FOUND")
    assert not part(fresh).exists()
    assert sweep_stale_uploads() == 0


@pytest.mark.django_db(transaction=True)  # the ASGI handler's thread reads committed rows
def test_under_asgi_a_single_request_upload_over_a_chunk_is_refused(art: Artifacts) -> None:
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    auth = {"Authorization": f"Bearer {art.worker.extra['token']}"}

    async def post(body: bytes) -> tuple[int, dict[str, Any]]:
        response = await AsyncClient().post(
            f"{API}/artifacts?groupId={urn(art.group)}", data=body, content_type="text/plain", headers=auth
        )
        return response.status_code, response.json()

    status, payload = async_to_sync(post)(content_of(CHUNK_MAX + 1))
    assert status == 400 and payload["code"] == "SCHEMA_VALIDATION_FAILED", payload
    assert f"{API}/artifacts/uploads" in payload["message"]
    assert not Blob.objects.exists()
    status, payload = async_to_sync(post)(content_of(CHUNK_MAX))
    assert status == 201, payload
    # Under WSGI the single request stays unlimited (up to MWP_ARTIFACT_MAX_BYTES).
    assert art.upload(content_of(CHUNK_MAX + 1)) == "sha256:" + hashlib.sha256(content_of(CHUNK_MAX + 1)).hexdigest()


def test_the_part_file_is_never_left_half_appended(art: Artifacts) -> None:
    """A body that ends before its Content-Length appends nothing."""
    import io

    from artifacts.uploads import append_chunk
    from missions.models import Agent
    from mwportal.protocol import ProtocolError

    upload = new_upload(art, 100)
    with pytest.raises(ProtocolError):
        append_chunk(upload, Agent.objects.get(id=art.worker.id), 0, io.BytesIO(b"short"), 50)
    assert os.path.getsize(part(upload)) == 0


class _ClientHttp:
    """``mwworker``'s ``_Http`` with its wire replaced by Django's test client;
    ``lose`` names PATCH offsets whose answer is lost once (the chunk arrives)."""

    def __new__(cls, art: Artifacts, lose: set[int]) -> Any:
        from mwworker.rest import _Http

        class Http(_Http):
            calls: list[tuple[str, str, int]] = []

            def _call(self, method, path, token, body, data, content_type, headers=None):  # type: ignore[no-untyped-def]
                client, auth = art.client(art.worker)
                extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in (headers or {}).items()}
                response = client.generic(method, path, data=data or b"", content_type=content_type, **auth, **extra)
                self.calls.append((method, path.split("?")[0], len(data or b"")))
                offset = int((headers or {}).get("Upload-Offset", -1))
                if method == "PATCH" and offset in lose:
                    lose.discard(offset)
                    raise ConnectionResetError("answer lost")
                return response.status_code, json.loads(response.content or b"null")

        return Http("http://portal")


def test_the_worker_runtime_uploads_past_chunk_max_in_chunks_and_resumes(art: Artifacts) -> None:
    http = _ClientHttp(art, lose={CHUNK_MAX})
    content = content_of(20 * CHUNK_MAX + 5)  # past the 1 MiB a Worker sends in one request
    sha = http.put_artifact_blocking(art.worker.extra["token"], urn(art.group), content, "text/csv")
    assert sha == "sha256:" + hashlib.sha256(content).hexdigest()
    assert Blob.objects.get(sha256=sha.removeprefix("sha256:")).size == len(content)
    patches = [c for c in http.calls if c[0] == "PATCH"]
    assert len(patches) == 21 and max(size for _, _, size in patches) == CHUNK_MAX
    # The lost answer: the runtime asked where to resume (the chunk had arrived: not resent).
    assert [c[0] for c in http.calls].count("GET") == 1
    assert http.chunk_max == CHUNK_MAX
    # Now that the portal's chunk_max is known, a small Artifact still takes one request,
    # and one over chunk_max (but under 1 MiB) takes the resumable path.
    http.calls.clear()
    assert http.put_artifact_blocking(art.worker.extra["token"], urn(art.group), b"small", "text/plain")
    assert [c[1] for c in http.calls] == [f"{API}/artifacts"]
    http.calls.clear()
    http.put_artifact_blocking(art.worker.extra["token"], urn(art.group), content_of(CHUNK_MAX + 1), "text/plain")
    assert [c[0] for c in http.calls] == ["POST", "PATCH", "PATCH", "POST"]


def test_a_request_that_waited_on_a_completion_finds_no_upload(art: Artifacts, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Completion moves the part file under its hash while holding its lock; a
    PATCH or completion that opened it before must not touch the stored blob."""
    import threading

    from artifacts.uploads import _locked, complete_upload
    from missions.models import Agent, Group
    from mwportal.protocol import ProtocolError

    upload = new_upload(art, 10)
    assert patch(art, upload, 0, b"0123456789").status_code == 204
    agent, group = Agent.objects.get(id=art.worker.id), Group.objects.get(id=art.group)
    release = threading.Event()
    outcome: list[object] = []

    def waiter() -> None:
        release.wait()
        try:
            with _locked(upload):
                outcome.append("entered")
        except ProtocolError as exc:
            outcome.append(exc.code)

    thread = threading.Thread(target=waiter)
    thread.start()
    import artifacts.uploads as uploads

    real_put = uploads.put_staged

    def put_while_another_waits(*args: Any) -> Any:
        release.set()  # the waiter now blocks on the lock we hold
        time.sleep(0.2)  # time for the waiter to open the part file and block on its lock
        return real_put(*args)

    monkeypatch.setattr(uploads, "put_staged", put_while_another_waits)
    blob = complete_upload(upload, agent, group, None)
    thread.join(5)
    assert outcome == ["GROUP_NOT_FOUND"]
    assert (Path(settings.MWP_ARTIFACT_ROOT) / blob_name(blob.sha256)).read_bytes() == b"0123456789"
