"""Artifacts, review and Context Packages: personas and a driver speaking MWP 0.1.

On top of the shared personas: ``reviewer`` (Rita, a ``reviewer`` member of
``mission``'s Group) and ``other`` (a second Mission Group owned by Olivia
with Carl coordinating and Walt working; Wanda is not a member there).

``Artifacts`` drives WorkItems with signed normative Commands (§15.1) and
the REST binding under ``/api/v0.1/`` (DESIGN §5) as a client would: content
is uploaded by bearer token, manifests, Evidence and Context Packages are
normative Signed Documents (§6.4) signed with the sender's own key.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from artifacts.review import run_review
from missions.models import Agent, GroupEvent
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import sign_document
from tests.api.support import API, bearer
from tests.conftest import AgentKey, add_member, group_revision
from workitems.models import ExecutionLease, WorkItem

CAPABILITY = {"id": "text.summarize", "version": "1.2.0"}


@pytest.fixture(autouse=True)
def _artifact_root(settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings.MWP_ARTIFACT_ROOT = str(tmp_path / "artifacts")
    settings.MWP_REVIEW_ON_SUBMIT = "off"  # the tests run the pipeline themselves


def now_text(delta: timedelta = timedelta()) -> str:
    return (datetime.now(UTC) + delta).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def wire(sha_hex: str) -> str:
    return f"sha256:{sha_hex}"


def hex_of(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def producer_of(item_id: str, agent: AgentKey) -> dict[str, Any]:
    """A manifest's ``producer``: what ``agent``'s acceptance of the WorkItem pinned, its Agent Card version and
    capability versions (§6.1); for a WorkItem it does not hold, its first card and the contract's capability."""
    pins = WorkItem.objects.filter(id=item_id).values_list("pins", flat=True).first()
    if pins and pins["agentId"] == agent.urn:
        return dict(pins)
    return {"agentId": agent.urn, "agentCardVersion": 1, "capabilities": [CAPABILITY]}


def contract(**overrides: Any) -> dict[str, Any]:
    """A complete normative Work Contract (§10.1, ``work-contract.schema.json``)."""
    base: dict[str, Any] = {
        "contractVersion": 1,
        "goal": "Summarise the survey responses",
        "requiredDeliverables": [
            {
                "deliverableId": "summary",
                "description": "the summary",
                "mediaType": "text/markdown",
                "schema": "https://schemas.example.org/summary",
            }
        ],
        "acceptanceCriteria": [
            {
                "criterionId": "complete",
                "description": "covers every response",
                "evidenceRequired": ["deterministic_test"],
            },
            {
                "criterionId": "accurate",
                "description": "no invented facts",
                "evidenceRequired": ["reviewer_assessment"],
            },
        ],
        "inputArtifacts": [],
        "dependencyWorkItemIds": [],
        "allowedResources": [],
        "requiredCapabilities": [CAPABILITY],
        "deadline": now_text(timedelta(days=7)),
        "requestedUrgency": "normal",
        "businessImpact": "board meeting preparation",
        "retryPolicy": {"maxAttempts": 3, "backoff": "none", "maxDelay": "PT0S", "retryableFailures": []},
        "budget": {"modelTokenLimit": 100000, "toolCallLimit": 50},
        "sideEffectRisk": "none",
        "executionApproval": "not_required",
    }
    base.update(overrides)
    return base


def criterion(cid: str, *required: str, description: str = "") -> dict[str, Any]:
    """A normative acceptance criterion (``common.schema.json#/$defs/acceptanceCriterion``)."""
    return {"criterionId": cid, "description": description or f"{cid} holds", "evidenceRequired": list(required)}


BASIS = {
    "requiredCapabilities": [CAPABILITY],
    "verifiedMatches": [CAPABILITY],
    "authorizationEligible": True,
    "availabilityEstimate": "2026-01-01T00:00:00Z",
    "expectedCost": 3,
    "reliabilityEvidence": [],
    "policyRulesApplied": ["first eligible worker"],
}


@pytest.fixture
def reviewer(org: dict[str, str], mission: dict[str, str], owner: AgentKey) -> AgentKey:
    from tests.conftest import make_agent

    rita = make_agent("acme", "Rita Reviewer", ["worker"])
    add_member(owner, mission["group"], rita, ["reviewer"])
    return rita


def give_card(agent: AgentKey) -> AgentKey:
    """Register an Agent Card for ``agent`` (a Coordinator lease pins one, §6.1, §7.2)."""
    from missions.handlers.sessions import capability, issue_agent_card

    card = capability(CAPABILITY["id"], CAPABILITY["version"], verified_evidence=[urn(uuid.uuid4())])
    issue_agent_card(agent.id, [card])
    return agent


def make_coordinator(name: str) -> AgentKey:
    from tests.conftest import make_agent

    return give_card(make_agent("acme", name, ["coordinator"]))


