"""Ed25519 over canonical JSON (DESIGN §4): keys and signatures are unpadded
base64url; a signature covers the canonical object without ``signature``."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mwportal.protocol import b64url_decode, b64url_encode, generate_keypair, sign, verify
from mwportal.protocol.signing import public_key_of

PRIVATE_KEY, PUBLIC_KEY = generate_keypair()
OTHER_PRIVATE, OTHER_PUBLIC = generate_keypair()


def envelope() -> dict[str, Any]:
    """A signed object with nested members of every JSON type, its signature beside them."""
    obj: dict[str, Any] = {
        "kind": "work.checkpoint",
        "actionId": "urn:uuid:abcdefab-cdef-4abc-8def-abcdefabcdef",
        "issuedAt": datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "payload": {"checkpoint": {"step": 1, "notes": ["a", "b"]}, "progress": {"phase": "x", "ok": True}},
        "sessionEpoch": 4,
        "membershipEpoch": 2,
    }
    return {**obj, "signature": sign(PRIVATE_KEY, obj)}


def one_bit_changes(value: Any) -> list[Any]:
    """Variants of ``value`` that differ from it by one bit somewhere inside."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value ^ 1]
    if isinstance(value, str):
        return [value[:i] + chr(ord(c) ^ 1) + value[i + 1 :] for i, c in enumerate(value)] or ["\x01"]
    if isinstance(value, list):
        return [value[:i] + [v] + value[i + 1 :] for i, item in enumerate(value) for v in one_bit_changes(item)]
    if isinstance(value, dict):
        out: list[Any] = []
        for key, item in value.items():
            out += [{**value, key: v} for v in one_bit_changes(item)]
            renamed = {k: v for k, v in value.items() if k != key}
            out += [{**renamed, k2: item} for k2 in one_bit_changes(key) if k2 not in renamed]
        return out
    return []


def test_it_verifies_what_it_signed() -> None:
    raw = envelope()
    assert verify(PUBLIC_KEY, raw, raw["signature"])


def test_it_signs_the_object_without_its_signature_member() -> None:
    raw = envelope()
    unsigned = {k: v for k, v in raw.items() if k != "signature"}
    assert sign(PRIVATE_KEY, unsigned) == raw["signature"]
    assert verify(PUBLIC_KEY, unsigned, raw["signature"])
    assert sign(PRIVATE_KEY, raw) == raw["signature"]  # the member itself is left out of what is signed


def test_it_signs_canonical_json_so_member_order_and_number_spelling_do_not_matter() -> None:
    obj = {"b": [1, 2.5], "a": {"y": 1, "x": 2.0}}
    signature = sign(PRIVATE_KEY, obj)
    assert verify(PUBLIC_KEY, {"a": {"x": 2, "y": 1.0}, "b": [1.0, 2.5]}, signature)


def test_it_signs_deterministically() -> None:
    obj = {"a": 1}
    assert sign(PRIVATE_KEY, obj) == sign(PRIVATE_KEY, obj)


@pytest.mark.parametrize("member", sorted(set(envelope()) - {"signature"}))
def test_it_refuses_a_one_bit_change_in_any_member(member: str) -> None:
    raw = envelope()
    variants = one_bit_changes(raw[member])
    assert variants
    for variant in variants:
        changed = {**raw, member: variant}
        assert not verify(PUBLIC_KEY, changed, raw["signature"]), (member, variant)


@pytest.mark.parametrize("member", sorted(set(envelope()) - {"signature"}))
def test_it_refuses_a_removed_member(member: str) -> None:
    raw = envelope()
    changed = {k: v for k, v in raw.items() if k != member}
    assert not verify(PUBLIC_KEY, changed, raw["signature"])


@pytest.mark.parametrize("extra", [{"note": 1}, {"extensions": {"x": 1}}, {"lease_id": None}])
def test_it_refuses_an_added_member(extra: dict[str, Any]) -> None:
    raw = envelope()
    assert not verify(PUBLIC_KEY, {**raw, **extra}, raw["signature"])


