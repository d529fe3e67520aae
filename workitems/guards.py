"""The content-hash guard the blob store shares (``artifacts/store.py`` re-exports it).

Every other WorkItem payload is checked by the catalogue's schemas
(``mwportal.protocol.catalogue``) and the handlers' rules; this module keeps
only the bare hex digest check of the store, which sits below ``artifacts``.
"""

from __future__ import annotations

import re

from mwportal.protocol import ErrorCode, ProtocolError

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def check_sha256(value: object, field: str = "sha256") -> str:
    if not isinstance(value, str) or not SHA256_RE.match(value):
        raise ProtocolError(
            ErrorCode.SCHEMA_VALIDATION_FAILED, f"{field}: must be 64 lower-case hex digits", details={"field": field}
        )
    return value
