"""A restarted Worker catches up before it acts on ownership; a stale Command is sent anew (issue 16 item 12).

The soak of issue 16 saw a restarted Worker send ``work.start`` before it had
applied its own lease revocation, in 2 of 40 restarts: its store still showed
the WorkItem at the revision it had before the crash, and the Group Authority
answered REVISION_CONFLICT. Here the race is made certain: the Worker's store
lags the server (it sent ``work.start`` and died before applying its Event),
the restart's new session revokes that lease (MWP-WRK-014), and a relay holds
the Group's replay back while other frames pass. No ``work.start`` may go out
before the Worker's store has reached the revocation
(``ext.missionweaveprotocol.core.work_execution_lease_revoked``), restart after
restart.

Against a real daphne (``/mwp/0.1``), through ``tests/worker/relay.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from mwportal.protocol.ids import urn
from mwworker import Identity, Result, SlotContext, WorkRow
from mwworker.picker import FairScheduler
from tests.conftest import AgentKey
from tests.worker.portal import Flow, Portal, in_db_thread, running, state_of
from tests.worker.relay import Relay, RelayedWorker
from tests.workitems.flow import CAPABILITY, contract, give_card

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


REVOKED = "ext.missionweaveprotocol.core.work_execution_lease_revoked"


def relayed(portal: Portal, agent: AgentKey, relay: Relay, store: Path, **kw: Any) -> RelayedWorker:
    identity = Identity(agent.urn, urn(portal.org["id"]), agent.key)
    w = RelayedWorker(portal=portal.url, identity=identity, store=store, slots=1, **kw)
    w.relay_url = relay.url
    return w


def start_behind_the_workers_back(flow: Flow, agent: AgentKey, item: str) -> None:
    """What the crashed Worker did last: ``work.start`` accepted under its
    session, and the process gone before the Event reached its store."""
    from missions.models import Agent

    agent.session_epoch = Agent.objects.get(id=agent.id).session_epoch
    flow.start(item, agent)


def revocations(group: str, item: str) -> list[int]:
    from missions.models import GroupEvent

    return [
        e.sequence
        for e in GroupEvent.objects.filter(group_id=group, type=REVOKED).order_by("sequence")
        if e.body.get("workItemId") == urn(item)
    ]


def test_it_starts_nothing_before_its_replay_reaches_its_own_lease_revocation_after_a_restart(
    portal: Portal, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey,
    worker2: AgentKey, tmp_path: Path,
) -> None:  # fmt: skip
    """issue 16 item 12: 8 restarts with the lease revoked server-side and the replay held back."""
    store = tmp_path / "w.sqlite3"
    pause = asyncio.Event()

    async def pausing(ctx: SlotContext) -> Result:
        await pause.wait()
        await ctx.checkpoint(phase="pausing")  # preemption requested: raises Preempted
        raise AssertionError("a preempted checkpoint returned")

    def register(w: RelayedWorker) -> None:
        w.capability(CAPABILITY["id"], CAPABILITY["version"])(pausing)

    give_card(worker)
    flow = Flow(mission, owner, coordinator, worker, worker2)
    group = flow.group

    async def body() -> None:
        upstream = portal.server.url + "/mwp/0.1"
        async with Relay(upstream) as relay:
            # The first run accepts the offer and starts nothing.
            first = relayed(portal, worker, relay, store, picker=Gate(open_=False))
            register(first)
            # Every revoked lease ended an attempt without a checkpoint: one per restart.
            retry = {"maxAttempts": RESTARTS + 2, "backoff": "none", "maxDelay": "PT0S", "retryableFailures": []}
            item = await in_db_thread(lambda: flow.authorize(contract(retryPolicy=retry)))
            await in_db_thread(flow.offer, item)

            async def accepted() -> None:
                await first.until(lambda: state_of(first, group, item) == "queued")

            await running(first, accepted)
            starts: list[tuple[int, int]] = []  # (the target revision, the store's Cursor) of each work.start

            for restart in range(RESTARTS):
                await in_db_thread(start_behind_the_workers_back, flow, worker, item)
                gate = Gate()
                w = relayed(portal, worker, relay, store, picker=gate)
                register(w)
                relay.hold = {urn(group): HOLD_SECONDS}
                starts.clear()

                def seen(document: dict[str, Any], w: RelayedWorker = w) -> None:
                    if document["kind"] == "work.start" and document.get("workItemId") == urn(item):
                        starts.append((document["expectedRevision"], w.store.cursor(urn(group)).sequence))

                relay.on_command = seen

                async def cycle(w: RelayedWorker = w, gate: Gate = gate) -> None:
                    await w.until(lambda: urn(item) in w.running and w.lease_of(urn(item)) is not None)
                    # Pause it at a checkpoint, so the next restart finds it queued in the store.
                    gate.open = False
                    pause.clear()
                    assert w.request_preemption(urn(item))
                    pause.set()
                    await w.until(lambda: urn(item) not in w.running and state_of(w, group, item) == "queued")

                await running(w, cycle)
                revoked = (await in_db_thread(revocations, group, item))[-1]
                refusals = [(k, d) for k, i, d in w.log if i == urn(item) and k.endswith("refused")]
                assert refusals == [], f"restart {restart}: {refusals}"
                assert starts, f"restart {restart}: no work.start"
                # Every work.start left after the store applied the revocation.
                assert all(cursor >= revoked for _, cursor in starts), f"restart {restart}: {starts} < {revoked}"
                assert relay.connections >= restart + 2

    asyncio.run(asyncio.wait_for(body(), 120))


def test_it_sends_a_command_refused_as_stale_again_as_a_new_command_spec_19(
    portal: Portal, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey,
    worker2: AgentKey, tmp_path: Path,
) -> None:  # fmt: skip
    """§19: a submission whose answer was lost with the connection is in doubt;
    the next connection hands it, unchanged, to ``POST /api/v0.1/commands``. By
    then its ``issuedAt`` is outside the portal's freshness window (2 s here),
    and the refusal (AUTH_INVALID_SIGNATURE) is answered once with a new
    Command: new Action ID, current ``issuedAt``, new signature. On MWP 0.1 the
    reconnect's HELLO is a new Session Epoch (§6.3), which revoked the lease
    that submission cites: it is refused too, and the WorkItem is run again
    under a new lease and submitted."""
    sent: list[dict[str, Any]] = []
    give_card(worker)
    flow = Flow(mission, owner, coordinator, worker, worker2)

    async def body() -> None:
        async with Relay(portal.server.url + "/mwp/0.1") as relay:
            w = relayed(portal, worker, relay, tmp_path / "w.sqlite3", refresh_after_seconds=1.0)

            @w.capability(CAPABILITY["id"], CAPABILITY["version"])
            async def done(ctx: SlotContext) -> Result:
                criteria = [c["criterionId"] for c in ctx.contract["acceptanceCriteria"]]
                # Each attempt's own output (an Artifact is published once per content hash in a Group).
                sha = await ctx.put_artifact(f"# summary by {ctx.lease_id}\n".encode(), "text/markdown")
                evidence = ctx.evidence(criteria, result="passed", method="checked", summary="done", artifacts=[sha])
                return Result(evidence=[evidence], artifacts=[sha])

            def swallow_first_submit(document: dict[str, Any]) -> bool:
                sent.append(document)
                submits = [d for d in sent if d["kind"] == "work.submit"]
                return len(submits) == 1 and submits[0] is document

            relay.swallow = swallow_first_submit
            relay.drop_after = 3.0  # past the 2 s window: the resend is stale

            async def submitted() -> None:
                item = await in_db_thread(flow.authorize)
                await in_db_thread(flow.offer, item)
                await w.until(lambda: state_of(w, flow.group, item) in ("submitted", "failed"), timeout=30)
                assert state_of(w, flow.group, item) == "submitted", w.log

            await running(w, submitted, timeout=60)
            submits = [d for d in sent if d["kind"] == "work.submit"]
            # The original (swallowed; its unchanged resend went to REST), the same submission
            # as a new Command, then the next attempt's under its new lease.
            first = submits[0]
            same = [d for d in submits[1:] if json.dumps(d["payload"], sort_keys=True) == json.dumps(
                first["payload"], sort_keys=True)]  # fmt: skip
            assert same and same[0]["actionId"] != first["actionId"] and same[0]["issuedAt"] > first["issuedAt"]
            assert submits[-1]["payload"]["executionLeaseId"] != first["payload"]["executionLeaseId"]
            assert any(k == "command.refreshed" for k, _, _ in w.log)

    asyncio.run(body())


@pytest.fixture
def portal_env() -> dict[str, str]:
    # The freshness window of the portal under test, short enough for a
    # resend to outlive it (only the second test depends on it).
    return {"MWP_COMMAND_FRESHNESS_SECONDS": "2"}
