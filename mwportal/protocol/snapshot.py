"""Signed Group snapshots (spec 16; persistence guide "Snapshots and long gaps").

A snapshot document::

    {"schema": "mwp.group-snapshot/1", "organization", "group", "sequence",
     "head_hash", "state_hash", "state", "created_at", "signature"}

``state_hash`` is the SHA-256 of the canonical ``state``; ``head_hash`` is the
Group's hash chain at ``sequence``; the server's Ed25519 ``signature`` covers
the canonical document without ``signature``. ``verify_snapshot`` is what a
Worker runs before restoring one; it checks the schema, the state hash, the
signature, the Organization and Group binding and the sequence, and raises
``SnapshotInvalid`` naming the first check that failed.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .canonical import canonicalize
from .signing import sign, verify

SNAPSHOT_SCHEMA = "mwp.group-snapshot/1"
_MEMBERS = frozenset(
    {"schema", "organization", "group", "sequence", "head_hash", "state_hash", "state", "created_at", "signature"}
)


class SnapshotInvalid(ValueError):
    """A snapshot failed verification; ``check`` names which check."""

    def __init__(self, check: str, message: str):
        super().__init__(f"{check}: {message}")
        self.check = check


def state_hash(state: dict[str, Any]) -> str:
    return hashlib.sha256(canonicalize(state)).hexdigest()


def build_snapshot(
    *,
    private_key: str,
    organization: str,
    group: str,
    sequence: int,
    head_hash: str,
    state: dict[str, Any],
    created_at: str,
) -> dict[str, Any]:
    """A signed snapshot document."""
    document: dict[str, Any] = {
        "schema": SNAPSHOT_SCHEMA,
        "organization": organization,
        "group": group,
        "sequence": sequence,
        "head_hash": head_hash,
        "state_hash": state_hash(state),
        "state": state,
        "created_at": created_at,
    }
    document["signature"] = sign(private_key, document)
    return document


def verify_snapshot(
    document: Any,
    *,
    server_public_key: str,
    organization: str,
    group: str,
    min_sequence: int = 0,
    sequence: int | None = None,
) -> dict[str, Any]:
    """Return the snapshot's ``state`` once every check passes, else raise ``SnapshotInvalid``.

    ``sequence`` (when given) is the sequence the reference promised;
    ``min_sequence`` refuses a snapshot older than what the caller already has.
    """
    if not isinstance(document, dict) or set(document) != _MEMBERS:
        raise SnapshotInvalid("schema", "the document does not have the snapshot members")
    if document["schema"] != SNAPSHOT_SCHEMA:
        raise SnapshotInvalid("schema", f"unknown schema {document['schema']!r}")
    state = document["state"]
    if not isinstance(state, dict) or state_hash(state) != document["state_hash"]:
        raise SnapshotInvalid("hash", "the state does not match state_hash")
    signature = document["signature"]
    if not isinstance(signature, str) or not verify(server_public_key, document, signature):
        raise SnapshotInvalid("signature", "the server's signature does not verify")
    if document["organization"] != organization:
        raise SnapshotInvalid("organization", "the snapshot belongs to another Organization")
    if document["group"] != group:
        raise SnapshotInvalid("group", "the snapshot belongs to another Group")
    seq = document["sequence"]
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < max(min_sequence, 0):
        raise SnapshotInvalid("sequence", f"sequence {seq!r} is older than required ({min_sequence})")
    if sequence is not None and seq != sequence:
        raise SnapshotInvalid("sequence", f"sequence {seq} is not the referenced {sequence}")
    return state
