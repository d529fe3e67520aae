"""The Registry seam of the Signed Document Verification Profile (§6.4).

Exception tree::

    KeyResolutionError(Exception)   stage 4 cannot produce a binding; ``.reason``
                                    is a protected diagnostic, never the wire
    RegistrationError(ValueError)   a binding or validity record the Registry
                                    refuses to accept; ``.reason`` says which rule

The §6.4 invariants are enforced **once, when a binding or status record is
registered**, never per verification: a verifier reads one binding through an
index (``resolve`` is a dict lookup, whatever the Registry's size).

- Binding identity ``keyId -> (Principal, algorithm, public key)`` is immutable.
  An identical re-declaration is the same logical binding; anything else under a
  known key ID is a rebinding and refused.
- Within the Organization one public key lives under exactly one key ID: the
  same key under another Principal is cross-principal reuse, under the same
  Principal a key-ID alias; both refused.
- Every key passes :func:`ed25519.check_public_key` (canonical, on the curve,
  not the identity, prime-order) before the uniqueness checks run.
- Validity history is append-only: ``validFrom`` is fixed by the first
  registration; a ``validUntil`` or ``revokedAt`` may be added or moved
  earlier, never cleared or moved later; the effective value is the earliest.

``registry_from_fixture`` reads the bundle's Registry fixture format. It
validates *every* binding and record before any key ID is looked at; if one is
invalid — even one unrelated to the key a document names — the evidence it
returns fails closed: ``resolve`` always raises, so stage 4 fails (§6.4).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from . import ed25519
from .values import Timestamp, TimestampError, b64url_decode, is_absolute_uri, parse_timestamp

__all__ = [
    "ALGORITHM",
    "PRINCIPAL_TYPES",
    "FailClosedEvidence",
    "KeyBinding",
    "KeyResolutionError",
    "MemoryRegistry",
    "Principal",
    "RegistrationError",
    "RegistryEvidence",
    "ValidityStatus",
    "key_valid_at",
    "registry_from_fixture",
]

ALGORITHM = "Ed25519"
PRINCIPAL_TYPES = frozenset({"agent", "human", "service"})

# Distinct protected reasons; §6.4 requires them indistinguishable on the wire.
UNKNOWN_KEY = "unknown-key"
EVIDENCE_UNAVAILABLE = "evidence-unavailable"
EVIDENCE_INCOMPLETE = "evidence-incomplete"
EVIDENCE_INVALID = "evidence-invalid"


@dataclass(frozen=True, slots=True)
class Principal:
    type: str
    id: str

    def as_json(self) -> dict[str, str]:
        return {"type": self.type, "id": self.id}


@dataclass(frozen=True, slots=True)
class ValidityStatus:
    """One append-only validity-status record of a binding's history."""

    sequence: int
    recorded_at: Timestamp
    valid_until: Timestamp | None = None
    revoked_at: Timestamp | None = None


@dataclass(frozen=True, slots=True)
class KeyBinding:
    """A resolved binding with its *effective* interval (the earliest boundaries in history)."""

    key_id: str
    principal: Principal
    algorithm: str
    public_key: bytes
    valid_from: Timestamp
    valid_until: Timestamp | None = None
    revoked_at: Timestamp | None = None


class KeyResolutionError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RegistrationError(ValueError):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RegistryEvidence(Protocol):
    """Organization-scoped Registry evidence for one verification decision (§6.4 stage 4).

    ``resolve`` returns the binding of a key ID, or raises
    :class:`KeyResolutionError` for an authoritatively unknown key, unavailable
    or incomplete evidence, or evidence that fails the Organization-wide
    invariants. An implementation must establish completeness before it may
    conclude "unknown".
    """

    @property
    def organization_id(self) -> str: ...

    def resolve(self, key_id: str) -> KeyBinding: ...


def key_valid_at(binding: KeyBinding, t: Timestamp) -> bool:
    """§6.4: ``validFrom <= t``, ``t < validUntil``, ``t < revokedAt`` (half-open), as instants."""
    if t < binding.valid_from:
        return False
    if binding.valid_until is not None and not t < binding.valid_until:
        return False
    return binding.revoked_at is None or t < binding.revoked_at


def _timestamp(value: Timestamp | str, what: str) -> Timestamp:
    if isinstance(value, Timestamp):
        return value
    try:
        return parse_timestamp(value)
    except TimestampError as exc:
        raise RegistrationError(f"{what}-malformed") from exc


def _earliest(current: Timestamp | None, new: Timestamp | None, what: str) -> Timestamp | None:
    # Append-only boundary: absent in a record means "unchanged"; present may
    # equal or precede the effective value, never follow it.
    if new is None:
        return current
    if current is not None and current < new:
        raise RegistrationError(f"{what}-moved-later")
    return new


