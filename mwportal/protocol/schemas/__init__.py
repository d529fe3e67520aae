"""The project's own JSON Schemas for the 21 MWP 0.1 objects and their common definitions.

Written in Python (``dsl``), compiled once with jsonschema-rs (a compiled
Draft 2020-12 validator: python-jsonschema validates a Command some 20 times
slower) and checked against the normative schemas by
``tests/protocol/test_schemas_agree.py``.

Every ``format`` is an assertion (PROTOCOL §2): ``uri`` is
:func:`values.is_absolute_uri` and ``date-time`` the §2 timestamp profile
:func:`values.is_timestamp`, so a leap second, year 0000 or ``-00:00`` fails
here, at the schema stage of §6.4.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import jsonschema_rs

from .. import values
from . import common, frames, signed, state
from .dsl import BASE, Schema, schema_id

__all__ = ["BASE", "COMMON", "NAMES", "SchemaError", "is_valid", "json_schema", "schema_id", "validate"]

COMMON = "common"

_OBJECTS: dict[str, Schema] = {**signed.SCHEMAS, **state.SCHEMAS, **frames.SCHEMAS}
_ALL: dict[str, Schema] = {COMMON: common.SCHEMA, **_OBJECTS}

NAMES: tuple[str, ...] = tuple(sorted(_OBJECTS))
"""The objects a document can be validated as (every normative schema but ``common``)."""

FORMATS = {"uri": values.is_absolute_uri, "date-time": values.is_timestamp}

_REGISTRY = jsonschema_rs.Registry([(schema["$id"], schema) for schema in _ALL.values()])

MAX_ERRORS = 20


class SchemaError(ValueError):
    """A document that its schema refuses; ``errors`` says where and why."""

    def __init__(self, name: str, errors: list[str]) -> None:
        self.name = name
        self.errors = errors
        super().__init__(f"not a valid {name}: " + "; ".join(errors[:3]))


def json_schema(name: str) -> Schema:
    """Our JSON Schema 2020-12 document for ``name`` (an object of ``NAMES`` or ``common``).

    A fresh copy: callers (the catalogue, OpenAPI) may annotate it freely.
    """
    try:
        return copy.deepcopy(_ALL[name])
    except KeyError:
        raise KeyError(f"no MWP 0.1 schema named {name!r}") from None


@functools.cache
def _validator(name: str) -> Any:
    if name not in _OBJECTS:
        raise KeyError(f"no MWP 0.1 object named {name!r}")
    return jsonschema_rs.Draft202012Validator(
        _OBJECTS[name],
        formats=FORMATS,
        validate_formats=True,
        ignore_unknown_formats=False,
        registry=_REGISTRY,
    )


def _pointer(path: Any) -> str:
    return "".join(f"/{str(part).replace('~', '~0').replace('/', '~1')}" for part in path)


def validate(name: str, document: Any) -> None:
    """Raise :class:`SchemaError` unless ``document`` is a valid ``name``."""
    validator = _validator(name)
    try:
        if validator.is_valid(document):
            return
        errors = []
        for error in validator.iter_errors(document):
            errors.append(f"{_pointer(error.instance_path) or '/'}: {error.message}")
            if len(errors) == MAX_ERRORS:
                break
    except ValueError as exc:
        # Only a value that is no JSON at all (a non-string member name, ...) gets here.
        raise SchemaError(name, [f"/: not JSON data ({exc})"]) from None
    raise SchemaError(name, errors)


def is_valid(name: str, document: Any) -> bool:
    validator = _validator(name)
    try:
        return bool(validator.is_valid(document))
    except ValueError:
        return False


def compile_all() -> None:
    """Compile every validator now rather than on first use (a server at start-up)."""
    for name in NAMES:
        _validator(name)
