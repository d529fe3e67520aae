"""POST/GET /api/v0.1/artifacts (PROTOCOL §13.1; DESIGN §5): streaming, content addressed, hash checked on read."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from artifacts.models import Blob
from artifacts.store import blob_name
from missions.models import Group
from mwportal.protocol.ids import urn
from tests.api.support import API, error_of, normative
from tests.artifacts.conftest import Artifacts, events_of
from tests.conftest import AgentKey


def stored_path(content_hash: str) -> Path:
    return Path(settings.MWP_ARTIFACT_ROOT) / blob_name(content_hash.removeprefix("sha256:"))


def test_upload_names_the_bytes_by_their_sha256_and_download_returns_them_13_1(art: Artifacts) -> None:
    content = b"x" * (3 * 1024 * 1024 + 17)  # more than one chunk
    sha = art.upload(content, "application/octet-stream")
    assert sha == "sha256:" + hashlib.sha256(content).hexdigest()
    response = art.download(sha, art.coordinator)
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == content
    assert response["ETag"] == f'"{sha}"'
    assert response["Content-Length"] == str(len(content))
    assert Blob.objects.get(sha256=sha.removeprefix("sha256:")).integrity == "verified"


def test_storing_the_same_bytes_twice_is_one_blob(art: Artifacts) -> None:
    assert art.upload(b"same") == art.upload(b"same", agent=art.coordinator)
    assert Blob.objects.filter(sha256=hashlib.sha256(b"same").hexdigest()).count() == 1


def test_the_bare_hex_of_v1_is_not_a_content_hash_on_the_wire(art: Artifacts) -> None:
    """Content hashes are ``sha256:<hex>`` (``common.schema.json#/$defs/sha256``); the
    v1 dialect's bare hex names nothing."""
    sha = art.upload(b"prefixed")
    error = error_of(art.download(sha.removeprefix("sha256:")), 400, "SCHEMA_VALIDATION_FAILED")
    assert error["details"]["field"] == "contentHash"


def test_a_corrupted_blob_is_never_served_and_the_mismatch_is_recorded_13_1(art: Artifacts, caplog) -> None:  # type: ignore[no-untyped-def]
    sha = art.upload(b"the original bytes")
    path = stored_path(sha)
    path.write_bytes(b"the 0riginal bytes")  # one byte changed on disk
    response = art.download(sha, art.coordinator)
    # The Authority's store failed, not the request (errors.py).
    error = error_of(response, 500, "INTERNAL_ERROR")
    assert error["details"]["contentHash"] == sha and error["details"]["reason"] == "artifact_hash_mismatch"
    assert b"0riginal" not in response.content
    # Recorded where the portal reads it, and logged.
    hex_sha = sha.removeprefix("sha256:")
    assert Blob.objects.get(sha256=hex_sha).integrity == "mismatch"
    assert any(hex_sha in r.getMessage() for r in caplog.records)
    # Re-uploading the true bytes heals the stored copy.
    art.upload(b"the original bytes")
    assert art.download(sha).status_code == 200
    assert Blob.objects.get(sha256=hex_sha).integrity == "verified"


def test_a_vanished_blob_is_refused_not_crashed(art: Artifacts) -> None:
    sha = art.upload(b"soon gone")
    stored_path(sha).unlink()
    error = error_of(art.download(sha), 500, "INTERNAL_ERROR")
    assert error["details"]["reason"] == "artifact_hash_mismatch"
    assert Blob.objects.get(sha256=sha.removeprefix("sha256:")).integrity == "missing"


def test_it_answers_a_non_member_as_if_the_blob_did_not_exist_issue_16_item_8(
    art: Artifacts, outsider: AgentKey
) -> None:
    """No existence oracle: a blob the caller may not read is GROUP_NOT_FOUND with
    the same message shape as a hash nobody uploaded."""
    sha, unknown = art.upload(b"members only"), "sha256:" + "0" * 64
    hidden = error_of(art.download(sha, outsider), 404, "GROUP_NOT_FOUND")
    absent = error_of(art.download(unknown, outsider), 404, "GROUP_NOT_FOUND")
    assert hidden == {**absent, "message": absent["message"].replace(unknown, sha), "details": {"contentHash": sha}}
    error_of(art.download("not-a-hash", art.coordinator), 400, "SCHEMA_VALIDATION_FAILED")


def test_a_blob_of_group_b_is_not_readable_by_a_member_of_group_a_only(art: Artifacts, other: dict[str, str]) -> None:
    # Carl uploads to B; Wanda is a member of A only, Walt of both.
    sha = art.upload(b"mission B content", agent=art.coordinator, group=other["group"])
    error_of(art.download(sha, art.worker), 404, "GROUP_NOT_FOUND")
    assert art.download(sha, art.worker2).status_code == 200


def test_upload_needs_group_membership(art: Artifacts, outsider: AgentKey) -> None:
    client, auth = art.client(outsider)
    response = client.post(f"{API}/artifacts?groupId={urn(art.group)}", data=b"x", content_type="text/plain", **auth)
    error_of(response, 404, "GROUP_NOT_FOUND")
    # The Group is named by its urn:uuid: (DESIGN §4); a bare UUID is malformed.
    response = client.post(f"{API}/artifacts?groupId={art.group}", data=b"x", content_type="text/plain", **auth)
    assert error_of(response, 400, "SCHEMA_VALIDATION_FAILED")["details"]["field"] == "groupId"


@pytest.mark.django_db(transaction=True)  # the ASGI handler's thread reads committed rows
def test_under_asgi_the_bytes_stream_from_an_async_iterator_after_the_check(art: Artifacts) -> None:
    """Django collects a synchronous iterator into one list under ASGI; the
    view hands daphne an async one instead (a 1 GiB Artifact never in memory)."""
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    content = b"y" * (2 * 1024 * 1024 + 5)
    sha = art.upload(content)
    auth = {"Authorization": f"Bearer {art.coordinator.extra['token']}"}

    async def fetch() -> tuple[int, bool, bytes]:
        response = await AsyncClient().get(f"{API}/artifacts/{sha}", headers=auth)
        if response.status_code != 200:
            return response.status_code, False, response.content
        body = b"".join([chunk async for chunk in response.streaming_content])
        return response.status_code, response.is_async, body

    status, is_async, body = async_to_sync(fetch)()
    assert (status, is_async) == (200, True), body[:300]
    assert body == content
    stored_path(sha).write_bytes(content[:-1] + b"z")
    status, _, body = async_to_sync(fetch)()
    assert status == 500 and b"INTERNAL_ERROR" in body and b"artifact_hash_mismatch" in body


def test_a_group_holding_an_upload_is_an_event_of_its_log_without_the_bytes_13_1(
    art: Artifacts, other: dict[str, str]
) -> None:
    """The upload path stores and hashes the bytes, then the control plane (a
    service Principal, Auth.SERVICE) records that the Group holds them:
    ``ext.mwportal.artifact.content_stored``, a normative signed Event (§15.2)
    naming hash, size and media type, never the bytes (§13.1)."""
    from missions.service_keys import control_plane

    content = b"secret payload bytes"
    sha = art.upload(content)
    (event,) = events_of(art.group, "ext.mwportal.artifact.content_stored")
    normative("event", event)
    assert event["payload"] == {
        "contentHash": sha,
        "sizeBytes": len(content),
        "mediaType": "text/markdown",
        "uploadedBy": art.worker.actor,
    }
    key = control_plane(str(Group.objects.get(id=art.group).organization_id))
    assert key.principal is not None
    assert event["actor"] == {"type": "service", "id": urn(key.principal[1])}
    assert content not in json.dumps(event).encode()
    art.upload(content)  # the same bytes again: harmless, nothing new
    assert len(events_of(art.group, "ext.mwportal.artifact.content_stored")) == 1
    art.upload(content, agent=art.worker2, group=other["group"])
    assert len(events_of(other["group"], "ext.mwportal.artifact.content_stored")) == 1


def test_no_agent_may_claim_that_a_group_holds_bytes_issue_16_item_1(art: Artifacts) -> None:
    """``content_store`` is the control plane's alone: an Agent's signed Command is refused."""
    from mwportal.protocol import ErrorCode
    from tests.conftest import refused

    sha = art.upload(b"held")
    refused(
        ErrorCode.AUTH_FORBIDDEN,
        art.worker.send,
        "ext.mwportal.artifact.content_store",
        art.group,
        {"contentHash": sha},
    )


def test_a_body_shorter_than_its_content_length_is_refused_not_stored(art: Artifacts) -> None:
    import io

    from artifacts.store import store_stream
    from missions.models import Agent, Group
    from mwportal.protocol import ErrorCode, ProtocolError

    with pytest.raises(ProtocolError) as info:
        store_stream(
            io.BytesIO(b"cut sh"), "text/plain", Group.objects.get(id=art.group), Agent.objects.get(id=art.worker.id),
            1000, expected_size=12,
        )  # fmt: skip
    assert info.value.code == ErrorCode.SCHEMA_VALIDATION_FAILED
    assert not Blob.objects.filter(sha256=hashlib.sha256(b"cut sh").hexdigest()).exists()
    assert not list((Path(settings.MWP_ARTIFACT_ROOT) / "tmp").iterdir())


def test_it_keeps_the_store_private_to_the_servers_user_issue_16_item_8(art: Artifacts) -> None:
    """Directories 0700, files 0600, whatever the umask; an older store left open is tightened."""
    import os
    import stat

    root = Path(settings.MWP_ARTIFACT_ROOT)
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)  # noqa: S103 (the open mode an older installation left, to be tightened)
    old_umask = os.umask(0o022)
    try:
        sha = art.upload(b"private bytes")
        client, auth = art.client(art.worker)
        upload = client.post(
            f"{API}/artifacts/uploads?groupId={urn(art.group)}", content_type="text/plain", HTTP_UPLOAD_LENGTH="4",
            **auth,
        ).json()["uploadId"]  # fmt: skip
    finally:
        os.umask(old_umask)
    blob = stored_path(sha)
    dirs = [root, root / "tmp", root / "tmp" / "uploads", blob.parent, blob.parent.parent]
    name = uuid.UUID(upload.removeprefix("urn:uuid:")).hex
    files = [blob, root / "tmp" / "uploads" / f"{name}.part", root / "tmp" / "uploads" / f"{name}.json"]
    assert {str(d.relative_to(root)): stat.S_IMODE(d.stat().st_mode) for d in dirs} == {
        str(d.relative_to(root)): 0o700 for d in dirs
    }
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {f.name: 0o600 for f in files}
