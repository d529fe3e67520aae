"""The normative error schema of the MWP 0.1 bundle, as a python-jsonschema
validator (read from the bundle, never copied; ``format`` asserted)."""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource

from tests.protocol.bundle import REPO


def _root() -> Path | None:
    env = os.environ.get("MWP_PROTOCOL_ROOT")
    root = Path(env) if env else REPO.parent / "shared" / "mwp-0.1"
    return root if (root / "schemas" / "error.schema.json").is_file() else None


@cache
def error_validator() -> Draft202012Validator | None:
    """The validator of ``schemas/error.schema.json`` (its ``common.schema.json``
    references resolved), or None when no bundle is present."""
    root = _root()
    if root is None:
        return None
    schemas = {p.name: json.loads(p.read_text()) for p in (root / "schemas").glob("*.schema.json")}
    registry: Registry[Any] = Registry().with_resources(
        (schema["$id"], Resource.from_contents(schema)) for schema in schemas.values()
    )
    return Draft202012Validator(schemas["error.schema.json"], registry=registry, format_checker=FormatChecker())


def normative_errors(document: Any) -> list[str]:
    """What the normative schema says is wrong with ``document`` ([] when valid
    or when no bundle is present: callers that need the bundle skip first)."""
    validator = error_validator()
    if validator is None:
        return []
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]
