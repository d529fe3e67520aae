"""The audit bundle of a Group and its offline verifier (PROTOCOL §6.4, §13, §15.2; MWP-MSN-009).

A bundle is an uncompressed tar file (``mwp export-audit GROUP_ID --out FILE``);
every line of a ``.jsonl`` file is one document's JCS bytes::

    events.jsonl            every signed Event document of the Group, in sequence order
    snapshots.jsonl         the Group's signed snapshots (group-snapshot.schema.json)
    manifests.jsonl         every signed Artifact manifest published in the Group
    evidence.jsonl          every Evidence record: {"sequence", "origin", "stage", "evidence"}
    context_packages.jsonl  every signed Context Package version of the Group
    keys.json               {"organizationId", "keys": [key bindings]}: the Organization's Registry
                            as ``GET /api/v0.1/keys/{keyId}`` serves each binding
    artifacts/<sha256 hex>  the Artifacts' bytes (unless exported with --no-bytes)
    index.json              {"format", "organizationId", "groupId", "exportedAt", "headSequence",
                             "files": {name: "sha256:..."}, "artifacts": {"sha256:...": {"sizeBytes",
                             "included"}}, "signedBy", "signature"}: signed by the Group Authority

``verify_bundle(path)`` needs no database and no Django. It checks, in this
order, and stops at the first failure, which it names (``AuditFailure.where``):

1. ``events``: each Event document passes the six stages of §6.4 against the
   bundle's Registry, signed by a service Principal (``acceptedBy``), belongs
   to the Group, and the sequences run 1..N without a gap to the head the
   index promises;
2. ``snapshots``: each snapshot's signature, its Group, and that its
   ``eventIds`` are the Events 1..``throughSequence`` of the log;
3. ``manifests``: each manifest's producer signature, and that an
   ``artifact.published`` Event carries exactly it;
4. ``evidence``: each record's signature, and that it is in the Event it names;
5. ``context packages``: the generator's signature, and an
   ``ext.mwportal.context.package_published`` Event carrying exactly it;
6. ``artifacts``: each included Artifact's bytes hash to its name (streamed),
   every manifest's content is listed, and every listed hash is named by the log;
7. ``index``: every file's hash and the Group Authority's signature over the index.

Content checks come first so that a change in one Event, one signature or one
Artifact is reported where it is, not as a changed file. The keys are the
bundle's own unless the caller pins the Group Authority's public key
(``server_key``).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from . import ed25519, jcs
from .registry import MemoryRegistry, Principal, RegistrationError
from .values import b64url_decode
from .verification import VerificationFailed, verify_document

BUNDLE_FORMAT = "mwp.audit-bundle/2"
FILES = ("events.jsonl", "snapshots.jsonl", "manifests.jsonl", "evidence.jsonl", "context_packages.jsonl", "keys.json")
CHUNK = 1024 * 1024
PUBLISHED = "artifact.published"
STORED = "ext.mwportal.artifact.content_stored"
PACKAGE_PUBLISHED = "ext.mwportal.context.package_published"


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
            f"Group {self.group}: {self.events} signed Events (sequence 1..{self.events}), {self.snapshots} snapshots,"
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


def _jsonl(tar: tarfile.TarFile, name: str) -> Iterator[tuple[int, bytes, Any]]:
    for number, line in enumerate(_member(tar, name), start=1):
        if not line.strip():
            continue
        try:
            yield number, line.rstrip(b"\n"), json.loads(line)
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
    return "sha256:" + digest.hexdigest()


def verify_bundle(path: str, *, server_key: str | None = None) -> AuditReport:
    """Verify the bundle at ``path``; an ``AuditReport``, or ``AuditFailure``
    naming the first failing thing. ``server_key`` pins the Group Authority's
    public key (base64url): the index must be signed with it."""
    try:
        tar = tarfile.open(path, "r:")  # noqa: SIM115 (closed below)
    except (OSError, tarfile.TarError) as exc:
        raise AuditFailure("bundle", f"not a readable tar file: {exc}") from None
    with tar:
        return _verify(tar, server_key)


def _registry(keys: Any) -> MemoryRegistry:
    """The bundle's Registry: every key binding of the Organization, with its validity."""
    if not isinstance(keys, dict) or not isinstance(keys.get("keys"), list):
        raise AuditFailure("keys.json", "needs organizationId and the key bindings")
    try:
        registry = MemoryRegistry(str(keys.get("organizationId")))
        for binding in keys["keys"]:
            principal = binding["principal"]
            registry.register(
                binding["keyId"], Principal(principal["type"], principal["id"]), binding["publicKey"],
                binding["validFrom"], algorithm=binding["algorithm"],
            )  # fmt: skip
            if "validUntil" in binding or "revokedAt" in binding:
                registry.record_status(
                    binding["keyId"], binding["validFrom"],
                    valid_until=binding.get("validUntil"), revoked_at=binding.get("revokedAt"),
                )  # fmt: skip
    except (RegistrationError, KeyError, TypeError) as exc:
        raise AuditFailure("keys.json", f"not a valid Registry: {exc}") from None
    return registry


