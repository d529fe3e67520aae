"""The Organization's service Principals and their signing keys (DESIGN §4).

Each Organization has a Group Authority (it signs every Event and snapshot)
and a control plane (it signs the Commands the server itself issues: expiries,
registration, uploads, session activation). Each is a ``service`` Principal
(an ``Agent`` row of kind ``service``) whose Ed25519 key lives in a DESIGN §4
key file under ``MWP_SERVICE_KEY_DIR``, mode 0600, and is bound in the Registry
when the Organization is created.

Each Organization also owns Agent Principals that do one job for its services
(``AGENTS``): the context packager generates and signs the Context Package a
replacement Coordinator receives (§7.2, §13.3: ``context-package.schema.json``
names an ``agent`` as its generator, so a service may not sign one). It is an
``Agent`` row of kind ``agent`` with no Agent Card and no Session: it issues no
Command, it only signs that document. Its key file lives beside the services'
and is bound in the Registry with the Organization, or on first use for an
Organization made before it existed (``missions.handlers.organization``).

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
CONTEXT_PACKAGER = "context-packager"
# The Organization-owned Agent Principals, by role: their wire actor type is ``agent``.
AGENTS = {CONTEXT_PACKAGER: "Context packager"}


def principal_type(role: str) -> str:
    """The wire actor type of the Organization's ``role`` Principal: ``service`` or ``agent``."""
    if role in ROLES:
        return "service"
    if role in AGENTS:
        return "agent"
    raise ValueError(f"no service role {role!r}")


def principal_id(organization_id: str, role: str) -> str:
    """The bare UUID of the Organization's ``role`` Principal (a service, or an Organization-owned Agent)."""
    return str(uuid.uuid5(uuid.UUID(str(organization_id)), f"mwp:{principal_type(role)}:{role}"))


def key_dir() -> Path:
    return Path(settings.MWP_SERVICE_KEY_DIR)


def _path(organization_id: str, role: str) -> Path:
    return key_dir() / str(uuid.UUID(str(organization_id))) / f"{role}.json"


@cache
def service_key(organization_id: str, role: str) -> Key:
    """The ``role`` Principal's key for the Organization, created (0600) if absent."""
    organization_id = str(uuid.UUID(str(organization_id)))
    path = _path(organization_id, role)
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = Key.generate((principal_type(role), principal_id(organization_id, role)), organization_id)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process created it first: read theirs
        else:
            with os.fdopen(fd, "w") as fh:
                json.dump(key.as_file(), fh, indent=2)
    key = Key.from_file(path)
    if key.principal != (principal_type(role), principal_id(organization_id, role)):
        raise RuntimeError(f"{path}: the key file names another Principal")
    return key


def group_authority(organization_id: str) -> Key:
    return service_key(organization_id, GROUP_AUTHORITY)


def control_plane(organization_id: str) -> Key:
    return service_key(organization_id, CONTROL_PLANE)


def context_packager(organization_id: str) -> Key:
    return service_key(organization_id, CONTEXT_PACKAGER)
