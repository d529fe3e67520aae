"""The Registry's signing keys in the database (PROTOCOL §6.4, DESIGN §4).

Not to be confused with ``missions.registry``, the Command registry.

The §6.4 invariants are enforced once, when a key is registered, and by the
database thereafter:

- ``register_key`` runs the kernel's pure checks (``MemoryRegistry.register``:
  absolute identifiers, the Principal type, ``Ed25519``, the strict point
  check of ``ed25519.check_public_key``, the timestamp profile) before inserting;
- unique constraints hold no reuse and no alias Organization-wide (one key ID,
  one public key, one (Principal, algorithm, key) tuple);
- the key table and its validity history are append-only: triggers refuse
  UPDATE and DELETE on both backends (``install_append_only``), so
  ``validFrom`` and the binding never change and no status record is lost;
- ``record_validity`` only adds or moves a boundary earlier. Because the
  effective boundary is the earliest in the history, a row inserted behind its
  back can still only shorten a key's validity.

So verification reads one key and its history (``DjangoRegistry.resolve``),
two indexed queries whatever the number of keys in the Registry.

Refusals raise the kernel's ``RegistrationError`` with the kernel's reasons.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import DatabaseError, IntegrityError, transaction

from mwportal.protocol.registry import (
    ALGORITHM,
    EVIDENCE_INVALID,
    EVIDENCE_UNAVAILABLE,
    UNKNOWN_KEY,
    KeyBinding,
    KeyResolutionError,
    MemoryRegistry,
    Principal,
    RegistrationError,
)
from mwportal.protocol.values import Timestamp, b64url_decode, b64url_encode, parse_timestamp

from .immutability import append_only_drop_sql, append_only_install_sql
from .models import Organization, SigningKey, SigningKeyValidity


def organization_uri(organization: Organization) -> str:
    """The Organization's protocol identifier (DESIGN §4: ``urn:uuid:`` URIs the portal mints)."""
    return f"urn:uuid:{organization.pk}"


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _scratch(organization: Organization, row: SigningKey) -> MemoryRegistry:
    """The kernel's in-memory Registry holding just this key and its history,
    so that its append-only rules judge the next record."""
    scratch = MemoryRegistry(organization_uri(organization))
    scratch.register(
        row.key_id,
        Principal(type=row.principal_type, id=row.principal_id),
        row.public_key,
        row.valid_from,
        algorithm=row.algorithm,
    )
    for status in SigningKeyValidity.objects.filter(key=row).order_by("sequence"):
        scratch.record_status(
            row.key_id,
            _stamp(status.recorded_at),
            valid_until=status.valid_until,
            revoked_at=status.revoked_at,
            sequence=status.sequence,
        )
    return scratch


def _refusal(organization: Organization, key_id: str, principal: Principal, encoded: str) -> RegistrationError | None:
    """The rule a colliding row breaks, named as the kernel's MemoryRegistry names it."""
    if SigningKey.objects.filter(organization=organization, key_id=key_id).exists():
        return RegistrationError("key-id-rebinding")
    holder = SigningKey.objects.filter(organization=organization, public_key=encoded).first()
    if holder is not None:
        same = (holder.principal_type, holder.principal_id) == (principal.type, principal.id)
        return RegistrationError("key-id-alias" if same else "public-key-reuse")
    return None


def register_key(
    organization: Organization,
    *,
    key_id: str,
    principal: Principal,
    public_key: bytes,
    valid_from: str,
    algorithm: str = ALGORITHM,
    valid_until: str | None = None,
    revoked_at: str | None = None,
    now: datetime | None = None,
) -> SigningKey:
    """Register one key binding, or return the identical one already there.

    The kernel's pure checks run first, through a scratch
    ``MemoryRegistry.register`` (absolute identifiers, Principal type,
    ``Ed25519``, ``ed25519.check_public_key``, the timestamp profile), so the
    database and the in-memory Registry refuse exactly the same bindings.
    Then §6.4's uniqueness: an identical re-declaration (key ID, Principal,
    algorithm, key, ``validFrom`` instant) is the same logical binding;
    anything else under the key ID is ``key-id-rebinding``; the same key under
    another key ID is ``key-id-alias`` (same Principal) or
    ``public-key-reuse``. Initial boundaries become the first status record.
    Raises ``mwportal.protocol.registry.RegistrationError``.
    """
    now = now or datetime.now(UTC)
    binding = MemoryRegistry(organization_uri(organization)).register(
        key_id, principal, public_key, valid_from, algorithm=algorithm
    )
    encoded = b64url_encode(binding.public_key)
    with transaction.atomic():
        existing = SigningKey.objects.filter(organization=organization, key_id=key_id).first()
        if existing is not None:
            same = (existing.principal_type, existing.principal_id, existing.algorithm, existing.public_key) == (
                principal.type,
                principal.id,
                algorithm,
                encoded,
            )
            if not same or parse_timestamp(existing.valid_from) != binding.valid_from:
                raise RegistrationError("key-id-rebinding")
            key = existing
        else:
            refusal = _refusal(organization, key_id, principal, encoded)
            if refusal is not None:
                raise refusal
            try:
                with transaction.atomic():
                    key = SigningKey.objects.create(
                        organization=organization,
                        key_id=key_id,
                        principal_type=principal.type,
                        principal_id=principal.id,
                        algorithm=algorithm,
                        public_key=encoded,
                        valid_from=valid_from,
                        registered_at=now,
                    )
            except IntegrityError as exc:
                # A concurrent registration won between our check and insert:
                # the constraint decided; name the rule it enforced.
                raise _refusal(organization, key_id, principal, encoded) or RegistrationError("refused") from exc
        if valid_until is not None or revoked_at is not None:
            record_validity(key, valid_until=valid_until, revoked_at=revoked_at, now=now)
    return key