def _signed(registry: MemoryRegistry, data: bytes, profile: str, where: str) -> Principal:
    """The six stages of §6.4 over ``data``; the Principal that signed it."""
    try:
        return verify_document(data, profile, registry).principal
    except VerificationFailed as exc:
        raise AuditFailure(f"{where}: signature", f"{exc.wire_code}: {exc.stage} ({exc.reason})") from None


def _verify(tar: tarfile.TarFile, pinned: str | None) -> AuditReport:
    index = _json(tar, "index.json")
    if not isinstance(index, dict) or index.get("format") != BUNDLE_FORMAT:
        raise AuditFailure("index.json", f"not an {BUNDLE_FORMAT} index")
    registry = _registry(_json(tar, "keys.json"))
    group = index.get("groupId")
    report = AuditReport(group=str(group))

    # 1. Events: signed by a service, in this Group, sequences 1..N.
    events: dict[int, dict[str, Any]] = {}
    for number, raw, event in _jsonl(tar, "events.jsonl"):
        where = f"events: sequence {event.get('sequence') if isinstance(event, dict) else '?'}"
        signer = _signed(registry, raw, "event", where)
        if signer.type != "service":
            raise AuditFailure(where, "not accepted by a service Principal")
        if event.get("groupId") != group:
            raise AuditFailure(where, "belongs to another Group")
        if event["sequence"] != len(events) + 1:
            raise AuditFailure(where, f"expected sequence {len(events) + 1} (events.jsonl line {number})")
        events[event["sequence"]] = event
    report.events = len(events)
    if index.get("headSequence") != report.events:
        raise AuditFailure("events: head", f"the index promises head {index.get('headSequence')}, "
                           f"the log ends at {report.events}")  # fmt: skip

    # 2. Snapshots.
    for _, raw, snap in _jsonl(tar, "snapshots.jsonl"):
        where = f"snapshots: sequence {snap.get('throughSequence') if isinstance(snap, dict) else '?'}"
        _signed(registry, raw, "group-snapshot", where)
        through = snap["throughSequence"]
        if snap["groupId"] != group or through > report.events:
            raise AuditFailure(where, "not a snapshot of this Group's log")
        if snap["eventIds"] != [events[n]["eventId"] for n in range(1, through + 1)]:
            raise AuditFailure(where, "its eventIds are not the log's Events up to throughSequence")
        report.snapshots += 1

    def carried(kind: str, member: str) -> list[Any]:
        return [e["payload"].get(member) for e in events.values() if e["kind"] == kind]

    # 3. Manifests, against the artifact.published Events.
    published = carried(PUBLISHED, "artifact")
    manifests: list[dict[str, Any]] = []
    for number, raw, manifest in _jsonl(tar, "manifests.jsonl"):
        where = f"manifest {manifest.get('artifactId') if isinstance(manifest, dict) else '?'} (line {number})"
        _signed(registry, raw, "artifact", where)
        if manifest not in published:
            raise AuditFailure(where, "no artifact.published Event carries this manifest")
        manifests.append(manifest)
    report.manifests = len(manifests)

    # 4. Evidence records, each signed and in the Event that carried it.
    for number, _, entry in _jsonl(tar, "evidence.jsonl"):
        where = f"evidence.jsonl line {number}"
        if not isinstance(entry, dict) or not isinstance(entry.get("evidence"), dict):
            raise AuditFailure(where, "not an Evidence entry")
        _signed(registry, jcs.canonicalize(entry["evidence"]), "evidence", where)
        event = events.get(entry.get("sequence", -1))
        held = event["payload"].get("evidence") if event else None
        if not isinstance(held, list) or entry["evidence"] not in held:
            raise AuditFailure(where, f"the record is not in Event {entry.get('sequence')}")
        report.evidence += 1

    # 5. Context Packages.
    packages = carried(PACKAGE_PUBLISHED, "contextPackage")
    for number, raw, doc in _jsonl(tar, "context_packages.jsonl"):
        where = f"context package {doc.get('contextPackageId') if isinstance(doc, dict) else '?'} (line {number})"
        _signed(registry, raw, "context-package", where)
        if doc not in packages:
            raise AuditFailure(where, "no package_published Event carries this package")
        report.context_packages += 1

    # 6. Artifacts' bytes.
    listed = index.get("artifacts") or {}
    for sha, info in sorted(listed.items()):
        if not info.get("included"):
            report.artifacts_hash_only.append(sha)
            continue
        if _file_hash(tar, f"artifacts/{sha.removeprefix('sha256:')}") != sha:
            raise AuditFailure(f"artifact {sha}", "its bytes do not match its SHA-256")
        report.artifacts_checked += 1
    for manifest in manifests:
        if manifest["contentHash"] not in listed:
            raise AuditFailure(f"artifact {manifest['contentHash']}", "a manifest names it; the index does not")
    # Every Artifact of the bundle is one the log says the Group holds.
    held_hashes = set(carried(STORED, "contentHash")) | {m.get("contentHash") for m in published}
    for sha in sorted(set(listed) - held_hashes):
        raise AuditFailure(f"artifact {sha}", "no content_stored or artifact.published Event names it")

    # 7. The index: file hashes and the Group Authority's signature.
    files = index.get("files") or {}
    for name in FILES:
        if files.get(name) != _file_hash(tar, name):
            raise AuditFailure(f"index: {name}", "the file does not match the hash the index signs")
    _verify_index(index, registry, pinned)
    return report


