"""The normative schemas of the MWP 0.1 bundle, as python-jsonschema validators
(read from the bundle, never copied; ``format`` asserted).

``normative_problems(name, document)`` says what the bundle's
``schemas/<name>.schema.json`` finds wrong with a document the server sent;
tests call ``require_bundle()`` first so that they skip, with a reason, on a
clone without the bundle.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource

from tests.protocol.bundle import REPO


def _root() -> Path | None:
    env = os.environ.get("MWP_PROTOCOL_ROOT")
    root = Path(env) if env else REPO.parent / "shared" / "mwp-0.1"
    return root if (root / "schemas" / "error.schema.json").is_file() else None


def require_bundle() -> None:
    if _root() is None:
        pytest.skip("no MWP 0.1 bundle (set MWP_PROTOCOL_ROOT) to validate against its schemas")


@cache
def _schemas() -> dict[str, Any]:
    root = _root()
    if root is None:
        return {}
    return {p.name: json.loads(p.read_text()) for p in (root / "schemas").glob("*.schema.json")}


@cache
def normative_validator(name: str) -> Draft202012Validator | None:
    """The validator of the bundle's ``schemas/<name>.schema.json`` (its references
    resolved), or None when no bundle is present."""
    schemas = _schemas()
    if not schemas:
        return None
    registry: Registry[Any] = Registry().with_resources(
        (schema["$id"], Resource.from_contents(schema)) for schema in schemas.values()
    )
    return Draft202012Validator(schemas[f"{name}.schema.json"], registry=registry, format_checker=FormatChecker())


def normative_problems(name: str, document: Any) -> list[str]:
    """What the normative ``name`` schema says is wrong with ``document`` ([] when
    valid, or when no bundle is present: callers that need the bundle skip first)."""
    validator = normative_validator(name)
    if validator is None:
        return []
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def error_validator() -> Draft202012Validator | None:
    return normative_validator("error")


def normative_errors(document: Any) -> list[str]:
    """What the normative error schema says is wrong with ``document``."""
    return normative_problems("error", document)
