"""Personas of the portal: people signed in through Django sessions.

On top of the shared personas (``tests/conftest.py``), whose Mission ``mission``
is driven by its Agents through ``Flow``:

- ``owner`` is overridden here: the MissionOwner of ``mission`` is ``pat``,
  a person linked to the Django user ``pat`` (with a software key, DESIGN §4,
  so the shared fixtures can sign ``mission.create`` for her);
- ``pat``: that person, signed in. The portal's pages render each form's
  Command context; her browser builds, signs and POSTs the Command
  (``static/portal/sign.js``). The tests here do what the page does with
  ``from_page`` and her software key (the browser tests run the page's own
  code with a WebCrypto key);
- ``obi``: a person with the ``observer`` role in ``mission`` (people are
  MissionOwners, reviewers or observers; the Coordinator is an Agent, §7.2);
- ``nick``: a MissionOwner of the same Organization who is no member of
  ``mission``;
- ``rita``: a reviewer Agent (``reviewer`` member), who receives the review
  WorkItems the pipeline opens;
- ``art``: the WorkItem driver with uploads and signed manifests, whose
  submissions the tests review with ``art.review(item)`` (the pipeline runs
  synchronously; ``MWP_REVIEW_ON_SUBMIT`` is off).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from missions.commands import register_principal
from missions.handlers.sessions import capability, issue_agent_card
from missions.models import Agent, AgentCard, Group, GroupEvent
from mwportal.protocol import catalogue
from mwportal.protocol.command import Key, format_timestamp
from mwportal.protocol.ids import new_urn, urn
from mwportal.protocol.verification import sign_document
from tests.artifacts.conftest import Artifacts
from tests.conftest import AgentKey, add_member, group_revision, make_agent
from tests.workitems.flow import Flow, contract


@dataclass
class Person:
    username: str
    agent: Agent
    client: Client
    key: AgentKey

    @property
    def actor(self) -> dict[str, str]:
        return {"type": "human", "id": urn(self.agent.id)}

    def page(self, url: str) -> str:
        response = self.client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        return response.content.decode()

    def submit(self, url: str, form: str, typed: dict[str, str] | None = None) -> Any:
        """What the page at ``url`` does when the person fills the form ``form`` and presses its button:
        the Command built from the form's context, signed with her key, POSTed to /api/v0.1/commands."""
        return post_command(from_page(self.key, self.page(url), form, typed or {}))


_JSON_SCRIPT = re.compile(r'<script id="([^"]+)" type="application/json">(.*?)</script>', re.S)


def page_spec(html: str, element_id: str) -> dict[str, Any]:
    """The Command context a page renders for one form (``json_script``)."""
    for found, body in _JSON_SCRIPT.findall(html):
        if found == element_id:
            return dict(json.loads(body))
    raise AssertionError(f"no Command context {element_id!r} on the page")


