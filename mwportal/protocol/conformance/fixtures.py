"""Structural checks of the bundle's test fixtures, done before a case runs.

The cryptography bundle requires the fixture *structure* (Registry fixtures
and test-only signing-key fixtures) to be validated before a case is
evaluated. These checks are the project's own statement of those shapes:

- a Registry fixture is ``{organizationId, bindings}`` and nothing else;
  ``bindings`` holds 1-64 bindings ``{keyId, principal, algorithm,
  publicKey, validFrom, validityHistory}``; a principal is ``{type, id}``
  with ``type`` one of agent/human/service; a history holds at most 64
  statuses ``{sequence, recordedAt[, validUntil][, revokedAt]}``;
  identifier candidates are 1-512 characters, ``algorithm`` 1-64,
  ``publicKey`` 1-4096, timestamps 1-128, ``sequence`` an integer from 1 to
  2^53-1.
- a signing-key fixture is ``{testOnly: true, keyId, algorithm: "Ed25519",
  seed, publicKey}`` with a ``keyId`` that looks like an absolute URI (a
  scheme, a colon, no whitespace, at most 512 characters) and 43-character
  base64url seed and key.

Deliberately shallow for Registry fixtures: the negative cases carry values
(a relative organizationId, a keyId ending in a line feed, a padded public
key) that are *structurally* readable and must reach stage 3 or 4 of the
verification to be refused there. Nothing here normalizes a value.
"""

from __future__ import annotations

import re
from typing import Any

_MAX_SAFE_INTEGER = 2**53 - 1
_PRINCIPAL_TYPES = ("agent", "human", "service")
_BINDING_MEMBERS = ("keyId", "principal", "algorithm", "publicKey", "validFrom", "validityHistory")
_STATUS_REQUIRED = ("sequence", "recordedAt")
_STATUS_OPTIONAL = ("validUntil", "revokedAt")
_SIGNING_KEY_MEMBERS = ("testOnly", "keyId", "algorithm", "seed", "publicKey")
_B64URL_32 = re.compile(r"[A-Za-z0-9_-]{43}")
_URI_LIKE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S+")


def _members(value: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: not an object"]
    errors = [f"{where}: missing {name}" for name in required if name not in value]
    errors += [f"{where}: unexpected member {name!r}" for name in value if name not in required + optional]
    return errors


def _text(value: Any, where: str, low: int, high: int) -> list[str]:
    # JSON Schema string lengths count code points, as len() does.
    if not isinstance(value, str):
        return [f"{where}: not a string"]
    if not low <= len(value) <= high:
        return [f"{where}: length {len(value)} outside {low}..{high}"]
    return []


def _principal(value: Any, where: str) -> list[str]:
    errors = _members(value, where, ("type", "id"))
    if errors:
        return errors
    if value["type"] not in _PRINCIPAL_TYPES:
        errors.append(f"{where}/type: not one of {', '.join(_PRINCIPAL_TYPES)}")
    return errors + _text(value["id"], f"{where}/id", 1, 512)


def _status(value: Any, where: str) -> list[str]:
    errors = _members(value, where, _STATUS_REQUIRED, _STATUS_OPTIONAL)
    if errors:
        return errors
    sequence = value["sequence"]
    # JSON Schema's integer is any number with no fractional part (so 1.0
    # is one); bool is an int in Python but not a number in JSON.
    integral = isinstance(sequence, int) or (isinstance(sequence, float) and sequence.is_integer())
    if isinstance(sequence, bool) or not integral:
        errors.append(f"{where}/sequence: not an integer")
    elif not 1 <= sequence <= _MAX_SAFE_INTEGER:
        errors.append(f"{where}/sequence: outside 1..2^53-1")
    for name in ("recordedAt", *_STATUS_OPTIONAL):
        if name in value:
            errors += _text(value[name], f"{where}/{name}", 1, 128)
    return errors


def _binding(value: Any, where: str) -> list[str]:
    errors = _members(value, where, _BINDING_MEMBERS)
    if errors:
        return errors
    errors += _text(value["keyId"], f"{where}/keyId", 1, 512)
    errors += _principal(value["principal"], f"{where}/principal")
    errors += _text(value["algorithm"], f"{where}/algorithm", 1, 64)
    errors += _text(value["publicKey"], f"{where}/publicKey", 1, 4096)
    errors += _text(value["validFrom"], f"{where}/validFrom", 1, 128)
    history = value["validityHistory"]
    if not isinstance(history, list):
        errors.append(f"{where}/validityHistory: not an array")
    elif len(history) > 64:
        errors.append(f"{where}/validityHistory: more than 64 statuses")
    else:
        for i, status in enumerate(history):
            errors += _status(status, f"{where}/validityHistory/{i}")
    return errors


def registry_fixture_errors(doc: Any) -> list[str]:
    """Structural errors of a Registry fixture (empty when it is well formed)."""
    errors = _members(doc, "registry", ("organizationId", "bindings"))
    if errors:
        return errors
    errors += _text(doc["organizationId"], "registry/organizationId", 1, 512)
    bindings = doc["bindings"]
    if not isinstance(bindings, list):
        return [*errors, "registry/bindings: not an array"]
    if not 1 <= len(bindings) <= 64:
        errors.append(f"registry/bindings: {len(bindings)} bindings, not 1..64")
    for i, binding in enumerate(bindings):
        errors += _binding(binding, f"registry/bindings/{i}")
    return errors


def signing_key_fixture_errors(doc: Any) -> list[str]:
    """Structural errors of a test-only signing-key fixture."""
    errors = _members(doc, "signing key", _SIGNING_KEY_MEMBERS)
    if errors:
        return errors
    if doc["testOnly"] is not True:
        errors.append("signing key/testOnly: not true")
    key_id = doc["keyId"]
    if not isinstance(key_id, str) or len(key_id) > 512 or not _URI_LIKE.fullmatch(key_id):
        errors.append("signing key/keyId: not an absolute URI of at most 512 characters")
    if doc["algorithm"] != "Ed25519":
        errors.append("signing key/algorithm: not Ed25519")
    for name in ("seed", "publicKey"):
        if not isinstance(doc[name], str) or not _B64URL_32.fullmatch(doc[name]):
            errors.append(f"signing key/{name}: not 43 base64url characters")
    return errors
