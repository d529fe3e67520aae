"""Driving WorkItems through their lifecycle with signed MWP 0.1 Commands, as clients would.

Payloads are the catalogue's (``mwportal.protocol.catalogue``); the embedded
objects are normative: the Work Contract (``work-contract.schema.json``),
Evidence and Artifact manifests (signed by their producer's key), checkpoints,
structured progress and the selection basis (§10.3).
"""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from artifacts.models import Blob
from artifacts.store import store_stream
from missions.handlers.sessions import capability, issue_agent_card
from missions.models import Agent, AgentCard, Group
from mwportal.protocol import catalogue
from mwportal.protocol.ids import bare, urn
from mwportal.protocol.verification import sign_document
from tests.conftest import AgentKey, add_member
from workitems.models import WorkItem

# The Coordinator lease mission.create grants is epoch 1 (§7.2); every Coordinator Command carries it.
COORDINATOR_EPOCH = 1
RENEW = "ext.missionweaveprotocol.core.work_execution_lease_renew"
DECLINE = "ext.mwportal.work.offer_decline"
CAPABILITY = {"id": "text.summarize", "version": "1.0.0"}
# The Mission budget of tests/workitems' mission fixture; every contract below fits within it (§12).
MISSION_BUDGET = {
    "currency": "EUR", "financialLimit": 1000, "modelTokenLimit": 10**7, "toolCallLimit": 10**4,
    "computeSecondsLimit": 10**6, "wallClockSecondsLimit": 10**6, "externalSideEffectLimit": 100,
}  # fmt: skip


def give_card(agent: AgentKey) -> AgentKey:
    """An Agent Card for ``agent``: a Coordinator lease pins one (§6.1, §7.2)."""
    issue_agent_card(
        agent.id, [capability(CAPABILITY["id"], CAPABILITY["version"], verified_evidence=[urn(uuid.uuid4())])]
    )
    return agent


def stamp(moment: datetime | None = None) -> str:
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# One deadline for every contract of a run, so that equal contracts are equal.
DEADLINE = stamp(datetime.now(UTC).replace(microsecond=0) + timedelta(days=30))


def contract(**overrides: Any) -> dict[str, Any]:
    """A complete, valid Work Contract (PROTOCOL §10.1, ``work-contract.schema.json``)."""
    base: dict[str, Any] = {
        "contractVersion": 1,
        "goal": "Summarise the survey responses",
        "requiredDeliverables": [
            {
                "deliverableId": "summary",
                "description": "A summary of every response",
                "mediaType": "text/markdown",
                "schema": "https://schemas.example.org/summary",
            }
        ],
        "acceptanceCriteria": [
            {"criterionId": "complete", "description": "covers all", "evidenceRequired": ["deterministic_test"]},
            {"criterionId": "accurate", "description": "no invented facts", "evidenceRequired": ["business_rule"]},
        ],
        "inputArtifacts": [],
        "dependencyWorkItemIds": [],
        "allowedResources": [{"resource": "urn:example:survey-2026", "operations": ["read"]}],
        "requiredCapabilities": [CAPABILITY],
        "deadline": DEADLINE,
        "requestedUrgency": "normal",
        "businessImpact": "Board meeting preparation",
        "retryPolicy": {"maxAttempts": 3, "backoff": "none", "maxDelay": "PT0S", "retryableFailures": []},
        "budget": {
            "currency": "EUR", "financialLimit": 100, "modelTokenLimit": 100000, "toolCallLimit": 50,
            "computeSecondsLimit": 3600, "wallClockSecondsLimit": 7200, "externalSideEffectLimit": 5,
        },
        "sideEffectRisk": "none",
        "executionApproval": "not_required",
    }  # fmt: skip
    base.update(overrides)
    return base


def progress(phase: str = "drafting") -> dict[str, Any]:
    """Structured progress (§11.4; the WorkItem schema's ``progress``)."""
    return {
        "currentPhase": phase,
        "completedMilestones": ["read inputs"],
        "nextCheckpoint": "outline",
        "blockers": [],
        "updatedCompletionEstimate": stamp(datetime.now(UTC) + timedelta(hours=1)),
        "evidenceIds": [],
    }


