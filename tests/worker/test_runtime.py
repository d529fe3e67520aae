"""The runtime's pure parts and its local state, without a server (STYLE §7).

Admission control (§10.3), the retry policy of the Work Contract (§11.4;
MWP-WRK-018), lease renewal timing (§11.3), the
reconnect backoff, the default Picker, a slot's budget, and the side-effect
outbox with its reconciliation (MWP-WRK-031).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mwportal.protocol import attempt_key
from mwportal.protocol.catalogue import examples as ex
from mwportal.protocol.command import Key, format_timestamp
from mwportal.protocol.ids import bare
from mwworker import (
    BudgetExceeded,
    Decline,
    FifoPicker,
    Identity,
    Refused,
    SlotContext,
    Store,
    Worker,
    WorkerConfig,
    WorkRow,
    admit,
    retry_decision,
)
from mwworker.connection import backoff, should_retry
from mwworker.context import Capability, Result, _Port
from mwworker.errors import Fatal
from mwworker.leases import renew_delay
from mwworker.projection import fold
from mwworker.state import _Slot
from tests.worker.streams import ME, ORG, Chain, payload

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
GROUP = "urn:uuid:11111111-1111-4111-8111-111111111111"
MISSION = "urn:uuid:22222222-2222-4222-8222-222222222222"
CAP = {"id": "text.summarize", "version": "1.2.0"}


def format_time(moment: datetime) -> str:
    return format_timestamp(moment)


def contract(**overrides: Any) -> dict[str, Any]:
    """The catalogue's example Work Contract (work-contract.schema.json) with ``overrides``."""
    base: dict[str, Any] = {
        **ex.work_contract(), "requiredCapabilities": [CAP], "deadline": "2027-01-01T00:00:00Z",
        "budget": {"currency": "EUR", "financialLimit": 10, "externalSideEffectLimit": 2},
        "retryPolicy": {"maxAttempts": 3, "backoff": "exponential", "maxDelay": "PT4S", "retryableFailures": []},
    }  # fmt: skip
    base.update(overrides)
    return base


def row(item: str = "urn:uuid:33333333-3333-4333-8333-333333333333", contract_: dict[str, Any] | None = None,
        **overrides: Any) -> WorkRow:  # fmt: skip
    """A WorkRow as the projection folds a catalogue ``work.authorized``, then ``overrides``."""
    doc = {**ex.work_item(), "workItemId": item, "groupId": GROUP, "contract": contract_ or contract()}
    event = Chain(GROUP, seed=1).forge(kind="work.authorized", body=payload("work.authorized", workItem=doc),
                                       work_item_id=item)  # fmt: skip
    folded = fold(event, me=ME, meta=None, row=None).row
    assert folded is not None
    return replace(folded, **overrides)


async def _noop(ctx: SlotContext) -> Result:
    return Result(evidence=[])


CAPS = {
    ("text.summarize", "1.2.0"): Capability(
        "text.summarize", "1.2.0", _noop, {"financialMicrounits": 4_000_000}, duration_seconds=600
    )
}


def decide(r: WorkRow, **kw: Any) -> Decline | None:
    args: dict[str, Any] = {
        "capabilities": CAPS, "committed": 0, "queue_limit": 4, "my_roles": ["worker"], "member": True,
        "dependency_states": {}, "now": NOW,
    }  # fmt: skip
    args.update(kw)
    return admit(r, **args)


DEP = "urn:uuid:44444444-4444-4444-8444-444444444444"


# --- admission control (spec 10.3) -------------------------------------------------------------


def test_admission_accepts_what_it_can_credibly_commit_to() -> None:
    assert decide(row()) is None


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ({"committed": 4}, "capacity"),
        ({"row": {"contract_": contract(deadline=format_time(NOW + timedelta(seconds=60)))}}, "deadline"),
        (
            {"row": {"contract_": contract(requiredCapabilities=[{"id": "text.translate", "version": "2.0.0"}])}},
            "capability",
        ),
        ({"row": {"contract_": contract(requiredCapabilities=[{**CAP, "version": "2.0.0"}])}}, "capability"),
        ({"my_roles": ["observer"]}, "authorization"),
        ({"member": False}, "authorization"),
        (
            {
                "row": {"contract_": contract(dependencyWorkItemIds=[DEP])},
                "dependency_states": {DEP: "cancelled"},
            },
            "dependency",
        ),  # fmt: skip
        ({"row": {"usage": json.dumps({"financialMicrounits": 7_000_000})}}, "budget"),
        ({"row": {"attempt": 3, "needs_new_attempt": True}}, "budget"),
    ],
)
def test_admission_declines_with_a_structured_reason(case: dict[str, Any], reason: str) -> None:
    r = row(**case.pop("row", {}))
    decline = decide(r, **case)
    assert decline is not None and decline.reason == reason and decline.detail


