"""``mwp demo``: the demo Organization with a MissionOwner and a Coordinator
login and Missions whose WorkItems are in varied states.

Issue 16 item 4: no fixed demo password; each person's is generated on the
first run, kept in ``var/demo-logins.json`` (mode 0600) and printed as
``login: NAME / PASSWORD`` on every run, which ``./mw serve`` greps."""

from __future__ import annotations

import io
import json
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from missions.models import Mission
from workitems.models import WorkItem


@pytest.fixture(autouse=True)
def _demo_dirs(settings: Any, tmp_path: Any) -> None:
    settings.MWP_ARTIFACT_ROOT = str(tmp_path / "artifacts")
    settings.VAR_DIR = tmp_path


LOGIN_LINE = re.compile(r"^login: (\S+) / (\S+)", re.MULTILINE)


def demo_logins() -> dict[str, str]:
    out = io.StringIO()
    call_command("mwp", "demo", stdout=out)
    return dict(LOGIN_LINE.findall(out.getvalue()))


def test_demo_creates_logins_and_a_mission_in_varied_states(db: None) -> None:
    logins = demo_logins()
    assert demo_logins() == logins  # a second run changes nothing and prints the same logins
    password = logins["owner"]
    assert Mission.objects.count() == 2
    report = Mission.objects.get(title="Quarterly market report")
    states = set(WorkItem.objects.filter(mission=report).values_list("state", flat=True))
    assert states == {"verified", "submitted", "active", "offered", "open", "queued"}
    owner, coordinator = Client(), Client()
    assert owner.login(username="owner", password=password)
    assert coordinator.login(username="coordinator", password=logins["coordinator"])
    assert "Quarterly market report" in coordinator.get("/").content.decode()
    assert owner.get("/approvals/").content.decode().count('class="approval"') == 2
    assert coordinator.get("/policy/").status_code == 403
    assert owner.get("/policy/").status_code == 200


def test_it_generates_a_password_per_person_kept_private_issue_16_item_4(db: None, tmp_path: Path) -> None:
    logins = demo_logins()
    assert set(logins) == {"owner", "coordinator"}
    assert logins["owner"] != logins["coordinator"]
    assert "missionweave" not in logins.values()
    assert all(len(p) >= 16 for p in logins.values())
    stored = tmp_path / "demo-logins.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert json.loads(stored.read_text()) == logins
    # The real sign-in form takes them; the old fixed password is refused.
    client = Client()
    refused = client.post("/login/", {"username": "owner", "password": "missionweave"})
    assert refused.status_code == 200 and "_auth_user_id" not in client.session
    signed_in = client.post("/login/", {"username": "owner", "password": logins["owner"]})
    assert signed_in.status_code == 302 and client.session["_auth_user_id"]


def test_it_moves_an_old_installation_off_the_fixed_password_issue_16_item_4(db: None, tmp_path: Path) -> None:
    demo_logins()
    (tmp_path / "demo-logins.json").unlink()  # as before the file existed
    owner = get_user_model().objects.get(username="owner")
    owner.set_password("missionweave")
    owner.save()
    logins = demo_logins()
    client = Client()
    assert not client.login(username="owner", password="missionweave")
    assert client.login(username="owner", password=logins["owner"])


def test_it_prints_the_login_lines_mw_serve_shows(db: None) -> None:
    """``./mw serve`` shows the demo's lines that start with ``login:``, and
    starts a demo Worker for every key file in ``var/demo/``: the passwords
    file is not one of them."""
    out = io.StringIO()
    call_command("mwp", "demo", stdout=out)
    shown = [line for line in out.getvalue().splitlines() if line.startswith("login:")]
    logins = json.loads((Path(settings.VAR_DIR) / "demo-logins.json").read_text())
    assert shown == [
        f"login: owner / {logins['owner']} (MissionOwner and admin of the demo Organization)",
        f"login: coordinator / {logins['coordinator']} (Coordinator of the demo Missions)",
    ]
    worker_keys = sorted(p.name for p in (Path(settings.VAR_DIR) / "demo").glob("*.json"))
    assert worker_keys == ["demo-worker-1.json", "demo-worker-2.json"]
