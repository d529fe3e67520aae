"""Streaming, content-addressed blob storage (spec 13.1).

Writes stream through SHA-256 into a temporary file and land under their hash;
reads check the hash before a byte is served. A blob whose bytes no longer
match is never served (ARTIFACT_HASH_MISMATCH) and the mismatch is logged.
Nothing is ever held whole in memory.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from django.conf import settings
from django.core.files.storage import FileSystemStorage
from django.db import IntegrityError, transaction
from django.utils import timezone

from missions.models import Agent, Group
from mwportal.protocol import ErrorCode, ProtocolError

from .models import Blob, BlobGroup

log = logging.getLogger(__name__)
CHUNK = 1024 * 1024
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def storage() -> FileSystemStorage:
    return FileSystemStorage(location=settings.MWP_ARTIFACT_ROOT)


def blob_name(sha256: str) -> str:
    return f"{sha256[:2]}/{sha256[2:4]}/{sha256}"


def check_sha256(value: object, field: str = "sha256") -> str:
    if not isinstance(value, str) or not SHA256_RE.match(value):
        raise ProtocolError(ErrorCode.MALFORMED, f"{field}: must be 64 lower-case hex digits", {"field": field})
    return value


def store_stream(stream: BinaryIO, media_type: str, group: Group, agent: Agent, max_bytes: int) -> Blob:
    """Store the bytes of ``stream`` under their SHA-256; storing the same bytes twice is harmless."""
    root = Path(settings.MWP_ARTIFACT_ROOT)
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    fd, tmp_path = tempfile.mkstemp(dir=root / "tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := stream.read(CHUNK):
                size += len(chunk)
                if size > max_bytes:
                    raise ProtocolError(
                        ErrorCode.MALFORMED, f"body: an Artifact is at most {max_bytes} bytes", {"field": "body"}
                    )
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        sha = digest.hexdigest()
        final = root / blob_name(sha)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp_path, final)  # same bytes, same name: replacing is harmless
    finally:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
    now = timezone.now()
    with transaction.atomic():
        blob, _ = Blob.objects.get_or_create(
            sha256=sha, defaults={"size": size, "media_type": media_type, "created_at": now}
        )
        try:
            with transaction.atomic():
                BlobGroup.objects.create(blob=blob, group=group, uploaded_by=agent, created_at=now)
        except IntegrityError:
            pass  # already linked to this Group
    return blob


def verify_blob(sha256: str) -> bool:
    """True when the stored bytes still hash to ``sha256``."""
    path = Path(settings.MWP_ARTIFACT_ROOT) / blob_name(sha256)
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(CHUNK):
                digest.update(chunk)
    except FileNotFoundError:
        return False
    return digest.hexdigest() == sha256


def open_verified(sha256: str) -> Iterator[bytes]:
    """The blob's bytes in chunks, after checking its hash; ARTIFACT_HASH_MISMATCH otherwise.

    The check reads the file once before serving, so a corrupted blob is
    refused before its first byte leaves (a streamed response cannot take
    back bytes already sent).
    """
    if not Blob.objects.filter(sha256=sha256).exists():
        raise ProtocolError(ErrorCode.NOT_FOUND, f"no Artifact {sha256}", {"sha256": sha256})
    if not verify_blob(sha256):
        log.error("artifact %s: stored bytes no longer match their hash; refusing to serve", sha256)
        raise ProtocolError(
            ErrorCode.ARTIFACT_HASH_MISMATCH, f"stored bytes of {sha256} do not match its hash", {"sha256": sha256}
        )
    path = Path(settings.MWP_ARTIFACT_ROOT) / blob_name(sha256)

    def chunks() -> Iterator[bytes]:
        with open(path, "rb") as fh:
            while chunk := fh.read(CHUNK):
                yield chunk

    return chunks()


def missing_blobs(hashes: list[str]) -> list[str]:
    """Which of ``hashes`` are not in the store (rows and files)."""
    known = set(Blob.objects.filter(sha256__in=hashes).values_list("sha256", flat=True))
    root = Path(settings.MWP_ARTIFACT_ROOT)
    return [h for h in hashes if h not in known or not (root / blob_name(h)).exists()]
