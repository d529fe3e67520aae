"""The Work Contract (spec 10.1; DESIGN §4a) and its JSON Schema.

``check_contract(contract)`` returns the contract without server-assigned
members or raises WORK_CONTRACT_INCOMPLETE (a required member is missing) or
INVALID_COMMAND (present but wrong), naming the first bad field, with
``details.reason`` ``contract_invalid``. The schema is
served at ``/api/v1/schema/work-contract.json``.

A *material* change is any change of a field other than ``notes`` (prose may
supplement but never replaces the fields; spec 10.1): it increments the
contract revision and needs renewed Worker acceptance.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from mwportal.protocol import ErrorCode, ProtocolError, canonicalize

from .checks import CheckInvalid, check_spec, validate_declared
from .models import BUDGET_DIMENSIONS

_TEXT = {"type": "string", "minLength": 1, "maxLength": 10000}
_UUID = {"type": "string", "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"}
_TIME = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$"}
_NONNEG = {"type": "number", "minimum": 0}

EVIDENCE_METHODS = ("artifact_integrity", "schema", "deterministic_check", "test", "reviewer", "human", "other")

CONTRACT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "/api/v1/schema/work-contract.json",
    "title": "MissionWeave Work Contract",
    "type": "object",
    "additionalProperties": False,
    "required": [
        "goal",
        "deliverables",
        "acceptance_criteria",
        "inputs",
        "dependencies",
        "allowed",
        "resources",
        "capabilities",
        "deadline",
        "urgency",
        "business_impact",
        "budgets",
        "retry",
        "risk",
    ],
    "properties": {
        "revision": {"type": "integer", "minimum": 1, "description": "assigned by the Group Authority"},
        "goal": _TEXT,
        "deliverables": {"type": "array", "minItems": 1, "items": _TEXT},
        "acceptance_criteria": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id", "description", "evidence_methods"],
                "properties": {
                    "id": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"},
                    "description": _TEXT,
                    "evidence_methods": {"type": "array", "minItems": 1, "items": {"enum": list(EVIDENCE_METHODS)}},
                    # Deterministic checks the review pipeline runs for this
                    # criterion (spec 13.2); kinds: checks.py.
                    "checks": {
                        "type": "array",
                        "maxItems": 20,
                        "items": {"type": "object", "required": ["kind"], "properties": {"kind": {"type": "string"}}},
                    },
                },
            },
        },
        "inputs": {"type": "array", "items": {"type": "object"}},
        "dependencies": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["workitem", "policy"],
                "properties": {"workitem": _UUID, "policy": {"enum": ["verified", "submitted", "terminal"]}},
            },
        },
        "allowed": {
            "type": "object",
            "additionalProperties": False,
            "required": ["tools", "data", "operations"],
            "properties": {
                "tools": {"type": "array", "items": {"type": "string"}},
                "data": {"type": "array", "items": {"type": "string"}},
                "operations": {"type": "array", "items": {"type": "string"}},
            },
        },
        "resources": {"type": "object"},
        "capabilities": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id", "version"],
                "properties": {"id": {"type": "string", "minLength": 1}, "version": {"type": "string", "minLength": 1}},
            },
        },
        "deadline": {"anyOf": [_TIME, {"type": "null"}]},
        "urgency": {"enum": ["low", "normal", "high", "critical"]},
        "business_impact": {"enum": ["low", "medium", "high", "critical"]},
        "budgets": {
            "type": "object",
            "additionalProperties": False,
            "required": list(BUDGET_DIMENSIONS),
            "properties": {dim: {"anyOf": [_NONNEG, {"type": "null"}]} for dim in BUDGET_DIMENSIONS},
        },
        "retry": {
            "type": "object",
            "additionalProperties": False,
            "required": ["max_attempts", "backoff_seconds", "backoff_multiplier", "deadline", "max_cost"],
            "properties": {
                "max_attempts": {"type": "integer", "minimum": 1, "maximum": 100},
                "backoff_seconds": _NONNEG,
                "backoff_multiplier": {"type": "number", "minimum": 1, "maximum": 10},
                "deadline": {"anyOf": [_TIME, {"type": "null"}]},
                "max_cost": {"anyOf": [_NONNEG, {"type": "null"}]},
            },
        },
        "risk": {
            "type": "object",
            "additionalProperties": False,
            "required": ["class", "requires_execution_approval"],
            "properties": {
                "class": {"enum": ["low", "medium", "high", "critical"]},
                "requires_execution_approval": {"type": "boolean"},
            },
        },
        "notes": {"type": "string", "maxLength": 20000},
    },
}

_validator = Draft202012Validator(CONTRACT_SCHEMA, format_checker=FormatChecker())


def _field_of(error: Any) -> str:
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else ""
        path = f"{path}.{missing}" if path else missing
    elif error.validator == "additionalProperties" and "'" in error.message:
        extra = error.message.split("'")[1]
        path = f"{path}.{extra}" if path else extra
    return "contract" + (f".{path}" if path else "")


def check_contract(contract: Any) -> dict[str, Any]:
    """The validated contract (without ``revision``), else the refusal naming the field."""
    if not isinstance(contract, dict):
        raise _invalid(ErrorCode.INVALID_COMMAND, "contract: must be an object", "contract")
    errors = sorted(_validator.iter_errors(contract), key=lambda e: (len(list(e.absolute_path)), e.message))
    if errors:
        err = errors[0]
        field = _field_of(err)
        # §19: WORK_CONTRACT_INCOMPLETE is "required Work Contract information is missing".
        code = ErrorCode.WORK_CONTRACT_INCOMPLETE if err.validator == "required" else ErrorCode.INVALID_COMMAND
        raise _invalid(code, f"{field}: {err.message}", field)
    ids = [c["id"] for c in contract["acceptance_criteria"]]
    if len(set(ids)) != len(ids):
        raise _invalid(
            ErrorCode.INVALID_COMMAND,
            "contract.acceptance_criteria: ids must be distinct",
            "contract.acceptance_criteria",
        )
    _check_declared_checks(contract)
    return {k: v for k, v in contract.items() if k != "revision"}


def _invalid(code: ErrorCode, message: str, field: str) -> ProtocolError:
    return ProtocolError(code, message, details={"field": field, "reason": "contract_invalid"})


def _check_declared_checks(contract: dict[str, Any]) -> None:
    """Each declared check is a registered kind with a valid declaration."""
    for i, criterion in enumerate(contract["acceptance_criteria"]):
        for j, spec in enumerate(criterion.get("checks", [])):
            where = f"contract.acceptance_criteria.{i}.checks.{j}"
            try:
                check_spec(spec, where)
                validate_declared(spec, where)
            except CheckInvalid as exc:
                raise _invalid(ErrorCode.INVALID_COMMAND, str(exc), exc.field) from None


def is_material_change(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Anything but ``notes`` (and the server's ``revision``) changed."""

    def material(c: dict[str, Any]) -> bytes:
        return canonicalize({k: v for k, v in c.items() if k not in ("notes", "revision")})

    return material(old) != material(new)


def requires_approval(contract: dict[str, Any]) -> bool:
    return bool(contract["risk"]["requires_execution_approval"])


def criteria_ids(contract: dict[str, Any]) -> list[str]:
    return [c["id"] for c in contract["acceptance_criteria"]]
