"""The review page shows the review pipeline's results (spec 13.2) to the Mission's people:
per criterion the Worker's Evidence, each stage's result, reviewer Evidence
and the combined outcome; per Artifact its integrity and signed manifest. The
decision is the Coordinator Agent's (§7.2), so the page issues no Command."""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings

from artifacts.models import ReviewRequest
from artifacts.store import blob_name, store_stream
from missions.models import Agent, Group
from mwportal.protocol.ids import urn
from tests.artifacts.conftest import Artifacts
from tests.artifacts.test_review import REPORT, checked_contract
from tests.conftest import AgentKey, nothing_written
from tests.portal.conftest import Person, events_of


def submitted(art: Artifacts, content: bytes = REPORT, *more: dict[str, Any], review: bool = True) -> tuple[str, str]:
    """A WorkItem submitted with one published JSON Artifact, reviewed by the pipeline: (WorkItem, hex)."""
    item = art.active_item(checked_contract(*more))
    content_hash, artifact_id = art.produce(item, content, "application/json")
    art.submit_with(item, {"complete": [content_hash], "accurate": []}, [artifact_id])
    if review:
        art.review(item)
    return item, content_hash.removeprefix("sha256:")


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


def test_each_criterion_shows_the_workers_evidence_and_every_pipeline_stage_13_2(art: Artifacts, obi: Person) -> None:
    item, sha = submitted(art)
    html = obi.client.get(url(art, item)).content.decode()
    complete = criterion(html, "complete")
    assert 'data-outcome="passed"' in complete
    assert "ran the survey checks" in complete  # the Worker's Evidence, citing the Artifact
    assert f"/missions/{art.group}/artifacts/{sha}" in complete
    assert f"/missions/{art.group}/artifacts/{sha}" not in criterion(html, "accurate")
    for stage, kind in (("integrity", "artifact_integrity"), ("schema", "json_schema"), ("deterministic", "size")):
        assert f'data-stage="{stage}" data-kind="{kind}" data-result="passed"' in complete
    assert "data-failed" not in complete
    row = artifact_row(html, sha)
    assert 'data-integrity="verified"' in row and "hash verified" in row
    assert "application/json" in row and "signed" in row and "checked on this view" in row
    assert f"/missions/{art.group}/artifacts/{sha}" in row


def test_before_the_pipeline_runs_the_page_says_so(art: Artifacts, obi: Person) -> None:
    item, _ = submitted(art, review=False)
    html = obi.client.get(url(art, item)).content.decode()
    assert "review not recorded yet" in html
    assert "pipeline not run" in criterion(html, "complete")
    assert "ran the survey checks" in criterion(html, "complete")


def test_a_contract_declared_check_that_fails_shows_failed_for_its_criterion_13_2(art: Artifacts, obi: Person) -> None:
    item, _ = submitted(art, b'{"title": "no rows"}')
    html = obi.client.get(url(art, item)).content.decode()
    complete = criterion(html, "complete")
    assert 'data-outcome="failed"' in complete
    assert 'data-stage="schema" data-kind="json_schema" data-result="failed"' in complete
    assert 'data-stage="deterministic" data-kind="size" data-result="passed"' in complete
    failed = complete[complete.index('data-failed="json_schema"') :]
    assert "&#x27;rows&#x27; is a required property" in failed[:600]  # why it failed
    assert "data-failed" not in criterion(html, "accurate")
    assert "review failed" in html[: html.index("<h2>Acceptance criteria</h2>")]


def test_a_declared_deterministic_check_that_fails_names_its_kind(art: Artifacts, obi: Person) -> None:
    item, _ = submitted(art, REPORT, {"kind": "media_type", "allowed": ["text/csv"]})
    complete = criterion(obi.client.get(url(art, item)).content.decode(), "complete")
    assert 'data-stage="deterministic" data-kind="media_type" data-result="failed"' in complete
    assert 'data-failed="media_type"' in complete and "text/csv" in complete


def test_a_blob_corrupted_before_the_review_fails_integrity_and_is_not_served_issue_8(
    art: Artifacts, obi: Person
) -> None:
    item, sha = submitted(art, review=False)
    (Path(settings.MWP_ARTIFACT_ROOT) / blob_name(sha)).write_bytes(REPORT.replace(b"3", b"4"))
    art.review(item)
    html = obi.client.get(url(art, item)).content.decode()
    complete = criterion(html, "complete")
    assert 'data-stage="integrity" data-kind="artifact_integrity" data-result="failed"' in complete
    assert 'data-failed="artifact_integrity"' in complete and "hash: mismatch" in complete
    row = artifact_row(html, sha)
    assert 'data-integrity="mismatch"' in row and "hash mismatch" in row
    assert "Download" not in row and "not served" in row
    response = obi.client.get(f"/missions/{art.group}/artifacts/{sha}")
    assert response.status_code == 500
    assert "INTERNAL_ERROR: a file does not match its fingerprint" in response.content.decode()


