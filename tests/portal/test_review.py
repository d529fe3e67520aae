"""The Coordinator's review page shows the review pipeline's results (spec 13.2):
per criterion the Worker's Evidence, each stage's result, reviewer Evidence
and the combined outcome; per Artifact its integrity and signed manifest; and
Accept / Fail issue Commands."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings

from artifacts.models import Evidence, ReviewRequest
from artifacts.store import blob_name, store_stream
from missions.models import Agent, Group
from mwportal.protocol import format_time
from tests.artifacts.conftest import Artifacts
from tests.conftest import AgentKey, nothing_written
from tests.portal.conftest import Person, events_of
from tests.workitems.flow import contract

REPORT = json.dumps({"rows": 3, "title": "survey"}).encode()


def checked_contract(*more: dict[str, Any]) -> dict[str, Any]:
    """``complete`` declares a JSON Schema and a size check; ``accurate`` needs a reviewer."""
    return contract(
        acceptance_criteria=[
            {"id": "complete", "description": "covers every response", "evidence_methods": ["test", "schema"],
             "checks": [{"kind": "json_schema", "schema": {"type": "object", "required": ["rows"]}},
                        {"kind": "size", "max_bytes": 1000}, *more]},
            {"id": "accurate", "description": "no invented facts", "evidence_methods": ["reviewer"]},
        ]
    )  # fmt: skip


def submitted(art: Artifacts, content: bytes = REPORT, *more: dict[str, Any], review: bool = True) -> tuple[str, str]:
    """A WorkItem submitted with one published JSON Artifact, reviewed by the pipeline."""
    item = art.active_item(checked_contract(*more))
    sha = art.produce(item, content, "application/json")
    art.submit_with(item, {"complete": [sha], "accurate": []}, [sha])
    if review:
        art.review(item)
    return item, sha


def url(art: Artifacts, item: str, action: str = "") -> str:
    return f"/missions/{art.group}/workitems/{item}/{action}"


def criterion(html: str, cid: str) -> str:
    """The HTML of one criterion's block."""
    start = html.index(f'data-criterion="{cid}"')
    end = html.find('<div class="criterion c-', start + 1)
    return html[start : end if end != -1 else html.index("<h2>Artifacts</h2>")]


def artifact_row(html: str, sha: str) -> str:
    start = html.index(f'<tr class="artifact" data-sha="{sha}"')
    return html[start : html.index("</tr>", start)]


def test_each_criterion_shows_the_workers_evidence_and_every_pipeline_stage_13_2(art: Artifacts, cora: Person) -> None:
    item, sha = submitted(art)
    html = cora.client.get(url(art, item)).content.decode()
    complete = criterion(html, "complete")
    assert 'data-outcome="pass"' in complete
    assert "complete checked" in complete and "accurate checked" not in complete  # the Worker's Evidence
    for stage, kind in (("integrity", "artifact_integrity"), ("schema", "json_schema"), ("deterministic", "size")):
        assert f'data-stage="{stage}" data-kind="{kind}" data-result="pass"' in complete
    assert "data-failed" not in complete
    row = artifact_row(html, sha)
    assert 'data-integrity="verified"' in row and "hash verified" in row
    assert "application/json" in row and "signed" in row and "checked on this view" in row
    assert f"/missions/{art.group}/artifacts/{sha}" in row
    assert 'id="accept-result"' in html and 'id="fail-result"' in html


def test_before_the_pipeline_runs_the_page_says_so(art: Artifacts, cora: Person) -> None:
    item, _ = submitted(art, review=False)
    html = cora.client.get(url(art, item)).content.decode()
    assert "review not recorded yet" in html
    assert "pipeline not run" in criterion(html, "complete")
    assert "complete checked" in criterion(html, "complete")


