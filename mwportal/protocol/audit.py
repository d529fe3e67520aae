"""The audit bundle of a Group and its offline verifier (spec 13; MWP-MSN-009).

A bundle is an uncompressed tar file (``mwp export-audit GROUP_ID --out FILE``)::

    events.jsonl            every Event of the Group, in sequence order (wire form)
    snapshots.jsonl         the Group's signed snapshots
    manifests.jsonl         every signed Artifact manifest published in the Group
    evidence.jsonl          every Evidence record: {"sequence", "index", "origin", "stage", "record"}
    context_packages.jsonl  every signed Context Package version of the Group
    keys.json               {"server": key, "agents": {agent id: key}}: the public keys needed
    artifacts/<sha256>      the Artifacts' bytes (unless exported with --no-bytes)
    index.json              {"schema", "organization", "group", "exported_at", "head": {"sequence", "hash"},
                             "files": {name: sha256}, "artifacts": {sha256: {"size", "included"}},
                             "signature"}: signed by the server

``verify_bundle(path)`` needs no database and no Django. It checks, in this
order, and stops at the first failure, which it names (``AuditFailure.where``):

1. ``events``: sequences 1..N without gap, ``prev_hash`` links and every
   Event hash (DESIGN §3), the head the index promises;
2. ``snapshots``: the server's signature, the state hash, the binding to the
   Organization and Group, and the chain hash at the snapshot's sequence;
3. ``manifests``: each manifest's shape and its producer's signature, and
   that an ``artifact.published`` Event carries exactly it;
4. ``evidence``: each record is in the Event it names;
5. ``context packages``: shape, generator signature, a ``context.published``
   Event carrying exactly it;
6. ``artifacts``: each included Artifact's bytes hash to its name (streamed);
7. ``index``: every file's hash and the server's signature over the index.

Content checks come first so that a change in one Event, one signature or one
Artifact is reported where it is, not as a changed file. The server key is
the bundle's own unless the caller pins one (``server_key``).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from .chain import first_break
from .documents import DocumentInvalid, check_context_package, check_manifest, document_hash, verify_document
from .signing import verify
from .snapshot import SnapshotInvalid, verify_snapshot

BUNDLE_SCHEMA = "mwp.audit-bundle/1"
FILES = ("events.jsonl", "snapshots.jsonl", "manifests.jsonl", "evidence.jsonl", "context_packages.jsonl", "keys.json")
CHUNK = 1024 * 1024


class AuditFailure(Exception):
    """Verification failed; ``where`` names the first thing that failed."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


@dataclass
class AuditReport:
    group: str = ""
    events: int = 0
    snapshots: int = 0
    manifests: int = 0
    evidence: int = 0
    context_packages: int = 0
    artifacts_checked: int = 0
    artifacts_hash_only: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [
            f"Group {self.group}: {self.events} events (hash chain verified), {self.snapshots} snapshots,"
            f" {self.manifests} manifests, {self.evidence} Evidence records,"
            f" {self.context_packages} Context Packages; signatures verified",
            f"{self.artifacts_checked} Artifacts' bytes verified against their SHA-256",
        ]
        if self.artifacts_hash_only:
            out.append(f"{len(self.artifacts_hash_only)} Artifacts listed by hash only (bytes not in the bundle)")
        return out


