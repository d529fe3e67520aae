"""The Worker runtime end to end against a real daphne portal (spec 10.3, 11.1, 11.3-11.5, 16).

Each test starts daphne on the test database, runs ``mwworker.Worker`` in
the test's event loop and plays the Coordinator with signed Commands. Waiting
is always for a condition (``Worker.until``) with a deadline, never a sleep.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import types
import uuid
from pathlib import Path
from typing import Any

import pytest

from mwworker import Result, SlotContext, Store, Worker
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
        # Each Group has its own durable Cursor, ACKed to the server (MWP-WRK-030).
        from missions.models import AgentCard, AgentCursor, AgentPresence

        local = {g: w.store.cursor(g).sequence for g in items}
        await eventually(
            lambda: dict(AgentCursor.objects.filter(agent_id=worker.id, group_id__in=list(items))
                         .values_list("group_id", "sequence")) == {uuid.UUID(g): s for g, s in local.items()}
        )  # fmt: skip

        # Presence reports capacity against the AgentCard's max concurrency (spec 11.1).
        presence = await in_db_thread(lambda: AgentPresence.objects.get(agent_id=worker.id))
        assert presence.connected and presence.capacity["slots"] == 2
        card = await in_db_thread(lambda: AgentCard.objects.filter(agent_id=worker.id).latest("version"))
        assert card.max_concurrency == 2 and card.capabilities == [{"id": "summarize", "version": "1.0"}]

    asyncio.run(running(w, body))
    kinds = [k for k, _, _ in w.log]
    assert kinds.count("offer.accepted") == 2 and kinds.count("submitted") == 2


def test_preemption_checkpoints_releases_the_slot_and_resumes_later_MWP_WRK_015(
    portal: Portal, worker: AgentKey, tmp_path: Path
) -> None:
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1)
    gates: dict[str, asyncio.Event] = {}
    seen: dict[str, list[int]] = {}

    @w.capability("summarize", "1.0")
    async def gated(ctx: SlotContext) -> Result:
        start = int((ctx.resume_state or {}).get("step", 0))
        seen.setdefault(ctx.workitem, []).append(start)
        for step in range(start, 2):
            gate = gates.get(ctx.workitem)
            if gate is not None:
                await gate.wait()
            await ctx.checkpoint({"step": step + 1}, phase=f"step {step + 1}")
        criteria = [c["id"] for c in ctx.contract["acceptance_criteria"]]
        return Result(evidence=[ctx.evidence(criteria, result="pass", method="test", summary="done")])

    async def body() -> None:
        g = await in_db_thread(portal.mission, [worker])
        a = await in_db_thread(portal.authorize, g)
        gates[a] = asyncio.Event()
        await in_db_thread(portal.offer, g, a, [worker])
        await w.until(lambda: a in w.running)
        b = await in_db_thread(portal.authorize_and_offer, g, [worker])
        await w.until(lambda: state_of(w, g, b) == "queued")  # accepted; the only slot is busy
        # 1. the Scheduler requests preemption; 2-3. the slot reaches its next
        # checkpoint and emits it; 4. the slot is released; 5. A re-enters its queue.
        assert w.request_preemption(a)
        gates[a].set()
        await w.until(lambda: state_of(w, g, b) == "submitted" and state_of(w, g, a) == "submitted")
        order = [(kind, item) for kind, item, _ in w.log if item in (a, b)]
        assert order.index(("preempted", a)) < order.index(("started", b)) < order.index(("submitted", b))
        assert [c.number for c in w.store.checkpoints(g, a)] == [1, 2]
        assert seen[a] == [0, 1]  # resumed from the checkpoint, not from the start
        assert seen[b] == [0]

    asyncio.run(running(w, body))


def test_block_checkpoints_releases_the_slot_and_resumes_after_unblock_MWP_WRK_017(
    portal: Portal, worker: AgentKey, tmp_path: Path
) -> None:
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1)
    resumed: list[Any] = []

    @w.capability("summarize", "1.0")
    async def needs_input(ctx: SlotContext) -> Result:
        if ctx.resume_state is None:
            await ctx.block("the survey file is missing", {"step": 1, "read": ["a.csv"]}, phase="reading")
        resumed.append(dict(ctx.resume_state or {}))
        criteria = [c["id"] for c in ctx.contract["acceptance_criteria"]]
        return Result(evidence=[ctx.evidence(criteria, result="pass", method="test", summary="done")])

    async def body() -> None:
        g = await in_db_thread(portal.mission, [worker])
        item = await in_db_thread(portal.authorize_and_offer, g, [worker])
        await w.until(lambda: state_of(w, g, item) == "blocked")
        await w.until(lambda: item not in w.running)  # the slot is released
        row = w.store.row(g, item)
        assert row is not None and row.resolution_required == "the survey file is missing"
        assert row.owner == w.me  # ownership stays during the bounded blocked lease
        await in_db_thread(portal.unblock, g, item, "uploaded survey.csv")
        await w.until(lambda: state_of(w, g, item) == "submitted")
        assert resumed == [{"step": 1, "read": ["a.csv"]}]

    asyncio.run(running(w, body))


FORBIDDEN_TYPES = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.CodeType,
    types.MethodType,
    types.FrameType,
    asyncio.Future,
    asyncio.AbstractEventLoop,
    asyncio.Handle,
)


def reachable(root: object) -> list[object]:
    """Every object reachable from ``root`` through references, stopping at
    classes, modules, functions, frames and the event loop's own machinery
    (what every object in the process can reach)."""
    seen = {id(root)}
    todo, out = [root], []
    while todo:
        obj = todo.pop()
        out.append(obj)
        for ref in gc.get_referents(obj):
            if id(ref) in seen or isinstance(ref, FORBIDDEN_TYPES):
                continue
            seen.add(id(ref))
            todo.append(ref)
    return out


def test_a_slot_cannot_read_another_slots_mission_context_or_token_MWP_WRK_011(
    portal: Portal, worker: AgentKey, tmp_path: Path
) -> None:
    from workitems.handlers import token_digest
    from workitems.models import ExecutionLease

    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=2)
    contexts: dict[str, SlotContext] = {}
    both = asyncio.Event()
    release = asyncio.Event()

    @w.capability("summarize", "1.0")
    async def hold(ctx: SlotContext) -> Result:
        contexts[ctx.workitem] = ctx
        if len(contexts) == 2:
            both.set()
        await release.wait()
        criteria = [c["id"] for c in ctx.contract["acceptance_criteria"]]
        return Result(evidence=[ctx.evidence(criteria, result="pass", method="test", summary="done")])

    async def body() -> None:
        g1 = await in_db_thread(portal.mission, [worker], "North")
        g2 = await in_db_thread(portal.mission, [worker], "South")
        i1 = await in_db_thread(lambda: portal.authorize_and_offer(g1, [worker], goal="secret goal of North"))
        i2 = await in_db_thread(lambda: portal.authorize_and_offer(g2, [worker], goal="secret goal of South"))
        await asyncio.wait_for(both.wait(), 20)
        one, two = contexts[i1], contexts[i2]
        assert (one.group, one.mission["title"], two.group, two.mission["title"]) == (g1, "North", g2, "South")
        for ctx, other in ((one, two), (two, one)):
            assert not hasattr(ctx, "__dict__")  # no place to hang anything else on
            # The token is the one the Group Authority bound to this slot's lease.
            lease = await in_db_thread(lambda c=ctx: ExecutionLease.objects.get(id=c.lease_id))
            assert lease.token_hash == token_digest(ctx.token) and str(lease.workitem_id) == ctx.workitem
            assert ctx.idempotency_key("deliver") != other.idempotency_key("deliver")
            graph = reachable(ctx)
            ids = {id(o) for o in graph}
            assert not ids & {id(w), id(w.store), id(other)}, "a context reaches the Worker, store or another slot"
            strings = {o for o in graph if isinstance(o, str)}
            assert other.token not in strings and other.workitem not in strings and other.group not in strings
            assert str(other.mission["id"]) not in strings
            assert not any("secret goal of" in s and s.endswith(other.mission["title"]) for s in strings)
            assert not any(isinstance(o, Store) for o in graph)
        release.set()
        await w.until(lambda: state_of(w, g1, i1) == "submitted" and state_of(w, g2, i2) == "submitted")

    asyncio.run(running(w, body))


async def eventually(fn: Any, timeout: float = 20) -> Any:
    """Poll the database until ``fn()`` is truthy (its value), else fail."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await in_db_thread(fn)
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{fn} never held")
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("portal_env", [{"MWP_LEASE_SECONDS": "3", "MWP_START_BY_SECONDS": "3"}])
def test_a_killed_workers_item_is_reassigned_with_a_higher_epoch_and_its_late_submission_is_refused_MWP_WRK_019(
    portal: Portal, worker: AgentKey, worker2: AgentKey, tmp_path: Path
) -> None:
    from missions.models import Agent, GroupEvent
    from mwportal.protocol import ErrorCode, ProtocolError
    from workitems.models import ExecutionLease
    from workitems.tasks import expire_leases, expire_start_by

    key = tmp_path / "wanda.json"
    key.write_text(json.dumps({"agent_id": worker.id, "organization": portal.org["id"],
                               "private_key": worker.private_key, "public_key": worker.public_key}))  # fmt: skip
    key.chmod(0o600)
    config = tmp_path / "wanda.toml"
    config.write_text(textwrap.dedent(f"""\
        [worker]
        portal = "{portal.url}"
        key_file = "wanda.json"
        store = "wanda.sqlite3"
        capabilities = "tests.worker.runtime_caps"
        slots = 1
    """))  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    process = subprocess.Popen([sys.executable, "-m", "mwworker", "run", "--config", str(config)], cwd=root, env=env)
    w = portal.worker(worker2, tmp_path / "walt.sqlite3", slots=1)
    register_stepper(w, steps=2, seen=(seen := {}))

    async def body() -> None:
        g = await in_db_thread(portal.mission, [worker, worker2])
        item = await in_db_thread(portal.authorize_and_offer, g, [worker])
        # Wanda's subprocess accepts, starts, checkpoints and hangs mid-item.
        await eventually(lambda: portal.item(item).checkpoint_count == 1 and portal.item(item).state == "active")
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        old = await in_db_thread(lambda: ExecutionLease.objects.filter(workitem_id=item).latest("started_at"))
        # Nobody renews: the lease expires, then the start-by deadline fences the owner (spec 11.5).
        await eventually(lambda: expire_leases() >= 1, timeout=15)
        await eventually(lambda: expire_start_by() >= 1, timeout=15)
        await in_db_thread(portal.offer, g, item, [worker2])
        await w.until(lambda: state_of(w, g, item) == "submitted")
        assert seen[item] == [1]  # Walt resumed from Wanda's checkpoint
        await in_db_thread(portal.accept_result, g, item)
        row = await in_db_thread(portal.item, item)
        assert (row.state, row.ownership_epoch, str(row.owner_id)) == ("verified", 2, worker2.id)
        assert old.ownership_epoch == 1

        # Wanda's delayed submission under her old lease arrives now: refused, kept for audit only.
        def late_submit() -> str:
            worker.session_epoch = Agent.objects.get(id=worker.id).session_epoch
            evidence = [{"subject": item, "criteria": ["complete", "accurate"], "method": "test", "result": "pass",
                         "producer": worker.id, "timestamp": "2026-11-29T10:00:00Z", "artifacts": [],
                         "summary": "late"}]  # fmt: skip
            target = {"kind": "workitem", "id": item}
            with pytest.raises(ProtocolError) as info:
                worker.send("work.submit", g, {"artifacts": [], "evidence": evidence}, target=target,
                            lease_id=str(old.id), ownership_epoch=1)  # fmt: skip
            return str(info.value.code)

        code = await in_db_thread(late_submit)
        assert code in (
            ErrorCode.INVALID_STATE_TRANSITION,
            ErrorCode.WORK_STALE_OWNERSHIP,
            ErrorCode.WORK_LEASE_EXPIRED,
        )
        late = await in_db_thread(
            lambda: list(GroupEvent.objects.filter(group_id=g, type="work.late_result_recorded").values("body"))
        )
        assert [e["body"]["agent"] for e in late] == [worker.id]
        assert (await in_db_thread(portal.item, item)).state == "verified"

    try:
        asyncio.run(running(w, body, timeout=60))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