def from_page(
    key: AgentKey, html: str, element_id: str, typed: dict[str, str], built: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The signed Command document the page builds from a form's context and what was typed
    (``static/portal/sign.js``' ``command`` and ``withApproval``, for the server-side tests);
    ``built``: the payload members a kind's page builder assembles (the policy document, say)."""
    spec = page_spec(html, element_id)
    payload = {**spec["payload"], **(built or {})}
    for name, member in spec["fields"].items():
        if typed.get(name, "").strip():
            payload[member] = int(typed[name]) if name in spec["numbers"] else typed[name].strip()
    for member in spec["fresh"]:
        payload[member] = new_urn()
    issued = datetime.now(UTC)
    if "approval" in spec:
        approval = {**spec["approval"], "approvalId": payload["approvalId"], "comments": payload.get("comments", ""),
                    "occurredAt": format_timestamp(issued)}  # fmt: skip
        payload["approval"] = sign_document(approval, key_id=key.key.key_id, seed=key.key.seed, profile="approval")
    doc: dict[str, Any] = {"protocolVersion": "0.1", "actionId": new_urn(), "actor": spec["actor"],
                           "kind": spec["kind"], "issuedAt": format_timestamp(issued), "payload": payload,
                           "groupId": spec["groupId"]}  # fmt: skip
    doc["correlationId"] = doc["actionId"]
    doc.update({k: spec[k] for k in ("membershipEpoch", "expectedRevision", "workItemId") if k in spec})
    return sign_document(doc, key_id=key.key.key_id, seed=key.key.seed, profile="command")


def post_command(document: dict[str, Any]) -> Any:
    """POST a Command document to /api/v0.1/commands with no cookie: its signature authenticates it."""
    return Client().post("/api/v0.1/commands", json.dumps(document), content_type="application/json")


def _user(username: str, staff: bool) -> Client:
    get_user_model().objects.create_user(username, password="pw-" + username, is_staff=staff)
    client = Client()
    assert client.login(username=username, password="pw-" + username)
    return client


def make_person(username: str, roles: list[str], *, staff: bool = True) -> Person:
    """A person linked to a Django user, signed in, with a key of their own (as if their browser enrolled it)."""
    client = _user(username, staff)
    unbound = Key.generate()
    principal_id, key_id = register_principal("acme", username.title(), "person", roles, unbound.public_key,
                                              user=username)  # fmt: skip
    assert key_id is not None
    key = AgentKey(principal_id, Key(key_id, unbound.seed, ("human", principal_id), None), "acme", "person")
    return Person(username, Agent.objects.get(user__username=username), client, key)


def grant(by: AgentKey, group: str, person: Person, roles: list[str]) -> None:
    """``membership.change`` for a person (compare-and-set on the Group revision, §15.3)."""
    by.send("membership.change", group, {"principal": person.actor, "roles": roles},
            expected_revision=group_revision(group))  # fmt: skip


@pytest.fixture(autouse=True)
def _artifact_root(settings: Any, tmp_path: Any) -> None:
    settings.MWP_ARTIFACT_ROOT = str(tmp_path / "artifacts")
    settings.MWP_REVIEW_ON_SUBMIT = "off"  # the tests run the review pipeline themselves


@pytest.fixture
def pat_client(org: dict[str, str]) -> Client:
    return _user("pat", True)


@pytest.fixture
def owner(pat_client: Client) -> AgentKey:
    """The shared fixtures' MissionOwner, here a person who signs in to the portal as ``pat``."""
    unbound = Key.generate()
    principal_id, key_id = register_principal("acme", "Pat Owner", "person", ["mission_owner"], unbound.public_key,
                                              user="pat")  # fmt: skip
    assert key_id is not None
    return AgentKey(principal_id, Key(key_id, unbound.seed, ("human", principal_id), None), "acme", "person")


@pytest.fixture
def pat(mission: dict[str, str], owner: AgentKey, pat_client: Client) -> Person:
    return Person("pat", Agent.objects.get(id=owner.id), pat_client, owner)


@pytest.fixture
def obi(mission: dict[str, str], owner: AgentKey) -> Person:
    person = make_person("obi", [])
    grant(owner, mission["group"], person, ["observer"])
    return person


@pytest.fixture
def nick(org: dict[str, str]) -> Person:
    return make_person("nick", ["mission_owner"])


def mission_terms(mission_id: str, group_id: str, coordinator: AgentKey, title: str) -> dict[str, Any]:
    """A ``mission.create`` payload with the §7.1 terms (objective, definition of done, deadline, budget)."""
    return {
        "missionId": urn(mission_id),
        "groupId": urn(group_id),
        "coordinatorId": coordinator.urn,
        "title": title,
        "objective": "hidden",
        "definitionOfDone": [{"criterionId": "done", "description": "done", "evidenceRequired": ["human_review"]}],
        "deadline": format_timestamp(datetime.now(UTC) + timedelta(days=7)),
        "budget": {"currency": "EUR", "financialLimit": 100},
    }


COORDINATION = "mission.coordinate"


def ensure_card(coordinator: AgentKey) -> None:
    """The Coordinator's first Agent Card (§6.1: a Coordinator lease pins one), when it has none."""
    if not AgentCard.objects.filter(agent_id=coordinator.id).exists():
        issue_agent_card(coordinator.id, [capability(COORDINATION, "1.0.0", verified_evidence=[urn(uuid.uuid4())])])


def found_mission(owner: AgentKey, coordinator: AgentKey, title: str) -> str:
    """A Mission ``owner`` (a person with a key) creates with ``coordinator`` (given its first
    Agent Card, §6.1, when it has none); the new Group's id."""
    ensure_card(coordinator)
    group, mission = str(uuid.uuid4()), str(uuid.uuid4())
    owner.send("mission.create", group, mission_terms(mission, group, coordinator, title))
    return group


@pytest.fixture
def other_mission(nick: Person, coordinator: AgentKey) -> dict[str, str]:
    """Nick's own Mission, signed with his key; nothing of it may leak."""
    ensure_card(coordinator)
    group, mission = str(uuid.uuid4()), str(uuid.uuid4())
    nick.key.send("mission.create", group, mission_terms(mission, group, coordinator, "Nick's secret Mission"))
    return {"group": group, "mission": mission}


@pytest.fixture
def art(
    mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey
) -> Artifacts:
    return Artifacts(mission, owner, coordinator, worker, worker2)


@pytest.fixture
def rita(mission: dict[str, str], owner: AgentKey) -> AgentKey:
    agent = make_agent("acme", "Rita Reviewer", ["worker"])
    add_member(owner, mission["group"], agent, ["reviewer"])
    return agent


@pytest.fixture
def flow(mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey) -> Flow:
    return Flow(mission, owner, coordinator, worker, worker2)


def approval_contract() -> dict[str, Any]:
    """A Work Contract that waits for the MissionOwner's execution Approval (§12)."""
    return contract(
        goal="Deploy to production",
        sideEffectRisk="high_risk",
        executionApproval="human_required",
        allowedResources=[{"resource": "urn:uuid:00000000-0000-4000-8000-00000000d001", "operations": ["deploy.run"]}],
    )


def events_of(group: str, kind: str) -> list[GroupEvent]:
    return list(GroupEvent.objects.filter(group_id=group, type=kind).order_by("sequence"))


def documents_of(group: str, kind: str) -> list[dict[str, Any]]:
    """The stored signed Event documents of ``kind``, each checked against its catalogue payload schema."""
    out = [e.as_wire() for e in events_of(group, kind)]
    for document in out:
        catalogue.validate_payload(kind, document["payload"])
    return out


def admin_group(slug: str = "acme") -> str:
    return str(Group.objects.get(organization__slug=slug, kind=Group.KIND_ADMIN).id)
