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

from mwportal.protocol import attempt_key
from mwportal.protocol.command import format_timestamp

from .errors import Blocked, BudgetExceeded, Preempted

# The six usage dimensions (docs/protocol-choices.md: the reference
# implementation's names) and the Work Contract budget member limiting each.
BUDGET_DIMENSIONS = (
    "financialMicrounits", "modelTokens", "toolCalls", "computeSeconds", "wallClockSeconds", "externalActions"
)  # fmt: skip
BUDGET_LIMITS = {
    "financialMicrounits": ("financialLimit", 1_000_000),  # the budget is in currency units
    "modelTokens": ("modelTokenLimit", 1),
    "toolCalls": ("toolCallLimit", 1),
    "computeSeconds": ("computeSecondsLimit", 1),
    "wallClockSeconds": ("wallClockSecondsLimit", 1),
    "externalActions": ("externalSideEffectLimit", 1),
}


def budget_limit(contract: Mapping[str, Any], dimension: str) -> float | None:
    """The Work Contract's limit on a usage dimension, in that dimension's unit (None: no limit)."""
    member, scale = BUDGET_LIMITS[dimension]
    budget = contract.get("budget")
    limit = budget.get(member) if isinstance(budget, Mapping) else None
    return None if limit is None else float(limit) * scale


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
              estimate: str, evidence: Sequence[str]) -> dict[str, Any]:  # fmt: skip
    """The structured progress of §11.4 (the WorkItem schema's ``progress``, every
    member present; no percentages)."""
    return {
        "currentPhase": phase,
        "completedMilestones": list(milestones),
        "nextCheckpoint": next_checkpoint or "submission",
        "blockers": list(blockers),
        "updatedCompletionEstimate": estimate,
        "evidenceIds": list(evidence),
    }


def _checkpoint(phase: str, milestones: Sequence[str], next_step: str | None, state_hash: str | None) -> dict[str, Any]:
    """A normative checkpoint (§11.3, §11.4): phase, milestones, next step, the state Artifact's hash."""
    out: dict[str, Any] = {"phase": phase, "createdAt": format_timestamp(utcnow()),
                           "completedMilestones": list(milestones)}  # fmt: skip
    if next_step:
        out["nextStep"] = next_step
    if state_hash:
        out["stateArtifactHash"] = state_hash
    return out