@pytest.mark.parametrize("portal_env", [{"MWP_ONLINE_REPLAY_EVENTS": "3"}])
def test_cursor_too_old_restores_the_signed_snapshot_and_replays_after_it(
    portal: Portal, worker: AgentKey, tmp_path: Path
) -> None:
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1)
    register_stepper(w, steps=1)

    async def body() -> None:
        g = await in_db_thread(portal.mission, [worker])
        for _ in range(3):
            await in_db_thread(portal.authorize, g)  # the log outgrows the online window
        task = asyncio.create_task(w.run())
        try:
            await w.until(lambda: ("snapshot.restored", g) in [(k, i) for k, i, _ in w.log])
            item = await in_db_thread(portal.authorize_and_offer, g, [worker])
            await w.until(lambda: state_of(w, g, item) == "submitted")
            meta = w.store.meta(g)
            assert meta is not None and meta.restored_snapshot_sequence is not None
            assert len(w.store.queue(g)) == 4  # three WorkItems from the snapshot, one replayed after it
        finally:
            w.stop()
            await task

    try:
        asyncio.run(asyncio.wait_for(body(), 40))
    finally:
        w.close()


def done_result(ctx: SlotContext) -> Result:
    criteria = [c["id"] for c in ctx.contract["acceptance_criteria"]]
    return Result(evidence=[ctx.evidence(criteria, result="pass", method="test", summary="done")])


