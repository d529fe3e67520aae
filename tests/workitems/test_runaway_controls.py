"""Runaway controls (PROTOCOL §20) through the REST binding: Organization limits on proposal
rate, queued and active WorkItems, delegation depth, duplicate and circular decomposition;
a soft threshold notifies the Coordinator, the hard limit is RATE_LIMITED with retry
information, and the Policy Log keeps both decisions."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from governance.models import CooperationPolicy
from missions.models import GroupEvent, PolicyLogEntry
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import urn
from tests.api.support import COMMANDS, error_of, http, post_json
from tests.conftest import AgentKey, Because, nothing_written, refused
from tests.workitems.flow import Flow, contract

pytestmark = pytest.mark.usefixtures("rest")

LIMITED = Because(ErrorCode.RATE_LIMITED, "cooperation-limit")
SOFT = "ext.mwportal.governance.soft_threshold_reached"

POLICY_SET = "ext.mwportal.governance.cooperation_policy_set"


def set_policy(person: AgentKey, org: dict[str, str], policy: dict[str, Any]) -> dict[str, Any]:
    """A person sets the Organization's cooperation policy (compare-and-set on its revision)."""
    row = CooperationPolicy.objects.filter(organization_id=org["id"]).first()
    revision = row.revision if row else 0
    return person.send(POLICY_SET, org["admin_group"], {"policy": policy}, expected_revision=revision)


def propose(flow: Flow, who: AgentKey, **changes: Any) -> dict[str, Any]:
    changes.setdefault("goal", f"Idea {uuid.uuid4()}")
    payload = {"proposalId": urn(uuid.uuid4()), "contract": contract(**changes)}
    return who.send("work.propose", flow.group, payload)


def authorize_under(flow: Flow, parent: str | None, goal: str) -> str:
    item = str(uuid.uuid4())
    payload: dict[str, Any] = {"contract": contract(goal=goal)}
    if parent is not None:
        payload["parentWorkItemId"] = urn(parent)
    flow.send(flow.coordinator, "work.authorize", item, payload)
    return item


def log(kind: str) -> list[PolicyLogEntry]:
    return list(PolicyLogEntry.objects.filter(kind=kind).order_by("pk"))


# --- the policy ----------------------------------------------------------------------------------


def test_a_person_sets_the_cooperation_policy_spec_20(flow: Flow, org: dict[str, str]) -> None:
    receipt = set_policy(flow.owner, org, {"proposal_rate": {"windowSeconds": 60, "soft": 1, "hard": 2}})
    (event,) = receipt["events"]
    assert event["kind"] == "ext.mwportal.governance.cooperation_policy_changed"
    assert [e.policy_name for e in log("policy_set")] == ["cooperation"]


def test_an_agent_cannot_set_the_cooperation_policy_spec_20(flow: Flow, org: dict[str, str]) -> None:
    payload = {"policy": {"proposal_rate": {"windowSeconds": 60, "hard": 1000}}}
    refused(ErrorCode.AUTH_FORBIDDEN, flow.coordinator.send, POLICY_SET, org["admin_group"], payload,
            expected_revision=0)  # fmt: skip


@pytest.mark.parametrize(
    "policy",
    [{"proposal_rate": {"soft": 1, "hard": 2}}, {"active_work_items": {"soft": 3, "hard": 2}}, {"flood": {"hard": 1}}],
    ids=["rate-without-window", "soft-above-hard", "unknown-limit"],
)
def test_a_malformed_policy_is_refused(flow: Flow, org: dict[str, str], policy: dict[str, Any]) -> None:
    refused(ErrorCode.SCHEMA_VALIDATION_FAILED, set_policy, flow.owner, org, policy)


# --- proposal rate -------------------------------------------------------------------------------


def test_the_proposal_rate_notifies_at_the_soft_threshold_and_limits_at_the_hard_one_spec_20(
    flow: Flow, org: dict[str, str]
) -> None:
    set_policy(flow.owner, org, {"proposal_rate": {"windowSeconds": 60, "soft": 2, "hard": 2}})
    first = propose(flow, flow.worker)
    assert [e["kind"] for e in first["events"]] == ["work.proposed"]
    second = propose(flow, flow.worker)
    assert [e["kind"] for e in second["events"]] == ["work.proposed", SOFT]
    notice = GroupEvent.objects.get(group_id=flow.group, type=SOFT).body
    assert notice == {"policyName": "proposal_rate", "count": 2, "soft": 2, "hard": 2, "actor": flow.worker.actor}
    (soft,) = log("soft_threshold")
    linked = second["events"][0]["eventId"][9:]
    assert (soft.policy_name, soft.actor, str(soft.event_id)) == ("proposal_rate", flow.worker.id, linked)
    # The third within the window: RATE_LIMITED, retryable, with the time until the window has room.
    document = flow.worker.command(
        "work.propose", flow.group, {"proposalId": urn(uuid.uuid4()), "contract": contract(goal="third")}
    )
    with nothing_written():
        error = error_of(post_json(http(), COMMANDS, document), 429, "RATE_LIMITED")
    assert 0 < error["retryAfterMs"] <= 60_000, error
    assert error["details"]["policyName"] == "proposal_rate" and error["details"]["limit"] == 2
    (hit,) = log("limit_hit")
    assert (hit.policy_name, str(hit.action_id), hit.command_kind) == (
        "proposal_rate",
        document["actionId"][9:],
        "work.propose",
    )
    propose(flow, flow.worker2)  # the rate is each actor's


