"""MWP 0.1 Command documents (PROTOCOL §15.1): building them signed, and the verified form handlers read.

``build_command`` is what every client of the project (tests, the Worker, the
demo, the control plane) uses to send a Command: the camelCase envelope of
``command.schema.json`` with ``urn:uuid:`` identifiers, signed over its JCS
bytes (§6.4) so that ``signature.createdAt`` is ``issuedAt`` byte for byte.

``CommandDoc`` is a Command after the six verification stages: the envelope's
identifiers read back to bare UUIDs (the database's form), the epochs, the
payload, the document itself and its signing hash.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import ed25519
from .errors import ErrorCode, ProtocolError
from .ids import bare, bare_or_none, new_urn, urn
from .values import b64url_decode, b64url_encode, parse_timestamp
from .verification import sign_document

PROTOCOL_VERSION = "0.1"
ACTOR_TYPES = ("agent", "human", "service")


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 UTC with ``Z`` and microseconds: the one form the portal writes (§2)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class Key:
    """A signing key: its Registry key ID and the raw 32-byte Ed25519 seed."""

    key_id: str
    seed: bytes = field(repr=False)
    principal: tuple[str, str] | None = None  # (type, bare uuid) when known
    organization_id: str | None = None  # bare uuid when known

    @property
    def public_key(self) -> str:
        return b64url_encode(ed25519.public_key(self.seed))

    @classmethod
    def generate(cls, principal: tuple[str, str] | None = None, organization_id: str | None = None) -> Key:
        return cls(new_urn(), os.urandom(32), principal, organization_id)

    def as_file(self) -> dict[str, Any]:
        """The DESIGN §4 key file's members."""
        if self.principal is None or self.organization_id is None:
            raise ValueError("a key file names its principal and Organization")
        return {
            "principal": {"type": self.principal[0], "id": urn(self.principal[1])},
            "organizationId": urn(self.organization_id),
            "keyId": self.key_id,
            "privateKey": b64url_encode(self.seed),
            "publicKey": self.public_key,
        }

    def write(self, path: str | Path) -> None:
        """Write the key file with mode 0600 (replacing one that is there)."""
        target = Path(path)
        tmp = target.with_name(target.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(self.as_file(), fh, indent=2)
        os.replace(tmp, target)

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Key:
        seed = b64url_decode(data["privateKey"])
        if len(seed) != 32:
            raise ValueError("privateKey: an Ed25519 seed is 32 bytes")
        key = cls(
            str(data["keyId"]),
            seed,
            (str(data["principal"]["type"]), bare(data["principal"]["id"], "principal.id")),
            bare(data["organizationId"], "organizationId"),
        )
        if "publicKey" in data and data["publicKey"] != key.public_key:
            raise ValueError("publicKey does not belong to privateKey")
        return key

    @classmethod
    def from_file(cls, path: str | Path) -> Key:
        return cls.from_data(json.loads(Path(path).read_text()))


def actor_json(actor_type: str, actor_id: str) -> dict[str, str]:
    return {"type": actor_type, "id": urn(actor_id)}


def build_command(
    kind: str,
    *,
    actor: tuple[str, str],
    key: Key,
    payload: dict[str, Any],
    group: str | None = None,
    session_epoch: int | None = None,
    membership_epoch: int | None = None,
    coordinator_epoch: int | None = None,
    expected_revision: int | None = None,
    work_item_id: str | None = None,
    conversation_id: str | None = None,
    action_id: str | None = None,
    correlation_id: str | None = None,
    caused_by_event_id: str | None = None,
    issued_at: datetime | None = None,
    extensions: dict[str, Any] | None = None,
    cooperation_override_grant_id: str | None = None,
) -> dict[str, Any]:
    """A signed Command document. Identifiers are bare UUIDs here and ``urn:uuid:`` on the wire;
    ``correlation_id`` and ``caused_by_event_id`` are taken as written (URIs)."""
    action = urn(action_id) if action_id else new_urn()
    doc: dict[str, Any] = {
        "protocolVersion": PROTOCOL_VERSION,
        "actionId": action,
        "actor": actor_json(*actor),
        "kind": kind,
        "correlationId": correlation_id or action,
        "issuedAt": format_timestamp(issued_at or datetime.now(UTC)),
        "payload": payload,
    }
    optional: dict[str, Any] = {
        "groupId": urn(group) if group else None,
        "sessionEpoch": session_epoch,
        "membershipEpoch": membership_epoch,
        "coordinatorEpoch": coordinator_epoch,
        "expectedRevision": expected_revision,
        "workItemId": urn(work_item_id) if work_item_id else None,
        "conversationId": urn(conversation_id) if conversation_id else None,
        "causedByEventId": caused_by_event_id,
        "extensions": extensions or None,
        "cooperationOverrideGrantId": urn(cooperation_override_grant_id) if cooperation_override_grant_id else None,
    }
    doc.update({name: value for name, value in optional.items() if value is not None})
    return sign_document(doc, key_id=key.key_id, seed=key.seed, profile="command")


@dataclass(frozen=True, slots=True)
class CommandDoc:
    """A Command as the Group Authority reads it once its document is verified (or built in-process)."""

    kind: str
    action_id: str
    actor_type: str
    actor: str
    group: str | None
    session_epoch: int | None
    membership_epoch: int | None
    coordinator_epoch: int | None
    expected_revision: int | None
    work_item_id: str | None
    conversation_id: str | None
    correlation_id: str
    issued_at: datetime
    payload: dict[str, Any]
    extensions: dict[str, Any]
    raw: dict[str, Any] = field(compare=False, repr=False)
    signing_hash: str = field(compare=False, repr=False)
    key_id: str | None = None

    @property
    def action_urn(self) -> str:
        return urn(self.action_id)

    @property
    def actor_urn(self) -> str:
        return urn(self.actor)


def _instant(text: str) -> datetime:
    stamp = parse_timestamp(text)
    if not stamp.is_utc_z:
        raise ProtocolError(
            ErrorCode.SCHEMA_VALIDATION_FAILED, "issuedAt: must end in Z", details={"field": "issuedAt"}
        )
    head, _, frac = text[:-1].partition(".")
    moment = datetime.fromisoformat(head).replace(tzinfo=UTC)
    if frac:
        moment = moment.replace(microsecond=int(frac[:6].ljust(6, "0")))
    return moment


def read_command(doc: dict[str, Any], *, signing_hash: str, key_id: str | None) -> CommandDoc:
    """The ``CommandDoc`` of a schema-valid Command document; identifiers must be ``urn:uuid:``."""
    actor = doc["actor"]
    return CommandDoc(
        kind=doc["kind"],
        action_id=bare(doc["actionId"], "actionId"),
        actor_type=actor["type"],
        actor=bare(actor["id"], "actor.id"),
        group=bare_or_none(doc.get("groupId"), "groupId"),
        session_epoch=doc.get("sessionEpoch"),
        membership_epoch=doc.get("membershipEpoch"),
        coordinator_epoch=doc.get("coordinatorEpoch"),
        expected_revision=doc.get("expectedRevision"),
        work_item_id=bare_or_none(doc.get("workItemId"), "workItemId"),
        conversation_id=bare_or_none(doc.get("conversationId"), "conversationId"),
        correlation_id=doc["correlationId"],
        issued_at=_instant(doc["issuedAt"]),
        payload=doc["payload"],
        extensions=doc.get("extensions") or {},
        raw=doc,
        signing_hash=signing_hash,
        key_id=key_id,
    )