def test_it_refuses_a_one_bit_change_anywhere_in_the_signature() -> None:
    raw = envelope()
    sig = b64url_decode(raw["signature"])
    assert len(sig) == 64
    for bit in range(len(sig) * 8):
        flipped = bytearray(sig)
        flipped[bit // 8] ^= 1 << (bit % 8)
        assert not verify(PUBLIC_KEY, raw, b64url_encode(bytes(flipped))), bit


def test_it_refuses_another_agents_key() -> None:
    raw = envelope()
    assert not verify(OTHER_PUBLIC, raw, raw["signature"])
    assert not verify(PUBLIC_KEY, raw, sign(OTHER_PRIVATE, raw))


GARBAGE = [
    "",
    "!!!!",
    "not base64 at all",
    "AAAA==",
    "A",
    "\u00e9\u00e9\u00e9\u00e9",
    "\x00",
    None,
    123,
    b"bytes",
    ["x"],
    b64url_encode(b"\x00" * 31),
    b64url_encode(b"\x00" * 33),
    b64url_encode(b"\x00" * 32),
    b64url_encode(b"\xff" * 32),
    b64url_encode(b"\x01" * 63),
    b64url_encode(b"\x01" * 65),
    b64url_encode(b"\x00" * 64),
]


@pytest.mark.parametrize("garbage", GARBAGE, ids=repr)
def test_it_answers_false_for_a_garbage_key(garbage: Any) -> None:
    raw = envelope()
    assert verify(garbage, raw, raw["signature"]) is False


@pytest.mark.parametrize("garbage", GARBAGE, ids=repr)
def test_it_answers_false_for_a_garbage_signature(garbage: Any) -> None:
    assert verify(PUBLIC_KEY, envelope(), garbage) is False


def test_it_refuses_a_padded_signature() -> None:
    raw = envelope()
    padded = raw["signature"] + "=" * (-len(raw["signature"]) % 4)
    assert padded != raw["signature"]
    assert verify(PUBLIC_KEY, raw, padded) is False


def test_it_refuses_a_signature_spelled_outside_unpadded_base64url() -> None:
    # One signature, one spelling: junk characters and the standard base64
    # alphabet are not base64url (RFC 4648 §5), so they must not verify.
    obj = {"a": 1}
    signature = sign(PRIVATE_KEY, obj)
    n = 0
    while "-" not in signature and "_" not in signature:
        n += 1
        obj = {"a": n}
        signature = sign(PRIVATE_KEY, obj)
    assert verify(PUBLIC_KEY, obj, signature)
    for spelling in (
        signature.replace("-", "+").replace("_", "/"),
        signature[:10] + "$$$$" + signature[10:],
        signature[:10] + "\n\n\n\n" + signature[10:],
    ):
        assert not verify(PUBLIC_KEY, obj, spelling), spelling


@given(st.text(max_size=100) | st.binary(max_size=100).map(b64url_encode), st.text(max_size=120))
def test_it_never_raises_on_garbage_key_and_signature(key: str, signature: str) -> None:
    assert verify(key, {"a": 1}, signature) in (True, False)


@given(st.binary(min_size=64, max_size=64))
def test_it_refuses_random_signatures(sig: bytes) -> None:
    assert verify(PUBLIC_KEY, {"a": 1}, b64url_encode(sig)) is False


def test_generate_keypair_gives_raw_32_byte_keys_in_unpadded_base64url() -> None:
    private, public = generate_keypair()
    assert len(b64url_decode(private)) == 32
    assert len(b64url_decode(public)) == 32
    assert "=" not in private + public and "+" not in private + public and "/" not in private + public
    assert public_key_of(private) == public


@given(st.binary(max_size=200))
def test_b64url_round_trips_without_padding(data: bytes) -> None:
    text = b64url_encode(data)
    assert "=" not in text
    assert b64url_decode(text) == data


@pytest.mark.parametrize("text", ["AA==", "A", "AB$C", "AB+/", "AB C", "AB\nCD", None, b"AAAA"], ids=repr)
def test_b64url_decode_refuses_what_is_not_unpadded_base64url(text: Any) -> None:
    # Its docstring: "ValueError on anything else". base64.urlsafe_b64decode
    # without validation drops characters outside the alphabet and takes the
    # standard alphabet's + and /, so a signature string is not unique.
    with pytest.raises(ValueError):
        b64url_decode(text)


def test_it_does_not_mutate_what_it_signs() -> None:
    raw = envelope()
    before = copy.deepcopy(raw)
    verify(PUBLIC_KEY, raw, raw["signature"])
    sign(PRIVATE_KEY, raw)
    assert raw == before
