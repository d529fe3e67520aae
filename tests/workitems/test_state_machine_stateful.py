"""A hypothesis stateful test of the WorkItem lifecycle against a model of
the transition table (PROTOCOL §10.2): random Command sequences through
``accept()``; every step is accepted exactly when the model says so, and the
stored state always equals the model's."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from mwportal.protocol import ErrorCode, ProtocolError
from tests.workitems.flow import DECLINE, Flow
from tests.workitems.test_transition_table import ROWS
from workitems import state_machine as sm
from workitems.models import ExecutionLease


class Lifecycle(RuleBasedStateMachine):
    flow: Flow

    def __init__(self) -> None:
        super().__init__()
        self.item = ""
        self.state = sm.OPEN
        self.owner_live = False  # Wanda owns it and her ownership lease runs
        self.offered = False  # an open offer to Wanda exists
        self.child = False  # a linked child Mission runs
        self.steps = 0

    @initialize()
    def authorize(self) -> None:
        self.item = self.flow.authorize()

    def attempt(self, transition: str, expected: bool, command: Any) -> bool:
        """Run ``command``; it must succeed iff ``expected`` (else INVALID_STATE_TRANSITION)."""
        self.steps += 1
        if expected:
            assert self.state in ROWS[transition][0], (self.state, transition)
            command()
            return True
        try:
            command()
        except ProtocolError as exc:
            assert exc.code in (ErrorCode.INVALID_STATE_TRANSITION, ErrorCode.WORK_LEASE_EXPIRED), (transition, exc)
            return False
        raise AssertionError(f"{transition} from {self.state} was accepted against the model")

    @rule()
    def offer(self) -> None:
        f = self.flow
        ok = self.state in ROWS["work.offer"][0] and not self.owner_live
        if self.attempt("work.offer", ok, lambda: f.offer(self.item, agents=[f.worker, f.worker2])):
            self.state, self.offered, self.owner_live = sm.OFFERED, True, False

    @rule()
    def accept_offer(self) -> None:
        ok = self.state == sm.OFFERED and self.offered
        if self.attempt("work.accept_offer", ok, lambda: self.flow.accept(self.item)):
            self.state, self.offered, self.owner_live = sm.QUEUED, False, True

    @precondition(lambda self: self.steps % 4 == 3)  # rarer, or offers rarely get accepted
    @rule()
    def decline_offer(self) -> None:
        f = self.flow
        ok = self.state == sm.OFFERED and self.offered

        def decline() -> dict[str, Any]:
            return f.send(f.worker, DECLINE, self.item, {"reason": "capacity"})

        if self.attempt(DECLINE, ok, decline):
            self.offered = False

    @rule()
    def start(self) -> None:
        ok = self.state == sm.QUEUED and self.owner_live
        try:
            started = self.attempt("work.start", ok, lambda: self.flow.start(self.item))
        except ProtocolError as exc:  # queued without a live owner: ownership lapsed
            assert exc.code in (ErrorCode.WORK_STALE_OWNERSHIP, ErrorCode.WORK_LEASE_EXPIRED) and not ok
            return
        if started:
            self.state = sm.ACTIVE

    def lease_id(self) -> str:
        return self.flow.leases.get(self.item, str(uuid.uuid4()))

    @rule()
    def renew(self) -> None:
        self.attempt(sm.RENEW, self.state == sm.ACTIVE, lambda: self.flow.renew(self.item, lease_id=self.lease_id()))

    @rule()
    def checkpoint(self) -> None:
        if self.attempt(
            "work.checkpoint",
            self.state == sm.ACTIVE,
            lambda: self.flow.checkpoint(self.item, lease_id=self.lease_id()),
        ):
            self.state = sm.QUEUED

    @rule()
    def block(self) -> None:
        if self.attempt(
            "work.block", self.state == sm.ACTIVE, lambda: self.flow.block(self.item, lease_id=self.lease_id())
        ):
            self.state = sm.BLOCKED

    @rule()
    def unblock(self) -> None:
        ok = self.state == sm.BLOCKED and not self.child
        if self.attempt("work.unblock", ok, lambda: self.flow.unblock(self.item)):
            self.state = sm.QUEUED if self.owner_live else sm.OPEN

    @rule()
    def submit(self) -> None:
        if self.attempt(
            "work.submit", self.state == sm.ACTIVE, lambda: self.flow.submit(self.item, lease_id=self.lease_id())
        ):
            self.state, self.owner_live = sm.SUBMITTED, False

    @rule()
    def accept_result(self) -> None:
        if self.attempt("work.accept_result", self.state == sm.SUBMITTED, lambda: self.flow.accept_result(self.item)):
            self.state = sm.VERIFIED

    # The rules that end or fence a lifecycle wait a few steps, so that runs
    # explore the whole table instead of ending at once.
    @precondition(lambda self: self.steps >= 8)
    @rule()
    def fail(self) -> None:
        if self.attempt("work.fail", self.state in ROWS["work.fail"][0], lambda: self.flow.fail(self.item)):
            self.state, self.owner_live, self.offered, self.child = sm.FAILED, False, False, False

    @precondition(lambda self: self.steps >= 8)
    @rule()
    def cancel(self) -> None:
        if self.attempt("work.cancel", self.state in ROWS["work.cancel"][0], lambda: self.flow.cancel(self.item)):
            self.state, self.owner_live, self.offered = sm.CANCELLED, False, False

    @precondition(lambda self: self.steps >= 8)
    @rule()
    def create_child(self) -> None:
        ok = self.state in ROWS["mission.create_child"][0]
        if self.attempt(
            "mission.create_child", ok, lambda: self.flow.create_child(self.item, "block_parent_work_item")
        ):
            self.state, self.owner_live, self.offered, self.child = sm.BLOCKED, False, False, True

    @precondition(lambda self: self.state in (sm.VERIFIED, sm.CANCELLED))
    @rule()
    def next_item(self) -> None:
        """A terminal WorkItem: carry on with a fresh one in the same run."""
        self.__init__()  # type: ignore[misc]
        self.item = self.flow.authorize()

    # Legal moves, as the model sees them, drawn more often than random probes
    # so that runs travel the whole table (three rules: three times the weight).
    def legal_moves(self) -> list[str]:
        moves = {
            "offer": self.state in ROWS["work.offer"][0] and not self.owner_live,
            "accept_offer": self.state == sm.OFFERED and self.offered,
            "start": self.state == sm.QUEUED and self.owner_live,
            "renew": self.state == sm.ACTIVE,
            "checkpoint": self.state == sm.ACTIVE,
            "block": self.state == sm.ACTIVE,
            "submit": self.state == sm.ACTIVE,
            "unblock": self.state == sm.BLOCKED and not self.child,
            "accept_result": self.state == sm.SUBMITTED,
        }
        return [name for name, ok in moves.items() if ok]

    def take_legal(self, data: st.DataObject) -> None:
        moves = self.legal_moves()
        if moves:
            getattr(self, data.draw(st.sampled_from(moves)))()

    @rule(data=st.data())
    def legal_1(self, data: st.DataObject) -> None:
        self.take_legal(data)

    @rule(data=st.data())
    def legal_2(self, data: st.DataObject) -> None:
        self.take_legal(data)

    @rule(data=st.data())
    def legal_3(self, data: st.DataObject) -> None:
        self.take_legal(data)

    @invariant()
    def stored_state_is_the_models(self) -> None:
        if not self.item:
            return
        item = self.flow.item(self.item)
        assert item.state == self.state
        assert ExecutionLease.objects.filter(workitem_id=self.item, status="active").count() == (
            1 if self.state == sm.ACTIVE else 0
        )


def test_random_command_sequences_follow_the_table(flow: Flow) -> None:
    Lifecycle.flow = flow
    run_state_machine_as_test(
        Lifecycle,
        settings=settings(
            max_examples=40,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
