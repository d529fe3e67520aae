"""One-shot Cooperation Override Grants (PROTOCOL §15.1, §20) through the REST binding:
issued only by the MissionOwner or the Organization's policy service, cited by
``cooperationOverrideGrantId``, checked against the Mission, Group, actor, kind and
Action ID of the Command and the policy it exceeds, consumed with the accepted target, and both
issuance and consumption in the Policy Log."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from governance.models import CooperationOverrideGrant
from missions.authority import accept
from missions.commands import service_command
from missions.models import PolicyLogEntry
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey, Because, refused
from tests.workitems.flow import COORDINATOR_EPOCH, Flow, contract, stamp
from tests.workitems.test_runaway_controls import set_policy

pytestmark = pytest.mark.usefixtures("rest")

GRANT = "policy.grant_cooperation_override"
LIMITED = Because(ErrorCode.RATE_LIMITED, "cooperation-limit")


def override(flow: Flow, by: AgentKey, action_id: str, **changes: Any) -> str:
    payload = {
        "grantId": urn(uuid.uuid4()),
        "policyName": "queued_work_items",
        "beneficiary": flow.coordinator.actor,
        "targetCommandKind": "work.authorize",
        "targetActionId": urn(action_id),
        "reason": "the survey needs a third WorkItem waiting",
        "expiresAt": stamp(datetime.now(UTC) + timedelta(hours=1)),
        **changes,
    }
    by.send(GRANT, flow.group, payload)
    return str(payload["grantId"])[9:]


def authorize_document(flow: Flow, action_id: str, grant_id: str | None, who: AgentKey | None = None) -> dict[str, Any]:
    who = who or flow.coordinator
    item = str(uuid.uuid4())
    payload = {"workItemId": urn(item), "contract": contract(goal=f"Part {item}")}
    kw: dict[str, Any] = {"work_item_id": item, "action_id": action_id, "cooperation_override_grant_id": grant_id}
    if who is flow.coordinator:
        kw["coordinator_epoch"] = COORDINATOR_EPOCH
    return who.command("work.authorize", flow.group, payload, **kw)


@pytest.fixture
def full(flow: Flow, org: dict[str, str]) -> Flow:
    """The Mission at its queued_work_items limit of 2."""
    set_policy(flow.owner, org, {"queued_work_items": {"hard": 2}})
    flow.authorize()
    flow.authorize()
    return flow


def test_the_mission_owner_issues_a_grant_recorded_in_the_policy_log_spec_20(full: Flow) -> None:
    action = str(uuid.uuid4())
    grant_id = override(full, full.owner, action)
    row = CooperationOverrideGrant.objects.get(id=grant_id)
    assert (str(row.target_action_id), row.target_kind, str(row.beneficiary_id)) == (
        action,
        "work.authorize",
        full.coordinator.id,
    )
    assert (str(row.approver_id), row.consumed_at) == (full.owner.id, None)
    (issued,) = PolicyLogEntry.objects.filter(kind="override_issued")
    assert issued.reference == urn(grant_id) and issued.actor == full.owner.id


@pytest.mark.parametrize("who", ["coordinator", "worker"])
def test_only_the_mission_owner_or_policy_issues_a_grant_spec_20(full: Flow, who: str) -> None:
    refused(ErrorCode.AUTH_FORBIDDEN, override, full, getattr(full, who), str(uuid.uuid4()))
    assert not CooperationOverrideGrant.objects.exists()


def test_the_organization_policy_service_issues_a_grant_spec_20(full: Flow, org: dict[str, str]) -> None:
    action = str(uuid.uuid4())
    payload = {
        "grantId": urn(uuid.uuid4()), "policyName": "queued_work_items", "beneficiary": full.coordinator.actor,
        "targetCommandKind": "work.authorize", "targetActionId": urn(action), "reason": "policy escalation",
        "expiresAt": stamp(datetime.now(UTC) + timedelta(hours=1)),
    }  # fmt: skip
    accept(service_command(GRANT, full.group, payload, organization_id=org["id"]))
    grant_id = str(payload["grantId"])[9:]
    assert CooperationOverrideGrant.objects.get(id=grant_id).approver_type == "service"
    full.coordinator.send_document(authorize_document(full, action, grant_id))


def test_the_cited_grant_lets_exactly_its_command_past_the_limit_once_spec_20(full: Flow) -> None:
    action = str(uuid.uuid4())
    refused(LIMITED, full.coordinator.send_document, authorize_document(full, action, None))
    grant_id = override(full, full.owner, action)
    document = authorize_document(full, action, grant_id)
    receipt = full.coordinator.send_document(document)
    (authorized,) = receipt["events"]
    row = CooperationOverrideGrant.objects.get(id=grant_id)
    assert row.consumed_at is not None and str(row.consumed_event_id) == authorized["eventId"][9:]
    (consumed,) = PolicyLogEntry.objects.filter(kind="override_consumed")
    assert (str(consumed.event_id), consumed.reference, str(consumed.action_id)) == (
        authorized["eventId"][9:],
        urn(grant_id),
        action,
    )
    # An idempotent retry of the accepted Command answers with its receipt (§15.1) ...
    again = full.coordinator.send_document(document)
    assert again["events"] == receipt["events"]
    # ... any other use fails: it is one-shot.
    refused(Because(ErrorCode.AUTH_FORBIDDEN, "override-consumed"), full.coordinator.send_document,
            authorize_document(full, str(uuid.uuid4()), grant_id))  # fmt: skip
    assert PolicyLogEntry.objects.filter(kind="override_consumed").count() == 1


@pytest.mark.parametrize("mismatch", ["action", "actor", "kind", "policy", "expired", "unknown"])
def test_a_grant_that_does_not_match_exactly_fails_spec_20(full: Flow, mismatch: str) -> None:
    action = str(uuid.uuid4())
    variants: dict[str, dict[str, Any]] = {
        "actor": {"beneficiary": full.worker.actor},
        "kind": {"targetCommandKind": "work.propose"},
        "policy": {"policyName": "proposal_rate"},
        "expired": {"expiresAt": stamp(datetime.now(UTC) + timedelta(seconds=1))},
    }
    changes = variants.get(mismatch, {})
    grant_id = override(full, full.owner, action, **changes)
    if mismatch == "expired":
        time.sleep(1.1)
    cited = {"action": str(uuid.uuid4()), "unknown": action}.get(mismatch, action)
    document = authorize_document(full, cited, str(uuid.uuid4()) if mismatch == "unknown" else grant_id)
    expected = {
        "policy": LIMITED,  # the grant escalates another policy than the one exceeded
        "expired": Because(ErrorCode.AUTH_FORBIDDEN, "override-expired"),
        "unknown": Because(ErrorCode.AUTH_FORBIDDEN, "override-unknown"),
    }.get(mismatch, Because(ErrorCode.AUTH_FORBIDDEN, "override-mismatch"))
    refused(expected, full.coordinator.send_document, document)
    assert CooperationOverrideGrant.objects.get(id=grant_id).consumed_at is None


def test_a_refused_target_leaves_the_grant_unconsumed_spec_20(full: Flow) -> None:
    action = str(uuid.uuid4())
    grant_id = override(full, full.owner, action)
    item = str(uuid.uuid4())
    bad = {"workItemId": urn(item), "contract": contract(contractVersion=2, goal="x")}
    document = full.coordinator.command(
        "work.authorize", full.group, bad, work_item_id=item, action_id=action,
        cooperation_override_grant_id=grant_id, coordinator_epoch=COORDINATOR_EPOCH,
    )  # fmt: skip
    refused(ErrorCode.INVALID_COMMAND, full.coordinator.send_document, document)
    assert CooperationOverrideGrant.objects.get(id=grant_id).consumed_at is None
    assert not PolicyLogEntry.objects.filter(kind="override_consumed").exists()
