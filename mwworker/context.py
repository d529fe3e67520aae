"""What a handler sees: its ``SlotContext``, its ``Result`` and the slot's request channel (MWP-WRK-011).

The bottom room of the runtime: nothing here knows the Worker, the store or
another slot, which is what the isolation test walks the references to check.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, NoReturn

from mwportal.protocol import attempt_key, format_time

from .errors import Blocked, BudgetExceeded, Preempted

BUDGET_DIMENSIONS = ("financial", "tokens", "tool_calls", "compute_seconds", "wall_clock_seconds", "side_effects")


def utcnow() -> datetime:
    return datetime.now(UTC)


Handler = Callable[["SlotContext"], Coroutine[Any, Any, "Result"]]


@dataclass(frozen=True, slots=True)
class Capability:
    """A registered handler and what admission control needs to know of it."""

    id: str
    version: str
    handler: Handler
    estimate: Mapping[str, float] = field(default_factory=dict)  # expected usage per WorkItem
    duration_seconds: float = 0.0  # expected run time, for deadlines


@dataclass(frozen=True, slots=True)
class Result:
    """A handler's outcome: Evidence mapped to every acceptance criterion, and Artifacts."""

    evidence: list[dict[str, Any]]
    artifacts: list[str] = field(default_factory=list)


_PAUSED = "paused"


class _Port:
    """The slot's request channel to the runtime: a queue, nothing else. The
    runtime serves each slot's queue for that slot only, so a context cannot
    act for another slot."""

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: asyncio.Queue[tuple[str, dict[str, Any], asyncio.Future[Any]]] = asyncio.Queue()

    async def call(self, op: str, **args: Any) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._queue.put((op, args, fut))
        return await fut


def _progress(phase: str, milestones: Sequence[str], next_checkpoint: str | None, blockers: Sequence[str],
              estimate: Mapping[str, Any] | None, evidence: Sequence[str]) -> dict[str, Any]:  # fmt: skip
    """The structured progress of spec 11.4 (no percentages)."""
    return {
        "phase": phase,
        "milestones": list(milestones),
        "next_checkpoint": next_checkpoint,
        "blockers": list(blockers),
        "estimate": dict(estimate) if estimate is not None else None,
        "evidence": list(evidence),
    }


