"""``check_*`` guards for WorkItem Command bodies: Evidence, progress,
resource usage and the selection basis. Each raises ``ProtocolError``."""

from __future__ import annotations

import re
from typing import Any

from missions.guards import check_object
from mwportal.protocol import ErrorCode, ProtocolError, malformed, parse_time, parse_uuid

from .contract import EVIDENCE_METHODS
from .models import BUDGET_DIMENSIONS

EVIDENCE_MEMBERS = ("subject", "criteria", "method", "result", "producer", "timestamp", "artifacts", "summary")
PROGRESS_MEMBERS = ("phase", "milestones", "next_checkpoint", "blockers", "estimate", "evidence")
ESTIMATE_MEMBERS = ("completion_at", "remaining_seconds", "confidence")
SELECTION_BASIS_MEMBERS = (
    "capability_matches",
    "authorization_eligibility",
    "availability_estimate",
    "expected_cost",
    "reliability_evidence",
    "policy_rules",
)
DECLINE_REASONS = ("capacity", "deadline", "capability", "authorization", "dependency", "budget")


# Content hashes are checked here, below the store that keeps the bytes
# (artifacts/store.py re-exports it), so WorkItem bodies need no upward import.
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def check_sha256(value: object, field: str = "sha256") -> str:
    if not isinstance(value, str) or not SHA256_RE.match(value):
        raise ProtocolError(
            ErrorCode.SCHEMA_VALIDATION_FAILED, f"{field}: must be 64 lower-case hex digits", details={"field": field}
        )
    return value


def check_evidence_list(value: Any, field: str, *, required: bool) -> list[dict[str, Any]]:
    """A list of Evidence records (spec 13.2; DESIGN §4a): every member present,
    nothing else, so no free-form reasoning rides along (MUST NOT include
    private chain-of-thought)."""
    if not isinstance(value, list):
        raise malformed(field, "must be a list of Evidence records")
    if required and not value:
        raise ProtocolError(
            ErrorCode.INVALID_STATE_TRANSITION,
            f"{field}: Evidence is required",
            details={"field": field, "reason": "evidence_required"},
        )
    for i, record in enumerate(value):
        where = f"{field}.{i}"
        check_object(
            record, EVIDENCE_MEMBERS, field=where, unknown="unknown member (Evidence carries no free-form fields)"
        )
        if not isinstance(record["subject"], str) or not record["subject"]:
            raise malformed(f"{where}.subject", "must be a non-empty string")
        crit = record["criteria"]
        if not isinstance(crit, list) or not all(isinstance(c, str) and c for c in crit):
            raise malformed(f"{where}.criteria", "must be a list of acceptance criterion ids")
        if record["method"] not in EVIDENCE_METHODS:
            raise malformed(f"{where}.method", f"must be one of {', '.join(EVIDENCE_METHODS)}")
        if record["result"] not in ("pass", "fail", "inconclusive"):
            raise malformed(f"{where}.result", "must be pass, fail or inconclusive")
        parse_uuid(record["producer"], f"{where}.producer")
        parse_time(record["timestamp"], f"{where}.timestamp")
        arts = record["artifacts"]
        if not isinstance(arts, list):
            raise malformed(f"{where}.artifacts", "must be a list of SHA-256 hashes")
        for j, sha in enumerate(arts):
            check_sha256(sha, f"{where}.artifacts.{j}")
        if not isinstance(record["summary"], str) or len(record["summary"]) > 2000:
            raise malformed(f"{where}.summary", "must be a string of at most 2000 characters")
    return value


def check_progress(value: Any, field: str = "body.progress") -> dict[str, Any]:
    """The structured progress of spec 11.4: phase, completed milestones, next
    checkpoint, blockers, revised estimate and Evidence references. There is
    no percentage field: arbitrary percentages are non-authoritative."""
    progress = check_object(value, PROGRESS_MEMBERS, field=field)
    if not isinstance(progress["phase"], str) or not progress["phase"]:
        raise malformed(f"{field}.phase", "must be a non-empty string")
    for name in ("milestones", "blockers"):
        if not isinstance(progress[name], list) or not all(isinstance(x, str) for x in progress[name]):
            raise malformed(f"{field}.{name}", "must be a list of strings")
    if progress["next_checkpoint"] is not None and not isinstance(progress["next_checkpoint"], str):
        raise malformed(f"{field}.next_checkpoint", "must be a string or null")
    estimate = progress["estimate"]
    if estimate is not None:
        if not isinstance(estimate, dict):
            raise malformed(f"{field}.estimate", "must be an object or null")
        for name in sorted(set(estimate) - set(ESTIMATE_MEMBERS)):
            raise malformed(f"{field}.estimate.{name}", "unknown member")
        if estimate.get("completion_at") is not None:
            parse_time(estimate["completion_at"], f"{field}.estimate.completion_at")
        for name in ("remaining_seconds", "confidence"):
            v = estimate.get(name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v < 0):
                raise malformed(f"{field}.estimate.{name}", "must be a non-negative number")
        if (estimate.get("confidence") or 0) > 1:
            raise malformed(f"{field}.estimate.confidence", "must be between 0 and 1")
    ev = progress["evidence"]
    if not isinstance(ev, list):
        raise malformed(f"{field}.evidence", "must be a list of Artifact hashes")
    for j, sha in enumerate(ev):
        check_sha256(sha, f"{field}.evidence.{j}")
    return progress


def check_usage(value: Any, field: str = "body.usage") -> dict[str, float]:
    """A resource-usage delta over the six budget dimensions (spec 10.1/11.4)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise malformed(field, "must be an object")
    for name in sorted(set(value) - set(BUDGET_DIMENSIONS)):
        raise malformed(f"{field}.{name}", f"is not a budget dimension ({', '.join(BUDGET_DIMENSIONS)})")
    for name, v in value.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise malformed(f"{field}.{name}", "must be a non-negative number")
    return {k: v for k, v in value.items() if v}


def check_selection_basis(value: Any, field: str = "body.selection_basis") -> dict[str, Any]:
    """The structured selection basis every assignment records (spec 10.3):
    exactly the six listed members, so private reasoning has nowhere to go."""
    return check_object(
        value, SELECTION_BASIS_MEMBERS, field=field, unknown="unknown member (the selection basis is structured)"
    )
