"""Artifacts, review and Context Packages: personas and a driver.

On top of the shared personas: ``reviewer`` (Rita, a ``reviewer`` member of
``mission``'s Group) and ``other`` (a second Mission Group owned by Olivia
with Carl coordinating, Walt working; Wanda is not a member there).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from artifacts.review import run_review
from missions.models import Agent
from mwportal.protocol import format_time, signed
from tests.api.support import bearer
from tests.conftest import AgentKey, group_revision, make_agent
from tests.workitems.flow import Flow


@pytest.fixture(autouse=True)
def _artifact_root(settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings.MWP_ARTIFACT_ROOT = str(tmp_path / "artifacts")
    settings.MWP_REVIEW_ON_SUBMIT = "off"  # the tests run the pipeline themselves


def add_member(owner: AgentKey, group: str, agent: AgentKey, roles: list[str]) -> None:
    owner.send(
        "membership.add",
        group,
        {"agent": agent.id, "roles": roles},
        target={"kind": "group", "id": group, "revision": group_revision(group)},
    )


@pytest.fixture
def reviewer(org: dict[str, str], mission: dict[str, str], owner: AgentKey) -> AgentKey:
    rita = make_agent("acme", "Rita Reviewer", ["worker"])
    add_member(owner, mission["group"], rita, ["reviewer"])
    return rita


@pytest.fixture
def other(mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker2: AgentKey) -> dict[str, str]:
    group_id, mission_id = str(uuid.uuid4()), str(uuid.uuid4())
    owner.send("mission.create", group_id, {"mission": mission_id, "title": "Other", "objective": "Elsewhere"})
    add_member(owner, group_id, coordinator, ["coordinator"])
    add_member(owner, group_id, worker2, ["worker"])
    return {"group": group_id, "mission": mission_id}


class Artifacts(Flow):
    """The WorkItem driver plus uploads, manifests and Context Packages over the real API."""

    def client(self, agent: AgentKey) -> tuple[Client, dict[str, str]]:
        return Client(raise_request_exception=False), bearer(agent.extra["token"])

    def upload(
        self, content: bytes, media_type: str = "text/markdown", agent: AgentKey | None = None, group: str | None = None
    ) -> str:
        client, auth = self.client(agent or self.worker)
        response = client.post(
            f"/api/v1/artifacts?group={group or self.group}", data=content, content_type=media_type, **auth
        )
        assert response.status_code == 201, response.content
        return str(response.json()["sha256"])

    def download(self, sha: str, agent: AgentKey | None = None) -> Any:
        client, auth = self.client(agent or self.worker)
        return client.get(f"/api/v1/artifacts/{sha}", **auth)

    def get(self, url: str, agent: AgentKey | None = None) -> Any:
        client, auth = self.client(agent or self.coordinator)
        return client.get(url, **auth)

    def manifest(
        self,
        item_id: str,
        sha: str,
        content: bytes,
        *,
        media_type: str = "text/markdown",
        sources: list[str] | None = None,
        agent: AgentKey | None = None,
        key: str | None = None,
        **overrides: Any,
    ) -> dict[str, Any]:
        """A complete manifest (spec 13.1), signed by ``agent`` (or ``key``)."""
        agent = agent or self.worker
        doc: dict[str, Any] = {
            "schema": "mwp.artifact-manifest/1",
            "content_hash": sha,
            "media_type": media_type,
            "content_schema": None,
            "size": len(content),
            "producer": {"agent": agent.id, "agent_card_version": 0},
            "mission": self.mission,
            "group": self.group,
            "workitem": item_id,
            "sources": sources or [],
            "versions": {
                "tools": [{"id": "search", "version": "2.1"}],
                "models": [{"id": "summarizer", "version": "2026-10"}],
                "capabilities": [{"id": "summarize", "version": "1.0"}],
            },
            "created_at": format_time(datetime.now(UTC)),
            "classification": "internal",
            "retrieval_uri": f"https://mirror.example/blobs/{sha}",
        }
        doc.update(overrides)
        return signed(key or agent.private_key, doc)

    def publish(self, item_id: str, manifest: dict[str, Any], agent: AgentKey | None = None) -> dict[str, Any]:
        return self.lease_command("artifact.publish", item_id, {"manifest": manifest}, agent=agent)

    def produce(
        self, item_id: str, content: bytes, media_type: str = "text/markdown", sources: list[str] | None = None
    ) -> str:
        """Upload ``content`` and publish its signed manifest under the current lease."""
        sha = self.upload(content, media_type)
        self.publish(item_id, self.manifest(item_id, sha, content, media_type=media_type, sources=sources))
        return sha

    def submit_with(
        self, item_id: str, cited: dict[str, list[str]], artifacts: list[str], result: str = "pass"
    ) -> dict[str, Any]:
        """Submit with one Evidence record per criterion, citing ``cited[criterion]``."""
        evidence = [
            {
                "subject": item_id,
                "criteria": [criterion],
                "method": "test",
                "result": result,
                "producer": self.worker.id,
                "timestamp": format_time(datetime.now(UTC)),
                "artifacts": shas,
                "summary": f"{criterion} checked",
            }
            for criterion, shas in cited.items()
        ]
        return self.lease_command("work.submit", item_id, {"artifacts": artifacts, "evidence": evidence})

    def review(self, item_id: str) -> dict[str, Any] | None:
        return run_review(item_id)

    def active_item(self, c: dict[str, Any] | None = None) -> str:
        item_id = self.authorize(c)
        self.offer(item_id)
        self.accept(item_id)
        self.start(item_id)
        return item_id


@pytest.fixture
def art(
    mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey
) -> Artifacts:
    return Artifacts(mission, owner, coordinator, worker, worker2)


def agent_row(agent: AgentKey) -> Agent:
    return Agent.objects.get(id=agent.id)
