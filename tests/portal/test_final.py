"""Final Mission Approval with the retained review results."""

from __future__ import annotations

from missions.models import Mission
from tests.artifacts.conftest import Artifacts
from tests.conftest import group_revision, nothing_written
from tests.portal.conftest import Person, add_member, events_of, make_person
from tests.portal.test_review import submitted
from tests.workitems.flow import Flow


def test_the_final_page_shows_every_retained_review_result_spec_13_2(art: Artifacts, pat: Person, cora: Person) -> None:
    item, sha = submitted(art)
    cora.client.post(f"/missions/{art.group}/workitems/{item}/accept",
                     {"revision": art.item(item).revision, "note": "matches the survey"})  # fmt: skip
    html = pat.client.get(f"/missions/{art.group}/final/").content.decode()
    card = html[html.index('<section class="card result"') :]
    assert 'data-outcome="pending"' in card  # accurate still awaits a reviewer
    assert 'data-stage="schema" data-kind="json_schema"' in card
    assert f"{sha[:12]}… verified" in card
    coordinator = card[card.index('data-origin="coordinator"') :]
    assert "matches the survey" in coordinator[:800]
    pipeline = card[card.index('data-origin="review"') :]
    assert "schema: json_schema pass" in pipeline[:3000] and "combined: combined_evaluation" in pipeline[:3000]
    assert 'data-origin="submission"' in card
    assert 'id="approve-mission"' in html


def test_a_failed_check_shows_as_failed_on_the_final_page_13_2(art: Artifacts, pat: Person) -> None:
    item, _ = submitted(art, b'{"title": "no rows"}')
    html = pat.client.get(f"/missions/{art.group}/final/").content.decode()
    card = html[html.index('<section class="card result"') :]
    assert 'data-outcome="fail"' in card
    complete = card[card.index('data-criterion="complete"') : card.index('data-criterion="accurate"')]
    assert "✘ Schema: json_schema" in complete and "required property" in complete


def test_approve_issues_mission_approve(flow: Flow, pat: Person) -> None:
    flow.drive_to("verified")
    response = pat.client.post(f"/missions/{flow.group}/approve",
                               {"revision": group_revision(flow.group), "note": "ship it"}, follow=True)  # fmt: skip
    assert "Accepted: mission.approved" in response.content.decode()
    assert Mission.objects.get(group_id=flow.group).status == "completed"
    (event,) = events_of(flow.group, "mission.approved")
    assert event.actor == str(pat.agent.id) and event.body["note"] == "ship it"


def test_approval_with_unfinished_work_is_refused_in_plain_words(flow: Flow, pat: Person) -> None:
    flow.drive_to("queued")
    with nothing_written():
        response = pat.client.post(f"/missions/{flow.group}/approve", {"revision": group_revision(flow.group)})
    assert response.status_code == 422
    assert "INVALID_STATE_TRANSITION: this is not possible" in response.content.decode()


def test_a_stale_final_approval_form_changes_nothing_MWP_EVT_007(flow: Flow, pat: Person) -> None:
    flow.drive_to("verified")
    html = pat.client.get(f"/missions/{flow.group}/final/").content.decode()
    revision = int(html.split('name="revision" value="')[1].split('"')[0])
    add_member(flow.owner, flow.group, make_person("vic", ["worker"]).agent, ["reviewer"])  # the Group moved on
    with nothing_written():
        response = pat.client.post(f"/missions/{flow.group}/approve", {"revision": revision})
    assert response.status_code == 409
    assert "REVISION_CONFLICT: someone changed this item; reload" in response.content.decode()


def test_a_coordinator_cannot_give_final_approval(flow: Flow, cora: Person) -> None:
    flow.drive_to("verified")
    assert 'id="approve-mission"' not in cora.client.get(f"/missions/{flow.group}/final/").content.decode()
    with nothing_written():
        response = cora.client.post(f"/missions/{flow.group}/approve", {"revision": group_revision(flow.group)})
    assert response.status_code == 403
