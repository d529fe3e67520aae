"""What the Coordinator review page and the final Approval page show (issue 7, spec 13.2).

The review logic is the Artifact review pipeline's (``artifacts.review``):
integrity and signed manifests, the contract's schema and deterministic
checks, reviewer-Agent Evidence and the combined evaluation, recorded by
``review.record``. ``review_summary(item)`` reads its summary
(``artifacts.review.review_summary``) and only arranges it for the pages; it
runs no check of its own, so there is one review logic.

The one thing the page adds is ``recheck=True`` (the review page): the stored
bytes of every Artifact are hashed again through the store
(``artifacts.store.blob_integrity``), which records the outcome on the
``Blob`` row, so a blob corrupted after the pipeline ran shows as failed
(issue 8) and the criteria citing it say that the recorded review predates
the damage. The download refuses such bytes on its own (``open_verified``).
The final page shows the last recorded check with its time instead of
hashing every Artifact of the Mission on each view.
"""

from __future__ import annotations

from typing import Any

from artifacts.review import review_summary as pipeline_summary
from artifacts.store import blob_integrity
from workitems.models import Submission, WorkItem

# The pipeline's stages in spec 13.2 order, as the pages name them.
STAGES = {
    "integrity": "Integrity",
    "schema": "Schema",
    "deterministic": "Checks",
    "reviewer": "Reviewer",
}
# Evidence origins (artifacts.models.Evidence.ORIGINS) as the final page names them.
ORIGINS = {
    "submission": "Worker",
    "review": "Review pipeline",
    "reviewer": "Reviewer Agent",
    "coordinator": "Coordinator decision",
    "failure": "Failure",
}
# The pipeline's results and outcomes (evidence.schema.json ``result``) as the pages mark them.
MARKS = {"passed": "✔", "failed": "✘", "pending": "◷", "inconclusive": "?"}


def review_summary(item: WorkItem, *, recheck: bool = False) -> dict[str, Any]:
    """The pipeline's summary of ``item`` arranged for the portal (reads only,
    except that ``recheck`` records each blob's integrity through the store).

    Adds to ``artifacts.review.review_summary`` (whose members are the wire's,
    camelCase): per criterion ``steps`` (each pipeline result with a label and
    a short ``why``, in stage order, plus a ``pending`` reviewer step),
    ``failed`` (the results that failed) and ``stale_artifacts`` (cited
    Artifacts failing integrity now though the recorded review passed them);
    per Artifact ``sha256`` (the bare hex the portal's download URL takes),
    ``short``, ``ok`` and ``fresh`` (re-hashed on this view); per Evidence
    record ``shas``; ``retained_by_origin``; ``late_results``. The caller must
    have checked that the viewer may read the WorkItem's Group
    (``portal.access.access_mission``).
    """
    summary = pipeline_summary(item)
    fresh = set()
    for a in summary["artifacts"]:
        a["sha256"] = a["contentHash"].removeprefix("sha256:")
        if recheck and a["mediaType"] is not None:  # a Blob row exists: hash its stored bytes again
            a["integrity"] = blob_integrity(a["sha256"])
            fresh.add(a["sha256"])
    failing_now = {a["sha256"] for a in summary["artifacts"] if a["integrity"] in ("mismatch", "missing")}
    for a in summary["artifacts"]:
        a["short"] = a["sha256"][:12] + "…"
        a["ok"] = a["integrity"] == "verified"
        a["fresh"] = a["sha256"] in fresh
    pending_review = {c for r in summary["review"]["requests"] for c in r["criterionIds"]}
    for c in summary["criteria"]:
        for record in (*c["evidence"], *c["reviewerEvidence"]):
            record["shas"] = [h.removeprefix("sha256:") for h in record.get("artifactHashes", [])]
        steps = [
            {**r, "label": STAGES.get(r["stage"], r["stage"]), "why": describe(r["details"])} for r in c["results"]
        ]
        if c["outcome"] == "pending" or (c["criterionId"] in pending_review and not c["reviewerEvidence"]):
            steps.append({"stage": "reviewer", "label": STAGES["reviewer"], "kind": "reviewer_evidence",
                          "result": "pending", "artifactHashes": [], "details": {},
                          "why": "awaiting a reviewer Agent's Evidence"})  # fmt: skip
        for step in steps:
            step["mark"] = MARKS.get(step["result"], "?")
        c["steps"] = steps
        c["failed"] = [s for s in steps if s["result"] == "failed"]
        recorded_ok = {
            h.removeprefix("sha256:")
            for s in steps
            if s["stage"] == "integrity" and s["result"] != "failed"
            for h in s["artifactHashes"]
        }
        c["stale_artifacts"] = sorted(recorded_ok & failing_now)
    by_origin: dict[str, list[dict[str, Any]]] = {}
    for record in summary["retained"]:
        by_origin.setdefault(record["origin"], []).append(record)
    summary["retained_by_origin"] = [(ORIGINS.get(o, o), o, by_origin[o]) for o in ORIGINS if o in by_origin]
    summary["integrity_failures"] = sorted(failing_now)
    # Results of fenced owners are kept for audit but never reviewed (§11.5).
    summary["late_results"] = Submission.objects.filter(workitem=item, authoritative=False).count()
    return summary


def describe(details: dict[str, Any]) -> str:
    """A check's structured details in a line: empty members left out, hashes shortened."""
    parts = []
    for key, value in details.items():
        if key == "kind" or value in (None, "", [], {}):  # the kind is shown beside it
            continue
        if isinstance(value, dict):
            inner = "; ".join(f"{_short(str(k))}: {v}" for k, v in value.items())
            parts.append(f"{key} {inner}")
        elif isinstance(value, list):
            parts.append(f"{key}: {', '.join(_short(str(v)) for v in value)}")
        else:
            parts.append(f"{key}: {_short(str(value))}")
    return " · ".join(parts)[:600]


def _short(value: str) -> str:
    text = value.removeprefix("sha256:")
    return text[:12] + "…" if len(text) == 64 and all(ch in "0123456789abcdef" for ch in text) else value