class SlotContext:
    """What one WorkItem's handler may see and do (MWP-WRK-011).

    Holds only its own Mission's data (``mission``), the Work Contract
    (``contract``), the capability token bound to the current lease
    (``token``), the checkpoints accepted for this WorkItem
    (``checkpoints``, ``resume_state``), its budget (``charge``) and its
    side-effect key namespace (``idempotency_key``, ``side_effect``).
    Everything else goes through the slot's own request channel.
    """

    __slots__ = (
        "agent", "group", "workitem", "mission", "contract", "ownership_epoch", "attempt", "checkpoints",
        "resume_state", "_token", "_lease_id", "_port", "_usage", "_spent",
    )  # fmt: skip

    def __init__(
        self,
        *,
        agent: str,
        group: str,
        workitem: str,
        mission: Mapping[str, Any],
        contract: Mapping[str, Any],
        ownership_epoch: int,
        attempt: int,
        checkpoints: Sequence[Mapping[str, Any]],
        usage: Mapping[str, float],
        token: str,
        lease_id: str,
        port: _Port,
    ):
        self.agent = agent
        self.group = group
        self.workitem = workitem
        self.mission: Mapping[str, Any] = MappingProxyType(dict(mission))
        self.contract: Mapping[str, Any] = MappingProxyType(json.loads(json.dumps(contract)))
        self.ownership_epoch = ownership_epoch
        self.attempt = attempt
        self.checkpoints: tuple[Mapping[str, Any], ...] = tuple(MappingProxyType(dict(c)) for c in checkpoints)
        # Resumption restores the last accepted checkpoint (spec 11.3, 11.5).
        self.resume_state: Mapping[str, Any] | None = self.checkpoints[-1] if self.checkpoints else None
        self._token = token
        self._lease_id = lease_id
        self._port = port
        self._usage = dict(usage)  # the WorkItem's usage totals as the Group log tells
        self._spent: dict[str, float] = {}  # this slot's usage not yet reported

    @property
    def token(self) -> str:
        """The capability token bound to the current Execution Lease (rotated on renewal)."""
        return self._token

    @property
    def lease_id(self) -> str:
        return self._lease_id

    def _rebind(self, lease_id: str, token: str) -> None:
        self._lease_id, self._token = lease_id, token

    # --- budgets and side effects ----------------------------------------------

    def budget_left(self, dimension: str) -> float | None:
        """What is left of a budget dimension (None: no limit)."""
        budgets = self.contract.get("budgets") or {}
        limit = budgets.get(dimension)
        if limit is None:
            return None
        return float(limit) - self._usage.get(dimension, 0) - self._spent.get(dimension, 0)

    def charge(self, **usage: float) -> None:
        """Count usage against the contract's budgets; ``BudgetExceeded`` (and
        nothing counted) when a dimension would pass its limit. The total is
        reported with the next checkpoint, block or submission."""
        for dim, value in usage.items():
            if dim not in BUDGET_DIMENSIONS or value < 0:
                raise ValueError(f"{dim}: not a budget dimension or negative")
            left = self.budget_left(dim)
            if left is not None and value > left:
                limit = float((self.contract.get("budgets") or {})[dim])
                raise BudgetExceeded(dim, limit, limit - left + value)
        for dim, value in usage.items():
            self._spent[dim] = self._spent.get(dim, 0) + value

    def use_tool(self, tool: str) -> None:
        """Count one call of ``tool``: it must be among the contract's allowed
        tools (``PermissionError`` otherwise) and fit the tool-call budget
        (``BudgetExceeded``)."""
        allowed = (self.contract.get("allowed") or {}).get("tools") or ()
        if tool not in allowed:
            raise PermissionError(f"the Work Contract does not allow the tool {tool!r}")
        self.charge(tool_calls=1)

    def _take_usage(self) -> dict[str, float]:
        spent = {k: v for k, v in self._spent.items() if v}
        for dim, value in spent.items():
            self._usage[dim] = self._usage.get(dim, 0) + value
        self._spent = {}
        return spent

    def idempotency_key(self, operation: str) -> str:
        """The stable key of an external operation (spec 16; MWP-WRK-031):
        Mission ID, WorkItem ID, Ownership Epoch and the operation's logical ID."""
        return attempt_key(str(self.mission["id"]), self.workitem, self.ownership_epoch, operation)

    async def side_effect(
        self,
        operation: str,
        dispatch: Callable[[str], Awaitable[Any]],
        *,
        reconcile: Callable[[str], Awaitable[Any]] | None = None,
    ) -> Any:
        """Run an external operation at most once per key as far as this Worker can tell.

        ``dispatch(key)`` performs it with the idempotency key and returns its
        receipt (JSON). The intent is durable before dispatch; the receipt is
        kept, and a repeat returns it without dispatching. An earlier attempt
        whose outcome is unknown (it raised, or the process died) is first
        reconciled with ``reconcile(key)``, which returns the receipt if the
        operation happened and None if not; without it the operation is
        dispatched again under the same key, for the remote side to deduplicate.
        """
        key = self.idempotency_key(operation)
        known = await self._port.call("effect.lookup", key=key)
        if known is not None:
            status, receipt, _attempts = known
            if status == "done":
                return receipt
            if reconcile is not None:
                found = await reconcile(key)
                if found is not None:
                    await self._port.call("effect.settle", key=key, status="done", receipt=found)
                    return found
        else:
            self.charge(side_effects=1)  # a new external operation counts once, not per retry
        await self._port.call("effect.intent", key=key, name=operation)
        try:
            receipt = await dispatch(key)
        except BaseException:
            await asyncio.shield(self._port.call("effect.settle", key=key, status="uncertain", receipt=None))
            raise
        await self._port.call("effect.settle", key=key, status="done", receipt=receipt)
        return receipt

    # --- progress, preemption and blocking -----------------------------------------

    async def checkpoint(
        self,
        state: Mapping[str, Any],
        *,
        phase: str,
        milestones: Sequence[str] = (),
        next_checkpoint: str | None = None,
        estimate: Mapping[str, Any] | None = None,
        evidence: Sequence[str] = (),
    ) -> None:
        """A safe, idempotent point: ``state`` is durable in the Group log when this returns.

        A checkpoint releases the Execution Lease (spec 10.2). If preemption was
        requested, the slot pauses here: the five steps of spec 11.3
        (MWP-WRK-015) end with ``Preempted`` raised into the handler and the
        WorkItem back in its Group queue. Otherwise the slot starts again under
        a new lease and the handler continues.
        """
        progress = _progress(phase, milestones, next_checkpoint, [], estimate, evidence)
        outcome = await self._port.call("checkpoint", state=dict(state), progress=progress, usage=self._take_usage())
        if outcome == _PAUSED:
            raise Preempted(f"{self.workitem} paused at checkpoint")

    async def block(
        self,
        resolution_required: str,
        state: Mapping[str, Any],
        *,
        phase: str,
        blockers: Sequence[str] = (),
        milestones: Sequence[str] = (),
    ) -> NoReturn:
        """Checkpoint, emit ``work.blocked`` with the required resolution, release
        the slot (spec 11.4; MWP-WRK-017). Raises ``Blocked``; the WorkItem
        resumes from this checkpoint once a Coordinator unblocks it."""
        progress = _progress(phase, milestones, None, list(blockers) or [resolution_required], None, [])
        await self._port.call(
            "block", state=dict(state), progress=progress, usage=self._take_usage(), resolution=resolution_required
        )
        raise Blocked(resolution_required)

    async def put_artifact(self, data: bytes, media_type: str = "application/octet-stream") -> str:
        """Store bytes as an Artifact of this Mission's Group; its SHA-256."""
        return str(await self._port.call("artifact", data=data, media_type=media_type))

    def evidence(
        self, criteria: Sequence[str], *, result: str, method: str, summary: str, artifacts: Sequence[str] = ()
    ) -> dict[str, Any]:
        """An Evidence record (spec 13.2) produced by this Worker about this WorkItem."""
        return {
            "subject": self.workitem,
            "criteria": list(criteria),
            "method": method,
            "result": result,
            "producer": self.agent,
            "timestamp": format_time(utcnow()),
            "artifacts": list(artifacts),
            "summary": summary,
        }
