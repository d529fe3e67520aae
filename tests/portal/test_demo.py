"""``mwp demo``: the demo Organization with a MissionOwner and a Coordinator
login and Missions whose WorkItems are in varied states."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from missions.models import Mission
from workitems.models import WorkItem


@pytest.fixture(autouse=True)
def _demo_dirs(settings: Any, tmp_path: Any) -> None:
    settings.MWP_ARTIFACT_ROOT = str(tmp_path / "artifacts")
    settings.VAR_DIR = tmp_path


def test_demo_creates_logins_and_a_mission_in_varied_states(db: None) -> None:
    out = io.StringIO()
    call_command("mwp", "demo", stdout=out)
    call_command("mwp", "demo", stdout=io.StringIO())  # a second run changes nothing
    assert "login: owner / missionweave" in out.getvalue()
    assert "login: coordinator / missionweave" in out.getvalue()
    assert Mission.objects.count() == 2
    report = Mission.objects.get(title="Quarterly market report")
    states = set(WorkItem.objects.filter(mission=report).values_list("state", flat=True))
    assert states == {"verified", "submitted", "active", "offered", "open", "queued"}
    owner, coordinator = Client(), Client()
    assert owner.login(username="owner", password="missionweave")
    assert coordinator.login(username="coordinator", password="missionweave")
    assert "Quarterly market report" in coordinator.get("/").content.decode()
    assert owner.get("/approvals/").content.decode().count('class="approval"') == 2
    assert coordinator.get("/policy/").status_code == 403
    assert owner.get("/policy/").status_code == 200
