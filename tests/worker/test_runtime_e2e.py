"""The Worker runtime against the real portal (daphne on the test database), over MWP 0.1.

The Coordinator and the MissionOwner send signed Commands in this process
(``tests.workitems.flow.Flow``); the Worker connects to ``/mwp/0.1`` with its
DESIGN §4 key, completes HELLO, subscribes its Groups, verifies every Event
against the Group Authority's key from ``GET /api/v0.1/keys/{keyId}`` and
works what it is offered.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from mwportal.protocol.ids import urn
from mwworker import Result, SlotContext, Worker
from tests.conftest import AgentKey
from tests.worker.portal import Flow, Portal, in_db_thread, running, state_of
from tests.workitems.flow import CAPABILITY, give_card


def register_stepper(worker: Worker, steps: int = 2, seen: dict[str, Any] | None = None) -> None:
    """A capability that checkpoints ``steps`` times, stores its output and maps Evidence to every criterion."""

    @worker.capability(CAPABILITY["id"], CAPABILITY["version"])
    async def stepper(ctx: SlotContext) -> Result:
        done = list((ctx.resume_state or {}).get("completedMilestones") or [])
        for step in range(len(done), steps):
            done.append(f"step {step + 1}")
            await ctx.checkpoint(phase=f"step {step + 1}", milestones=done, next_step="submit")
        if seen is not None:
            seen.setdefault(ctx.workitem, []).append((ctx.lease_id, ctx.ownership_epoch))
        sha = await ctx.put_artifact(b"# summary\n", "text/markdown")
        evidence = [
            ctx.evidence(
                [c["criterionId"]],
                result="passed",
                method="checked",
                summary="ok",
                artifacts=[sha],
                type=c["evidenceRequired"][0],
            )  # fmt: skip
            for c in ctx.contract["acceptanceCriteria"]
        ]
        return Result(evidence=evidence, artifacts=[sha])


def test_a_worker_runs_an_offered_item_to_verified_over_mwp_0_1_MWP_WRK_008(
    portal: Portal, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey,
    worker2: AgentKey, tmp_path: Path,
) -> None:  # fmt: skip
    give_card(worker)
    flow = Flow(mission, owner, coordinator, worker, worker2)
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=2)
    seen: dict[str, Any] = {}
    register_stepper(w, seen=seen)

    async def body() -> None:
        item = await in_db_thread(flow.authorize)
        await in_db_thread(flow.offer, item)
        await w.until(lambda: state_of(w, flow.group, item) == "submitted", timeout=30)
        await in_db_thread(flow.accept_result, item)
        await w.until(lambda: state_of(w, flow.group, item) == "verified", timeout=15)
        # Two checkpoints, each releasing the lease: three Execution Leases in all (§10.2, §11.3).
        assert [kind for kind, i, _ in w.log if i == urn(item) and kind == "checkpointed"] == ["checkpointed"] * 2
        assert len({lease for lease, _ in seen[urn(item)]}) == 1
        row = await in_db_thread(flow.item, item)
        assert (row.state, row.ownership_epoch) == ("verified", 1)

    asyncio.run(running(w, body))