def gated_worker(portal: Portal, worker: AgentKey, tmp_path: Path) -> tuple[Worker, asyncio.Event]:
    """A one-slot Worker whose handler holds its lease until the test sets the gate."""
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1)
    gate = asyncio.Event()

    @w.capability("summarize", "1.0")
    async def waits(ctx: SlotContext) -> Result:
        await gate.wait()
        return done_result(ctx)

    return w, gate


@pytest.mark.parametrize("portal_env", [{"MWP_LEASE_SECONDS": "4"}])
def test_the_lease_is_renewed_before_expiry_and_the_token_rotates_MWP_WRK_013(
    portal: Portal, worker: AgentKey, tmp_path: Path
) -> None:
    from workitems.handlers import token_digest
    from workitems.models import ExecutionLease

    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1, renew_fraction=0.25)
    renewed = asyncio.Event()
    seen: list[tuple[str, str]] = []

    @w.capability("summarize", "1.0")
    async def long_running(ctx: SlotContext) -> Result:
        seen.append((ctx.lease_id, ctx.token))
        await renewed.wait()  # longer than one lease: only renewal keeps it
        seen.append((ctx.lease_id, ctx.token))
        return done_result(ctx)

    async def body() -> None:
        g = await in_db_thread(portal.mission, [worker])
        item = await in_db_thread(portal.authorize_and_offer, g, [worker])
        await w.until(lambda: w.renewals_of(item) >= 2)
        lease = await in_db_thread(lambda: ExecutionLease.objects.get(workitem_id=item))
        assert len(lease.renewals) >= 2 and lease.status == "active"
        renewed.set()
        await w.until(lambda: state_of(w, g, item) == "submitted")
        (first_lease, first_token), (last_lease, last_token) = seen
        assert first_lease == last_lease == str(lease.id)  # a stable Lease ID across renewals
        assert first_token != last_token  # the capability token is rotated, bound to the lease
        lease = await in_db_thread(lambda: ExecutionLease.objects.get(workitem_id=item))
        assert lease.token_hash == token_digest(last_token) and lease.status == "released"

    asyncio.run(running(w, body))


