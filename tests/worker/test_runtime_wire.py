"""The Worker runtime end to end on the MWP 0.1 wire (issue 18 item 7; DESIGN §6; PROTOCOL §6.3, §16, §17).

Against ``fake_portal.FakePortal``, a Group Authority built only from the
kernel: the Worker completes the four-phase HELLO, subscribes each Group
after its durable Cursor, answers an offer and runs the WorkItem to its
submission with signed Command documents the fake verifies in the six stages,
ACKs its Cursors, reports presence in PING, refuses an Event whose signature
is not the Group Authority's, and resumes a Group paused by BACKPRESSURE while
the other Group keeps flowing. Every frame it sends is a normative
``websocket-frame``.
"""

from __future__ import annotations

import asyncio
import gc
import types
from pathlib import Path
from typing import Any

from mwportal.protocol import catalogue
from mwportal.protocol.catalogue import examples as ex
from mwportal.protocol.command import Key
from mwportal.protocol.ids import bare, new_urn
from mwworker import Identity, Result, SlotContext, Store, Worker
from tests.protocol.normative import normative_problems
from tests.worker.fake_portal import FakePortal
from tests.worker.streams import ME, ORG, Authority

CAP = {"id": "text.summarize", "version": "1.2.0"}


def contract() -> dict[str, Any]:
    return {**ex.work_contract(), "requiredCapabilities": [CAP], "deadline": "2027-06-01T00:00:00Z"}


def worker_for(portal: FakePortal, key: Key, store: Path) -> Worker:
    worker = Worker(portal=portal.url, identity=Identity(ME, ORG, key), store=store, slots=1)

    @worker.capability(CAP["id"], CAP["version"])
    async def summarize(ctx: SlotContext) -> Result:
        if not ctx.checkpoints:
            await ctx.checkpoint(phase="reading", milestones=["read"], next_step="write")
        criteria = [c["criterionId"] for c in ctx.contract["acceptanceCriteria"]]
        evidence = ctx.evidence(criteria, result="passed", method="checked", summary="ok", type="reviewer_assessment")
        return Result(evidence=[evidence], artifacts=[ex.HASH])

    return worker


async def run_until(worker: Worker, done: Any, timeout: float = 30) -> None:
    task = asyncio.create_task(worker.run())
    try:
        await worker.until(done, timeout=timeout)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)


def test_a_worker_runs_an_offered_item_to_submission_on_the_normative_wire(tmp_path: Path) -> None:
    key = Key.generate(("agent", bare(ME, "agentId")), bare(ORG, "organizationId"))
    authority = Authority.for_seed(1)

    async def scenario() -> None:
        async with FakePortal(authority, key) as portal:
            a, b = new_urn(), new_urn()
            portal.mission(a)
            portal.mission(b)
            item = portal.offer(a, contract())
            forged = portal.append(b, "message.posted", {"messageId": new_urn(), "authority": False},
                                   key=Authority.for_seed(666).key)  # fmt: skip
            paused: list[str] = []

            async def first_subscribe_of_b_is_paused(ws: Any, group: str) -> bool:
                if group == b and not paused:
                    paused.append(group)
                    await portal.backpressure(ws, b, 300)
                    return True
                return False

            portal.on_subscribe = first_subscribe_of_b_is_paused
            worker = worker_for(portal, key, tmp_path / "w.sqlite3")

            def acked() -> set[tuple[str, int]]:
                return {(x["groupId"], x["sequence"]) for f in portal.frames if f["frameType"] == "ACK"
                        for x in f["acknowledgements"]}  # fmt: skip

            def submitted() -> bool:
                row = worker.store.row(a, item)
                done = row is not None and row.state == "submitted"
                refused = ("event.refused", b, "unknown signing key") in worker.log
                return done and refused and (b, 2) in acked() and (a, len(portal.logs[a])) in acked()

            await run_until(worker, submitted)

            # HELLO (§6.3): client_init, then client_response over the challenge; then SUBSCRIBE per Group.
            assert [(f["frameType"], f.get("phase")) for f in portal.frames[:2]] == [
                ("HELLO", "client_init"), ("HELLO", "client_response")
            ]  # fmt: skip
            assert (a, 0) in portal.subscribed and (b, 0) in portal.subscribed
            # BACKPRESSURE (§17.3): Group b was paused, then subscribed again; Group a flowed meanwhile.
            assert paused == [b] and portal.subscribed.count((b, 0)) >= 2
            assert ("backpressure", b, "300") in worker.log
            # The Commands (§15.1): signed documents the fake verified, catalogue payloads, in order.
            kinds = [c["kind"] for c in portal.commands]
            assert kinds == ["work.accept_offer", "work.start", "work.checkpoint", "work.start", "artifact.publish",
                             "work.submit"]  # fmt: skip
            for doc in portal.commands:
                assert doc["sessionEpoch"] == 1 and doc["membershipEpoch"] == 1
                assert ("expectedRevision" in doc) is catalogue.command(doc["kind"]).compare_and_set
            submit = portal.commands[-1]["payload"]
            assert submit["evidence"][0]["generatedBy"] == {"type": "agent", "id": ME}
            # Every Event the Worker applied is the Group Authority's; the forged one (sequence 3,
            # signed with a key the Registry does not hold) was delivered and not applied.
            assert worker.store.cursor(b).sequence == 2 and forged["sequence"] == 3
            assert ("event.refused", b, "unknown signing key") in worker.log
            assert forged["eventId"] not in {e["eventId"] for e in worker.store.inbox(b)}
            # ACK (§16) and PING with a Presence Record (§6.2, §17.3).
            # Durable Cursors only: never past what was applied (the forged Event was not).
            assert {s for g, s in acked() if g == b} <= {1, 2}
            presence = [f["presence"] for f in portal.frames if f["frameType"] == "PING" and "presence" in f]
            assert presence and presence[0]["agentId"] == ME
            # Every frame the Worker sent is a normative websocket-frame (§17.1).
            for frame in portal.frames:
                assert normative_problems("websocket-frame", frame) == [], frame["frameType"]
            worker.close()

    asyncio.run(scenario())


