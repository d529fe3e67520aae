"""The approval gate (§12), dependencies (§10.4), budgets (§12), retries (§11.4) and
Evidence (§13.2) of WorkItems."""

from __future__ import annotations

import uuid
from datetime import timedelta

import time_machine
from django.utils import timezone

from missions.authority import accept
from missions.commands import group_service_command
from missions.models import Approval, GroupEvent, Mission
from mwportal.protocol import ErrorCode, schemas
from mwportal.protocol.ids import bare, urn
from tests.conftest import Because, refused
from tests.workitems.flow import BASIS, PROGRESS, Flow, checkpoint, contract
from workitems import tasks
from workitems.models import WorkItem

USAGE = "ext.missionweaveprotocol.core.resource_usage_record"
USAGE_RECORDED = "ext.missionweaveprotocol.core.resource_usage_recorded"
DEPENDENCY_ADD = "ext.missionweaveprotocol.core.work_dependency_add"

# --- the approval gate (§12) ----------------------------------------------------


def test_a_contract_asking_for_approval_cannot_start_before_it_spec_12(flow: Flow) -> None:
    item = flow.authorize(contract(sideEffectRisk="external", executionApproval="human_required"))
    flow.offer(item)
    flow.accept(item)
    refused(ErrorCode.APPROVAL_REQUIRED, flow.start, item)
    payload = {"approvalId": urn(uuid.uuid4()), "ownershipEpoch": 1, "operations": ["email.send"]}
    refused(ErrorCode.AUTH_FORBIDDEN, flow.send, flow.coordinator, "approval.grant_execution", item, payload)
    receipt = flow.approve(item)
    assert Approval.objects.get(subject_id=item).kind == "execution"
    granted = GroupEvent.objects.get(event_id=bare(receipt["events"][0]["eventId"], "eventId")).body
    schemas.validate("approval", granted["approval"])
    assert (granted["approval"]["kind"], granted["approval"]["workItemId"]) == ("work_execution", urn(item))
    assert granted["ownershipEpoch"] == 1 and granted["operations"] == ["email.send"]
    flow.start(item)


def test_an_approval_names_the_current_ownership_epoch_spec_12(flow: Flow) -> None:
    item = flow.authorize(contract(executionApproval="policy_required"))
    flow.offer(item)
    flow.accept(item)
    payload = {"approvalId": urn(uuid.uuid4()), "ownershipEpoch": 2, "operations": ["email.send"]}
    refused(ErrorCode.WORK_STALE_OWNERSHIP, flow.send, flow.owner, "approval.grant_execution", item, payload)


# --- dependencies (§10.4) -----------------------------------------------------------


def test_a_dependency_gates_start_until_its_policy_holds_spec_10_4(flow: Flow) -> None:
    first = flow.authorize()
    second = flow.authorize(contract(dependencyWorkItemIds=[urn(first)]))
    flow.offer(second)
    flow.accept(second)
    err = refused(Because(ErrorCode.INVALID_STATE_TRANSITION, "dependency_unmet"), flow.start, second)
    assert err.details["workItemIds"] == [urn(first)]
    flow.offer(first, agents=[flow.worker2])
    flow.accept(first, flow.worker2)
    flow.start(first, flow.worker2)
    flow.submit(first, agent=flow.worker2)
    refused(Because(ErrorCode.INVALID_STATE_TRANSITION, "dependency_unmet"), flow.start, second)
    flow.accept_result(first)
    flow.start(second)


def test_a_submitted_policy_is_met_by_a_submission_spec_10_4(flow: Flow) -> None:
    first = flow.drive_to("submitted")
    second = flow.authorize(contract(dependencyWorkItemIds=[urn(first)], constraints={"dependencyPolicy": "submitted"}))
    flow.offer(second)
    flow.accept(second)
    flow.start(second)


def test_dependency_cycles_are_refused_spec_10_4(flow: Flow) -> None:
    a = flow.authorize()
    b = flow.authorize(contract(dependencyWorkItemIds=[urn(a)]))
    cycle = Because(ErrorCode.INVALID_COMMAND, "dependency_cycle")
    # Revising a's contract to depend on b closes a cycle; so does adding the edge.
    refused(cycle, flow.offer, a, contract=contract(dependencyWorkItemIds=[urn(b)], contractVersion=2))
    refused(cycle, flow.send, flow.coordinator, DEPENDENCY_ADD, a, {"dependencyId": urn(b)})
    c = str(uuid.uuid4())
    refused(cycle, flow.authorize, contract(dependencyWorkItemIds=[urn(c)]), c)