def test_a_failed_attempt_is_retried_after_the_backoff_within_the_contract_MWP_WRK_018(
    portal: Portal, worker: AgentKey, tmp_path: Path
) -> None:
    from missions.models import GroupEvent
    from mwportal.protocol import parse_time

    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1)
    attempts: list[int] = []

    @w.capability("summarize", "1.0")
    async def flaky(ctx: SlotContext) -> Result:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("the search API timed out")
        return done_result(ctx)

    retry = {"max_attempts": 2, "backoff_seconds": 1, "backoff_multiplier": 2, "deadline": None, "max_cost": None}

    async def body() -> None:
        g = await in_db_thread(portal.mission, [worker])
        item = await in_db_thread(lambda: portal.authorize_and_offer(g, [worker], retry=retry))
        await w.until(lambda: state_of(w, g, item) == "submitted")
        assert attempts == [1, 2]
        events = await in_db_thread(
            lambda: list(GroupEvent.objects.filter(group_id=g, aggregate_id=item).order_by("sequence"))
        )
        types_ = [e.type for e in events]
        assert types_.count("work.started") == 2 and "work.attempt_failed" in types_
        failed = next(e for e in events if e.type == "work.attempt_failed")
        second = [e for e in events if e.type == "work.started"][1]
        assert failed.body["evidence"][0]["result"] == "fail"
        # The second attempt started no earlier than the backoff allowed (spec 11.4).
        started_at = parse_time(second.as_wire()["occurred_at"], "occurred_at")
        assert started_at >= parse_time(failed.body["retry_not_before"], "retry_not_before")

    asyncio.run(running(w, body))


