"""The Signed Document Verification Profile (§6.4), tested on the verifier directly.

The bundle's documents and Registry fixtures are read from the bundle (never
copied). The expected stage of every reject is written below from the
cryptography manifest's fault list and cross-checked against the manifest; the
full 62-evaluation runner lives in mwportal/protocol/conformance/.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nacl import bindings as sodium

from mwportal.protocol import ed25519, jcs
from mwportal.protocol.errors import ErrorCode
from mwportal.protocol.registry import MemoryRegistry, Principal, registry_from_fixture
from mwportal.protocol.values import b64url_decode, b64url_encode
from mwportal.protocol.verification import (
    PROFILES,
    WIRE_MESSAGES,
    Diagnostic,
    SignerRule,
    Stage,
    VerificationFailed,
    add_diagnostic_sink,
    sign_document,
    verify_document,
)

from .bundle import bundle_root

SD = "cryptography/vectors/signed-documents"
KEYS = "cryptography/keys"
COORDINATOR_SEED = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"  # RFC 8032 TEST 1, the bundle's coordinator
GOLDEN_KEY = "urn:missionweaveprotocol:key:crypto-vector-rfc8032-1"

# §6.4's table, row by row: profile -> (schema, protected time, signer rule, signer path).
SPEC_TABLE = {
    "agent-card": ("agent-card", "issuedAt", SignerRule.SERVICE_PRINCIPAL, ()),
    "approval": ("approval", "occurredAt", SignerRule.PRINCIPAL_OBJECT, ("approver",)),
    "artifact": ("artifact", "createdAt", SignerRule.AGENT_ID, ("producer", "agentId")),
    "command": ("command", "issuedAt", SignerRule.PRINCIPAL_OBJECT, ("actor",)),
    "context-package": ("context-package", "generatedAt", SignerRule.PRINCIPAL_OBJECT, ("generatedBy",)),
    "event": ("event", "occurredAt", SignerRule.PRINCIPAL_OBJECT, ("acceptedBy",)),
    "evidence": ("evidence", "createdAt", SignerRule.PRINCIPAL_OBJECT, ("generatedBy",)),
    "extension-profile": ("extension-profile", "approvedAt", SignerRule.PRINCIPAL_OBJECT, ("approvedBy",)),
    "group-snapshot": ("group-snapshot", "createdAt", SignerRule.PRINCIPAL_OBJECT, ("createdBy",)),
}

# (profile, document, registry fixture) -> the first failing stage.
REJECTS: list[tuple[str, str, str, Stage]] = [
    ("command", "invalid/command-invalid-utf8.bin", "registry-valid.json", Stage.PARSE),
    ("command", "invalid/command-trailing-data.json", "registry-valid.json", Stage.PARSE),
    ("command", "invalid/command-utf8-bom.json", "registry-valid.json", Stage.PARSE),
    ("command", "invalid/command-duplicate-decoded-member.json", "registry-valid.json", Stage.PARSE),
    ("command", "invalid/command-padded-signature.json", "registry-valid.json", Stage.SCHEMA),
    ("command", "invalid/command-leap-second.json", "registry-valid.json", Stage.SCHEMA),
    ("command", "invalid/command-unknown-local-offset.json", "registry-valid.json", Stage.SCHEMA),
    ("command", "invalid/command-year-zero.json", "registry-valid.json", Stage.SCHEMA),
    ("command", "invalid/command-unsupported-algorithm.json", "registry-valid.json", Stage.SCHEMA),
    ("command", "invalid/command-created-at-mismatch.json", "registry-valid.json", Stage.SIGNATURE_ENVELOPE),
    ("command", "invalid/command-protected-time-not-utc-z.json", "registry-valid.json", Stage.SIGNATURE_ENVELOPE),
    ("command", "invalid/command-nonzero-unused-pad-bits.json", "registry-valid.json", Stage.SIGNATURE_ENVELOPE),
    ("command", "invalid/command-signature-r-mixed-order.json", "registry-valid.json", Stage.SIGNATURE_ENVELOPE),
    ("command", "invalid/command-signature-r-negative-zero.json", "registry-valid.json", Stage.SIGNATURE_ENVELOPE),
    ("command", "invalid/command-signature-r-noncanonical.json", "registry-valid.json", Stage.SIGNATURE_ENVELOPE),
    ("command", "invalid/command-signature-r-off-curve.json", "registry-valid.json", Stage.SIGNATURE_ENVELOPE),
    ("command", "invalid/command-signature-r-small-order.json", "registry-valid.json", Stage.SIGNATURE_ENVELOPE),
    ("command", "invalid/command-signature-r-y-equals-p.json", "registry-valid.json", Stage.SIGNATURE_ENVELOPE),
    ("command", "invalid/command-signature-s-out-of-range.json", "registry-valid.json", Stage.SIGNATURE_ENVELOPE),
    ("command", "invalid/command-signature-wrong-length.json", "registry-valid.json", Stage.SIGNATURE_ENVELOPE),
    ("command", "invalid/command-key-alias.json", "registry-key-alias.json", Stage.KEY_RESOLUTION),
    ("agent-card", "invalid/agent-card-wrong-signer.json", "registry-valid.json", Stage.KEY_RESOLUTION),
    ("artifact", "invalid/artifact-wrong-signer.json", "registry-valid.json", Stage.KEY_RESOLUTION),
    ("command", "invalid/command-unknown-key.json", "registry-valid.json", Stage.KEY_RESOLUTION),
    ("command", "valid/command.json", "registry-public-key-cross-principal-reuse.json", Stage.KEY_RESOLUTION),
    ("command", "valid/command.json", "registry-key-not-yet-valid.json", Stage.KEY_RESOLUTION),
    ("command", "invalid/command-weak-key-forgery.json", "registry-public-key-identity.json", Stage.KEY_RESOLUTION),
    ("command", "invalid/command-weak-key-forgery.json", "registry-public-key-mixed-order.json", Stage.KEY_RESOLUTION),
    ("command", "valid/command.json", "registry-public-key-negative-zero.json", Stage.KEY_RESOLUTION),
    ("command", "invalid/command-weak-key-forgery.json", "registry-public-key-noncanonical.json", Stage.KEY_RESOLUTION),
    ("command", "valid/command.json", "registry-public-key-nonzero-unused-pad-bits.json", Stage.KEY_RESOLUTION),
    ("command", "valid/command.json", "registry-public-key-off-curve.json", Stage.KEY_RESOLUTION),
    ("command", "valid/command.json", "registry-public-key-padded.json", Stage.KEY_RESOLUTION),
    ("command", "invalid/command-weak-key-forgery.json", "registry-public-key-small-order.json", Stage.KEY_RESOLUTION),
    ("command", "valid/command.json", "registry-public-key-y-equals-p.json", Stage.KEY_RESOLUTION),
    ("command", "valid/command.json", "registry-organization-id-relative-reference.json", Stage.KEY_RESOLUTION),
    (
        "agent-card",
        "valid/agent-card.json",
        "registry-selected-service-principal-id-iri-only.json",
        Stage.KEY_RESOLUTION,
    ),
    ("command", "valid/command.json", "registry-unrelated-key-id-trailing-line-feed.json", Stage.KEY_RESOLUTION),
    ("command", "valid/command.json", "registry-unrelated-principal-id-malformed-percent.json", Stage.KEY_RESOLUTION),
    ("command", "valid/command.json", "registry-revoked-at-equality.json", Stage.KEY_RESOLUTION),
    ("command", "valid/command.json", "registry-valid-until-equality.json", Stage.KEY_RESOLUTION),
    ("command", "valid/command.json", "registry-public-key-rebinding.json", Stage.KEY_RESOLUTION),
    ("command", "valid/command.json", "registry-public-key-wrong-length.json", Stage.KEY_RESOLUTION),
    ("command", "valid/command.json", "registry-wrong-principal.json", Stage.KEY_RESOLUTION),
    ("command", "invalid/command-number-1e400.json", "registry-valid.json", Stage.CANONICALIZATION),
    ("command", "invalid/command-unpaired-surrogate.json", "registry-valid.json", Stage.CANONICALIZATION),
    ("command", "invalid/command-weak-key-forgery.json", "registry-valid.json", Stage.SIGNATURE),
    ("command", "invalid/command-payload-tamper.json", "registry-valid.json", Stage.SIGNATURE),
    ("command", "invalid/command-extension-signature-tamper.json", "registry-valid.json", Stage.SIGNATURE),
    ("command", "invalid/command-payload-signature-tamper.json", "registry-valid.json", Stage.SIGNATURE),
]

WIRE = {
    Stage.PARSE: ErrorCode.PROTOCOL_VIOLATION,
    Stage.SCHEMA: ErrorCode.SCHEMA_VALIDATION_FAILED,
    Stage.SIGNATURE_ENVELOPE: ErrorCode.AUTH_INVALID_SIGNATURE,
    Stage.KEY_RESOLUTION: ErrorCode.AUTH_INVALID_SIGNATURE,
    Stage.CANONICALIZATION: ErrorCode.PROTOCOL_VIOLATION,
    Stage.SIGNATURE: ErrorCode.AUTH_INVALID_SIGNATURE,
}


def read(rel: str) -> bytes:
    return (bundle_root() / rel).read_bytes()


def fixture(name: str) -> Any:
    return registry_from_fixture(json.loads(read(f"{KEYS}/{name}")))


def manifest_evaluations() -> list[dict[str, Any]]:
    manifest = json.loads(read("cryptography/manifest.json"))
    return [e for c in manifest["cases"] for e in c["evaluations"] if "profileId" in e]


def stage_of(profile: str, data: bytes, registry: Any) -> VerificationFailed:
    with pytest.raises(VerificationFailed) as exc:
        verify_document(data, profile, registry)
    return exc.value


# --- the profile table ---


def test_profiles_are_the_section_6_4_table() -> None:
    assert {pid: (p.schema, p.protected_time, p.signer, p.signer_path) for pid, p in PROFILES.items()} == SPEC_TABLE


def test_profile_table_agrees_with_the_manifest() -> None:
    manifest = json.loads(read("cryptography/manifest.json"))
    for row in manifest["profiles"]:
        schema, time_field, rule, path = SPEC_TABLE[row["profileId"]]
        assert row["schema"] == f"schemas/{schema}.schema.json"
        assert row["protectedTimePointer"] == f"/{time_field}"
        assert row["expectedSigner"]["rule"] == rule.value
        pointer = row["expectedSigner"].get("pointer") or row["expectedSigner"].get("idPointer")
        assert (pointer or "") == "".join(f"/{p}" for p in path)


# --- accepts ---


def accept_evaluations() -> list[dict[str, Any]]:
    return [e for e in manifest_evaluations() if e["expect"]["stage"] == "complete"]


def test_the_manifest_has_eleven_signed_accepts() -> None:
    assert len(accept_evaluations()) == 11
    assert {e["profileId"] for e in accept_evaluations()} == set(PROFILES)


@pytest.mark.parametrize("index", range(11))
def test_valid_bundle_documents_verify_PROTOCOL_6_4(index: int) -> None:
    evaluation = accept_evaluations()[index]
    expected = evaluation["expect"]["verified"]
    result = verify_document(read(evaluation["document"]), evaluation["profileId"], fixture_path(evaluation))
    assert result.profile == evaluation["profileId"]
    assert result.organization_id == "urn:missionweaveprotocol:organization:acme"
    assert result.signing_bytes == read(expected["signingBytes"])
    assert result.signing_hash == expected["signingHash"]
    assert result.signing_hash == jcs.sha256_hash(result.signing_bytes)
    assert result.key_id == expected["keyId"] == result.binding.key_id
    assert result.principal == Principal(expected["principal"]["type"], expected["principal"]["id"])
    assert result.protected_time.text == expected["protectedTime"]
    assert result.document["signature"]["value"] == expected["signature"]


def fixture_path(evaluation: dict[str, Any]) -> Any:
    return registry_from_fixture(json.loads(read(evaluation["registry"])))


# --- rejects ---


def test_reject_table_is_the_manifest_reject_list() -> None:
    ours = {(p, f"{SD}/{d}", f"{KEYS}/{r}", s.value) for p, d, r, s in REJECTS}
    theirs = {
        (e["profileId"], e["document"], e["registry"], e["expect"]["stage"])
        for e in manifest_evaluations()
        if e["expect"]["stage"] != "complete"
    }
    assert ours == theirs
    for e in manifest_evaluations():
        if e["expect"]["stage"] != "complete":
            assert e["expect"]["wireCode"] == WIRE[Stage(e["expect"]["stage"])].value


@pytest.mark.parametrize(("profile", "doc", "reg", "stage"), REJECTS, ids=[f"{d}@{r}" for _, d, r, _ in REJECTS])
def test_reject_stops_at_its_first_failing_stage_PROTOCOL_6_4(profile: str, doc: str, reg: str, stage: Stage) -> None:
    failure = stage_of(profile, read(f"{SD}/{doc}"), fixture(reg))
    assert failure.stage is stage
    assert failure.wire_code is WIRE[stage]
    assert failure.reason


@pytest.mark.parametrize(("profile", "doc", "reg", "stage"), REJECTS, ids=[f"{d}@{r}" for _, d, r, _ in REJECTS])
def test_wire_message_never_reveals_the_reason_PROTOCOL_6_4(profile: str, doc: str, reg: str, stage: Stage) -> None:
    failure = stage_of(profile, read(f"{SD}/{doc}"), fixture(reg))
    for shown in (str(failure), repr(failure), failure.wire_message, *map(str, failure.args)):
        assert failure.reason not in shown
    assert str(failure) == WIRE_MESSAGES[failure.wire_code]


def test_every_auth_failure_has_the_same_wire_text() -> None:
    texts = set()
    for profile, doc, reg, stage in REJECTS:
        if WIRE[stage] is ErrorCode.AUTH_INVALID_SIGNATURE:
            texts.add(str(stage_of(profile, read(f"{SD}/{doc}"), fixture(reg))))
    assert len(texts) == 1


def test_failures_are_recorded_in_protected_diagnostics(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[Diagnostic] = []
    remove = add_diagnostic_sink(seen.append)
    try:
        with caplog.at_level(logging.INFO, logger="mwp.diagnostics"):
            failure = stage_of(
                "command", read(f"{SD}/invalid/command-unknown-key.json"), fixture("registry-valid.json")
            )
    finally:
        remove()
    assert len(seen) == 1
    d = seen[0]
    assert (d.profile, d.stage, d.reason) == ("command", "key-resolution", failure.reason)
    assert d.organization_id == "urn:missionweaveprotocol:organization:acme"
    assert d.key_id is not None and d.key_id.startswith("urn:")
    assert any(r.name == "mwp.diagnostics" and failure.reason in r.getMessage() for r in caplog.records)


def test_a_success_records_no_diagnostic() -> None:
    seen: list[Diagnostic] = []
    remove = add_diagnostic_sink(seen.append)
    try:
        verify_document(read(f"{SD}/valid/command.json"), "command", fixture("registry-valid.json"))
    finally:
        remove()
    assert seen == []


# --- the deferred R point check still reports stage 3 first ---


def golden() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(read(f"{SD}/valid/command.json"))
    return doc


def with_signature_r(doc: dict[str, Any], r: bytes) -> dict[str, Any]:
    raw = b64url_decode(doc["signature"]["value"])
    doc["signature"]["value"] = b64url_encode(r + raw[32:])
    return doc


def mixed_order_r() -> bytes:
    bad = json.loads(read(f"{SD}/invalid/command-signature-r-mixed-order.json"))
    return b64url_decode(bad["signature"]["value"])[:32]


ORDER_8 = bytes.fromhex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")


@pytest.mark.parametrize("r", ["mixed", "small", "off-curve"])
@pytest.mark.parametrize("later", ["unknown-key", "wrong-signer", "data-model", "equation"])
def test_an_r_fault_outranks_every_later_fault_PROTOCOL_6_4(r: str, later: str) -> None:
    r_bytes = {"mixed": mixed_order_r(), "small": ORDER_8, "off-curve": (2).to_bytes(32, "little")}[r]
    doc = with_signature_r(golden(), r_bytes)
    if later == "unknown-key":
        doc["signature"]["keyId"] = "urn:missionweaveprotocol:key:nobody"
    elif later == "wrong-signer":
        doc["actor"]["id"] = "urn:missionweaveprotocol:agent:developer-one"
    elif later == "equation":
        doc["payload"]["signature"] = "changed"
    data = json.dumps(doc).encode()
    if later == "data-model":
        data = data.replace(b'"large": 1e+30', b'"large": 1e400')
        assert b"1e400" in data
    failure = stage_of("command", data, fixture("registry-valid.json"))
    assert failure.stage is Stage.SIGNATURE_ENVELOPE
    assert failure.reason.startswith("signature-r-")


def test_identity_r_signature_verifies_through_all_six_stages_PROTOCOL_6_4() -> None:
    # A Registry key A = [a]B with a known scalar, and S = k a mod L for R = I:
    # the equation [S]B = I + [k]A holds, and §6.4 permits the identity R.
    a = 0x1234567890ABCDEF1234567890ABCDEF
    pk = sodium.crypto_scalarmult_ed25519_base_noclamp(a.to_bytes(32, "little"))
    reg = MemoryRegistry("urn:missionweaveprotocol:organization:acme")
    reg.register(GOLDEN_KEY, Principal("agent", golden()["actor"]["id"]), pk, "2026-07-01T00:00:00Z")
    doc = golden()
    message = jcs.signing_bytes(doc)
    k = int.from_bytes(hashlib.sha512(ed25519.IDENTITY_ENCODING + pk + message).digest(), "little") % ed25519.L
    doc["signature"]["value"] = b64url_encode(ed25519.IDENTITY_ENCODING + (k * a % ed25519.L).to_bytes(32, "little"))
    result = verify_document(json.dumps(doc).encode(), "command", reg)
    assert result.signing_bytes == message
    doc["payload"]["signature"] = "tampered"
    assert stage_of("command", json.dumps(doc).encode(), reg).stage is Stage.SIGNATURE


# --- signing ---


def test_sign_document_reproduces_the_golden_signature() -> None:
    doc = golden()
    expected = doc["signature"]
    signed = sign_document(doc, key_id=GOLDEN_KEY, seed=b64url_decode(COORDINATOR_SEED))
    assert signed["signature"] == expected
    assert signed is not doc


def test_sign_document_round_trips_through_verification() -> None:
    doc = golden()
    doc["payload"]["artifactHashes"] = ["sha256:" + "b" * 64]
    signed = sign_document(doc, key_id=GOLDEN_KEY, seed=b64url_decode(COORDINATOR_SEED), profile="command")
    result = verify_document(json.dumps(signed).encode(), "command", fixture("registry-valid.json"))
    assert result.document == signed


def test_sign_document_refuses_a_protected_time_that_is_not_utc_z() -> None:
    doc = golden()
    doc["issuedAt"] = "2026-07-15T02:00:00+02:00"
    with pytest.raises(ValueError, match="UTC"):
        sign_document(doc, key_id=GOLDEN_KEY, seed=b64url_decode(COORDINATOR_SEED))


# --- any single-byte change ---


@functools.cache
def golden_bytes() -> bytes:
    return read(f"{SD}/valid/command.json")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(where=st.integers(min_value=0), byte=st.integers(min_value=0, max_value=255))
def test_any_single_byte_change_fails_or_is_insignificant_PROTOCOL_6_4(where: int, byte: int) -> None:
    original = golden_bytes()
    registry = fixture("registry-valid.json")
    i = where % len(original)
    if original[i] == byte:
        byte ^= 0x01
    changed = original[:i] + bytes([byte]) + original[i + 1 :]
    reference = verify_document(original, "command", registry)
    try:
        result = verify_document(changed, "command", registry)
    except VerificationFailed as failure:
        assert failure.stage in Stage
        return
    # Only a change JSON does not see (whitespace, an exponent's case) may verify,
    # and then with the very same signed content.
    assert result.document == reference.document
    assert result.signing_bytes == reference.signing_bytes
    assert result.signing_hash == reference.signing_hash


# --- stage 4 does not trust the key-resolution adapter's public key or its exceptions ---


class _Adapter:
    """A RegistryEvidence adapter other than MemoryRegistry (e.g. a database one)."""

    organization_id = "urn:missionweaveprotocol:organization:acme"

    def __init__(self, public_key: bytes | None = None, error: Exception | None = None) -> None:
        self.public_key = public_key
        self.error = error

    def resolve(self, key_id: str) -> Any:
        from mwportal.protocol.registry import KeyBinding
        from mwportal.protocol.values import parse_timestamp

        if self.error is not None:
            raise self.error
        assert self.public_key is not None
        return KeyBinding(
            key_id=key_id,
            principal=Principal("agent", golden()["actor"]["id"]),
            algorithm="Ed25519",
            public_key=self.public_key,
            valid_from=parse_timestamp("2026-07-01T00:00:00Z"),
            valid_until=None,
            revoked_at=None,
        )


@pytest.mark.parametrize(
    "public_key",
    [
        ed25519.IDENTITY_ENCODING,  # the identity point
        ORDER_8,  # small order
        (2).to_bytes(32, "little"),  # off the curve
        b"\x01" * 31,  # wrong length
    ],
)
def test_stage_4_validates_the_resolved_public_key_strictly_PROTOCOL_6_4(public_key: bytes) -> None:
    # §6.4 stage 4 decodes the resolved key canonically and checks its point
    # strictly, whatever the adapter did before. The verifier
    # must not leave that to whatever adapter supplied the binding.
    data = read(f"{SD}/invalid/command-weak-key-forgery.json")
    failure = stage_of("command", data, _Adapter(public_key=public_key))
    assert failure.stage is Stage.KEY_RESOLUTION


@pytest.mark.parametrize("error", [RuntimeError("db down"), OSError("socket"), LookupError("x")])
def test_an_adapter_that_raises_fails_stage_4_closed_PROTOCOL_6_4(error: Exception) -> None:
    # §6.4: "unavailable Registry evidence ... fail[s] stage 4": an adapter
    # exception is unavailable evidence, never an unclassified crash.
    failure = stage_of("command", golden_bytes(), _Adapter(error=error))
    assert failure.stage is Stage.KEY_RESOLUTION
    assert str(failure) == WIRE_MESSAGES[ErrorCode.AUTH_INVALID_SIGNATURE]


# --- hostile shapes: every input is a classified VerificationFailed, never a crash ---


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


HOSTILE = [None, True, 0, -1, 1.5, "", "x", [], {}, ["x"], {"type": 1, "id": []}, [[[[[]]]]]]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    profile=st.sampled_from(["command", "agent-card"]),
    where=st.integers(min_value=0),
    replacement=st.sampled_from([*range(len(HOSTILE)), "delete"]),
)
def test_a_hostile_member_anywhere_is_a_classified_failure_PROTOCOL_6_4(
    profile: str, where: int, replacement: int | str
) -> None:
    name = "command" if profile == "command" else "agent-card"
    doc: Any = json.loads(read(f"{SD}/valid/{name}.json"))
    paths = _paths(doc)
    path = paths[where % len(paths)]
    if not path:
        doc = None if replacement == "delete" else HOSTILE[int(replacement)]
    else:
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        if replacement == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = HOSTILE[int(replacement)]
    try:
        verify_document(json.dumps(doc).encode(), profile, fixture("registry-valid.json"))
    except VerificationFailed as failure:
        assert failure.stage in Stage
        assert str(failure) == WIRE_MESSAGES[failure.wire_code]


def test_a_ten_megabyte_string_is_a_classified_failure() -> None:
    doc = golden()
    doc["signature"]["keyId"] = "urn:x:" + "a" * 10_000_000
    assert stage_of("command", json.dumps(doc).encode(), fixture("registry-valid.json")).stage in {
        Stage.SCHEMA,
        Stage.KEY_RESOLUTION,
    }
    doc = golden()
    doc["signature"]["value"] = "A" * 10_000_000
    assert stage_of("command", json.dumps(doc).encode(), fixture("registry-valid.json")).stage in {
        Stage.SCHEMA,
        Stage.SIGNATURE_ENVELOPE,
    }
