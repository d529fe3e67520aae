"""Every (state, Command) pair against the WorkItem state machine of PROTOCOL §10.2.

The oracle is the specification's table, written out here row by row (not the
code's own ``state_machine.TRANSITIONS``): a Command is accepted exactly where
the table lists the pair (with the row's condition met) and leads to a listed
next state; anything else is INVALID_STATE_TRANSITION with nothing written.
The project's extension kinds (renewal, decline, §15.1: not core
transitions) have rows of their own, marked as ours.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from missions.models import ActionReceipt, GroupEvent
from mwportal.protocol import ErrorCode, ProtocolError
from tests.workitems.flow import DECLINE, Flow, contract, give_card
from workitems import state_machine as sm
from workitems.models import WorkItem

ALL = ("open", "offered", "queued", "active", "blocked", "submitted", "verified", "failed", "cancelled")
UNFINISHED = ("open", "offered", "queued", "active", "blocked", "submitted")

# PROTOCOL §10.2, one entry per row with a Command: (current states, next states).
SPEC_ROWS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # "open, offered, queued, active, blocked, or failed, with no live owner"
    "work.offer": (("open", "offered", "queued", "active", "blocked", "failed"), ("offered",)),
    "work.accept_offer": (("offered",), ("queued",)),
    "approval.grant_execution": (("queued",), ("queued",)),  # "when required"
    "work.start": (("queued",), ("active",)),
    "work.checkpoint": (("active",), ("queued",)),
    "work.block": (("active",), ("blocked",)),
    "work.unblock": (("blocked",), ("queued", "open")),
    "work.submit": (("active",), ("submitted",)),
    "work.accept_result": (("submitted",), ("verified",)),
    "work.fail": (UNFINISHED, ("failed",)),
    "work.cancel": (UNFINISHED, ("cancelled",)),
    "mission.create_child": (("open", "offered", "queued", "active", "blocked"), ("blocked",)),
}
# Ours (§15.1: outside the core table): a renewal needs the current lease, so an
# active WorkItem; a decline answers an open offer.
PROJECT_ROWS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    sm.RENEW: (("active",), ("active",)),
    DECLINE: (("offered",), ("offered",)),
}
ROWS = {**SPEC_ROWS, **PROJECT_ROWS}
# The rows' conditions as drive_to() items meet them: queued, active and blocked
# items have a live owner, so they cannot be offered.
CONDITION_FAILS = {("queued", "work.offer"), ("active", "work.offer"), ("blocked", "work.offer")}


def _lease(flow: Flow, item: str) -> str:
    return flow.leases.get(item, str(uuid.uuid4()))


COMMANDS: dict[str, Callable[[Flow, str], Any]] = {
    "work.offer": lambda f, i: f.offer(i, agents=[f.worker2]),
    "work.accept_offer": lambda f, i: f.accept(i),
    DECLINE: lambda f, i: f.send(f.worker, DECLINE, i, {"reason": "capacity"}),
    "approval.grant_execution": lambda f, i: f.approve(i),
    "work.start": lambda f, i: f.start(i),
    sm.RENEW: lambda f, i: f.renew(i, lease_id=_lease(f, i)),
    "work.checkpoint": lambda f, i: f.checkpoint(i, lease_id=_lease(f, i)),
    "work.block": lambda f, i: f.block(i, lease_id=_lease(f, i)),
    "work.unblock": lambda f, i: f.unblock(i),
    "work.submit": lambda f, i: f.submit(i, lease_id=_lease(f, i)),
    "work.accept_result": lambda f, i: f.accept_result(i),
    "work.fail": lambda f, i: f.fail(i),
    "work.cancel": lambda f, i: f.cancel(i),
    "mission.create_child": lambda f, i: f.create_child(i),
}


def expected_to_accept(state: str, command: str) -> bool:
    return state in ROWS[command][0] and (state, command) not in CONDITION_FAILS


@pytest.mark.parametrize("state", ALL)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_state_command_pair_follows_the_table_spec_10_2(flow: Flow, state: str, command: str) -> None:
    if command == "approval.grant_execution":
        item = flow.authorize(contract(sideEffectRisk="external", executionApproval="human_required"))
        _drive_existing(flow, item, state)
    else:
        item = flow.drive_to(state)
    if command == "mission.create_child":
        give_card(flow.worker2)  # the child's Coordinator (flow.create_child), carded before the count
    before = (GroupEvent.objects.count(), ActionReceipt.objects.count())
    if expected_to_accept(state, command):
        COMMANDS[command](flow, item)
        assert flow.item(item).state in ROWS[command][1]
        return
    with pytest.raises(ProtocolError) as info:
        COMMANDS[command](flow, item)
    assert info.value.code == ErrorCode.INVALID_STATE_TRANSITION, info.value
    late = command == "work.submit" and item in flow.leases
    # Nothing is written, except that a former lease holder's refused
    # submission is kept as a non-authoritative late result (§11.5).
    assert (GroupEvent.objects.count(), ActionReceipt.objects.count()) == (before[0] + late, before[1] + late)
    if late:
        assert GroupEvent.objects.order_by("-id").first().type == "ext.mwportal.work.late_result_recorded"
    assert flow.item(item).state == state


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


def test_the_code_table_has_the_specifications_rows_spec_10_2() -> None:
    """Every row above is in ``state_machine`` with the same states, and it adds no core Command row."""
    for command, (froms, tos) in ROWS.items():
        for state in ALL:
            allowed = sm.allowed(state, command)
            assert bool(allowed) == (state in froms), (state, command)
            if allowed:
                assert set(allowed) == set(tos), (state, command)
    assert set(sm.STATES) == set(ALL)
    assert {"verified", "cancelled"} == sm.TERMINAL  # §10.2: terminal for that WorkItem revision


def test_an_offer_from_queued_after_the_owner_lapsed_fences_the_owner_first_spec_10_2(flow: Flow) -> None:
    item = flow.drive_to("queued")
    # The start-by deadline passes (expiry itself is tested in test_expiry.py).
    WorkItem.objects.filter(id=item).update(owner_expires_at=timezone.now() - timedelta(seconds=1))
    receipt = flow.offer(item, agents=[flow.worker2])
    assert [e["kind"] for e in receipt["events"]] == ["ext.mwportal.work.ownership_fenced", "work.offer.created"]
    flow.accept(item, flow.worker2)
    assert flow.item(item).ownership_epoch == 2
