"""Driving a Mission's lifecycle (PROTOCOL §7, §14) through the REST binding.

Every Command here is a signed Command document POSTed to
``/api/v0.1/commands`` (the ``rest`` fixture routes ``AgentKey.send`` there); a
refusal comes back as the bare §19 error document and is raised as the
``ProtocolError`` it names, so ``tests.conftest.refused`` reads it.
"""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from artifacts.store import store_stream
from missions.models import Agent, Group, GroupEvent, Mission
from mwportal.protocol import ProtocolError
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import sign_document
from tests.api.support import COMMANDS, http, post_raw
from tests.conftest import AgentKey, group_revision
from tests.workitems.flow import Flow, contract, stamp, survey_mission


def _over_rest(self: AgentKey, document: dict[str, Any]) -> dict[str, Any]:
    response = post_raw(http(), COMMANDS, json.dumps(document))
    body = response.json()
    if response.status_code in (200, 201):
        return dict(body)
    raise ProtocolError(body["code"], body["message"], details=body.get("details") or {})


@pytest.fixture(autouse=True, name="rest")
def rest_fixture(monkeypatch: pytest.MonkeyPatch, settings: Any, tmp_path: Any) -> None:
    """Every Command of these tests goes over ``POST /api/v0.1/commands``."""
    settings.MWP_ARTIFACT_ROOT = str(tmp_path / "artifacts")
    monkeypatch.setattr(AgentKey, "send_document", _over_rest)


@pytest.fixture(name="flow")
def flow_fixture(owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey) -> Flow:
    return Flow(survey_mission(owner, coordinator, [worker, worker2]), owner, coordinator, worker, worker2)


def epoch_of(group: str) -> int:
    return Mission.objects.values_list("coordinator_epoch", flat=True).get(group_id=group)


def status(group: str) -> str:
    return Mission.objects.values_list("status", flat=True).get(group_id=group)


def verified(flow: Flow, goal: str = "Summarise the survey responses") -> str:
    """A WorkItem driven to ``verified`` (distinct goals: duplicate decomposition is refused, §20)."""
    item = flow.authorize(contract(goal=f"{goal} {uuid.uuid4().hex[:6]}"))
    flow.offer(item)
    flow.accept(item)
    flow.start(item)
    flow.submit(item)
    flow.accept_result(item)
    return item


def held(group: str, by: AgentKey, content: bytes = b"# findings\n") -> str:
    """Bytes stored into ``group``; their ``sha256:`` hash."""
    agent = Agent.objects.get(id=by.id)
    blob = store_stream(io.BytesIO(content), "text/markdown", Group.objects.get(id=group), agent, 10_000)
    return "sha256:" + blob.sha256


def submit(by: AgentKey, group: str, hashes: list[str], epoch: int | None = None) -> dict[str, Any]:
    payload = {"artifactHashes": hashes, "missionRevision": group_revision(group)}
    return by.send("mission.submit_for_approval", group, payload, coordinator_epoch=epoch or epoch_of(group))


def submitted_revision(group: str) -> int:
    """The revision last submitted (the current one when nothing was)."""
    last = GroupEvent.objects.filter(group_id=group, type="mission.submitted_for_approval").order_by("-sequence")
    found = last.first()
    return int(found.body["missionRevision"]) if found is not None else group_revision(group)


def approval(
    by: AgentKey, group: str, hashes: list[str], revision: int, *, signer: AgentKey | None = None, **over: Any
) -> dict[str, Any]:
    """The Approval document (approval.schema.json) ``by`` signs over ``revision`` and ``hashes``."""
    mission = Mission.objects.get(group_id=group)
    document = {
        "approvalId": urn(uuid.uuid4()),
        "kind": "child_mission" if mission.parent_group_id else "mission_final",
        "decision": "approved",
        "missionId": urn(mission.id),
        "groupId": urn(group),
        "missionRevision": revision,
        "artifactHashes": hashes,
        "acceptancePolicyVersion": "1.0.0",
        "approver": by.actor,
        "comments": "",
        "conditions": [],
        "occurredAt": stamp(),
        **over,
    }
    key = (signer or by).key
    return sign_document(document, key_id=key.key_id, seed=key.seed, profile="approval")


def approve(by: AgentKey, group: str, hashes: list[str], document: dict[str, Any] | None = None) -> dict[str, Any]:
    """``mission.approve`` carrying the MissionOwner's signed Approval (§7.3)."""
    revision = submitted_revision(group)
    document = document or approval(by, group, hashes, revision)
    payload = {
        "approvalId": document["approvalId"],
        "missionRevision": revision,
        "artifactHashes": hashes,
        "acceptancePolicyVersion": "1.0.0",
        "comments": "",
        "approval": document,
    }
    return by.send("mission.approve", group, payload, expected_revision=group_revision(group))


def request_changes(by: AgentKey, group: str) -> dict[str, Any]:
    payload = {"missionRevision": submitted_revision(group), "feedback": "Add the appendix."}
    return by.send("mission.request_changes", group, payload, expected_revision=group_revision(group))


def end(by: AgentKey, kind: str, group: str, **kw: Any) -> dict[str, Any]:
    """``mission.cancel`` or ``mission.terminate``; an Agent's terminate carries the Coordinator Epoch."""
    if kind == "mission.terminate" and by.kind == "agent":
        kw.setdefault("coordinator_epoch", epoch_of(group))
    return by.send(kind, group, {"reason": "customer withdrew"}, expected_revision=group_revision(group), **kw)


def new_mission_payload(coordinator: AgentKey, **over: Any) -> dict[str, Any]:
    group_id, mission_id = str(uuid.uuid4()), str(uuid.uuid4())
    payload = {
        "missionId": urn(mission_id), "groupId": urn(group_id), "coordinatorId": coordinator.urn,
        "title": "Survey follow-up", "objective": "Correct the survey summary",
        "budget": {"currency": "EUR", "financialLimit": 100},
        "deadline": stamp(datetime.now(UTC) + timedelta(days=10)),
        "definitionOfDone": [
            {"criterionId": "fixed", "description": "corrected", "evidenceRequired": ["human_review"]}
        ],
    }  # fmt: skip
    payload.update(over)
    return payload


def to_approved(flow: Flow) -> list[str]:
    """The Survey Mission through every §7.1 row to ``approved``; its approved Artifact set."""
    verified(flow)
    hashes = [held(flow.group, flow.worker)]
    submit(flow.coordinator, flow.group, hashes)
    approve(flow.owner, flow.group, hashes)
    return hashes