def test_a_contract_declared_check_that_fails_shows_failed_for_its_criterion_13_2(art: Artifacts, cora: Person) -> None:
    item, _ = submitted(art, b'{"title": "no rows"}')
    html = cora.client.get(url(art, item)).content.decode()
    complete = criterion(html, "complete")
    assert 'data-outcome="fail"' in complete
    assert 'data-stage="schema" data-kind="json_schema" data-result="fail"' in complete
    assert 'data-stage="deterministic" data-kind="size" data-result="pass"' in complete
    failed = complete[complete.index('data-failed="json_schema"') :]
    assert "&#x27;rows&#x27; is a required property" in failed[:600]  # why it failed
    assert "data-failed" not in criterion(html, "accurate")
    assert "review fail" in html[: html.index("<h2>Acceptance criteria</h2>")]


def test_a_declared_deterministic_check_that_fails_names_its_kind(art: Artifacts, cora: Person) -> None:
    item, _ = submitted(art, REPORT, {"kind": "media_type", "allowed": ["text/csv"]})
    complete = criterion(cora.client.get(url(art, item)).content.decode(), "complete")
    assert 'data-stage="deterministic" data-kind="media_type" data-result="fail"' in complete
    assert 'data-failed="media_type"' in complete and "text/csv" in complete


def test_a_blob_corrupted_before_the_review_fails_integrity_and_is_not_served_issue_8(
    art: Artifacts, cora: Person
) -> None:
    item, sha = submitted(art, review=False)
    (Path(settings.MWP_ARTIFACT_ROOT) / blob_name(sha)).write_bytes(REPORT.replace(b"3", b"4"))
    art.review(item)
    html = cora.client.get(url(art, item)).content.decode()
    complete = criterion(html, "complete")
    assert 'data-stage="integrity" data-kind="artifact_integrity" data-result="fail"' in complete
    assert 'data-failed="artifact_integrity"' in complete and "hash: mismatch" in complete
    row = artifact_row(html, sha)
    assert 'data-integrity="mismatch"' in row and "hash mismatch" in row
    assert "Download" not in row and "not served" in row
    response = cora.client.get(f"/missions/{art.group}/artifacts/{sha}")
    assert response.status_code == 500
    assert "INTERNAL_ERROR: a file does not match its fingerprint" in response.content.decode()


def test_a_blob_corrupted_after_the_review_shows_a_mismatch_on_view_issue_8(art: Artifacts, cora: Person) -> None:
    item, sha = submitted(art)
    (Path(settings.MWP_ARTIFACT_ROOT) / blob_name(sha)).write_bytes(b"tampered")
    html = cora.client.get(url(art, item)).content.decode()
    row = artifact_row(html, sha)
    assert 'data-integrity="mismatch"' in row and "Download" not in row
    assert 'id="integrity-alert"' in html
    complete = criterion(html, "complete")
    assert "the recorded review predates this" in complete and sha[:12] in complete
    assert cora.client.get(f"/missions/{art.group}/artifacts/{sha}").status_code == 500


def test_a_reviewer_criterion_is_pending_until_a_reviewers_evidence_arrives_13_2(
    art: Artifacts, cora: Person, rita: AgentKey
) -> None:
    item, sha = submitted(art)
    html = cora.client.get(url(art, item)).content.decode()
    accurate = criterion(html, "accurate")
    assert 'data-outcome="pending"' in accurate and 'data-pending="reviewer"' in accurate
    assert "data-reviewer-evidence" not in accurate
    review = str(ReviewRequest.objects.get(subject_id=item).review_workitem_id)
    requests = html[html.index('id="review-requests"') :]
    assert f"/missions/{art.group}/workitems/{review}/" in requests[:600] and "offered" in requests[:600]

    art.accept(review, rita)
    art.start(review, rita)
    evidence = [{
        "subject": item, "criteria": ["accurate"], "method": "reviewer", "result": "pass",
        "producer": rita.id, "timestamp": format_time(datetime.now(UTC)), "artifacts": [sha],
        "summary": "every figure traced to a response",
    }]  # fmt: skip
    art.lease_command("work.submit", review, {"artifacts": [], "evidence": evidence}, agent=rita)
    art.review(review)  # reviews the review WorkItem, then its subject again
    accurate = criterion(cora.client.get(url(art, item)).content.decode(), "accurate")
    assert 'data-outcome="pass"' in accurate and 'data-pending="reviewer"' not in accurate
    assert 'data-stage="reviewer" data-kind="reviewer_evidence" data-result="pass"' in accurate
    assert "data-reviewer-evidence" in accurate and "every figure traced to a response" in accurate