def new_mission(owner: AgentKey, coordinator: AgentKey, title: str = "Other") -> dict[str, str]:
    """A Mission Group owned by ``owner`` with ``coordinator`` holding its Coordinator lease (§7.1)."""
    group_id, mission_id = str(uuid.uuid4()), str(uuid.uuid4())
    owner.send(
        "mission.create",
        group_id,
        {
            "missionId": urn(mission_id), "groupId": urn(group_id), "coordinatorAgentId": coordinator.urn,
            "title": title, "objective": "Elsewhere", "deadline": now_text(timedelta(days=30)),
            "definitionOfDone": [criterion("done", "human_review")],
            "budget": {"modelTokenLimit": 10_000_000, "toolCallLimit": 10_000},
        },
    )  # fmt: skip
    return {"group": group_id, "mission": mission_id}


@pytest.fixture
def mission(owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey) -> dict[str, str]:
    """The Survey Mission: Olivia owns it, Carl (with his Agent Card) holds its Coordinator lease, Wanda
    and Walt work in it."""
    created = new_mission(owner, give_card(coordinator), title="Survey")
    for member in (worker, worker2):
        add_member(owner, created["group"], member, ["worker"])
    return created


@pytest.fixture
def other(mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker2: AgentKey) -> dict[str, str]:
    """A second Mission Group: Olivia owns it, Carl coordinates it, Walt works in it."""
    created = new_mission(owner, coordinator)
    add_member(owner, created["group"], worker2, ["worker"])
    return created