FORBIDDEN_TYPES = (
    type, types.ModuleType, types.FunctionType, types.CodeType, types.MethodType, types.FrameType,
    asyncio.Future, asyncio.AbstractEventLoop, asyncio.Handle,
)  # fmt: skip


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


def test_a_slot_cannot_reach_another_slots_mission_context_or_lease_MWP_WRK_011(tmp_path: Path) -> None:
    key = Key.generate(("agent", bare(ME, "agentId")), bare(ORG, "organizationId"))

    async def scenario() -> None:
        async with FakePortal(Authority.for_seed(1), key) as portal:
            north, south = new_urn(), new_urn()
            portal.mission(north)
            portal.mission(south)
            i1 = portal.offer(north, {**contract(), "goal": "secret goal of North"})
            i2 = portal.offer(south, {**contract(), "goal": "secret goal of South"})
            w = Worker(portal=portal.url, identity=Identity(ME, ORG, key), store=tmp_path / "w.sqlite3", slots=2)
            contexts: dict[str, SlotContext] = {}
            both, release = asyncio.Event(), asyncio.Event()

            @w.capability(CAP["id"], CAP["version"])
            async def hold(ctx: SlotContext) -> Result:
                contexts[ctx.workitem] = ctx
                if len(contexts) == 2:
                    both.set()
                await release.wait()
                criteria = [c["criterionId"] for c in ctx.contract["acceptanceCriteria"]]
                evidence = ctx.evidence(criteria, result="passed", method="m", summary="ok", type="reviewer_assessment")
                return Result(evidence=[evidence], artifacts=[ex.HASH])

            task = asyncio.create_task(w.run())
            try:
                await asyncio.wait_for(both.wait(), 20)
                one, two = contexts[i1], contexts[i2]
                assert (one.group, two.group) == (north, south)
                for ctx, other in ((one, two), (two, one)):
                    assert not hasattr(ctx, "__dict__")  # no place to hang anything else on
                    assert ctx.lease["workItemId"] == ctx.workitem and ctx.lease_id == w.lease_of(ctx.workitem)
                    assert ctx.idempotency_key("deliver") != other.idempotency_key("deliver")
                    graph = reachable(ctx)
                    ids = {id(o) for o in graph}
                    assert not ids & {id(w), id(w.store), id(other)}, "a context reaches the Worker, store or a slot"
                    strings = {o for o in graph if isinstance(o, str)}
                    assert other.lease_id not in strings and other.workitem not in strings
                    assert other.group not in strings and str(other.mission["id"]) not in strings
                    assert not any("secret goal of" in s and s == other.contract["goal"] for s in strings)
                    assert not any(isinstance(o, Store) for o in graph)
                    assert key.seed not in {o for o in graph if isinstance(o, bytes)}  # nor this Agent's key
                release.set()
                await w.until(lambda: all(w.store.row(g, i).state == "submitted"  # type: ignore[union-attr]
                                          for g, i in ((north, i1), (south, i2))))  # fmt: skip
            finally:
                w.stop()
                await asyncio.wait_for(task, 15)
                w.close()

    asyncio.run(scenario())