def test_a_reviewer_member_takes_the_review_offered_to_it_spec_13_2() -> None:
    """Workers and reviewers execute under offers and leases (the portal's review WorkItems, §13.2)."""
    assert decide(row(), my_roles=["reviewer"]) is None


def test_admission_does_not_decline_for_a_dependency_that_may_still_be_met() -> None:
    r = row(contract_=contract(dependencyWorkItemIds=[DEP]))
    assert decide(r, dependency_states={DEP: "active"}) is None
    assert decide(r, dependency_states={DEP: None}) is None


# --- retries within the contract (spec 11.4; MWP-WRK-018) --------------------------------------


def test_retry_backoff_follows_the_contracts_retry_policy_MWP_WRK_018() -> None:
    c = contract()
    first = retry_decision(c, attempt=1, usage={}, now=NOW)
    second = retry_decision(c, attempt=2, usage={}, now=NOW)
    assert first.retry and first.not_before == NOW + timedelta(seconds=1)  # exponential: 2 ** 0
    assert second.retry and second.not_before == NOW + timedelta(seconds=2)
    fixed = contract(retryPolicy={**contract()["retryPolicy"], "backoff": "fixed"})
    assert retry_decision(fixed, attempt=2, usage={}, now=NOW).not_before == NOW + timedelta(seconds=4)  # maxDelay


@pytest.mark.parametrize(
    ("overrides", "attempt", "usage", "why"),
    [
        ({}, 3, {}, "attempts"),
        ({"deadline": format_time(NOW - timedelta(seconds=1))}, 1, {}, "deadline"),
        ({"deadline": format_time(NOW + timedelta(milliseconds=500))}, 1, {}, "backoff"),  # ends after it
        ({}, 1, {"financialMicrounits": 10_000_000}, "budget"),
    ],
)
def test_retries_stop_at_the_contracts_attempts_deadline_and_budget_MWP_WRK_018(
    overrides: dict[str, Any], attempt: int, usage: dict[str, float], why: str
) -> None:
    c = contract(**overrides)
    decision = retry_decision(c, attempt=attempt, usage=usage, now=NOW)
    assert not decision.retry and why in decision.reason


# --- timing: leases and reconnection ----------------------------------------------------------


def test_renewal_comes_before_expiry_MWP_WRK_013() -> None:
    assert renew_delay(300) == 150
    assert renew_delay(300, fraction=0.9, margin=60) == 240  # never later than the margin before expiry
    assert renew_delay(1.5, margin=1) == 0.5
    assert renew_delay(0.5, margin=1) == 0  # a lease shorter than the margin renews at once


def test_reconnect_backoff_is_jittered_capped_and_growing() -> None:
    low = backoff(initial=1, factor=2, cap=8, rng=lambda: 0.0)
    high = backoff(initial=1, factor=2, cap=8, rng=lambda: 1.0)
    assert [next(low) for _ in range(6)] == [0.5, 1, 2, 4, 4, 4]
    assert [next(high) for _ in range(6)] == [1, 2, 4, 8, 8, 8]


def test_the_retry_rule_gives_up_only_on_fatal_errors() -> None:
    assert should_retry(ConnectionRefusedError()) and should_retry(TimeoutError()) and should_retry(Refused("X", ""))
    assert not should_retry(Fatal("the key is refused"))
    assert not should_retry(ValueError("a bug"))


# --- the default Picker ----------------------------------------------------------------------


def test_fifo_picker_takes_the_oldest_eligible_and_a_returning_item_goes_to_the_back() -> None:
    picker = FifoPicker()
    caps = frozenset({("text.summarize", "1.2.0")})
    a, b = row("urn:uuid:aaaaaaaa-0000-4000-8000-000000000000"), row("urn:uuid:bbbbbbbb-0000-4000-8000-000000000000")
    a, b = replace(a, updated_sequence=3), replace(b, updated_sequence=4)
    pick = lambda rows: picker.pick(rows, running={}, free_slots=1, capabilities=caps, now=NOW)  # noqa: E731
    assert pick([b, a]) == a
    picker.dispatched(a, NOW)
    a_back = replace(a, updated_sequence=9)  # checkpointed: it re-entered its queue
    assert pick([a_back, b]) == b
    assert picker.pick([a, b], running={}, free_slots=0, capabilities=caps, now=NOW) is None


