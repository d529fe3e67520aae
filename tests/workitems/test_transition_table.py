"""Every row of the WorkItem state machine of PROTOCOL §10.2, through the public REST binding.

The oracle is the specification's table as ``tests.workitems.spec_10_2`` writes
it out (never ``workitems.state_machine``). Every Command is a signed document
posted to ``/api/v0.1/commands`` (the ``rest`` fixture). A Command is accepted
exactly where a row lists the pair (with the row's condition met) and leaves
the row's next state; any other pair is INVALID_STATE_TRANSITION with nothing
written. The rows without a Command of their own (offer expiry, child-Mission
outcomes, the parent Mission's end) are driven by the Commands that cause them.
The project's extension kinds (renewal, decline, §15.1: not core
transitions) keep the state where it is.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from missions.models import GroupEvent
from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.ids import urn
from tests.api.support import nothing_written, state
from tests.workitems.flow import DECLINE, RENEW, Flow, contract, give_card
from tests.workitems.spec_10_2 import COMMAND_ROWS, ROWS, STATES, TERMINAL, UNFINISHED, violations
from tests.workitems.test_missions import approve, end_mission, held, submit
from workitems import state_machine as sm
from workitems.models import WorkItem

pytestmark = pytest.mark.usefixtures("rest")

USAGE = "ext.missionweaveprotocol.core.resource_usage_record"
DEPENDENCY_ADD = "ext.missionweaveprotocol.core.work_dependency_add"
# Ours (§15.1: outside the core table), each keeping the state it starts from:
# a renewal needs the current lease (active); a decline answers an open offer.
PROJECT_ROWS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    RENEW: (("active",), ("active",)),
    DECLINE: (("offered",), ("offered",)),
}
# Every project kind the code's table may name; none may change a state (checked by violations()).
PROJECT_KINDS = frozenset(
    {RENEW, DECLINE, USAGE, DEPENDENCY_ADD, "expire.lease", "expire.start_by", "expire.blocked_lease"}
)
ROWS_BY_COMMAND = {**COMMAND_ROWS, **PROJECT_ROWS}
# The rows' conditions as drive_to() items meet them: queued, active and blocked
# items have a live owner, so they cannot be offered ("with no live owner").
CONDITION_FAILS = {("queued", "work.offer"), ("active", "work.offer"), ("blocked", "work.offer")}


def _lease(flow: Flow, item: str) -> str:
    return flow.leases.get(item, str(uuid.uuid4()))


COMMANDS: dict[str, Callable[[Flow, str], Any]] = {
    "work.offer": lambda f, i: f.offer(i, agents=[f.worker2]),
    "work.accept_offer": lambda f, i: f.accept(i),
    DECLINE: lambda f, i: f.send(f.worker, DECLINE, i, {"reason": "capacity"}),
    "approval.grant_execution": lambda f, i: f.approve(i),
    "work.start": lambda f, i: f.start(i),
    RENEW: lambda f, i: f.renew(i, lease_id=_lease(f, i)),
    "work.checkpoint": lambda f, i: f.checkpoint(i, lease_id=_lease(f, i)),
    "work.block": lambda f, i: f.block(i, lease_id=_lease(f, i)),
    "work.unblock": lambda f, i: f.unblock(i),
    "work.submit": lambda f, i: f.submit(i, lease_id=_lease(f, i)),
    "work.accept_result": lambda f, i: f.accept_result(i),
    "work.fail": lambda f, i: f.fail(i),
    "work.cancel": lambda f, i: f.cancel(i),
    "mission.create_child": lambda f, i: f.create_child(i),
}


def test_every_command_row_has_a_command_here_spec_10_2() -> None:
    # work.propose and work.authorize start from no WorkItem: their own tests below.
    assert set(COMMANDS) == (set(COMMAND_ROWS) - {"work.propose", "work.authorize"}) | set(PROJECT_ROWS)


def expected_to_accept(state: str, command: str) -> bool:
    return state in ROWS_BY_COMMAND[command][0] and (state, command) not in CONDITION_FAILS


def refused_by_the_table(flow: Flow, item: str, state: str, command: str) -> None:
    """The negative half of a row: ``command`` on ``item`` (in ``state``) is
    INVALID_STATE_TRANSITION, and nothing is written (but a former lease holder's
    refused submission, kept as a non-authoritative late result, §11.5)."""
    late = command == "work.submit" and item in flow.leases
    before = state_of_log()
    try:
        COMMANDS[command](flow, item)
    except ProtocolError as refusal:
        assert refusal.code == ErrorCode.INVALID_STATE_TRANSITION, (state, command, refusal)
    else:
        raise AssertionError(f"{command} from {state} was accepted; §10.2 has no such row")
    if late:
        last = GroupEvent.objects.order_by("-id").first()
        assert last is not None and last.type == "ext.mwportal.work.late_result_recorded"
    else:
        assert state_of_log() == before, (state, command)
    assert flow.item(item).state == state


def state_of_log() -> tuple[Any, ...]:
    return state()  # the Events, receipts, sessions and Group heads (tests.api.support)


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_state_command_pair_follows_the_table_spec_10_2(flow: Flow, state: str, command: str) -> None:
    if command == "approval.grant_execution":
        item = flow.authorize(contract(sideEffectRisk="external", executionApproval="human_required"))
        _drive_existing(flow, item, state)
    else:
        item = flow.drive_to(state)
    if command == "mission.create_child":
        give_card(flow.worker2)  # the child's Coordinator (flow.create_child), carded before the count
    if expected_to_accept(state, command):
        COMMANDS[command](flow, item)
        assert flow.item(item).state in ROWS_BY_COMMAND[command][1]
        return
    refused_by_the_table(flow, item, state, command)


def _drive_existing(flow: Flow, item: str, state: str) -> None:
    """drive_to() for an item needing an execution Approval (granted right after the
    table's queued row when the test does not exercise that row)."""
    if state == "open":
        return
    flow.offer(item)
    if state == "offered":
        return
    if state in ("failed", "cancelled"):
        (flow.fail if state == "failed" else flow.cancel)(item)
        return
    flow.accept(item)
    if state == "queued":
        return
    flow.approve(item)
    flow.start(item)
    if state == "active":
        return
    if state == "blocked":
        flow.block(item)
        return
    flow.submit(item)
    if state == "submitted":
        return
    flow.accept_result(item)


# --- none -> open Work Proposal -> open ------------------------------------------------------


def _propose(flow: Flow, proposal: str) -> dict[str, Any]:
    return flow.worker.send("work.propose", flow.group, {"proposalId": urn(proposal), "contract": contract()})


def test_a_proposal_creates_no_workitem_and_authorize_opens_it_spec_10_2(flow: Flow) -> None:
    proposal = str(uuid.uuid4())
    _propose(flow, proposal)
    assert GroupEvent.objects.filter(group_id=flow.group, type="work.proposed").count() == 1
    assert not WorkItem.objects.filter(group_id=flow.group).exists()  # "no WorkItem exists yet"
    item = str(uuid.uuid4())
    flow.send(flow.coordinator, "work.authorize", item, {"contract": contract(), "proposalId": urn(proposal)})
    assert flow.item(item).state == "open"
    assert flow.item(flow.authorize()).state == "open"  # from none


def test_an_authorized_proposal_cannot_be_authorized_again_spec_10_2(flow: Flow) -> None:
    proposal = str(uuid.uuid4())
    _propose(flow, proposal)
    authorize = {"contract": contract(), "proposalId": urn(proposal)}
    flow.send(flow.coordinator, "work.authorize", str(uuid.uuid4()), authorize)
    with nothing_written(), pytest.raises(ProtocolError) as info:
        flow.send(
            flow.coordinator, "work.authorize", str(uuid.uuid4()), {"contract": contract(), "proposalId": urn(proposal)}
        )
    assert info.value.code == ErrorCode.INVALID_STATE_TRANSITION
    with nothing_written(), pytest.raises(ProtocolError) as again:
        _propose(flow, proposal)  # the proposal exists: no longer "none"
    assert again.value.code == ErrorCode.INVALID_STATE_TRANSITION


@pytest.mark.parametrize("state", STATES)
def test_authorize_starts_only_from_none_spec_10_2(flow: Flow, state: str) -> None:
    item = flow.drive_to(state)
    with nothing_written(), pytest.raises(ProtocolError) as info:
        flow.authorize(item_id=item)
    assert info.value.code == ErrorCode.INVALID_STATE_TRANSITION
    assert flow.item(item).state == state


# --- offered: offer expiry -> offered --------------------------------------------------------


def test_offer_expiry_appends_no_event_and_invalidates_acceptance_spec_10_2(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, expires_in=60)
    later = time_machine.travel(timezone.now() + timedelta(seconds=61))
    with later, nothing_written(), pytest.raises(ProtocolError) as info:
        flow.accept(item)
    assert info.value.code == ErrorCode.WORK_OFFER_EXPIRED
    assert flow.item(item).state == "offered"  # expiry itself changes no state
    events = list(GroupEvent.objects.filter(aggregate_id=item).values_list("type", flat=True))
    assert events == ["work.authorized", "work.offer.created"]  # and appends no Event
    flow.offer(item)  # the offered row of work.offer: the Coordinator offers again
    flow.accept(item)
    assert flow.item(item).state == "queued"


def test_an_unexpired_offer_is_accepted_spec_10_2(flow: Flow) -> None:
    item = flow.authorize()
    flow.offer(item, expires_in=60)
    flow.accept(item)
    assert flow.item(item).state == "queued"


# --- queued: approval.grant_execution "when required" ----------------------------------------


def test_the_execution_approval_is_the_start_gate_only_when_required_spec_10_2(flow: Flow) -> None:
    item = flow.authorize(contract(sideEffectRisk="external", executionApproval="human_required"))
    flow.offer(item)
    flow.accept(item)
    with nothing_written(), pytest.raises(ProtocolError) as gate:
        flow.start(item)
    assert gate.value.code == ErrorCode.APPROVAL_REQUIRED
    flow.approve(item)
    assert flow.item(item).state == "queued"  # the grant executes nothing
    flow.start(item)
    assert flow.item(item).state == "active"


# --- blocked: work.unblock -> queued or open ---------------------------------------------------


def test_unblock_returns_to_the_queue_while_the_owner_holds_it_spec_10_2(flow: Flow) -> None:
    item = flow.drive_to("blocked")
    flow.unblock(item)
    assert (flow.item(item).state, str(flow.item(item).owner_id)) == ("queued", flow.worker.id)


def test_unblock_reopens_after_the_blocked_lease_ran_out_spec_10_2(flow: Flow) -> None:
    item = flow.drive_to("blocked")
    # The bounded blocked lease passes (its expiry is tested in test_expiry.py).
    WorkItem.objects.filter(id=item).update(owner_expires_at=timezone.now() - timedelta(seconds=1))
    flow.unblock(item)
    assert (flow.item(item).state, flow.item(item).owner_id) == ("open", None)


# --- blocked: the linked child Mission's approval or failure ---------------------------------


def test_a_linked_child_missions_approval_verifies_the_blocked_parent_spec_10_2(flow: Flow) -> None:
    item = flow.drive_to("offered")
    _, group = flow.create_child(item)
    assert flow.item(item).state == "blocked"
    findings = [held(flow, group, flow.worker2)]
    submit(flow.worker2, group, findings)  # the child's Coordinator
    approve(flow.coordinator, group, findings)  # the parent Coordinator is the child's MissionOwner
    assert flow.item(item).state == "verified"
    accepted = GroupEvent.objects.get(aggregate_id=item, type="work.result.accepted").body
    assert accepted["evidence"]  # the child Approval is the parent WorkItem's Evidence


def test_a_child_approval_no_longer_linked_changes_nothing_spec_10_2(flow: Flow) -> None:
    """Only a blocked WorkItem waiting for the child takes the row: a cancelled one stays cancelled."""
    item = flow.drive_to("open")
    _, group = flow.create_child(item)
    flow.cancel(item)
    findings = [held(flow, group, flow.worker2)]
    submit(flow.worker2, group, findings)
    approve(flow.coordinator, group, findings)
    assert flow.item(item).state == "cancelled"
    assert not GroupEvent.objects.filter(aggregate_id=item, type="work.result.accepted").exists()


@pytest.mark.parametrize(
    ("policy", "end", "after"),
    [
        ("block_parent_work_item", "mission.terminate", "blocked"),
        ("block_parent_work_item", "mission.cancel", "blocked"),
        ("fail_parent_work_item", "mission.terminate", "failed"),
        ("fail_parent_work_item", "mission.cancel", "failed"),
    ],
)
def test_a_linked_child_missions_failure_blocks_or_fails_by_policy_spec_10_2(
    flow: Flow, policy: str, end: str, after: str
) -> None:
    item = flow.drive_to("queued")
    _, group = flow.create_child(item, policy)
    by = flow.worker2 if end == "mission.terminate" else flow.coordinator  # child Coordinator / child owner
    end_mission(by, end, group, "dead end")
    assert flow.item(item).state == after


def test_a_child_failure_no_longer_linked_changes_nothing_spec_10_2(flow: Flow) -> None:
    item = flow.drive_to("open")
    _, group = flow.create_child(item, "fail_parent_work_item")
    flow.cancel(item)
    end_mission(flow.worker2, "mission.terminate", group, "dead end")
    assert flow.item(item).state == "cancelled"


# --- the parent Mission's failure or cancellation ---------------------------------------------


@pytest.mark.parametrize(("end", "after"), [("mission.cancel", "cancelled"), ("mission.terminate", "failed")])
def test_the_missions_end_reaches_every_unfinished_workitem_spec_10_2(flow: Flow, end: str, after: str) -> None:
    items = {s: flow.drive_to(s) for s in STATES}
    end_mission(flow.owner if end == "mission.cancel" else flow.coordinator, end, flow.group)
    for s, item in items.items():
        assert flow.item(item).state == (after if s in UNFINISHED else s), s


# --- the code's table against the specification's ---------------------------------------------


def test_the_code_table_is_the_specifications_spec_10_2() -> None:
    assert violations(sm.TRANSITIONS, PROJECT_KINDS) == []
    assert set(sm.STATES) == set(STATES)
    assert set(sm.TERMINAL) == set(TERMINAL)  # §10.2: terminal for that WorkItem revision


def test_the_oracle_knows_every_row_spec_10_2() -> None:
    assert len(ROWS) == 18  # the table's rows, none dropped in the copy


# --- mutation: a terminal state made re-offerable is caught ----------------------------------


@pytest.mark.parametrize("terminal", TERMINAL)
def test_a_reofferable_terminal_state_fails_the_suite_spec_10_2(
    flow: Flow, monkeypatch: pytest.MonkeyPatch, terminal: str
) -> None:
    """The mutation the issue names: ``work.offer`` out of ``verified`` or ``cancelled``.
    The table check reports it, and the REST row check, run against the mutated
    running Authority, fails where it passes against the real one."""
    mutated = {**sm.TRANSITIONS, (terminal, "work.offer"): frozenset({"offered"})}
    found = violations(mutated, PROJECT_KINDS)
    assert found == [f"{terminal} is terminal (§10.2), yet work.offer leads out of it to ['offered']"]
    item = flow.drive_to(terminal)
    monkeypatch.setitem(sm.TRANSITIONS, (terminal, "work.offer"), frozenset({"offered"}))
    with pytest.raises(AssertionError, match="was accepted"):
        refused_by_the_table(flow, item, terminal, "work.offer")
    assert flow.item(item).state == "offered"  # the mutant did re-offer it
    monkeypatch.undo()
    refused_by_the_table(flow, flow.drive_to(terminal), terminal, "work.offer")  # and the real one refuses


def test_a_mutated_row_target_or_a_new_transition_is_caught_spec_10_2() -> None:
    retry = {**sm.TRANSITIONS, ("active", "work.retry"): frozenset({"queued"})}
    assert violations(retry, PROJECT_KINDS) == ["active --work.retry--> ['queued']: work.retry is no §10.2 transition"]
    wrong = {**sm.TRANSITIONS, ("blocked", "work.unblock"): frozenset({"queued", "offered"})}
    assert violations(wrong, PROJECT_KINDS) == [
        "blocked --work.unblock--> ['offered', 'queued']: §10.2 gives ['open', 'queued']"
    ]
    missing = {k: v for k, v in sm.TRANSITIONS.items() if k != ("submitted", "work.cancel")}
    assert violations(missing, PROJECT_KINDS) == ["the §10.2 row submitted --work.cancel--> ['cancelled'] is missing"]
    moving = {**sm.TRANSITIONS, ("offered", DECLINE): frozenset({"open"})}
    assert violations(moving, PROJECT_KINDS) == [f"{DECLINE} is no §10.2 row, yet changes offered to ['open']"]
