"""Ed25519 keys and signatures over canonical JSON (DESIGN §4).

Keys and signatures travel as base64url without padding; public and private
keys are the raw 32-byte forms. A signature covers the RFC 8785 bytes of the
signed object without its ``signature`` member.
"""

from __future__ import annotations

import functools
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError

from .canonical import signing_bytes as signing_bytes  # the kernel's one (jcs.signing_bytes), re-exported
from .values import b64url_decode as b64url_decode  # one base64url for the kernel (§2), re-exported
from .values import b64url_encode as b64url_encode


def generate_keypair() -> tuple[str, str]:
    """A fresh ``(private_key, public_key)`` pair, both base64url raw bytes."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return b64url_encode(private), b64url_encode(public)


def public_key_of(private_key: str) -> str:
    key = Ed25519PrivateKey.from_private_bytes(b64url_decode(private_key))
    return b64url_encode(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))


def load_public_key(public_key: str) -> Ed25519PublicKey:
    """The key object of a b64url public key; ValueError if it is not one.

    Cached: every signed Command of an Agent verifies with the same key, and
    decoding it each time costs a fifth of the verification.
    """
    if not isinstance(public_key, str):
        raise ValueError("a public key is b64url text")
    return _load_public_key(public_key)


@functools.lru_cache(maxsize=4096)
def _load_public_key(public_key: str) -> Ed25519PublicKey:
    raw = b64url_decode(public_key)
    if len(raw) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    return Ed25519PublicKey.from_public_bytes(raw)


def sign(private_key: str, obj: dict[str, Any]) -> str:
    key = Ed25519PrivateKey.from_private_bytes(b64url_decode(private_key))
    return b64url_encode(key.sign(signing_bytes(obj)))


def sign_bytes(private_key: str, payload: bytes) -> str:
    key = Ed25519PrivateKey.from_private_bytes(b64url_decode(private_key))
    return b64url_encode(key.sign(payload))


def verify(public_key: str, obj: dict[str, Any], signature: str) -> bool:
    """True when ``signature`` is ``public_key``'s signature of ``obj``."""
    return verify_bytes(public_key, signing_bytes(obj), signature)


@functools.lru_cache(maxsize=4096)
def _raw_public_key(public_key: str) -> bytes:
    # Through the key object: a key cryptography refuses is refused here too.
    return load_public_key(public_key).public_bytes(Encoding.Raw, PublicFormat.Raw)


def verify_bytes(public_key: str, payload: bytes, signature: str) -> bool:
    """True when ``signature`` is ``public_key``'s Ed25519 signature of ``payload``.

    The check itself is libsodium's (PyNaCl), which releases the interpreter
    lock while it works: every signed Command is verified on the server, and
    cryptography's verification (OpenSSL) holds the lock for its 60 µs, a
    sixth of a Command's Python time, during which no other request thread
    of the process runs. Keys, signing and everything else stay with
    cryptography; both implement RFC 8032, and libsodium additionally
    refuses small-order keys and non-canonical signatures, which no honest
    signer produces.
    """
    if not isinstance(public_key, str):
        return False
    try:
        key = _raw_public_key(public_key)
        raw = b64url_decode(signature)
    except ValueError:
        return False
    if len(raw) != _SIGNATURE_BYTES:
        return False
    try:
        crypto_sign_open(raw + payload, key)
    except (BadSignatureError, ValueError):
        return False
    return True


_SIGNATURE_BYTES = 64


def signed(private_key: str, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with its ``signature`` member set: what a client sends."""
    return {**obj, "signature": sign(private_key, obj)}