def test_a_tampered_artifact_shows_a_mismatch_and_is_not_served_spec_13_1(art: Artifacts, obi: Person) -> None:
    """issue 8: a blob corrupted after the review shows a mismatch on view and is never served."""
    item, sha = submitted(art)
    (Path(settings.MWP_ARTIFACT_ROOT) / blob_name(sha)).write_bytes(b"tampered")
    html = obi.client.get(url(art, item)).content.decode()
    row = artifact_row(html, sha)
    assert 'data-integrity="mismatch"' in row and "Download" not in row
    assert 'id="integrity-alert"' in html
    complete = criterion(html, "complete")
    assert "the recorded review predates this" in complete and sha[:12] in complete
    assert obi.client.get(f"/missions/{art.group}/artifacts/{sha}").status_code == 500


def test_a_reviewer_criterion_is_pending_until_a_reviewers_evidence_arrives_13_2(
    art: Artifacts, obi: Person, rita: AgentKey
) -> None:
    item, sha = submitted(art)
    html = obi.client.get(url(art, item)).content.decode()
    accurate = criterion(html, "accurate")
    assert 'data-outcome="pending"' in accurate and 'data-pending="reviewer"' in accurate
    assert "data-reviewer-evidence" not in accurate
    review = str(ReviewRequest.objects.get(subject_id=item).review_workitem_id)
    requests = html[html.index('id="review-requests"') :]
    assert f"/missions/{art.group}/workitems/{review}/" in requests[:600] and "offered" in requests[:600]

    art.accept(review, rita)
    art.start(review, rita)
    note = art.upload(b"every figure traced", agent=rita)
    manifest = art.manifest(review, note, b"every figure traced", agent=rita)
    art.publish(review, manifest, agent=rita)
    verdict = art.evidence(review, ["accurate"], ["sha256:" + sha], agent=rita, type_="reviewer_assessment")
    rita.send("work.submit", art.group, {"workItemId": urn(review), **art.fences(review),
                                         "artifactIds": [manifest["artifactId"]], "evidence": [verdict]})  # fmt: skip
    art.review(review)  # reviews the review WorkItem, then its subject again
    accurate = criterion(obi.client.get(url(art, item)).content.decode(), "accurate")
    assert 'data-outcome="passed"' in accurate and 'data-pending="reviewer"' not in accurate
    assert 'data-stage="reviewer" data-kind="reviewer_evidence" data-result="passed"' in accurate
    assert "data-reviewer-evidence" in accurate and "reviewer_assessment" in accurate


def test_the_download_streams_the_verified_bytes(art: Artifacts, obi: Person) -> None:
    _, sha = submitted(art)
    response = obi.client.get(f"/missions/{art.group}/artifacts/{sha}")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == REPORT  # type: ignore[attr-defined]


def test_the_page_decides_nothing_the_coordinator_is_an_agent_spec_7_2(art: Artifacts, pat: Person) -> None:
    """``work.accept_result`` is an Agent's Command (command.schema.json): the MissionOwner's
    page shows the review, with no decision form and no URL that would issue one."""
    item, _ = submitted(art)
    html = pat.client.get(url(art, item)).content.decode()
    assert "ran the survey checks" in html
    assert 'id="accept-result"' not in html and 'id="fail-result"' not in html
    with nothing_written():
        for action in ("accept", "fail"):
            assert pat.client.post(url(art, item, action), {"revision": art.item(item).revision}).status_code == 404
    decision = art.evidence(item, ["complete", "accurate"], [], agent=art.coordinator, type_="human_review")
    art.coordinate(
        "work.accept_result",
        {"workItemId": urn(item), "evidence": [decision]},
        expected_revision=art.item(item).revision,
    )  # the Coordinator Agent decides over the wire
    (event,) = events_of(art.group, "work.result.accepted")
    html = pat.client.get(url(art, item)).content.decode()
    assert 'id="item-state">verified' in html and event.as_wire()["kind"] == "work.result.accepted"


def test_an_artifact_of_another_group_is_not_served_through_this_one(
    art: Artifacts, obi: Person, other_mission: dict[str, str], nick: Person
) -> None:
    foreign = store_stream(
        io.BytesIO(b"secret"), "text/plain", Group.objects.get(id=other_mission["group"]),
        Agent.objects.get(id=nick.agent.id), 1000,
    ).sha256  # fmt: skip
    assert obi.client.get(f"/missions/{art.group}/artifacts/{foreign}").status_code == 404
    assert obi.client.get(f"/missions/{other_mission['group']}/artifacts/{foreign}").status_code == 404
    assert obi.client.get(f"/missions/{art.group}/artifacts/{uuid.uuid4()}").status_code == 404
