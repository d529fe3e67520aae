"""The server's Ed25519 signing key (``MWP_SIGNING_KEY_FILE``), generated on first use."""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

from django.conf import settings

from mwportal.protocol import generate_keypair
from mwportal.protocol.signing import public_key_of


@cache
def server_keypair() -> tuple[str, str]:
    """``(private_key, public_key)``; the file is created 0600 if it does not exist."""
    path = Path(settings.MWP_SIGNING_KEY_FILE)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        private_key, public_key = generate_keypair()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process created it first; read theirs
        else:
            with os.fdopen(fd, "w") as fh:
                json.dump({"private_key": private_key, "public_key": public_key}, fh)
    data = json.loads(path.read_text())
    if public_key_of(data["private_key"]) != data["public_key"]:
        raise RuntimeError(f"{path}: the public key does not belong to the private key")
    return data["private_key"], data["public_key"]
