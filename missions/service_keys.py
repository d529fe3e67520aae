"""The Organization's service Principals and their signing keys (DESIGN §4).

Each Organization has a Group Authority (it signs every Event and snapshot)
and a control plane (it signs the Commands the server itself issues: expiries,
registration, uploads, session activation). Each is a ``service`` Principal
(an ``Agent`` row of kind ``service``) whose Ed25519 key lives in a DESIGN §4
key file under ``MWP_SERVICE_KEY_DIR``, mode 0600, and is bound in the Registry
when the Organization is created.

The Principal IDs are derived from the Organization's ID, so every process
finds the same ones; the keys are generated once, by whichever process first
needs them (an exclusive create, so two processes agree on one key).
"""

from __future__ import annotations

import json
import os
import uuid
from functools import cache
from pathlib import Path

from django.conf import settings

from mwportal.protocol.command import Key

GROUP_AUTHORITY = "group-authority"
CONTROL_PLANE = "control-plane"
ROLES = {GROUP_AUTHORITY: "Group Authority", CONTROL_PLANE: "Control plane"}


def principal_id(organization_id: str, role: str) -> str:
    """The bare UUID of the Organization's ``role`` service Principal."""
    if role not in ROLES:
        raise ValueError(f"no service role {role!r}")
    return str(uuid.uuid5(uuid.UUID(str(organization_id)), f"mwp:service:{role}"))


def key_dir() -> Path:
    return Path(settings.MWP_SERVICE_KEY_DIR)


def _path(organization_id: str, role: str) -> Path:
    return key_dir() / str(uuid.UUID(str(organization_id))) / f"{role}.json"


@cache
def service_key(organization_id: str, role: str) -> Key:
    """The ``role`` service's key for the Organization, created (0600) if absent."""
    organization_id = str(uuid.UUID(str(organization_id)))
    path = _path(organization_id, role)
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = Key.generate(("service", principal_id(organization_id, role)), organization_id)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process created it first: read theirs
        else:
            with os.fdopen(fd, "w") as fh:
                json.dump(key.as_file(), fh, indent=2)
    key = Key.from_file(path)
    if key.principal != ("service", principal_id(organization_id, role)):
        raise RuntimeError(f"{path}: the key file names another Principal")
    return key


def group_authority(organization_id: str) -> Key:
    return service_key(organization_id, GROUP_AUTHORITY)


def control_plane(organization_id: str) -> Key:
    return service_key(organization_id, CONTROL_PLANE)
