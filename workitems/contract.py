"""The Work Contract (PROTOCOL §10.1) in its normative shape, ``work-contract.schema.json``.

A WorkItem stores the contract exactly as the Coordinator sent it (camelCase,
``contractVersion`` its revision). ``check_contract`` validates it with the
kernel's schema (``mwportal/protocol/schemas/state.py``) and then with the
rules a schema cannot say:

- criterion and deliverable IDs are distinct within the contract;
- a side-effect risk of ``high_risk`` or ``destructive`` needs a pre-execution
  approval (§12: payments, external communication and destructive changes wait
  for a signed approval gate), so ``executionApproval`` is not ``not_required``;
- every dependency is a ``urn:uuid:`` WorkItem ID (this Organization's IDs);
- ``constraints.dependencyPolicy`` (the contract's dependency policy, §10.4) is
  ``verified`` (the default), ``submitted`` or ``terminal``;
- ``constraints.checks`` maps acceptance criteria of this contract to the
  deterministic checks the review pipeline runs for them (§13.2, ``checks.py``);
- the deadline lies ahead, and every budget limit fits within the Mission's
  (§12: the Coordinator allocates no more than the Mission's limits).

A missing member is WORK_CONTRACT_INCOMPLETE (§19: "required Work Contract
information is missing"); anything else wrong is INVALID_COMMAND. Both name
the member as a JSON Pointer into the Command (``/payload/contract/...``) with
``details.reason`` ``contract_invalid``.

A *material* change is a change of any member except ``contractVersion`` and
``extensions`` (annotations, §18): it needs a contract version one higher and
renewed Worker acceptance (§10.1).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from mwportal.protocol import ErrorCode, ProtocolError, schemas
from mwportal.protocol.canonical import canonicalize
from mwportal.protocol.ids import is_portal_id
from mwportal.protocol.values import parse_timestamp

from .checks import CheckInvalid, check_spec, validate_declared

FIELD = "/payload/contract"
DEPENDENCY_POLICIES = ("verified", "submitted", "terminal")
HIGH_RISK = ("high_risk", "destructive")
_IMMATERIAL = ("contractVersion", "extensions")
# Usage dimensions (catalogue ``USAGE``) and the budget limit each is charged against.
LIMITS = {
    "financialMicrounits": "financialLimit",
    "modelTokens": "modelTokenLimit",
    "toolCalls": "toolCallLimit",
    "computeSeconds": "computeSecondsLimit",
    "wallClockSeconds": "wallClockSecondsLimit",
    "externalActions": "externalSideEffectLimit",
}
MICRO = 1_000_000  # financialMicrounits per unit of the budget's currency


def contract_schema() -> dict[str, Any]:
    """The kernel's JSON Schema of the Work Contract."""
    return schemas.json_schema("work-contract")


def invalid(code: ErrorCode, message: str, field: str) -> ProtocolError:
    return ProtocolError(code, f"{field}: {message}", details={"field": field, "reason": "contract_invalid"})


def _quoted(message: str) -> str:
    """The member name a validator message quotes ('name' or "name")."""
    for quote in ('"', "'"):
        if quote in message:
            return message.split(quote)[1]
    return ""


def _schema_errors(contract: Any, field: str) -> None:
    try:
        schemas.validate("work-contract", contract)
    except schemas.SchemaError as exc:
        first = exc.errors[0]
        path, _, message = first.partition(": ")
        path = "" if path == "/" else path
        if "is a required property" in message:
            raise invalid(ErrorCode.WORK_CONTRACT_INCOMPLETE, message, f"{field}{path}/{_quoted(message)}") from None
        if "Additional properties" in message:
            path = f"{path}/{_quoted(message)}"
        raise invalid(ErrorCode.INVALID_COMMAND, message, f"{field}{path}") from None