def test_fifo_picker_honours_execution_approval_and_capabilities() -> None:
    picker = FifoPicker()
    gated = row(execution_approved=False)
    foreign = row("urn:uuid:cccccccc-0000-4000-8000-000000000000",
                  contract(requiredCapabilities=[{"id": "x.y", "version": "1.0.0"}]))  # fmt: skip
    caps = frozenset({("text.summarize", "1.2.0")})
    assert picker.pick([gated, foreign], running={}, free_slots=2, capabilities=caps, now=NOW) is None
    picker.set_policy({"classes": {"normal": 1}, "default_class": "normal"})
    assert picker.policy["default_class"] == "normal"


# --- a slot's context: budget and side effects (MWP-WRK-011, MWP-WRK-031) ------------------------


class Harness:
    """One slot served the way ``Worker`` serves it, without a connection."""

    def __init__(self, store: Store, epoch: int = 1, item: str = "urn:uuid:dddddddd-0000-4000-8000-000000000000"):
        key = Key.generate(("agent", bare(ME, "agentId")), bare(ORG, "organizationId"))
        self.worker = Worker(portal="http://127.0.0.1:9", identity=Identity(ME, ORG, key), store=store)
        self.slot = _Slot(group=GROUP, workitem=item, ownership_epoch=epoch, revision=3, lease_id=ex.LEASE_ID)
        self.port = _Port()
        self.ctx = SlotContext(
            agent=ME, group=GROUP, workitem=item, mission={"id": MISSION, "group": GROUP}, contract=contract(),
            ownership_epoch=epoch, attempt=1, checkpoints=[], usage={}, lease=ex.lease(), port=self.port,
        )  # fmt: skip

    async def run(self, fn: Callable[[SlotContext], Coroutine[Any, Any, Any]]) -> Any:
        self.port = self.ctx._port = _Port()  # a queue belongs to one event loop; each run has its own
        task = asyncio.ensure_future(fn(self.ctx))
        while True:
            getter = asyncio.ensure_future(self.port._queue.get())
            done, _ = await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                return task.result()
            op, args, fut = getter.result()
            try:
                fut.set_result(await self.worker._serve_one(self.slot, self.ctx, op, args))
            except Exception as exc:
                fut.set_exception(exc)


@pytest.fixture
def harness(open_store: Callable[..., Store]) -> Harness:
    return Harness(open_store())


def test_the_idempotency_key_is_derived_from_mission_item_epoch_and_operation_MWP_WRK_031(harness: Harness) -> None:
    key = harness.ctx.idempotency_key("send-report")
    assert key == attempt_key(MISSION, harness.ctx.workitem, 1, "send-report")
    assert key != harness.ctx.idempotency_key("send-other")
    assert key != Harness(harness.worker.store, epoch=2).ctx.idempotency_key("send-report")


def test_a_side_effect_is_dispatched_once_and_its_receipt_kept_MWP_WRK_031(harness: Harness) -> None:
    calls: list[str] = []

    async def send(key: str) -> dict[str, Any]:
        calls.append(key)
        return {"message_id": "m-1"}

    async def twice(ctx: SlotContext) -> list[Any]:
        return [await ctx.side_effect("send-report", send), await ctx.side_effect("send-report", send)]

    assert asyncio.run(harness.run(twice)) == [{"message_id": "m-1"}] * 2
    key = harness.ctx.idempotency_key("send-report")
    assert calls == [key]
    assert harness.worker.store.side_effect(key) == ("done", {"message_id": "m-1"}, 1)


def test_the_intent_is_durable_before_dispatch_MWP_WRK_031(harness: Harness) -> None:
    seen: list[Any] = []

    async def send(key: str) -> str:
        seen.append(harness.worker.store.side_effect(key))  # what a crash right now would leave
        return "ok"

    asyncio.run(harness.run(lambda ctx: ctx.side_effect("op", send)))
    assert seen == [("intent", None, 1)]


def test_an_uncertain_outcome_is_reconciled_before_a_retry_MWP_WRK_031(harness: Harness) -> None:
    remote: dict[str, str] = {}  # the external system, which did apply the first call

    async def flaky_send(key: str) -> str:
        remote[key] = "applied"
        raise TimeoutError("no answer")

    async def send(key: str) -> str:
        raise AssertionError("must not dispatch again: reconciliation found the effect")

    async def lookup(key: str) -> dict[str, str] | None:
        return {"found": remote[key]} if key in remote else None

    with pytest.raises(TimeoutError):
        asyncio.run(harness.run(lambda ctx: ctx.side_effect("pay", flaky_send)))
    key = harness.ctx.idempotency_key("pay")
    assert harness.worker.store.side_effect(key) == ("uncertain", None, 1)
    got = asyncio.run(harness.run(lambda ctx: ctx.side_effect("pay", send, reconcile=lookup)))
    assert got == {"found": "applied"}
    assert harness.worker.store.side_effect(key) == ("done", {"found": "applied"}, 1)


