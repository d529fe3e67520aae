"""Resumable, chunked uploads (tus-like): each HTTP request carries at most
``MWP_ARTIFACT_CHUNK_BYTES``, so no server (daphne queues a request body
whole) ever holds more than a chunk of an Artifact in memory.

1. ``create_upload`` stages an empty ``<spool>/uploads/<id>.part`` and a small
   ``<id>.json`` (group, agent, media type, length, created);
2. ``append_chunk`` appends a chunk at the offset the client names, which
   must be the bytes received so far (else REVISION_CONFLICT with the current
   offset: the client resumes from there), and fsyncs;
3. ``complete_upload`` hashes the staged file (streaming), checks the
   client's expected hash (INVALID_COMMAND, reason ``artifact_hash_mismatch``; the upload is
   dropped), then stores it like a single-request upload (``put_staged``)
   and records the Group holding it (``link_to_group``, through ``accept()``).

Staging is content, not authoritative state: files, no model. Only the Agent
that created an upload sees it (anyone else: GROUP_NOT_FOUND). An upload older than
``MWP_ARTIFACT_UPLOAD_TTL_SECONDS`` is deleted when it is next touched and by
the sweep each ``create_upload`` runs; ``cancel_upload`` deletes one at once.

An upload reserves disk until it completes, is cancelled or expires, so each
Agent has a quota (issue 16 item 8): at most ``MWP_ARTIFACT_UPLOAD_MAX_OPEN``
open uploads and ``MWP_ARTIFACT_UPLOAD_MAX_RESERVED_BYTES`` of declared
``Upload-Length`` between them. Past either, ``create_upload`` answers
RATE_LIMITED with ``retryAfterMs``. The count and the new upload are made
under one lock of the uploads directory, so concurrent creates cannot both
take the last place.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from django.conf import settings

from missions.models import Agent, Group
from mwportal.protocol import ErrorCode, ProtocolError, malformed
from mwportal.security import PRIVATE_FILE_MODE, private_dir, write_private_json

from .models import Blob
from .store import (
    CHUNK,
    hash_file,
    link_to_group,
    put_staged,
    spool_dir,
)

# An upload's ID on the wire is a ``urn:uuid:`` URI (DESIGN §4); its files are named by the UUID's hex.
UPLOAD_ID_RE = re.compile(r"^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def chunk_max() -> int:
    return int(settings.MWP_ARTIFACT_CHUNK_BYTES)


def uploads_dir() -> Path:
    return private_dir(spool_dir() / "uploads")


def _paths(upload_id: str) -> tuple[Path, Path]:
    base, name = uploads_dir(), uuid.UUID(upload_id.removeprefix("urn:uuid:")).hex
    return base / f"{name}.part", base / f"{name}.json"


def _not_found(upload_id: str) -> ProtocolError:
    return ProtocolError(ErrorCode.GROUP_NOT_FOUND, f"no upload {upload_id}", details={"uploadId": upload_id})


def _is_stale(meta: dict[str, Any], now: float) -> bool:
    return now - float(meta.get("created", 0)) > settings.MWP_ARTIFACT_UPLOAD_TTL_SECONDS


def _delete(upload_id: str) -> None:
    for path in _paths(upload_id):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _metas() -> Iterator[tuple[str, dict[str, Any]]]:
    for meta_path in uploads_dir().glob("*.json"):
        try:
            upload_id = f"urn:uuid:{uuid.UUID(meta_path.stem)}"
        except ValueError:
            continue  # not one of ours
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            meta = {}
        yield upload_id, meta


def _open_metas(now: float) -> list[dict[str, Any]]:
    """The metas of the uploads still open, deleting the stale ones on the way."""
    found = []
    for upload_id, meta in _metas():
        if _is_stale(meta, now):
            _delete(upload_id)
        else:
            found.append(meta)
    return found


def sweep_stale_uploads(now: float | None = None) -> int:
    """Delete the uploads older than the TTL; how many went."""
    now = time.time() if now is None else now
    gone = 0
    for upload_id, meta in _metas():
        if _is_stale(meta, now):
            _delete(upload_id)
            gone += 1
    return gone


@contextlib.contextmanager
def _directory_locked() -> Iterator[None]:
    """One quota decision at a time (this machine's uploads directory)."""
    with open(spool_dir() / "uploads.lock", "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        yield


def check_quota(agent: Agent, length: int, now: float) -> None:
    """RATE_LIMITED when one more upload of ``length`` bytes would take the
    Agent past its open uploads or reserved bytes (sweeping stale uploads).

    ``retryAfterMs`` is when the Agent's oldest open upload expires, the
    latest moment a place frees by itself, bounded to a minute: completing
    or cancelling (``DELETE``) one of its uploads frees a place at once.
    """
    mine = [m for m in _open_metas(now) if m.get("agent") == str(agent.id)]
    max_open = int(settings.MWP_ARTIFACT_UPLOAD_MAX_OPEN)
    max_bytes = int(settings.MWP_ARTIFACT_UPLOAD_MAX_RESERVED_BYTES)
    reserved = sum(int(m.get("length", 0)) for m in mine)
    if len(mine) < max_open and reserved + length <= max_bytes:
        return
    oldest = min((float(m.get("created", now)) for m in mine), default=now)
    expires_in = max(0.0, oldest + settings.MWP_ARTIFACT_UPLOAD_TTL_SECONDS - now)
    raise ProtocolError(
        ErrorCode.RATE_LIMITED,
        f"this Agent has {len(mine)} open uploads reserving {reserved} bytes (at most {max_open} uploads and "
        f"{max_bytes} bytes): complete or DELETE one first",
        details={"open": len(mine), "maxOpen": max_open, "reservedBytes": reserved, "maxReservedBytes": max_bytes,
         "length": length},
        retry_after_ms=max(1000, min(60_000, int(expires_in * 1000))),
    )  # fmt: skip


def create_upload(group: Group, agent: Agent, media_type: str, length: int) -> str:
    """Stage an empty upload of ``length`` bytes; its id. SCHEMA_VALIDATION_FAILED for a bad
    length, RATE_LIMITED past the Agent's quota. ``media_type`` was checked
    by the view (``_media_type``, shared with the single upload)."""
    if not 0 < length <= settings.MWP_ARTIFACT_MAX_BYTES:
        raise malformed("Upload-Length", f"must be from 1 to {settings.MWP_ARTIFACT_MAX_BYTES} bytes")
    with _directory_locked():
        now = time.time()
        check_quota(agent, length, now)  # also sweeps the stale uploads
        upload_id = f"urn:uuid:{uuid.uuid4()}"
        part, meta_path = _paths(upload_id)
        part.touch(mode=PRIVATE_FILE_MODE, exist_ok=False)
        meta = {"group": str(group.id), "agent": str(agent.id), "media_type": media_type, "length": length,
                "created": now}  # fmt: skip
        write_private_json(meta_path, meta)
    return upload_id


def cancel_upload(upload_id: str, agent: Agent) -> None:
    """Delete an upload of ``agent`` and its staged bytes (GROUP_NOT_FOUND for any
    other): its place in the quota frees at once. Waits for a PATCH or a
    completion in progress on it."""
    load_upload(upload_id, agent)
    with _locked(upload_id):
        _delete(upload_id)


def load_upload(upload_id: str, agent: Agent) -> dict[str, Any]:
    """The upload's meta (with its current ``offset``) if ``agent`` created it; GROUP_NOT_FOUND otherwise."""
    if not isinstance(upload_id, str) or not UPLOAD_ID_RE.match(upload_id):
        raise _not_found(str(upload_id))
    part, meta_path = _paths(upload_id)
    try:
        meta: dict[str, Any] = json.loads(meta_path.read_text())
        offset = part.stat().st_size
    except (OSError, ValueError):
        raise _not_found(upload_id) from None
    if meta.get("agent") != str(agent.id):
        raise _not_found(upload_id)
    if _is_stale(meta, time.time()):
        _delete(upload_id)
        raise _not_found(upload_id)
    meta["offset"] = offset
    return meta


@contextlib.contextmanager
def _locked(upload_id: str) -> Iterator[BinaryIO]:
    """The part file opened for appending, under an exclusive lock (one
    PATCH or completion at a time per upload)."""
    part, _ = _paths(upload_id)
    try:
        fh = open(part, "r+b")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        raise _not_found(upload_id) from None
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        # A completion (or the stale sweep) that held the lock before us
        # moved or deleted the file: what we opened is no longer the upload.
        try:
            same = os.path.samestat(os.fstat(fh.fileno()), os.stat(part))
        except FileNotFoundError:
            same = False
        if not same:
            raise _not_found(upload_id)
        yield fh
    finally:
        fh.close()


def offset_mismatch(current: int, offset: int) -> ProtocolError:
    return ProtocolError(
        ErrorCode.REVISION_CONFLICT,
        f"Upload-Offset: the upload holds {current} bytes, not {offset}; resume from {current}",
        details={"field": "Upload-Offset", "offset": current},
    )


def append_chunk(upload_id: str, agent: Agent, offset: int, stream: BinaryIO, size: int) -> int:
    """Append ``size`` bytes of ``stream`` at ``offset`` (which must be the
    bytes received so far) and fsync; the new offset. A body that ends early
    appends nothing."""
    meta = load_upload(upload_id, agent)
    if size > chunk_max():
        raise malformed("body", f"a chunk is at most {chunk_max()} bytes")
    with _locked(upload_id) as fh:
        current = os.fstat(fh.fileno()).st_size
        if offset != current:
            raise offset_mismatch(current, offset)
        if current + size > meta["length"]:
            raise malformed("body", f"runs past Upload-Length ({meta['length']} bytes)")
        fh.seek(current)
        written = 0
        try:
            while written < size:
                chunk = stream.read(min(CHUNK, size - written))
                if not chunk:
                    raise malformed("body", f"ended after {written} of the {size} bytes declared")
                fh.write(chunk)
                written += len(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        except BaseException:
            fh.truncate(current)  # nothing half-appended: the client resends the chunk
            raise
        return current + written


def complete_upload(upload_id: str, agent: Agent, group: Group, expected_sha256: str | None) -> Blob:
    """Hash the staged bytes, check them against ``expected_sha256``, store
    them under their hash and record that the Group holds them."""
    meta = load_upload(upload_id, agent)
    with _locked(upload_id) as fh:
        received = os.fstat(fh.fileno()).st_size
        if received != meta["length"]:
            raise ProtocolError(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                f"uploadId: {received} of its {meta['length']} bytes received; send the rest first",
                details={"field": "uploadId", "offset": received, "length": meta["length"]},
            )
        part, _ = _paths(upload_id)
        sha, size = hash_file(part)
        if expected_sha256 is not None and sha != expected_sha256:
            _delete(upload_id)
            raise ProtocolError(
                ErrorCode.INVALID_COMMAND,
                f"the uploaded bytes hash to sha256:{sha}, not sha256:{expected_sha256}; the upload is dropped",
                details={
                    "contentHash": f"sha256:{sha}",
                    "expected": f"sha256:{expected_sha256}",
                    "reason": "artifact_hash_mismatch",
                },
            )
        blob = put_staged(str(part), sha, size, meta["media_type"])
    _delete(upload_id)
    link_to_group(blob, group, agent)
    return blob
