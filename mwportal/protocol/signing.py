"""Ed25519 keys and signatures over canonical JSON, for the server's Commands.

Keys and signatures travel as base64url without padding (§2); public and
private keys are the raw 32-byte forms (the private key is the RFC 8032
seed). A signature covers the RFC 8785 bytes of the signed object without
its top-level ``signature`` member.

There is one signer and one verifier in the kernel, ``ed25519.py``: these
functions are its text-keyed front for the callers that hold base64url keys.
A public key is checked the §6.4 way (canonical, on the curve, not the
identity, prime order) once per key, and a signature the §6.4 way (64 bytes,
canonical ``R`` of prime order or the identity, ``S < L``) every time.
"""

from __future__ import annotations

import os
from typing import Any

from . import ed25519
from .canonical import signing_bytes as signing_bytes  # the kernel's one (jcs.signing_bytes), re-exported
from .values import b64url_decode as b64url_decode  # one base64url for the kernel (§2), re-exported
from .values import b64url_encode as b64url_encode


def generate_keypair() -> tuple[str, str]:
    """A fresh ``(private_key, public_key)`` pair, both base64url raw bytes."""
    seed = os.urandom(32)
    return b64url_encode(seed), b64url_encode(ed25519.public_key(seed))


def public_key_of(private_key: str) -> str:
    return b64url_encode(ed25519.public_key(b64url_decode(private_key)))


def load_public_key(public_key: str) -> bytes:
    """The raw 32 bytes of a base64url public key; ValueError if §6.4 refuses it.

    The strict point check is ``ed25519.public_key_fault``'s, cached per key:
    every signed Command of an Agent verifies with the same key.
    """
    if not isinstance(public_key, str):
        raise ValueError("a public key is b64url text")
    raw = b64url_decode(public_key)
    if len(raw) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    fault = ed25519.public_key_fault(raw)
    if fault is not None:
        raise ValueError(f"not a valid Ed25519 public key ({fault})")
    return raw


def sign(private_key: str, obj: dict[str, Any]) -> str:
    return sign_bytes(private_key, signing_bytes(obj))


def sign_bytes(private_key: str, payload: bytes) -> str:
    return b64url_encode(ed25519.sign(b64url_decode(private_key), payload))


def verify(public_key: str, obj: dict[str, Any], signature: str) -> bool:
    """True when ``signature`` is ``public_key``'s signature of ``obj``."""
    return verify_bytes(public_key, signing_bytes(obj), signature)


def verify_bytes(public_key: str, payload: bytes, signature: str) -> bool:
    """True when ``signature`` is ``public_key``'s Ed25519 signature of ``payload``.

    The equation is libsodium's (through ``ed25519.verify``), which releases
    the interpreter lock while it works: every signed Command is verified on
    the server, and no other request thread of the process should wait on it.
    """
    if not isinstance(public_key, str) or not isinstance(signature, str):
        return False
    try:
        key = load_public_key(public_key)
        raw = b64url_decode(signature)
        # The cheap half of stage 3 only: when the equation holds, libsodium has
        # recomputed R from S, k and a prime-order A, so R is canonical and of
        # prime order; the costly point check could only turn a pass into a
        # refusal that the equation already gives (see verification.py).
        ed25519.check_signature_encoding(raw)
    except (ValueError, ed25519.Ed25519EncodingError):
        return False
    return ed25519.verify(key, payload, raw)
