"""Demo capabilities: what ``mwworker demo`` runs, and a model for real ones.

``register(worker)`` registers ``text.summarize`` 1.2.0 (the capability of the
catalogue's example Work Contract), ``demo.echo`` 1.0.0, and ``demo.analysis``
1.0.0 and ``demo.mailing`` 1.0.0, the capabilities of the portal's demo
Missions (``mwp demo``; slower, so a person watching the Mission page sees
each checkpoint arrive). Each handler works in steps, checkpoints after each
(the normative checkpoint: phase, completed milestones, next step; so
preemption and crashes resume from the last one), stores its output as an
Artifact, records the delivery as an external side effect under its
idempotency key, and returns Evidence for every acceptance criterion of the
contract, of the first Evidence type each criterion requires.

``mwportal.review`` 1.0.0 is the demo reviewer's (``var/demo/demo-reviewer.json``,
a ``reviewer`` member of the demo Missions): the review WorkItems the
portal's review pipeline offers (PROTOCOL §13.2) name the submission's
Artifacts as their inputs and the qualitative criteria as their own; the
demo reviewer writes a review report and returns ``reviewer_assessment``
Evidence citing the reviewed Artifacts, ``passed`` when there are some to
review and ``failed`` when the review names none (a demo: a real reviewer
would judge their content against each criterion). A demo Worker holds no
``reviewer`` Membership, so no review is ever offered to it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

from .context import Result, SlotContext
from .runtime import Worker

STEPS = 3


async def _work(ctx: SlotContext, *, steps: int = STEPS, pause: float = 0.2) -> Result:
    # Resume after the milestones the last accepted checkpoint names (§11.3).
    resume = ctx.resume_state or {}
    notes: list[str] = list(resume.get("completedMilestones") or [])
    for step in range(len(notes), steps):
        await asyncio.sleep(pause)  # stands for real work between safe points
        ctx.charge(computeSeconds=max(1, round(pause)))
        notes.append(f"step {step + 1}: {str(ctx.contract.get('goal', ''))[:60]}")
        await ctx.checkpoint(
            phase=f"step {step + 1} of {steps}",
            milestones=notes,
            next_step=f"step {step + 2}" if step + 1 < steps else "submit",
        )
    output = json.dumps({"mission": ctx.mission.get("objective"), "workitem": ctx.workitem, "notes": notes}, indent=2)
    sha = await ctx.put_artifact(output.encode("utf-8"), "application/json")

    async def deliver(key: str) -> dict[str, Any]:
        # A real capability would call an external API with ``key`` as its
        # idempotency key; the demo's receipt is derived from it.
        return {"delivered": sha, "receipt": hashlib.sha256(key.encode()).hexdigest()[:16]}

    # A side effect only where the contract's budget allows one (a contract
    # may allow none): a real capability would skip or ask, not overspend.
    left = ctx.budget_left("externalActions")
    if left is None or left >= 1:
        await ctx.side_effect("deliver-summary", deliver)
    evidence = []
    for criterion in ctx.contract.get("acceptanceCriteria") or []:
        kinds = criterion.get("evidenceRequired") or ["deterministic_test"]
        evidence.append(
            ctx.evidence(
                [criterion["criterionId"]],
                result="passed",
                method=f"the demo checked its output for {criterion['criterionId']}",
                summary=f"demo output checked for {criterion['criterionId']}",
                artifacts=[sha],
                type=kinds[0],
            )
        )
    return Result(evidence=evidence, artifacts=[sha])


async def _review(ctx: SlotContext, *, pause: float = 0.5) -> Result:
    reviewed = [str(h) for h in ctx.contract.get("inputArtifacts") or []]
    subject = (ctx.contract.get("constraints") or {}).get("review") or {}
    await asyncio.sleep(pause)  # stands for reading the Artifacts
    ctx.charge(computeSeconds=1)
    verdict = "passed" if reviewed else "failed"
    report = {"review": subject, "reviewed": reviewed, "result": verdict}
    sha = await ctx.put_artifact(json.dumps(report, indent=2).encode("utf-8"), "application/json")
    evidence = [
        ctx.evidence(
            [criterion["criterionId"]],
            result=verdict,
            # A demo: it checks that the review names the submission's Artifacts, not what they say.
            method=f"the demo reviewer found the submission's Artifacts named for {criterion['criterionId']}",
            summary=f"{len(reviewed)} Artifact(s) reviewed for {criterion['criterionId']}",
            artifacts=[*reviewed, sha],
            type="reviewer_assessment",
        )
        for criterion in ctx.contract.get("acceptanceCriteria") or []
    ]
    return Result(evidence=evidence, artifacts=[sha])


def register(worker: Worker) -> None:
    """Register the demo capabilities on ``worker``."""

    @worker.capability("text.summarize", "1.2.0", estimate={"computeSeconds": STEPS}, duration_seconds=1.0)
    async def summarize(ctx: SlotContext) -> Result:
        return await _work(ctx)

    @worker.capability("demo.echo", "1.0.0", duration_seconds=0.5)
    async def echo(ctx: SlotContext) -> Result:
        return await _work(ctx, steps=1, pause=0.05)

    @worker.capability("demo.analysis", "1.0.0", estimate={"computeSeconds": STEPS * 2}, duration_seconds=6.0)
    async def analysis(ctx: SlotContext) -> Result:
        return await _work(ctx, pause=2.0)

    @worker.capability("demo.mailing", "1.0.0", estimate={"computeSeconds": 2}, duration_seconds=2.0)
    async def mailing(ctx: SlotContext) -> Result:
        return await _work(ctx, steps=1, pause=2.0)

    @worker.capability("mwportal.review", "1.0.0", estimate={"computeSeconds": 1}, duration_seconds=1.0)
    async def review(ctx: SlotContext) -> Result:
        return await _review(ctx)