def _member(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    try:
        fh = tar.extractfile(name)
    except KeyError:
        fh = None
    if fh is None:
        raise AuditFailure(name, "missing from the bundle")
    return fh


def _jsonl(tar: tarfile.TarFile, name: str) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(_member(tar, name), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as exc:
            raise AuditFailure(f"{name} line {number}", f"not JSON: {exc}") from None


def _json(tar: tarfile.TarFile, name: str) -> Any:
    try:
        return json.loads(_member(tar, name).read())
    except ValueError as exc:
        raise AuditFailure(name, f"not JSON: {exc}") from None


def _file_hash(tar: tarfile.TarFile, name: str) -> str:
    digest = hashlib.sha256()
    fh = _member(tar, name)
    while chunk := fh.read(CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def verify_bundle(path: str, *, server_key: str | None = None) -> AuditReport:
    """Verify the bundle at ``path``; an ``AuditReport``, or ``AuditFailure``
    naming the first failing thing."""
    try:
        tar = tarfile.open(path, "r:")  # noqa: SIM115 (closed below)
    except (OSError, tarfile.TarError) as exc:
        raise AuditFailure("bundle", f"not a readable tar file: {exc}") from None
    with tar:
        return _verify(tar, server_key)


def _verify(tar: tarfile.TarFile, pinned: str | None) -> AuditReport:
    index = _json(tar, "index.json")
    if not isinstance(index, dict) or index.get("schema") != BUNDLE_SCHEMA:
        raise AuditFailure("index.json", f"not an {BUNDLE_SCHEMA} index")
    keys = _json(tar, "keys.json")
    if (
        not isinstance(keys, dict)
        or not isinstance(keys.get("server"), str)
        or not isinstance(keys.get("agents"), dict)
    ):
        raise AuditFailure("keys.json", "needs the server key and the agents' keys")
    server = keys["server"]
    if pinned is not None and pinned != server:
        raise AuditFailure("keys.json", "the bundle's server key is not the pinned one")
    agents: dict[str, str] = keys["agents"]
    group, organization = index.get("group"), index.get("organization")
    report = AuditReport(group=str(group))

    # 1. The hash chain.
    events: dict[int, dict[str, Any]] = {}

    def checked_events() -> Iterator[dict[str, Any]]:
        for number, event in _jsonl(tar, "events.jsonl"):
            if not isinstance(event, dict):
                raise AuditFailure(f"events.jsonl line {number}", "not an Event object")
            if event.get("group") != group:
                raise AuditFailure(f"events: sequence {event.get('sequence')}", "belongs to another Group")
            events[event["sequence"]] = event
            yield event

    broken = first_break(checked_events())
    if broken is not None:
        raise AuditFailure(f"events: sequence {broken[0]}", broken[1])
    report.events = len(events)
    head = index.get("head") or {}
    last = events.get(report.events)
    if head.get("sequence") != report.events or (last is not None and head.get("hash") != last["hash"]):
        raise AuditFailure("events: head", f"the index promises head {head}, the log ends at {report.events}")

    # 2. Snapshots.
    for number, snap in _jsonl(tar, "snapshots.jsonl"):
        where = f"snapshots: sequence {snap.get('sequence') if isinstance(snap, dict) else '?'}"
        try:
            verify_snapshot(snap, server_public_key=server, organization=str(organization), group=str(group))
        except SnapshotInvalid as exc:
            raise AuditFailure(where, f"{exc.check}: {exc}") from None
        at = events.get(snap["sequence"])
        if at is None or at["hash"] != snap["head_hash"]:
            raise AuditFailure(where, "head_hash is not the chain hash at that sequence")
        report.snapshots += 1
        del number

    # 3. Manifests, against the artifact.published Events.
    published = {
        e["body"].get("manifest_hash"): e["sequence"] for e in events.values() if e["type"] == "artifact.published"
    }
    manifests: list[dict[str, Any]] = []
    for number, manifest in _jsonl(tar, "manifests.jsonl"):
        sha = manifest.get("content_hash") if isinstance(manifest, dict) else None
        where = f"manifest {sha} (manifests.jsonl line {number})"
        try:
            check_manifest(manifest)
        except DocumentInvalid as exc:
            raise AuditFailure(where, str(exc)) from None
        producer = manifest["producer"]["agent"]
        if producer not in agents:
            raise AuditFailure(where, f"no public key for producer {producer}")
        if not verify_document(agents[producer], manifest):
            raise AuditFailure(f"{where}: signature", "does not verify with the producer's key")
        if document_hash(manifest) not in published:
            raise AuditFailure(where, "no artifact.published Event carries this manifest")
        manifests.append(manifest)
    report.manifests = len(manifests)

    # 4. Evidence records, each in the Event that carried it.
    for number, entry in _jsonl(tar, "evidence.jsonl"):
        where = f"evidence.jsonl line {number}"
        if not isinstance(entry, dict):
            raise AuditFailure(where, "not an object")
        event = events.get(entry.get("sequence", -1))
        carried = event["body"].get("evidence") if event else None
        if not isinstance(carried, list) or entry.get("record") not in carried:
            raise AuditFailure(where, f"the record is not in Event {entry.get('sequence')}")
        report.evidence += 1

    # 5. Context Packages.
    carried_packages = {e["body"].get("document_hash") for e in events.values() if e["type"] == "context.published"}
    for number, doc in _jsonl(tar, "context_packages.jsonl"):
        where = f"context package {doc.get('package') if isinstance(doc, dict) else '?'} (line {number})"
        try:
            check_context_package(doc)
        except DocumentInvalid as exc:
            raise AuditFailure(where, str(exc)) from None
        generator = doc["generator"]["agent"]
        if generator not in agents or not verify_document(agents[generator], doc):
            raise AuditFailure(f"{where}: signature", "does not verify with the generator's key")
        if document_hash(doc) not in carried_packages:
            raise AuditFailure(where, "no context.published Event carries this package")
        report.context_packages += 1

    # 6. Artifacts' bytes.
    listed = index.get("artifacts") or {}
    for sha, info in sorted(listed.items()):
        if not info.get("included"):
            report.artifacts_hash_only.append(sha)
            continue
        if _file_hash(tar, f"artifacts/{sha}") != sha:
            raise AuditFailure(f"artifact {sha}", "its bytes do not match its SHA-256")
        report.artifacts_checked += 1
    for manifest in manifests:
        if manifest["content_hash"] not in listed:
            raise AuditFailure(f"artifact {manifest['content_hash']}", "a manifest names it; the index does not")
    # Every Artifact of the bundle is one the log says the Group holds.
    held = {e["body"].get("sha256") for e in events.values() if e["type"] == "artifact.uploaded"}
    held |= {e["body"]["manifest"].get("content_hash") for e in events.values() if e["type"] == "artifact.published"}
    for sha in sorted(set(listed) - held):
        raise AuditFailure(f"artifact {sha}", "no artifact.uploaded or artifact.published Event names it")

    # 7. The index: file hashes and the server's signature.
    files = index.get("files") or {}
    for name in FILES:
        if files.get(name) != _file_hash(tar, name):
            raise AuditFailure(f"index: {name}", "the file does not match the hash the index signs")
    signature = index.get("signature")
    if not isinstance(signature, str) or not verify(server, index, signature):
        raise AuditFailure("index: signature", "the server's signature over the index does not verify")
    return report


def main(argv: list[str] | None = None) -> int:
    """``python -m mwportal.protocol.audit FILE [--server-key KEY]``: no Django needed."""
    import argparse

    parser = argparse.ArgumentParser(prog="mwportal.protocol.audit", description="verify an audit bundle offline")
    parser.add_argument("file")
    parser.add_argument("--server-key", default=None, help="pin the server's public key (base64url)")
    args = parser.parse_args(argv)
    try:
        report = verify_bundle(args.file, server_key=args.server_key)
    except AuditFailure as exc:
        print(f"FAILED at {exc.where}: {exc.message}", file=sys.stderr)
        return 1
    for line in report.lines():
        print(line)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
