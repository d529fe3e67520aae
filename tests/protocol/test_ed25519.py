"""Strict Ed25519 (§6.4): RFC 8032 vectors and every refused encoding class.

The refused encodings are built here from first principles: a tiny
Edwards25519 model of this test's own (not the module's) computes the torsion
points and the mixed-order points, so the oracle is the curve, not the code
under test.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nacl import bindings as sodium

from mwportal.protocol import ed25519
from mwportal.protocol.ed25519 import Ed25519EncodingError

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
I_SQRT = pow(2, (P - 1) // 4, P)


# --- a tiny affine Edwards25519 model, for building test encodings only ---


def add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    (x1, y1), (x2, y2) = a, b
    t = D * x1 * x2 * y1 * y2 % P
    x3 = (x1 * y2 + x2 * y1) * pow(1 + t, P - 2, P) % P
    y3 = (y1 * y2 + x1 * x2) * pow(1 - t, P - 2, P) % P
    return x3, y3


def mul(n: int, pt: tuple[int, int]) -> tuple[int, int]:
    acc = (0, 1)
    while n:
        if n & 1:
            acc = add(acc, pt)
        pt = add(pt, pt)
        n >>= 1
    return acc


def encode(pt: tuple[int, int]) -> bytes:
    x, y = pt
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def decode(enc: bytes) -> tuple[int, int]:
    raw = int.from_bytes(enc, "little")
    y, sign = raw & ((1 << 255) - 1), raw >> 255
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    x = pow(x2, (P + 3) // 8, P)
    if x * x % P != x2:
        x = x * I_SQRT % P
    if x * x % P != x2:
        raise ValueError("not on the curve")
    if x & 1 != sign:
        x = (P - x) % P
    return x, y


def raw_y(y: int, sign: int = 0) -> bytes:
    return (y | (sign << 255)).to_bytes(32, "little")


# The eight torsion points, as their RFC 8032 encodings (well known; each is
# checked below to have order dividing 8 with the model above).
TORSION_HEX = [
    "0100000000000000000000000000000000000000000000000000000000000000",  # identity
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  # order 2 (y = -1)
    "0000000000000000000000000000000000000000000000000000000000000000",  # order 4 (y = 0)
    "0000000000000000000000000000000000000000000000000000000000000080",  # order 4
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",  # order 8
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",  # order 8
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",  # order 8
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",  # order 8
]
TORSION = [bytes.fromhex(h) for h in TORSION_HEX]
IDENTITY = TORSION[0]
SMALL_ORDER_NON_IDENTITY = TORSION[1:]

# RFC 8032 §7.1, TEST 1-3: (secret key, public key, message, signature).
RFC8032 = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
    (
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    ),
]

VALID_KEY = bytes.fromhex(RFC8032[0][1])
VALID_SIG = bytes.fromhex(RFC8032[0][3])


def mixed_order_points() -> list[bytes]:
    """A prime-order point plus each non-identity torsion point."""
    a = decode(VALID_KEY)
    return [encode(add(a, decode(t))) for t in SMALL_ORDER_NON_IDENTITY]


def test_it_uses_torsion_encodings_of_order_dividing_8() -> None:
    for enc in TORSION:
        pt = decode(enc)
        assert encode(pt) == enc
        assert mul(8, pt) == (0, 1)
    # All eight are distinct, so they are the whole torsion subgroup.
    assert len(set(TORSION)) == 8
    assert all(mul(L, decode(m)) != (0, 1) for m in mixed_order_points())


@pytest.mark.parametrize(("seed", "pk", "msg", "sig"), RFC8032, ids=["test1", "test2", "test3"])
def test_it_matches_rfc8032_section_7_1(seed: str, pk: str, msg: str, sig: str) -> None:
    seed_b, pk_b, msg_b, sig_b = (bytes.fromhex(v) for v in (seed, pk, msg, sig))
    assert ed25519.public_key(seed_b) == pk_b
    assert ed25519.sign(seed_b, msg_b) == sig_b
    ed25519.check_public_key(pk_b)
    ed25519.check_signature(sig_b)
    assert ed25519.verify(pk_b, msg_b, sig_b)
    assert not ed25519.verify(pk_b, msg_b + b"\x00", sig_b)


# --- public keys (§6.4 "Before accepting an Ed25519 binding") ---


def test_identity_public_key_is_refused_PROTOCOL_6_4() -> None:
    with pytest.raises(Ed25519EncodingError) as exc:
        ed25519.check_public_key(IDENTITY)
    assert exc.value.reason == "public-key-identity"


@pytest.mark.parametrize("enc", SMALL_ORDER_NON_IDENTITY, ids=TORSION_HEX[1:])
def test_small_order_public_key_is_refused_PROTOCOL_6_4(enc: bytes) -> None:
    with pytest.raises(Ed25519EncodingError) as exc:
        ed25519.check_public_key(enc)
    assert exc.value.reason == "public-key-small-order"


@pytest.mark.parametrize("index", range(7))
def test_mixed_order_public_key_is_refused_PROTOCOL_6_4(index: int) -> None:
    with pytest.raises(Ed25519EncodingError) as exc:
        ed25519.check_public_key(mixed_order_points()[index])
    assert exc.value.reason == "public-key-mixed-order"


# y = p .. 2^255 - 1 are the noncanonical spellings of y = 0 .. 18 (y = p: the exact boundary).
@pytest.mark.parametrize("y", [P, P + 1, P + 2, P + 5, P + 18])
@pytest.mark.parametrize("sign", [0, 1])
def test_noncanonical_public_key_is_refused_PROTOCOL_6_4(y: int, sign: int) -> None:
    with pytest.raises(Ed25519EncodingError) as exc:
        ed25519.check_public_key(raw_y(y, sign))
    assert exc.value.reason == "public-key-noncanonical"


@pytest.mark.parametrize("y", [1, P - 1])
def test_negative_zero_public_key_is_refused_PROTOCOL_6_4(y: int) -> None:
    # x = 0 exactly for y = 1 and y = -1; the sign bit set spells "-0".
    with pytest.raises(Ed25519EncodingError) as exc:
        ed25519.check_public_key(raw_y(y, 1))
    assert exc.value.reason == "public-key-negative-zero"


def test_off_curve_public_key_is_refused_PROTOCOL_6_4() -> None:
    # y = 2: (y^2 - 1) / (d y^2 + 1) is not a square mod p.
    with pytest.raises(ValueError, match="not on the curve"):
        decode(raw_y(2))
    with pytest.raises(Ed25519EncodingError) as exc:
        ed25519.check_public_key(raw_y(2))
    assert exc.value.reason == "public-key-off-curve"


@pytest.mark.parametrize("length", [0, 31, 33, 64])
def test_wrong_length_public_key_is_refused(length: int) -> None:
    with pytest.raises(Ed25519EncodingError) as exc:
        ed25519.check_public_key(bytes(length))
    assert exc.value.reason == "public-key-wrong-length"


def test_libsodium_point_check_refuses_negative_zero_by_itself() -> None:
    # The assumption the brief asked to confirm: is_valid_point refuses the
    # negative-zero spellings even without the module's explicit check.
    assert not sodium.crypto_core_ed25519_is_valid_point(raw_y(1, 1))
    assert not sodium.crypto_core_ed25519_is_valid_point(raw_y(P - 1, 1))
    assert not sodium.crypto_core_ed25519_is_valid_point(IDENTITY)
    assert sodium.crypto_core_ed25519_is_valid_point(VALID_KEY)


# --- signatures (§6.4 stage 3) ---


def with_r(r: bytes, s: bytes = VALID_SIG[32:]) -> bytes:
    return r + s


def refused_reason(sig: bytes) -> str:
    with pytest.raises(Ed25519EncodingError) as exc:
        ed25519.check_signature(sig)
    return exc.value.reason


def test_identity_r_is_allowed_PROTOCOL_6_4() -> None:
    ed25519.check_signature(with_r(IDENTITY))


@pytest.mark.parametrize("enc", SMALL_ORDER_NON_IDENTITY, ids=TORSION_HEX[1:])
def test_small_order_r_is_stage_3_PROTOCOL_6_4(enc: bytes) -> None:
    assert refused_reason(with_r(enc)) == "signature-r-small-order"


@pytest.mark.parametrize("index", range(7))
def test_mixed_order_r_is_stage_3_PROTOCOL_6_4(index: int) -> None:
    sig = with_r(mixed_order_points()[index])
    ed25519.check_signature_encoding(sig)  # spelled canonically: only the point check sees it
    assert refused_reason(sig) == "signature-r-mixed-order"


@pytest.mark.parametrize("y", [P, P + 1, P + 3, P + 18])
def test_noncanonical_r_is_stage_3_PROTOCOL_6_4(y: int) -> None:
    assert refused_reason(with_r(raw_y(y))) == "signature-r-noncanonical"


@pytest.mark.parametrize("y", [1, P - 1])
def test_negative_zero_r_is_stage_3_PROTOCOL_6_4(y: int) -> None:
    assert refused_reason(with_r(raw_y(y, 1))) == "signature-r-negative-zero"


def test_off_curve_r_is_stage_3_PROTOCOL_6_4() -> None:
    assert refused_reason(with_r(raw_y(2))) == "signature-r-off-curve"


@pytest.mark.parametrize("s", [L, L + 1, 2**253, 2**256 - 1])
def test_s_at_or_above_l_is_refused_without_reduction_PROTOCOL_6_4(s: int) -> None:
    assert refused_reason(with_r(VALID_SIG[:32], s.to_bytes(32, "little"))) == "signature-s-out-of-range"


def test_s_just_below_l_passes_the_encoding_check() -> None:
    ed25519.check_signature(with_r(VALID_SIG[:32], (L - 1).to_bytes(32, "little")))


@pytest.mark.parametrize("length", [0, 32, 63, 65])
def test_wrong_length_signature_is_refused(length: int) -> None:
    assert refused_reason(bytes(length)) == "signature-wrong-length"
    assert not ed25519.verify(VALID_KEY, b"", bytes(length))


# --- the equation with the identity R (libsodium refuses it, so its own path) ---


def identity_r_signature(a: int, message: bytes) -> tuple[bytes, bytes]:
    """A genuine identity-R signature: A = [a]B, k = H(I || A || M), S = k a mod L."""
    pk = sodium.crypto_scalarmult_ed25519_base_noclamp(a.to_bytes(32, "little"))
    k = int.from_bytes(hashlib.sha512(IDENTITY + pk + message).digest(), "little") % L
    return pk, IDENTITY + (k * a % L).to_bytes(32, "little")


def test_identity_r_signature_satisfying_the_equation_verifies_PROTOCOL_6_4() -> None:
    pk, sig = identity_r_signature(123456789123456789, b"identity R")
    ed25519.check_public_key(pk)
    ed25519.check_signature(sig)
    assert ed25519.verify(pk, b"identity R", sig)
    assert not ed25519.verify(pk, b"identity r", sig)
    bumped = sig[:32] + ((int.from_bytes(sig[32:], "little") + 1) % L).to_bytes(32, "little")
    assert not ed25519.verify(pk, b"identity R", bumped)


def test_weak_key_forgery_with_identity_r_and_zero_s_fails() -> None:
    # [0]B = I = R, so this "verifies" only if [k]A = I: never for a prime-order A.
    assert not ed25519.verify(VALID_KEY, b"anything", IDENTITY + bytes(32))


def test_libsodium_refuses_identity_r_itself() -> None:
    # Why the identity path exists: the library's verify rejects small-order R.
    pk, sig = identity_r_signature(987654321, b"m")
    with pytest.raises(Exception):  # noqa: B017 - PyNaCl's BadSignatureError
        sodium.crypto_sign_open(sig + b"m", pk)


@given(seed=st.binary(min_size=32, max_size=32), message=st.binary(max_size=300))
def test_it_round_trips_sign_and_verify(seed: bytes, message: bytes) -> None:
    pk = ed25519.public_key(seed)
    sig = ed25519.sign(seed, message)
    ed25519.check_public_key(pk)
    ed25519.check_signature(sig)
    assert ed25519.verify(pk, message, sig)


@given(
    seed=st.binary(min_size=32, max_size=32),
    message=st.binary(min_size=1, max_size=200),
    where=st.integers(min_value=0),
    bit=st.integers(min_value=0, max_value=7),
    in_signature=st.booleans(),
)
def test_a_flipped_bit_fails_verification(
    seed: bytes, message: bytes, where: int, bit: int, in_signature: bool
) -> None:
    pk = ed25519.public_key(seed)
    sig = bytearray(ed25519.sign(seed, message))
    msg = bytearray(message)
    target = sig if in_signature else msg
    target[where % len(target)] ^= 1 << bit
    assert not ed25519.verify(pk, bytes(msg), bytes(sig))
