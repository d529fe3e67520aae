"""The demo reaches the end (issue 19 item 13): ``mwp demo``'s Agents alone take a demo Mission to
``awaiting_approval``, against a real portal (daphne on the test database).

The processes are the ones ``./mw serve`` starts (``mwportal/supervise.py``): a
``mwworker demo`` per demo Worker key file, one for the demo reviewer's key file
(the Group's ``reviewer``, §13.2) and ``python -m portal.demo_coordinator``. No
person acts after ``mwp demo``: each WorkItem is offered once its dependencies
are verified (§10.3, §10.4), the review pipeline reviews each submission with
the signed manifests (§13.1) and a reviewer Agent other than the submitter
(§13.2), the Coordinator accepts what passed (§10.2) and submits the Mission
(§7.3). The MissionOwner's final Approval in the browser is
tests/browser's.
"""

from __future__ import annotations

import io
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client

from artifacts.models import ReviewRequest
from artifacts.review import review_summary
from missions.models import Agent, GroupEvent, Mission
from mwportal.protocol.ids import urn
from mwportal.supervise import ROOT, demo_coordinator_key, demo_reviewer_key, demo_worker_keys
from tests.portal.test_demo import LOGIN_LINE
from tests.worker.conftest import portal  # noqa: F401 (the daphne fixture)
from workitems.models import Submission, WorkItem

pytestmark = pytest.mark.django_db(transaction=True)

DEADLINE = 150.0  # seconds: the Website refresh Mission's three WorkItems, one review, on a shared machine
WEB = "Website refresh"


@pytest.fixture
def portal_env() -> dict[str, str]:
    # The review pipeline runs in daphne after each submission commits (no Celery worker here).
    return {"MWP_REVIEW_ON_SUBMIT": "inline"}


@pytest.fixture
def demo(settings: Any, tmp_path: Path) -> dict[str, str]:
    """``mwp demo`` into ``tmp_path`` (key files in ``tmp_path/demo``): the logins."""
    settings.VAR_DIR = tmp_path
    settings.MWP_REVIEW_ON_SUBMIT = "inline"
    out = io.StringIO()
    call_command("mwp", "demo", stdout=out)
    return dict(LOGIN_LINE.findall(out.getvalue()))


class Agents:
    """The demo Agents' processes, as ``./mw serve`` runs them; every one killed at the end."""

    def __init__(self, url: str, var: Path):
        self.url, self.var = url, var
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.var / "demo" / f"{name}.log", "ab")  # noqa: SIM115 (the child holds its copy)
        with log:
            self.procs.append(subprocess.Popen(  # noqa: S603 (our own programs)
                [sys.executable, "-m", *argv], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            ))  # fmt: skip

    def worker(self, key: Path) -> None:
        store = str(self.var / "demo" / f"{key.stem}.sqlite3")
        self.spawn(key.stem, ["mwworker", "demo", "--portal", self.url, "--key", str(key), "--store", store])

    def coordinator(self, key: Path) -> None:
        self.spawn(key.stem, ["portal.demo_coordinator", "--portal", self.url, "--key", str(key), "--interval", "0.5"])

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((self.var / "demo").glob("*.log")))

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait(timeout=10)


@pytest.fixture
def agents(portal: Any, demo: dict[str, str], tmp_path: Path) -> Iterator[Agents]:  # noqa: F811
    running = Agents(portal.url, tmp_path)
    try:
        yield running
    finally:
        running.stop()


def wait_for(condition: Any, agents: Agents, seconds: float = DEADLINE) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            states = {w.contract["goal"]: w.state for w in WorkItem.objects.all()}
            pytest.fail(f"not reached in {seconds:.0f} s; WorkItems {states}\n{agents.logs()}")
        time.sleep(0.5)


def web_mission() -> Mission:
    return Mission.objects.get(title=WEB)


