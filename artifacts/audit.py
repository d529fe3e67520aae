"""``mwp export-audit``: write a Group's audit bundle (format and offline
verifier: ``mwportal/protocol/audit.py``).

Reads only. Events are read in keyset pages and every file is spooled to a
temporary file before it enters the tar, so memory stays flat for any log;
Artifact bytes are streamed from the store after their hash was checked
(a blob that no longer matches is listed by hash only and reported).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.utils import timezone

from missions.models import Agent, Group, GroupEvent, GroupSnapshot
from missions.server_key import server_keypair
from mwportal.protocol import SYSTEM_ACTOR, canonicalize, format_time, sign
from mwportal.protocol.audit import BUNDLE_SCHEMA

from .models import Artifact, Blob, BlobGroup, ContextPackage, Evidence
from .store import blob_integrity, blob_name, storage


@dataclass
class ExportSummary:
    events: int = 0
    artifacts_included: int = 0
    artifacts_hash_only: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)


def _events(group: Group, batch: int = 2000) -> Iterator[GroupEvent]:
    after = 0
    while True:
        page = list(GroupEvent.objects.filter(group=group, sequence__gt=after).order_by("sequence")[:batch])
        if not page:
            return
        yield from page
        after = page[-1].sequence


class _Spool:
    """A JSON Lines file spooled to disk, hashed as it is written."""

    def __init__(self) -> None:
        self.file: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed by the exporter)
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        self.file.write(data)
        self.digest.update(data)
        self.size += len(data)

    def line(self, value: Any) -> None:
        self.write(canonicalize(value) + b"\n")


def _add(tar: tarfile.TarFile, name: str, fileobj: IO[bytes], size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = int(timezone.now().timestamp())
    info.mode = 0o644
    fileobj.seek(0)
    tar.addfile(info, fileobj)


def export_audit(group_id: str, out: Path, *, include_bytes: bool = True) -> ExportSummary:
    """Write the audit bundle of ``group_id`` to ``out``."""
    group = Group.objects.get(id=group_id)
    summary = ExportSummary()
    spools = {name: _Spool() for name in ("events", "snapshots", "manifests", "evidence", "context_packages")}
    actors: set[str] = set()
    head = {"sequence": 0, "hash": group.head_hash if group.last_sequence == 0 else ""}
    hashes: set[str] = set()
    for event in _events(group):
        wire = event.as_wire()
        spools["events"].line(wire)
        if event.actor != SYSTEM_ACTOR:
            actors.add(event.actor)
        head = {"sequence": event.sequence, "hash": event.hash}
        body = event.body if isinstance(event.body, dict) else {}
        hashes.update(h for h in body.get("artifacts", []) if isinstance(h, str))
        if event.type == "artifact.uploaded" and isinstance(body.get("sha256"), str):
            hashes.add(body["sha256"])
        summary.events += 1
    for snap in GroupSnapshot.objects.filter(group=group).order_by("sequence"):
        spools["snapshots"].line(snap.document)
    for artifact in Artifact.objects.filter(group=group).order_by("id"):
        spools["manifests"].line(artifact.manifest)
        actors.add(str(artifact.producer_id))
        hashes.add(artifact.sha256)
        hashes.update(artifact.sources)
    for ev in Evidence.objects.filter(group=group).order_by("sequence", "id"):
        spools["evidence"].line(
            {"sequence": ev.sequence, "origin": ev.origin, "stage": ev.stage, "record": ev.record,
             "details": ev.details}
        )  # fmt: skip
        hashes.update(ev.artifacts)
    for package in ContextPackage.objects.filter(group=group).order_by("package", "version"):
        spools["context_packages"].line(package.document)
        actors.add(str(package.generator_id))
        hashes.update(package.document["artifacts"])
    hashes.update(BlobGroup.objects.filter(group=group).values_list("blob_id", flat=True))

    private_key, public_key = server_keypair()
    keys = {
        "server": public_key,
        "agents": dict(
            sorted((str(a), k) for a, k in Agent.objects.filter(id__in=actors).values_list("id", "public_key"))
        ),
    }
    keys_bytes = canonicalize(keys)
    sizes = dict(Blob.objects.filter(sha256__in=hashes).values_list("sha256", "size"))
    listed: dict[str, dict[str, Any]] = {}
    with tarfile.open(out, "w") as tar:
        for name, spool in spools.items():
            _add(tar, f"{name}.jsonl", spool.file, spool.size)
        _add(tar, "keys.json", io.BytesIO(keys_bytes), len(keys_bytes))
        for sha in sorted(hashes):
            size = sizes.get(sha)
            included = False
            if include_bytes and size is not None:
                if blob_integrity(sha) == "verified":
                    with storage().open(blob_name(sha), "rb") as fh:
                        _add(tar, f"artifacts/{sha}", fh, size)
                    included = True
                    summary.artifacts_included += 1
                else:
                    summary.unavailable.append(sha)
            if not included:
                summary.artifacts_hash_only.append(sha)
            listed[sha] = {"size": size, "included": included}
        files = {f"{name}.jsonl": spool.digest.hexdigest() for name, spool in spools.items()}
        files["keys.json"] = hashlib.sha256(keys_bytes).hexdigest()
        index: dict[str, Any] = {
            "schema": BUNDLE_SCHEMA,
            "organization": str(group.organization_id),
            "group": str(group.id),
            "exported_at": format_time(timezone.now()),
            "head": head,
            "files": files,
            "artifacts": listed,
        }
        index["signature"] = sign(private_key, index)
        raw = json.dumps(index, indent=1, sort_keys=True).encode()
        _add(tar, "index.json", io.BytesIO(raw), len(raw))
    for spool in spools.values():
        spool.file.close()
    return summary