class SlotContext:
    """What one WorkItem's handler may see and do (MWP-WRK-011).

    Holds only its own Mission's data (``mission``), the Work Contract
    (``contract``), its current Execution Lease (``lease``), the checkpoints
    accepted for this WorkItem (``checkpoints``: normative checkpoint
    objects; ``resume_state`` the last), its budget (``charge``) and its
    side-effect key namespace (``idempotency_key``, ``side_effect``).
    Everything else goes through the slot's own request channel.
    """

    __slots__ = (
        "agent", "group", "workitem", "mission", "contract", "ownership_epoch", "attempt", "checkpoints",
        "resume_state", "_lease", "_port", "_usage", "_spent",
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
        lease: Mapping[str, Any],
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
        self._lease: Mapping[str, Any] = MappingProxyType(dict(lease))
        self._port = port
        self._usage = dict(usage)  # the WorkItem's usage totals as the Group log tells
        self._spent: dict[str, float] = {}  # this slot's usage not yet reported

    @property
    def lease(self) -> Mapping[str, Any]:
        """The current Execution Lease (lease.schema.json; a new one after a checkpoint, renewed in place)."""
        return self._lease

    @property
    def lease_id(self) -> str:
        return str(self._lease.get("leaseId", ""))

    def _rebind(self, lease: Mapping[str, Any]) -> None:
        self._lease = MappingProxyType(dict(lease))

    # --- budgets and side effects ----------------------------------------------

    def budget_left(self, dimension: str) -> float | None:
        """What is left of a usage dimension under the contract's budget (None: no limit)."""
        limit = budget_limit(self.contract, dimension)
        if limit is None:
            return None
        return limit - self._usage.get(dimension, 0) - self._spent.get(dimension, 0)

    def charge(self, **usage: float) -> None:
        """Count usage against the contract's budgets; ``BudgetExceeded`` (and
        nothing counted) when a dimension would pass its limit. The total is
        reported with the next checkpoint, block or submission."""
        for dim, value in usage.items():
            if dim not in BUDGET_DIMENSIONS or value < 0:
                raise ValueError(f"{dim}: not a budget dimension or negative")
            left = self.budget_left(dim)
            if left is not None and value > left:
                limit = budget_limit(self.contract, dim) or 0.0
                raise BudgetExceeded(dim, limit, limit - left + value)
        for dim, value in usage.items():
            self._spent[dim] = self._spent.get(dim, 0) + value

    def use_tool(self, tool: str) -> None:
        """Count one call of ``tool``: it must be among the contract's allowed
        resources (``allowedResources``, a ``tool`` grant naming it; ``PermissionError``
        otherwise) and fit the tool-call budget (``BudgetExceeded``)."""
        allowed: set[str] = set()
        for grant in self.contract.get("allowedResources") or ():
            allowed.add(str(grant["resource"]))
            allowed.update(str(op) for op in grant["operations"])
        if tool not in allowed:
            raise PermissionError(f"the Work Contract does not allow the tool {tool!r}")
        self.charge(toolCalls=1)

    def _take_usage(self) -> dict[str, int]:
        """The usage not yet reported, as the integer delta a Command carries (§12)."""
        spent = {k: int(round(v)) for k, v in self._spent.items() if round(v)}
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
            self.charge(externalActions=1)  # a new external operation counts once, not per retry
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
        *,
        phase: str,
        milestones: Sequence[str] = (),
        next_step: str | None = None,
        state_artifact: str | None = None,
        estimate: str | None = None,
        evidence: Sequence[str] = (),
    ) -> None:  # estimate: the updated completion estimate (RFC 3339)
        """A safe, idempotent point: the checkpoint (§11.3: ``phase``, the
        ``milestones`` done, the ``next_step``, and the hash of an Artifact
        holding the handler's state, ``put_artifact``) is durable in the Group
        log when this returns.

        A checkpoint releases the Execution Lease (§10.2). If preemption was
        requested, the slot pauses here: the five steps of §11.3
        (MWP-WRK-015) end with ``Preempted`` raised into the handler and the
        WorkItem back in its Group queue. Otherwise the slot starts again under
        a new lease and the handler continues.
        """
        # Without an estimate of its own, the handler still means to finish by the deadline.
        progress = _progress(phase, milestones, next_step, [], estimate or str(self.contract["deadline"]), evidence)
        checkpoint = _checkpoint(phase, milestones, next_step, state_artifact)
        outcome = await self._port.call("checkpoint", checkpoint=checkpoint, progress=progress,
                                        usage=self._take_usage())  # fmt: skip
        if outcome == _PAUSED:
            raise Preempted(f"{self.workitem} paused at checkpoint")

    async def block(
        self,
        resolution_required: str,
        *,
        phase: str,
        milestones: Sequence[str] = (),
        next_step: str | None = None,
        state_artifact: str | None = None,
    ) -> NoReturn:
        """Checkpoint, emit ``work.blocked`` naming the required resolution, release
        the slot (§11.4; MWP-WRK-017). Raises ``Blocked``; the WorkItem
        resumes from this checkpoint once a Coordinator unblocks it."""
        checkpoint = _checkpoint(phase, milestones, next_step, state_artifact)
        await self._port.call("block", checkpoint=checkpoint, usage=self._take_usage(), resolution=resolution_required)
        raise Blocked(resolution_required)

    async def put_artifact(self, data: bytes, media_type: str = "application/octet-stream") -> str:
        """Store bytes as content of this Mission's Group; its ``sha256:`` content hash."""
        return str(await self._port.call("artifact", data=data, media_type=media_type))

    def evidence(
        self, criteria: Sequence[str], *, result: str, method: str, summary: str, artifacts: Sequence[str] = (),
        type: str = "deterministic_test",
    ) -> dict[str, Any]:  # fmt: skip
        """Evidence (§13.2) about this WorkItem for ``criteria`` (criterion IDs of the
        contract): ``result`` is ``passed``, ``failed`` or ``inconclusive``. The
        runtime completes and signs it as this Agent when it is submitted."""
        return {
            "type": type,
            "subject": {"type": "work_item", "id": self.workitem},
            "criterionIds": list(criteria),
            "method": method,
            "result": result,
            "artifactHashes": list(artifacts),
            "details": {"summary": summary},
        }