# --- WorkItems per Mission ----------------------------------------------------------------------


def test_queued_work_items_per_mission_spec_20(flow: Flow, org: dict[str, str]) -> None:
    set_policy(flow.owner, org, {"queued_work_items": {"hard": 2}})
    flow.authorize()
    flow.authorize()
    refused(LIMITED, flow.authorize)
    assert [e.policy_name for e in log("limit_hit")] == ["queued_work_items"]


def test_queued_work_items_within_the_limit_are_authorized_spec_20(flow: Flow, org: dict[str, str]) -> None:
    set_policy(flow.owner, org, {"queued_work_items": {"hard": 3}})
    for _ in range(3):
        flow.authorize()
    assert log("limit_hit") == []


def test_active_work_items_per_mission_spec_20(flow: Flow, org: dict[str, str]) -> None:
    set_policy(flow.owner, org, {"active_work_items": {"hard": 1}})
    first, second = flow.authorize(), flow.authorize()
    flow.offer(first)
    refused(LIMITED, flow.offer, second)
    flow.cancel(first)
    flow.offer(second)  # room again


# --- decomposition ------------------------------------------------------------------------------


def test_delegation_depth_spec_20(flow: Flow, org: dict[str, str]) -> None:
    set_policy(flow.owner, org, {"delegation_depth": {"hard": 2}})
    root = authorize_under(flow, None, "the survey")
    child = authorize_under(flow, root, "the north")
    refused(LIMITED, authorize_under, flow, child, "the north-east")


def test_duplicate_decomposition_under_one_parent_spec_20(flow: Flow) -> None:
    root = authorize_under(flow, None, "the survey")
    authorize_under(flow, root, "Map the north")
    refused(LIMITED, authorize_under, flow, root, "  map THE north ")  # the same goal, spelled otherwise
    authorize_under(flow, root, "Map the south")
    other = authorize_under(flow, None, "the census")
    authorize_under(flow, other, "Map the north")  # under another parent it is new


def test_a_proposed_goal_counts_as_a_sibling_spec_20(flow: Flow) -> None:
    root = authorize_under(flow, None, "the survey")
    propose(flow, flow.worker, goal="Map the north")
    north = contract(goal="Map the north")
    payload = {"proposalId": urn(uuid.uuid4()), "contract": north, "parentWorkItemId": urn(root)}
    flow.worker.send("work.propose", flow.group, payload)
    refused(LIMITED, flow.worker2.send, "work.propose", flow.group, {**payload, "proposalId": urn(uuid.uuid4())})


def test_circular_decomposition_is_refused_spec_20(flow: Flow) -> None:
    root = authorize_under(flow, None, "the survey")
    child = authorize_under(flow, root, "the north")
    refused(LIMITED, authorize_under, flow, child, "The survey")


def test_a_workitem_cannot_be_its_own_parent_spec_20(flow: Flow) -> None:
    item = str(uuid.uuid4())
    payload = {"contract": contract(goal="itself"), "parentWorkItemId": urn(item)}
    refused(Because(ErrorCode.INVALID_COMMAND, "cyclic-decomposition"), flow.send, flow.coordinator,
            "work.authorize", item, payload)  # fmt: skip


# --- clarification rounds -----------------------------------------------------------------------


def test_unresolved_clarification_rounds_on_a_workitem_spec_20(flow: Flow, org: dict[str, str]) -> None:
    """An essential ambiguity (§10.1) opens a clarification round; beyond the hard limit of rounds
    still open on one WorkItem, another is RATE_LIMITED and the Policy Log keeps the decision."""
    from tests.workitems.test_ambiguity import raise_ambiguity

    set_policy(flow.owner, org, {"clarification_rounds": {"hard": 1}})
    item = flow.authorize()
    flow.offer(item, agents=[flow.worker, flow.worker2])
    raise_ambiguity(flow, item, flow.worker)
    refused(LIMITED, raise_ambiguity, flow, item, flow.worker2)
    assert [e.policy_name for e in log("limit_hit")] == ["clarification_rounds"]
    other = flow.authorize(contract(goal="another part"))
    flow.offer(other, agents=[flow.worker2])
    raise_ambiguity(flow, other, flow.worker2)  # the rounds are each WorkItem's
