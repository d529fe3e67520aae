"""Principals with a key of their own, as the bootstrap CLI and the demo make them (DESIGN §4).

``enrol_key`` registers a Principal through the control plane
(``missions.commands.register_principal``) with the public half of a new
Ed25519 key, bound in the Registry under the ``urn:uuid:`` key ID the
Registry names, and returns
the ``Key`` naming the Principal and its Organization: what ``Key.write``
saves as a key file (mode 0600). The private seed never leaves this process
except into that file.
"""

from __future__ import annotations

from pathlib import Path

from missions.commands import register_principal
from missions.models import Agent, Organization
from mwportal.protocol.command import Key


def enrol_key(org_slug: str, name: str, kind: str, roles: list[str], user: str | None = None) -> Key:
    """Register a Principal (``kind`` ``agent`` or ``person``) with a new key; its ``Key``."""
    org = Organization.objects.get(slug=org_slug)
    unbound = Key.generate()
    principal_id, key_id = register_principal(org_slug, name, kind, roles, unbound.public_key, user)
    if key_id is None:
        raise RuntimeError(f"the Registry bound no key for {name}")
    return Key(key_id, unbound.seed, (Agent.ACTOR_TYPES[kind], principal_id), str(org.id))


def reuse_key(path: Path) -> Key | None:
    """The key in ``path`` if its Principal is still registered here, else None."""
    if not path.exists():
        return None
    try:
        key = Key.from_file(path)
    except (ValueError, KeyError, TypeError):
        return None
    if key.principal is None or not Agent.objects.filter(id=key.principal[1]).exists():
        return None
    return key