class Artifacts:
    """One Mission's Coordinator (Carl), owner (Olivia) and Workers (Wanda, Walt), over the real bindings."""

    def __init__(
        self, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey
    ):
        self.group = mission["group"]
        self.mission = mission["mission"]
        self.owner, self.coordinator, self.worker, self.worker2 = owner, coordinator, worker, worker2

    # --- REST -------------------------------------------------------------------------

    def client(self, agent: AgentKey) -> tuple[Client, dict[str, str]]:
        return Client(raise_request_exception=False), bearer(agent.extra["token"])

    def upload(
        self, content: bytes, media_type: str = "text/markdown", agent: AgentKey | None = None, group: str | None = None
    ) -> str:
        """Store ``content`` into a Group over REST; its content hash ``sha256:<hex>``."""
        client, auth = self.client(agent or self.worker)
        response = client.post(
            f"{API}/artifacts?groupId={urn(group or self.group)}", data=content, content_type=media_type, **auth
        )
        assert response.status_code == 201, response.content
        return str(response.json()["contentHash"])

    def download(self, content_hash: str, agent: AgentKey | None = None) -> Any:
        client, auth = self.client(agent or self.worker)
        return client.get(f"{API}/artifacts/{content_hash}", **auth)

    def get(self, url: str, agent: AgentKey | None = None) -> Any:
        client, auth = self.client(agent or self.coordinator)
        return client.get(url, **auth)

    # --- WorkItems --------------------------------------------------------------------

    def item(self, item_id: str) -> WorkItem:
        return WorkItem.objects.get(id=item_id)

    def coordinate(self, kind: str, payload: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return self.coordinator.send(kind, self.group, payload, coordinator_epoch=1, **kw)

    def authorize(self, c: dict[str, Any] | None = None) -> str:
        item_id = str(uuid.uuid4())
        self.coordinate("work.authorize", {"workItemId": urn(item_id), "contract": c or contract()})
        return item_id

    def offer(self, item_id: str, agents: list[AgentKey] | None = None) -> dict[str, Any]:
        candidates = [a.urn for a in agents or [self.worker]]
        payload = {
            "workItemId": urn(item_id), "candidateAgentIds": candidates, "selectionBasis": BASIS,
            "offerExpiresInSeconds": 600,
        }  # fmt: skip
        return self.coordinate("work.offer", payload, expected_revision=self.item(item_id).revision)

    def accept(self, item_id: str, agent: AgentKey | None = None) -> dict[str, Any]:
        return (agent or self.worker).send(
            "work.accept_offer", self.group, {"workItemId": urn(item_id)}, expected_revision=self.item(item_id).revision
        )

    def start(self, item_id: str, agent: AgentKey | None = None) -> dict[str, Any]:
        item = self.item(item_id)
        payload = {"workItemId": urn(item_id), "ownershipEpoch": item.ownership_epoch}
        return (agent or self.worker).send("work.start", self.group, payload, expected_revision=item.revision)

    def fences(self, item_id: str) -> dict[str, Any]:
        """What a lease-bound Command carries (§11.3): the Ownership Epoch and the current Execution Lease."""
        item = self.item(item_id)
        lease = ExecutionLease.objects.filter(workitem=item).order_by("-started_at").first()
        assert lease is not None
        return {"ownershipEpoch": item.ownership_epoch, "executionLeaseId": urn(lease.id)}

    def active_item(self, c: dict[str, Any] | None = None, agent: AgentKey | None = None) -> str:
        item_id = self.authorize(c)
        self.offer(item_id, [agent or self.worker])
        self.accept(item_id, agent)
        self.start(item_id, agent)
        return item_id

    def authorize_in(self, mission: dict[str, str], agent: AgentKey) -> str:
        """An active WorkItem of another Mission (Carl coordinates it too), owned by ``agent``."""
        there = Artifacts(mission, self.owner, self.coordinator, agent, agent)
        return there.active_item(agent=agent)

    def produce_in(self, mission: dict[str, str], item_id: str, content: bytes, agent: AgentKey) -> tuple[str, str]:
        there = Artifacts(mission, self.owner, self.coordinator, agent, agent)
        return there.produce(item_id, content)

    # --- Signed Documents (§6.4) --------------------------------------------------------

    def manifest(
        self,
        item_id: str,
        content_hash: str,
        content: bytes,
        *,
        media_type: str = "text/markdown",
        sources: list[str] | None = None,
        agent: AgentKey | None = None,
        key: AgentKey | None = None,
        **overrides: Any,
    ) -> dict[str, Any]:
        """A complete normative Artifact manifest (§13.1, ``artifact.schema.json``), signed by
        ``agent`` (or with ``key``'s key)."""
        agent = agent or self.worker
        doc: dict[str, Any] = {
            "artifactId": urn(uuid.uuid4()),
            "contentHash": content_hash,
            "uri": f"https://mirror.example/blobs/{content_hash.removeprefix('sha256:')}",
            "sizeBytes": len(content),
            "mediaType": media_type,
            "schemaUri": "https://schemas.example.org/summary",
            "producer": producer_of(item_id, agent),
            "missionId": urn(self.mission),
            "groupId": urn(self.group),
            "workItemId": urn(item_id),
            "sourceArtifactHashes": sources or [],
            "toolVersions": [{"name": "search", "version": "2.1"}],
            "modelVersions": [{"provider": "example", "model": "summarizer", "version": "2026-10"}],
            "classification": "internal",
            "createdAt": now_text(),
        }
        doc.update(overrides)
        signer = (key or agent).key
        return sign_document(doc, key_id=signer.key_id, seed=signer.seed, profile="artifact")

    def publish(self, item_id: str, manifest: dict[str, Any], agent: AgentKey | None = None) -> dict[str, Any]:
        payload = {"artifact": manifest, **self.fences(item_id)}
        return (agent or self.worker).send("artifact.publish", self.group, payload)

    def produce(
        self, item_id: str, content: bytes, media_type: str = "text/markdown", sources: list[str] | None = None
    ) -> tuple[str, str]:
        """Upload ``content`` and publish its signed manifest under the current lease: (content hash, Artifact ID)."""
        content_hash = self.upload(content, media_type)
        manifest = self.manifest(item_id, content_hash, content, media_type=media_type, sources=sources)
        self.publish(item_id, manifest)
        return content_hash, manifest["artifactId"]

    def evidence(
        self,
        item_id: str,
        criteria: list[str],
        artifacts: list[str],
        *,
        result: str = "passed",
        agent: AgentKey | None = None,
        type_: str = "deterministic_test",
    ) -> dict[str, Any]:
        """One normative Evidence record (§13.2, ``evidence.schema.json``) signed by ``agent``."""
        agent = agent or self.worker
        doc = {
            "evidenceId": urn(uuid.uuid4()),
            "missionId": urn(self.mission),
            "groupId": urn(self.group),
            "workItemId": urn(item_id),
            "type": type_,
            "subject": {"type": "work_item", "id": urn(item_id)},
            "criterionIds": criteria,
            "method": "ran the survey checks",
            "result": result,
            "artifactHashes": artifacts,
            "generatedBy": agent.actor,
            "createdAt": now_text(),
        }
        return sign_document(doc, key_id=agent.key.key_id, seed=agent.key.seed, profile="evidence")

    def submit_with(
        self,
        item_id: str,
        cited: dict[str, list[str]],
        artifact_ids: list[str],
        result: str = "passed",
        agent: AgentKey | None = None,
    ) -> dict[str, Any]:
        """Submit with one Evidence record per criterion, citing ``cited[criterion]`` (content hashes)."""
        agent = agent or self.worker
        evidence = [self.evidence(item_id, [c], hashes, result=result, agent=agent) for c, hashes in cited.items()]
        payload = {
            "workItemId": urn(item_id),
            **self.fences(item_id),
            "artifactIds": artifact_ids,
            "evidence": evidence,
        }
        return agent.send("work.submit", self.group, payload)

    def review(self, item_id: str) -> dict[str, Any] | None:
        return run_review(item_id)


@pytest.fixture
def art(
    mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey
) -> Artifacts:
    return Artifacts(mission, owner, coordinator, worker, worker2)


def agent_row(agent: AgentKey) -> Agent:
    return Agent.objects.get(id=agent.id)


def events_of(group: str, kind: str) -> list[dict[str, Any]]:
    """The signed Event documents of ``kind`` in ``group``, in sequence order."""
    return [e.as_wire() for e in GroupEvent.objects.filter(group_id=group, type=kind).order_by("sequence")]


__all__ = ["Artifacts", "agent_row", "contract", "criterion", "events_of", "group_revision", "hex_of", "wire"]
