"""What a Coordinator reviews for a submitted WorkItem (spec 13.2), gathered in one place.

``review_summary(item)`` is the only function the review page and the final
Approval page read: the latest authoritative submission, each acceptance
criterion beside the Evidence mapped to it, the integrity of every Artifact
(its bytes re-hashed through ``artifacts.store``), and the deterministic
checks the portal runs itself. When the Artifact review pipeline
(``artifacts.review``) lands, this function is the one place to point at it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from artifacts.models import Blob, BlobGroup
from artifacts.store import blob_name, verify_blob
from workitems.models import Submission, WorkItem

# Methods whose results are mechanical, not judgement (spec 13.2 step 2).
DETERMINISTIC_METHODS = frozenset({"artifact_integrity", "schema", "deterministic_check", "test"})
_JSON_TYPES = ("application/json", "application/ld+json")


@dataclass(slots=True)
class ArtifactCheck:
    sha256: str
    known: bool
    verified: bool
    media_type: str
    size: int | None
    in_group: bool

    @property
    def short(self) -> str:
        return f"{self.sha256[:12]}…"


@dataclass(slots=True)
class CriterionReview:
    id: str
    description: str
    evidence_methods: list[str]
    evidence: list[dict[str, Any]]
    submitted: bool = True

    @property
    def result(self) -> str:
        """pass when every mapped record passes; fail when one fails; else inconclusive,
        missing (submitted without it) or awaiting (nothing submitted yet)."""
        results = {e["result"] for e in self.evidence}
        if not results:
            return "missing" if self.submitted else "awaiting"
        if "fail" in results:
            return "fail"
        return "pass" if results == {"pass"} else "inconclusive"


@dataclass(slots=True)
class Check:
    name: str
    passed: bool
    detail: str


@dataclass(slots=True)
class ReviewSummary:
    item: WorkItem
    submission: Submission | None
    criteria: list[CriterionReview]
    artifacts: list[ArtifactCheck]
    checks: list[Check]
    worker_checks: list[dict[str, Any]]
    late_results: int = 0
    decisions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def all_checks_pass(self) -> bool:
        return all(c.passed for c in self.checks)

    def check_evidence(self, producer: str, timestamp: str) -> dict[str, Any]:
        """The deterministic checks as one Evidence record, retained for final Approval."""
        failed = [c.name for c in self.checks if not c.passed]
        summary = "all deterministic checks passed" if not failed else "failed: " + "; ".join(failed)
        return {
            "subject": str(self.item.id),
            "criteria": [c.id for c in self.criteria],
            "method": "deterministic_check",
            "result": "pass" if not failed else "fail",
            "producer": producer,
            "timestamp": timestamp,
            "artifacts": [a.sha256 for a in self.artifacts],
            "summary": summary[:2000],
        }


def review_summary(item: WorkItem) -> ReviewSummary:
    """Gather everything the review of ``item`` shows (reads only)."""
    submission = Submission.objects.filter(workitem=item, authoritative=True).order_by("-created_at", "-id").first()
    evidence: list[dict[str, Any]] = list(submission.evidence) if submission else []
    criteria = [
        CriterionReview(
            id=c["id"],
            description=c["description"],
            evidence_methods=list(c["evidence_methods"]),
            evidence=[e for e in evidence if c["id"] in e["criteria"]],
            submitted=submission is not None,
        )
        for c in item.contract["acceptance_criteria"]
    ]
    hashes: list[str] = []
    for sha in (submission.artifacts if submission else []) + [s for e in evidence for s in e["artifacts"]]:
        if sha not in hashes:
            hashes.append(sha)
    artifacts = [_artifact_check(sha, str(item.group_id)) for sha in hashes]
    checks = _deterministic_checks(item, criteria, artifacts, evidence)
    return ReviewSummary(
        item=item,
        submission=submission,
        criteria=criteria,
        artifacts=artifacts,
        checks=checks,
        worker_checks=[e for e in evidence if e["method"] in DETERMINISTIC_METHODS],
        late_results=Submission.objects.filter(workitem=item, authoritative=False).count(),
        decisions=_decisions(item),
    )


def _artifact_check(sha: str, group_id: str) -> ArtifactCheck:
    blob = Blob.objects.filter(sha256=sha).first()
    if blob is None:
        return ArtifactCheck(sha, False, False, "", None, False)
    return ArtifactCheck(
        sha256=sha,
        known=True,
        verified=verify_blob(sha),
        media_type=blob.media_type,
        size=blob.size,
        in_group=BlobGroup.objects.filter(blob=blob, group_id=group_id).exists(),
    )


def _deterministic_checks(
    item: WorkItem, criteria: list[CriterionReview], artifacts: list[ArtifactCheck], evidence: list[dict[str, Any]]
) -> list[Check]:
    uncovered = [c.id for c in criteria if not c.evidence]
    broken = [a.short for a in artifacts if not a.verified]
    foreign = [e["subject"] for e in evidence if e["subject"] != str(item.id)]
    checks = [
        Check(
            "Evidence for every acceptance criterion",
            not uncovered,
            "all criteria covered" if not uncovered else "missing: " + ", ".join(uncovered),
        ),
        Check(
            "Artifact bytes match their SHA-256",
            bool(artifacts) and not broken,
            f"{len(artifacts)} verified"
            if not broken and artifacts
            else ("no Artifacts" if not artifacts else "mismatch: " + ", ".join(broken)),
        ),
        Check(
            "Evidence is about this WorkItem",
            not foreign,
            "every record names this WorkItem" if not foreign else "other subjects: " + ", ".join(foreign),
        ),
        Check(
            "No Evidence reports a failure",
            all(e["result"] != "fail" for e in evidence),
            ", ".join(f"{e['method']}: {e['result']}" for e in evidence) or "no Evidence",
        ),
    ]
    checks.extend(_json_check(a) for a in artifacts if a.verified and a.media_type in _JSON_TYPES)
    return checks


def _json_check(artifact: ArtifactCheck) -> Check:
    """A JSON Artifact must parse (its declared media type is its output schema here)."""
    path = Path(settings.MWP_ARTIFACT_ROOT) / blob_name(artifact.sha256)
    try:
        with open(path, "rb") as fh:
            json.load(fh)
    except (OSError, ValueError) as exc:
        return Check(f"{artifact.short} is valid JSON", False, str(exc)[:200])
    return Check(f"{artifact.short} is valid JSON", True, artifact.media_type)


def _decisions(item: WorkItem) -> list[dict[str, Any]]:
    """The review decisions recorded for this WorkItem: accepted or failed results with their Evidence."""
    from missions.models import GroupEvent

    rows = GroupEvent.objects.filter(
        group_id=item.group_id,
        aggregate_kind="workitem",
        aggregate_id=str(item.id),
        type__in=("work.result_accepted", "work.failed", "work.child_approved"),
    ).order_by("sequence")
    return [
        {
            "type": e.type,
            "sequence": e.sequence,
            "actor": e.actor,
            "at": e.occurred_at,
            "evidence": e.body.get("evidence", []),
        }
        for e in rows
    ]
