"""Evidence and the review pipeline (PROTOCOL §13.2).

The pipeline's findings are normative Evidence documents signed by the
Organization's control plane, recorded with its Command
``ext.mwportal.review.result_record``; qualitative criteria go to a review
WorkItem offered to the Group's reviewers (``work.authorized``,
``work.offer.created``).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from artifacts.models import Evidence, ReviewRequest
from artifacts.review import review_summary
from artifacts.store import blob_name
from missions.models import Group, GroupEvent
from missions.service_keys import control_plane
from mwportal.protocol import ErrorCode
from mwportal.protocol.command import Key
from mwportal.protocol.ids import urn
from tests.api.support import API, error_of, normative
from tests.artifacts.conftest import Artifacts, contract, criterion, events_of
from tests.conftest import AgentKey, Because, refused
from workitems import checks
from workitems.models import WorkItem

REPORT = json.dumps({"rows": 3, "title": "survey"}).encode()
RECORDED = "ext.mwportal.review.result_recorded"


def checked_contract(*more: dict[str, Any]) -> dict[str, Any]:
    """``complete`` has a JSON Schema and a size check; ``accurate`` needs a reviewer."""
    complete_checks = [
        {"kind": "json_schema", "schema": {"type": "object", "required": ["rows"]}},
        {"kind": "size", "max_bytes": 1000},
        *more,
    ]
    return contract(
        acceptanceCriteria=[
            criterion("complete", "deterministic_test", "schema_validation", description="covers every response"),
            criterion("accurate", "reviewer_assessment", description="no invented facts"),
        ],
        constraints={"checks": {"complete": complete_checks}},
    )


def submitted(art: Artifacts, content: bytes = REPORT, c: dict[str, Any] | None = None) -> tuple[str, str]:
    """A WorkItem submitted with one published JSON Artifact; (WorkItem, content hash)."""
    item = art.active_item(c or checked_contract())
    sha, artifact_id = art.produce(item, content, "application/json")
    art.submit_with(item, {"complete": [sha], "accurate": []}, [artifact_id])
    return item, sha


def summary_of(item: str) -> dict[str, Any]:
    return review_summary(WorkItem.objects.get(id=item))


def outcomes(item: str) -> dict[str, Any]:
    summary = summary_of(item)
    return {row["criterionId"]: row["outcome"] for row in summary["criteria"]} | {"_": summary["review"]["outcome"]}


def criterion_row(item: str, cid: str) -> dict[str, Any]:
    return next(r for r in summary_of(item)["criteria"] if r["criterionId"] == cid)


def control_plane_actor(art: Artifacts) -> dict[str, str]:
    key = control_plane(str(Group.objects.get(id=art.group).organization_id))
    assert key.principal is not None
    return {"type": "service", "id": urn(key.principal[1])}


def test_submitting_with_a_criterion_left_without_evidence_is_evidence_required_13_2(art: Artifacts) -> None:
    item = art.active_item(checked_contract())
    sha, artifact_id = art.produce(item, REPORT, "application/json")
    err = refused(
        Because(ErrorCode.INVALID_STATE_TRANSITION, "evidence_required"),
        art.submit_with,
        item,
        {"complete": [sha]},
        [artifact_id],
    )
    assert err.details["criteria"] == ["accurate"]
    assert WorkItem.objects.get(id=item).state == "active"


def test_the_pipeline_runs_in_order_and_a_reviewer_completes_it_13_2(art: Artifacts, reviewer: AgentKey) -> None:
    item, sha = submitted(art)
    receipt = art.review(item)
    assert receipt is not None
    kinds = [e["kind"] for e in receipt["events"]]
    assert kinds == [RECORDED, "ext.mwportal.review.requested", "work.authorized", "work.offer.created"]
    (recorded,) = events_of(art.group, RECORDED)
    normative("event", recorded)
    assert recorded["actor"] == control_plane_actor(art)
    evidence = recorded["payload"]["evidence"]
    for record in evidence:
        normative("evidence", record)
        assert record["generatedBy"] == control_plane_actor(art)
    stages = [e["details"]["stage"] for e in evidence]
    assert stages == ["integrity", "schema", "deterministic", "combined", "combined"]  # §13.2's order
    assert [e["type"] for e in evidence] == [
        "artifact_integrity", "schema_validation", "deterministic_test", "policy_check", "policy_check",
    ]  # fmt: skip
    assert outcomes(item) == {"complete": "passed", "accurate": "pending", "_": "pending"}

    # The qualitative criterion went to a reviewer member as a review WorkItem.
    request = ReviewRequest.objects.get(subject_id=item)
    review = str(request.review_workitem_id)
    assert request.criteria == ["accurate"]
    authorized = events_of(art.group, "work.authorized")[-1]
    normative("work-item", authorized["payload"]["workItem"])
    assert authorized["payload"]["workItem"]["contract"]["acceptanceCriteria"][0]["criterionId"] == "accurate"
    offered = events_of(art.group, "work.offer.created")[-1]
    assert offered["payload"]["candidateAgentIds"] == [reviewer.urn]
    art.accept(review, reviewer)
    art.start(review, reviewer)
    note = art.upload(b"every figure traced", agent=reviewer)
    manifest = art.manifest(review, note, b"every figure traced", agent=reviewer)
    art.publish(review, manifest, agent=reviewer)
    note_id = manifest["artifactId"]
    verdict = art.evidence(review, ["accurate"], [sha], agent=reviewer, type_="reviewer_assessment")
    reviewer.send(
        "work.submit", art.group,
        {"workItemId": urn(review), **art.fences(review), "artifactIds": [note_id], "evidence": [verdict]},
    )  # fmt: skip
    art.review(review)  # reviews the review WorkItem, then its subject again
    assert outcomes(item) == {"complete": "passed", "accurate": "passed", "_": "passed"}
    assert criterion_row(item, "accurate")["reviewerEvidence"] == [verdict]
    # Everything is retained for the final human Approval.
    assert {e["origin"] for e in summary_of(item)["retained"]} == {"submission", "review"}
    coordinator_evidence = art.evidence(item, ["complete", "accurate"], [], agent=art.coordinator, type_="human_review")
    art.coordinate(
        "work.accept_result", {"workItemId": urn(item), "evidence": [coordinator_evidence]},
        expected_revision=art.item(item).revision,
    )  # fmt: skip
    assert Evidence.objects.filter(workitem_id=item, origin="coordinator").exists()


def test_a_corrupted_blob_fails_the_criterion_citing_it_and_nothing_crashes_13_2(art: Artifacts) -> None:
    item, sha = submitted(art)
    path = Path(settings.MWP_ARTIFACT_ROOT) / blob_name(sha.removeprefix("sha256:"))
    path.write_bytes(REPORT.replace(b"3", b"4"))
    art.review(item)
    result = outcomes(item)
    assert result["complete"] == "failed"
    assert result["_"] == "failed"
    (artifact,) = summary_of(item)["artifacts"]
    assert (artifact["contentHash"], artifact["integrity"], artifact["manifestState"]) == (sha, "mismatch", "verified")
    complete = criterion_row(item, "complete")
    integrity = next(r for r in complete["results"] if r["stage"] == "integrity")
    assert integrity["result"] == "failed" and integrity["details"]["hash"] == "mismatch"
    # The schema check could not read bytes that failed integrity.
    schema = next(r for r in complete["results"] if r["stage"] == "schema")
    assert schema["result"] == "failed"
    # And the download refuses them too.
    error_of(art.download(sha, art.coordinator), 500, "INTERNAL_ERROR")


@pytest.mark.parametrize(
    ("content", "more", "failing"),
    [
        (b'{"title": "no rows"}', [], "json_schema"),
        (b"not json at all", [], "json_schema"),
        (REPORT + b" " * 2000, [], "size"),
        (REPORT, [{"kind": "checksum", "sha256": "sha256:" + "ab" * 32}], "checksum"),
        (REPORT, [{"kind": "media_type", "allowed": ["text/csv"]}], "media_type"),
    ],
)
def test_deterministic_checks_declared_in_the_contract_fail_their_criterion_13_2(
    art: Artifacts, reviewer: AgentKey, content: bytes, more: list[dict[str, Any]], failing: str
) -> None:
    item, _ = submitted(art, content, checked_contract(*more))
    art.review(item)
    complete = criterion_row(item, "complete")
    failed = {r["kind"] for r in complete["results"] if r["result"] == "failed"}
    assert failed == {failing}
    assert complete["outcome"] == "failed"


def test_passing_checksum_and_media_type_checks(art: Artifacts) -> None:
    more = [{"kind": "checksum", "sha256": "sha256:" + hashlib.sha256(REPORT).hexdigest()},
            {"kind": "media_type", "allowed": ["application/json"]}]  # fmt: skip
    item, _ = submitted(art, REPORT, checked_contract(*more))
    art.review(item)
    assert {r["kind"]: r["result"] for r in criterion_row(item, "complete")["results"]} == {
        "artifact_integrity": "passed", "json_schema": "passed", "size": "passed", "checksum": "passed",
        "media_type": "passed",
    }  # fmt: skip


def test_a_check_kind_added_in_code_runs_in_its_stage(art: Artifacts) -> None:
    def run(spec: dict[str, Any], subjects: list[checks.Subject]) -> checks.Outcome:
        lines = {s.sha256: (s.read(10_000) or b"").count(b"\n") for s in subjects}
        ok = all(n >= spec["min_lines"] for n in lines.values())
        return checks.Outcome("pass" if ok else "fail", {"lines": lines})

    declaration = {"type": "object", "required": ["min_lines"], "properties": {"min_lines": {"type": "integer"}}}
    checks.register_check(checks.CheckKind("line_count", "deterministic", declaration, run))
    try:
        item, _ = submitted(art, REPORT, checked_contract({"kind": "line_count", "min_lines": 2}))
        art.review(item)
        line_count = next(r for r in criterion_row(item, "complete")["results"] if r["kind"] == "line_count")
        assert line_count["result"] == "failed" and line_count["stage"] == "deterministic"
    finally:
        del checks.CHECKS["line_count"]


def test_content_without_a_signed_manifest_is_inconclusive(art: Artifacts, reviewer: AgentKey) -> None:
    item = art.active_item(checked_contract())
    _, artifact_id = art.produce(item, b"# notes", "text/markdown")
    sha = art.upload(REPORT, "application/json")  # stored, cited by the Evidence, never published
    art.submit_with(item, {"complete": [sha], "accurate": []}, [artifact_id])
    art.review(item)
    assert outcomes(item)["complete"] == "inconclusive"
    unpublished = next(a for a in summary_of(item)["artifacts"] if a["contentHash"] == sha)
    assert unpublished["manifestState"] == "absent"


def test_without_a_reviewer_member_the_criterion_stays_pending_and_says_why(art: Artifacts) -> None:
    item, _ = submitted(art)
    receipt = art.review(item)
    assert receipt is not None
    assert [e["kind"] for e in receipt["events"]] == [RECORDED, "ext.mwportal.review.reviewer_unavailable"]
    (unavailable,) = events_of(art.group, "ext.mwportal.review.reviewer_unavailable")
    assert unavailable["payload"] == {"workItemId": urn(item), "criterionIds": ["accurate"]}
    assert outcomes(item)["accurate"] == "pending"


def test_a_reviewer_who_joins_after_a_run_that_found_none_is_asked_by_the_next_run_13_2(
    art: Artifacts, mission: dict[str, str], owner: AgentKey
) -> None:
    """The first run finds no reviewer (the criterion stays pending); once Rita joins as the
    Group's reviewer, running the pipeline again (``mwp review``) offers her the review, and
    a third run with the same findings and reviewers records nothing new."""
    from tests.conftest import add_member, make_agent

    item, _ = submitted(art)
    art.review(item)
    assert ReviewRequest.objects.count() == 0
    rita = make_agent("acme", "Rita Reviewer", ["worker"])
    add_member(owner, mission["group"], rita, ["reviewer"])

    second = art.review(item)
    third = art.review(item)

    assert second is not None and second["replayed"] is False
    assert [e["kind"] for e in second["events"]][:2] == [RECORDED, "ext.mwportal.review.requested"]
    (request,) = ReviewRequest.objects.all()
    review = urn(request.review_workitem_id)
    (offered,) = [e for e in events_of(art.group, "work.offer.created") if e["payload"]["workItemId"] == review]
    assert offered["payload"]["candidateAgentIds"] == [rita.urn]
    assert third is not None and third["replayed"] is True
    assert GroupEvent.objects.filter(type=RECORDED).count() == 2


def test_running_the_pipeline_twice_with_the_same_findings_records_once(art: Artifacts, reviewer: AgentKey) -> None:
    item, _ = submitted(art)
    first = art.review(item)
    second = art.review(item)
    assert first is not None and second is not None
    assert second["replayed"] is True and second["events"] == first["events"]
    assert GroupEvent.objects.filter(type=RECORDED).count() == 1
    assert ReviewRequest.objects.count() == 1


def test_the_pipeline_s_command_is_the_control_plane_s_alone(art: Artifacts) -> None:
    """An Agent cannot record review results, nor forge the pipeline's Evidence."""
    item, sha = submitted(art)
    forged = art.evidence(item, ["complete"], [sha])
    payload = {"workItemId": urn(item), "submissionId": urn(uuid.uuid4()), "evidence": [forged], "requestReview": []}
    refused(ErrorCode.AUTH_FORBIDDEN, art.coordinator.send, "ext.mwportal.review.result_record", art.group, payload)


