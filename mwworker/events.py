"""Group Event documents as the Worker receives them (PROTOCOL §15.2, §16; DESIGN §6).

Every Event the Worker applies is a normative Event document signed by its
Organization's Group Authority (``acceptedBy``). Before the store applies
one, ``EventVerifier.verify`` runs the six stages of the Signed Document
Verification Profile (§6.4, profile ``event``) over its JCS bytes with a
Registry built from ``GET /api/v0.1/keys/{keyId}`` (``KeyCache``), checks
that the signer is a service Principal, and that the payload is one the
catalogue's schema accepts for its kind (an Event of a kind the catalogue
lacks is kept in the log and advances the Cursor, but nothing is folded
from it). Only then does ``projection.fold`` read it.

``check_event(obj)`` is the cheap shape check the store runs before the
signature: a Group Event with an ``eventId``, a ``groupId``, a positive
``sequence``, a ``kind`` and a ``payload`` object.

``text(value)`` is the RFC 8785 text of a projection value: equal values are
equal text, whichever way a number was spelled on the wire.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from mwportal.protocol import catalogue, eventdoc, jcs
from mwportal.protocol.errors import ProtocolError
from mwportal.protocol.registry import KeyBinding, KeyResolutionError, MemoryRegistry, Principal, RegistrationError

from .errors import MalformedEvent, SignatureRefused

Event = dict[str, Any]

_REQUIRED = ("eventId", "groupId", "sequence", "kind", "payload", "signature", "acceptedBy")


def check_event(obj: Any) -> Event:
    """``obj`` when it has the shape of a Group Event document, else ``MalformedEvent``.

    Only what the store routes by: the six stages (``EventVerifier``) check
    the rest against the normative schema.
    """
    if not isinstance(obj, dict):
        raise MalformedEvent("an Event is a JSON object")
    missing = [name for name in _REQUIRED if name not in obj]
    if missing:
        raise MalformedEvent(f"a Group Event needs {missing}")
    for name in ("eventId", "groupId", "kind"):
        if not isinstance(obj[name], str) or not obj[name]:
            raise MalformedEvent(f"{name}: must be a non-empty string")
    seq = obj["sequence"]
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise MalformedEvent("sequence: must be a positive integer")
    if not isinstance(obj["payload"], dict):
        raise MalformedEvent("payload: must be an object")
    signature = obj["signature"]
    if not isinstance(signature, dict) or not isinstance(signature.get("keyId"), str):
        raise MalformedEvent("signature: must carry a keyId")
    return obj


def key_id_of(event: Mapping[str, Any]) -> str:
    """The key ID the Event's signature names (the one the Registry must resolve)."""
    return str(event["signature"]["keyId"])


def event_bytes(event: Event) -> bytes:
    """The Event's RFC 8785 bytes: what the inbox keeps and the verifier reads.
    The signature covers the JCS bytes without ``signature``, so re-encoding a
    parsed document verifies exactly as the received bytes would (§17.4)."""
    try:
        return jcs.canonicalize(event)
    except jcs.DataModelError as exc:
        raise MalformedEvent(f"outside the I-JSON data model: {exc}") from None


class KeyCache:
    """The Group Authority keys this Worker has learnt, as one Organization's Registry.

    ``add(binding)`` takes a key binding as ``GET /api/v0.1/keys/{keyId}``
    serves it (``{keyId, principal, algorithm, publicKey, validFrom,
    validUntil?, revokedAt?}``); the kernel's ``MemoryRegistry`` enforces the
    Organization-wide invariants (no rebinding, no alias). Thread-safe: the
    store verifies on a worker thread while the runtime adds keys.
    """

    def __init__(self, organization_id: str) -> None:
        self.registry = MemoryRegistry(organization_id)
        self._lock = threading.Lock()

    def knows(self, key_id: str) -> bool:
        with self._lock:
            try:
                self.registry.resolve(key_id)
            except KeyResolutionError:
                return False
            return True

    def add(self, binding: Mapping[str, Any]) -> KeyBinding:
        """Register a served key binding; ``SignatureRefused`` when it is not one the Registry accepts."""
        try:
            principal = binding["principal"]
            with self._lock:
                out = self.registry.register(
                    str(binding["keyId"]),
                    Principal(str(principal["type"]), str(principal["id"])),
                    str(binding["publicKey"]),
                    str(binding["validFrom"]),
                    algorithm=str(binding.get("algorithm", "Ed25519")),
                )
                ended = {k: binding.get(k) for k in ("validUntil", "revokedAt") if binding.get(k)}
                if ended:
                    self.registry.record_status(
                        out.key_id,
                        str(ended.get("revokedAt") or ended.get("validUntil")),
                        valid_until=ended.get("validUntil"),
                        revoked_at=ended.get("revokedAt"),
                    )
                return out
        except (KeyError, TypeError) as exc:
            raise SignatureRefused(f"the key binding lacks {exc}") from None
        except RegistrationError as exc:
            raise SignatureRefused(f"the key binding is refused ({exc.reason})") from None


class EventVerifier:
    """Verifies Group Event documents before the store applies them (DESIGN §6)."""

    def __init__(self, keys: KeyCache) -> None:
        self.keys = keys

    def verify(self, event: Event) -> Event:
        """The verified document; ``SignatureRefused`` (or ``MalformedEvent``) otherwise.

        The six stages run over the Event's JCS bytes; the signer must be a
        service Principal of this Organization (the Group Authority); a kind
        the catalogue defines must carry a payload its schema accepts.
        """
        data = event_bytes(event)
        try:
            # The profile's expected signer is ``acceptedBy``, and eventdoc
            # requires it to be a service Principal (the Group Authority).
            eventdoc.verify_event(data, self.keys.registry)
        except ProtocolError as exc:
            # The stage and reason are in the protected diagnostics; the code is all a peer learns.
            raise SignatureRefused(f"{exc.code}: {exc.message}") from None
        kind = event["kind"]
        if catalogue.is_event(kind):
            try:
                catalogue.validate_payload(kind, event["payload"])
            except catalogue.PayloadError as exc:
                raise MalformedEvent(f"{kind}: the catalogue refuses its payload ({exc})") from None
        return event


def text(value: Any) -> str:
    """The RFC 8785 text of a projection value: equal values are equal text,
    whichever way a number was spelled on the wire (``1.0`` and ``1``)."""
    return jcs.canonicalize(value).decode("utf-8")
