"""The Worker runtime end to end against a real daphne portal (spec 10.3, 11.1, 11.3-11.5, 16).

Each test starts daphne on the test database, runs ``mwworker.Worker`` in
the test's event loop and plays the Coordinator with signed Commands. Waiting
is always for a condition (``Worker.until``) with a deadline, never a sleep.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from mwworker import Result, SlotContext, Worker
from tests.conftest import AgentKey
from tests.worker.portal import Portal, in_db_thread, running, state_of

pytestmark = pytest.mark.django_db(transaction=True)


def register_stepper(worker: Worker, steps: int = 2, seen: dict[str, Any] | None = None) -> None:
    """A capability that checkpoints after each step, resumes from the last
    checkpoint, stores its output as an Artifact and maps Evidence to every
    acceptance criterion."""

    @worker.capability("summarize", "1.0")
    async def summarize(ctx: SlotContext) -> Result:
        start = int((ctx.resume_state or {}).get("step", 0))
        if seen is not None:
            seen.setdefault(ctx.workitem, []).append(start)
        for step in range(start, steps):
            await ctx.checkpoint({"step": step + 1}, phase=f"step {step + 1}", milestones=[f"step {step + 1}"])
        sha = await ctx.put_artifact(f"summary of {ctx.mission['title']}".encode(), "text/markdown")
        evidence = [
            ctx.evidence([c["id"]], result="pass", method=c["evidence_methods"][0], summary="checked", artifacts=[sha])
            for c in ctx.contract["acceptance_criteria"]
        ]
        return Result(evidence=evidence, artifacts=[sha])


def test_a_worker_in_two_groups_runs_items_to_verified_MWP_WRK_008(
    portal: Portal, worker: AgentKey, tmp_path: Path
) -> None:
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=2)
    register_stepper(w)

    async def body() -> None:
        g1 = await in_db_thread(portal.mission, [worker], "North")
        g2 = await in_db_thread(portal.mission, [worker], "South")
        items = {
            g1: await in_db_thread(portal.authorize_and_offer, g1, [worker]),
            g2: await in_db_thread(portal.authorize_and_offer, g2, [worker]),
        }
        await w.until(lambda: all(state_of(w, g, i) == "submitted" for g, i in items.items()))
        for g, i in items.items():
            await in_db_thread(portal.accept_result, g, i)
        await w.until(lambda: all(state_of(w, g, i) == "verified" for g, i in items.items()))
        # Each Group has its own Cursor, ACKed to the server (MWP-WRK-030).
        assert set(items) <= set(w.store.ack_positions())

    asyncio.run(running(w, body))
    kinds = [k for k, _, _ in w.log]
    assert kinds.count("offer.accepted") == 2 and kinds.count("submitted") == 2