def test_a_worker_reporting_failure_fails_the_criterion(art: Artifacts, reviewer: AgentKey) -> None:
    item = art.active_item(checked_contract())
    sha, artifact_id = art.produce(item, REPORT, "application/json")
    art.submit_with(item, {"complete": [sha], "accurate": []}, [artifact_id], result="failed")
    art.review(item)
    assert outcomes(item)["complete"] == "failed"


def test_the_review_results_are_served_to_members_only(art: Artifacts, outsider: AgentKey, reviewer: AgentKey) -> None:
    item, sha = submitted(art)
    url = f"{API}/work-items/{urn(item)}/review"
    pending = art.get(url).json()
    assert pending["review"]["status"] == "pending"
    art.review(item)
    response = art.get(url)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["workItemId"] == urn(item) and body["review"]["status"] == "recorded"
    assert body["artifacts"][0]["downloadUrl"] == f"{API}/artifacts/{sha}"
    assert normative("artifact", body["artifacts"][0]["manifest"])["contentHash"] == sha
    complete = next(r for r in body["criteria"] if r["criterionId"] == "complete")
    assert complete["evidence"][0]["artifactHashes"] == [sha]
    for entry in body["retained"]:
        normative("evidence", entry["evidence"])
    unseen = error_of(art.get(url, outsider), 404, "GROUP_NOT_FOUND")
    absent = urn("00000000-0000-4000-8000-000000000000")
    error_of(art.get(f"{API}/work-items/{absent}/review"), 404, "GROUP_NOT_FOUND")
    # Issue 16 item 8: an outsider learns nothing a made-up ID would not tell.
    assert unseen["message"].replace(urn(item), "X") == f"no WorkItem {absent}".replace(absent, "X")
    assert unseen["details"] == {"workItemId": urn(item)}


