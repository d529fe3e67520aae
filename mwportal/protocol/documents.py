"""Signed Artifact manifests and Context Packages (spec 13.1, 13.3), Django-free.

An **Artifact manifest** (``mwp.artifact-manifest/1``)::

    {"schema", "content_hash", "media_type", "content_schema", "size",
     "producer": {"agent", "agent_card_version"},
     "mission", "group", "workitem", "sources": [sha256],
     "versions": {"tools": [{id, version}], "models": [...], "capabilities": [...]},
     "created_at", "classification", "retrieval_uri", "signature"}

A **Context Package** version (``mwp.context-package/1``)::

    {"schema", "package", "version", "previous",
     "scope": {"mission", "group", "workitem"},
     "events": {"from", "to"}, "artifacts": [sha256], "decisions": [str],
     "constraints": [str], "questions": [str],
     "generator": {"agent", "agent_card_version"}, "created_at", "signature"}

Both are signed by their producer (generator) with Ed25519 over the RFC 8785
bytes of the document without ``signature`` (DESIGN §4). ``check_manifest``
and ``check_context_package`` check the shape and raise ``DocumentInvalid``
naming the field; ``verify_document`` checks the signature. The server and the
offline audit verifier (``audit.py``) both use them.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from .canonical import canonicalize
from .signing import verify

MANIFEST_SCHEMA = "mwp.artifact-manifest/1"
CONTEXT_SCHEMA = "mwp.context-package/1"
CLASSIFICATIONS = ("public", "internal", "confidential", "restricted")
VERSION_KINDS = ("tools", "models", "capabilities")

MANIFEST_MEMBERS = (
    "schema", "content_hash", "media_type", "content_schema", "size", "producer", "mission", "group",
    "workitem", "sources", "versions", "created_at", "classification", "retrieval_uri", "signature",
)  # fmt: skip
CONTEXT_MEMBERS = (
    "schema", "package", "version", "previous", "scope", "events", "artifacts", "decisions", "constraints",
    "questions", "generator", "created_at", "signature",
)  # fmt: skip

_SHA = re.compile(r"^[0-9a-f]{64}$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$")
_MEDIA = re.compile(r"^[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+$")
MAX_LIST = 1000
MAX_TEXT = 5000


class DocumentInvalid(ValueError):
    """A manifest or Context Package is malformed; ``field`` names where."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def document_hash(document: dict[str, Any]) -> str:
    """The SHA-256 of the canonical document, signature included: its identity."""
    return hashlib.sha256(canonicalize(document)).hexdigest()


