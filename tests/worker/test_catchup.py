"""A restarted Worker catches up before it acts on ownership; a stale Command is sent anew (issue 16 item 12).

The soak of issue 16 saw a restarted Worker send ``work.start`` before it had
applied its own lease revocation, in 2 of 40 restarts: its store still showed
the WorkItem at the revision it had before the crash, and the Group Authority
answered REVISION_CONFLICT. Here the race is made certain: the Worker's store
lags the server (it sent ``work.start`` and died before applying its Event),
the restart's new session revokes that lease (MWP-WRK-014), and a relay holds
the Group's replay back while other Frames (the administrative Group's, which
wake the reactor) pass. No ``work.start`` may go out before the Worker's store
has reached the revocation, restart after restart.

Against a real daphne, through ``tests/worker/relay.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from mwworker import Identity, Result, SlotContext, WorkRow
from mwworker.picker import FairScheduler
from tests.conftest import AgentKey
from tests.worker.portal import Portal, in_db_thread, running, state_of
from tests.worker.relay import Relay, RelayedWorker

pytestmark = pytest.mark.django_db(transaction=True)

RESTARTS = 8
HOLD_SECONDS = 0.4  # how long the relay holds the mission Group's replay on each connection


class Gate:
    """The default Scheduler, which can be told to start nothing (``open = False``)."""

    def __init__(self, open_: bool = True):
        self.open = open_
        self.inner = FairScheduler()

    def pick(
        self,
        candidates: Sequence[WorkRow],
        *,
        running: Mapping[str, int],
        free_slots: int,
        capabilities: frozenset[tuple[str, str]],
        now: datetime,
    ) -> WorkRow | None:
        if not self.open:
            return None
        return self.inner.pick(candidates, running=running, free_slots=free_slots, capabilities=capabilities, now=now)

    def dispatched(self, row: WorkRow, now: datetime) -> None:
        self.inner.dispatched(row, now)

    def set_policy(self, policy: Mapping[str, Any]) -> None:
        self.inner.set_policy(policy)


def relayed(portal: Portal, agent: AgentKey, relay: Relay, store: Path, **kw: Any) -> RelayedWorker:
    identity = Identity(agent.id, portal.org["id"], agent.private_key, agent.public_key)
    w = RelayedWorker(portal=portal.url, identity=identity, store=store, slots=1, **kw)
    w.relay_url = relay.url
    return w


def start_behind_the_workers_back(portal: Portal, agent: AgentKey, group: str, item: str) -> None:
    """What the crashed Worker did last: ``work.start`` accepted under its
    session, and the process gone before the Event reached its store."""
    from missions.models import Agent

    epoch = Agent.objects.get(id=agent.id).session_epoch
    row = portal.item(item)
    agent.send("work.start", group, {}, target=portal.target(item), ownership_epoch=row.ownership_epoch,
               session_epoch=epoch)  # fmt: skip


def revocations(group: str, item: str) -> list[int]:
    from missions.models import GroupEvent

    return list(
        GroupEvent.objects.filter(group_id=group, aggregate_id=item, type="work.lease_revoked")
        .order_by("sequence")
        .values_list("sequence", flat=True)
    )


def test_it_starts_nothing_before_its_replay_reaches_its_own_lease_revocation_after_a_restart(
    portal: Portal, worker: AgentKey, tmp_path: Path
) -> None:
    """issue 16 item 12: 8 restarts with the lease revoked server-side and the replay held back."""
    store = tmp_path / "w.sqlite3"
    pause = asyncio.Event()

    async def pausing(ctx: SlotContext) -> Result:
        await pause.wait()
        await ctx.checkpoint({"step": 1}, phase="pausing")  # preemption requested: raises Preempted
        raise AssertionError("a preempted checkpoint returned")

    def register(w: RelayedWorker) -> None:
        w.capability("summarize", "1.0")(pausing)

    async def body() -> None:
        upstream = portal.server.url + "/ws/v1/agent"
        async with Relay(upstream) as relay:
            # The first run accepts the offer and starts nothing.
            first = relayed(portal, worker, relay, store, picker=Gate(open_=False))
            register(first)
            group = await in_db_thread(portal.mission, [worker])
            # Every revoked lease ended an attempt without a checkpoint: one per restart.
            retry = {"max_attempts": RESTARTS + 2, "backoff_seconds": 0, "backoff_multiplier": 1, "deadline": None,
                     "max_cost": None}  # fmt: skip
            item = await in_db_thread(lambda: portal.authorize_and_offer(group, [worker], retry=retry))

            async def accepted() -> None:
                await first.until(lambda: state_of(first, group, item) == "queued")

            await running(first, accepted)
            starts: list[tuple[int, int]] = []  # (the target revision, the store's Cursor) of each work.start

            for restart in range(RESTARTS):
                await in_db_thread(start_behind_the_workers_back, portal, worker, group, item)
                gate = Gate()
                w = relayed(portal, worker, relay, store, picker=gate)
                register(w)
                relay.hold = {group: HOLD_SECONDS}
                starts.clear()

                def seen(envelope: dict[str, Any], w: RelayedWorker = w) -> None:
                    if envelope["type"] == "work.start" and envelope["target"]["id"] == item:
                        starts.append((envelope["target"]["revision"], w.store.cursor(group).sequence))

                relay.on_command = seen

                async def cycle(w: RelayedWorker = w, gate: Gate = gate) -> None:
                    await w.until(lambda: item in w.running and w.lease_of(item) is not None)
                    # Pause it at a checkpoint, so the next restart finds it queued in the store.
                    gate.open = False
                    pause.clear()
                    assert w.request_preemption(item)
                    pause.set()
                    await w.until(lambda: item not in w.running and state_of(w, group, item) == "queued")

                await running(w, cycle)
                revoked = (await in_db_thread(revocations, group, item))[-1]
                refusals = [(k, d) for k, i, d in w.log if i == item and k.endswith("refused")]
                assert refusals == [], f"restart {restart}: {refusals}"
                assert starts, f"restart {restart}: no work.start"
                # Every work.start left after the store applied the revocation.
                assert all(cursor >= revoked for _, cursor in starts), f"restart {restart}: {starts} < {revoked}"
                assert relay.connections >= restart + 2

    asyncio.run(asyncio.wait_for(body(), 120))


def test_it_sends_a_command_refused_as_stale_again_as_a_new_command(
    portal: Portal, worker: AgentKey, tmp_path: Path
) -> None:
    """issue 16 item 12, spec §19: a submission whose answer was lost with the
    connection is resent on the next one; by then its issued_at is outside the
    portal's freshness window (2 s here), and the refusal (AUTH_INVALID_SIGNATURE)
    is answered once with a new Command: new action ID, current issued_at, new
    signature. Without it the submission was refused and the WorkItem failed."""
    sent: list[dict[str, Any]] = []

    async def body() -> None:
        async with Relay(portal.server.url + "/ws/v1/agent") as relay:
            w = relayed(portal, worker, relay, tmp_path / "w.sqlite3", refresh_after_seconds=1.0)

            @w.capability("summarize", "1.0")
            async def done(ctx: SlotContext) -> Result:
                criteria = [c["id"] for c in ctx.contract["acceptance_criteria"]]
                return Result(evidence=[ctx.evidence(criteria, result="pass", method="test", summary="done")])

            def swallow_first_submit(envelope: dict[str, Any]) -> bool:
                sent.append(envelope)
                submits = [e for e in sent if e["type"] == "work.submit"]
                return len(submits) == 1 and submits[0] is envelope

            relay.swallow = swallow_first_submit
            relay.drop_after = 3.0  # past the 2 s window: the resend is stale

            async def submitted() -> None:
                group = await in_db_thread(portal.mission, [worker])
                item = await in_db_thread(portal.authorize_and_offer, group, [worker])
                await w.until(lambda: state_of(w, group, item) in ("submitted", "failed"), timeout=30)
                assert state_of(w, group, item) == "submitted", w.log

            await running(w, submitted, timeout=60)
            submits = [e for e in sent if e["type"] == "work.submit"]
            # The original, its unchanged resend, then one new Command.
            assert [e["action_id"] for e in submits[:2]] == [submits[0]["action_id"]] * 2
            assert len(submits) == 3 and submits[2]["action_id"] != submits[0]["action_id"]
            assert submits[2]["issued_at"] > submits[0]["issued_at"]
            assert json.dumps(submits[2]["body"], sort_keys=True) == json.dumps(submits[0]["body"], sort_keys=True)
            assert any(k == "command.refreshed" for k, _, _ in w.log)

    asyncio.run(body())


@pytest.fixture
def portal_env() -> dict[str, str]:
    # The freshness window of the portal under test, short enough for a
    # resend to outlive it (only the second test depends on it).
    return {"MWP_COMMAND_FRESHNESS_SECONDS": "2"}