def test_the_pipeline_runs_after_the_submission_commits(
    art: Artifacts, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.MWP_REVIEW_ON_SUBMIT = "inline"
    item = art.active_item(checked_contract())
    sha, artifact_id = art.produce(item, REPORT, "application/json")
    with django_capture_on_commit_callbacks(execute=True):
        art.submit_with(item, {"complete": [sha], "accurate": []}, [artifact_id])
    assert GroupEvent.objects.filter(type=RECORDED).count() == 1
    assert outcomes(item)["complete"] == "passed"


def test_an_unreachable_broker_does_not_fail_a_committed_submission(
    art: Artifacts, settings: Any, django_capture_on_commit_callbacks: Any, monkeypatch: Any, caplog: Any
) -> None:
    from mwportal.celery import app

    sent: list[Any] = []

    def down(name: str, args: list[Any]) -> None:
        sent.append((name, args))
        raise ConnectionError("broker down")

    settings.MWP_REVIEW_ON_SUBMIT = "celery"
    monkeypatch.setattr(app, "send_task", down)
    item = art.active_item(checked_contract())
    sha, artifact_id = art.produce(item, REPORT, "application/json")
    with django_capture_on_commit_callbacks(execute=True):
        art.submit_with(item, {"complete": [sha], "accurate": []}, [artifact_id])
    assert sent == [("artifacts.review_submission", [item])]
    assert WorkItem.objects.get(id=item).state == "submitted"
    assert "mwp review" in caplog.text


def test_mwp_review_runs_the_pipeline_and_prints_the_outcomes(art: Artifacts) -> None:
    import io

    from django.core.management import CommandError, call_command

    item, _ = submitted(art)
    out = io.StringIO()
    call_command("mwp", "review", urn(item), stdout=out)
    assert out.getvalue().splitlines() == ["complete: passed", "accurate: pending", "overall: pending"]
    with pytest.raises(CommandError, match="no submission"):
        call_command("mwp", "review", urn(art.authorize()))


def test_a_submission_cannot_cite_another_groups_artifact_13_3(art: Artifacts, other: dict[str, str]) -> None:
    item = art.active_item()
    foreign = art.upload(b"B's deliverable", agent=art.worker2, group=other["group"])
    _, mine = art.produce(item, b"mine")
    err = refused(
        Because(ErrorCode.INVALID_COMMAND, "not_found"),
        art.submit_with,
        item,
        {"complete": [foreign], "accurate": []},
        [mine],
    )
    assert err.details["artifacts"] == [foreign]


def test_the_celery_task_is_registered_and_records_once(art: Artifacts) -> None:
    from artifacts.tasks import review_submission
    from mwportal.celery import app

    app.loader.import_default_modules()
    assert "artifacts.review_submission" in app.tasks
    item, _ = submitted(art)
    assert review_submission(item) is True
    assert GroupEvent.objects.filter(type=RECORDED).count() == 1


def test_failure_evidence_is_kept_as_records_of_the_event_that_carried_it_13_2(art: Artifacts) -> None:
    item = art.active_item()
    evidence = art.evidence(item, ["complete", "accurate"], [], result="failed", type_="failure_report")
    art.worker.send(
        "work.fail", art.group,
        {"workItemId": urn(item), **art.fences(item), "reason": "source unreadable", "evidence": [evidence],
         "retryable": True},
    )  # an attempt fails (§10.2: failed)  # fmt: skip
    from workitems.tasks import retry_failed

    assert retry_failed() == 1  # the retry policy re-offers it (§11.4)
    ending = art.evidence(item, ["complete", "accurate"], [], result="failed", agent=art.coordinator,
                          type_="failure_report")  # fmt: skip
    art.coordinate(
        "work.fail", {"workItemId": urn(item), "reason": "given up", "evidence": [ending]},
        expected_revision=art.item(item).revision,
    )  # fmt: skip
    retried, failed = events_of(art.group, "work.failed")
    rows = list(Evidence.objects.filter(workitem_id=item, origin="failure").order_by("sequence"))
    assert [(r.sequence, r.as_record()) for r in rows] == [
        (retried["sequence"], retried["payload"]["evidence"][0]),
        (failed["sequence"], failed["payload"]["evidence"][0]),
    ]


# --- a check never leaves a review pending (issue 16 item 7) ---------------------


def schema_contract(schema: dict[str, Any], *more: dict[str, Any]) -> dict[str, Any]:
    return contract(
        acceptanceCriteria=[criterion("complete", "schema_validation", description="well formed")],
        constraints={"checks": {"complete": [{"kind": "json_schema", "schema": schema}, *more]}},
    )


def recorded_result(item: str, kind: str) -> dict[str, Any]:
    summary = summary_of(item)
    assert summary["review"]["status"] == "recorded", summary["review"]
    (complete,) = summary["criteria"]
    assert complete["outcome"] == "failed"
    return next(r for r in complete["results"] if r["kind"] == kind)


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def submitted_once(art: Artifacts, content: bytes, c: dict[str, Any]) -> tuple[str, str]:
    """Submitted with Evidence for its one criterion, ``complete``."""
    item = art.active_item(c)
    sha, artifact_id = art.produce(item, content, "application/json")
    art.submit_with(item, {"complete": [sha]}, [artifact_id])
    return item, sha


def raising(exc: BaseException) -> Any:
    def run() -> Any:
        raise exc

    return run


@pytest.mark.parametrize("depth", [100_000, checks.MAX_JSON_DEPTH + 1])
def test_it_fails_the_schema_stage_of_a_deeply_nested_json_artifact_with_a_reason_issue_16_item_7(
    art: Artifacts, depth: int
) -> None:
    """100,000 nested arrays crashed the parser (RecursionError) and left the review pending forever."""
    item, sha = submitted_once(art, nested(depth), schema_contract({"type": "array"}))
    assert art.review(item) is not None
    result = recorded_result(item, "json_schema")
    assert (result["stage"], result["result"]) == ("schema", "failed")
    problems = {sha.removeprefix("sha256:"): f"nested deeper than {checks.MAX_JSON_DEPTH} arrays and objects"}
    assert result["details"]["problems"] == problems


def test_a_json_artifact_at_the_depth_bound_is_validated(art: Artifacts) -> None:
    c = schema_contract({"type": "array", "items": {"$ref": "#"}})
    item, _ = submitted_once(art, nested(checks.MAX_JSON_DEPTH), c)
    art.review(item)
    complete = summary_of(item)["criteria"][0]
    assert next(r for r in complete["results"] if r["kind"] == "json_schema")["result"] == "passed"


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        (raising(RuntimeError("boom")), "RuntimeError: boom"),
        (raising(RecursionError("maximum recursion depth exceeded")), "RecursionError: maximum recursion"),
        (lambda: "maybe", "TypeError: returned 'maybe'"),
        (lambda: checks.Outcome("perhaps"), "TypeError: returned Outcome(result='perhaps'"),
        (lambda: checks.Outcome("pass", {"when": datetime.now(UTC)}), "the check could not run"),
    ],
    ids=["raises", "recursion", "not-an-outcome", "unknown-result", "details-not-json"],
)
def test_it_records_a_check_that_crashes_as_failed_with_its_reason(art: Artifacts, behaviour: Any, reason: str) -> None:
    def run(spec: dict[str, Any], subjects: list[checks.Subject]) -> checks.Outcome:
        return behaviour()  # type: ignore[no-any-return]

    checks.register_check(checks.CheckKind("fragile", "deterministic", {"type": "object"}, run))
    try:
        item, _ = submitted_once(art, REPORT, schema_contract({"type": "object"}, {"kind": "fragile"}))
        assert art.review(item) is not None
    finally:
        del checks.CHECKS["fragile"]
    result = recorded_result(item, "fragile")
    assert (result["stage"], result["result"]) == ("deterministic", "failed")
    assert reason in result["details"]["reason"]