def test_offers_it_cannot_honour_are_declined_with_a_structured_reason_and_the_policy_reaches_the_picker(
    portal: Portal, worker: AgentKey, tmp_path: Path
) -> None:
    from mwworker import FifoPicker
    from workitems.models import Offer

    class Recording(FifoPicker):
        policies: list[dict[str, Any]] = []

        def set_policy(self, policy: Any) -> None:
            self.policies.append(dict(policy))
            super().set_policy(policy)

    picker = Recording()
    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1, picker=picker)
    register_stepper(w, steps=1)
    policy = {"classes": {"high": 4, "normal": 1}, "default_class": "normal", "groups": {}, "aging_seconds": 60}

    async def body() -> None:
        g = await in_db_thread(portal.mission, [worker])
        translate = [{"id": "translate", "version": "2.0"}]
        foreign = await in_db_thread(lambda: portal.authorize_and_offer(g, [worker], capabilities=translate))
        late = await in_db_thread(lambda: portal.authorize_and_offer(g, [worker], deadline="2000-01-01T00:00:00Z"))
        ok = await in_db_thread(portal.authorize_and_offer, g, [worker])
        await w.until(lambda: state_of(w, g, ok) == "submitted")
        reasons = await in_db_thread(
            lambda: dict(
                Offer.objects.filter(workitem_id__in=[foreign, late]).values_list("workitem_id", "decline_reason")
            )
        )
        assert {str(k): v for k, v in reasons.items()} == {foreign: "capability", late: "deadline"}
        admin = portal.org["admin_group"]
        await in_db_thread(lambda: portal.owner.send("org.set_priority_policy", admin, {"policy": policy}))
        await w.until(lambda: policy in picker.policies)

    asyncio.run(running(w, body))


