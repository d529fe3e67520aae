"""The Command envelope of DESIGN §4: parsing and validation, no I/O.

``parse_envelope(data)`` turns an untrusted JSON object into an ``Envelope``
or raises ``ProtocolError(SCHEMA_VALIDATION_FAILED)`` naming the first bad field. It checks
shape only; who may do what is the authority's business.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .canonical import CanonicalizationError, signing_bytes
from .errors import malformed

MAX_COMMAND_BYTES = 1024 * 1024
SYSTEM_ACTOR = "system"

_REQUIRED = ("type", "action_id", "actor", "group", "session_epoch", "issued_at", "body", "signature")
_OPTIONAL = ("target", "membership_epoch", "ownership_epoch", "lease_id", "extensions")
_ALLOWED = frozenset(_REQUIRED + _OPTIONAL)
_TYPE_RE = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")
_RFC3339_Z = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z")


@dataclass(frozen=True, slots=True)
class Target:
    kind: str
    id: str
    revision: int | None


@dataclass(frozen=True, slots=True)
class Envelope:
    """A validated Command envelope; ``raw`` keeps the wire object as received."""

    type: str
    action_id: str
    actor: str
    group: str
    session_epoch: int
    issued_at: datetime
    body: dict[str, Any]
    signature: str | None
    target: Target | None = None
    membership_epoch: int | None = None
    ownership_epoch: int | None = None
    lease_id: str | None = None
    extensions: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, compare=False)
    # The canonical bytes of the envelope without its signature: what the
    # signature covers and what the idempotency hash is taken of, computed
    # once while parsing.
    signing_bytes: bytes = field(default=b"", compare=False, repr=False)

    def content_hash(self) -> str:
        """SHA-256 of the canonical envelope without its signature (MWP-EVT-003).

        Ed25519 signatures are deterministic, but leaving the signature out
        makes the same Command hash the same whether it arrived signed over
        the agent transport or was built by the portal for a session.
        """
        return hashlib.sha256(self.signing_bytes).hexdigest()


def parse_uuid(value: Any, name: str) -> str:
    """The canonical lower-case text of a UUID, or SCHEMA_VALIDATION_FAILED naming ``name``."""
    if not isinstance(value, str):
        raise malformed(name, "must be a UUID string")
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        raise malformed(name, f"{value[:64]!r} is not a UUID") from None
    if str(parsed) != value.lower() or len(value) != 36:
        raise malformed(name, "must be a UUID in its 8-4-4-4-12 form")
    return str(parsed)


def parse_time(value: Any, name: str) -> datetime:
    """An RFC 3339 UTC time ending in ``Z``."""
    if not isinstance(value, str) or not _RFC3339_Z.fullmatch(value):
        raise malformed(name, "must be an RFC 3339 UTC time ending in Z")
    text = value[:-1]
    if "." in text:  # Python parses at most microseconds
        head, frac = text.split(".")
        text = f"{head}.{frac[:6]:0<6}"
    try:
        return datetime.fromisoformat(text).replace(tzinfo=UTC)
    except ValueError:
        raise malformed(name, "is not a valid date and time") from None


def format_time(value: datetime) -> str:
    """RFC 3339 UTC with ``Z`` and microseconds: the one form the log uses."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _int(value: Any, name: str, *, minimum: int = 0, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise malformed(name, "must be an integer")
    if value < minimum:
        raise malformed(name, f"must be at least {minimum}")
    return value


def _target(value: Any) -> Target | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise malformed("target", "must be an object")
    extra = set(value) - {"kind", "id", "revision"}
    if extra:
        raise malformed(f"target.{sorted(extra)[0]}", "unknown member")
    kind = value.get("kind")
    if not isinstance(kind, str) or not kind:
        raise malformed("target.kind", "must be a non-empty string")
    if "id" not in value:
        raise malformed("target.id", "is required")
    revision = _int(value.get("revision"), "target.revision", optional=True)
    return Target(kind=kind, id=parse_uuid(value["id"], "target.id"), revision=revision)