def _members(value: Any, members: tuple[str, ...], where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DocumentInvalid(where, "must be an object")
    for name in sorted(set(value) - set(members)):
        raise DocumentInvalid(f"{where}.{name}", "unknown member")
    for name in members:
        if name not in value:
            raise DocumentInvalid(f"{where}.{name}", "is required")
    return value


def _sha(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _SHA.match(value):
        raise DocumentInvalid(where, "must be 64 lower-case hex digits")
    return value


def _uuid(value: Any, where: str, *, nullable: bool = False) -> str | None:
    if value is None and nullable:
        return None
    if not isinstance(value, str) or not _UUID.match(value):
        raise DocumentInvalid(where, "must be a lower-case UUID")
    return value


def _time(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _TIME.match(value):
        raise DocumentInvalid(where, "must be an RFC 3339 UTC time ending in Z")
    return value


def _count(value: Any, where: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise DocumentInvalid(where, f"must be an integer of at least {minimum}")
    return value


def _text(value: Any, where: str, *, max_length: int = MAX_TEXT, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and not value) or len(value) > max_length:
        raise DocumentInvalid(where, f"must be a {'' if allow_empty else 'non-empty '}string of at most {max_length}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list) or len(value) > MAX_LIST:
        raise DocumentInvalid(where, f"must be a list of at most {MAX_LIST} items")
    return value


def _hashes(value: Any, where: str) -> list[str]:
    items = _list(value, where)
    for i, sha in enumerate(items):
        _sha(sha, f"{where}.{i}")
    if len(set(items)) != len(items):
        raise DocumentInvalid(where, "lists a hash twice")
    return items


def _producer(value: Any, where: str) -> dict[str, Any]:
    producer = _members(value, ("agent", "agent_card_version"), where)
    _uuid(producer["agent"], f"{where}.agent")
    _count(producer["agent_card_version"], f"{where}.agent_card_version")
    return producer


def check_manifest(manifest: Any) -> dict[str, Any]:
    """The manifest if its shape is right, else ``DocumentInvalid`` naming the field."""
    m = _members(manifest, MANIFEST_MEMBERS, "manifest")
    if m["schema"] != MANIFEST_SCHEMA:
        raise DocumentInvalid("manifest.schema", f"must be {MANIFEST_SCHEMA!r}")
    _sha(m["content_hash"], "manifest.content_hash")
    if not isinstance(m["media_type"], str) or not _MEDIA.match(m["media_type"]):
        raise DocumentInvalid("manifest.media_type", "must be a media type such as application/json")
    if m["content_schema"] is not None:
        _text(m["content_schema"], "manifest.content_schema", max_length=2000)
    _count(m["size"], "manifest.size")
    _producer(m["producer"], "manifest.producer")
    for name in ("mission", "group", "workitem"):
        _uuid(m[name], f"manifest.{name}")
    _hashes(m["sources"], "manifest.sources")
    if m["content_hash"] in m["sources"]:
        raise DocumentInvalid("manifest.sources", "an Artifact cannot be its own source")
    versions = _members(m["versions"], VERSION_KINDS, "manifest.versions")
    for kind in VERSION_KINDS:
        for i, entry in enumerate(_list(versions[kind], f"manifest.versions.{kind}")):
            where = f"manifest.versions.{kind}.{i}"
            _members(entry, ("id", "version"), where)
            _text(entry["id"], f"{where}.id", max_length=200)
            _text(entry["version"], f"{where}.version", max_length=200)
    _time(m["created_at"], "manifest.created_at")
    if m["classification"] not in CLASSIFICATIONS:
        raise DocumentInvalid("manifest.classification", f"must be one of {', '.join(CLASSIFICATIONS)}")
    _text(m["retrieval_uri"], "manifest.retrieval_uri", max_length=2000)
    if not isinstance(m["signature"], str):
        raise DocumentInvalid("manifest.signature", "must be a base64url string")
    return m


def check_context_package(document: Any) -> dict[str, Any]:
    """The Context Package version if its shape is right, else ``DocumentInvalid``."""
    d = _members(document, CONTEXT_MEMBERS, "package")
    if d["schema"] != CONTEXT_SCHEMA:
        raise DocumentInvalid("package.schema", f"must be {CONTEXT_SCHEMA!r}")
    _uuid(d["package"], "package.package")
    _count(d["version"], "package.version", 1)
    if d["previous"] is not None:
        _sha(d["previous"], "package.previous")
    if (d["version"] == 1) != (d["previous"] is None):
        raise DocumentInvalid("package.previous", "version 1 has no previous version; every later one names it")
    scope = _members(d["scope"], ("mission", "group", "workitem"), "package.scope")
    _uuid(scope["mission"], "package.scope.mission")
    _uuid(scope["group"], "package.scope.group")
    _uuid(scope["workitem"], "package.scope.workitem", nullable=True)
    events = _members(d["events"], ("from", "to"), "package.events")
    start = _count(events["from"], "package.events.from", 1)
    if _count(events["to"], "package.events.to", 1) < start:
        raise DocumentInvalid("package.events", "from must not be after to")
    _hashes(d["artifacts"], "package.artifacts")
    for name in ("decisions", "constraints", "questions"):
        for i, text in enumerate(_list(d[name], f"package.{name}")):
            _text(text, f"package.{name}.{i}")
    _producer(d["generator"], "package.generator")
    _time(d["created_at"], "package.created_at")
    if not isinstance(d["signature"], str):
        raise DocumentInvalid("package.signature", "must be a base64url string")
    return d


def verify_document(public_key: str, document: dict[str, Any]) -> bool:
    """True when ``document["signature"]`` is ``public_key``'s signature of the rest."""
    signature = document.get("signature")
    return isinstance(signature, str) and verify(public_key, document, signature)
