"""Streaming, content-addressed blob storage (PROTOCOL §13.1).

Bytes live behind Django's storage API (``MWP_ARTIFACT_STORAGE``, a
``FileSystemStorage`` under ``MWP_ARTIFACT_ROOT`` by default), under a name
derived from their SHA-256 only: a mutable URI is never identity. Writes
stream through SHA-256 into a temporary file and land under their hash; reads
check the hash before a byte is served. A blob whose bytes no longer match is
never served (INTERNAL_ERROR, reason ``artifact_hash_mismatch``): the mismatch
is logged and recorded on the ``Blob`` row (``integrity = "mismatch"``), where
the portal shows it. Nothing is ever held whole in memory: every loop moves
``CHUNK`` bytes. The store names content by its 64 hex digits; ``wire_hash``
and ``hex_of`` convert to and from the wire's ``sha256:<hex>``.

The store is private to the server's user (issue 16 item 8): its
directories are created 0700 and its files 0600 (``private_dir``; staged
files come from ``mkstemp``, which makes them 0600, and keep that mode when
they are moved under their hash).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import queue
import re
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from typing import BinaryIO

from django.conf import settings
from django.core.files import File
from django.core.files.storage import FileSystemStorage, Storage
from django.utils import timezone
from django.utils.module_loading import import_string

from missions.models import Agent, Group
from mwportal.protocol import ErrorCode, ProtocolError, malformed
from mwportal.protocol.ids import urn
from mwportal.security import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, private_dir

from .models import Blob, BlobGroup

log = logging.getLogger("missions.artifacts")
CONTENT_STORE = "ext.mwportal.artifact.content_store"
_HEX = re.compile(r"^[0-9a-f]{64}$")
_WIRE = re.compile(r"^sha256:[0-9a-f]{64}$")


def check_sha256(value: object, field: str = "contentHash") -> str:
    """``value`` if it is 64 lower-case hex digits (the store's own form of a hash)."""
    if not isinstance(value, str) or not _HEX.match(value):
        raise malformed(field, "must be 64 lower-case hex digits")
    return value


def wire_hash(sha256: str) -> str:
    """The wire form of a content hash (``common.schema.json#/$defs/sha256``): ``sha256:<hex>``."""
    return f"sha256:{sha256}"


def hex_of(value: object, field: str = "contentHash") -> str:
    """The 64 hex digits of a wire hash ``sha256:<hex>``; SCHEMA_VALIDATION_FAILED naming ``field`` otherwise."""
    if not isinstance(value, str) or not _WIRE.match(value):
        raise malformed(field, "must be a content hash sha256:<64 lower-case hex digits>")
    return value[len("sha256:") :]


CHUNK = 1024 * 1024
# RFC 6838 section 4.2: type-name "/" subtype-name, each a restricted-name of
# 1-127 characters starting with a letter or digit. No parameters (the view
# drops them) and nothing a header or a database text column could choke on.
_RESTRICTED_NAME = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
MEDIA_TYPE_RE = re.compile(rf"^{_RESTRICTED_NAME}/{_RESTRICTED_NAME}$")
# ``Blob.media_type`` and ``Artifact.media_type`` are CharField(max_length=200):
# longer is refused here, not by PostgreSQL as a 500 (issue 16 item 6).
MEDIA_TYPE_MAX = Blob._meta.get_field("media_type").max_length or 200


def storage() -> Storage:
    """The configured storage (a new instance per settings, so tests can move the root)."""
    return _storage(getattr(settings, "MWP_ARTIFACT_STORAGE", ""), settings.MWP_ARTIFACT_ROOT)


@cache
def _storage(dotted: str, root: str) -> Storage:
    cls = import_string(dotted) if dotted else FileSystemStorage
    if cls is not FileSystemStorage:
        return cls()
    # The modes also cover what Django's own save() writes (a storage other
    # than the fast path of ``_put``).
    return FileSystemStorage(
        location=root, file_permissions_mode=PRIVATE_FILE_MODE, directory_permissions_mode=PRIVATE_DIR_MODE
    )


def _private_root(root: Path) -> None:
    """The store root, private; an older installation's open root is
    tightened once, saying so (nothing below it can be reached without
    traversing it)."""
    if root in _TIGHTENED:
        return
    if root.exists() and root.stat().st_mode & 0o077:
        log.warning("artifact store %s was readable by other users; setting mode 0700", root)
    private_dir(root)
    _TIGHTENED.add(root)


_TIGHTENED: set[Path] = set()


def blob_name(sha256: str) -> str:
    return f"{sha256[:2]}/{sha256[2:4]}/{sha256}"


def check_media_type(value: object, field: str = "Content-Type") -> str:
    """``value`` if it is an RFC 6838 media type (``type/subtype``, no
    parameters) of at most ``MEDIA_TYPE_MAX`` characters; SCHEMA_VALIDATION_FAILED otherwise."""
    if not isinstance(value, str) or not MEDIA_TYPE_RE.fullmatch(value):
        raise malformed(field, "must be a media type type/subtype (RFC 6838 tokens), such as application/json")
    if len(value) > MEDIA_TYPE_MAX:
        raise malformed(field, f"a media type is at most {MEDIA_TYPE_MAX} characters")
    return value


def spool_dir() -> Path:
    """The private staging directory: ``<root>/tmp``, on the same filesystem
    as the blobs so a staged file moves under its hash by a rename. With
    another storage it still lives under ``MWP_ARTIFACT_ROOT`` (this machine's
    disk), never in the shared system temp directory."""
    store = storage()
    root = Path(store.location) if isinstance(store, FileSystemStorage) else Path(settings.MWP_ARTIFACT_ROOT)
    _private_root(root)
    return private_dir(root / "tmp")


def store_stream(
    stream: BinaryIO, media_type: str, group: Group, agent: Agent, max_bytes: int, expected_size: int | None = None
) -> Blob:
    """Store the bytes of ``stream`` under their SHA-256 and record that
    ``group`` holds them; storing the same bytes twice is harmless.

    The bytes are content (``store_bytes``); that the Group holds them is a
    fact of its log, accepted as ``ext.mwportal.artifact.content_store``
    (``link_to_group``).
    Publishing the Artifact (its signed manifest) is ``artifact.publish``.
    ``media_type`` is the caller's to check (``check_media_type``: the upload
    views' ``_media_type``, once for both routes).
    """
    blob = store_bytes(stream, media_type, max_bytes, expected_size)
    link_to_group(blob, group, agent)
    return blob


def store_bytes(stream: BinaryIO, media_type: str, max_bytes: int, expected_size: int | None = None) -> Blob:
    """Write the bytes under their hash and keep the ``Blob`` index row.

    The bytes are hashed while they are spooled to a temporary file next to
    the store, then moved (filesystem) or streamed (other storages) under
    their hash. A body that ends before ``expected_size`` (the declared
    Content-Length: the client went away) is refused, never stored as the
    shorter content it happens to be.
    """
    digest = hashlib.sha256()
    size = 0
    fd, tmp_path = tempfile.mkstemp(dir=spool_dir())
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in _read_ahead(stream):
                size += len(chunk)
                if size > max_bytes:
                    raise ProtocolError(
                        ErrorCode.SCHEMA_VALIDATION_FAILED,
                        f"body: an Artifact is at most {max_bytes} bytes",
                        details={"field": "body"},
                    )
                # Both release the GIL, so they overlap the next read.
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            if expected_size is not None and size != expected_size:
                raise ProtocolError(
                    ErrorCode.SCHEMA_VALIDATION_FAILED,
                    f"body: ended after {size} of the {expected_size} bytes declared",
                    details={"field": "body"},
                )
            os.fsync(out.fileno())
        return put_staged(tmp_path, digest.hexdigest(), size, media_type)
    finally:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)


