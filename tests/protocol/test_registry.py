"""The Registry seam (§6.4): immutable bindings, no reuse, no alias, append-only validity history.

The fixture tests read the bundle's Registry fixtures (never copied) and state
the expected verdict of each one in ``FIXTURES`` below, written from the
cryptography manifest's fault list.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mwportal.protocol import ed25519, registry
from mwportal.protocol.registry import (
    FailClosedEvidence,
    KeyBinding,
    KeyResolutionError,
    MemoryRegistry,
    Principal,
    RegistrationError,
    key_valid_at,
    registry_from_fixture,
)
from mwportal.protocol.values import b64url_encode, parse_timestamp

from .bundle import bundle_root

ORG = "urn:example:organization:acme"
ALICE = Principal("agent", "urn:example:agent:alice")
BOB = Principal("human", "urn:example:human:bob")
T0 = "2026-01-01T00:00:00Z"

P = 2**255 - 19


def key(n: int) -> bytes:
    return ed25519.public_key(n.to_bytes(32, "little"))


def fresh() -> MemoryRegistry:
    reg = MemoryRegistry(ORG)
    reg.register("urn:example:key:alice-1", ALICE, b64url_encode(key(1)), T0)
    return reg


def refused(fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(RegistrationError) as exc:
        fn(*args, **kwargs)
    return exc.value.reason


# --- binding identity ---


def test_it_resolves_a_registered_binding() -> None:
    reg = fresh()
    b = reg.resolve("urn:example:key:alice-1")
    assert b == KeyBinding("urn:example:key:alice-1", ALICE, "Ed25519", key(1), parse_timestamp(T0))
    assert b.valid_until is None and b.revoked_at is None


def test_unknown_key_raises_key_resolution_error() -> None:
    with pytest.raises(KeyResolutionError) as exc:
        fresh().resolve("urn:example:key:nobody")
    assert exc.value.reason == "unknown-key"


def test_identical_redeclaration_is_the_same_binding_PROTOCOL_6_4() -> None:
    reg = fresh()
    again = reg.register("urn:example:key:alice-1", ALICE, key(1), "2026-01-01T01:00:00+01:00")
    assert again is reg.resolve("urn:example:key:alice-1")
    assert len(reg) == 1


@pytest.mark.parametrize(
    ("principal", "pk", "valid_from"),
    [
        (BOB, key(1), T0),  # another Principal
        (ALICE, key(2), T0),  # other key material
        (ALICE, key(1), "2026-01-02T00:00:00Z"),  # validFrom is immutable
    ],
    ids=["principal", "key", "valid-from"],
)
def test_key_id_is_never_rebound_PROTOCOL_6_4(principal: Principal, pk: bytes, valid_from: str) -> None:
    reg = fresh()
    assert refused(reg.register, "urn:example:key:alice-1", principal, pk, valid_from) == "key-id-rebinding"
    assert reg.resolve("urn:example:key:alice-1").public_key == key(1)


def test_key_id_alias_is_refused_PROTOCOL_6_4() -> None:
    reg = fresh()
    assert refused(reg.register, "urn:example:key:alice-2", ALICE, key(1), T0) == "key-id-alias"


def test_public_key_under_another_principal_is_refused_PROTOCOL_6_4() -> None:
    reg = fresh()
    assert refused(reg.register, "urn:example:key:bob-1", BOB, key(1), T0) == "public-key-reuse"
    with pytest.raises(KeyResolutionError):
        reg.resolve("urn:example:key:bob-1")


def test_strict_point_checks_come_before_uniqueness_PROTOCOL_6_4() -> None:
    # A small-order key under a known key ID is refused for the key, not as a rebinding.
    reg = fresh()
    order_2 = (P - 1).to_bytes(32, "little")
    assert refused(reg.register, "urn:example:key:alice-1", ALICE, order_2, T0) == "public-key-small-order"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (b64url_encode(key(3)) + "=", "public-key-not-canonical-base64url"),
        (b64url_encode(key(3))[:-1] + "p", "public-key-not-canonical-base64url"),  # nonzero unused bits
        (b64url_encode(key(3)[:31]), "public-key-wrong-length"),
        (b64url_encode(key(3) + b"\x00"), "public-key-wrong-length"),
        (b64url_encode(key(3)).replace("_", "/").replace("-", "+") + "/", "public-key-not-canonical-base64url"),
        (b64url_encode((1).to_bytes(32, "little")), "public-key-identity"),
        (b64url_encode((P).to_bytes(32, "little")), "public-key-noncanonical"),
        (b64url_encode((1 | 1 << 255).to_bytes(32, "little")), "public-key-negative-zero"),
        (b64url_encode((2).to_bytes(32, "little")), "public-key-off-curve"),
    ],
)
def test_bad_public_keys_are_refused_at_registration(text: str, reason: str) -> None:
    assert refused(MemoryRegistry(ORG).register, "urn:example:key:k", ALICE, text, T0) == reason


@pytest.mark.parametrize(
    ("key_id", "principal", "algorithm", "reason"),
    [
        ("keys/relative", ALICE, "Ed25519", "key-id-not-absolute-uri"),
        ("urn:example:key:k\n", ALICE, "Ed25519", "key-id-not-absolute-uri"),
        ("urn:example:key:k", Principal("robot", "urn:example:agent:a"), "Ed25519", "principal-type-unknown"),
        ("urn:example:key:k", Principal("agent", "https://例え.テスト/a"), "Ed25519", "principal-id-not-absolute-uri"),
        ("urn:example:key:k", Principal("agent", "urn:example:agent:a%GG"), "Ed25519", "principal-id-not-absolute-uri"),
        ("urn:example:key:k", ALICE, "ed25519", "algorithm-unsupported"),
        ("urn:example:key:k", ALICE, "Ed448", "algorithm-unsupported"),
    ],
)
def test_binding_identifiers_and_algorithm_are_validated(
    key_id: str, principal: Principal, algorithm: str, reason: str
) -> None:
    reg = MemoryRegistry(ORG)
    assert refused(reg.register, key_id, principal, key(4), T0, algorithm=algorithm) == reason


def test_organization_id_must_be_an_absolute_uri() -> None:
    assert refused(MemoryRegistry, "organizations/acme") == "organization-id-not-absolute-uri"


@pytest.mark.parametrize("bad", ["2026-01-01T00:00:60Z", "0000-01-01T00:00:00Z", "2026-01-01T00:00:00-00:00", ""])
def test_malformed_registry_timestamps_are_refused(bad: str) -> None:
    assert refused(MemoryRegistry(ORG).register, "urn:example:key:k", ALICE, key(5), bad) == "valid-from-malformed"
    reg = fresh()
    assert refused(reg.record_status, "urn:example:key:alice-1", T0, valid_until=bad) == "valid-until-malformed"


def test_resolution_does_not_recheck_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    # The invariants are enforced at registration; resolve() only reads the index.
    reg = fresh()

    def must_not_run(raw: bytes) -> None:
        raise AssertionError("a key was re-checked at resolution")

    monkeypatch.setattr(ed25519, "check_public_key", must_not_run)
    assert reg.resolve("urn:example:key:alice-1").principal == ALICE


# --- validity history ---


def test_boundaries_may_be_added_and_moved_earlier_PROTOCOL_6_4() -> None:
    reg = fresh()
    kid = "urn:example:key:alice-1"
    reg.record_status(kid, "2026-02-01T00:00:00Z", valid_until="2026-12-01T00:00:00Z")
    reg.record_status(kid, "2026-03-01T00:00:00Z", valid_until="2026-06-01T00:00:00Z")
    reg.record_status(kid, "2026-03-02T00:00:00Z", revoked_at="2026-05-01T00:00:00Z")
    b = reg.resolve(kid)
    assert b.valid_until is not None and b.valid_until.text == "2026-06-01T00:00:00Z"
    assert b.revoked_at is not None and b.revoked_at.text == "2026-05-01T00:00:00Z"
    assert [s.sequence for s in reg.history(kid)] == [1, 2, 3]


@pytest.mark.parametrize("field", ["valid_until", "revoked_at"])
def test_boundaries_are_never_moved_later_PROTOCOL_6_4(field: str) -> None:
    reg = fresh()
    kid = "urn:example:key:alice-1"
    first: dict[str, Any] = {field: "2026-06-01T00:00:00Z"}
    later: dict[str, Any] = {field: "2026-06-01T00:00:00.000001Z"}
    reg.record_status(kid, "2026-02-01T00:00:00Z", **first)
    reason = refused(reg.record_status, kid, "2026-02-02T00:00:00Z", **later)
    assert reason == f"{field.replace('_', '-')}-moved-later"
    assert len(reg.history(kid)) == 1
    assert getattr(reg.resolve(kid), field).text == "2026-06-01T00:00:00Z"


def test_a_record_without_a_boundary_does_not_clear_it_PROTOCOL_6_4() -> None:
    reg = fresh()
    kid = "urn:example:key:alice-1"
    reg.record_status(kid, "2026-02-01T00:00:00Z", valid_until="2026-06-01T00:00:00Z")
    reg.record_status(kid, "2026-02-02T00:00:00Z", revoked_at="2026-07-01T00:00:00Z")
    b = reg.resolve(kid)
    assert b.valid_until is not None and b.valid_until.text == "2026-06-01T00:00:00Z"


def test_history_records_are_never_rewritten_PROTOCOL_6_4() -> None:
    reg = fresh()
    kid = "urn:example:key:alice-1"
    reg.record_status(kid, "2026-02-01T00:00:00Z", valid_until="2026-06-01T00:00:00Z", sequence=1)
    # The same record declared again is fine; a different record under its sequence is not.
    reg.record_status(kid, "2026-02-01T00:00:00Z", valid_until="2026-06-01T00:00:00Z", sequence=1)
    reason = refused(reg.record_status, kid, "2026-02-01T00:00:00Z", valid_until="2026-05-01T00:00:00Z", sequence=1)
    assert reason == "status-record-rewritten"
    reg.record_status(kid, "2026-02-03T00:00:00Z", sequence=3)
    assert refused(reg.record_status, kid, "2026-02-04T00:00:00Z", sequence=2) == "status-sequence-not-increasing"
    assert refused(reg.record_status, "urn:example:key:none", T0) == "status-for-unknown-key"


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(min_value=0, max_value=50)),
            st.one_of(st.none(), st.integers(min_value=0, max_value=50)),
        ),
        max_size=12,
    )
)
def test_effective_boundary_is_the_earliest_accepted_PROTOCOL_6_4(records: list[tuple[int | None, int | None]]) -> None:
    # Model: a record is accepted iff neither boundary follows the current
    # effective one; accepted records leave the earliest value effective.
    reg = fresh()
    kid = "urn:example:key:alice-1"
    until: int | None = None
    revoked: int | None = None

    def ts(day: int | None) -> str | None:
        return None if day is None else f"2026-03-{day // 24 + 1:02d}T{day % 24:02d}:00:00Z"

    for u, r in records:
        ok = (u is None or until is None or u <= until) and (r is None or revoked is None or r <= revoked)
        if ok:
            reg.record_status(kid, T0, valid_until=ts(u), revoked_at=ts(r))
            until = until if u is None else u
            revoked = revoked if r is None else r
        else:
            with pytest.raises(RegistrationError):
                reg.record_status(kid, T0, valid_until=ts(u), revoked_at=ts(r))
    b = reg.resolve(kid)
    assert (b.valid_until.text if b.valid_until else None) == ts(until)
    assert (b.revoked_at.text if b.revoked_at else None) == ts(revoked)


# --- key_valid_at: the half-open interval, as instants (§6.4) ---

FROM = "2026-07-15T08:00:00+08:00"  # = 2026-07-15T00:00:00Z
UNTIL = "2026-07-16T00:00:00Z"
REVOKED = "2026-07-15T12:00:00.5Z"


@pytest.mark.parametrize(
    ("t", "valid"),
    [
        ("2026-07-14T23:59:59.999999999Z", False),  # before validFrom
        ("2026-07-15T00:00:00Z", True),  # validFrom <= t, spelled differently from validFrom
        ("2026-07-15T00:00:00.000Z", True),
        ("2026-07-15T12:00:00.4999999999999Z", True),
        ("2026-07-15T12:00:00.50Z", False),  # t == revokedAt: refused
        ("2026-07-15T13:00:00+01:00", True),  # = 12:00:00Z, before revokedAt
        ("2026-07-15T13:00:01+01:00", False),  # = 12:00:01Z, after revokedAt
    ],
)
def test_key_valid_at_is_half_open_PROTOCOL_6_4(t: str, valid: bool) -> None:
    b = KeyBinding(
        "urn:example:key:k",
        ALICE,
        "Ed25519",
        key(6),
        parse_timestamp(FROM),
        parse_timestamp(UNTIL),
        parse_timestamp(REVOKED),
    )
    assert key_valid_at(b, parse_timestamp(t)) is valid


@pytest.mark.parametrize(
    ("t", "valid"),
    [
        ("2026-07-15T23:59:59.999999Z", True),
        ("2026-07-16T00:00:00Z", False),  # t == validUntil: refused
        ("2026-07-16t00:00:00z", False),
        ("2026-07-15T23:59:00-00:01", False),  # the same instant as validUntil
        ("2026-07-16T00:00:00.000000000000000000001Z", False),
    ],
)
def test_valid_until_is_exclusive_PROTOCOL_6_4(t: str, valid: bool) -> None:
    b = KeyBinding("urn:example:key:k", ALICE, "Ed25519", key(6), parse_timestamp(FROM), parse_timestamp(UNTIL))
    assert key_valid_at(b, parse_timestamp(t)) is valid


# --- the bundle's Registry fixtures ---

GOLDEN_KEY = "urn:missionweaveprotocol:key:crypto-vector-rfc8032-1"
GOLDEN_TIME = "2026-07-15T00:00:00Z"
COORDINATOR = Principal("agent", "urn:missionweaveprotocol:agent:crypto-vector-coordinator")

# fixture -> the reason fragment of fail-closed evidence, or None for valid evidence.
FIXTURES: dict[str, str | None] = {
    "registry-valid.json": None,
    "registry-key-alias.json": "key-id-alias",
    "registry-key-not-yet-valid.json": None,
    "registry-organization-id-relative-reference.json": "organization-id-not-absolute-uri",
    "registry-public-key-cross-principal-reuse.json": "public-key-reuse",
    "registry-public-key-identity.json": "public-key-identity",
    "registry-public-key-mixed-order.json": "public-key-mixed-order",
    "registry-public-key-negative-zero.json": "public-key-negative-zero",
    "registry-public-key-noncanonical.json": "public-key-noncanonical",
    "registry-public-key-nonzero-unused-pad-bits.json": "public-key-not-canonical-base64url",
    "registry-public-key-off-curve.json": "public-key-off-curve",
    "registry-public-key-padded.json": "public-key-not-canonical-base64url",
    "registry-public-key-rebinding.json": "key-id-rebinding",
    "registry-public-key-small-order.json": "public-key-small-order",
    "registry-public-key-wrong-length.json": "public-key-wrong-length",
    "registry-public-key-y-equals-p.json": "public-key-noncanonical",
    "registry-revoked-at-equality.json": None,
    "registry-selected-service-principal-id-iri-only.json": "principal-id-not-absolute-uri",
    "registry-timestamp-casing-and-offset-bounds.json": None,
    "registry-timestamp-fractional-precision.json": None,
    "registry-unrelated-key-id-trailing-line-feed.json": "key-id-not-absolute-uri",
    "registry-unrelated-principal-id-malformed-percent.json": "principal-id-not-absolute-uri",
    "registry-valid-until-equality.json": None,
    "registry-wrong-principal.json": None,
}

# For valid evidence: (bound Principal of the golden key, valid at the golden Command's issuedAt?).
VALID_OUTCOMES: dict[str, tuple[Principal, bool]] = {
    "registry-valid.json": (COORDINATOR, True),
    "registry-key-not-yet-valid.json": (COORDINATOR, False),
    "registry-revoked-at-equality.json": (COORDINATOR, False),
    "registry-timestamp-casing-and-offset-bounds.json": (COORDINATOR, True),
    "registry-timestamp-fractional-precision.json": (COORDINATOR, True),
    "registry-valid-until-equality.json": (COORDINATOR, False),
    "registry-wrong-principal.json": (
        Principal("agent", "urn:missionweaveprotocol:agent:crypto-vector-impostor"),
        True,
    ),
}


def load(path: Path) -> Any:
    return json.loads(path.read_bytes())


def test_it_covers_every_registry_fixture_of_the_bundle() -> None:
    keys = bundle_root() / "cryptography" / "keys"
    assert {p.name for p in keys.glob("registry-*.json")} == set(FIXTURES)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_every_fixture_has_the_fixture_schema_structure(name: str) -> None:
    root = bundle_root()
    schema = load(root / "cryptography" / "registry-fixture.schema.json")
    jsonschema.Draft202012Validator(schema).validate(load(root / "cryptography" / "keys" / name))


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_evidence_verdict_PROTOCOL_6_4(name: str) -> None:
    doc = load(bundle_root() / "cryptography" / "keys" / name)
    evidence = registry_from_fixture(doc)
    expected = FIXTURES[name]
    if expected is None:
        assert isinstance(evidence, MemoryRegistry)
        assert evidence.organization_id == "urn:missionweaveprotocol:organization:acme"
        principal, valid = VALID_OUTCOMES[name]
        b = evidence.resolve(GOLDEN_KEY)
        assert b.principal == principal
        assert key_valid_at(b, parse_timestamp(GOLDEN_TIME)) is valid
        return
    assert isinstance(evidence, FailClosedEvidence)
    assert expected in evidence.reason
    # Fail closed for every key ID, the unrelated ones included.
    for binding in doc["bindings"]:
        with pytest.raises(KeyResolutionError) as exc:
            evidence.resolve(binding["keyId"])
        assert exc.value.reason == evidence.reason


def test_fixture_keeps_the_lexical_form_of_registry_timestamps() -> None:
    doc = load(bundle_root() / "cryptography" / "keys" / "registry-timestamp-fractional-precision.json")
    b = registry_from_fixture(doc).resolve(GOLDEN_KEY)
    assert b.valid_until is not None and b.valid_until.text == "2026-07-15T00:00:00.1234560000000000002Z"
    # Decided only after the sixth fractional digit.
    assert key_valid_at(b, parse_timestamp("2026-07-15T00:00:00.123456Z"))
    assert not key_valid_at(b, parse_timestamp("2026-07-15T00:00:00.1234560000000000002Z"))


def test_admission_bundle_registry_reads_as_valid_evidence() -> None:
    doc = load(bundle_root() / "admission" / "registries" / "registry-later-revocation.json")
    b = registry_from_fixture(doc).resolve(GOLDEN_KEY)
    assert b.revoked_at is not None and b.revoked_at.text == "2026-07-15T01:00:00Z"
    assert b.valid_until is not None and b.valid_until.text == "2026-07-16T00:00:00Z"


def valid_fixture() -> dict[str, Any]:
    return {
        "organizationId": ORG,
        "bindings": [
            {
                "keyId": "urn:example:key:alice-1",
                "principal": {"type": "agent", "id": ALICE.id},
                "algorithm": "Ed25519",
                "publicKey": b64url_encode(key(1)),
                "validFrom": T0,
                "validityHistory": [{"sequence": 1, "recordedAt": T0, "validUntil": "2027-01-01T00:00:00Z"}],
            }
        ],
    }


def test_an_identical_redeclaration_in_a_fixture_is_one_binding() -> None:
    doc = valid_fixture()
    doc["bindings"].append(json.loads(json.dumps(doc["bindings"][0])))
    evidence = registry_from_fixture(doc)
    assert isinstance(evidence, MemoryRegistry) and len(evidence) == 1


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.pop("bindings"),
        lambda d: d.update(extra=1),
        lambda d: d.update(bindings=[]),
        lambda d: d["bindings"][0].pop("validityHistory"),
        lambda d: d["bindings"][0]["principal"].update(type="robot"),
        lambda d: d["bindings"][0]["validityHistory"][0].update(sequence=True),
        lambda d: d["bindings"][0]["validityHistory"][0].update(sequence=0),
        lambda d: d["bindings"][0]["validityHistory"][0].pop("recordedAt"),
        lambda d: d["bindings"][0]["validityHistory"][0].update(note="x"),
        lambda d: d["bindings"][0].update(publicKey=7),
        lambda d: d["bindings"][0]["validityHistory"].append(
            {"sequence": 2, "recordedAt": T0, "validUntil": "2028-01-01T00:00:00Z"}
        ),
        lambda d: d["bindings"][0]["validityHistory"][0].update(revokedAt="2026-13-01T00:00:00Z"),
    ],
)
def test_an_invalid_fixture_fails_closed(mutate: Any) -> None:
    doc = valid_fixture()
    assert isinstance(registry_from_fixture(doc), MemoryRegistry)
    mutate(doc)
    evidence = registry_from_fixture(doc)
    assert isinstance(evidence, FailClosedEvidence)
    assert evidence.reason.startswith(registry.EVIDENCE_INVALID)
    with pytest.raises(KeyResolutionError):
        evidence.resolve("urn:example:key:alice-1")


# --- the structural check agrees with the bundle's fixture schema ---

REPLACEMENTS: list[Any] = [None, 0, 1, -1, True, 1.5, "", "x", "urn:x:y", [], {}, {"type": "agent", "id": "urn:x:a"}]
# A fresh copy per draw: an inserted list or dict may be mutated by a later step.
REPLACEMENT = st.sampled_from(REPLACEMENTS).map(copy.deepcopy)


def _containers(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path] if isinstance(value, dict | list) else []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for k, v in items:
        found += _containers(v, (*path, k))
    return found


@given(data=st.data())
def test_a_fixture_the_schema_refuses_fails_closed(data: st.DataObject) -> None:
    root = bundle_root()
    schema = load(root / "cryptography" / "registry-fixture.schema.json")
    doc = load(root / "cryptography" / "keys" / "registry-valid.json")
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        path = data.draw(st.sampled_from(_containers(doc)))
        target = doc
        for k in path:
            target = target[k]
        op = data.draw(st.sampled_from(["drop", "add", "replace"]))
        keys = list(target) if isinstance(target, dict) else list(range(len(target)))
        if op == "add" or not keys:
            if isinstance(target, dict):
                target[data.draw(st.sampled_from(["extra", "type", "id", "sequence", "validUntil"]))] = data.draw(
                    REPLACEMENT
                )
            else:
                target.append(data.draw(REPLACEMENT))
            continue
        k = data.draw(st.sampled_from(keys))
        if op == "drop":
            del target[k]
        else:
            target[k] = data.draw(REPLACEMENT)
    schema_valid = jsonschema.Draft202012Validator(schema).is_valid(doc)
    evidence = registry_from_fixture(doc)
    if not schema_valid:
        assert isinstance(evidence, FailClosedEvidence)
