"""Running one WorkItem in an isolated slot (MWP-WRK-011): the handler sees only
its ``SlotContext``; the runtime serves the slot's own request channel, pauses
it at a checkpoint (§11.3), blocks, submits or fails it (MWP-WRK-015..018).

A submission (``work.submit``, §13) cites the Artifacts the handler produced,
each published first as a signed manifest (``artifact.publish``), and its
Evidence, signed by this Agent (``results``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from .admission import Admission, required_capabilities, retry_decision
from .context import _PAUSED, Capability, Result, SlotContext, _Port, utcnow
from .errors import Blocked, BudgetExceeded, LeaseLost, PermanentFailure, Preempted, Refused, SlotStopped
from .leases import Leases
from .offline import Offline
from .projection import WorkRow
from .results import artifact_manifest, signed_evidence
from .state import _Slot

log = logging.getLogger("mwworker")


class Slots(Admission, Leases, Offline):
    """Filling free slots, and serving each slot until its handler returns."""

    async def _fill_slots(self) -> None:
        while len(self._running) < self.slots and self._connected.is_set():
            now = utcnow()
            # A Group not caught up to its head yet may still show a WorkItem
            # as it was before this Worker's own lease revocation (issue 16
            # item 12): its rows wait; the head's arrival wakes the reactor.
            candidates = [r for r in await asyncio.to_thread(self._candidates, now) if self._caught_up(r.group_id)]
            running: dict[str, int] = {}
            for slot in self._running.values():
                running[slot.group] = running.get(slot.group, 0) + 1
            row = self.picker.pick(
                candidates,
                running=running,
                free_slots=self.slots - len(self._running),
                capabilities=frozenset(self.capabilities),
                now=now,
            )
            if row is None:
                return
            self.picker.dispatched(row, now)
            await self._start(row)

    async def _start(self, row: WorkRow) -> None:
        """``work.start`` under a new Execution Lease, then run the handler in a slot."""
        # The attempt this start makes: the Group Authority counts a new one
        # when the last execution ended without a checkpoint (spec 11.4).
        attempt = row.attempt + 1 if row.needs_new_attempt else row.attempt
        slot = _Slot(group=row.group_id, workitem=row.workitem, ownership_epoch=row.ownership_epoch,
                     revision=row.revision, attempt=attempt)  # fmt: skip
        self._running[row.workitem] = slot
        try:
            await self._start_lease(slot)
        except Refused as exc:
            del self._running[row.workitem]
            if exc.code != "AUTH_STALE_SESSION":  # the next session may start it
                self._start_refused[(row.group_id, row.workitem)] = (row.updated_sequence, utcnow())
            self.log.append(("start.refused", row.workitem, exc.code))
            log.info("work.start of %s refused: %s", row.workitem, exc)
            return
        self._presence()
        await self._flush()
        slot.task = asyncio.create_task(self._run_slot(slot, row))
        self._notify()

    def _context(self, slot: _Slot, row: WorkRow, port: _Port) -> SlotContext:
        meta = self.store.meta(slot.group)
        mission = {
            "id": meta.mission if meta else None,
            "group": slot.group,
            "title": meta.mission_title if meta else None,
            "objective": meta.mission_objective if meta else None,
        }
        checkpoints = [json.loads(c.state) for c in self.store.checkpoints(slot.group, slot.workitem) if c.state]
        return SlotContext(
            agent=self.me, group=slot.group, workitem=slot.workitem, mission=mission,
            contract=json.loads(row.contract), ownership_epoch=slot.ownership_epoch, attempt=slot.attempt,
            checkpoints=checkpoints, usage=json.loads(row.usage or "{}"), lease=slot.lease or {}, port=port,
        )  # fmt: skip

    def _handler_for(self, row: WorkRow) -> Capability | None:
        for cap in sorted(required_capabilities(row)):
            if cap in self.capabilities:
                return self.capabilities[cap]
        return None

    async def _run_slot(self, slot: _Slot, row: WorkRow) -> None:
        port = _Port()
        renewer = asyncio.create_task(self._renew_loop(slot))
        outcome = "ended"
        try:
            cap = self._handler_for(row)
            slot.ctx = ctx = await asyncio.to_thread(self._context, slot, row, port)
            if cap is None:
                await self._fail(slot, ctx, "no handler for the contract's capabilities", retryable=False)
                outcome = "failed"
                return
            handler: asyncio.Task[Result] = asyncio.create_task(cap.handler(ctx))
            slot.handler_task = handler
            outcome = await self._serve(slot, ctx, port, handler)
        except asyncio.CancelledError:
            # _stop_slot cancels a slot still setting up (no handler yet):
            # its lease ended elsewhere, so the slot stopped.
            if slot.stopped is not None:
                outcome = "stopped"
            raise
        finally:
            renewer.cancel()
            with contextlib.suppress(BaseException):
                await renewer
            if self._running.get(slot.workitem) is slot:  # a later slot of the same WorkItem keeps its place
                del self._running[slot.workitem]
            self.log.append((outcome, slot.workitem, slot.stopped or ""))
            self._presence()
            with contextlib.suppress(Exception):
                await self._flush()
            self._wake.set()
            self._notify()

    async def _serve(self, slot: _Slot, ctx: SlotContext, port: _Port, handler: asyncio.Task[Result]) -> str:
        """Serve the slot's requests until its handler returns; what became of it."""
        queue = port._queue
        while True:
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({handler, getter}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                op, args, fut = getter.result()
                try:
                    fut.set_result(await self._serve_one(slot, ctx, op, args))
                except LeaseLost as exc:
                    # The handler gets LeaseLost at its await and must return;
                    # nothing lease-bound is sent for this slot any more.
                    slot.stopped = slot.stopped or str(exc)
                    slot.lease_id = None
                    if not fut.done():
                        fut.set_exception(LeaseLost(str(exc)))
                except (Exception, SlotStopped) as exc:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            getter.cancel()
            return await self._finish(slot, ctx, handler)

    async def _finish(self, slot: _Slot, ctx: SlotContext, handler: asyncio.Task[Result]) -> str:
        try:
            result = handler.result()
        except asyncio.CancelledError:
            return "stopped"
        except Preempted:
            return "preempted"
        except Blocked:
            return "blocked"
        except LeaseLost:
            return "stopped"
        except PermanentFailure as exc:
            await self._fail(slot, ctx, f"{exc}", retryable=False)
            return "failed"
        except BudgetExceeded as exc:
            await self._fail(slot, ctx, f"budget exceeded: {exc}", retryable=False)
            return "failed"
        except Exception as exc:
            summary = f"{type(exc).__name__}: {exc}"
            decision = retry_decision(ctx.contract, attempt=slot.attempt, usage=ctx._usage, now=utcnow())
            await self._fail(slot, ctx, summary, retryable=decision.retry)
            return "retrying" if decision.retry else "failed"
        if slot.stopped is not None or slot.lease_id is None:
            return "stopped"
        if not isinstance(result, Result):
            await self._fail(slot, ctx, "the handler returned no Result", retryable=False)
            return "failed"
        if not result.artifacts or not result.evidence:
            await self._fail(slot, ctx, "a submission needs an Artifact and Evidence (§13.2)", retryable=False)
            return "failed"
        try:
            body: dict[str, Any] = {
                "artifactIds": [await self._publish(slot, ctx, h) for h in result.artifacts],
                "evidence": [self._sign_evidence(ctx, e) for e in result.evidence],
            }
            usage = ctx._take_usage()
            if usage:
                body["usageDelta"] = usage
            await self._lease_command(slot, "work.submit", body)
        except LeaseLost as exc:
            slot.stopped = slot.stopped or str(exc)  # why, for the log
            return "stopped"
        except Refused as exc:
            await self._fail(slot, ctx, f"submission refused: {exc.code} {exc.message}", retryable=False)
            return "failed"
        return "submitted"

    def _sign_evidence(self, ctx: SlotContext, draft: dict[str, Any]) -> dict[str, Any]:
        return signed_evidence(draft, key=self.identity.key, agent=self.me, mission=str(ctx.mission["id"]),
                               group=ctx.group, workitem=ctx.workitem, now=utcnow())  # fmt: skip

    async def _publish(self, slot: _Slot, ctx: SlotContext, content_hash: str) -> str:
        """``artifact.publish`` of the signed manifest of content this slot stored; its Artifact ID."""
        size, media_type = slot.artifacts.get(content_hash, (0, "application/octet-stream"))
        row = self.store.row(slot.group, slot.workitem)
        if row is None or row.pins is None:
            raise LeaseLost(f"{slot.workitem}: no acceptance pinned this Worker's card versions (§6.1)")
        manifest = artifact_manifest(
            content_hash, size=size, media_type=media_type, key=self.identity.key, agent=self.me, portal=self.portal,
            mission=str(ctx.mission["id"]), group=ctx.group, workitem=ctx.workitem, contract=ctx.contract,
            pins=json.loads(row.pins), now=utcnow(),
        )  # fmt: skip
        await self._lease_command(slot, "artifact.publish", {"artifact": manifest})
        return str(manifest["artifactId"])

    async def _fail(self, slot: _Slot, ctx: SlotContext, summary: str, *, retryable: bool) -> None:
        """``work.fail`` with failure Evidence under the current lease (§10.2: ``active``
        -> ``failed``). A retryable failure within the retry policy is re-offered to
        this Worker after the backoff (``work.offer`` from ``failed``, §11.4), and
        admission accepts that offer as any other."""
        if slot.lease_id is None or slot.stopped is not None:
            return
        criteria = [str(c["criterionId"]) for c in ctx.contract.get("acceptanceCriteria") or []]
        draft = ctx.evidence(criteria, result="failed", method=summary[:4000] or "failure", summary=summary[:2000],
                             type="failure_report")  # fmt: skip
        body: dict[str, Any] = {"reason": summary[:4000] or "failed", "evidence": [self._sign_evidence(ctx, draft)],
                                "retryable": retryable}  # fmt: skip
        with contextlib.suppress(LeaseLost, Refused):
            await self._lease_command(slot, "work.fail", body)

    async def _serve_one(self, slot: _Slot, ctx: SlotContext, op: str, args: dict[str, Any]) -> Any:
        if op == "checkpoint":
            return await self._checkpoint(slot, args)
        if op == "block":
            if args["usage"]:
                await self._record_usage(slot, args["usage"])
            body = {"checkpoint": args["checkpoint"], "reason": args["resolution"]}
            await self._lease_command(slot, "work.block", body)
            slot.lease_id = None
            self.log.append(("blocked", slot.workitem, args["resolution"]))
            return None
        if op == "effect.lookup":
            return await asyncio.to_thread(self.store.side_effect, args["key"])
        if op == "effect.intent":
            if self._disconnected_at is not None:
                # No externally visible action offline (spec 11.5): the effect
                # waits for the reconnect and the reconciliation, and only
                # goes ahead if the lease survived them.
                await self._connected.wait()
                await self._reconciled.wait()
                if slot.lease_id is None or slot.stopped is not None:
                    raise LeaseLost("the lease did not survive the disconnection")
            # The intent is durable before dispatch (persistence guide, "External side effects").
            return await asyncio.to_thread(
                self.store.side_effect_intent, args["key"], group=slot.group, workitem=slot.workitem,
                ownership_epoch=slot.ownership_epoch, name=args["name"],
            )  # fmt: skip
        if op == "effect.settle":
            return await asyncio.to_thread(self.store.side_effect_settle, args["key"], args["status"], args["receipt"])
        if op == "artifact":
            stored = await self._http.put_artifact(self._token, slot.group, args["data"], args["media_type"])
            content_hash = stored if stored.startswith("sha256:") else f"sha256:{stored}"
            slot.artifacts[content_hash] = (len(args["data"]), args["media_type"])
            return content_hash
        raise ValueError(f"unknown slot request {op}")

    async def _record_usage(self, slot: _Slot, usage: dict[str, int]) -> None:
        """Usage a Command without its own ``usageDelta`` cannot carry (§12)."""
        await self._lease_command(slot, "ext.missionweaveprotocol.core.resource_usage_record", {"usageDelta": usage})

    async def _checkpoint(self, slot: _Slot, args: dict[str, Any]) -> str:
        """Checkpoint under the current lease; then pause (preemption) or start again."""
        body: dict[str, Any] = {"checkpoint": args["checkpoint"], "progress": args["progress"]}
        if args["usage"]:
            body["usageDelta"] = args["usage"]
        if self._disconnected_at is not None and not self._connected.is_set():
            # The Group service is unreachable: the progress is buffered with
            # its binding and the slot pauses; no new lease is taken offline
            # (spec 11.5). It is reconciled on reconnect.
            async with slot.lock:
                await self._buffer_checkpoint(slot, body)
            slot.lease_id = None
            return _PAUSED
        await self._lease_command(slot, "work.checkpoint", body)
        # The checkpoint released the lease (spec 10.2): the WorkItem is queued again.
        slot.lease_id = None
        self.log.append(("checkpointed", slot.workitem, ""))
        if slot.preempt or self._stopping:
            # Steps 2-4 of spec 11.3 done (safe point, checkpoint emitted, pause);
            # the slot is released when the handler returns, and the WorkItem
            # waits in its Group queue (step 5).
            return _PAUSED
        try:
            await self._start_lease(slot)
        except Refused as exc:
            self.log.append(("restart.refused", slot.workitem, exc.code))
            return _PAUSED
        return "continue"
