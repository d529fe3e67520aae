"""The Signed Document Verification Profile (§6.4): six stages, the first failure decides.

Exception tree::

    VerificationFailed(Exception)   ``.stage`` (the first failing Stage),
                                    ``.reason`` (protected diagnostic),
                                    ``.wire_code`` (the only thing a peer sees)

``verify_document(data, profile, registry)`` runs, in order and stopping at the
first failure:

1. ``parse``: strict JSON (strictjson.parse) -> ``PROTOCOL_VIOLATION``;
2. ``schema``: the profile's normative schema, the signature envelope and its
   algorithm included -> ``SCHEMA_VALIDATION_FAILED``;
3. ``signature-envelope``: the protected time in UTC uppercase-``Z`` form and
   byte-identical to ``signature.createdAt``, the expected signer selected,
   ``signature.value`` canonical base64url, the strict ``Renc || Senc`` rule;
4. ``key-resolution``: the Registry evidence resolves ``signature.keyId`` to a
   binding of the expected signer, valid at the protected time;
5. ``canonicalization``: the JCS signing bytes (no top-level ``signature``),
   refusing values outside the I-JSON data model -> ``PROTOCOL_VIOLATION``;
6. ``signature``: the Ed25519 equation over those bytes.

Stages 3, 4 and 6 answer ``AUTH_INVALID_SIGNATURE``. The exception's text is
the generic message of its wire code, never the reason: the stage and reason
go to protected diagnostics (the ``mwp.diagnostics`` logger and any sink added
with ``add_diagnostic_sink``), which §6.4 requires to be retained but never
shown to the untrusted caller.

Success proves only that the bound Principal signed these bytes; first
admission (admission.py), Command freshness and authorization come after.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from . import ed25519, jcs, schemas, strictjson
from .errors import ErrorCode, ProtocolError
from .registry import (
    ALGORITHM,
    EVIDENCE_UNAVAILABLE,
    KeyBinding,
    KeyResolutionError,
    Principal,
    RegistryEvidence,
    key_valid_at,
)
from .values import Timestamp, TimestampError, b64url_decode, b64url_encode, parse_timestamp

__all__ = [
    "PROFILES",
    "WIRE_CODES",
    "WIRE_MESSAGES",
    "Diagnostic",
    "Profile",
    "SignerRule",
    "Stage",
    "VerificationFailed",
    "Verified",
    "add_diagnostic_sink",
    "record_diagnostic",
    "sign_document",
    "verify_document",
]


class Stage(StrEnum):
    """The semantic stages, spelled as the cryptography manifest spells them."""

    PARSE = "parse"
    SCHEMA = "schema"
    SIGNATURE_ENVELOPE = "signature-envelope"
    KEY_RESOLUTION = "key-resolution"
    CANONICALIZATION = "canonicalization"
    SIGNATURE = "signature"


class SignerRule(StrEnum):
    # The exact Principal object at a top-level member (most profiles).
    PRINCIPAL_OBJECT = "principal-object"
    # The Agent named by an ID member (Artifact: producer.agentId).
    AGENT_ID = "agent-id"
    # Any Organization service Principal (Agent Card); its authority to issue
    # cards for organizationId is checked after cryptographic verification.
    SERVICE_PRINCIPAL = "service-principal"


@dataclass(frozen=True, slots=True)
class Profile:
    id: str
    schema: str
    protected_time: str
    signer: SignerRule
    signer_path: tuple[str, ...] = ()


# §6.4's table of Signed Documents: protected signed time and expected signer.
PROFILES: dict[str, Profile] = {
    p.id: p
    for p in (
        Profile("agent-card", "agent-card", "issuedAt", SignerRule.SERVICE_PRINCIPAL),
        Profile("approval", "approval", "occurredAt", SignerRule.PRINCIPAL_OBJECT, ("approver",)),
        Profile("artifact", "artifact", "createdAt", SignerRule.AGENT_ID, ("producer", "agentId")),
        Profile("command", "command", "issuedAt", SignerRule.PRINCIPAL_OBJECT, ("actor",)),
        Profile("context-package", "context-package", "generatedAt", SignerRule.PRINCIPAL_OBJECT, ("generatedBy",)),
        Profile("event", "event", "occurredAt", SignerRule.PRINCIPAL_OBJECT, ("acceptedBy",)),
        Profile("evidence", "evidence", "createdAt", SignerRule.PRINCIPAL_OBJECT, ("generatedBy",)),
        Profile("extension-profile", "extension-profile", "approvedAt", SignerRule.PRINCIPAL_OBJECT, ("approvedBy",)),
        Profile("group-snapshot", "group-snapshot", "createdAt", SignerRule.PRINCIPAL_OBJECT, ("createdBy",)),
    )
}

# §6.4's wire codes: stages 1 and 5 (not JSON, a duplicate, outside the JCS
# data model) are PROTOCOL_VIOLATION; stage 2 (schema, envelope, algorithm)
# is SCHEMA_VALIDATION_FAILED; stages 3, 4 and 6 are AUTH_INVALID_SIGNATURE.
WIRE_CODES: dict[Stage, ErrorCode] = {
    Stage.PARSE: ErrorCode.PROTOCOL_VIOLATION,
    Stage.SCHEMA: ErrorCode.SCHEMA_VALIDATION_FAILED,
    Stage.SIGNATURE_ENVELOPE: ErrorCode.AUTH_INVALID_SIGNATURE,
    Stage.KEY_RESOLUTION: ErrorCode.AUTH_INVALID_SIGNATURE,
    Stage.CANONICALIZATION: ErrorCode.PROTOCOL_VIOLATION,
    Stage.SIGNATURE: ErrorCode.AUTH_INVALID_SIGNATURE,
}

# One message per wire code, so the text cannot tell two checks of a code apart.
WIRE_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.PROTOCOL_VIOLATION: "the document is not acceptable protocol JSON",
    ErrorCode.SCHEMA_VALIDATION_FAILED: "the document does not conform to its schema",
    ErrorCode.AUTH_INVALID_SIGNATURE: "the document's signature could not be verified",
}


class VerificationFailed(Exception):
    def __init__(self, stage: Stage, reason: str) -> None:
        self.stage = stage
        self.reason = reason
        self.wire_code = WIRE_CODES[stage]
        super().__init__(WIRE_MESSAGES[self.wire_code])

    @property
    def wire_message(self) -> str:
        return WIRE_MESSAGES[self.wire_code]


@dataclass(frozen=True, slots=True)
class Verified:
    document: dict[str, Any]
    profile: str
    organization_id: str
    signing_bytes: bytes
    signing_hash: str
    key_id: str
    principal: Principal
    protected_time: Timestamp
    binding: KeyBinding


# --- protected diagnostics (§6.4: retained, access-controlled, never on the wire) ---


@dataclass(frozen=True, slots=True)
class Diagnostic:
    profile: str
    stage: str  # a Stage value, or "admission" for the layer after the six stages
    reason: str
    organization_id: str
    key_id: str | None = None
    signing_hash: str | None = None


DIAGNOSTICS = logging.getLogger("mwp.diagnostics")
_sinks: list[Callable[[Diagnostic], None]] = []


def add_diagnostic_sink(sink: Callable[[Diagnostic], None]) -> Callable[[], None]:
    """Also hand every diagnostic to ``sink`` (an audit table, a test); returns the remover."""
    _sinks.append(sink)
    return lambda: _sinks.remove(sink)


def record_diagnostic(diagnostic: Diagnostic) -> None:
    DIAGNOSTICS.info(
        "%s verification failed at %s: %s",
        diagnostic.profile,
        diagnostic.stage,
        diagnostic.reason,
        extra={"mwp_diagnostic": diagnostic},
    )
    for sink in tuple(_sinks):
        sink(diagnostic)


# --- the six stages ---


class _Failure(Exception):
    def __init__(self, stage: Stage, reason: str) -> None:
        self.stage = stage
        self.reason = reason


def _expected_signer(profile: Profile, doc: dict[str, Any]) -> Principal | None:
    if profile.signer is SignerRule.SERVICE_PRINCIPAL:
        return None
    value: Any = doc
    for name in profile.signer_path:
        value = value[name]
    if profile.signer is SignerRule.AGENT_ID:
        if not isinstance(value, str):
            raise TypeError("the signer's agent ID is not a string")
        return Principal("agent", value)
    kind, ident = value["type"], value["id"]
    if not isinstance(kind, str) or not isinstance(ident, str):
        raise TypeError("the signer is not a Principal")
    return Principal(kind, ident)


def _stages(data: bytes, profile: Profile, registry: RegistryEvidence, context: dict[str, str]) -> Verified:
    # 1. parse
    try:
        doc = strictjson.parse(data)
    except strictjson.StrictJSONError as exc:
        raise _Failure(Stage.PARSE, f"json-{exc.reason}") from exc

    # 2. schema (the signature envelope and "algorithm": "Ed25519" are the schema's)
    try:
        schemas.validate(profile.schema, doc)
    except schemas.SchemaError as exc:
        raise _Failure(Stage.SCHEMA, "schema: " + "; ".join(exc.errors[:3])) from exc
    # The schema guarantees these shapes; a document that passes it without
    # them is still refused at stage 2 rather than crashing later.
    try:
        signature = doc["signature"]
        key_id, created_at, value = signature["keyId"], signature["createdAt"], signature["value"]
        protected_text = doc[profile.protected_time]
        signer = _expected_signer(profile, doc)
        protected = parse_timestamp(protected_text)
    except (KeyError, TypeError, TimestampError) as exc:
        raise _Failure(Stage.SCHEMA, f"signed-document-shape: {exc!r}") from exc
    if not all(isinstance(v, str) for v in (key_id, created_at, value)):
        raise _Failure(Stage.SCHEMA, "signed-document-shape: signature members")
    context["key_id"] = key_id

    # 3. signature envelope
    if not protected.is_utc_z:
        raise _Failure(Stage.SIGNATURE_ENVELOPE, "protected-time-not-utc-z")
    if created_at != protected_text:
        # Exact equality, no parsing and no normalization of either side.
        raise _Failure(Stage.SIGNATURE_ENVELOPE, "created-at-not-protected-time")
    try:
        raw_signature = b64url_decode(value)
    except ValueError as exc:
        raise _Failure(Stage.SIGNATURE_ENVELOPE, "signature-value-not-canonical-base64url") from exc
    try:
        ed25519.check_signature_encoding(raw_signature)
    except ed25519.Ed25519EncodingError as exc:
        raise _Failure(Stage.SIGNATURE_ENVELOPE, exc.reason) from exc

    # The costly half of the stage-3 R rule (on the curve, [L]R = I) is
    # evaluated only when a later stage fails: a passing stage-6 equation
    # recomputes R as [S]B - [k]A from the prime-order A and B and matches its
    # canonical encoding, which proves R on the curve and in the prime-order
    # subgroup. §6.4 lets a verifier detect a condition at another time as long
    # as it is classified at its normative stage; every failure below is first
    # re-examined for a stage-3 R fault, so the first failing stage is the one
    # reported, exactly as if the check had run here.
    try:
        # 4. key resolution
        try:
            binding = registry.resolve(key_id)
        except KeyResolutionError as exc:
            raise _Failure(Stage.KEY_RESOLUTION, exc.reason) from exc
        except Exception as exc:  # an adapter that raises is unavailable evidence: fail closed (§6.4)
            raise _Failure(Stage.KEY_RESOLUTION, EVIDENCE_UNAVAILABLE) from exc
        if binding.key_id != key_id or binding.algorithm != ALGORITHM:
            raise _Failure(Stage.KEY_RESOLUTION, "resolved-binding-mismatch")
        # Stage 4 checks the resolved key's point strictly itself (§6.4);
        # the verifier does not take that on trust from the adapter.
        key_fault = (
            ed25519.public_key_fault(binding.public_key) if isinstance(binding.public_key, bytes) else "public-key-type"
        )
        if key_fault is not None:
            raise _Failure(Stage.KEY_RESOLUTION, key_fault)
        if signer is None:
            if binding.principal.type != "service":
                raise _Failure(Stage.KEY_RESOLUTION, "signer-not-service-principal")
        elif binding.principal != signer:
            raise _Failure(Stage.KEY_RESOLUTION, "signer-not-bound-principal")
        if not key_valid_at(binding, protected):
            raise _Failure(Stage.KEY_RESOLUTION, "key-not-valid-at-protected-time")

        # 5. canonicalization
        try:
            signing = jcs.signing_bytes(doc)
        except jcs.DataModelError as exc:
            raise _Failure(Stage.CANONICALIZATION, f"data-model-{exc.reason}") from exc
        signing_hash = jcs.sha256_hash(signing)
        context["signing_hash"] = signing_hash

        # 6. signature
        if not ed25519.verify(binding.public_key, signing, raw_signature):
            raise _Failure(Stage.SIGNATURE, "equation-mismatch")
    except _Failure:
        try:
            ed25519.check_signature_point(raw_signature)
        except ed25519.Ed25519EncodingError as exc:
            raise _Failure(Stage.SIGNATURE_ENVELOPE, exc.reason) from exc
        raise

    return Verified(
        document=doc,
        profile=profile.id,
        organization_id=registry.organization_id,
        signing_bytes=signing,
        signing_hash=signing_hash,
        key_id=key_id,
        principal=binding.principal,
        protected_time=protected,
        binding=binding,
    )


def verify_document(data: bytes, profile: str, registry: RegistryEvidence) -> Verified:
    """Run the six stages over the received bytes; VerificationFailed at the first failure.

    ``profile`` is a key of PROFILES (the caller knows what it expects to
    receive; an unknown one is a programming error, ``KeyError``).
    """
    chosen = PROFILES[profile]
    context: dict[str, str] = {}
    try:
        return _stages(data, chosen, registry, context)
    except _Failure as failure:
        record_diagnostic(
            Diagnostic(
                profile=profile,
                stage=failure.stage.value,
                reason=failure.reason,
                organization_id=registry.organization_id,
                key_id=context.get("key_id"),
                signing_hash=context.get("signing_hash"),
            )
        )
        raise VerificationFailed(failure.stage, failure.reason) from None


def _protected_field(document: dict[str, Any], profile: str | None) -> str:
    if profile is not None:
        return PROFILES[profile].protected_time
    present = {p.protected_time for p in PROFILES.values() if p.protected_time in document}
    if len(present) != 1:
        raise ValueError("cannot tell the protected-time field of this document; pass profile=")
    return present.pop()


def sign_document(document: dict[str, Any], *, key_id: str, seed: bytes, profile: str | None = None) -> dict[str, Any]:
    """A copy of ``document`` with a fresh top-level ``signature`` (§6.4).

    ``createdAt`` is the document's protected time, byte for byte (it must
    already be a UTC ``Z`` timestamp); the signature covers the JCS bytes of
    the document without its top-level ``signature``. Without ``profile`` the
    protected-time field is the one of PROFILES' fields the document has.
    """
    created_at = document[_protected_field(document, profile)]
    if not isinstance(created_at, str) or not parse_timestamp(created_at).is_utc_z:
        raise ValueError("the protected time must be an RFC 3339 UTC timestamp ending in Z")
    body = {k: v for k, v in document.items() if k != "signature"}
    value = ed25519.sign(seed, jcs.canonicalize(body))
    body["signature"] = {
        "algorithm": ALGORITHM,
        "keyId": key_id,
        "createdAt": created_at,
        "value": b64url_encode(value),
    }
    return body


def wire_error(failure: VerificationFailed) -> ProtocolError:
    """The wire refusal of a failed verification: the stage's code and its one generic message.
    The stage and the reason stay in the protected diagnostics (§6.4)."""
    code = WIRE_CODES[failure.stage]
    return ProtocolError(code, WIRE_MESSAGES[code])
