"""Every (state, Command) pair against the transition table of spec 10.2.

A Command is accepted exactly where ``state_machine.TRANSITIONS`` lists the
pair (with the row's condition met), and anything else is
INVALID_STATE_TRANSITION with nothing written.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from missions.models import ActionReceipt, GroupEvent
from mwportal.protocol import ErrorCode, ProtocolError
from tests.workitems.flow import BASIS, PROGRESS, Flow, contract
from workitems import state_machine as sm

REACHABLE = ["open", "offered", "queued", "active", "blocked", "submitted", "verified", "failed", "cancelled"]


def _lease(flow: Flow, item: str) -> str:
    return flow.leases.get(item, str(uuid.uuid4()))


COMMANDS: dict[str, Callable[[Flow, str], Any]] = {
    "work.offer": lambda f, i: f.offer(i, agents=[f.worker2]),
    "work.accept_offer": lambda f, i: f.accept(i),
    "work.decline_offer": lambda f, i: f.worker.send(
        "work.decline_offer", f.group, {"reason": "capacity"}, target=f.target(i)
    ),
    "work.raise_ambiguity": lambda f, i: f.worker.send(
        "work.raise_ambiguity", f.group, {"questions": ["which survey?"]}, target=f.target(i)
    ),
    "approval.grant_execution": lambda f, i: f.approve(i),
    "work.start": lambda f, i: f.start(i),
    "work.renew_lease": lambda f, i: f.lease_command("work.renew_lease", i, {}, lease_id=_lease(f, i)),
    "work.checkpoint": lambda f, i: f.checkpoint(i, lease_id=_lease(f, i)),
    "work.block": lambda f, i: f.block(i, lease_id=_lease(f, i)),
    "work.unblock": lambda f, i: f.unblock(i),
    "work.submit": lambda f, i: f.submit(i, lease_id=_lease(f, i)),
    "work.accept_result": lambda f, i: f.accept_result(i),
    "work.fail": lambda f, i: f.fail(i),
    "work.cancel": lambda f, i: f.cancel(i),
    "mission.create_child": lambda f, i: f.coordinator.send(
        "mission.create_child",
        f.group,
        {
            "mission": str(uuid.uuid4()),
            "group": str(uuid.uuid4()),
            "title": "child",
            "objective": "sub-work",
            "failure_policy": "fail_parent",
        },
        target=f.target(i),
    ),
}

# The table's conditions as the drive_to() items meet them: queued, active and
# blocked items have a live owner, so they cannot be offered.
CONDITION_FAILS = {("queued", "work.offer"), ("active", "work.offer"), ("blocked", "work.offer")}


def expected_to_accept(state: str, command: str) -> bool:
    return bool(sm.allowed(state, command)) and (state, command) not in CONDITION_FAILS


@pytest.mark.parametrize("state", REACHABLE)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_state_command_pair_follows_the_table(flow: Flow, state: str, command: str) -> None:
    approval = command == "approval.grant_execution"
    if approval:
        flow_contract = contract(risk={"class": "high", "requires_execution_approval": True})
        item = flow.authorize(flow_contract)
        _drive_existing(flow, item, state)
    else:
        item = flow.drive_to(state)
    before = (GroupEvent.objects.count(), ActionReceipt.objects.count())
    if expected_to_accept(state, command):
        COMMANDS[command](flow, item)
        assert flow.item(item).state in sm.allowed(state, command)
    else:
        with pytest.raises(ProtocolError) as info:
            COMMANDS[command](flow, item)
        assert info.value.code == ErrorCode.INVALID_STATE_TRANSITION, info.value
        late = command == "work.submit" and item in flow.leases
        # Nothing is written, except that a former lease holder's refused
        # submission is kept as a non-authoritative late result (MWP-WRK-019).
        assert (GroupEvent.objects.count(), ActionReceipt.objects.count()) == (before[0] + late, before[1] + late)
        if late:
            assert GroupEvent.objects.order_by("-id").first().type == "work.late_result_recorded"
        assert flow.item(item).state == state


def _drive_existing(flow: Flow, item: str, state: str) -> None:
    """drive_to() for an item needing an execution Approval (granted only after
    the table's queued row when the test does not exercise it)."""
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


def test_the_table_covers_every_command_of_the_catalogue() -> None:
    for command in COMMANDS:
        assert command in sm.TRANSITION_NAMES
    assert set(sm.STATES) == set(REACHABLE)


def test_offer_from_queued_after_the_owner_lapsed_fences_the_owner_first(flow: Flow) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from workitems.models import WorkItem

    item = flow.drive_to("queued")
    # The start-by deadline passes (expiry is tested in test_expiry.py).
    WorkItem.objects.filter(id=item).update(owner_expires_at=timezone.now() - timedelta(seconds=1))
    receipt = flow.offer(item, agents=[flow.worker2])
    assert [e["type"] for e in receipt["events"]] == ["work.owner_fenced", "work.offered"]
    flow.accept(item, flow.worker2)
    assert flow.item(item).ownership_epoch == 2


def test_unused_basis_and_progress_fixtures_are_valid() -> None:
    from workitems.guards import check_progress, check_selection_basis

    assert check_progress(PROGRESS) == PROGRESS
    assert check_selection_basis(BASIS) == BASIS