def test_the_download_streams_the_verified_bytes(art: Artifacts, cora: Person) -> None:
    _, sha = submitted(art)
    response = cora.client.get(f"/missions/{art.group}/artifacts/{sha}")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == REPORT  # type: ignore[attr-defined]


def test_accept_retains_the_coordinators_judgement_beside_the_pipelines_records_spec_13_2(
    art: Artifacts, cora: Person
) -> None:
    item, sha = submitted(art)
    response = cora.client.post(
        url(art, item, "accept"), {"revision": art.item(item).revision, "note": "looks right"}, follow=True
    )
    assert "Accepted: work.result_accepted" in response.content.decode()
    assert art.item(item).state == "verified"
    (event,) = events_of(art.group, "work.result_accepted")
    (human,) = event.body["evidence"]  # the pipeline's results are retained by review.record, not repeated
    assert human["method"] == "human" and human["summary"] == "looks right" and human["artifacts"] == [sha]
    assert human["criteria"] == ["complete", "accurate"]
    assert event.actor == str(cora.agent.id)
    origins = set(Evidence.objects.filter(workitem_id=item).values_list("origin", flat=True))
    assert origins == {"submission", "review", "coordinator"}


def test_fail_issues_work_fail_with_the_reason(art: Artifacts, cora: Person) -> None:
    item, _ = submitted(art)
    cora.client.post(url(art, item, "fail"), {"revision": art.item(item).revision, "reason": "numbers off"})
    assert art.item(item).state == "failed"
    (event,) = events_of(art.group, "work.failed")
    assert event.body["evidence"][0]["summary"] == "numbers off"
    assert event.body["evidence"][0]["result"] == "fail"
    html = cora.client.get(url(art, item)).content.decode()
    assert 'data-origin="failure"' in html and "numbers off" in html


def test_a_stale_review_form_shows_the_refusal_and_changes_nothing_MWP_EVT_007(art: Artifacts, cora: Person) -> None:
    item, _ = submitted(art)
    stale = art.item(item).revision
    art.accept_result(item)  # another Coordinator decided first
    with nothing_written():
        response = cora.client.post(url(art, item, "fail"), {"revision": stale, "reason": "late"})
    assert response.status_code == 409
    assert "REVISION_CONFLICT: someone changed this item; reload" in response.content.decode()
    assert art.item(item).state == "verified"


def test_a_worker_member_sees_no_decision_and_cannot_accept(art: Artifacts, wes: Person) -> None:
    item, _ = submitted(art)
    html = wes.client.get(url(art, item)).content.decode()
    assert "complete checked" in html
    assert 'id="accept-result"' not in html
    with nothing_written():
        response = wes.client.post(url(art, item, "accept"), {"revision": art.item(item).revision})
    assert response.status_code == 403
    assert "AUTH_FORBIDDEN" in response.content.decode()


def test_an_artifact_of_another_group_is_not_served_through_this_one(
    art: Artifacts, cora: Person, other_mission: dict[str, str], nick: Person
) -> None:
    foreign = store_stream(
        io.BytesIO(b"secret"), "text/plain", Group.objects.get(id=other_mission["group"]),
        Agent.objects.get(id=nick.agent.id), 1000,
    ).sha256  # fmt: skip
    assert cora.client.get(f"/missions/{art.group}/artifacts/{foreign}").status_code == 404
    assert cora.client.get(f"/missions/{other_mission['group']}/artifacts/{foreign}").status_code == 404
