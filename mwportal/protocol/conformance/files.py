"""Reading the bundle's files by their repository paths.

Every path a manifest names is a *repository path* (lower-case segments
that start with a letter or digit, joined by ``/``), so it can never climb
out of the bundle root with ``..`` or start at ``/``; a path outside that
grammar is refused before anything is opened. The runner's own JSON reader
(manifests and fixtures, never the documents under test, which go to the
kernel as exact bytes) refuses duplicate member names so a manifest cannot
say two things at once.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

# The manifests' repositoryPath grammar (cryptography and admission
# manifest schemas, $defs/repositoryPath): segments [a-z0-9][a-z0-9._-]*.
_REPOSITORY_PATH = re.compile(r"(?:[a-z0-9][a-z0-9._-]*/)*[a-z0-9][a-z0-9._-]*")


class BundleError(Exception):
    """A manifest or fixture could not be read as the bundle declares it."""


def is_repository_path(path: object) -> bool:
    return isinstance(path, str) and len(path) <= 512 and _REPOSITORY_PATH.fullmatch(path) is not None


def sha256_hex(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class BundleFiles:
    """The bundle root and its files, addressed by repository path."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, rel: object) -> Path:
        if not is_repository_path(rel):
            raise BundleError(f"not a repository path: {rel!r}")
        assert isinstance(rel, str)
        return self.root / rel

    def read_bytes(self, rel: object) -> bytes:
        path = self.path(rel)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise BundleError(f"{rel}: {exc.strerror or exc}") from exc

    def load_json(self, rel: object) -> Any:
        data = self.read_bytes(rel)
        try:
            return json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates)
        except (UnicodeDecodeError, ValueError) as exc:
            raise BundleError(f"{rel}: not JSON: {exc}") from exc


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate member {key!r}")
        out[key] = value
    return out
