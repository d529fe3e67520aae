"""Real threads against PostgreSQL: one Cooperation Override Grant, cited by concurrent
Commands, lets exactly one transition through (PROTOCOL §15.1, §20)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from governance.models import CooperationOverrideGrant
from missions.models import GroupEvent, PolicyLogEntry
from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.ids import urn
from tests.conftest import ON_POSTGRES
from tests.core.test_races import run_threads
from tests.workitems.flow import COORDINATOR_EPOCH, Flow, contract, stamp
from tests.workitems.test_runaway_controls import set_policy

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="races need PostgreSQL row locks (MWP_DATABASE_URL=postgres://...)"),
    pytest.mark.django_db(transaction=True),
]


def test_two_commands_citing_one_grant_exactly_one_wins_spec_20(flow: Flow, org: dict[str, str]) -> None:
    set_policy(flow.owner, org, {"queued_work_items": {"hard": 1}})
    flow.authorize()  # the Mission is at its limit
    action = str(uuid.uuid4())
    grant_id = str(uuid.uuid4())
    flow.owner.send(
        "policy.grant_cooperation_override", flow.group,
        {
            "grantId": urn(grant_id), "policyName": "queued_work_items", "beneficiary": flow.coordinator.actor,
            "targetCommandKind": "work.authorize", "targetActionId": urn(action), "reason": "one more",
            "expiresAt": stamp(datetime.now(UTC) + timedelta(hours=1)),
        },
    )  # fmt: skip
    # Two different Commands both cite the grant under its Action ID, four copies of each.
    items = [str(uuid.uuid4()), str(uuid.uuid4())]
    documents = [
        flow.coordinator.command(
            "work.authorize", flow.group, {"workItemId": urn(item), "contract": contract(goal=f"Part {item}")},
            work_item_id=item, action_id=action, cooperation_override_grant_id=grant_id,
            coordinator_epoch=COORDINATOR_EPOCH,
        )
        for item in items
    ]  # fmt: skip
    results = run_threads(8, lambda i: flow.coordinator.send_document(documents[i % 2]))
    accepted = {i % 2 for i, r in enumerate(results) if isinstance(r, dict)}
    assert len(accepted) == 1, results  # only one of the two Commands, however many copies
    (winner,) = accepted
    receipts = [r for i, r in enumerate(results) if i % 2 == winner]
    assert all(isinstance(r, dict) for r in receipts), receipts
    assert len({r["events"][0]["eventId"] for r in receipts if isinstance(r, dict)}) == 1  # one transition
    losers = [r for i, r in enumerate(results) if i % 2 != winner]
    assert all(isinstance(r, ProtocolError) for r in losers), losers
    assert {r.code for r in losers if isinstance(r, ProtocolError)} <= {
        ErrorCode.ACTION_ID_COLLISION, ErrorCode.AUTH_FORBIDDEN
    }, losers  # fmt: skip
    assert GroupEvent.objects.filter(group_id=flow.group, type="work.authorized", aggregate_id__in=items).count() == 1
    row = CooperationOverrideGrant.objects.get(id=grant_id)
    assert row.consumed_at is not None
    assert PolicyLogEntry.objects.filter(kind="override_consumed", reference=urn(grant_id)).count() == 1
