"""The encrypted audit archive of an archived Group (PROTOCOL §7.4) and the final snapshot's Artifact references.

§7.4: archiving yields a signed final snapshot listing the decisions,
WorkItems, Approvals and Artifact references, and the original audit log
stays kept, ENCRYPTED, as Organization policy says. Once
``ext.missionweaveprotocol.core.group_archive`` commits
(``missions.registry.group_archived_hooks``), the Group's audit bundle
(``artifacts.audit.export_audit``: every signed Event, snapshot, manifest,
Evidence record, Context Package, the Registry's keys and the Artifact bytes)
is sealed with AES-256-GCM under the key from configuration and kept as one
file in ``MWP_AUDIT_ARCHIVE_DIR``::

    b"MWPA1\\n" || header (JCS JSON) || b"\\n" || nonce (12 bytes) || ciphertext+tag

The header (format, Group, Organization, head sequence, seal time, the key's
fingerprint) is authenticated as associated data, so a moved or edited
header fails like edited ciphertext. ``open_archive`` decrypts it;
``export_archived`` is the audit export of an archived Group (``mwp
export-audit`` and ``mwp verify-log`` call it): the archive decrypted and
``mwportal.protocol.audit.verify_bundle`` checking its hash chain and every
signature. A wrong key is named as such, never mistaken for tampering.

The key (docs/deploy.md): ``MWP_AUDIT_ENCRYPTION_KEY`` (base64url of 32
random bytes) or the file ``MWP_AUDIT_ENCRYPTION_KEY_FILE`` holding that
text; without either outside production, a per-installation key file is
generated on first use (mode 0600).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from missions.models import Group
from missions.registry import group_archived_hooks, snapshot_contributors
from missions.snapshots import is_archived
from mwportal.protocol import jcs
from mwportal.protocol.audit import AuditReport, verify_bundle
from mwportal.protocol.command import format_timestamp
from mwportal.protocol.ids import urn
from mwportal.protocol.values import b64url_decode, b64url_encode
from mwportal.security import PRIVATE_FILE_MODE, private_dir

from .models import Artifact

MAGIC = b"MWPA1\n"
FORMAT = "mwportal-audit-archive/1"
NONCE_BYTES = 12


class ArchiveError(Exception):
    """The archive is absent, sealed under another key, or fails authentication."""


@dataclass(frozen=True)
class Sealed:
    path: Path
    header: dict[str, Any]


def _key_text() -> str:
    if settings.MWP_AUDIT_ENCRYPTION_KEY:
        return str(settings.MWP_AUDIT_ENCRYPTION_KEY).strip()
    path = Path(settings.MWP_AUDIT_ENCRYPTION_KEY_FILE)
    if path.exists():
        return path.read_text().strip()
    if settings.MWP_PRODUCTION:
        raise ImproperlyConfigured(
            "archival needs the audit encryption key: set MWP_AUDIT_ENCRYPTION_KEY or MWP_AUDIT_ENCRYPTION_KEY_FILE"
            " (base64url of 32 random bytes, docs/deploy.md)"
        )
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".audit-key-")  # created 0600
    with os.fdopen(fd, "w") as fh:
        fh.write(b64url_encode(secrets.token_bytes(32)) + "\n")
    try:
        os.link(tmp, path)  # a concurrent process that won keeps its key
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return path.read_text().strip()


def encryption_key() -> bytes:
    """The configured AES-256 key; ImproperlyConfigured names the setting when it is not 32 bytes."""
    text = _key_text()
    try:
        key = b64url_decode(text)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise ImproperlyConfigured(
            "the audit encryption key (MWP_AUDIT_ENCRYPTION_KEY / MWP_AUDIT_ENCRYPTION_KEY_FILE) must be"
            " base64url of exactly 32 bytes"
        )
    return key


def key_fingerprint(key: bytes) -> str:
    """Names a key without revealing it: which key sealed an archive."""
    return "sha256:" + hashlib.sha256(b"mwportal audit archive key\x00" + key).hexdigest()[:32]


def archive_path(group_id: str) -> Path:
    return Path(settings.MWP_AUDIT_ARCHIVE_DIR) / f"{group_id}.mwpa"


def seal(group_id: str) -> Sealed:
    """Export the archived Group's audit bundle and keep it encrypted; the sealed file."""
    from .audit import export_audit

    if not is_archived(group_id):
        raise ArchiveError(f"Group {group_id} is not archived; only an archived Group's audit log is sealed")
    group = Group.objects.get(id=group_id)
    key = encryption_key()
    directory = private_dir(Path(settings.MWP_AUDIT_ARCHIVE_DIR))
    with tempfile.TemporaryDirectory(dir=directory) as work:
        bundle = Path(work) / "bundle.tar"
        export_audit(group_id, bundle)
        plain = bundle.read_bytes()
    header = {
        "format": FORMAT,
        "groupId": urn(group_id),
        "organizationId": urn(str(group.organization_id)),
        "headSequence": group.last_sequence,
        "sealedAt": format_timestamp(datetime.now(UTC)),
        "cipher": "AES-256-GCM",
        "keyFingerprint": key_fingerprint(key),
    }
    prefix = MAGIC + jcs.canonicalize(header) + b"\n"
    nonce = secrets.token_bytes(NONCE_BYTES)
    sealed = prefix + nonce + AESGCM(key).encrypt(nonce, plain, prefix)
    path = archive_path(group_id)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".seal-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(sealed)
    os.chmod(tmp, PRIVATE_FILE_MODE)
    os.replace(tmp, path)
    return Sealed(path, header)


