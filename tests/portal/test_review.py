"""The Coordinator's review page: criteria beside Evidence, Artifact integrity,
deterministic checks, and Accept / Fail issuing Commands (spec 13.2)."""

from __future__ import annotations

import io
from pathlib import Path

from django.conf import settings

from artifacts.store import blob_name, store_stream
from missions.models import Agent, Group
from tests.conftest import nothing_written
from tests.portal.conftest import Person, events_of
from tests.workitems.flow import Flow


def submitted(flow: Flow) -> tuple[str, str]:
    item = flow.drive_to("active")
    sha = flow.blob(b'{"summary": "all responses"}')
    evidence = [
        {**flow.evidence(item, flow.worker, ["complete"], [sha])[0], "method": "test", "summary": "42 of 42 covered"},
        {**flow.evidence(item, flow.worker, ["accurate"], [sha])[0], "method": "reviewer", "summary": "no inventions"},
    ]
    flow.lease_command("work.submit", item, {"artifacts": [sha], "evidence": evidence})
    return item, sha


def url(flow: Flow, item: str, action: str = "") -> str:
    return f"/missions/{flow.group}/workitems/{item}/{action}"


def test_each_criterion_sits_beside_its_evidence_and_artifacts_are_verified(flow: Flow, cora: Person) -> None:
    item, sha = submitted(flow)
    html = cora.client.get(url(flow, item)).content.decode()
    complete = html[html.index('data-criterion="complete"') : html.index('data-criterion="accurate"')]
    assert "42 of 42 covered" in complete and "no inventions" not in complete
    assert "no inventions" in html[html.index('data-criterion="accurate"') :]
    row = html[html.index(f'data-sha="{sha}"') :]
    assert "hash verified" in row[:600]
    assert "text/markdown" in row[:600]
    assert f"/missions/{flow.group}/artifacts/{sha}" in row[:900]
    assert "Evidence for every acceptance criterion" in html
    assert 'id="accept-result"' in html and 'id="fail-result"' in html


def test_the_download_streams_the_verified_bytes(flow: Flow, cora: Person) -> None:
    item, sha = submitted(flow)
    response = cora.client.get(f"/missions/{flow.group}/artifacts/{sha}")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b'{"summary": "all responses"}'  # type: ignore[attr-defined]


def test_a_tampered_artifact_shows_a_mismatch_and_is_not_served_spec_13_1(flow: Flow, cora: Person) -> None:
    item, sha = submitted(flow)
    (Path(settings.MWP_ARTIFACT_ROOT) / blob_name(sha)).write_bytes(b"tampered")
    html = cora.client.get(url(flow, item)).content.decode()
    assert "hash mismatch" in html[html.index(f'data-sha="{sha}"') :][:600]
    response = cora.client.get(f"/missions/{flow.group}/artifacts/{sha}")
    assert response.status_code == 409
    assert "ARTIFACT_HASH_MISMATCH" in response.content.decode()


def test_accept_issues_accept_result_with_the_review_retained_as_evidence_spec_13_2(flow: Flow, cora: Person) -> None:
    item, sha = submitted(flow)
    response = cora.client.post(
        url(flow, item, "accept"), {"revision": flow.item(item).revision, "note": "looks right"}, follow=True
    )
    assert "Accepted: work.result_accepted" in response.content.decode()
    assert flow.item(item).state == "verified"
    (event,) = events_of(flow.group, "work.result_accepted")
    checks, human = event.body["evidence"]
    assert checks["method"] == "deterministic_check" and checks["result"] == "pass"
    assert checks["artifacts"] == [sha]
    assert human["method"] == "human" and human["summary"] == "looks right"
    assert event.actor == str(cora.agent.id)


def test_fail_issues_work_fail_with_the_reason(flow: Flow, cora: Person) -> None:
    item, _ = submitted(flow)
    cora.client.post(url(flow, item, "fail"), {"revision": flow.item(item).revision, "reason": "numbers off"})
    assert flow.item(item).state == "failed"
    (event,) = events_of(flow.group, "work.failed")
    assert event.body["evidence"][0]["summary"] == "numbers off"
    assert event.body["evidence"][0]["result"] == "fail"


def test_a_stale_review_form_shows_the_refusal_and_changes_nothing_MWP_EVT_007(flow: Flow, cora: Person) -> None:
    item, _ = submitted(flow)
    stale = flow.item(item).revision
    flow.accept_result(item)  # another Coordinator decided first
    with nothing_written():
        response = cora.client.post(url(flow, item, "fail"), {"revision": stale, "reason": "late"})
    assert response.status_code == 409
    assert "REVISION_MISMATCH: someone changed this item; reload" in response.content.decode()
    assert flow.item(item).state == "verified"


def test_a_worker_member_sees_no_decision_and_cannot_accept(flow: Flow, wes: Person) -> None:
    item, _ = submitted(flow)
    html = wes.client.get(url(flow, item)).content.decode()
    assert "42 of 42 covered" in html
    assert 'id="accept-result"' not in html
    with nothing_written():
        response = wes.client.post(url(flow, item, "accept"), {"revision": flow.item(item).revision})
    assert response.status_code == 403
    assert "FORBIDDEN" in response.content.decode()


def test_an_artifact_of_another_group_is_not_served_through_this_one(
    flow: Flow, cora: Person, other_mission: dict[str, str], nick: Person
) -> None:
    foreign = store_stream(
        io.BytesIO(b"secret"), "text/plain", Group.objects.get(id=other_mission["group"]),
        Agent.objects.get(id=nick.agent.id), 1000,
    ).sha256  # fmt: skip
    assert cora.client.get(f"/missions/{flow.group}/artifacts/{foreign}").status_code == 404
    assert cora.client.get(f"/missions/{other_mission['group']}/artifacts/{foreign}").status_code == 404
