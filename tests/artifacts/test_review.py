"""Evidence and the review pipeline (spec 13.2)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from artifacts.models import Evidence, ReviewRequest
from artifacts.review import review_summary
from artifacts.store import blob_name
from missions.models import GroupEvent
from mwportal.protocol import ErrorCode, format_time
from tests.api.support import error_of
from tests.artifacts.conftest import Artifacts, add_member
from tests.conftest import AgentKey, Because, group_revision, make_agent, refused
from tests.workitems.flow import contract
from workitems import checks
from workitems.models import WorkItem

REPORT = json.dumps({"rows": 3, "title": "survey"}).encode()


def checked_contract(**extra_checks: Any) -> dict[str, Any]:
    """``complete`` has a JSON Schema and a size check; ``accurate`` needs a reviewer."""
    complete_checks = [
        {"kind": "json_schema", "schema": {"type": "object", "required": ["rows"]}},
        {"kind": "size", "max_bytes": 1000},
        *extra_checks.get("more", []),
    ]
    return contract(
        acceptance_criteria=[
            {"id": "complete", "description": "covers every response", "evidence_methods": ["test", "schema"],
             "checks": complete_checks},
            {"id": "accurate", "description": "no invented facts", "evidence_methods": ["reviewer"]},
        ]
    )  # fmt: skip


def submitted(art: Artifacts, content: bytes = REPORT, c: dict[str, Any] | None = None) -> tuple[str, str]:
    item = art.active_item(c or checked_contract())
    sha = art.produce(item, content, "application/json")
    art.submit_with(item, {"complete": [sha], "accurate": []}, [sha])
    return item, sha


def outcomes(item: str) -> dict[str, Any]:
    summary = review_summary(WorkItem.objects.get(id=item))
    return {row["id"]: row["outcome"] for row in summary["criteria"]} | {"_": summary["review"]["outcome"]}


def test_submitting_with_a_criterion_left_without_evidence_is_evidence_required_13_2(art: Artifacts) -> None:
    item = art.active_item(checked_contract())
    sha = art.produce(item, REPORT, "application/json")
    err = refused(
        Because(ErrorCode.INVALID_STATE_TRANSITION, "evidence_required"),
        art.submit_with,
        item,
        {"complete": [sha]},
        [sha],
    )
    assert err.details["criteria"] == ["accurate"]
    assert WorkItem.objects.get(id=item).state == "active"


def test_evidence_naming_an_unknown_criterion_is_malformed(art: Artifacts) -> None:
    item = art.active_item()
    err = refused(
        ErrorCode.SCHEMA_VALIDATION_FAILED, art.submit_with, item, {"complete": [], "accurate": [], "vibes": []}, []
    )
    assert err.details["field"] == "body.evidence.2.criteria"


def test_the_pipeline_runs_in_order_and_a_reviewer_completes_it_13_2(art: Artifacts, reviewer: AgentKey) -> None:
    item, sha = submitted(art)
    receipt = art.review(item)
    assert receipt is not None
    types = [e["type"] for e in receipt["events"]]
    assert types == ["review.recorded", "review.requested", "work.authorized", "work.offered"]
    recorded = GroupEvent.objects.get(event_id=receipt["events"][0]["event_id"])
    assert recorded.actor == "system"
    stages = [c["stage"] for c in recorded.body["checks"]]
    assert stages == ["integrity", "schema", "deterministic", "combined", "combined"]  # spec 13.2 order
    assert outcomes(item) == {"complete": "pass", "accurate": "pending", "_": "pending"}

    # The qualitative criterion went to a reviewer member as a review WorkItem.
    request = ReviewRequest.objects.get(subject_id=item)
    review = str(request.review_workitem_id)
    assert request.criteria == ["accurate"]
    assert WorkItem.objects.get(id=review).offers.get().agent_id.hex == reviewer.id.replace("-", "")
    art.accept(review, reviewer)
    art.start(review, reviewer)
    evidence = [{
        "subject": item, "criteria": ["accurate"], "method": "reviewer", "result": "pass",
        "producer": reviewer.id, "timestamp": format_time(datetime.now(UTC)), "artifacts": [sha],
        "summary": "every figure traced to a response",
    }]  # fmt: skip
    art.lease_command("work.submit", review, {"artifacts": [], "evidence": evidence}, agent=reviewer)
    art.review(review)  # reviews the review WorkItem, then its subject again
    assert outcomes(item) == {"complete": "pass", "accurate": "pass", "_": "pass"}
    summary = review_summary(WorkItem.objects.get(id=item))
    accurate = next(r for r in summary["criteria"] if r["id"] == "accurate")
    assert accurate["reviewer_evidence"] == evidence
    # Everything is retained for the final human Approval.
    origins = {e["origin"] for e in summary["retained"]}
    assert origins == {"submission", "review"}
    art.accept_result(item)
    art.accept_result(review)  # the review WorkItem is Coordinator-reviewed like any other
    art.owner.send(
        "mission.approve", art.group, {"note": "final"},
        target={"kind": "group", "id": art.group, "revision": group_revision(art.group)},
    )  # fmt: skip
    assert Evidence.objects.filter(workitem_id=item, origin="coordinator").exists()


def test_a_corrupted_blob_fails_the_criterion_citing_it_and_nothing_crashes_13_2(art: Artifacts) -> None:
    item, sha = submitted(art)
    path = Path(settings.MWP_ARTIFACT_ROOT) / blob_name(sha)
    path.write_bytes(REPORT.replace(b"3", b"4"))
    art.review(item)
    result = outcomes(item)
    assert result["complete"] == "fail"
    assert result["_"] == "fail"
    summary = review_summary(WorkItem.objects.get(id=item))
    (artifact,) = summary["artifacts"]
    assert (artifact["sha256"], artifact["integrity"], artifact["manifest_state"]) == (sha, "mismatch", "verified")
    complete = next(r for r in summary["criteria"] if r["id"] == "complete")
    integrity = next(r for r in complete["results"] if r["stage"] == "integrity")
    assert integrity["result"] == "fail" and integrity["details"]["hash"] == "mismatch"
    # The schema check could not read bytes that failed integrity.
    schema = next(r for r in complete["results"] if r["stage"] == "schema")
    assert schema["result"] == "fail"
    # And the download refuses them too.
    error_of(art.download(sha, art.coordinator), 500, "INTERNAL_ERROR")


@pytest.mark.parametrize(
    ("content", "more", "failing"),
    [
        (b'{"title": "no rows"}', [], "json_schema"),
        (b"not json at all", [], "json_schema"),
        (REPORT + b" " * 2000, [], "size"),
        (REPORT, [{"kind": "checksum", "sha256": "ab" * 32}], "checksum"),
        (REPORT, [{"kind": "media_type", "allowed": ["text/csv"]}], "media_type"),
    ],
)
def test_deterministic_checks_declared_in_the_contract_fail_their_criterion_13_2(
    art: Artifacts, reviewer: AgentKey, content: bytes, more: list[dict[str, Any]], failing: str
) -> None:
    item, _ = submitted(art, content, checked_contract(more=more))
    art.review(item)
    summary = review_summary(WorkItem.objects.get(id=item))
    complete = next(r for r in summary["criteria"] if r["id"] == "complete")
    failed = {r["kind"] for r in complete["results"] if r["result"] == "fail"}
    assert failed == {failing}
    assert complete["outcome"] == "fail"


def test_passing_checksum_and_media_type_checks(art: Artifacts) -> None:
    more = [{"kind": "checksum", "sha256": hashlib.sha256(REPORT).hexdigest()},
            {"kind": "media_type", "allowed": ["application/json"]}]  # fmt: skip
    item, _ = submitted(art, REPORT, checked_contract(more=more))
    art.review(item)
    complete = next(r for r in review_summary(WorkItem.objects.get(id=item))["criteria"] if r["id"] == "complete")
    assert {r["kind"]: r["result"] for r in complete["results"]} == {
        "artifact_integrity": "pass", "json_schema": "pass", "size": "pass", "checksum": "pass", "media_type": "pass",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("check", "field"),
    [
        ({"kind": "astrology"}, "contract.acceptance_criteria.0.checks.0.kind"),
        ({"kind": "size"}, "contract.acceptance_criteria.0.checks.0"),
        ({"kind": "json_schema", "schema": {"type": 12}}, "contract.acceptance_criteria.0.checks.0.schema"),
        ({"kind": "checksum", "sha256": "short"}, "contract.acceptance_criteria.0.checks.0.sha256"),
    ],
)
def test_a_contract_declaring_a_bad_check_is_contract_invalid(
    art: Artifacts, check: dict[str, Any], field: str
) -> None:
    c = contract(
        acceptance_criteria=[{"id": "complete", "description": "d", "evidence_methods": ["test"], "checks": [check]}]
    )
    err = refused(Because(ErrorCode.INVALID_COMMAND, "contract_invalid"), art.authorize, c)
    assert err.details["field"] == field


def test_a_check_kind_added_in_code_runs_in_its_stage(art: Artifacts) -> None:
    def run(spec: dict[str, Any], subjects: list[checks.Subject]) -> checks.Outcome:
        lines = {s.sha256: (s.read(10_000) or b"").count(b"\n") for s in subjects}
        ok = all(n >= spec["min_lines"] for n in lines.values())
        return checks.Outcome("pass" if ok else "fail", {"lines": lines})

    declaration = {"type": "object", "required": ["min_lines"], "properties": {"min_lines": {"type": "integer"}}}
    checks.register_check(checks.CheckKind("line_count", "deterministic", declaration, run))
    try:
        item, _ = submitted(art, REPORT, checked_contract(more=[{"kind": "line_count", "min_lines": 2}]))
        art.review(item)
        complete = next(r for r in review_summary(WorkItem.objects.get(id=item))["criteria"] if r["id"] == "complete")
        line_count = next(r for r in complete["results"] if r["kind"] == "line_count")
        assert line_count["result"] == "fail" and line_count["stage"] == "deterministic"
    finally:
        del checks.CHECKS["line_count"]


def test_an_artifact_without_a_signed_manifest_is_inconclusive(art: Artifacts, reviewer: AgentKey) -> None:
    item = art.active_item(checked_contract())
    sha = art.upload(REPORT, "application/json")  # uploaded, never published
    art.submit_with(item, {"complete": [sha], "accurate": []}, [sha])
    art.review(item)
    assert outcomes(item)["complete"] == "inconclusive"


def test_without_a_reviewer_member_the_criterion_stays_pending_and_says_why(art: Artifacts) -> None:
    item, _ = submitted(art)
    receipt = art.review(item)
    assert receipt is not None
    assert [e["type"] for e in receipt["events"]] == ["review.recorded", "review.reviewer_unavailable"]
    assert outcomes(item)["accurate"] == "pending"


def test_running_the_pipeline_twice_with_the_same_findings_records_once(art: Artifacts, reviewer: AgentKey) -> None:
    item, _ = submitted(art)
    first = art.review(item)
    second = art.review(item)
    assert first is not None and second is not None
    assert second["replayed"] is True
    assert GroupEvent.objects.filter(type="review.recorded").count() == 1
    assert ReviewRequest.objects.count() == 1


def test_a_worker_reporting_failure_fails_the_criterion(art: Artifacts, reviewer: AgentKey) -> None:
    item = art.active_item(checked_contract())
    sha = art.produce(item, REPORT, "application/json")
    art.submit_with(item, {"complete": [sha], "accurate": []}, [sha], result="fail")
    art.review(item)
    assert outcomes(item)["complete"] == "fail"


def test_the_review_summary_is_served_to_members_only(art: Artifacts, outsider: AgentKey, reviewer: AgentKey) -> None:
    item, sha = submitted(art)
    pending = art.get(f"/api/v1/workitems/{item}/review").json()
    assert pending["review"]["status"] == "pending"
    art.review(item)
    response = art.get(f"/api/v1/workitems/{item}/review")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["review"]["status"] == "recorded"
    assert body["artifacts"][0]["download_url"] == f"/api/v1/artifacts/{sha}"
    assert body["artifacts"][0]["manifest"]["content_hash"] == sha
    complete = next(r for r in body["criteria"] if r["id"] == "complete")
    assert complete["evidence"][0]["artifacts"] == [sha]
    unseen = error_of(art.get(f"/api/v1/workitems/{item}/review", outsider), 404, "GROUP_NOT_FOUND")
    error_of(art.get("/api/v1/workitems/00000000-0000-4000-8000-000000000000/review"), 404, "GROUP_NOT_FOUND")
    # Issue 16 item 8: an outsider learns nothing a made-up ID would not tell.
    absent = "00000000-0000-4000-8000-000000000000"
    assert unseen["message"].replace(str(item), "X") == f"no WorkItem {absent}".replace(absent, "X")
    assert unseen["details"] == {"workitem": str(item)}


def test_a_reviewer_only_member_cannot_take_ordinary_offers(art: Artifacts, owner: AgentKey) -> None:
    """The reviewer role executes only what it is offered: work.offer goes to workers."""
    rita = make_agent("acme", "Rita", ["worker"])
    add_member(owner, art.group, rita, ["reviewer"])
    item = art.authorize()
    refused(ErrorCode.SCHEMA_VALIDATION_FAILED, art.offer, item, [rita])


def test_the_pipeline_runs_after_the_submission_commits(
    art: Artifacts, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.MWP_REVIEW_ON_SUBMIT = "inline"
    item = art.active_item(checked_contract())
    sha = art.produce(item, REPORT, "application/json")
    with django_capture_on_commit_callbacks(execute=True):
        art.submit_with(item, {"complete": [sha], "accurate": []}, [sha])
    assert GroupEvent.objects.filter(type="review.recorded").count() == 1
    assert outcomes(item)["complete"] == "pass"


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
    sha = art.produce(item, REPORT, "application/json")
    with django_capture_on_commit_callbacks(execute=True):
        art.submit_with(item, {"complete": [sha], "accurate": []}, [sha])
    assert sent == [("artifacts.review_submission", [item])]
    assert WorkItem.objects.get(id=item).state == "submitted"
    assert "mwp review" in caplog.text


def test_mwp_review_runs_the_pipeline_and_prints_the_outcomes(art: Artifacts) -> None:
    import io

    from django.core.management import CommandError, call_command

    item, _ = submitted(art)
    out = io.StringIO()
    call_command("mwp", "review", item, stdout=out)
    assert out.getvalue().splitlines() == ["complete: pass", "accurate: pending", "overall: pending"]
    with pytest.raises(CommandError, match="no submission"):
        call_command("mwp", "review", art.authorize())


def test_a_submission_cannot_cite_another_groups_artifact_13_3(art: Artifacts, other: dict[str, str]) -> None:
    item = art.active_item()
    foreign = art.upload(b"B's deliverable", agent=art.worker2, group=other["group"])
    err = refused(
        Because(ErrorCode.INVALID_COMMAND, "not_found"),
        art.submit_with,
        item,
        {"complete": [foreign], "accurate": []},
        [foreign],
    )
    assert err.details["artifacts"] == [foreign]


def test_the_celery_task_is_registered_and_records_once(art: Artifacts) -> None:
    from artifacts.tasks import review_submission
    from mwportal.celery import app

    app.loader.import_default_modules()
    assert "artifacts.review_submission" in app.tasks
    item, _ = submitted(art)
    assert review_submission(item) is True
    assert GroupEvent.objects.filter(type="review.recorded").count() == 1


def test_failure_evidence_is_kept_as_records_of_the_event_that_carried_it_13_2(art: Artifacts) -> None:
    item = art.active_item()
    evidence = art.evidence(item, art.worker)
    art.lease_command("work.fail", item, {"evidence": evidence, "retryable": True})  # an attempt fails
    retried = GroupEvent.objects.get(type="work.attempt_failed")
    art.fail(item)  # the Coordinator ends it
    failed = GroupEvent.objects.get(type="work.failed")
    rows = list(Evidence.objects.filter(workitem_id=item, origin="failure").order_by("sequence"))
    assert [(r.sequence, r.as_record()) for r in rows] == [
        (retried.sequence, retried.body["evidence"][0]),
        (failed.sequence, failed.body["evidence"][0]),
    ]


# --- a check never leaves a review pending (issue 16 item 7) ---------------------


def schema_contract(schema: dict[str, Any], *more: dict[str, Any]) -> dict[str, Any]:
    return contract(
        acceptance_criteria=[
            {"id": "complete", "description": "well formed", "evidence_methods": ["schema"],
             "checks": [{"kind": "json_schema", "schema": schema}, *more]},
        ]
    )  # fmt: skip


def recorded_result(item: str, kind: str) -> dict[str, Any]:
    summary = review_summary(WorkItem.objects.get(id=item))
    assert summary["review"]["status"] == "recorded", summary["review"]
    (complete,) = summary["criteria"]
    assert complete["outcome"] == "fail"
    return next(r for r in complete["results"] if r["kind"] == kind)


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def submitted_once(art: Artifacts, content: bytes, c: dict[str, Any]) -> tuple[str, str]:
    """Submitted with Evidence for its one criterion, ``complete``."""
    item = art.active_item(c)
    sha = art.produce(item, content, "application/json")
    art.submit_with(item, {"complete": [sha]}, [sha])
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
    assert (result["stage"], result["result"]) == ("schema", "fail")
    assert result["details"]["problems"] == {sha: f"nested deeper than {checks.MAX_JSON_DEPTH} arrays and objects"}


def test_a_json_artifact_at_the_depth_bound_is_validated(art: Artifacts) -> None:
    c = schema_contract({"type": "array", "items": {"$ref": "#"}})
    item, _ = submitted_once(art, nested(checks.MAX_JSON_DEPTH), c)
    art.review(item)
    complete = review_summary(WorkItem.objects.get(id=item))["criteria"][0]
    assert next(r for r in complete["results"] if r["kind"] == "json_schema")["result"] == "pass"


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
    assert (result["stage"], result["result"]) == ("deterministic", "fail")
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
