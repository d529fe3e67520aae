"""The structural bundle: ``conformance/manifest.json``, 58 vectors.

Each entry names a normative schema file, an instance and whether the
instance is valid. The instance's exact bytes go through the kernel's strict
JSON reader and then the project's own validator for that object
(``schemas.validate(name, doc)``, ``name`` the schema file's stem); the
evaluation passes when the verdict equals the declared one. A parse failure
is an "invalid" verdict. Anything else the kernel raises is reported, never
counted as a verdict.

The kernel is reached through its module attributes at call time, so a test
that replaces ``schemas.validate`` sees its replacement used here.
"""

from __future__ import annotations

import re
from typing import Any

from . import kernel
from .files import BundleError, BundleFiles
from .report import Outcome

BUNDLE = "structural"
_SCHEMA_PATH = re.compile(r"schemas/([a-z0-9][a-z0-9-]*)\.schema\.json")


def read_manifest(files: BundleFiles) -> list[dict[str, Any]]:
    doc = files.load_json("conformance/manifest.json")
    if not isinstance(doc, list) or not doc:
        raise BundleError("conformance/manifest.json: not a non-empty array")
    for i, entry in enumerate(doc):
        if (
            not isinstance(entry, dict)
            or set(entry) != {"name", "schema", "instance", "valid"}
            or not isinstance(entry["valid"], bool)
            or not isinstance(entry["schema"], str)
            or _SCHEMA_PATH.fullmatch(entry["schema"]) is None
        ):
            raise BundleError(f"conformance/manifest.json entry {i}: not {{name, schema, instance, valid}}")
    return doc


def evaluation_id(entry: dict[str, Any]) -> str:
    # "conformance/vectors/valid/command.json" -> "valid/command": unique,
    # and it says where the vector lives.
    instance = str(entry["instance"])
    stem = instance.removeprefix("conformance/vectors/")
    return stem.removesuffix(".json")


def run(files: BundleFiles) -> list[Outcome]:
    try:
        manifest = read_manifest(files)
    except BundleError as exc:
        return [Outcome(BUNDLE, "manifest", False, "a readable conformance/manifest.json", str(exc))]
    absent = kernel.missing(kernel.STRUCTURAL)
    if absent:
        return [Outcome(BUNDLE, evaluation_id(e), False, _verdict(e["valid"]), absent) for e in manifest]
    outcomes = []
    for entry in manifest:
        eid = evaluation_id(entry)
        expected = _verdict(entry["valid"])
        try:
            outcomes.append(_evaluate(files, eid, entry))
        except BundleError as exc:
            outcomes.append(Outcome(BUNDLE, eid, False, expected, f"unreadable: {exc}"))
        except Exception as exc:  # a crash is a failure, whatever the expected verdict
            outcomes.append(Outcome(BUNDLE, eid, False, expected, f"{type(exc).__name__}: {exc}"))
    return outcomes


def _evaluate(files: BundleFiles, eid: str, entry: dict[str, Any]) -> Outcome:
    from mwportal.protocol import schemas, strictjson

    expected = _verdict(entry["valid"])
    match = _SCHEMA_PATH.fullmatch(entry["schema"])
    assert match is not None  # read_manifest checked it
    name = match.group(1)
    data = files.read_bytes(entry["instance"])
    try:
        doc = strictjson.parse(data)
    except strictjson.StrictJSONError as exc:
        actual, why = "invalid", f"invalid (parse: {exc.reason})"
    else:
        try:
            schemas.validate(name, doc)
        except schemas.SchemaError as exc:
            actual, why = "invalid", "invalid (" + "; ".join(exc.errors[:3]) + ")"
        else:
            actual, why = "valid", "valid"
    return Outcome(BUNDLE, eid, actual == expected, f"{expected} against {name}", why)


def _verdict(valid: Any) -> str:
    return "valid" if valid is True else "invalid"
