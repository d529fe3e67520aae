"""The Worker's identity (its Agent's key file, DESIGN §4) and ``worker.toml``."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from mwportal.protocol.command import Key
from mwportal.protocol.errors import ProtocolError
from mwportal.protocol.ids import urn

from .errors import Fatal

log = logging.getLogger("mwworker")


@dataclass(frozen=True, slots=True)
class Identity:
    """The Worker's Agent: the DESIGN §4 key file (``manage.py mwp create-agent --out FILE``)::

        {"principal": {"type": "agent", "id": "urn:uuid:..."}, "organizationId": "urn:uuid:...",
         "keyId": "urn:uuid:...", "privateKey": "<base64url seed>", "publicKey": "<base64url>"}

    ``agent_id`` and ``organization`` are ``urn:uuid:`` URIs; ``key`` signs
    the HELLO challenge and every Command.
    """

    agent_id: str
    organization: str
    key: Key

    @classmethod
    def from_key_file(cls, path: str | Path) -> Identity:
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            raise Fatal(f"cannot read the key file {p}: {exc}") from None
        try:
            key = Key.from_data(data)
        except (KeyError, TypeError, ValueError, ProtocolError) as exc:
            raise Fatal(
                f"{p}: a key file holds principal {{type, id}}, organizationId, keyId, privateKey and publicKey ({exc})"
            ) from None
        if key.principal is None or key.principal[0] != "agent" or key.organization_id is None:
            raise Fatal(f"{p}: the key file's principal must be an agent")
        if p.stat().st_mode & 0o077:
            log.warning("key file %s is readable by others; it should be mode 0600", p)
        return cls(urn(key.principal[1]), urn(key.organization_id), key)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """``worker.toml``::

    [worker]
    portal = "http://127.0.0.1:8000"
    key_file = "wanda.json"          # relative paths are relative to the config file
    store = "wanda.sqlite3"
    capabilities = "mwworker.demo"   # a module with register(worker)
    slots = 2
    queue_limit = 8                  # optional: admission capacity (default 4 x slots)
    """

    portal: str
    key_file: Path
    store: Path
    capabilities: str | None = None
    slots: int = 2
    queue_limit: int | None = None

    @classmethod
    def load(cls, path: str | Path) -> WorkerConfig:
        import tomllib

        p = Path(path)
        try:
            raw = tomllib.loads(p.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise Fatal(f"cannot read {p}: {exc}") from None
        section = raw.get("worker", raw)
        unknown = set(section) - {"portal", "key_file", "store", "capabilities", "slots", "queue_limit"}
        if unknown:
            raise Fatal(f"{p}: unknown settings {sorted(unknown)}")
        for name in ("portal", "key_file", "store"):
            if not isinstance(section.get(name), str):
                raise Fatal(f"{p}: [worker] {name} is required (a string)")
        slots = section.get("slots", 2)
        if not isinstance(slots, int) or not 1 <= slots <= 1024:
            raise Fatal(f"{p}: slots must be an integer from 1 to 1024")
        base = p.parent
        return cls(
            portal=section["portal"].rstrip("/"),
            key_file=(base / section["key_file"]).resolve(),
            store=(base / section["store"]).resolve(),
            capabilities=section.get("capabilities"),
            slots=slots,
            queue_limit=section.get("queue_limit"),
        )
