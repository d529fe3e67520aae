"""Demo capabilities: what ``mwworker demo`` runs, and a model for real ones.

``register(worker)`` registers ``summarize`` 1.0 (the capability of the
portal's example Work Contract), ``demo.echo`` 1.0, and ``analysis`` 1.0 and
``mailing`` 1.0, the capabilities of the portal's demo Missions (``mwp demo``;
slower, so a person watching the Mission page sees each checkpoint arrive). Each handler works in
steps, checkpoints after each (so preemption and crashes resume from the
last one), stores its output as an Artifact, records the delivery as an
external side effect under its idempotency key, and returns Evidence mapped
to every acceptance criterion of the contract, using the first Evidence
method each criterion allows.
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
    state = dict(ctx.resume_state or {})
    done = int(state.get("step", 0))
    notes: list[str] = list(state.get("notes", []))
    for step in range(done, steps):
        await asyncio.sleep(pause)  # stands for real work between safe points
        ctx.charge(compute_seconds=pause)
        notes.append(f"step {step + 1}: {ctx.contract.get('goal', '')[:60]}")
        await ctx.checkpoint(
            {"step": step + 1, "notes": notes},
            phase=f"step {step + 1} of {steps}",
            milestones=[f"step {i + 1}" for i in range(step + 1)],
            next_checkpoint=f"step {step + 2}" if step + 1 < steps else None,
            estimate={"remaining_seconds": (steps - step - 1) * pause, "confidence": 0.8},
        )
    output = json.dumps({"mission": ctx.mission.get("title"), "workitem": ctx.workitem, "notes": notes}, indent=2)
    sha = await ctx.put_artifact(output.encode("utf-8"), "application/json")

    async def deliver(key: str) -> dict[str, Any]:
        # A real capability would call an external API with ``key`` as its
        # idempotency key; the demo's receipt is derived from it.
        return {"delivered": sha, "receipt": hashlib.sha256(key.encode()).hexdigest()[:16]}

    # A side effect only where the contract's budget allows one (a contract
    # may allow none): a real capability would skip or ask, not overspend.
    left = ctx.budget_left("side_effects")
    if left is None or left >= 1:
        await ctx.side_effect("deliver-summary", deliver)
    evidence = []
    for criterion in ctx.contract.get("acceptance_criteria") or []:
        methods = criterion.get("evidence_methods") or ["other"]
        evidence.append(
            ctx.evidence(
                [criterion["id"]],
                result="pass",
                method=methods[0],
                summary=f"demo output checked for {criterion['id']}",
                artifacts=[sha],
            )
        )
    return Result(evidence=evidence, artifacts=[sha])


def register(worker: Worker) -> None:
    """Register the demo capabilities on ``worker``."""

    @worker.capability("summarize", "1.0", estimate={"compute_seconds": STEPS * 0.2}, duration_seconds=1.0)
    async def summarize(ctx: SlotContext) -> Result:
        return await _work(ctx)

    @worker.capability("demo.echo", "1.0", duration_seconds=0.5)
    async def echo(ctx: SlotContext) -> Result:
        return await _work(ctx, steps=1, pause=0.05)

    @worker.capability("analysis", "1.0", estimate={"compute_seconds": STEPS * 2.0}, duration_seconds=6.0)
    async def analysis(ctx: SlotContext) -> Result:
        return await _work(ctx, pause=2.0)

    @worker.capability("mailing", "1.0", estimate={"compute_seconds": 2.0}, duration_seconds=2.0)
    async def mailing(ctx: SlotContext) -> Result:
        return await _work(ctx, steps=1, pause=2.0)
