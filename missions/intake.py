"""What happens to a Command before the acceptance transaction decides (DESIGN §3 steps 1-2).

- ``verify_command``: the six verification stages of PROTOCOL §6.4 over the
  received bytes, the key resolved in the signer's Organization's Registry;
- ``check_fresh``: the bounded freshness window of a new Command's ``issuedAt``;
- ``admit``: the First-Admission Record of a verified document, looked up or
  appended inside the acceptance transaction.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.admission import AdmissionFailed, TrustedContext, admit_first
from mwportal.protocol.command import CommandDoc, format_timestamp, read_command
from mwportal.protocol.ids import new_urn, urn
from mwportal.protocol.registry import (
    EVIDENCE_INVALID,
    EVIDENCE_UNAVAILABLE,
    UNKNOWN_KEY,
    KeyBinding,
    KeyResolutionError,
    Principal,
)
from mwportal.protocol.values import b64url_decode, parse_timestamp
from mwportal.protocol.verification import VerificationFailed, Verified, verify_document, wire_error

from . import policylog, service_keys
from .models import Organization, SigningKey, SigningKeyValidity


class Auth(Enum):
    """How the Command's actor was authenticated."""

    SIGNED = "signed"  # a Command document verified in the six stages (accept_document)
    SERVICE = "service"  # built and signed in-process by the Organization's control plane


@dataclass(frozen=True, slots=True)
class Command:
    doc: CommandDoc
    auth: Auth = Auth.SIGNED
    # The six-stage result behind an ``Auth.SIGNED`` Command (admission needs it).
    verified: Verified | None = None


class SignerRegistry:
    """Registry evidence for a Command from any Organization (§6.4 stage 4).

    Key IDs are ``urn:uuid:`` URIs the portal mints, so a key ID names one
    Organization; the binding is resolved in that Organization's Registry
    (``missions.keyregistry.DjangoRegistry``). A key ID bound in two
    Organizations is evidence that cannot be trusted: it fails closed.
    """

    def __init__(self) -> None:
        self.organization_id = ""
        self.organization: str | None = None  # bare UUID once resolved

    def resolve(self, key_id: str) -> KeyBinding:
        """One indexed query: the key row (in every Organization that binds the ID) and its history."""
        from .keyregistry import effective_boundaries, organization_uri

        try:
            with connection.cursor() as cur:
                cur.execute(_RESOLVE_SQL, [key_id])
                rows = cur.fetchall()
        except DatabaseError as exc:
            raise KeyResolutionError(EVIDENCE_UNAVAILABLE) from exc
        if not rows:
            raise KeyResolutionError(UNKNOWN_KEY)
        if len({row[0] for row in rows}) > 1:
            raise KeyResolutionError(EVIDENCE_INVALID)
        organization, principal_type, principal_id, algorithm, public_key, valid_from = rows[0][1:7]
        self.organization = str(uuid.UUID(str(organization)))
        self.organization_id = organization_uri(Organization(pk=self.organization))
        history = [(row[7], row[8]) for row in rows if row[7] is not None or row[8] is not None]
        try:
            valid_until, revoked_at = effective_boundaries(history)
            return KeyBinding(
                key_id=key_id,
                principal=Principal(type=principal_type, id=principal_id),
                algorithm=algorithm,
                public_key=b64url_decode(public_key),
                valid_from=parse_timestamp(valid_from),
                valid_until=valid_until,
                revoked_at=revoked_at,
            )
        except ValueError as exc:  # TimestampError or a noncanonical key spelling
            raise KeyResolutionError(EVIDENCE_INVALID) from exc


_RESOLVE_SQL = (
    f"SELECT k.id, k.organization_id, k.principal_type, k.principal_id, k.algorithm, k.public_key, k.valid_from,"
    f" v.valid_until, v.revoked_at FROM {SigningKey._meta.db_table} k"
    f" LEFT JOIN {SigningKeyValidity._meta.db_table} v ON v.key_id = k.id WHERE k.key_id = %s"
)