class MemoryRegistry:
    """An in-memory authoritative Registry for one Organization.

    Complete by construction (it holds every binding it accepted), so an absent
    key ID is an authoritative "unknown key". Indexes: key ID -> binding,
    public key -> key ID, key ID -> history.
    """

    def __init__(self, organization_id: str) -> None:
        if not is_absolute_uri(organization_id):
            raise RegistrationError("organization-id-not-absolute-uri")
        self._organization_id = organization_id
        self._by_key_id: dict[str, KeyBinding] = {}
        self._by_public_key: dict[bytes, str] = {}
        self._history: dict[str, list[ValidityStatus]] = {}

    @property
    def organization_id(self) -> str:
        return self._organization_id

    def __len__(self) -> int:
        return len(self._by_key_id)

    def register(
        self,
        key_id: str,
        principal: Principal,
        public_key: str | bytes,
        valid_from: Timestamp | str,
        *,
        algorithm: str = ALGORITHM,
    ) -> KeyBinding:
        """Accept a binding (or recognise an identical re-declaration); RegistrationError if not.

        ``public_key`` is the canonical unpadded base64url text, or the raw 32 bytes.
        """
        if not isinstance(key_id, str) or not is_absolute_uri(key_id):
            raise RegistrationError("key-id-not-absolute-uri")
        if not isinstance(principal.type, str) or principal.type not in PRINCIPAL_TYPES:
            raise RegistrationError("principal-type-unknown")
        if not isinstance(principal.id, str) or not is_absolute_uri(principal.id):
            raise RegistrationError("principal-id-not-absolute-uri")
        if algorithm != ALGORITHM:
            raise RegistrationError("algorithm-unsupported")
        if isinstance(public_key, str):
            try:
                raw = b64url_decode(public_key)
            except ValueError as exc:
                raise RegistrationError("public-key-not-canonical-base64url") from exc
        else:
            raw = bytes(public_key)
        # The strict point checks come before the uniqueness checks (§6.4).
        try:
            ed25519.check_public_key(raw)
        except ed25519.Ed25519EncodingError as exc:
            raise RegistrationError(exc.reason) from exc
        start = _timestamp(valid_from, "valid-from")

        existing = self._by_key_id.get(key_id)
        if existing is not None:
            same = (
                existing.principal == principal
                and existing.algorithm == algorithm
                and existing.public_key == raw
                and existing.valid_from == start
            )
            if not same:
                # validFrom is part of what may never change, so a different one is a rebinding too.
                raise RegistrationError("key-id-rebinding")
            return existing
        holder = self._by_public_key.get(raw)
        if holder is not None:
            holder_principal = self._by_key_id[holder].principal
            raise RegistrationError("key-id-alias" if holder_principal == principal else "public-key-reuse")

        binding = KeyBinding(key_id, principal, algorithm, raw, start)
        self._by_key_id[key_id] = binding
        self._by_public_key[raw] = key_id
        self._history[key_id] = []
        return binding

    def record_status(
        self,
        key_id: str,
        recorded_at: Timestamp | str,
        *,
        valid_until: Timestamp | str | None = None,
        revoked_at: Timestamp | str | None = None,
        sequence: int | None = None,
    ) -> KeyBinding:
        """Append a validity-status record; the binding's effective interval may only shrink."""
        binding = self._by_key_id.get(key_id)
        if binding is None:
            raise RegistrationError("status-for-unknown-key")
        history = self._history[key_id]
        last = history[-1].sequence if history else 0
        if sequence is None:
            sequence = last + 1
        if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 1:
            raise RegistrationError("status-sequence-invalid")
        if history and any(s.sequence == sequence for s in history):
            return self._redeclare_status(binding, history, sequence, recorded_at, valid_until, revoked_at)
        if sequence <= last:
            raise RegistrationError("status-sequence-not-increasing")
        status = ValidityStatus(
            sequence,
            _timestamp(recorded_at, "recorded-at"),
            None if valid_until is None else _timestamp(valid_until, "valid-until"),
            None if revoked_at is None else _timestamp(revoked_at, "revoked-at"),
        )
        effective = replace(
            binding,
            valid_until=_earliest(binding.valid_until, status.valid_until, "valid-until"),
            revoked_at=_earliest(binding.revoked_at, status.revoked_at, "revoked-at"),
        )
        history.append(status)
        self._by_key_id[key_id] = effective
        return effective

    def _redeclare_status(
        self,
        binding: KeyBinding,
        history: list[ValidityStatus],
        sequence: int,
        recorded_at: Timestamp | str,
        valid_until: Timestamp | str | None,
        revoked_at: Timestamp | str | None,
    ) -> KeyBinding:
        # A record already in history may be declared again (another Registry
        # version repeating it), but never rewritten (§6.4: no rewrite or discard).
        old = next(s for s in history if s.sequence == sequence)
        again = ValidityStatus(
            sequence,
            _timestamp(recorded_at, "recorded-at"),
            None if valid_until is None else _timestamp(valid_until, "valid-until"),
            None if revoked_at is None else _timestamp(revoked_at, "revoked-at"),
        )
        if again != old or not _same_text(again, old):
            raise RegistrationError("status-record-rewritten")
        return binding

    def history(self, key_id: str) -> tuple[ValidityStatus, ...]:
        return tuple(self._history.get(key_id, ()))

    def resolve(self, key_id: str) -> KeyBinding:
        binding = self._by_key_id.get(key_id)
        if binding is None:
            raise KeyResolutionError(UNKNOWN_KEY)
        return binding