def check_contract(
    contract: Any,
    *,
    field: str = FIELD,
    now: datetime | None = None,
    mission_budget: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The validated contract, else the refusal naming the member."""
    if not isinstance(contract, dict):
        raise invalid(ErrorCode.INVALID_COMMAND, "must be an object", field)
    _schema_errors(contract, field)
    for member, key in (("acceptanceCriteria", "criterionId"), ("requiredDeliverables", "deliverableId")):
        seen: set[str] = set()
        for i, entry in enumerate(contract[member]):
            if entry[key] in seen:
                raise invalid(ErrorCode.INVALID_COMMAND, f"{entry[key]!r} is used twice", f"{field}/{member}/{i}/{key}")
            seen.add(entry[key])
    if contract["sideEffectRisk"] in HIGH_RISK and contract["executionApproval"] == "not_required":
        raise invalid(
            ErrorCode.INVALID_COMMAND,
            f"a {contract['sideEffectRisk']} contract needs a pre-execution approval (§12)",
            f"{field}/executionApproval",
        )
    for i, dep in enumerate(contract["dependencyWorkItemIds"]):
        if not is_portal_id(dep):
            raise invalid(
                ErrorCode.INVALID_COMMAND,
                "a WorkItem ID is a lower-case urn:uuid:",
                f"{field}/dependencyWorkItemIds/{i}",
            )
    _check_constraints(contract, field)
    if now is not None and parse_timestamp(contract["deadline"]).epoch_seconds <= now.timestamp():
        raise invalid(ErrorCode.INVALID_COMMAND, "the deadline has passed", f"{field}/deadline")
    if mission_budget:
        _check_within(contract["budget"], mission_budget, field)
    return contract


def _check_constraints(contract: dict[str, Any], field: str) -> None:
    constraints = contract.get("constraints") or {}
    where = f"{field}/constraints"
    policy = constraints.get("dependencyPolicy", "verified")
    if policy not in DEPENDENCY_POLICIES:
        raise invalid(
            ErrorCode.INVALID_COMMAND, f"must be one of {', '.join(DEPENDENCY_POLICIES)}", f"{where}/dependencyPolicy"
        )
    checks = constraints.get("checks", {})
    if not isinstance(checks, dict):
        raise invalid(ErrorCode.INVALID_COMMAND, "must map criterion IDs to lists of checks", f"{where}/checks")
    known = set(criteria_ids(contract))
    for criterion, specs in checks.items():
        at = f"{where}/checks/{criterion}"
        if criterion not in known:
            raise invalid(ErrorCode.INVALID_COMMAND, "is not an acceptance criterion of the contract", at)
        if not isinstance(specs, list) or len(specs) > 20:
            raise invalid(ErrorCode.INVALID_COMMAND, "must be a list of at most 20 checks", at)
        for j, spec in enumerate(specs):
            try:
                check_spec(spec, f"{at}/{j}")
                validate_declared(spec, f"{at}/{j}")
            except CheckInvalid as exc:
                raise invalid(ErrorCode.INVALID_COMMAND, exc.message, exc.field) from None


def _check_within(budget: dict[str, Any], mission: dict[str, Any], field: str) -> None:
    """§12: a WorkItem's limits are at most the Mission's, in the Mission's currency."""
    if "financialLimit" in budget and "financialLimit" in mission and budget.get("currency") != mission.get("currency"):
        raise invalid(ErrorCode.INVALID_COMMAND, "must be the Mission's currency", f"{field}/budget/currency")
    for limit in LIMITS.values():
        if limit in budget and limit in mission and budget[limit] > mission[limit]:
            raise invalid(
                ErrorCode.INVALID_COMMAND,
                f"{budget[limit]} exceeds the Mission's limit {mission[limit]}",
                f"{field}/budget/{limit}",
            )


def is_material_change(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Anything but ``contractVersion`` and ``extensions`` changed."""

    def material(c: dict[str, Any]) -> bytes:
        return canonicalize({k: v for k, v in c.items() if k not in _IMMATERIAL})

    return material(old) != material(new)


def requires_approval(contract: dict[str, Any]) -> bool:
    """The start gate (§12): the contract asks for a pre-execution approval."""
    return bool(contract["executionApproval"] != "not_required")


def criteria_ids(contract: dict[str, Any]) -> list[str]:
    return [c["criterionId"] for c in contract["acceptanceCriteria"]]


def criterion(contract: dict[str, Any], criterion_id: str) -> dict[str, Any] | None:
    return next((c for c in contract["acceptanceCriteria"] if c["criterionId"] == criterion_id), None)


def dependency_policy(contract: dict[str, Any]) -> str:
    return str((contract.get("constraints") or {}).get("dependencyPolicy", "verified"))


def declared_checks(contract: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Criterion ID -> the deterministic checks declared for it (``constraints.checks``)."""
    return dict((contract.get("constraints") or {}).get("checks", {}))