def test_adding_a_dependency_revises_the_contract_and_needs_renewed_acceptance_spec_10_4_spec_10_1(
    flow: Flow,
) -> None:
    first = flow.authorize()
    second = flow.drive_to("queued")
    receipt = flow.send(flow.coordinator, DEPENDENCY_ADD, second, {"dependencyId": urn(first)})
    revised = GroupEvent.objects.get(event_id=bare(receipt["events"][0]["eventId"], "eventId")).body
    assert (revised["revision"], revised["dependencyId"]) == (2, urn(first))
    assert revised["contract"]["dependencyWorkItemIds"] == [urn(first)]
    assert revised["contract"]["contractVersion"] == 2
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.start, second)  # the owner accepted version 1


def test_an_unknown_dependency_is_contract_invalid_spec_10_4(flow: Flow) -> None:
    err = refused(
        Because(ErrorCode.INVALID_COMMAND, "contract_invalid"),
        flow.authorize,
        contract(dependencyWorkItemIds=[urn(uuid.uuid4())]),
    )
    assert err.details["field"] == "/payload/contract/dependencyWorkItemIds/0"


# --- budgets (§12) ---------------------------------------------------------------


def test_usage_is_charged_to_the_workitem_and_the_mission_spec_12(flow: Flow) -> None:
    item = flow.drive_to("active")
    delta = {"modelTokens": 1000, "toolCalls": 3}
    receipt = flow.lease_command("work.checkpoint", item, {"checkpoint": checkpoint(), "usageDelta": delta})
    assert [e["kind"] for e in receipt["events"]] == [USAGE_RECORDED, "work.checkpointed"]
    recorded = GroupEvent.objects.get(event_id=bare(receipt["events"][0]["eventId"], "eventId")).body
    assert recorded["usageDelta"] == delta and recorded["cumulativeUsage"] == delta
    assert recorded["remainingBudget"]["toolCalls"] == 47
    assert flow.item(item).usage == delta
    assert Mission.objects.get(id=flow.mission).usage == delta


def test_a_usage_record_charges_under_the_current_lease_spec_12(flow: Flow) -> None:
    item = flow.drive_to("active")
    receipt = flow.lease_command(USAGE, item, {"usageDelta": {"computeSeconds": 30}})
    assert [e["kind"] for e in receipt["events"]] == [USAGE_RECORDED]
    assert flow.item(item).usage == {"computeSeconds": 30}
    zero = {"usageDelta": {"computeSeconds": 0}}
    assert (
        refused(ErrorCode.INVALID_COMMAND, flow.lease_command, USAGE, item, zero).details["field"]
        == "/payload/usageDelta"
    )


def test_the_control_plane_meters_usage_under_the_current_lease_spec_12(flow: Flow) -> None:
    item = flow.drive_to("active")
    payload = {"workItemId": urn(item), "ownershipEpoch": 1, "executionLeaseId": urn(flow.leases[item]),
               "usageDelta": {"toolCalls": 2}}  # fmt: skip
    accept(group_service_command(USAGE, flow.group, payload, work_item_id=item))
    assert flow.item(item).usage == {"toolCalls": 2}
    stale = {**payload, "executionLeaseId": urn(uuid.uuid4())}
    refused(
        Because(ErrorCode.WORK_LEASE_EXPIRED, "stale_lease"), accept, group_service_command(USAGE, flow.group, stale)
    )


def test_a_budget_overflow_rejects_the_charge_and_the_progress_together_spec_12(flow: Flow) -> None:
    item = flow.drive_to("active")
    before = flow.item(item)
    payload = {"checkpoint": checkpoint(), "progress": PROGRESS, "usageDelta": {"toolCalls": 51}}
    err = refused(ErrorCode.BUDGET_EXCEEDED, flow.lease_command, "work.checkpoint", item, payload)
    assert err.details["dimension"] == "toolCalls"
    after = flow.item(item)
    assert (after.state, after.usage, after.checkpoint_count) == (before.state, before.usage, 0)
    assert Mission.objects.get(id=flow.mission).usage == {}


def test_the_mission_budget_caps_all_its_workitems_spec_12(flow: Flow) -> None:
    Mission.objects.filter(id=flow.mission).update(budgets={"currency": "EUR", "financialLimit": 10})
    ten = contract(budget={"currency": "EUR", "financialLimit": 10})
    item, other = flow.authorize(ten), flow.authorize(ten)
    for each in (item, other):
        flow.offer(each)
        flow.accept(each)
        flow.start(each)
    eight = {"checkpoint": checkpoint(), "usageDelta": {"financialMicrounits": 8_000_000}}
    flow.lease_command("work.checkpoint", item, eight)
    three = {"checkpoint": checkpoint(), "usageDelta": {"financialMicrounits": 3_000_000}}
    err = refused(ErrorCode.BUDGET_EXCEEDED, flow.lease_command, "work.checkpoint", other, three)
    assert err.details["dimension"] == "financialMicrounits"