def verify_command(data: bytes) -> Command:
    """The six stages over a received Command document; the ``Command`` to accept.

    Raises ``ProtocolError`` with the first failing stage's wire code, or
    SCHEMA_VALIDATION_FAILED for an identifier that is not the portal's
    ``urn:uuid:`` form.
    """
    registry = SignerRegistry()
    try:
        verified = verify_document(data, "command", registry)
    except VerificationFailed as failure:
        # §6.4: the protected diagnostic, referenceable from the Policy Log by auditors only.
        policylog.record_diagnostic(
            registry.organization, data, profile="command", stage=failure.stage.value, reason=failure.reason,
            now=timezone.now(),
        )  # fmt: skip
        raise wire_error(failure) from None
    if b"\\u0000" in data:
        refuse_nul(verified.document)
    doc = read_command(verified.document, signing_hash=verified.signing_hash, key_id=verified.key_id)
    return Command(doc, Auth.SIGNED, verified)


def check_fresh(doc: CommandDoc, now: datetime) -> None:
    """A new signed Command's ``issuedAt`` is within the configured window either
    way (DESIGN §3: ``MWP_COMMAND_FRESHNESS_SECONDS``, default 300). A retry of
    an accepted Command is answered from its receipt before this check: its
    signed content, ``issuedAt`` included, must not change (§15.1)."""
    age = (now - doc.issued_at).total_seconds()
    if age > _MAX_AGE_SECONDS:
        raise ProtocolError(
            ErrorCode.AUTH_INVALID_SIGNATURE,
            f"issuedAt is {int(age)} s old; a new Command must be at most {_MAX_AGE_SECONDS} s old"
            " (sign it again with a new actionId)",
            details={"field": "issuedAt", "reason": "stale"},
        )
    if -age > _MAX_SKEW_SECONDS:
        raise ProtocolError(
            ErrorCode.AUTH_INVALID_SIGNATURE,
            f"issuedAt is {int(-age)} s ahead of the server's clock (at most {_MAX_SKEW_SECONDS} s)",
            details={"field": "issuedAt", "reason": "ahead"},
        )


_MAX_AGE_SECONDS: int = settings.MWP_COMMAND_FRESHNESS_SECONDS
_MAX_SKEW_SECONDS: int = settings.MWP_COMMAND_MAX_SKEW_SECONDS


def admit(command: Command, organization_id: str, now: datetime) -> None:
    """The First-Admission Record of the verified document (§6.4), looked up or appended
    by ``(organizationId, signingHash)`` inside the acceptance transaction."""
    from .admission_log import DjangoAdmissionLog

    verified = command.verified
    if verified is None:
        raise RuntimeError("an Auth.SIGNED Command carries its verification")
    authority = Principal("service", urn(service_keys.principal_id(organization_id, service_keys.GROUP_AUTHORITY)))
    log_ = DjangoAdmissionLog(Organization(pk=organization_id), authority)

    def context() -> TrustedContext:
        return TrustedContext(new_urn(), format_timestamp(now), authority)

    try:
        admit_first(verified, log_, context)
    except AdmissionFailed as failure:
        raise ProtocolError(failure.wire_code, "the document could not be admitted") from None


def _nul_pointer(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            name = key.replace("~", "~0").replace("/", "~1")
            if "\x00" in key:
                return f"{path}/{name}"
            found = _nul_pointer(item, f"{path}/{name}")
            if found is not None:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _nul_pointer(item, f"{path}/{i}")
            if found is not None:
                return found
    return None


def refuse_nul(document: Any) -> None:
    """SCHEMA_VALIDATION_FAILED naming the member when a string holds a NUL character.

    A NUL is valid JSON and JCS data, but PostgreSQL's text and jsonb refuse it
    (issue 16 item 6): every binding refuses it here rather than let the
    database answer 500.
    """
    pointer = _nul_pointer(document, "")
    if pointer is not None:
        raise ProtocolError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"{pointer or '/'}: a string holds a NUL character",
            details={"field": pointer or "/", "reason": "nul-character"},
        )