def record_validity(
    key: SigningKey, *, valid_until: str | None = None, revoked_at: str | None = None, now: datetime | None = None
) -> SigningKeyValidity:
    """Append a validity-status record: add or move earlier, never clear or later (§6.4).

    The kernel's ``MemoryRegistry.record_status`` judges it against the
    retained history (``valid-until-moved-later``, ``revoked-at-malformed``,
    ...). Extending validity takes new key material under a new key ID.
    Raises RegistrationError.
    """
    if valid_until is None and revoked_at is None:
        raise RegistrationError("status-without-boundary")
    now = now or datetime.now(UTC)
    with transaction.atomic():
        # The key row is immutable; locking it serialises appends to its
        # history so each one judges against, and numbers after, the last.
        # It is the only lock taken here.
        SigningKey.objects.select_for_update().filter(pk=key.pk).first()
        scratch = _scratch(key.organization, key)
        sequence = len(scratch.history(key.key_id)) + 1
        scratch.record_status(
            key.key_id, _stamp(now), valid_until=valid_until, revoked_at=revoked_at, sequence=sequence
        )
        return SigningKeyValidity.objects.create(
            key=key, sequence=sequence, valid_until=valid_until, revoked_at=revoked_at, recorded_at=now
        )


def effective_boundaries(history: list[tuple[str | None, str | None]]) -> tuple[Timestamp | None, Timestamp | None]:
    """The earliest retained ``validUntil`` and ``revokedAt`` (§6.4); TimestampError on a bad one."""
    until = [parse_timestamp(u) for u, _ in history if u is not None]
    revoked = [parse_timestamp(r) for _, r in history if r is not None]
    return (min(until) if until else None, min(revoked) if revoked else None)


class DjangoRegistry:
    """RegistryEvidence over the database for one Organization (§6.4 stage 4).

    The database is the authoritative, current Registry revision; its
    constraints and triggers establish the Organization-wide invariants, so
    the evidence for a verification is the one key row and its retained
    history. A failing database is ``unavailable``; a row that does not
    satisfy the kernel's checks (possible only behind the registration
    function's back) is ``invalid-evidence``: both fail closed.
    """

    def __init__(self, organization: Organization) -> None:
        self.organization = organization
        self.organization_id = organization_uri(organization)

    def resolve(self, key_id: str) -> KeyBinding:
        # Two reads without a common snapshot are still one coherent revision:
        # the key row never changes and history only grows, so the worst a
        # concurrent append can do is make the evidence more current.
        try:
            row = SigningKey.objects.filter(organization=self.organization, key_id=key_id).first()
            history: list[tuple[str | None, str | None]] = (
                []
                if row is None
                else list(SigningKeyValidity.objects.filter(key=row).values_list("valid_until", "revoked_at"))
            )
        except DatabaseError as exc:
            raise KeyResolutionError(EVIDENCE_UNAVAILABLE) from exc
        if row is None:
            raise KeyResolutionError(UNKNOWN_KEY)
        try:
            valid_until, revoked_at = effective_boundaries(history)
            return KeyBinding(
                key_id=row.key_id,
                principal=Principal(type=row.principal_type, id=row.principal_id),
                algorithm=row.algorithm,
                public_key=b64url_decode(row.public_key),
                valid_from=parse_timestamp(row.valid_from),
                valid_until=valid_until,
                revoked_at=revoked_at,
            )
        except ValueError as exc:  # TimestampError or a noncanonical key spelling
            raise KeyResolutionError(EVIDENCE_INVALID) from exc


# -- append-only tables ----------------------------------------------------------

# Spelled out, not read from the models, so that migration 0005 keeps
# installing the same triggers whatever the models become.
APPEND_ONLY_TABLES = ("missions_signingkey", "missions_signingkeyvalidity", "missions_admissionrecord")

_FUNCTION = "mwp_refuse_registry_change"


def install_sql(vendor: str) -> list[str]:
    """Triggers refusing UPDATE and DELETE on the key, validity and admission tables."""
    return append_only_install_sql(vendor, APPEND_ONLY_TABLES, _FUNCTION)


def drop_sql(vendor: str) -> list[str]:
    return append_only_drop_sql(vendor, APPEND_ONLY_TABLES, _FUNCTION)


def install_append_only(schema_editor: Any) -> None:
    for sql in install_sql(schema_editor.connection.vendor):
        schema_editor.execute(sql, None)


def drop_append_only(schema_editor: Any) -> None:
    for sql in drop_sql(schema_editor.connection.vendor):
        schema_editor.execute(sql, None)
