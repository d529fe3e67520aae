"""Strict pure Ed25519 for the Signed Document Verification Profile (§6.4).

Exception tree::

    Ed25519EncodingError(ValueError)    a key or signature encoding §6.4 refuses;
                                        ``.reason`` says which rule

Contract:

- ``check_public_key(raw)``: the Registry's acceptance rule for an Ed25519
  binding (§6.4 "Before accepting an Ed25519 binding"): 32 bytes, canonical
  ``y < p``, no negative zero, on the curve, not the identity, and ``[L]A`` the
  identity. Call it once, when a binding is registered; ``verify`` assumes a
  key that passed it and does not repeat the (expensive) subgroup check.
- ``check_signature(sig)``: the stage-3 rule for ``Renc || Senc``: 64 bytes,
  ``R`` canonical, on the curve, ``[L]R`` the identity (the identity ``R``
  itself allowed), ``S < L`` read as an unsigned integer with no reduction.
  ``check_signature_encoding`` is its cheap half (length, ``S``, canonical
  ``y``, negative zero) and ``check_signature_point`` the costly half (curve
  and subgroup); verification.py runs the costly half only when a later stage
  fails, because a successful stage-6 equation already proves it (see there).
- ``verify(public_key, message, signature)``: the equation
  ``[S]B = R + [k]A`` with ``k = SHA-512(Renc || Aenc || M) mod L``, for the
  identity ``R`` too (libsodium refuses every small-order ``R``, the identity
  included, so that case has its own path).
- ``sign(seed, message)`` / ``public_key(seed)``: RFC 8032 deterministic
  signing from a 32-byte seed.

libsodium (through PyNaCl) does the fast work. A small pure-Python Edwards25519
model is kept beside it only to say *why* an encoding was refused (the reason
goes to protected diagnostics) — it never decides acceptance on its own.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable

from nacl import bindings as _sodium
from nacl.exceptions import BadSignatureError
from nacl.exceptions import RuntimeError as SodiumRuntimeError

__all__ = [
    "IDENTITY_ENCODING",
    "L",
    "P",
    "Ed25519EncodingError",
    "check_public_key",
    "check_signature",
    "check_signature_encoding",
    "check_signature_point",
    "public_key",
    "sign",
    "verify",
]

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, P - 2, P) % P
_SQRT_M1 = pow(2, (P - 1) // 4, P)
_Y_MASK = (1 << 255) - 1

# The canonical encoding of the identity (0, 1): y = 1, sign bit clear.
IDENTITY_ENCODING = (1).to_bytes(32, "little")


class Ed25519EncodingError(ValueError):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# --- the pure-Python model (diagnostics and the identity-R edge cases only) ---

_Point = tuple[int, int, int, int]  # extended coordinates (X, Y, Z, T), x = X/Z, y = Y/Z, xy = T/Z
_ID: _Point = (0, 1, 1, 0)


def _add(p1: _Point, p2: _Point) -> _Point:
    # RFC 8032 §5.1.4 addition for a = -1; complete, so doubling is the same formula.
    x1, y1, z1, t1 = p1
    x2, y2, z2, t2 = p2
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = 2 * t1 * t2 * _D % P
    d = 2 * z1 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _mul(n: int, point: _Point) -> _Point:
    acc = _ID
    while n:
        if n & 1:
            acc = _add(acc, point)
        point = _add(point, point)
        n >>= 1
    return acc


def _is_identity(point: _Point) -> bool:
    x, y, z, _ = point
    return x % P == 0 and (y - z) % P == 0


def _classify(enc: bytes) -> str:
    """What a 32-byte encoding is, by RFC 8032 §5.1.3 decoding and the group order.

    One of ``noncanonical``, ``off-curve``, ``negative-zero``, ``identity``,
    ``small-order``, ``mixed-order``, ``prime-order``.
    """
    raw = int.from_bytes(enc, "little")
    y, sign = raw & _Y_MASK, raw >> 255
    if y >= P:
        return "noncanonical"
    u = (y * y - 1) % P
    v = (_D * y * y + 1) % P
    x2 = u * pow(v, P - 2, P) % P
    if x2 == 0:
        if sign:
            # x = 0 has no negative: RFC 8032 decoding fails on this spelling.
            return "negative-zero"
        x = 0
    else:
        x = pow(x2, (P + 3) // 8, P)
        if x * x % P != x2:
            x = x * _SQRT_M1 % P
        if x * x % P != x2:
            return "off-curve"
        if x & 1 != sign:
            x = P - x
    point: _Point = (x, y, 1, x * y % P)
    if _is_identity(point):
        return "identity"
    if _is_identity(_mul(8, point)):
        return "small-order"
    if not _is_identity(_mul(L, point)):
        return "mixed-order"
    return "prime-order"


def _refusal(enc: bytes) -> str:
    """The reason libsodium refused a point; ``invalid-point`` if the model finds nothing."""
    kind = _classify(enc)
    return "invalid-point" if kind == "prime-order" else kind


def _cheap_refusal(enc: bytes) -> str | None:
    # The two spelling rules checked in Python: canonical y < p and no negative zero.
    # (x = 0 only for y = 1 and y = p - 1, so negative zero is two exact encodings.)
    raw = int.from_bytes(enc, "little")
    y = raw & _Y_MASK
    if y >= P:
        return "noncanonical"
    if raw >> 255 and (y == 1 or y == P - 1):
        return "negative-zero"
    return None


# --- the public contract ---


def check_public_key(raw: bytes) -> None:
    """Refuse every public key §6.4 forbids; return quietly for a valid one."""
    if len(raw) != 32:
        raise Ed25519EncodingError("public-key-wrong-length")
    cheap = _cheap_refusal(raw)
    if cheap is not None:
        raise Ed25519EncodingError(f"public-key-{cheap}")
    # libsodium's is_valid_point: canonical, not small order (the identity
    # included), decodes on the curve, and [L]A = identity. A length check or
    # a successful import elsewhere is not enough (§6.4).
    if not _sodium.crypto_core_ed25519_is_valid_point(raw):
        raise Ed25519EncodingError(f"public-key-{_refusal(raw)}")


def public_key_fault(raw: bytes) -> str | None:
    """``check_public_key``'s verdict (None, or the refusal's reason), cached.

    The point check costs nearly a verification and its verdict is a pure
    function of the 32 bytes, so every verifier that sees the same keys again
    (the usual case) pays for it once per key. The check itself is part of
    the cache key, so replacing it (a mutation test) is never masked.
    """
    return _cached_key_fault(check_public_key, raw)


@functools.lru_cache(maxsize=4096)
def _cached_key_fault(check: Callable[[bytes], None], raw: bytes) -> str | None:
    try:
        check(raw)
    except Ed25519EncodingError as exc:
        return exc.reason
    return None


def check_signature_encoding(sig: bytes) -> None:
    """Stage 3, the cheap half: 64 bytes, ``S < L`` unreduced, ``R`` spelled canonically."""
    if len(sig) != 64:
        raise Ed25519EncodingError("signature-wrong-length")
    cheap = _cheap_refusal(sig[:32])
    if cheap is not None:
        raise Ed25519EncodingError(f"signature-r-{cheap}")
    if int.from_bytes(sig[32:], "little") >= L:
        raise Ed25519EncodingError("signature-s-out-of-range")


def check_signature_point(sig: bytes) -> None:
    """Stage 3, the costly half: ``R`` on the curve with ``[L]R`` the identity.

    The identity ``R`` is permitted (§6.4); every other small-order ``R``,
    a mixed-order ``R`` and an off-curve ``R`` are not. Assumes
    ``check_signature_encoding`` passed.
    """
    r = sig[:32]
    if r == IDENTITY_ENCODING:
        return
    if not _sodium.crypto_core_ed25519_is_valid_point(r):
        raise Ed25519EncodingError(f"signature-r-{_refusal(r)}")


def check_signature(sig: bytes) -> None:
    """The whole stage-3 signature rule of §6.4."""
    check_signature_encoding(sig)
    check_signature_point(sig)


def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """``[S]B = R + [k]A``; False on any mismatch or malformed input.

    The key must have passed ``check_public_key``. For ``R`` other than the
    identity libsodium evaluates the equation (it recomputes ``R`` from ``S``,
    ``k`` and ``A`` and compares encodings, refusing ``S >= L``, small-order
    ``R`` and a noncanonical or small-order ``A``); because ``A`` and any
    matching ``R`` are in the prime-order subgroup this is the §6.4 equation.
    """
    if len(signature) != 64 or len(public_key) != 32:
        return False
    if signature[:32] == IDENTITY_ENCODING:
        return _verify_identity_r(public_key, message, signature)
    try:
        _sodium.crypto_sign_open(signature + message, public_key)
    except (BadSignatureError, SodiumRuntimeError, ValueError):
        return False
    return True


def _verify_identity_r(public_key: bytes, message: bytes, signature: bytes) -> bool:
    # R = I, so the equation is [S]B = [k]A. Never an accidental pass: a
    # weak-key forgery (identity R with S = 0) holds only when [k]A = I,
    # which for a prime-order A means k = 0 mod L.
    s = int.from_bytes(signature[32:], "little")
    if s >= L:
        return False
    k = int.from_bytes(hashlib.sha512(signature[:32] + public_key + message).digest(), "little") % L
    if s == 0 or k == 0:
        # libsodium refuses a zero scalar (its result would be the identity):
        # [0]B = I, and [k]A = I exactly when k = 0 for a prime-order A.
        return s == 0 and k == 0
    try:
        sb = _sodium.crypto_scalarmult_ed25519_base_noclamp(s.to_bytes(32, "little"))
        ka = _sodium.crypto_scalarmult_ed25519_noclamp(k.to_bytes(32, "little"), public_key)
    except (SodiumRuntimeError, ValueError):
        return False
    return sb == ka


def public_key(seed: bytes) -> bytes:
    """The RFC 8032 public key of a 32-byte seed."""
    if len(seed) != 32:
        raise ValueError("an Ed25519 seed is 32 bytes")
    pk, _ = _sodium.crypto_sign_seed_keypair(seed)
    return bytes(pk)


def sign(seed: bytes, message: bytes) -> bytes:
    """The 64-byte RFC 8032 signature of ``message`` under the key of ``seed``."""
    if len(seed) != 32:
        raise ValueError("an Ed25519 seed is 32 bytes")
    _, sk = _sodium.crypto_sign_seed_keypair(seed)
    return bytes(_sodium.crypto_sign(message, sk)[:64])
