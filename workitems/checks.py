"""Deterministic checks a Work Contract declares per acceptance criterion (spec 13.2).

They live with the contract, whose validator refuses an unknown kind or a bad
declaration; the review pipeline above (``artifacts/review.py``) runs them.

A contract declares them per acceptance criterion in ``constraints.checks``
(the normative criterion object is closed; ``contract.declared_checks``)::

    "constraints": {"checks": {"valid": [
        {"kind": "json_schema", "schema": {...}},
        {"kind": "size", "max_bytes": 1048576, "media_type": "text/csv"}]}}

Each check runs over the Artifacts of the submission that the criterion's
Evidence cites (all submitted Artifacts when none is cited), narrowed by an
optional ``media_type``. A check sees only Artifacts whose bytes were just
verified against their hash; an Artifact that failed integrity fails every
check that needed it.

Built-in kinds:

- ``json_schema`` (stage ``schema``): ``{"schema": <JSON Schema>}``; each
  Artifact parses as JSON and validates. A document nested deeper than
  ``MAX_JSON_DEPTH`` arrays and objects fails, saying so (issue 16 item 7):
  parsing and validating it would recurse past Python's stack, and how deep
  that is depends on where the pipeline runs, so a fixed bound keeps the
  outcome deterministic;
- ``checksum``: ``{"sha256": "sha256:<hex>"}``; one of the Artifacts is exactly these bytes;
- ``size``: ``{"min_bytes"?, "max_bytes"?}``; every Artifact's size is within;
- ``media_type``: ``{"allowed": [types]}``; every Artifact's media type is listed.

**Adding a kind** (in code): build a ``CheckKind`` with a JSON Schema for its
declaration and a ``run(spec, subjects) -> Outcome`` function, and call
``register_check`` from an app's ``ready()`` (or at import of a module that
``ready()`` imports). The contract validator then accepts the kind, and the
pipeline runs it in its stage. ``run`` must be deterministic and must not
write anything: the pipeline records its outcome through ``accept()``. A
``run`` that raises, or returns something other than an ``Outcome`` with a
known result and JSON details, is recorded as a failed check naming the
error (``run_check``): a check never leaves a review unrecorded.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from mwportal.protocol import canonicalize

log = logging.getLogger("missions.review")
# Arrays and objects, one inside the other, a json_schema check accepts.
MAX_JSON_DEPTH = 64
RESULTS = ("pass", "fail", "inconclusive")


@dataclass(frozen=True)
class Subject:
    """One Artifact as a check sees it; ``read(limit)`` returns its verified
    bytes, or None when they are over ``limit`` or failed integrity."""

    sha256: str
    media_type: str
    size: int
    integrity: str
    read: Callable[[int], bytes | None]


@dataclass(frozen=True)
class Outcome:
    result: str  # pass | fail | inconclusive
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckKind:
    kind: str
    stage: str  # "schema" or "deterministic"
    declaration: dict[str, Any]  # JSON Schema of the check's members besides kind/media_type
    run: Callable[[dict[str, Any], list[Subject]], Outcome]


CHECKS: dict[str, CheckKind] = {}


def register_check(kind: CheckKind) -> CheckKind:
    """Make ``kind`` available to contracts and the pipeline."""
    if kind.stage not in ("schema", "deterministic"):
        raise ValueError("a check runs in the schema or the deterministic stage")
    CHECKS[kind.kind] = kind
    return kind


class CheckInvalid(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def check_spec(spec: Any, where: str) -> dict[str, Any]:
    """A check declaration of a contract, else ``CheckInvalid`` naming the field."""
    if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str):
        raise CheckInvalid(where, "must be an object with a kind")
    kind = CHECKS.get(spec["kind"])
    if kind is None:
        raise CheckInvalid(f"{where}/kind", f"unknown check kind; known: {', '.join(sorted(CHECKS))}")
    if "media_type" in spec and not isinstance(spec["media_type"], str):
        raise CheckInvalid(f"{where}/media_type", "must be a media type")
    rest = {k: v for k, v in spec.items() if k not in ("kind", "media_type")}
    errors = sorted(Draft202012Validator(kind.declaration).iter_errors(rest), key=lambda e: e.message)
    if errors:
        path = "/".join(str(p) for p in errors[0].absolute_path)
        raise CheckInvalid(f"{where}/{path}" if path else where, errors[0].message)
    return spec


def _integrity_failures(subjects: list[Subject]) -> dict[str, str]:
    return {s.sha256: s.integrity for s in subjects if s.integrity != "verified"}


def json_depth(value: Any) -> int:
    """How many arrays and objects nest in ``value`` at its deepest (walked
    without recursion, so any parsed document can be measured)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


TOO_DEEP = f"nested deeper than {MAX_JSON_DEPTH} arrays and objects"


