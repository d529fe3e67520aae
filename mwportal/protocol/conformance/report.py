"""What a conformance run found, and its two renderings (text and JSON).

A run is three bundle tallies (structural, cryptography, admission), each a
list of evaluation outcomes, plus the integrity checks (artifact bytes,
manifest digests, pins). ``Report.ok`` is the exit decision: every evaluation
passed *and* every integrity check matched; a bundle whose manifest could not
be read at all counts as one failed evaluation, never as zero of zero.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

BUNDLES = ("structural", "cryptography", "admission")


@dataclass(frozen=True)
class Outcome:
    """One evaluation: ``expected`` and ``actual`` are short human texts."""

    bundle: str
    id: str
    passed: bool
    expected: str = ""
    actual: str = ""


@dataclass(frozen=True)
class Check:
    """One integrity check (an artifact's bytes, a manifest digest, a pin)."""

    subject: str
    matched: bool
    detail: str = ""


@dataclass
class Report:
    root: str
    outcomes: list[Outcome] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    def tally(self, bundle: str) -> tuple[int, int]:
        passed = sum(1 for o in self.outcomes if o.bundle == bundle and o.passed)
        failed = sum(1 for o in self.outcomes if o.bundle == bundle and not o.passed)
        return passed, failed

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.passed]

    @property
    def mismatches(self) -> list[Check]:
        return [c for c in self.checks if not c.matched]

    @property
    def ok(self) -> bool:
        # No evaluation at all is not a pass: an empty run proves nothing.
        return bool(self.outcomes) and not self.failures and not self.mismatches

    def render_text(self) -> str:
        lines = [f"MISMATCH {c.subject}: {c.detail}" for c in self.mismatches]
        lines += [f"FAIL {o.bundle} {o.id}: expected {o.expected}; got {o.actual}" for o in self.failures]
        total_passed = total_failed = 0
        for bundle in BUNDLES:
            passed, failed = self.tally(bundle)
            total_passed += passed
            total_failed += failed
            lines.append(f"{bundle}: {passed} passed, {failed} failed")
        matched = sum(1 for c in self.checks if c.matched)
        lines.append(f"integrity: {matched} matched, {len(self.mismatches)} mismatched")
        last = f"{total_passed} passed, {total_failed} failed"
        if self.mismatches:
            last += f"; {len(self.mismatches)} integrity mismatch" + ("es" if len(self.mismatches) > 1 else "")
        lines.append(last)
        return "\n".join(lines)

    def render_json(self) -> str:
        doc: dict[str, object] = {}
        for bundle in BUNDLES:
            passed, failed = self.tally(bundle)
            doc[bundle] = {"passed": passed, "failed": failed}
        doc["integrity"] = {
            "matched": sum(1 for c in self.checks if c.matched),
            "mismatched": len(self.mismatches),
            "mismatches": [{"subject": c.subject, "detail": c.detail} for c in self.mismatches],
        }
        doc["failures"] = [
            {"bundle": o.bundle, "id": o.id, "expected": o.expected, "actual": o.actual} for o in self.failures
        ]
        doc["root"] = self.root
        doc["ok"] = self.ok
        return json.dumps(doc, indent=2, ensure_ascii=False)