def test_the_demo_agents_alone_take_a_mission_to_awaiting_approval_spec_7_3_10_3_13_2(
    agents: Agents, demo: dict[str, str]
) -> None:
    var = Path(settings.VAR_DIR)
    mission = web_mission()
    seeded = GroupEvent.objects.filter(group_id=mission.group_id).count()  # the seed's Events, from sequence 1
    reviewer_key, coordinator_key = demo_reviewer_key(var), demo_coordinator_key(var)
    assert reviewer_key is not None and coordinator_key is not None
    for key in [*demo_worker_keys(var), reviewer_key]:
        agents.worker(key)
    agents.coordinator(coordinator_key)
    started = time.monotonic()

    wait_for(lambda: web_mission().status == "awaiting_approval", agents)

    took = time.monotonic() - started
    items = list(WorkItem.objects.filter(group_id=mission.group_id))
    # Every WorkItem verified, the one nobody was offered by the seed ("Compress hero images") too.
    assert {i.contract["goal"]: i.state for i in items} == {
        "Audit page speed": "verified",
        "Rewrite the landing copy": "verified",
        "Compress hero images": "verified",
        **{i.contract["goal"]: "verified" for i in items if ReviewRequest.objects.filter(review_workitem=i).exists()},
    }, took
    # The qualitative criterion was reviewed by the reviewer Agent, not by its submitter (§13.2).
    reviewer = Agent.objects.get(name="Demo Reviewer")
    (request,) = ReviewRequest.objects.filter(subject__group_id=mission.group_id)
    assert request.criteria == ["tone"]
    (review_submission,) = Submission.objects.filter(workitem=request.review_workitem, authoritative=True)
    assert review_submission.agent_id == reviewer.id != request.submission.agent_id
    # Each verified result's review passed: integrity with the producer's signed manifest (§13.1) included.
    for item in items:
        summary = review_summary(item)
        assert summary["review"]["outcome"] == "passed", (item.contract["goal"], summary["review"])
        assert {a["manifestState"] for a in summary["artifacts"]} == {"verified"}, item.contract["goal"]
    # After the seed only Agents and the control plane acted; the submission is the Coordinator's.
    later = [e.as_wire() for e in GroupEvent.objects.filter(group_id=mission.group_id, sequence__gt=seeded)]
    assert {e["actor"]["type"] for e in later} <= {"agent", "service"}
    (submitted,) = [e for e in later if e["kind"] == "mission.submitted_for_approval"]
    coordinator = Agent.objects.get(name="Demo Coordinator")
    assert submitted["actor"] == {"type": "agent", "id": urn(coordinator.id)}
    assert submitted["payload"]["artifactHashes"]

    # The Mission page shows it awaiting the owner, and the verified items as reviewed.
    owner = Client()
    assert owner.login(username="owner", password=demo["owner"])
    page = owner.get(f"/missions/{mission.group_id}/").content.decode()
    assert "awaiting_approval" in page
    final = owner.get(f"/missions/{mission.group_id}/final/").content.decode()
    assert "review passed" in final and "review pending" not in final
    copy = next(i for i in items if i.contract["goal"] == "Rewrite the landing copy")
    reviewed = owner.get(f"/missions/{mission.group_id}/workitems/{copy.id}/").content.decode()
    assert "review passed" in reviewed and "review pending" not in reviewed


def test_without_a_reviewer_the_coordinator_accepts_no_unreviewed_result_spec_13_2(
    agents: Agents, demo: dict[str, str]
) -> None:
    """The reviewer Agent is not running: the submission whose criterion needs a reviewer's
    Evidence stays ``submitted`` with its review pending, and the Mission is not submitted."""
    var = Path(settings.VAR_DIR)
    mission = web_mission()
    for key in demo_worker_keys(var):
        agents.worker(key)
    coordinator_key = demo_coordinator_key(var)
    assert coordinator_key is not None
    agents.coordinator(coordinator_key)
    goals = {"Audit page speed", "Compress hero images"}

    def others_verified() -> bool:
        rows = WorkItem.objects.filter(group_id=mission.group_id).values_list("contract", "state")
        return all(state == "verified" for contract, state in rows if contract["goal"] in goals)

    wait_for(others_verified, agents)
    copy = WorkItem.objects.get(group_id=mission.group_id, contract__goal="Rewrite the landing copy")
    wait_for(lambda: review_summary(WorkItem.objects.get(id=copy.id))["review"]["outcome"] == "pending", agents)
    time.sleep(3)  # several Coordinator passes

    copy.refresh_from_db()
    assert copy.state == "submitted"
    assert web_mission().status == "active"
    assert not GroupEvent.objects.filter(group_id=mission.group_id, type="mission.submitted_for_approval").exists()