PROGRESS = progress()
BASIS = {
    "requiredCapabilities": [CAPABILITY],
    "verifiedMatches": [CAPABILITY],
    "authorizationEligible": True,
    "availabilityEstimate": "2026-01-05T09:00:00Z",
    "expectedCost": 3,
    "reliabilityEvidence": [],
    "policyRulesApplied": ["default"],
}


def checkpoint(phase: str = "drafting") -> dict[str, Any]:
    return {"phase": phase, "createdAt": stamp(), "completedMilestones": ["read inputs"], "nextStep": "outline"}


class Flow:
    """One Mission's Coordinator (Carl), owner (Olivia) and Workers (Wanda, Walt)."""

    def __init__(
        self, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey
    ):
        self.group = mission["group"]
        self.mission = mission["mission"]
        self.owner, self.coordinator, self.worker, self.worker2 = owner, coordinator, worker, worker2
        self.leases: dict[str, str] = {}  # WorkItem -> its current Execution Lease (bare UUIDs)

    def item(self, item_id: str) -> WorkItem:
        return WorkItem.objects.get(id=item_id)

    def revision(self, item_id: str) -> int:
        return self.item(item_id).revision

    def epoch(self, item_id: str) -> int:
        """The Ownership Epoch a client cites: the current one (1 before any owner: epochs are positive)."""
        return max(self.item(item_id).ownership_epoch, 1)

    def evidence(
        self,
        item_id: str,
        producer: AgentKey,
        criteria: list[str] | None = None,
        artifacts: list[str] | None = None,
        result: str = "passed",
        type_: str = "deterministic_test",
    ) -> list[dict[str, Any]]:
        """One Evidence document (§13.2) signed by its producer (``artifacts``: hex hashes)."""
        document = {
            "evidenceId": urn(uuid.uuid4()),
            "missionId": urn(self.mission),
            "groupId": urn(self.group),
            "workItemId": urn(item_id),
            "type": type_,
            "subject": {"type": "work_item", "id": urn(item_id)},
            "criterionIds": criteria or ["complete", "accurate"],
            "method": "ran the survey coverage check",
            "result": result,
            "artifactHashes": ["sha256:" + a for a in artifacts or []],
            "generatedBy": producer.actor,
            "createdAt": stamp(),
        }
        return [sign_document(document, key_id=producer.key.key_id, seed=producer.key.seed, profile="evidence")]

    def blob(self, content: bytes = b"# summary\n") -> str:
        """Stored bytes this Group holds; their hex SHA-256."""
        agent = Agent.objects.get(id=self.worker.id)
        return store_stream(
            io.BytesIO(content), "text/markdown", Group.objects.get(id=self.group), agent, 10_000_000
        ).sha256

    # --- Commands ---------------------------------------------------------

    def send(self, agent: AgentKey, kind: str, item_id: str, payload: dict[str, Any], **kw: Any) -> dict[str, Any]:
        """``kind`` about ``item_id``: ``workItemId`` in payload and envelope, and
        ``expectedRevision`` when the catalogue says compare-and-set (§15.3)."""
        if catalogue.command(kind).compare_and_set:
            kw.setdefault("expected_revision", self.revision(item_id))
        if agent is self.coordinator:
            kw.setdefault("coordinator_epoch", COORDINATOR_EPOCH)
        return agent.send(kind, self.group, {"workItemId": urn(item_id), **payload}, work_item_id=item_id, **kw)

    def authorize(self, c: dict[str, Any] | None = None, item_id: str | None = None) -> str:
        item_id = item_id or str(uuid.uuid4())
        self.send(self.coordinator, "work.authorize", item_id, {"contract": c or contract()})
        return item_id

    def offer(
        self, item_id: str, agents: list[AgentKey] | None = None, expires_in: int = 600, **payload: Any
    ) -> dict[str, Any]:
        agents = agents or [self.worker]
        body = {
            "candidateAgentIds": [a.urn for a in agents],
            "offerExpiresInSeconds": expires_in,
            "selectionBasis": BASIS,
        }
        return self.send(self.coordinator, "work.offer", item_id, {**body, **payload})

    def accept(self, item_id: str, agent: AgentKey | None = None) -> dict[str, Any]:
        return self.send(agent or self.worker, "work.accept_offer", item_id, {})

    def approve(self, item_id: str) -> dict[str, Any]:
        payload = {
            "approvalId": urn(uuid.uuid4()),
            "ownershipEpoch": self.epoch(item_id),
            "operations": ["email.send"],
            "comments": "ok",
        }
        return self.send(self.owner, "approval.grant_execution", item_id, payload)

    def start(self, item_id: str, agent: AgentKey | None = None) -> dict[str, Any]:
        receipt = self.send(agent or self.worker, "work.start", item_id, {"ownershipEpoch": self.epoch(item_id)})
        self.leases[item_id] = bare(receipt["grants"]["executionLeaseId"], "grants")
        return receipt

    def lease_command(
        self,
        kind: str,
        item_id: str,
        payload: dict[str, Any],
        agent: AgentKey | None = None,
        lease_id: str | None = None,
        **kw: Any,
    ) -> dict[str, Any]:
        """A Command citing the Ownership Epoch and the current Execution Lease (catalogue ``LEASED``, §11.3)."""
        fences = {
            "ownershipEpoch": self.epoch(item_id),
            "executionLeaseId": urn(lease_id or self.leases[item_id]),
        }
        return self.send(agent or self.worker, kind, item_id, {**fences, **payload}, **kw)

    def renew(self, item_id: str, **kw: Any) -> dict[str, Any]:
        return self.lease_command(RENEW, item_id, {}, **kw)

    def checkpoint(self, item_id: str, **kw: Any) -> dict[str, Any]:
        return self.lease_command("work.checkpoint", item_id, {"checkpoint": checkpoint(), "progress": PROGRESS}, **kw)

    def block(self, item_id: str, **kw: Any) -> dict[str, Any]:
        payload = {"reason": "needs access to the raw survey data", "checkpoint": checkpoint()}
        return self.lease_command("work.block", item_id, payload, **kw)

    def publish(self, item_id: str, sha: str, agent: AgentKey | None = None, lease_id: str | None = None) -> str:
        """``artifact.publish`` of stored bytes under the current lease; the Artifact ID (urn)."""
        agent = agent or self.worker
        # The producer is what the acceptance pinned: card and capability versions (§6.1).
        pins = self.item(item_id).pins or {}
        cards = AgentCard.objects.filter(agent_id=agent.id).order_by("-version").values_list("version", flat=True)
        producer = {"agentId": agent.urn, "agentCardVersion": cards.first() or 1, "capabilities": [CAPABILITY]}
        manifest = {
            "artifactId": urn(uuid.uuid4()),
            "contentHash": "sha256:" + sha,
            "uri": f"https://portal.example.org/artifacts/{sha}",
            "sizeBytes": Blob.objects.get(pk=sha).size,
            "mediaType": "text/markdown",
            "schemaUri": "https://schemas.example.org/summary",
            "producer": dict(pins) if pins.get("agentId") == agent.urn else producer,
            "missionId": urn(self.mission),
            "groupId": urn(self.group),
            "workItemId": urn(item_id),
            "sourceArtifactHashes": [],
            "toolVersions": [],
            "modelVersions": [],
            "classification": "internal",
            "createdAt": stamp(),
        }
        signed = sign_document(manifest, key_id=agent.key.key_id, seed=agent.key.seed, profile="artifact")
        self.lease_command("artifact.publish", item_id, {"artifact": signed}, agent=agent, lease_id=lease_id)
        return str(manifest["artifactId"])

    def submit(
        self,
        item_id: str,
        agent: AgentKey | None = None,
        lease_id: str | None = None,
        publish: bool | None = None,
        **kw: Any,
    ) -> dict[str, Any]:
        """Publish the deliverable under the lease, then submit it with Evidence for every criterion.

        ``publish`` defaults to "the item is active and the lease is its current
        one": a stale lease cannot publish, and its submission (a late result,
        §11.5) cites an Artifact ID that names nothing here."""
        agent = agent or self.worker
        if publish is None:
            publish = self.item(item_id).state == "active" and lease_id in (None, self.leases.get(item_id))
        # Nothing is stored for a submission that cannot be accepted: it writes nothing but its late result.
        # Fresh bytes each time: a WorkItem publishes given content once (a resubmission after a retry, say).
        sha = self.blob(f"# summary {uuid.uuid4()}\n".encode()) if publish else "00" * 32
        artifact = self.publish(item_id, sha, agent, lease_id) if publish else urn(uuid.uuid4())
        payload = {"artifactIds": [artifact], "evidence": self.evidence(item_id, agent, artifacts=[sha])}
        return self.lease_command("work.submit", item_id, payload, agent=agent, lease_id=lease_id, **kw)

    def create_child(self, item_id: str, policy: str = "fail_parent_work_item") -> tuple[str, str]:
        """``mission.create_child`` of ``item_id`` (§14); the child's (Mission, Group) IDs.

        Carl, the parent Coordinator, becomes the child's MissionOwner; Walt
        (with an Agent Card) holds the child's Coordinator lease."""
        mission, group = str(uuid.uuid4()), str(uuid.uuid4())
        if not AgentCard.objects.filter(agent_id=self.worker2.id).exists():
            give_card(self.worker2)
        payload = {
            "coordinatorId": self.worker2.urn,
            "missionId": urn(mission),
            "groupId": urn(group),
            "parentWorkItemId": urn(item_id),
            "title": "Deep dive",
            "objective": "Research the free-text answers in depth",
            "definitionOfDone": [
                {"criterionId": "done", "description": "the research is complete", "evidenceRequired": ["human_review"]}
            ],
            "deadline": stamp(datetime.now(UTC) + timedelta(days=7)),
            # §14: within the parent WorkItem's budget, in every dimension.
            "budget": {k: v if k == "currency" else v // 2 for k, v in self.item(item_id).contract["budget"].items()},
            "failurePolicy": policy,
        }
        self.coordinator.send(
            "mission.create_child", self.group, payload, expected_revision=self.revision(item_id),
            work_item_id=item_id, coordinator_epoch=COORDINATOR_EPOCH,
        )  # fmt: skip
        return mission, group

    def unblock(self, item_id: str) -> dict[str, Any]:
        return self.send(self.coordinator, "work.unblock", item_id, {"resolution": "access granted"})

    def accept_result(self, item_id: str) -> dict[str, Any]:
        return self.send(
            self.coordinator, "work.accept_result", item_id, {"evidence": self.evidence(item_id, self.coordinator)}
        )

    def fail(self, item_id: str) -> dict[str, Any]:
        evidence = self.evidence(item_id, self.coordinator, result="failed")
        return self.send(
            self.coordinator,
            "work.fail",
            item_id,
            {"reason": "the source is unreadable", "evidence": evidence},
            expected_revision=self.revision(item_id),
        )

    def cancel(self, item_id: str) -> dict[str, Any]:
        return self.send(self.coordinator, "work.cancel", item_id, {"reason": "not needed"})

    def drive_to(self, state: str) -> str:
        """A new WorkItem in ``state`` through legal Commands only."""
        item_id = self.authorize()
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


def survey_mission(owner: AgentKey, coordinator: AgentKey, workers: list[AgentKey]) -> dict[str, str]:
    """The Survey Mission (§7.1): ``owner`` owns it, ``coordinator`` (with his Agent Card) holds its
    Coordinator lease, ``workers`` work in it, under a budget every flow contract fits in."""
    group_id, mission_id = str(uuid.uuid4()), str(uuid.uuid4())
    owner.send(
        "mission.create",
        group_id,
        {
            "missionId": urn(mission_id), "groupId": urn(group_id), "coordinatorId": give_card(coordinator).urn,
            "title": "Survey", "objective": "Summarise the survey", "budget": MISSION_BUDGET,
            # A Coordinator lease outlasting the clock jumps of the expiry tests (§7.2).
            "coordinatorLeaseSeconds": 30 * 86400,
            "deadline": stamp(datetime.now(UTC) + timedelta(days=60)),
            "definitionOfDone": [
                {"criterionId": "done", "description": "the survey is summarised", "evidenceRequired": ["human_review"]}
            ],
        },
    )  # fmt: skip
    for member in workers:
        add_member(owner, group_id, member, ["worker"])
    return {"group": group_id, "mission": mission_id}