def test_an_effect_that_did_not_happen_is_dispatched_again_under_the_same_key_MWP_WRK_031(
    open_store: Callable[..., Store], tmp_path: Path
) -> None:
    store = open_store()
    first = Harness(store)
    key = first.ctx.idempotency_key("pay")
    # A crash between intent and receipt: the row says "intent", nothing settled.
    store.side_effect_intent(key, group=GROUP, workitem=first.ctx.workitem, ownership_epoch=1, name="pay")
    keys: list[str] = []

    async def send(k: str) -> str:
        keys.append(k)
        return "paid"

    async def lookup(k: str) -> None:
        return None  # the external system never saw it

    assert asyncio.run(first.run(lambda ctx: ctx.side_effect("pay", send, reconcile=lookup))) == "paid"
    assert keys == [key]
    assert store.side_effect(key) == ("done", "paid", 2)


def test_side_effects_and_charges_stay_within_the_slots_budget(harness: Harness) -> None:
    async def many(ctx: SlotContext) -> int:
        async def ok(key: str) -> str:
            return key[:4]

        await ctx.side_effect("a", ok)
        await ctx.side_effect("b", ok)
        with pytest.raises(BudgetExceeded) as info:
            await ctx.side_effect("c", ok)  # the contract allows 2 side effects
        assert info.value.dimension == "externalActions"
        ctx.charge(financialMicrounits=6_000_000)
        with pytest.raises(BudgetExceeded):
            ctx.charge(financialMicrounits=5_000_000)  # 11 of 10 EUR
        return len(ctx._take_usage())

    assert asyncio.run(harness.run(many)) == 2  # both dimensions reported with the next checkpoint
    assert harness.worker.store.side_effect(harness.ctx.idempotency_key("c")) is None  # refused before the intent


def test_tools_outside_the_contract_are_refused_and_calls_count_against_the_budget(harness: Harness) -> None:
    limited = contract(allowedResources=[{"resource": "urn:example:search", "operations": ["search"]}],
                       budget={"currency": "EUR", "toolCallLimit": 2})  # fmt: skip
    ctx = SlotContext(
        agent=ME, group=GROUP, workitem="w", mission={"id": MISSION}, contract=limited, ownership_epoch=1, attempt=1,
        checkpoints=[], usage={"toolCalls": 1}, lease=ex.lease(), port=harness.port,
    )  # fmt: skip
    with pytest.raises(PermissionError):
        ctx.use_tool("shell")
    ctx.use_tool("search")  # 2 of 2 with the call the log already counts
    with pytest.raises(BudgetExceeded):
        ctx.use_tool("search")
    assert ctx.budget_left("toolCalls") == 0 and ctx.budget_left("modelTokens") is None


def test_side_effect_rows_survive_a_rebuild(harness: Harness) -> None:
    async def once(ctx: SlotContext) -> Any:
        async def ok(key: str) -> str:
            return "r"

        return await ctx.side_effect("x", ok)

    asyncio.run(harness.run(once))
    harness.worker.store.rebuild()
    assert harness.worker.store.side_effect(harness.ctx.idempotency_key("x")) == ("done", "r", 1)


# --- configuration ---------------------------------------------------------------------------


def test_config_and_a_design_4_key_file_load(tmp_path: Path) -> None:
    key = Key.generate(("agent", bare(ME, "agentId")), bare(ORG, "organizationId"))
    key.write(tmp_path / "k.json")
    (tmp_path / "w.toml").write_text(
        '[worker]\nportal = "http://h:1/"\nkey_file = "k.json"\nstore = "s.db"\nslots = 3\n'
    )
    config = WorkerConfig.load(tmp_path / "w.toml")
    assert (config.portal, config.slots, config.store) == ("http://h:1", 3, tmp_path / "s.db")
    identity = Identity.from_key_file(config.key_file)
    assert (identity.agent_id, identity.organization, identity.key.key_id) == (ME, ORG, key.key_id)
    (tmp_path / "bad.toml").write_text('[worker]\nportal = "x"\nkey_file = "k"\nstore = "s"\ncolour = "red"\n')
    with pytest.raises(Fatal):
        WorkerConfig.load(tmp_path / "bad.toml")
    (tmp_path / "k2.json").write_text("{}")
    with pytest.raises(Fatal):
        Identity.from_key_file(tmp_path / "k2.json")
    human = Key.generate(("human", bare(ME, "id")), bare(ORG, "organizationId"))
    human.write(tmp_path / "h.json")
    with pytest.raises(Fatal, match="agent"):
        Identity.from_key_file(tmp_path / "h.json")