# --- retries (§11.4) --------------------------------------------------------------


def _fail_attempt(flow: Flow, item: str) -> dict[str, object]:
    """The lease holder's retryable ``work.fail`` (§11.3: it cites its lease)."""
    evidence = flow.evidence(item, flow.worker, result="failed")
    payload = {"reason": "the source timed out", "retryable": True, "evidence": evidence}
    return flow.lease_command("work.fail", item, payload)


def _retry_offer(flow: Flow, item: str, agents: list[str] | None = None) -> dict[str, object]:
    """A ``work.offer`` by the Organization's control plane (its retry policy, §11.4)."""
    payload = {
        "workItemId": urn(item),
        "candidateAgentIds": agents or [flow.worker.urn],
        "selectionBasis": flow.item(item).selection_basis or BASIS,
        "offerExpiresInSeconds": 600,
    }
    command = group_service_command("work.offer", flow.group, payload, expected_revision=flow.revision(item))
    return accept(command)


def test_a_retryable_failure_fails_and_the_retry_policy_reoffers_after_the_backoff_spec_11_4(flow: Flow) -> None:
    """§10.2 has no failed-attempt row: the attempt is ``work.fail`` (active -> failed), the
    next one the retry policy's ``work.offer`` (failed -> offered) after the backoff."""
    retry = {"maxAttempts": 2, "backoff": "fixed", "maxDelay": "PT30S", "retryableFailures": []}
    item = flow.authorize(contract(retryPolicy=retry))
    flow.offer(item)
    flow.accept(item)
    flow.start(item)
    receipt = _fail_attempt(flow, item)
    assert [e["kind"] for e in receipt["events"]] == ["work.failed"]  # type: ignore[index]
    it = flow.item(item)
    assert (it.state, it.attempt, it.owner_id, it.needs_new_attempt) == ("failed", 1, None, True)
    assert tasks.retry_failed() == 0  # still backing off
    refused(ErrorCode.INVALID_STATE_TRANSITION, _retry_offer, flow, item)
    with time_machine.travel(timezone.now() + timedelta(seconds=31)):
        assert (tasks.retry_failed(), tasks.retry_failed()) == (1, 0)  # once per failed attempt
        offered = GroupEvent.objects.filter(aggregate_id=item, type="work.offer.created").order_by("-sequence")[0]
        assert offered.as_wire()["actor"]["type"] == "service"
        assert offered.body["candidateAgentIds"] == [flow.worker.urn]
        assert "retryPolicy" in offered.body["selectionBasis"]["policyRulesApplied"]
        assert flow.item(item).state == "offered"
        flow.accept(item)
        flow.start(item)
        assert flow.item(item).attempt == 2
        _fail_attempt(flow, item)
    it = flow.item(item)
    assert (it.state, it.retry_not_before) == ("failed", None)  # the policy is spent: the failure stands
    failed = GroupEvent.objects.filter(aggregate_id=item, type="work.failed").order_by("-sequence")[0]
    assert failed.body["reason"].startswith("retries exhausted") and failed.body["attempt"] == 2
    with time_machine.travel(timezone.now() + timedelta(hours=1)):
        assert tasks.retry_failed() == 0
        refused(ErrorCode.AUTH_FORBIDDEN, _retry_offer, flow, item)
    flow.offer(item)  # the Coordinator keeps control of a failed WorkItem (§10.2)
    assert flow.item(item).state == "offered"


def test_the_control_plane_offers_only_what_its_retry_policy_retries_spec_11_4(flow: Flow) -> None:
    item = flow.drive_to("active")
    flow.fail(item)  # the Coordinator's failure: no retry
    assert tasks.retry_failed() == 0
    refused(ErrorCode.AUTH_FORBIDDEN, _retry_offer, flow, item)
    other = flow.drive_to("active")
    _fail_attempt(flow, other)  # the flow's contract: no backoff, three attempts
    refused(ErrorCode.AUTH_FORBIDDEN, _retry_offer, flow, other, [flow.worker2.urn])  # to another Worker
    _retry_offer(flow, other)
    assert flow.item(other).state == "offered"
    refused(ErrorCode.AUTH_FORBIDDEN, _retry_offer, flow, flow.drive_to("open"))


def test_a_failure_needs_evidence_spec_10_2(flow: Flow) -> None:
    item = flow.drive_to("open")
    payload = {"reason": "no idea"}
    refused(Because(ErrorCode.INVALID_STATE_TRANSITION, "evidence_required"), flow.send, flow.coordinator, "work.fail",
            item, payload, expected_revision=flow.revision(item))  # fmt: skip


