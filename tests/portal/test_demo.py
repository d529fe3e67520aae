"""``mwp demo``: the demo Organization with a MissionOwner and an observer
login, a Coordinator Agent (§7.2), Workers, a DESIGN §4 key file per demo
Agent, and Missions whose WorkItems are in varied states. The people have no
key file: they sign in the browser (DESIGN §4, issue 19 item 2).

Issue 16 item 4: no fixed demo password; each person's is generated on the
first run, kept in ``var/demo-logins.json`` (mode 0600) and printed as
``login: NAME / PASSWORD`` on every run, which ``./mw serve`` greps."""

from __future__ import annotations

import io
import json
import re
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from missions.authority import accept
from missions.commands import service_command
from missions.models import Agent, GroupEvent, Mission, SigningKey, SigningKeyValidity
from mwportal.protocol import catalogue
from mwportal.protocol.command import Key, format_timestamp
from mwportal.protocol.ids import new_urn, urn
from mwportal.supervise import demo_reviewer_key, demo_worker_keys
from portal.signing import ENROLL, admin_group_id
from tests.browser.test_signing_in_the_browser import raw_key, seeds_of, stored_blobs
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
    """The demo's Agents sign their own Commands with their key files' keys, the owner with a key
    of its own; the Events are the Group Authority's signed documents, each a catalogue payload."""
    require_bundle()
    demo_logins()
    keys = {path.stem: Key.from_file(path) for path in (Path(settings.VAR_DIR) / "demo").glob("*.json")}
    actors = {urn(k.principal[1]) for k in keys.values() if k.principal is not None}
    actors.add(urn(Agent.objects.get(user__username="owner").id))
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


def test_it_prints_the_login_lines_mw_serve_shows_and_writes_a_key_file_per_agent_design_4(db: None) -> None:
    """``./mw serve`` shows the demo's lines that start with ``login:``, and
    starts a demo Worker for every Worker key file in ``var/demo/``; the
    passwords file is not a key file, the other Agents' keys are not Workers',
    and no person has one."""
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
    assert names == ["demo-coordinator.json", "demo-reviewer.json", "demo-worker-1.json", "demo-worker-2.json"]
    for path in directory.glob("*.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert set(json.loads(path.read_text())) == {"principal", "organizationId", "keyId", "privateKey", "publicKey"}
    assert [p.name for p in demo_worker_keys(Path(settings.VAR_DIR))] == ["demo-worker-1.json", "demo-worker-2.json"]
    reviewer = demo_reviewer_key(Path(settings.VAR_DIR))
    assert reviewer is not None and reviewer.name == "demo-reviewer.json"


def test_keys_go_where_keys_says_design_4(db: None, tmp_path: Path) -> None:
    call_command("mwp", "demo", "--keys", str(tmp_path / "elsewhere"), stdout=io.StringIO())
    assert (tmp_path / "elsewhere" / "demo-coordinator.json").exists()
    assert not (Path(settings.VAR_DIR) / "demo").exists()


def people_keys(username: str) -> dict[str, bool]:
    """A person's enrolled key IDs, each with whether it is revoked."""
    person = Agent.objects.get(user__username=username)
    rows = SigningKey.objects.filter(principal_type="human", principal_id=urn(person.id))
    revoked = set(
        SigningKeyValidity.objects.filter(key__in=rows, revoked_at__isnull=False).values_list("key_id", flat=True)
    )
    return {key_id: pk in revoked for pk, key_id in rows.values_list("pk", "key_id")}


def test_no_table_or_service_file_holds_a_persons_private_key_after_mwp_demo_issue_19_2(db: None) -> None:
    """DESIGN §4: the service never holds a person's private key. ``./mw serve`` seeds with
    ``mwp demo`` on every start: after two runs no row and no file of the var dir,
    MWP_SERVICE_KEY_DIR or the Artifact store holds the seed of any key enrolled for a person,
    while the same search finds the demo Agents' seeds in their key files."""
    demo_logins()
    demo_logins()
    humans = {
        raw_key(k) for k in SigningKey.objects.filter(principal_type="human").values_list("public_key", flat=True)
    }
    assert humans  # the owner's seeding key at least: the search has something to look for
    blobs = list(stored_blobs())
    assert seeds_of(humans, blobs) == []
    coordinator = Key.from_file(Path(settings.VAR_DIR) / "demo" / "demo-coordinator.json")
    assert seeds_of({raw_key(coordinator.public_key)}, blobs) == [coordinator.seed]


def test_the_owners_seeding_key_is_revoked_and_the_people_enrol_in_the_browser_design_4(db: None) -> None:
    """The owner's ``mission.create`` is signed by a key enrolled for the owner and revoked once
    the demo is seeded (its private half was never written); the observer signed nothing and has
    no key: each person's first sign-in in a browser enrols one (``portal/signing.py``)."""
    logins = demo_logins()
    owner = Agent.objects.get(user__username="owner")
    seeding = people_keys("owner")
    assert list(seeding.values()) == [True]  # one key, revoked
    created = [e.as_wire() for e in GroupEvent.objects.filter(type="mission.created")]
    assert len(created) == 2 and all(e["actor"] == {"type": "human", "id": urn(owner.id)} for e in created)
    assert people_keys("observer") == {}
    demo_logins()  # nothing left to seed: no key is made
    assert people_keys("owner") == seeding
    # The page the owner signs in to has no valid key to offer: the browser makes and enrols its own.
    client = Client()
    assert client.login(username="owner", password=logins["owner"])
    signer = re.search(
        r'<script id="mwp-signer" type="application/json">(.*?)</script>', client.get("/").content.decode()
    )
    assert signer is not None
    assert (json.loads(signer.group(1))["keys"], json.loads(signer.group(1))["revoked"]) == ([], list(seeding))


def test_a_persons_key_file_an_older_demo_wrote_is_revoked_and_deleted_design_4(db: None) -> None:
    demo_logins()
    owner = Agent.objects.get(user__username="owner")
    old = Key.generate()
    key_id = new_urn()
    public_key = {"keyId": key_id, "algorithm": "Ed25519", "publicKey": old.public_key,
                  "validFrom": format_timestamp(datetime.now(UTC))}  # fmt: skip
    accept(service_command(ENROLL, admin_group_id(owner), {"principal": {"type": "human", "id": urn(owner.id)},
                                                           "publicKey": public_key},
                           organization_id=str(owner.organization_id)))  # fmt: skip
    path = Path(settings.VAR_DIR) / "demo" / "owner.json"
    Key(key_id, old.seed, ("human", str(owner.id)), str(owner.organization_id)).write(path)
    assert people_keys("owner")[key_id] is False

    demo_logins()

    assert not path.exists()
    assert people_keys("owner")[key_id] is True
    # An Agent's key file is the Agent's to keep.
    assert (Path(settings.VAR_DIR) / "demo" / "demo-coordinator.json").exists()
