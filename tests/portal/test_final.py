"""Final Mission Approval (§7.3): the MissionOwner approves, or asks for changes to, the exact
Mission revision and Artifact set the Coordinator submitted, with the retained review results."""

from __future__ import annotations

import re

from mwportal.protocol.ids import urn
from portal.views import awaiting_approval
from tests.artifacts.conftest import Artifacts
from tests.conftest import nothing_written
from tests.portal.conftest import Person, documents_of, from_page, page_spec, post_command
from tests.portal.test_review import submitted
from tests.workitems.flow import Flow

HASH = re.compile(r"sha256:[0-9a-f]{64}")


def submit_for_approval(flow: Flow) -> list[str]:
    """Drive a WorkItem to verified and let the Coordinator submit the Mission with its Artifacts."""
    item = flow.drive_to("verified")
    (submitted_event,) = documents_of(flow.group, "work.submitted")
    artifacts = sorted({h for e in submitted_event["payload"]["evidence"] for h in e["artifactHashes"]})
    assert artifacts, item
    flow.coordinator.send("mission.submit_for_approval", flow.group, {"artifactHashes": artifacts}, coordinator_epoch=1)
    return artifacts


def test_the_final_page_shows_every_retained_review_result_spec_13_2(art: Artifacts, pat: Person) -> None:
    item, sha = submitted(art)
    html = pat.client.get(f"/missions/{art.group}/final/").content.decode()
    card = html[html.index('<section class="card result"') :]
    assert 'data-outcome="pending"' in card  # accurate still awaits a reviewer
    assert 'data-stage="schema" data-kind="json_schema"' in card
    assert f"{sha[:12]}… verified" in card
    assert 'data-origin="submission"' in card
    assert 'id="not-submitted"' in html and 'id="approve-mission"' not in html  # nothing submitted yet


def test_approve_issues_mission_approve_with_the_owners_signed_approval_spec_7_3(flow: Flow, pat: Person) -> None:
    """§7.3: ``mission.approve`` names the submitted Mission revision and Artifact set, and carries the
    Approval document the MissionOwner signed over exactly them."""
    artifacts = submit_for_approval(flow)
    html = pat.page(f"/missions/{flow.group}/final/")
    assert all(h[:19] in html for h in artifacts)
    submitted_now = awaiting_approval(flow.group)
    assert submitted_now is not None
    spec = page_spec(html, "cmd-approve")
    assert spec["expectedRevision"] == submitted_now["expectedRevision"]
    assert spec["approval"]["approver"] == pat.actor and spec["approval"]["kind"] == "mission_final"
    response = pat.submit(f"/missions/{flow.group}/final/", "cmd-approve", {"note": "ship it"})
    assert response.status_code == 201, response.json()
    (event,) = documents_of(flow.group, "mission.approved")
    approval = event["payload"]["approval"]
    assert event["actor"] == pat.actor and approval["approver"] == pat.actor
    assert approval["missionRevision"] == submitted_now["missionRevision"]
    assert sorted(approval["artifactHashes"]) == artifacts and approval["comments"] == "ship it"
    assert approval["missionId"] == urn(flow.mission)
    assert awaiting_approval(flow.group) is None


def test_request_changes_sends_the_feedback_for_the_submitted_revision_spec_7_1(flow: Flow, pat: Person) -> None:
    submit_for_approval(flow)
    response = pat.submit(f"/missions/{flow.group}/final/", "cmd-changes", {"feedback": "add the appendix"})
    assert response.status_code == 201, response.json()
    (event,) = documents_of(flow.group, "mission.changes_requested")
    assert event["payload"]["feedback"] == "add the appendix"


def test_nothing_submitted_offers_no_decision_spec_7_3(flow: Flow, pat: Person) -> None:
    flow.drive_to("verified")
    html = pat.page(f"/missions/{flow.group}/final/")
    assert 'id="not-submitted"' in html and 'id="cmd-approve"' not in html


def test_a_stale_final_approval_form_changes_nothing_spec_15_3(flow: Flow, pat: Person) -> None:
    submit_for_approval(flow)
    html = pat.page(f"/missions/{flow.group}/final/")
    revision = page_spec(html, "cmd-approve")["expectedRevision"]
    stale = html.replace(f'"expectedRevision": {revision}', f'"expectedRevision": {revision - 1}')
    with nothing_written():
        response = post_command(from_page(pat.key, stale, "cmd-approve", {}))
    assert response.status_code == 409 and response.json()["code"] == "REVISION_CONFLICT"


def test_an_observer_cannot_give_final_approval_spec_7_3(flow: Flow, pat: Person, obi: Person) -> None:
    submit_for_approval(flow)
    assert 'id="approve-mission"' not in obi.page(f"/missions/{flow.group}/final/")
    html = pat.page(f"/missions/{flow.group}/final/").replace(urn(pat.agent.id), urn(obi.agent.id))
    with nothing_written():
        response = post_command(from_page(obi.key, html, "cmd-approve", {}))
    assert response.status_code == 403 and response.json()["code"] == "AUTH_FORBIDDEN"