def test_a_replaced_session_stops_the_slot_and_the_item_restarts_under_a_new_lease_MWP_WRK_014(
    portal: Portal, worker: AgentKey, tmp_path: Path
) -> None:
    from workitems.models import ExecutionLease

    w, gate = gated_worker(portal, worker, tmp_path)

    async def body() -> None:
        g = await in_db_thread(portal.mission, [worker])
        item = await in_db_thread(portal.authorize_and_offer, g, [worker])
        await w.until(lambda: w.lease_of(item) is not None)
        first = w.lease_of(item)
        epoch = w.session_epoch
        await in_db_thread(worker.open_session)  # another runtime of this Agent takes over
        await w.until(lambda: w.session_epoch is not None and w.session_epoch > epoch + 1 and item in w.running
                      and w.lease_of(item) not in (None, first))  # fmt: skip
        gate.set()
        await w.until(lambda: state_of(w, g, item) == "submitted")
        leases = await in_db_thread(
            lambda: list(
                ExecutionLease.objects.filter(workitem_id=item)
                .order_by("started_at")
                .values_list("status", "end_reason")
            )
        )
        assert leases == [("revoked", "session replaced"), ("released", "submitted")]
        stops = [detail for kind, i, detail in w.log if kind == "stopped" and i == item]
        assert stops and stops[0] in ("session replaced", "work.lease_revoked")

    asyncio.run(running(w, body))


def test_a_dropped_connection_reconnects_with_backoff_and_keeps_the_session_and_its_lease(
    portal: Portal, worker: AgentKey, tmp_path: Path
) -> None:
    w, gate = gated_worker(portal, worker, tmp_path)

    async def body() -> None:
        g = await in_db_thread(portal.mission, [worker])
        item = await in_db_thread(portal.authorize_and_offer, g, [worker])
        await w.until(lambda: w.lease_of(item) is not None)
        epoch, lease = w.session_epoch, w.lease_of(item)
        await asyncio.to_thread(portal.server.restart)  # the portal dies and comes back
        second = await in_db_thread(portal.authorize_and_offer, g, [worker])
        await w.until(lambda: state_of(w, g, second) == "queued")  # answered after the reconnect
        gate.set()
        await w.until(lambda: state_of(w, g, item) == "submitted" and state_of(w, g, second) == "submitted")
        assert w.session_epoch == epoch  # the same session: no lease was revoked
        assert ("submitted", item, "") in w.log and ("started", item, lease) in w.log

    asyncio.run(running(w, body))