def test_a_nul_or_lone_surrogate_quoted_by_a_check_is_recorded_on_every_backend(art: Artifacts) -> None:
    """A check's details quote the Artifact's content, which the uploader
    chose; PostgreSQL's jsonb refuses a NUL and canonical JSON a lone
    surrogate, so either would have left the review unrecorded."""

    def run(spec: dict[str, Any], subjects: list[checks.Subject]) -> checks.Outcome:
        return checks.Outcome("fail", {"first_line": (subjects[0].read(100) or b"").decode("utf-8", "surrogatepass")})

    content = '{"rows": "\x00 and \ud800"}'.encode("utf-8", "surrogatepass")
    checks.register_check(checks.CheckKind("quoting", "deterministic", {"type": "object"}, run))
    try:
        item, _ = submitted_once(art, content, schema_contract({"type": "object"}, {"kind": "quoting"}))
        assert art.review(item) is not None
    finally:
        del checks.CHECKS["quoting"]
    assert recorded_result(item, "quoting")["details"]["first_line"] == '{"rows": "\\u0000 and \\ud800"}'


def test_a_submission_names_only_artifacts_published_in_its_group_13_1_13_3(
    art: Artifacts, other: dict[str, str]
) -> None:
    """``artifactIds`` name signed manifests (§13.1): an ID nobody published, or one
    published in another Group, is not an Artifact of this submission."""
    item = art.active_item()
    sha, mine = art.produce(item, b"ours")
    elsewhere = art.authorize_in(other, art.worker2)
    _, theirs = art.produce_in(other, elsewhere, b"theirs", art.worker2)
    for cited in ([urn(uuid.uuid4())], [mine, theirs]):
        err = refused(
            Because(ErrorCode.INVALID_COMMAND, "not_found"),
            art.submit_with,
            item,
            {"complete": [sha], "accurate": []},
            cited,
        )
        assert err.details["artifactIds"] == [c for c in cited if c != mine]
    art.submit_with(item, {"complete": [sha], "accurate": []}, [mine])
    assert WorkItem.objects.get(id=item).state == "submitted"


