"""Capabilities of the Worker subprocess in ``test_runtime_e2e.py``: checkpoint once, then hang.

``python -m mwworker run`` imports this module (``capabilities`` in its
``worker.toml``) and calls ``register(worker)``.
"""

from __future__ import annotations

import asyncio

from mwworker import Result, SlotContext, Worker


def register(worker: Worker) -> None:
    @worker.capability("summarize", "1.0")
    async def summarize(ctx: SlotContext) -> Result:
        if ctx.resume_state is None:
            await ctx.checkpoint({"step": 1, "by": ctx.agent}, phase="step 1")
        await asyncio.Event().wait()  # hangs until the process is killed
        raise AssertionError("unreachable")
