"""The Worker runtime against the real portal (daphne on the test database), over MWP 0.1.

The Coordinator and the MissionOwner send signed Commands in this process
(``tests.workitems.flow.Flow``); the Worker connects to ``/mwp/0.1`` with its
DESIGN §4 key, completes HELLO, subscribes its Groups, verifies every Event
against the Group Authority's key from ``GET /api/v0.1/keys/{keyId}`` and
works what it is offered.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from mwportal.protocol.command import Key
from mwportal.protocol.ids import urn
from mwworker import Result, SlotContext, Worker
from tests.conftest import AgentKey, group_revision
from tests.worker.portal import Flow, Portal, in_db_thread, running, state_of
from tests.workitems.flow import BASIS, CAPABILITY, contract, give_card


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


def test_the_cli_demo_works_an_offered_item_and_status_and_rebuild_read_its_store(
    portal: Portal, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey,
    worker2: AgentKey, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """``mwworker demo --portal URL --key FILE --store FILE --slots N``: what ``./mw serve`` runs for each
    demo Worker, with the DESIGN §4 key file ``mwp demo`` writes."""
    from missions.handlers.sessions import capability, issue_agent_card
    from missions.models import GroupEvent
    from mwworker.cli import main

    echo = {"id": "demo.echo", "version": "1.0.0"}
    issue_agent_card(worker.id, [capability(echo["id"], echo["version"], verified_evidence=[urn(uuid.uuid4())])])
    flow = Flow(mission, owner, coordinator, worker, worker2)
    item = flow.authorize(contract(requiredCapabilities=[echo]))
    basis = {**BASIS, "requiredCapabilities": [echo], "verifiedMatches": [echo]}
    flow.offer(item, selectionBasis=basis)  # durable: the demo Worker finds it when it connects
    key = tmp_path / "wanda.json"
    Key(worker.key.key_id, worker.key.seed, ("agent", worker.id), portal.org["id"]).write(key)  # the DESIGN §4 file
    store = tmp_path / "wanda.sqlite3"
    argv = ["demo", "--portal", portal.url, "--key", str(key), "--store", str(store), "--slots", "1", "--items", "1"]
    assert main(argv) == 0
    assert flow.item(item).state == "submitted"
    submitted = GroupEvent.objects.get(group_id=flow.group, type="work.submitted").body
    assert sorted(c for e in submitted["evidence"] for c in e["criterionIds"]) == ["accurate", "complete"]

    config = tmp_path / "wanda.toml"
    config.write_text(f'[worker]\nportal = "{portal.url}"\nkey_file = "wanda.json"\nstore = "wanda.sqlite3"\n')
    capsys.readouterr()
    assert main(["status", "--config", str(config), "--json"]) == 0
    rows = {r["group"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[urn(flow.group)]["kind"] == "mission"
    assert main(["rebuild", "--config", str(config)]) == 0
    assert "identical" in capsys.readouterr().err
    assert main(["explain", "--config", str(config), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert all(urn(item) not in json.dumps(row) for row in lines)


def _result(ctx: SlotContext, sha: str) -> Result:
    evidence = [
        ctx.evidence(
            [c["criterionId"]],
            result="passed",
            method="checked",
            summary="done",
            artifacts=[sha],
            type=c["evidenceRequired"][0],
        )  # fmt: skip
        for c in ctx.contract["acceptanceCriteria"]
    ]
    return Result(evidence=evidence, artifacts=[sha])


def test_preemption_checkpoints_releases_the_slot_and_resumes_later_MWP_WRK_015(
    portal: Portal, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey,
    worker2: AgentKey, tmp_path: Path,
) -> None:  # fmt: skip
    """§11.3's five steps: preemption requested, the next checkpoint emitted, the
    slot released, the other WorkItem run, the first resumed from its checkpoint."""
    give_card(worker)
    flow = Flow(mission, owner, coordinator, worker, worker2)
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1)
    gates: dict[str, asyncio.Event] = {}
    seen: dict[str, list[int]] = {}

    @w.capability(CAPABILITY["id"], CAPABILITY["version"])
    async def gated(ctx: SlotContext) -> Result:
        done = list((ctx.resume_state or {}).get("completedMilestones") or [])
        seen.setdefault(ctx.workitem, []).append(len(done))
        for step in range(len(done), 2):
            gate = gates.get(ctx.workitem)
            if gate is not None:
                await gate.wait()
            done.append(f"step {step + 1}")
            await ctx.checkpoint(phase=f"step {step + 1}", milestones=done)
        return _result(ctx, await ctx.put_artifact(b"# summary\n", "text/markdown"))

    async def body() -> None:
        a = await in_db_thread(flow.authorize)
        gates[urn(a)] = asyncio.Event()
        await in_db_thread(flow.offer, a)
        await w.until(lambda: urn(a) in w.running)
        b = await in_db_thread(flow.authorize)
        await in_db_thread(flow.offer, b)
        await w.until(lambda: state_of(w, flow.group, b) == "queued")  # accepted; the only slot is busy
        assert w.request_preemption(urn(a))
        gates[urn(a)].set()
        await w.until(lambda: {state_of(w, flow.group, x) for x in (a, b)} == {"submitted"}, timeout=30)
        order = [(kind, item) for kind, item, _ in w.log if item in (urn(a), urn(b))]
        assert (
            order.index(("preempted", urn(a))) < order.index(("started", urn(b))) < order.index(("submitted", urn(b)))
        )
        assert [c.number for c in w.store.checkpoints(urn(flow.group), urn(a))] == [1, 2]
        assert seen[urn(a)] == [0, 1]  # resumed from the checkpoint, not from the start
        assert seen[urn(b)] == [0]

    asyncio.run(running(w, body, timeout=60))


def test_block_checkpoints_releases_the_slot_and_resumes_after_unblock_MWP_WRK_017(
    portal: Portal, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey,
    worker2: AgentKey, tmp_path: Path,
) -> None:  # fmt: skip
    give_card(worker)
    flow = Flow(mission, owner, coordinator, worker, worker2)
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1)
    resumed: list[Any] = []

    @w.capability(CAPABILITY["id"], CAPABILITY["version"])
    async def needs_input(ctx: SlotContext) -> Result:
        if ctx.resume_state is None:
            await ctx.block("the survey file is missing", phase="reading", milestones=["read a.csv"])
        resumed.append(list((ctx.resume_state or {}).get("completedMilestones") or []))
        return _result(ctx, await ctx.put_artifact(b"# summary\n", "text/markdown"))

    async def body() -> None:
        item = await in_db_thread(flow.authorize)
        await in_db_thread(flow.offer, item)
        await w.until(lambda: state_of(w, flow.group, item) == "blocked")
        await w.until(lambda: urn(item) not in w.running)  # the slot is released
        row = w.store.row(urn(flow.group), urn(item))
        assert row is not None and row.resolution_required == "the survey file is missing"
        assert row.owner == w.me  # ownership stays during the bounded blocked lease
        await in_db_thread(flow.unblock, item)
        await w.until(lambda: state_of(w, flow.group, item) == "submitted")
        assert resumed == [["read a.csv"]]

    asyncio.run(running(w, body))


def test_an_offer_it_cannot_honour_is_declined_with_a_structured_reason_spec_10_3(
    portal: Portal, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey,
    worker2: AgentKey, tmp_path: Path,
) -> None:  # fmt: skip
    """Admission control (§10.3): a capability this Worker lacks is declined with
    ``ext.mwportal.work.offer_decline`` naming the reason; the next offer is taken."""
    from missions.models import GroupEvent

    give_card(worker)
    flow = Flow(mission, owner, coordinator, worker, worker2)
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1)
    register_stepper(w, steps=1)
    other = {"id": "text.translate", "version": "2.0.0"}

    async def body() -> None:
        foreign = await in_db_thread(lambda: flow.authorize(contract(requiredCapabilities=[other])))
        basis = {**BASIS, "requiredCapabilities": [other], "verifiedMatches": [other]}
        await in_db_thread(lambda: flow.offer(foreign, selectionBasis=basis))
        ok = await in_db_thread(flow.authorize)
        await in_db_thread(flow.offer, ok)
        await w.until(lambda: state_of(w, flow.group, ok) == "submitted", timeout=30)
        declined = await in_db_thread(
            lambda: [e.body for e in GroupEvent.objects.filter(group_id=flow.group, type=DECLINED)]
        )
        assert [(d["workItemId"], d["agentId"], d["reason"]) for d in declined] == [(urn(foreign), worker.urn,
                                                                                      "capability")]  # fmt: skip
        assert ("offer.declined", urn(foreign), "capability") in w.log

    asyncio.run(running(w, body))


DECLINED = "ext.mwportal.work.offer_declined"


def test_a_replaced_session_stops_the_slot_and_the_item_restarts_under_a_new_lease_spec_6_3(
    portal: Portal, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey,
    worker2: AgentKey, tmp_path: Path,
) -> None:  # fmt: skip
    """§6.3: issuing Session Epoch n + 1 fences n; the Group Authority revokes the
    old session's lease (§11.3). The Worker stops the slot, says HELLO again and
    runs the WorkItem under a new lease."""
    give_card(worker)
    flow = Flow(mission, owner, coordinator, worker, worker2)
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1)
    gate = asyncio.Event()

    @w.capability(CAPABILITY["id"], CAPABILITY["version"])
    async def gated(ctx: SlotContext) -> Result:
        await gate.wait()
        return _result(ctx, await ctx.put_artifact(b"# summary\n", "text/markdown"))

    async def body() -> None:
        item = await in_db_thread(flow.authorize)
        await in_db_thread(flow.offer, item)
        await w.until(lambda: w.lease_of(urn(item)) is not None)
        first, epoch = w.lease_of(urn(item)), w.session_epoch
        assert epoch is not None
        await in_db_thread(worker.open_session)  # another runtime of this Agent takes over
        await w.until(
            lambda: (w.session_epoch or 0) > epoch + 1 and w.lease_of(urn(item)) not in (None, first), timeout=30
        )
        gate.set()
        await w.until(lambda: state_of(w, flow.group, item) == "submitted", timeout=30)
        stops = [detail for kind, i, detail in w.log if kind == "stopped" and i == urn(item)]
        assert stops and stops[0] in ("session replaced", "new session", REVOKED)

    asyncio.run(running(w, body, timeout=60))


REVOKED = "ext.missionweaveprotocol.core.work_execution_lease_revoked"


@pytest.mark.parametrize("portal_env", [{"MWP_LEASE_SECONDS": "4"}])
def test_the_lease_is_renewed_before_expiry_with_a_stable_lease_id_MWP_WRK_013(
    portal: Portal, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey,
    worker2: AgentKey, tmp_path: Path,
) -> None:  # fmt: skip
    """§11.3: the owner renews its Execution Lease (``..._work_execution_lease_renew``,
    yielding ``work.progressed``) before it expires; the Lease ID stays."""
    give_card(worker)
    flow = Flow(mission, owner, coordinator, worker, worker2)
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1, renew_fraction=0.25)
    renewed = asyncio.Event()
    seen: list[tuple[str, str]] = []

    @w.capability(CAPABILITY["id"], CAPABILITY["version"])
    async def long_running(ctx: SlotContext) -> Result:
        seen.append((ctx.lease_id, str(ctx.lease["expiresAt"])))
        await renewed.wait()  # longer than one lease: only renewal keeps it
        seen.append((ctx.lease_id, str(ctx.lease["expiresAt"])))
        return _result(ctx, await ctx.put_artifact(b"# summary\n", "text/markdown"))

    async def body() -> None:
        item = await in_db_thread(flow.authorize)
        await in_db_thread(flow.offer, item)
        await w.until(lambda: w.renewals_of(urn(item)) >= 2, timeout=30)
        renewed.set()
        await w.until(lambda: state_of(w, flow.group, item) == "submitted", timeout=30)
        (first_lease, first_expiry), (last_lease, last_expiry) = seen
        assert first_lease == last_lease  # a stable Lease ID across renewals
        assert last_expiry > first_expiry  # each renewal moved the expiry on

    asyncio.run(running(w, body, timeout=60))


def test_an_ended_membership_stops_the_slot_spec_8(
    portal: Portal, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey,
    worker2: AgentKey, tmp_path: Path,
) -> None:  # fmt: skip
    give_card(worker)
    flow = Flow(mission, owner, coordinator, worker, worker2)
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1)
    gate = asyncio.Event()

    @w.capability(CAPABILITY["id"], CAPABILITY["version"])
    async def gated(ctx: SlotContext) -> Result:
        await gate.wait()
        return _result(ctx, await ctx.put_artifact(b"# summary\n", "text/markdown"))

    async def body() -> None:
        item = await in_db_thread(flow.authorize)
        await in_db_thread(flow.offer, item)
        await w.until(lambda: w.lease_of(urn(item)) is not None)
        await in_db_thread(lambda: owner.send("membership.end", flow.group, {"principal": worker.actor},
                                              expected_revision=group_revision(flow.group)))  # fmt: skip
        await w.until(lambda: urn(item) not in w.running, timeout=20)
        stops = [detail for kind, i, detail in w.log if kind == "stopped" and i == urn(item)]
        assert stops and stops[0] in ("membership ended", REVOKED)
        gate.set()

    asyncio.run(running(w, body))


def test_a_dropped_connection_reconnects_with_backoff_under_a_new_session_spec_6_3(
    portal: Portal, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey,
    worker2: AgentKey, tmp_path: Path,
) -> None:  # fmt: skip
    """The portal dies and comes back: the Worker reconnects (retry rule and
    backoff), says HELLO again, which issues a new Session Epoch (§6.3) and
    revokes the old session's lease (§11.3); the WorkItem restarts under a new
    lease from the durable Cursor, and an offer made meanwhile is answered."""
    give_card(worker)
    flow = Flow(mission, owner, coordinator, worker, worker2)
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=2)
    gate = asyncio.Event()

    @w.capability(CAPABILITY["id"], CAPABILITY["version"])
    async def gated(ctx: SlotContext) -> Result:
        await gate.wait()
        return _result(ctx, await ctx.put_artifact(b"# summary\n", "text/markdown"))

    async def body() -> None:
        item = await in_db_thread(flow.authorize)
        await in_db_thread(flow.offer, item)
        await w.until(lambda: w.lease_of(urn(item)) is not None)
        epoch, lease = w.session_epoch, w.lease_of(urn(item))
        assert epoch is not None
        await asyncio.to_thread(portal.server.restart)
        second = await in_db_thread(flow.authorize)
        await in_db_thread(flow.offer, second)
        await w.until(lambda: state_of(w, flow.group, second) == "queued", timeout=30)  # answered after it
        await w.until(lambda: w.lease_of(urn(item)) not in (None, lease), timeout=30)
        assert (w.session_epoch or 0) > epoch
        gate.set()
        await w.until(lambda: {state_of(w, flow.group, x) for x in (item, second)} == {"submitted"}, timeout=40)

    asyncio.run(running(w, body, timeout=90))


def test_a_failed_attempt_is_retried_within_the_contracts_retry_policy_MWP_WRK_018(
    portal: Portal, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey,
    worker2: AgentKey, tmp_path: Path,
) -> None:  # fmt: skip
    """§11.4 mapped onto §10.2's rows: a handler's exception is ``work.fail`` with failure
    Evidence, marked retryable while the retry policy allows (active -> failed); after the
    contract's backoff the Organization's retry policy re-offers it to this Worker
    (``work.offer`` from failed, by the control plane's sweep, which beat runs and this
    test runs in its place); the Worker accepts the offer and runs the next attempt."""
    from missions.models import GroupEvent
    from workitems.tasks import retry_failed

    give_card(worker)
    flow = Flow(mission, owner, coordinator, worker, worker2)
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1)
    attempts: list[int] = []

    @w.capability(CAPABILITY["id"], CAPABILITY["version"])
    async def flaky(ctx: SlotContext) -> Result:
        attempts.append(ctx.attempt)
        if len(attempts) == 1:
            raise ConnectionError("the search API timed out")
        return _result(ctx, await ctx.put_artifact(b"# summary\n", "text/markdown"))

    retry = {"maxAttempts": 2, "backoff": "fixed", "maxDelay": "PT1S", "retryableFailures": []}

    async def beat() -> None:  # the retry sweep, as Celery beat runs it
        while True:
            await in_db_thread(retry_failed)
            await asyncio.sleep(0.2)

    async def body() -> None:
        item = await in_db_thread(lambda: flow.authorize(contract(retryPolicy=retry)))
        await in_db_thread(flow.offer, item)
        sweep = asyncio.create_task(beat())
        try:
            await w.until(lambda: state_of(w, flow.group, item) == "submitted", timeout=30)
        finally:
            sweep.cancel()
        assert attempts == [1, 2]
        events = await in_db_thread(
            lambda: [(e.type, e.as_wire()) for e in GroupEvent.objects.filter(group_id=flow.group).order_by("sequence")]
        )
        kinds = [kind for kind, _ in events]
        assert kinds.count("work.started") == 2 and kinds.count("work.offer.accepted") == 2
        failed = kinds.index("work.failed")
        assert kinds[failed + 1] == "work.offer.created"  # the retry is a §10.2 row: failed -> offered
        retried = events[failed + 1][1]
        assert retried["actor"]["type"] == "service" and retried["payload"]["candidateAgentIds"] == [worker.urn]
        waited = _moment(retried["occurredAt"]) - _moment(events[failed][1]["occurredAt"])
        assert waited.total_seconds() >= 1  # after the contract's backoff (fixed, PT1S)

    asyncio.run(running(w, body, timeout=60))


def _moment(text: str) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.parametrize("portal_env", [{"MWP_ONLINE_REPLAY_EVENTS": "3"}])
def test_cursor_too_old_restores_the_signed_snapshot_and_replays_after_it_spec_16(
    portal: Portal, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey,
    worker2: AgentKey, tmp_path: Path,
) -> None:  # fmt: skip
    """§16: a Cursor outside the online log is CURSOR_TOO_OLD with a signed snapshot
    reference; the Worker fetches it, checks its hash and the Group Authority's
    signature, restores it and subscribes after its sequence."""
    give_card(worker)
    flow = Flow(mission, owner, coordinator, worker, worker2)
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1)
    register_stepper(w, steps=1)

    async def body() -> None:
        for _ in range(3):
            await in_db_thread(flow.authorize)  # the log outgrows the online window
        await w.until(lambda: ("snapshot.restored", urn(flow.group)) in [(k, i) for k, i, _ in w.log], timeout=30)
        item = await in_db_thread(flow.authorize)
        await in_db_thread(flow.offer, item)
        await w.until(lambda: state_of(w, flow.group, item) == "submitted", timeout=30)
        meta = w.store.meta(urn(flow.group))
        assert meta is not None and meta.restored_snapshot_sequence is not None
        assert len(w.store.queue(urn(flow.group))) == 4  # three WorkItems from the snapshot, one replayed after it

    asyncio.run(running(w, body, timeout=60))
