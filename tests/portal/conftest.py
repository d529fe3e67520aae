"""Personas of the portal: people signed in through Django sessions.

On top of the shared personas (``tests/conftest.py``), whose Mission ``mission``
is driven by its signed-in Agents through ``Flow``:

- ``pat``: a person with the org role ``mission_owner``, an ``owner`` member;
- ``cora``: a person Coordinator (org role ``coordinator``), a ``coordinator`` member;
- ``wes``: a person with the ``worker`` Group role only;
- ``nick``: a MissionOwner of the same Organization who owns another Mission
  (``other_mission``) and is no member of ``mission``;
- ``rita``: a reviewer Agent (``reviewer`` member), who receives the review
  WorkItems the pipeline opens;
- ``art``: the WorkItem driver with uploads and signed manifests, whose
  submissions the tests review with ``art.review(item)`` (the pipeline runs
  synchronously; ``MWP_REVIEW_ON_SUBMIT`` is off).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from missions.commands import register_agent
from missions.models import Agent, Group
from portal.actions import issue
from tests.artifacts.conftest import Artifacts
from tests.conftest import AgentKey, group_revision, make_agent
from tests.workitems.flow import Flow, contract


@dataclass
class Person:
    username: str
    agent: Agent
    client: Client


def make_person(username: str, roles: list[str], *, staff: bool = True) -> Person:
    user = get_user_model().objects.create_user(username, password="pw-" + username, is_staff=staff)
    register_agent("acme", username.title(), "person", roles, "", user=username)
    client = Client()
    assert client.login(username=username, password="pw-" + username)
    return Person(username, Agent.objects.get(user=user), client)


def add_member(owner: AgentKey, group: str, agent: Agent, roles: list[str]) -> None:
    owner.send(
        "membership.add",
        group,
        {"agent": str(agent.id), "roles": roles},
        target={"kind": "group", "id": group, "revision": group_revision(group)},
    )


@pytest.fixture(autouse=True)
def _artifact_root(settings: Any, tmp_path: Any) -> None:
    settings.MWP_ARTIFACT_ROOT = str(tmp_path / "artifacts")
    settings.MWP_REVIEW_ON_SUBMIT = "off"  # the tests run the review pipeline themselves


@pytest.fixture
def art(
    mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey
) -> Artifacts:
    return Artifacts(mission, owner, coordinator, worker, worker2)


@pytest.fixture
def rita(mission: dict[str, str], owner: AgentKey) -> AgentKey:
    agent = make_agent("acme", "Rita Reviewer", ["worker"])
    owner.send(
        "membership.add",
        mission["group"],
        {"agent": agent.id, "roles": ["reviewer"]},
        target={"kind": "group", "id": mission["group"], "revision": group_revision(mission["group"])},
    )
    return agent


@pytest.fixture
def flow(mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey) -> Flow:
    return Flow(mission, owner, coordinator, worker, worker2)


@pytest.fixture
def pat(mission: dict[str, str], owner: AgentKey) -> Person:
    p = make_person("pat", ["mission_owner"])
    add_member(owner, mission["group"], p.agent, ["owner"])
    return p


@pytest.fixture
def cora(mission: dict[str, str], owner: AgentKey) -> Person:
    p = make_person("cora", ["coordinator"])
    add_member(owner, mission["group"], p.agent, ["coordinator"])
    return p


@pytest.fixture
def wes(mission: dict[str, str], owner: AgentKey) -> Person:
    p = make_person("wes", ["worker"])
    add_member(owner, mission["group"], p.agent, ["worker"])
    return p


@pytest.fixture
def nick(org: dict[str, str]) -> Person:
    return make_person("nick", ["mission_owner"])


@pytest.fixture
def other_mission(nick: Person) -> dict[str, str]:
    """Nick's own Mission, with one WorkItem whose goal must never leak."""
    group, mission = str(uuid.uuid4()), str(uuid.uuid4())
    body = {"mission": mission, "title": "Nick's secret Mission", "objective": "hidden"}
    assert issue(nick.agent, "mission.create", group, body).ok
    item = str(uuid.uuid4())
    assert issue(nick.agent, "work.authorize", group, {"workitem": item, "contract": contract(
        goal="Nick's secret goal")}).ok  # fmt: skip
    return {"group": group, "mission": mission, "item": item}


def approval_contract() -> dict[str, Any]:
    return contract(
        goal="Deploy to production",
        risk={"class": "high", "requires_execution_approval": True},
        capabilities=[{"id": "deploy", "version": "2.1"}],
    )


def events_of(group: str, type_: str) -> list[Any]:
    from missions.models import GroupEvent

    return list(GroupEvent.objects.filter(group_id=group, type=type_).order_by("sequence"))


def admin_group(slug: str = "acme") -> str:
    return str(Group.objects.get(organization__slug=slug, kind=Group.KIND_ADMIN).id)