def test_a_coordinators_failure_is_compare_and_set_spec_15_3(flow: Flow) -> None:
    item = flow.drive_to("open")
    payload = {"reason": "no idea", "evidence": flow.evidence(item, flow.coordinator, result="failed")}
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, flow.send, flow.coordinator, "work.fail", item, payload)
    assert err.details["field"] == "expectedRevision"


def test_the_attempt_key_is_deterministic_spec_11_4() -> None:
    from mwportal.protocol import attempt_key

    args = ("m", "w", 3, "send-email")
    assert attempt_key(*args) == attempt_key(*args)
    assert attempt_key("m", "w", 4, "send-email") != attempt_key(*args)
    assert len(attempt_key(*args)) == 64


# --- submission and Evidence (§13.2) -------------------------------------------------


def test_a_submission_needs_evidence_for_every_criterion_spec_13_2(flow: Flow) -> None:
    item = flow.drive_to("active")
    artifact = flow.publish(item, flow.blob())
    payload = {"artifactIds": [artifact], "evidence": flow.evidence(item, flow.worker, criteria=["complete"])}
    err = refused(Because(ErrorCode.INVALID_STATE_TRANSITION, "evidence_required"), flow.lease_command, "work.submit",
                  item, payload)  # fmt: skip
    assert err.details["criteria"] == ["accurate"]


def test_a_submission_refuses_artifacts_not_in_the_group_spec_13_3(flow: Flow) -> None:
    item = flow.drive_to("active")
    ghost = urn(uuid.uuid4())
    payload = {"artifactIds": [ghost], "evidence": flow.evidence(item, flow.worker)}
    err = refused(Because(ErrorCode.INVALID_COMMAND, "not_found"), flow.lease_command, "work.submit", item, payload)
    assert err.details["artifactIds"] == [ghost]
    cited = {
        "artifactIds": [flow.publish(item, flow.blob())],
        "evidence": flow.evidence(item, flow.worker, artifacts=["ab" * 32]),
    }
    err = refused(Because(ErrorCode.INVALID_COMMAND, "not_found"), flow.lease_command, "work.submit", item, cited)
    assert err.details["artifacts"] == ["sha256:" + "ab" * 32]


def test_evidence_refuses_free_form_members_spec_13_2(flow: Flow) -> None:
    item = flow.drive_to("active")
    evidence = flow.evidence(item, flow.worker)
    evidence[0]["chainOfThought"] = "first I considered..."
    payload = {"artifactIds": [urn(uuid.uuid4())], "evidence": evidence}
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, flow.lease_command, "work.submit", item, payload)
    assert err.details["field"].startswith("/payload/evidence/0")


def test_evidence_must_be_signed_by_its_generator_spec_13_2_spec_6_4(flow: Flow) -> None:
    item = flow.drive_to("active")
    artifact = flow.publish(item, flow.blob())
    evidence = flow.evidence(item, flow.worker)
    evidence[0]["method"] = "tampered after signing"
    payload = {"artifactIds": [artifact], "evidence": evidence}
    err = refused(ErrorCode.AUTH_INVALID_SIGNATURE, flow.lease_command, "work.submit", item, payload)
    assert err.details["field"] == "/payload/evidence/0"
    foreign = {"artifactIds": [artifact], "evidence": flow.evidence(item, flow.worker2)}
    err = refused(ErrorCode.INVALID_COMMAND, flow.lease_command, "work.submit", item, foreign)
    assert err.details["field"] == "/payload/evidence/0/generatedBy"


def test_evidence_is_about_this_workitem_spec_13_2(flow: Flow) -> None:
    item = flow.drive_to("active")
    other = flow.drive_to("open")
    payload = {"artifactIds": [flow.publish(item, flow.blob())], "evidence": flow.evidence(other, flow.worker)}
    err = refused(ErrorCode.INVALID_COMMAND, flow.lease_command, "work.submit", item, payload)
    assert err.details["field"] == "/payload/evidence/0/workItemId"


def test_progress_is_structured_spec_11_4(flow: Flow) -> None:
    item = flow.drive_to("active")
    payload = {"checkpoint": checkpoint(), "progress": {**PROGRESS, "percent": 40}}
    err = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, flow.lease_command, "work.checkpoint", item, payload)
    assert err.details["field"].startswith("/payload/progress")


def test_workitem_rows_match_events_spec_15_2(flow: Flow) -> None:
    """The last Event about a WorkItem carries the aggregate revision the row now has."""
    item = flow.drive_to("verified")
    last = GroupEvent.objects.filter(aggregate_id=item).order_by("-sequence").first()
    assert last is not None
    assert last.aggregate_revision == WorkItem.objects.get(id=item).revision
