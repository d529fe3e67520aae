"""``mwp demo``: the demo Organization with a MissionOwner and an observer
login, a Coordinator Agent (§7.2), Workers, a DESIGN §4 key file per demo
Principal, and Missions whose WorkItems are in varied states.

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

from missions.models import GroupEvent, Mission, SigningKey
from mwportal.protocol import catalogue
from mwportal.protocol.command import Key
from mwportal.protocol.ids import urn
from mwportal.supervise import demo_reviewer_key, demo_worker_keys
from tests.protocol.normative import normative_problems, require_bundle
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
    states = set(WorkItem.objects.filter(group_id=report.group_id).values_list("state", flat=True))
    assert states == {"active", "offered", "open", "queued"}
    owner, observer = Client(), Client()
    assert owner.login(username="owner", password=password)
    assert observer.login(username="observer", password=logins["observer"])
    assert "Quarterly market report" in observer.get("/").content.decode()
    # Only the report's mailing waits for the owner's execution Approval (§12); the Website
    # refresh needs none, so the demo Agents alone take it to awaiting_approval.
    assert owner.get("/approvals/").content.decode().count('class="approval"') == 1
    assert observer.get("/policy/").status_code == 403
    assert owner.get("/policy/").status_code == 200


def test_every_demo_command_is_a_signed_normative_document_spec_15_1(db: None) -> None:
    """The demo's people and Agents sign their own Commands with their key files' keys; the
    Events are the Group Authority's signed documents, each a catalogue payload."""
    require_bundle()
    demo_logins()
    keys = {path.stem: Key.from_file(path) for path in (Path(settings.VAR_DIR) / "demo").glob("*.json")}
    actors = {urn(k.principal[1]) for k in keys.values() if k.principal is not None}
    for event in GroupEvent.objects.filter(group__kind="mission"):
        document = event.as_wire()
        assert normative_problems("event", document) == [], document["kind"]
        catalogue.validate_payload(document["kind"], document["payload"])
        assert document["actor"]["id"] in actors, document["kind"]
    coordinator = keys["demo-coordinator"]
    assert coordinator.principal is not None and coordinator.principal[0] == "agent"
    assert SigningKey.objects.get(key_id=coordinator.key_id).principal_id == urn(coordinator.principal[1])


def test_it_generates_a_password_per_person_kept_private_issue_16_item_4(db: None, tmp_path: Path) -> None:
    logins = demo_logins()
    assert set(logins) == {"owner", "observer"}
    assert logins["owner"] != logins["observer"]
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


def test_it_prints_the_login_lines_mw_serve_shows_and_writes_a_key_file_per_principal_design_4(db: None) -> None:
    """``./mw serve`` shows the demo's lines that start with ``login:``, and
    starts a demo Worker for every Worker key file in ``var/demo/``; the
    passwords file is not a key file, and the other Principals' keys are not Workers'."""
    out = io.StringIO()
    call_command("mwp", "demo", stdout=out)
    shown = [line for line in out.getvalue().splitlines() if line.startswith("login:")]
    logins = json.loads((Path(settings.VAR_DIR) / "demo-logins.json").read_text())
    assert shown == [
        f"login: owner / {logins['owner']} (MissionOwner and admin of the demo Organization)",
        f"login: observer / {logins['observer']} (observer of the demo Missions; the Coordinator is an Agent)",
    ]
    directory = Path(settings.VAR_DIR) / "demo"
    names = sorted(p.name for p in directory.glob("*.json"))
    assert names == [
        "demo-coordinator.json", "demo-reviewer.json", "demo-worker-1.json", "demo-worker-2.json", "observer.json",
        "owner.json",
    ]  # fmt: skip
    for path in directory.glob("*.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert set(json.loads(path.read_text())) == {"principal", "organizationId", "keyId", "privateKey", "publicKey"}
    assert [p.name for p in demo_worker_keys(Path(settings.VAR_DIR))] == ["demo-worker-1.json", "demo-worker-2.json"]
    reviewer = demo_reviewer_key(Path(settings.VAR_DIR))
    assert reviewer is not None and reviewer.name == "demo-reviewer.json"


def test_keys_go_where_keys_says_design_4(db: None, tmp_path: Path) -> None:
    call_command("mwp", "demo", "--keys", str(tmp_path / "elsewhere"), stdout=io.StringIO())
    assert (tmp_path / "elsewhere" / "owner.json").exists()
    assert not (Path(settings.VAR_DIR) / "demo").exists()