def _json_schema(spec: dict[str, Any], subjects: list[Subject]) -> Outcome:
    validator = Draft202012Validator(spec["schema"])
    problems: dict[str, str] = {}
    for s in subjects:
        raw = s.read(settings.MWP_REVIEW_JSON_MAX_BYTES)
        if raw is None:
            problems[s.sha256] = f"integrity {s.integrity}" if s.integrity != "verified" else "too large to parse"
            continue
        try:
            value = json.loads(raw)
        except RecursionError:
            # Deeper than the parser's stack: far past MAX_JSON_DEPTH, and
            # the same answer as a document it could parse at that depth.
            problems[s.sha256] = TOO_DEEP
            continue
        except ValueError as exc:
            problems[s.sha256] = f"not JSON: {exc}"[:500]
            continue
        if json_depth(value) > MAX_JSON_DEPTH:
            problems[s.sha256] = TOO_DEEP
            continue
        error = next(iter(sorted(validator.iter_errors(value), key=lambda e: e.message)), None)
        if error is not None:
            path = "/".join(str(p) for p in error.absolute_path)
            problems[s.sha256] = f"at /{path}: {error.message}"[:500]
    return Outcome("fail" if problems else "pass", {"problems": problems})


def _hex(sha: str) -> str:
    return sha.removeprefix("sha256:")


def _checksum(spec: dict[str, Any], subjects: list[Subject]) -> Outcome:
    wanted = _hex(spec["sha256"])
    found = [s.sha256 for s in subjects if _hex(s.sha256) == wanted and s.integrity == "verified"]
    return Outcome("pass" if found else "fail", {"expected": spec["sha256"], "verified": found})


def _size(spec: dict[str, Any], subjects: list[Subject]) -> Outcome:
    low, high = spec.get("min_bytes", 0), spec.get("max_bytes")
    outside = {s.sha256: s.size for s in subjects if s.size < low or (high is not None and s.size > high)}
    bad = _integrity_failures(subjects)
    return Outcome(
        "fail" if outside or bad else "pass",
        {"min_bytes": low, "max_bytes": high, "outside": outside, "integrity": bad},
    )


def _media_type(spec: dict[str, Any], subjects: list[Subject]) -> Outcome:
    outside = {s.sha256: s.media_type for s in subjects if s.media_type not in spec["allowed"]}
    bad = _integrity_failures(subjects)
    return Outcome(
        "fail" if outside or bad else "pass", {"allowed": spec["allowed"], "outside": outside, "integrity": bad}
    )


def _check_schema_itself(spec: dict[str, Any]) -> None:
    try:
        Draft202012Validator.check_schema(spec)
    except SchemaError as exc:
        raise CheckInvalid("schema", exc.message) from None


_SHA = {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}
_BYTES = {"type": "integer", "minimum": 0}

register_check(
    CheckKind(
        "json_schema",
        "schema",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["schema"],
            "properties": {"schema": {"type": "object"}},
        },
        _json_schema,
    )
)
register_check(
    CheckKind(
        "checksum",
        "deterministic",
        {"type": "object", "additionalProperties": False, "required": ["sha256"], "properties": {"sha256": _SHA}},
        _checksum,
    )
)
register_check(
    CheckKind(
        "size",
        "deterministic",
        {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "properties": {"min_bytes": _BYTES, "max_bytes": _BYTES},
        },
        _size,
    )
)
register_check(
    CheckKind(
        "media_type",
        "deterministic",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["allowed"],
            "properties": {"allowed": {"type": "array", "minItems": 1, "items": {"type": "string"}}},
        },
        _media_type,
    )
)


def run_check(kind: CheckKind, spec: dict[str, Any], subjects: list[Subject]) -> Outcome:
    """``kind.run(spec, subjects)``, or a failed Outcome naming what went
    wrong when it raised or returned something the pipeline cannot record
    (issue 16 item 7: a crash in one check must not leave the review pending
    forever). The error is logged with its traceback for the operator; the
    recorded reason names only its type and message."""
    try:
        outcome = kind.run(spec, subjects)
        if not isinstance(outcome, Outcome) or outcome.result not in RESULTS or not isinstance(outcome.details, dict):
            raise TypeError(f"returned {outcome!r:.200}, not an Outcome with a result of {', '.join(RESULTS)}")
        outcome = Outcome(outcome.result, _scrub(outcome.details))
        canonicalize(outcome.details)  # what review.record will have to carry
    except Exception as exc:  # any failure of a check is that check's outcome
        log.exception("check %s failed to run on %s", kind.kind, [s.sha256 for s in subjects])
        reason = f"the check could not run: {type(exc).__name__}: {exc}"[:500]
        return Outcome("fail", {"reason": _scrub(reason)})
    return outcome


def _scrub(value: Any) -> Any:
    """``value`` with every string made storable text: a NUL (which a
    PostgreSQL ``jsonb`` refuses) and a lone surrogate (which is not Unicode,
    so not canonical JSON) become visible escapes. A check's messages quote
    the Artifact's content, which the uploader chose."""
    if isinstance(value, str):
        return value.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


def validate_declared(spec: dict[str, Any], where: str) -> None:
    """Deeper checks of one declaration (a json_schema's schema must itself be valid)."""
    if spec["kind"] == "json_schema":
        try:
            _check_schema_itself(spec["schema"])
        except CheckInvalid as exc:
            raise CheckInvalid(f"{where}/schema", exc.message) from None