def test_the_cli_demo_works_offered_items_and_status_and_rebuild_read_its_store(
    portal: Portal, worker: AgentKey, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from missions.models import GroupEvent
    from mwworker.cli import main

    g = portal.mission([worker])
    item = portal.authorize_and_offer(g, [worker])  # durable: the demo Worker finds it when it connects
    key = tmp_path / "wanda.json"
    key.write_text(json.dumps({"agent_id": worker.id, "organization": portal.org["id"],
                               "private_key": worker.private_key, "public_key": worker.public_key}))  # fmt: skip
    key.chmod(0o600)
    store = tmp_path / "wanda.sqlite3"
    argv = ["demo", "--portal", portal.url, "--key", str(key), "--store", str(store), "--slots", "1", "--items", "1"]
    assert main(argv) == 0
    row = portal.item(item)
    assert (row.state, row.checkpoint_count) == ("submitted", 3)
    submitted = GroupEvent.objects.get(group_id=g, type="work.submitted").body
    assert sorted(c for e in submitted["evidence"] for c in e["criteria"]) == ["accurate", "complete"]

    config = tmp_path / "wanda.toml"
    config.write_text(f'[worker]\nportal = "{portal.url}"\nkey_file = "wanda.json"\nstore = "wanda.sqlite3"\n')
    capsys.readouterr()
    assert main(["status", "--config", str(config), "--json"]) == 0
    rows = {r["group"]: r for r in json.loads(capsys.readouterr().out)}
    assert (
        rows[g]["kind"] == "mission"
        and rows[g]["cursor"] >= GroupEvent.objects.get(group_id=g, type="work.submitted").sequence
    )
    assert main(["status", "--config", str(config)]) == 0
    assert g[:8] in capsys.readouterr().out
    assert main(["rebuild", "--config", str(config)]) == 0
    assert "identical" in capsys.readouterr().err
    # explain reads the same store (its rows are tested in tests/scheduler/test_explain.py):
    # the submitted item no longer waits, so no row names it.
    assert main(["explain", "--config", str(config), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert all(item not in json.dumps(row) for row in lines)


def test_a_removed_membership_stops_the_slot_and_the_stream(portal: Portal, worker: AgentKey, tmp_path: Path) -> None:
    from tests.conftest import group_revision

    w, gate = gated_worker(portal, worker, tmp_path)

    async def body() -> None:
        g = await in_db_thread(portal.mission, [worker])
        item = await in_db_thread(portal.authorize_and_offer, g, [worker])
        await w.until(lambda: w.lease_of(item) is not None)
        target = await in_db_thread(lambda: {"kind": "group", "id": g, "revision": group_revision(g)})
        await in_db_thread(lambda: portal.owner.send("membership.remove", g, {"agent": worker.id}, target=target))
        await w.until(lambda: item not in w.running)
        assert ("stopped", item, "membership removed") in w.log
        gate.set()

    asyncio.run(running(w, body))


def test_progress_made_while_the_portal_is_down_is_buffered_and_reconciled_MWP_WRK_020_MWP_WRK_021(
    portal: Portal, worker: AgentKey, tmp_path: Path
) -> None:
    """Spec 11.5: with the Group service unreachable the Worker buffers its
    checkpoint with the bounded-offline-execution binding (usage in its delta)
    and starts nothing new; on reconnect it re-signs and sends it before
    anything else, and resumes from it."""
    from missions.models import GroupEvent
    from workitems.offline import USAGE_RECORDED

    w = portal.worker(worker, tmp_path / "w.sqlite3", slots=1)
    gate = asyncio.Event()
    resumed_from: list[Any] = []

    @w.capability("summarize", "1.0")
    async def offline_step(ctx: SlotContext) -> Result:
        resumed_from.append(ctx.resume_state)
        if ctx.resume_state is None:
            await gate.wait()
            ctx.charge(tokens=500)
            await ctx.checkpoint({"step": 1}, phase="offline step")
        return done_result(ctx)

    async def body() -> None:
        g = await in_db_thread(portal.mission, [worker])
        item = await in_db_thread(portal.authorize_and_offer, g, [worker])
        await w.until(lambda: w.lease_of(item) is not None)
        lease = w.lease_of(item)
        await asyncio.to_thread(portal.server.kill)
        await w.until(lambda: not w.connected)
        gate.set()
        await w.until(lambda: ("buffered", item, lease) in w.log)
        (_, envelope, binding) = w.store.buffered_commands()[0]
        assert binding["lease_id"] == lease and binding["usage_delta"] == {"tokens": 500}
        assert "usage" not in envelope["body"]
        await asyncio.to_thread(portal.server.start)
        await w.until(lambda: state_of(w, g, item) == "submitted", timeout=30)
        assert w.store.buffered_commands() == []
        checkpointed = await in_db_thread(lambda: GroupEvent.objects.get(group_id=g, type="work.checkpointed"))
        assert checkpointed.body["offline"]["lease_id"] == lease
        usage = await in_db_thread(lambda: GroupEvent.objects.get(group_id=g, type=USAGE_RECORDED))
        assert usage.body["delta"] == {"tokens": 500}
        assert resumed_from == [None, {"step": 1}]

    asyncio.run(running(w, body))