def _same_text(a: ValidityStatus, b: ValidityStatus) -> bool:
    def texts(s: ValidityStatus) -> tuple[str | None, ...]:
        return (
            s.recorded_at.text,
            None if s.valid_until is None else s.valid_until.text,
            None if s.revoked_at is None else s.revoked_at.text,
        )

    return texts(a) == texts(b)


class FailClosedEvidence:
    """Evidence that cannot support any decision: every ``resolve`` raises.

    What an adapter returns when it cannot establish Organization scope,
    completeness or validity (§6.4 "fail closed").
    """

    def __init__(self, organization_id: str, reason: str) -> None:
        self._organization_id = organization_id
        self.reason = reason

    @property
    def organization_id(self) -> str:
        return self._organization_id

    def resolve(self, key_id: str) -> KeyBinding:
        raise KeyResolutionError(self.reason)


# --- the bundle's Registry fixture format ---------------------------------------------------

_FIXTURE_KEYS = frozenset({"organizationId", "bindings"})
_BINDING_KEYS = frozenset({"keyId", "principal", "algorithm", "publicKey", "validFrom", "validityHistory"})
_PRINCIPAL_KEYS = frozenset({"type", "id"})
_STATUS_REQUIRED = frozenset({"sequence", "recordedAt"})
_STATUS_KEYS = _STATUS_REQUIRED | {"validUntil", "revokedAt"}


def _check_structure(doc: Any) -> None:
    """The container shape of the fixture format (the bundle's registry-fixture schema).

    Only shape: the semantic checks (URIs, keys, timestamps, invariants) are the
    Registry's, and the schema's 512-character bound is a test-artifact bound
    that runtime validation does not apply.
    """

    def obj(value: Any, keys: frozenset[str], required: frozenset[str], where: str) -> Mapping[str, Any]:
        if not isinstance(value, dict) or not required <= value.keys() or not value.keys() <= keys:
            raise RegistrationError(f"fixture-structure:{where}")
        return value

    def string(value: Any, where: str) -> None:
        if not isinstance(value, str) or not value:
            raise RegistrationError(f"fixture-structure:{where}")

    top = obj(doc, _FIXTURE_KEYS, _FIXTURE_KEYS, "fixture")
    string(top["organizationId"], "organizationId")
    bindings = top["bindings"]
    if not isinstance(bindings, list) or not bindings:
        raise RegistrationError("fixture-structure:bindings")
    for i, item in enumerate(bindings):
        b = obj(item, _BINDING_KEYS, _BINDING_KEYS, f"bindings/{i}")
        for name in ("keyId", "algorithm", "publicKey", "validFrom"):
            string(b[name], f"bindings/{i}/{name}")
        p = obj(b["principal"], _PRINCIPAL_KEYS, _PRINCIPAL_KEYS, f"bindings/{i}/principal")
        if not isinstance(p["type"], str) or p["type"] not in PRINCIPAL_TYPES:
            raise RegistrationError(f"fixture-structure:bindings/{i}/principal/type")
        string(p["id"], f"bindings/{i}/principal/id")
        history = b["validityHistory"]
        if not isinstance(history, list):
            raise RegistrationError(f"fixture-structure:bindings/{i}/validityHistory")
        for j, rec in enumerate(history):
            where = f"bindings/{i}/validityHistory/{j}"
            s = obj(rec, _STATUS_KEYS, _STATUS_REQUIRED, where)
            seq = s["sequence"]
            if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= 2**53 - 1:
                raise RegistrationError(f"fixture-structure:{where}/sequence")
            for name in ("recordedAt", "validUntil", "revokedAt"):
                if name in s:
                    string(s[name], f"{where}/{name}")


def _load(registry: MemoryRegistry, bindings: Iterable[Mapping[str, Any]]) -> None:
    for i, b in enumerate(bindings):
        p = b["principal"]
        try:
            registry.register(
                b["keyId"], Principal(p["type"], p["id"]), b["publicKey"], b["validFrom"], algorithm=b["algorithm"]
            )
            for rec in b["validityHistory"]:
                registry.record_status(
                    b["keyId"],
                    rec["recordedAt"],
                    valid_until=rec.get("validUntil"),
                    revoked_at=rec.get("revokedAt"),
                    sequence=rec["sequence"],
                )
        except RegistrationError as exc:
            raise RegistrationError(f"bindings/{i}:{exc.reason}") from exc


def registry_from_fixture(doc: Any) -> MemoryRegistry | FailClosedEvidence:
    """Registry evidence from a parsed fixture; fail-closed evidence if any part is invalid."""
    org = doc.get("organizationId") if isinstance(doc, dict) else None
    org_id = org if isinstance(org, str) else ""
    try:
        _check_structure(doc)
        registry = MemoryRegistry(doc["organizationId"])
        _load(registry, doc["bindings"])
    except RegistrationError as exc:
        return FailClosedEvidence(org_id, f"{EVIDENCE_INVALID}:{exc.reason}")
    return registry