def _verify_index(index: dict[str, Any], registry: MemoryRegistry, pinned: str | None) -> None:
    """The Group Authority's Ed25519 signature over the index's JCS bytes without ``signature``."""
    signature = index.get("signature")
    signer = index.get("signedBy")
    if not isinstance(signature, dict) or not isinstance(signer, dict):
        raise AuditFailure("index: signature", "the index is not signed")
    try:
        binding = registry.resolve(str(signature.get("keyId")))
        value = b64url_decode(signature.get("value"))
    except Exception as exc:  # the Registry's and the decoder's refusals alike
        raise AuditFailure("index: signature", f"the signing key does not resolve: {exc}") from None
    if (
        binding.principal != Principal(str(signer.get("type")), str(signer.get("id")))
        or signer.get("type") != "service"
    ):
        raise AuditFailure("index: signature", "signedBy is not the key's service Principal")
    if pinned is not None and b64url_decode(pinned) != binding.public_key:
        raise AuditFailure("index: signature", "the Group Authority's key is not the pinned one")
    if not ed25519.verify(binding.public_key, jcs.signing_bytes(index), value):
        raise AuditFailure("index: signature", "the Group Authority's signature over the index does not verify")


def main(argv: list[str] | None = None) -> int:
    """``python -m mwportal.protocol.audit FILE [--server-key KEY]``: no Django needed."""
    import argparse

    parser = argparse.ArgumentParser(prog="mwportal.protocol.audit", description="verify an audit bundle offline")
    parser.add_argument("file")
    parser.add_argument("--server-key", default=None, help="pin the Group Authority's public key (base64url)")
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