def hash_file(path: str | Path) -> tuple[str, int]:
    """The SHA-256 and size of a staged file, read ``CHUNK`` bytes at a time."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def put_staged(tmp_path: str, sha: str, size: int, media_type: str) -> Blob:
    """Move a staged, fsynced file whose bytes hash to ``sha`` under its hash
    and keep the ``Blob`` index row: the one step every upload ends with
    (a single request, ``store_bytes``; a resumable one, ``artifacts.uploads``)."""
    _put(sha, tmp_path)
    now = timezone.now()
    blob, created = Blob.objects.get_or_create(
        sha256=sha,
        defaults={
            "size": size, "media_type": media_type, "created_at": now,
            "integrity": "verified", "integrity_checked_at": now,
        },
    )  # fmt: skip
    if not created and blob.integrity != "verified":
        # The same bytes arrived again and were just written under their
        # hash: the stored copy is whole again.
        _record(sha, "verified", now)
        blob.integrity = "verified"
    return blob


def link_to_group(blob: Blob, group: Group, agent: Agent) -> None:
    """Record through ``accept()`` that ``group`` holds ``blob``, unless it already does.

    The Command is ``ext.mwportal.artifact.content_store``, issued by the
    Organization's control plane (``Auth.SERVICE``): only the upload path,
    which has just stored and hashed the bytes, may say a Group holds them
    (issue 16 item 1). ``agent`` is the uploader the caller authenticated and
    found an active member of ``group``; the catalogue's Event names no
    uploader, so the server's log records who it was.
    """
    if BlobGroup.objects.filter(blob=blob, group=group).exists():
        return
    from missions.authority import accept
    from missions.commands import service_command

    payload = {
        "contentHash": wire_hash(blob.sha256),
        "sizeBytes": blob.size,
        "mediaType": blob.media_type,
        "uploadedBy": {"type": Agent.ACTOR_TYPES[agent.kind], "id": urn(agent.id)},
    }
    try:
        accept(service_command(CONTENT_STORE, str(group.id), payload, organization_id=str(group.organization_id)))
    except ProtocolError:
        # A concurrent upload of the same bytes to the same Group won: fine.
        if not BlobGroup.objects.filter(blob=blob, group=group).exists():
            raise


READ_AHEAD = 4  # chunks in flight between the reading thread and the hashing/writing one


def _read_ahead(stream: BinaryIO) -> Iterator[bytes]:
    """The chunks of ``stream``, read by a helper thread at most ``READ_AHEAD``
    chunks ahead: receiving overlaps hashing and writing, and memory stays
    bounded (``READ_AHEAD + 2`` chunks) whatever the size."""
    chunks: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=READ_AHEAD)
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                chunk = stream.read(CHUNK)
                if not chunk:
                    break
                chunks.put(chunk)
        except BaseException as exc:  # handed to the consumer, which raises it
            chunks.put(exc)
            return
        chunks.put(None)

    thread = threading.Thread(target=reader, name="artifact-upload-reader", daemon=True)
    thread.start()
    try:
        while (item := chunks.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a reader waiting on a full queue
            with contextlib.suppress(queue.Empty):
                chunks.get(timeout=0.05)
        thread.join()


def _put(sha: str, tmp_path: str) -> None:
    store = storage()
    name = blob_name(sha)
    if isinstance(store, FileSystemStorage):
        final = Path(store.path(name))
        private_dir(final.parent)
        os.replace(tmp_path, final)  # same bytes, same name: replacing is harmless
        return
    if store.exists(name):
        store.delete(name)  # same name, same bytes: rewrite a possibly damaged copy
    with open(tmp_path, "rb") as fh:
        store.save(name, File(fh, name=name))


def _record(sha: str, integrity: str, now: datetime | None = None) -> None:
    # Content bookkeeping, not Group state: the health of the stored copy.
    Blob.objects.filter(sha256=sha).update(integrity=integrity, integrity_checked_at=now or timezone.now())


def blob_integrity(sha256: str) -> str:
    """Hash the stored bytes (streaming) and record the outcome on the ``Blob``
    row: ``verified``, ``mismatch`` or ``missing``."""
    digest = hashlib.sha256()
    try:
        with storage().open(blob_name(sha256), "rb") as fh:
            while chunk := fh.read(CHUNK):
                digest.update(chunk)
    except (FileNotFoundError, OSError):
        outcome = "missing"
    else:
        outcome = "verified" if digest.hexdigest() == sha256 else "mismatch"
    if outcome != "verified":
        log.error("artifact %s: stored bytes %s; refusing to serve them", sha256, outcome)
    # A read of a healthy blob writes nothing unless the recorded state is
    # stale (a write per download would put the read path on the writers'
    # queue); a change of state is always recorded.
    now = timezone.now()
    stale = now - RECHECK_RECORD_AFTER
    Blob.objects.filter(sha256=sha256).exclude(integrity=outcome, integrity_checked_at__gt=stale).update(
        integrity=outcome, integrity_checked_at=now
    )
    return outcome


RECHECK_RECORD_AFTER = timedelta(minutes=5)


def verify_blob(sha256: str) -> bool:
    """True when the stored bytes still hash to ``sha256`` (recorded on the row)."""
    return blob_integrity(sha256) == "verified"


def check_served(sha256: str) -> None:
    """GROUP_NOT_FOUND for an unknown blob; INTERNAL_ERROR (reason
    ``artifact_hash_mismatch``) for bytes that no longer match (or vanished):
    the Authority's store failed, not the request; returns quietly when they
    may be served."""
    shown = wire_hash(sha256)
    if not Blob.objects.filter(sha256=sha256).exists():
        raise ProtocolError(ErrorCode.GROUP_NOT_FOUND, f"no Artifact {shown}", details={"contentHash": shown})
    outcome = blob_integrity(sha256)
    if outcome != "verified":
        raise ProtocolError(
            ErrorCode.INTERNAL_ERROR,
            f"stored bytes of {shown} do not match its hash ({outcome})",
            details={"contentHash": shown, "integrity": outcome, "reason": "artifact_hash_mismatch"},
        )


def open_verified(sha256: str) -> Iterator[bytes]:
    """The blob's bytes in chunks, after checking its hash; INTERNAL_ERROR otherwise.

    The check reads the file once before serving, so a corrupted blob is
    refused before its first byte leaves (a streamed response cannot take
    back bytes already sent).
    """
    check_served(sha256)
    return _chunks(sha256)


def _chunks(sha256: str) -> Iterator[bytes]:
    with storage().open(blob_name(sha256), "rb") as fh:
        while chunk := fh.read(CHUNK):
            yield chunk


async def achunks(sha256: str) -> AsyncIterator[bytes]:
    """The same bytes for an ASGI server: Django would otherwise collect a
    synchronous iterator into one list before sending it (1 GiB in memory).
    Each read runs in a thread so the event loop is never blocked on disk.

    ASGI gives a sender no backpressure, and daphne hands every body message
    to Twisted at once, whose transport sends at most ``SEND_LIMIT`` (128 KiB)
    per turn of the event loop. Yielding ``ASGI_SLICE`` bytes and then giving
    the loop a turn keeps the transport's buffer from outgrowing the socket
    (bench/artifacts.py: a 512 MiB download held +7 MiB instead of +500 MiB).
    """
    fh = await asyncio.to_thread(storage().open, blob_name(sha256), "rb")
    try:
        while chunk := await asyncio.to_thread(fh.read, CHUNK):
            view = memoryview(chunk)
            for start in range(0, len(chunk), ASGI_SLICE):
                yield bytes(view[start : start + ASGI_SLICE])
                await asyncio.sleep(0)
    finally:
        await asyncio.to_thread(fh.close)


ASGI_SLICE = 64 * 1024


def missing_blobs(hashes: list[str]) -> list[str]:
    """Which of ``hashes`` are not in the store (rows and files)."""
    known = set(Blob.objects.filter(sha256__in=hashes).values_list("sha256", flat=True))
    store = storage()
    return [h for h in hashes if h not in known or not store.exists(blob_name(h))]
