"""``mwp export-audit``: write a Group's audit bundle (format and offline
verifier: ``mwportal/protocol/audit.py``).

Reads only. Events are read in keyset pages and every file is spooled to a
temporary file before it enters the tar, so memory stays flat for any log;
Artifact bytes are streamed from the store after their hash was checked
(a blob that no longer matches is listed by hash only and reported). The
index is signed by the Organization's Group Authority, whose key (with every
other key of the Organization's Registry) travels in ``keys.json``.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import IO, Any

from django.utils import timezone

from missions.api.directory import key_binding
from missions.keyregistry import organization_uri
from missions.models import Group, GroupEvent, GroupSnapshot, SigningKey
from missions.service_keys import group_authority
from missions.withholding import withheld_form, withheld_sequences
from mwportal.protocol import ed25519, jcs
from mwportal.protocol.audit import BUNDLE_FORMAT, PUBLISHED, STORED
from mwportal.protocol.ids import urn
from mwportal.protocol.values import b64url_encode

from .models import Artifact, Blob, BlobGroup, ContextPackage, Evidence
from .store import blob_integrity, blob_name, storage, wire_hash


@dataclass
class ExportSummary:
    """What an export wrote; content hashes in their wire form ``sha256:<hex>``."""

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
        self.write(jcs.canonicalize(value) + b"\n")


def _add(tar: tarfile.TarFile, name: str, fileobj: IO[bytes], size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = int(timezone.now().timestamp())
    info.mode = 0o644
    fileobj.seek(0)
    tar.addfile(info, fileobj)


def _hex(value: Any) -> str | None:
    return value.removeprefix("sha256:") if isinstance(value, str) and value.startswith("sha256:") else None


def export_audit(group_id: str, out: Path, *, include_bytes: bool = True) -> ExportSummary:
    """Write the audit bundle of ``group_id`` to ``out``."""
    group = Group.objects.select_related("organization").get(id=group_id)
    summary = ExportSummary()
    spools = {name: _Spool() for name in ("events", "snapshots", "manifests", "evidence", "context_packages")}
    hashes: set[str] = set()
    head = 0
    withheld = withheld_sequences(str(group.id))
    for event in _events(group):
        # A redacted Message in its signed withheld form (§7.4): the export carries no withdrawn content.
        document = event.as_wire()
        if event.sequence in withheld:
            document = withheld_form(document, str(group.organization_id))
        spools["events"].line(document)
        head = event.sequence
        payload = document["payload"]
        if document["kind"] == STORED and (sha := _hex(payload.get("contentHash"))):
            hashes.add(sha)
        if document["kind"] == PUBLISHED and (sha := _hex(payload["artifact"].get("contentHash"))):
            hashes.add(sha)
        summary.events += 1
    for snap in GroupSnapshot.objects.filter(group=group).order_by("sequence"):
        spools["snapshots"].line(snap.document)
    for artifact in Artifact.objects.filter(group=group).order_by("id"):
        spools["manifests"].line(artifact.manifest)
        hashes.add(artifact.sha256)
        hashes.update(artifact.sources)
    for ev in Evidence.objects.filter(group=group).order_by("sequence", "id"):
        spools["evidence"].line(
            {"sequence": ev.sequence, "origin": ev.origin, "stage": ev.stage, "evidence": ev.record}
        )
        hashes.update(ev.artifacts)
    for package in ContextPackage.objects.filter(group=group).order_by("lineage", "version"):
        spools["context_packages"].line(package.document)
        hashes.update(h.removeprefix("sha256:") for h in package.document["artifactHashes"])
    hashes.update(BlobGroup.objects.filter(group=group).values_list("blob_id", flat=True))

    organization = group.organization
    keys = {
        "organizationId": organization_uri(organization),
        "keys": [key_binding(row) for row in SigningKey.objects.filter(organization=organization).order_by("id")],
    }
    keys_bytes = jcs.canonicalize(keys)
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
                    summary.unavailable.append(wire_hash(sha))
            if not included:
                summary.artifacts_hash_only.append(wire_hash(sha))
            entry: dict[str, Any] = {"included": included}
            if size is not None:
                entry["sizeBytes"] = size
            listed[wire_hash(sha)] = entry
        files = {f"{name}.jsonl": "sha256:" + spool.digest.hexdigest() for name, spool in spools.items()}
        files["keys.json"] = jcs.sha256_hash(keys_bytes)
        index = _signed_index(group, head, files, listed)
        raw = json.dumps(index, indent=1, sort_keys=True).encode()
        _add(tar, "index.json", io.BytesIO(raw), len(raw))
    for spool in spools.values():
        spool.file.close()
    return summary


def _signed_index(group: Group, head: int, files: dict[str, str], listed: dict[str, Any]) -> dict[str, Any]:
    """The index, signed by the Group Authority: Ed25519 over its JCS bytes without ``signature``."""
    key = group_authority(str(group.organization_id))
    assert key.principal is not None
    now = timezone.now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    index: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "organizationId": organization_uri(group.organization),
        "groupId": urn(group.id),
        "exportedAt": now,
        "headSequence": head,
        "files": files,
        "artifacts": listed,
        "signedBy": {"type": "service", "id": urn(key.principal[1])},
    }
    value = ed25519.sign(key.seed, jcs.signing_bytes(index))
    index["signature"] = {"algorithm": "Ed25519", "keyId": key.key_id, "createdAt": now, "value": b64url_encode(value)}
    return index