def seal_once(group_id: str) -> None:
    """``group_archived_hooks``: seal an archived Group's audit log unless it is sealed already."""
    if not archive_path(group_id).exists():
        seal(group_id)


def read_header(data: bytes) -> tuple[dict[str, Any], bytes, bytes]:
    """``(header, authenticated prefix, nonce || ciphertext)`` of a sealed archive's bytes."""
    import json

    if not data.startswith(MAGIC):
        raise ArchiveError("not an MWP audit archive (bad magic)")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        raise ArchiveError("not an MWP audit archive (no header)")
    try:
        header = json.loads(data[len(MAGIC) : end])
    except ValueError:
        raise ArchiveError("not an MWP audit archive (unreadable header)") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ArchiveError(f"not an archive of format {FORMAT}")
    return header, data[: end + 1], data[end + 1 :]


def open_archive(group_id: str) -> tuple[dict[str, Any], bytes]:
    """The header and the decrypted audit bundle (tar bytes) of an archived Group."""
    path = archive_path(group_id)
    if not path.exists():
        raise ArchiveError(f"Group {group_id} has no sealed audit archive at {path}")
    header, prefix, rest = read_header(path.read_bytes())
    if header.get("groupId") != urn(group_id):
        raise ArchiveError(f"{path} is the archive of {header.get('groupId')}, not of Group {group_id}")
    key = encryption_key()
    if header.get("keyFingerprint") != key_fingerprint(key):
        raise ArchiveError(
            f"wrong key: the archive was sealed with key {header.get('keyFingerprint')}; the configured"
            f" audit encryption key is {key_fingerprint(key)} (MWP_AUDIT_ENCRYPTION_KEY)"
        )
    try:
        plain = AESGCM(key).decrypt(rest[:NONCE_BYTES], rest[NONCE_BYTES:], prefix)
    except InvalidTag:
        raise ArchiveError(f"{path} fails authentication: the archive or its header was altered") from None
    return header, plain


def export_archived(group_id: str, out: Path | None = None) -> AuditReport:
    """The audit export of an archived Group: its sealed archive decrypted, its hash chain and every
    signature verified (``verify_bundle``), and the plain bundle written to ``out`` only then.
    ``ArchiveError`` (absent, wrong key, altered) or ``AuditFailure`` (the bundle does not verify)."""
    _, bundle = open_archive(group_id)
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "bundle.tar"
        path.write_bytes(bundle)
        report = verify_bundle(str(path))
    if out is not None:
        out.write_bytes(bundle)
    return report


def artifact_references(group_id: str) -> tuple[str, Any]:
    """The Group's Artifact references for its snapshot state (§7.4): identity, content hash, provenance."""
    rows = Artifact.objects.filter(group_id=group_id).order_by("published_at", "id")
    return "artifacts", [
        {
            "artifactId": urn(str(a.artifact_id)),
            "contentHash": "sha256:" + a.sha256,
            "manifestHash": "sha256:" + a.manifest_hash,
            "workItemId": urn(str(a.workitem_id)),
            "producer": urn(str(a.producer_id)),
            "agentCardVersion": a.agent_card_version,
            "mediaType": a.media_type,
            "sizeBytes": a.size,
        }
        for a in rows
    ]


snapshot_contributors.append(artifact_references)
group_archived_hooks.append(seal_once)
