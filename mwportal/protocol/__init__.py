"""The framework-free protocol kernel: canonical JSON, signatures, documents,
the hash chain and error codes. Nothing here imports Django."""

# Not the catalogue: it compiles about a hundred payload schemas (100 ms) and
# no running process needs it yet; ``from mwportal.protocol import catalogue``
# loads it where it is wanted.
from . import jcs, strictjson
from .canonical import CanonicalizationError, canonicalize, loads_strict
from .chain import GENESIS_HASH, event_hash, first_break
from .errors import HTTP_STATUS, ErrorCode, ProtocolError, malformed
from .fields import MAX_COMMAND_BYTES, attempt_key, format_time, parse_time, parse_uuid
from .jcs import DataModelError, sha256_hash, signing_hash
from .signing import b64url_decode, b64url_encode, generate_keypair, sign, verify
from .strictjson import StrictJSONError

__all__ = [
    "GENESIS_HASH",
    "HTTP_STATUS",
    "MAX_COMMAND_BYTES",
    "CanonicalizationError",
    "DataModelError",
    "ErrorCode",
    "ProtocolError",
    "StrictJSONError",
    "attempt_key",
    "b64url_decode",
    "b64url_encode",
    "canonicalize",
    "event_hash",
    "first_break",
    "format_time",
    "generate_keypair",
    "jcs",
    "loads_strict",
    "malformed",
    "parse_time",
    "parse_uuid",
    "sha256_hash",
    "sign",
    "signing_hash",
    "strictjson",
    "verify",
]