def test_the_pipeline_s_evidence_must_be_the_control_plane_s_own_signed_documents_6_4_13_2(art: Artifacts) -> None:
    """Even from the control plane, a result naming another producer, or whose
    signature is not the control plane's key, is refused."""
    from artifacts.review import REVIEW_RECORD, evaluate, evidence_documents, submission_id
    from missions.authority import accept
    from missions.commands import group_service_command
    from mwportal.protocol.verification import sign_document
    from workitems.models import Submission

    item, _ = submitted(art)
    row = WorkItem.objects.get(id=item)
    submission = Submission.objects.get(workitem=row)
    documents = evidence_documents(row, submission, evaluate(row, submission)[0])

    def record(evidence: list[dict[str, Any]]) -> Any:
        payload = {"workItemId": urn(item), "submissionId": submission_id(submission), "evidence": evidence,
                   "requestReview": []}  # fmt: skip
        return accept(group_service_command(REVIEW_RECORD, art.group, payload))

    by_worker = art.evidence(item, ["complete"], [])
    refused(ErrorCode.INVALID_COMMAND, record, [*documents, by_worker])
    stranger = Key.generate()
    unsigned = {k: v for k, v in documents[0].items() if k != "signature"}
    forged = sign_document(unsigned, key_id=documents[0]["signature"]["keyId"], seed=stranger.seed, profile="evidence")
    assert refused(ErrorCode.AUTH_INVALID_SIGNATURE, record, [forged, *documents[1:]]).details == {
        "field": "/payload/evidence/0"
    }
    assert record(documents)["events"][0]["kind"] == RECORDED
