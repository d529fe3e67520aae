"""A hypothesis stateful test of the WorkItem lifecycle against a model whose
table is the specification's rows (PROTOCOL §10.2, ``tests.workitems.spec_10_2``,
never the code's table): random sequences of signed Commands through the REST
binding; every step is accepted exactly when the model says so, and the stored
state always equals the model's. Automatic retries (§11.4) are in the model as
the rows they map onto: a retryable ``work.fail`` (active -> failed), then the
retry policy's ``work.offer`` (failed -> offered) by the control plane's sweep."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
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

from missions.models import GroupEvent
from mwportal.protocol import ErrorCode, ProtocolError
from tests.conftest import AgentKey
from tests.workitems.flow import DECLINE, Flow, survey_mission
from tests.workitems.spec_10_2 import COMMAND_ROWS
from workitems import state_machine as sm
from workitems import tasks
from workitems.models import ExecutionLease

# The specification's rows, and the project's decline and renewal (§15.1: outside the core table, keeping the state).
ROWS = {**COMMAND_ROWS, DECLINE: (("offered",), ("offered",)), sm.RENEW: (("active",), ("active",))}
ATTEMPTS = 3  # the flow contract's retryPolicy.maxAttempts (backoff none)


class Lifecycle(RuleBasedStateMachine):
    base: Flow  # the test's fixtures: its Principals
    people: tuple[AgentKey, AgentKey, AgentKey, AgentKey]
    flow: Flow
    explored = 0  # steps taken over every run

    def __init__(self) -> None:
        super().__init__()
        self.item = ""
        self.state = sm.OPEN
        self.owner_live = False  # Wanda owns it and her ownership lease runs
        self.offered = False  # an open offer to Wanda exists
        self.child = False  # a linked child Mission runs
        self.steps = 0
        self.attempts = 0  # attempts started (§11.4)
        self.new_attempt = True  # the next start is a new attempt
        self.retry = False  # the retry policy will re-offer the failed WorkItem
        self.offers = 0  # work.offer.created Events of the WorkItem

    @initialize()
    def authorize(self) -> None:
        # A Mission per run, so that the runs' WorkItems stay within its §20 limits.
        f = Lifecycle.base
        self.flow = Flow(survey_mission(f.owner, f.coordinator, [f.worker, f.worker2]), *Lifecycle.people)
        self.item = self.flow.authorize()

    def attempt(self, transition: str, expected: bool, command: Any) -> bool:
        """Run ``command``; it must succeed iff ``expected`` (else INVALID_STATE_TRANSITION)."""
        self.steps += 1
        Lifecycle.explored += 1
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
            self.state, self.offered, self.owner_live, self.retry = sm.OFFERED, True, False, False
            self.offers += 1

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
            if self.new_attempt:
                self.attempts, self.new_attempt = self.attempts + 1, False

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
            self.retry = False

    @precondition(lambda self: self.steps >= 4)
    @rule()
    def fail_attempt(self) -> None:
        """The lease holder's retryable failure: the work.fail row, active -> failed (§11.4)."""
        f = self.flow

        def fail() -> dict[str, Any]:
            evidence = f.evidence(self.item, f.worker, result="failed")
            payload = {"reason": "timed out", "retryable": True, "evidence": evidence}
            return f.lease_command("work.fail", self.item, payload, lease_id=self.lease_id())

        self.steps += 1
        try:
            fail()
        except ProtocolError as exc:
            # Not active: the table refuses it, or the lease it cites is no current one (§11.3).
            fenced = (ErrorCode.INVALID_STATE_TRANSITION, ErrorCode.WORK_LEASE_EXPIRED, ErrorCode.WORK_STALE_OWNERSHIP)
            assert exc.code in fenced and self.state != sm.ACTIVE, exc
            return
        assert self.state == sm.ACTIVE, f"a lease holder's work.fail from {self.state} was accepted"
        self.state, self.owner_live, self.offered = sm.FAILED, False, False
        self.retry = self.attempts < ATTEMPTS
        self.new_attempt = self.retry

    @rule()
    def retry_sweep(self) -> None:
        """The control plane's retry sweep (Celery beat): the work.offer row, failed -> offered."""
        self.steps += 1
        due = self.state == sm.FAILED and self.retry
        # (The sweep also re-offers what earlier runs left failed, in their own Missions.)
        tasks.retry_failed()
        assert GroupEvent.objects.filter(aggregate_id=self.item, type="work.offer.created").count() == (
            self.offers + int(due)
        )
        if due:
            self.state, self.offered, self.retry = sm.OFFERED, True, False
            self.offers += 1

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
        """A terminal WorkItem: carry on with a fresh one in the same run (and Mission)."""
        flow = self.flow
        self.__init__()  # type: ignore[misc]
        self.flow = flow
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


@pytest.mark.usefixtures("rest")
def test_random_command_sequences_follow_the_table_spec_10_2(flow: Flow) -> None:
    Lifecycle.explored = 0
    Lifecycle.base = flow
    Lifecycle.people = (flow.owner, flow.coordinator, flow.worker, flow.worker2)
    run_state_machine_as_test(
        Lifecycle,
        settings=settings(
            max_examples=30,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
    assert Lifecycle.explored >= 300  # the runs did travel the table (about 900 steps)