def parse_envelope(data: Any, *, require_signature: bool = True) -> Envelope:
    """Validate the shape of a Command envelope; SCHEMA_VALIDATION_FAILED names the field.

    ``require_signature=False`` is for Commands built by the portal for a
    Django session or by the system actor; those carry no signature.
    """
    if not isinstance(data, dict):
        raise malformed("envelope", "must be a JSON object")
    unknown = sorted(set(data) - _ALLOWED)
    if unknown:
        raise malformed(unknown[0], "unknown member")
    for name in _REQUIRED:
        if name == "signature" and not require_signature:
            continue
        if name not in data:
            raise malformed(name, "is required")
    ctype = data["type"]
    if not isinstance(ctype, str) or not _TYPE_RE.fullmatch(ctype):
        raise malformed("type", "must be a dotted command name such as work.start")
    actor = data["actor"]
    if actor != SYSTEM_ACTOR:
        actor = parse_uuid(actor, "actor")
    body = data["body"]
    if not isinstance(body, dict):
        raise malformed("body", "must be an object")
    extensions = data.get("extensions")
    if extensions is None:
        extensions = {}
    elif not isinstance(extensions, dict):
        raise malformed("extensions", "must be an object")
    signature = data.get("signature")
    if (require_signature or signature is not None) and (not isinstance(signature, str) or not signature):
        raise malformed("signature", "must be a base64url string")
    lease_id = data.get("lease_id")
    if lease_id is not None:
        lease_id = parse_uuid(lease_id, "lease_id")
    try:
        signing = signing_bytes(data)
    except CanonicalizationError as exc:
        raise malformed("envelope", str(exc)) from None
    return Envelope(
        type=ctype,
        action_id=parse_uuid(data["action_id"], "action_id"),
        actor=actor,
        group=parse_uuid(data["group"], "group"),
        session_epoch=_int(data["session_epoch"], "session_epoch") or 0,
        issued_at=parse_time(data["issued_at"], "issued_at"),
        body=body,
        signature=signature,
        target=_target(data.get("target")),
        membership_epoch=_int(data.get("membership_epoch"), "membership_epoch", optional=True),
        ownership_epoch=_int(data.get("ownership_epoch"), "ownership_epoch", optional=True),
        lease_id=lease_id,
        extensions=extensions,
        raw=data,
        signing_bytes=signing,
    )


def make_envelope(
    *,
    type: str,
    actor: str,
    group: str,
    body: dict[str, Any],
    session_epoch: int,
    private_key: str | None = None,
    action_id: str | None = None,
    target: dict[str, Any] | None = None,
    membership_epoch: int | None = None,
    ownership_epoch: int | None = None,
    lease_id: str | None = None,
    issued_at: datetime | None = None,
    extensions: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build a Command envelope as a client sends it, signed when a key is given."""
    from .signing import signed

    envelope: dict[str, Any] = {
        "type": type,
        "action_id": action_id or str(uuid.uuid4()),
        "actor": actor,
        "group": group,
        "session_epoch": session_epoch,
        "issued_at": format_time(issued_at or datetime.now(UTC)),
        "body": body,
    }
    optional = {
        "target": target,
        "membership_epoch": membership_epoch,
        "ownership_epoch": ownership_epoch,
        "lease_id": lease_id,
        "extensions": extensions or None,
    }
    envelope.update({name: value for name, value in optional.items() if value is not None})
    return signed(private_key, envelope) if private_key else envelope


def attempt_key(mission_id: str, workitem_id: str, ownership_epoch: int, operation_id: str) -> str:
    """The stable idempotency key of an external operation (spec 16; MWP-WRK-031).

    Derived from Mission ID, WorkItem ID, Ownership Epoch and the logical
    operation ID only, so every retry of the same operation under the same
    ownership sends the same key, and a new owner's attempt a different one.
    """
    material = "\x1f".join([mission_id, workitem_id, str(ownership_epoch), operation_id])
    return hashlib.sha256(material.encode("utf-8")).hexdigest()
