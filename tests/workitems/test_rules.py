"""Contracts, the Approval gate, dependencies, budgets, retries and Evidence."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from missions.models import Approval, GroupEvent, Mission
from mwportal.protocol import ErrorCode
from tests.conftest import Because, refused
from tests.workitems.flow import PROGRESS, Flow, contract
from workitems.models import WorkItem

# --- Work Contract (spec 10.1) ----------------------------------------------


@pytest.mark.parametrize(
    "field", ["goal", "acceptance_criteria", "budgets", "retry", "risk", "capabilities", "deadline", "urgency"]
)
def test_missing_contract_field_is_work_contract_incomplete_naming_it(flow: Flow, field: str) -> None:
    c = contract()
    del c[field]
    err = refused(Because(ErrorCode.WORK_CONTRACT_INCOMPLETE, "contract_invalid"), flow.authorize, c)
    assert err.details["field"] == f"contract.{field}"


def test_nested_contract_errors_name_the_path(flow: Flow) -> None:
    c = contract()
    del c["budgets"]["tokens"]
    incomplete = Because(ErrorCode.WORK_CONTRACT_INCOMPLETE, "contract_invalid")
    assert refused(incomplete, flow.authorize, c).details["field"] == "contract.budgets.tokens"
    # Present but wrong is INVALID_COMMAND, not "incomplete".
    wrong = Because(ErrorCode.INVALID_COMMAND, "contract_invalid")
    c = contract(urgency="yesterday")
    assert refused(wrong, flow.authorize, c).details["field"] == "contract.urgency"
    c = contract(opinion="prose instead of fields")
    assert refused(wrong, flow.authorize, c).details["field"] == "contract.opinion"


def test_contract_schema_is_served(client) -> None:  # type: ignore[no-untyped-def]
    response = client.get("/api/v1/schema/work-contract.json")
    assert response.status_code == 200
    schema = response.json()
    assert set(schema["required"]) >= {"goal", "acceptance_criteria", "budgets", "retry", "risk"}
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(schema)
    Draft202012Validator(schema).validate(contract())


def test_proposal_then_authorization(flow: Flow) -> None:
    proposal = str(uuid.uuid4())
    flow.worker.send("work.propose", flow.group, {"proposal": proposal, "contract": contract()})
    item = str(uuid.uuid4())
    flow.coordinator.send(
        "work.authorize", flow.group, {"workitem": item, "contract": contract(), "proposal": proposal}
    )
    assert str(flow.item(item).proposal_id) == proposal
    refused(
        ErrorCode.INVALID_STATE_TRANSITION,
        flow.coordinator.send,
        "work.authorize",
        flow.group,
        {"workitem": str(uuid.uuid4()), "contract": contract(), "proposal": proposal},
    )


def test_only_coordinators_authorize(flow: Flow) -> None:
    refused(
        ErrorCode.AUTH_FORBIDDEN,
        flow.worker.send,
        "work.authorize",
        flow.group,
        {"workitem": str(uuid.uuid4()), "contract": contract()},
    )


# --- Approval gate -----------------------------------------------------------


def test_risky_contract_cannot_start_before_execution_approval(flow: Flow) -> None:
    item = flow.authorize(contract(risk={"class": "high", "requires_execution_approval": True}))
    flow.offer(item)
    flow.accept(item)
    refused(ErrorCode.APPROVAL_REQUIRED, flow.start, item)
    refused(
        ErrorCode.AUTH_FORBIDDEN,
        flow.coordinator.send,
        "approval.grant_execution",
        flow.group,
        {},
        target=flow.target(item),
    )
    flow.approve(item)
    assert Approval.objects.get(subject_id=item).kind == "execution"
    flow.start(item)


# --- Dependencies (spec 10.4) --------------------------------------------------


def test_dependency_gates_start_until_its_policy_holds(flow: Flow) -> None:
    first = flow.authorize()
    second = flow.authorize(contract(dependencies=[{"workitem": first, "policy": "verified"}]))
    flow.offer(second)
    flow.accept(second)
    err = refused(Because(ErrorCode.INVALID_STATE_TRANSITION, "dependency_unmet"), flow.start, second)
    assert err.details["workitems"] == [first]
    flow.offer(first, agents=[flow.worker2])
    flow.accept(first, flow.worker2)
    flow.start(first, flow.worker2)
    flow.lease_command(
        "work.submit", first, {"artifacts": [], "evidence": flow.evidence(first, flow.worker2)}, agent=flow.worker2
    )
    refused(Because(ErrorCode.INVALID_STATE_TRANSITION, "dependency_unmet"), flow.start, second)
    flow.accept_result(first)
    flow.start(second)


def test_dependency_cycles_are_refused(flow: Flow) -> None:
    a = flow.authorize()
    b = flow.authorize(contract(dependencies=[{"workitem": a, "policy": "verified"}]))
    # Revising a's contract to depend on b closes a cycle.
    refused(
        Because(ErrorCode.INVALID_COMMAND, "dependency_cycle"),
        flow.offer,
        a,
        contract=contract(dependencies=[{"workitem": b, "policy": "verified"}]),
    )
    c = str(uuid.uuid4())
    refused(
        Because(ErrorCode.INVALID_COMMAND, "dependency_cycle"),
        flow.authorize,
        contract(dependencies=[{"workitem": c, "policy": "verified"}]),
        c,
    )


def test_unknown_dependency_is_contract_invalid(flow: Flow) -> None:
    err = refused(
        Because(ErrorCode.INVALID_COMMAND, "contract_invalid"),
        flow.authorize,
        contract(dependencies=[{"workitem": str(uuid.uuid4()), "policy": "verified"}]),
    )
    assert err.details["field"] == "contract.dependencies.0.workitem"


# --- Budgets (spec 11.4) -----------------------------------------------------


def test_usage_is_charged_to_workitem_and_mission(flow: Flow) -> None:
    item = flow.drive_to("active")
    flow.lease_command(
        "work.checkpoint", item, {"checkpoint": {}, "progress": PROGRESS, "usage": {"tokens": 1000, "tool_calls": 3}}
    )
    assert flow.item(item).usage == {"tokens": 1000, "tool_calls": 3}
    assert Mission.objects.get(id=flow.mission).usage == {"tokens": 1000, "tool_calls": 3}


def test_budget_overflow_rejects_charge_and_progress_together(flow: Flow) -> None:
    item = flow.drive_to("active")
    before = flow.item(item)
    err = refused(
        ErrorCode.BUDGET_EXCEEDED,
        flow.lease_command,
        "work.checkpoint",
        item,
        {"checkpoint": {}, "progress": PROGRESS, "usage": {"tool_calls": 51}},
    )
    assert err.details["dimension"] == "tool_calls"
    after = flow.item(item)
    assert (after.state, after.usage, after.checkpoint_count) == (before.state, before.usage, 0)
    assert Mission.objects.get(id=flow.mission).usage == {}


def test_mission_budget_caps_all_its_workitems(flow: Flow, owner) -> None:  # type: ignore[no-untyped-def]
    Mission.objects.filter(id=flow.mission).update(budgets={"financial": 10})
    item = flow.drive_to("active")
    flow.lease_command("work.checkpoint", item, {"checkpoint": {}, "progress": PROGRESS, "usage": {"financial": 8}})
    other = flow.drive_to("active")
    refused(
        ErrorCode.BUDGET_EXCEEDED,
        flow.lease_command,
        "work.checkpoint",
        other,
        {"checkpoint": {}, "progress": PROGRESS, "usage": {"financial": 3}},
    )


# --- Retries (spec 11.4; MWP-WRK-018) -------------------------------------------


def test_retryable_failure_requeues_with_backoff_until_attempts_run_out(flow: Flow) -> None:
    item = flow.authorize(
        contract(
            retry={
                "max_attempts": 2,
                "backoff_seconds": 30,
                "backoff_multiplier": 2,
                "deadline": None,
                "max_cost": None,
            }
        )
    )
    flow.offer(item)
    flow.accept(item)
    flow.start(item)
    evidence = flow.evidence(item, flow.worker)
    flow.lease_command("work.fail", item, {"evidence": evidence, "retryable": True})
    it = flow.item(item)
    assert (it.state, it.attempt, it.needs_new_attempt) == ("queued", 1, True)
    err = refused(ErrorCode.INVALID_STATE_TRANSITION, flow.start, item)  # still backing off
    assert "retry_not_before" in err.details
    with time_machine.travel(timezone.now() + timedelta(seconds=31)):
        flow.start(item)
        assert flow.item(item).attempt == 2
        flow.lease_command("work.fail", item, {"evidence": evidence, "retryable": True})
    it = flow.item(item)
    assert it.state == "failed"
    failed = GroupEvent.objects.get(aggregate_id=item, type="work.failed")
    assert failed.body["reason"].startswith("retries exhausted")
    assert failed.body["evidence"] == evidence


def test_failure_needs_evidence(flow: Flow) -> None:
    item = flow.drive_to("open")
    refused(
        Because(ErrorCode.INVALID_STATE_TRANSITION, "evidence_required"),
        flow.coordinator.send,
        "work.fail",
        flow.group,
        {"evidence": []},
        target=flow.target(item),
    )


def test_attempt_key_is_deterministic_MWP_WRK_031() -> None:
    from mwportal.protocol import attempt_key

    args = ("m", "w", 3, "send-email")
    assert attempt_key(*args) == attempt_key(*args)
    assert attempt_key("m", "w", 4, "send-email") != attempt_key(*args)
    assert len(attempt_key(*args)) == 64


# --- Submission and Evidence (spec 13.2) ----------------------------------------


def test_submit_needs_evidence_for_every_criterion(flow: Flow) -> None:
    item = flow.drive_to("active")
    body = {"artifacts": [], "evidence": flow.evidence(item, flow.worker, criteria=["complete"])}
    err = refused(
        Because(ErrorCode.INVALID_STATE_TRANSITION, "evidence_required"), flow.lease_command, "work.submit", item, body
    )
    assert err.details["criteria"] == ["accurate"]


def test_submit_refuses_artifacts_not_in_the_store(flow: Flow) -> None:
    item = flow.drive_to("active")
    ghost = "ab" * 32
    body = {"artifacts": [ghost], "evidence": flow.evidence(item, flow.worker)}
    err = refused(Because(ErrorCode.INVALID_COMMAND, "not_found"), flow.lease_command, "work.submit", item, body)
    assert err.details["artifacts"] == [ghost]


def test_evidence_refuses_free_form_members(flow: Flow) -> None:
    item = flow.drive_to("active")
    evidence = flow.evidence(item, flow.worker)
    evidence[0]["chain_of_thought"] = "first I considered..."
    err = refused(
        ErrorCode.SCHEMA_VALIDATION_FAILED,
        flow.lease_command,
        "work.submit",
        item,
        {"artifacts": [], "evidence": evidence},
    )
    assert err.details["field"] == "body.evidence.0.chain_of_thought"


def test_progress_is_structured(flow: Flow) -> None:
    item = flow.drive_to("active")
    err = refused(
        ErrorCode.SCHEMA_VALIDATION_FAILED,
        flow.lease_command,
        "work.checkpoint",
        item,
        {"checkpoint": {}, "progress": {**PROGRESS, "percent": 40}},
    )
    assert err.details["field"] == "body.progress.percent"


def test_workitem_rows_match_events(flow: Flow) -> None:
    """Every WorkItem Event carries the aggregate revision the row now has."""
    item = flow.drive_to("verified")
    last = GroupEvent.objects.filter(aggregate_id=item).order_by("-sequence").first()
    assert last is not None
    assert last.aggregate_revision == WorkItem.objects.get(id=item).revision
