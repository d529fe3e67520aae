"""Driving WorkItems through their lifecycle with signed Commands, as clients would."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from artifacts.store import store_stream
from missions.models import Agent, Group
from mwportal.protocol import format_time
from tests.conftest import AgentKey
from workitems.models import WorkItem


def contract(**overrides: Any) -> dict[str, Any]:
    """A complete, valid Work Contract (spec 10.1; DESIGN §4a)."""
    base: dict[str, Any] = {
        "goal": "Summarise the survey responses",
        "deliverables": ["summary.md"],
        "acceptance_criteria": [
            {"id": "complete", "description": "covers every response", "evidence_methods": ["test"]},
            {"id": "accurate", "description": "no invented facts", "evidence_methods": ["reviewer"]},
        ],
        "inputs": [{"kind": "dataset", "ref": "survey-2026"}],
        "dependencies": [],
        "allowed": {"tools": ["search"], "data": ["survey"], "operations": ["read"]},
        "resources": {"memory_mb": 512},
        "capabilities": [{"id": "summarize", "version": "1.0"}],
        "deadline": None,
        "urgency": "normal",
        "business_impact": "medium",
        "budgets": {
            "financial": 100,
            "tokens": 100000,
            "tool_calls": 50,
            "compute_seconds": 3600,
            "wall_clock_seconds": 7200,
            "side_effects": 5,
        },
        "retry": {"max_attempts": 3, "backoff_seconds": 0, "backoff_multiplier": 2, "deadline": None, "max_cost": None},
        "risk": {"class": "low", "requires_execution_approval": False},
    }
    base.update(overrides)
    return base


PROGRESS = {
    "phase": "drafting",
    "milestones": ["read inputs"],
    "next_checkpoint": "outline",
    "blockers": [],
    "estimate": {"remaining_seconds": 600, "confidence": 0.7},
    "evidence": [],
}
BASIS = {
    "capability_matches": ["summarize@1.0"],
    "authorization_eligibility": True,
    "availability_estimate": "now",
    "expected_cost": 3,
    "reliability_evidence": [],
    "policy_rules": ["default"],
}


class Flow:
    """One Mission's Coordinator (Carl), owner (Olivia) and Workers (Wanda, Walt)."""

    def __init__(
        self, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey
    ):
        self.group = mission["group"]
        self.mission = mission["mission"]
        self.owner, self.coordinator, self.worker, self.worker2 = owner, coordinator, worker, worker2
        self.leases: dict[str, str] = {}

    def item(self, item_id: str) -> WorkItem:
        return WorkItem.objects.get(id=item_id)

    def target(self, item_id: str, revision: int | None = -1) -> dict[str, Any]:
        t: dict[str, Any] = {"kind": "workitem", "id": item_id}
        if revision is not None:
            t["revision"] = self.item(item_id).revision if revision == -1 else revision
        return t

    def evidence(
        self, item_id: str, producer: AgentKey, criteria: list[str] | None = None, artifacts: list[str] | None = None
    ) -> list[dict[str, Any]]:
        return [
            {
                "subject": item_id,
                "criteria": criteria or ["complete", "accurate"],
                "method": "test",
                "result": "pass",
                "producer": producer.id,
                "timestamp": format_time(datetime.now(UTC)),
                "artifacts": artifacts or [],
                "summary": "checked",
            }
        ]

    def blob(self, content: bytes = b"# summary\n") -> str:
        agent = Agent.objects.get(id=self.worker.id)
        return store_stream(
            io.BytesIO(content), "text/markdown", Group.objects.get(id=self.group), agent, 10_000_000
        ).sha256

    # --- Commands ---------------------------------------------------------

    def authorize(self, c: dict[str, Any] | None = None, item_id: str | None = None) -> str:
        item_id = item_id or str(uuid.uuid4())
        self.coordinator.send("work.authorize", self.group, {"workitem": item_id, "contract": c or contract()})
        return item_id

    def offer(
        self, item_id: str, agents: list[AgentKey] | None = None, expires_in: int = 600, **body: Any
    ) -> dict[str, Any]:
        agents = agents or [self.worker]
        expires = format_time(datetime.now(UTC) + timedelta(seconds=expires_in))
        return self.coordinator.send(
            "work.offer",
            self.group,
            {"agents": [a.id for a in agents], "expires_at": expires, "selection_basis": BASIS, **body},
            target=self.target(item_id),
        )

    def accept(self, item_id: str, agent: AgentKey | None = None) -> dict[str, Any]:
        return (agent or self.worker).send("work.accept_offer", self.group, {}, target=self.target(item_id))

    def approve(self, item_id: str) -> dict[str, Any]:
        return self.owner.send("approval.grant_execution", self.group, {"note": "ok"}, target=self.target(item_id))

    def start(self, item_id: str, agent: AgentKey | None = None) -> dict[str, Any]:
        agent = agent or self.worker
        receipt = agent.send(
            "work.start",
            self.group,
            {},
            target=self.target(item_id),
            ownership_epoch=self.item(item_id).ownership_epoch,
        )
        self.leases[item_id] = receipt["grants"]["lease_id"]
        return receipt

    def lease_command(
        self,
        type_: str,
        item_id: str,
        body: dict[str, Any],
        agent: AgentKey | None = None,
        lease_id: str | None = None,
        **kw: Any,
    ) -> dict[str, Any]:
        return (agent or self.worker).send(
            type_, self.group, body, target=self.target(item_id, None), lease_id=lease_id or self.leases[item_id], **kw
        )

    def checkpoint(self, item_id: str, **kw: Any) -> dict[str, Any]:
        return self.lease_command("work.checkpoint", item_id, {"checkpoint": {"step": 1}, "progress": PROGRESS}, **kw)

    def block(self, item_id: str, **kw: Any) -> dict[str, Any]:
        return self.lease_command(
            "work.block",
            item_id,
            {"checkpoint": {"step": 1}, "progress": PROGRESS, "resolution_required": "need data access"},
            **kw,
        )

    def submit(self, item_id: str, **kw: Any) -> dict[str, Any]:
        sha = self.blob()
        body = {"artifacts": [sha], "evidence": self.evidence(item_id, self.worker, artifacts=[sha])}
        return self.lease_command("work.submit", item_id, body, **kw)

    def unblock(self, item_id: str) -> dict[str, Any]:
        return self.coordinator.send("work.unblock", self.group, {"resolution": "granted"}, target=self.target(item_id))

    def accept_result(self, item_id: str) -> dict[str, Any]:
        return self.coordinator.send(
            "work.accept_result",
            self.group,
            {"evidence": self.evidence(item_id, self.coordinator)},
            target=self.target(item_id),
        )

    def fail(self, item_id: str) -> dict[str, Any]:
        return self.coordinator.send(
            "work.fail", self.group, {"evidence": self.evidence(item_id, self.coordinator)}, target=self.target(item_id)
        )

    def cancel(self, item_id: str) -> dict[str, Any]:
        return self.coordinator.send("work.cancel", self.group, {"reason": "not needed"}, target=self.target(item_id))

    def drive_to(self, state: str) -> str:
        """A new WorkItem in ``state`` through legal Commands only."""
        item_id = self.authorize()
        # The deliverable submit() cites is uploaded up front: its upload is
        # an Event of its own (artifact.uploaded), not part of the submission.
        self.blob()
        if state == "open":
            return item_id
        self.offer(item_id)
        if state == "offered":
            return item_id
        if state in ("failed", "cancelled"):
            (self.fail if state == "failed" else self.cancel)(item_id)
            return item_id
        self.accept(item_id)
        if state == "queued":
            return item_id
        self.start(item_id)
        if state == "active":
            return item_id
        if state == "blocked":
            self.block(item_id)
            return item_id
        self.submit(item_id)
        if state == "submitted":
            return item_id
        self.accept_result(item_id)
        assert state == "verified", state
        return item_id
