"""A small vocabulary for writing the project's JSON Schema 2020-12 documents in Python.

Every builder returns a plain ``dict`` (JSON Schema), so what is compiled and
what is published (``json_schema(name)``) is the same value.  The helpers name
the shapes the MWP objects repeat: closed objects, references to the common
definitions, "if this member has that value then ..." conditionals.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

BASE = "https://missionweave.example/schemas/0.1/"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def schema_id(name: str) -> str:
    return BASE + name


def ref(name: str, definition: str | None = None) -> Schema:
    """A reference to another of our schemas, or to one of its ``$defs``."""
    target = schema_id(name)
    return {"$ref": target if definition is None else f"{target}#/$defs/{definition}"}


def c(definition: str) -> Schema:
    """A reference to one of the common definitions (``common`` schema)."""
    return ref("common", definition)


def local(definition: str) -> Schema:
    """A reference to a definition in the same schema's ``$defs``."""
    return {"$ref": f"#/$defs/{definition}"}


def document(name: str, body: Schema, defs: dict[str, Schema] | None = None) -> Schema:
    """A top-level schema resource with our own ``$id``."""
    out: Schema = {"$schema": DIALECT, "$id": schema_id(name)}
    if defs:
        out["$defs"] = defs
    out.update(body)
    return out


def obj(
    required: dict[str, Schema],
    optional: dict[str, Schema] | None = None,
    *,
    closed: bool = True,
    **more: Any,
) -> Schema:
    """An object with these members; unknown members refused unless ``closed=False``."""
    out: Schema = {"type": "object"}
    if closed:
        out["additionalProperties"] = False
    if required:
        out["required"] = list(required)
    out["properties"] = {**required, **(optional or {})}
    out.update(more)
    return out


def open_object() -> Schema:
    """Any JSON object (a payload, details, constraints)."""
    return {"type": "object"}


def string(
    *,
    min_length: int | None = None,
    max_length: int | None = None,
    pattern: str | None = None,
    fmt: str | None = None,
) -> Schema:
    out: Schema = {"type": "string"}
    if fmt is not None:
        out["format"] = fmt
    if pattern is not None:
        out["pattern"] = pattern
    if min_length is not None:
        out["minLength"] = min_length
    if max_length is not None:
        out["maxLength"] = max_length
    return out


def uri() -> Schema:
    return string(fmt="uri")


def text(max_length: int, min_length: int | None = 1) -> Schema:
    """Human-readable text; non-empty unless ``min_length=None``."""
    return string(min_length=min_length, max_length=max_length)


def array(items: Schema, *, min_items: int | None = None, unique: bool = False) -> Schema:
    out: Schema = {"type": "array", "items": items}
    if min_items is not None:
        out["minItems"] = min_items
    if unique:
        out["uniqueItems"] = True
    return out


def ids(*, min_items: int | None = None, unique: bool = True) -> Schema:
    """An array of identifiers."""
    return array(c("id"), min_items=min_items, unique=unique)


def hashes(*, min_items: int | None = None) -> Schema:
    """A set of content hashes."""
    return array(c("sha256"), min_items=min_items, unique=True)


def enum(*values: Any) -> Schema:
    return {"enum": list(values)}


def const(value: Any) -> Schema:
    return {"const": value}


def boolean() -> Schema:
    return {"type": "boolean"}


def number(*, minimum: float | None = None, maximum: float | None = None) -> Schema:
    out: Schema = {"type": "number"}
    if minimum is not None:
        out["minimum"] = minimum
    if maximum is not None:
        out["maximum"] = maximum
    return out


def any_of(*options: Schema) -> Schema:
    return {"anyOf": list(options)}


def one_of(*options: Schema) -> Schema:
    return {"oneOf": list(options)}


def all_of(*parts: Schema) -> Schema:
    return {"allOf": list(parts)}


# --- conditionals --------------------------------------------------------------------------


def where(**members: Schema) -> Schema:
    """Holds when each named member is present and matches its schema (an ``if`` test)."""
    return {"properties": dict(members), "required": list(members)}


def shaped(**members: Schema) -> Schema:
    """Constrains named members where present, requiring none of them."""
    return {"properties": dict(members)}


def has(*names: str) -> Schema:
    return {"required": list(names)}


def lacks(name: str) -> Schema:
    return {"not": {"required": [name]}}


def none_of(*names: str) -> Schema:
    """None of these members is present."""
    return {"not": {"anyOf": [{"required": [n]} for n in names]}}


def when(condition: Schema, then: Schema, otherwise: Schema | None = None) -> Schema:
    out: Schema = {"if": condition, "then": then}
    if otherwise is not None:
        out["else"] = otherwise
    return out


def merge(*parts: Schema) -> Schema:
    """One schema holding every keyword of the parts (their keys must not overlap)."""
    out: Schema = {}
    for part in parts:
        overlap = out.keys() & part.keys()
        if overlap:
            raise ValueError(f"keywords given twice: {sorted(overlap)}")
        out.update(part)
    return out
