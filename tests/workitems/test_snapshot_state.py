"""What a Group snapshot's state carries of its WorkItems (PROTOCOL §16): normative
WorkItems with their owner and offers, the start-by deadlines and execution
Approvals in force, the active Execution Leases and the latest checkpoints, so
a Worker restored from it alone can renew the lease it holds, see the offers
made to it and resume from the latest checkpoint."""

from __future__ import annotations

from typing import Any

from missions.snapshots import group_state, snapshot_now, state_hash
from mwportal.protocol import schemas
from mwportal.protocol.ids import urn
from tests.workitems.flow import Flow, checkpoint, contract, progress


def by_item(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {entry["workItemId"]: entry for entry in entries}


def test_the_state_carries_normative_workitems_leases_offers_and_checkpoints_spec_16(flow: Flow) -> None:
    active = flow.drive_to("active")
    offered = flow.drive_to("offered")
    resumed = flow.drive_to("active")
    flow.checkpoint(resumed)
    flow.start(resumed)
    flow.lease_command("work.checkpoint", resumed, {"checkpoint": checkpoint("two"), "progress": progress("two")})
    submitted = flow.drive_to("submitted")

    state = group_state(flow.group)
    items = by_item(state["workItems"])
    for item in items.values():
        schemas.validate("work-item", item)
    assert items[urn(active)]["owner"]["agentId"] == flow.worker.urn
    assert items[urn(active)]["owner"]["ownershipEpoch"] == 1
    assert [o["agentId"] for o in items[urn(offered)]["offers"]] == [flow.worker.urn]
    assert items[urn(offered)]["offers"][0]["status"] == "pending"
    assert "owner" not in items[urn(offered)]
    assert items[urn(submitted)]["submission"]["evidenceIds"]

    leases = by_item(state["executionLeases"])
    for lease in leases.values():
        schemas.validate("lease", lease)
    assert leases[urn(active)]["leaseId"] == urn(flow.leases[active])
    assert "token" not in str(leases)  # the capability token never enters the log or a snapshot
    assert urn(resumed) not in leases  # a checkpoint releases the lease

    latest = by_item(state["checkpoints"])[urn(resumed)]
    assert latest["number"] == 2 and latest["checkpoint"]["phase"] == "two"
    assert latest["progress"]["currentPhase"] == "two"
    starts = by_item(state["ownershipLeases"])
    assert starts[urn(resumed)]["startBy"] and urn(offered) not in starts


def test_the_state_lists_execution_approvals_in_force_spec_12_spec_16(flow: Flow) -> None:
    item = flow.authorize(contract(executionApproval="human_required", sideEffectRisk="external"))
    flow.offer(item)
    flow.accept(item)
    assert group_state(flow.group)["executionApprovals"] == []
    flow.approve(item)
    assert group_state(flow.group)["executionApprovals"] == [{"workItemId": urn(item), "contractVersion": 1}]


def test_the_snapshot_commits_to_this_state_spec_16(flow: Flow) -> None:
    flow.drive_to("active")
    expected = state_hash(group_state(flow.group))
    snapshot = snapshot_now(flow.group)
    assert snapshot.document["stateHash"] == expected
