"""What handlers raise to refuse a Command.

Payload shapes are the catalogue's (``mwportal.protocol.catalogue``): ``accept()``
validates every payload before a handler runs, so a handler checks only what a
schema cannot (the state, the Registry, the rules of §7-§8), and names the
member it refuses as a JSON Pointer into the Command (``/payload/...``).
"""

from __future__ import annotations

from typing import Any

from mwportal.protocol import ErrorCode, ProtocolError


def refuse(code: ErrorCode, message: str, **details: Any) -> ProtocolError:
    """A ``ProtocolError`` for ``raise refuse(...)`` in handlers; ``details`` go in the error document."""
    return ProtocolError(code, message, details=details)
