"""Everything the Group Authority sends about WorkItems validates against the bundle's
normative schemas (issue 18: "validate every frame and document the server sends"):
the Event documents (§15.2) and the objects they embed, the Work Contract (§10.1),
the WorkItem (§10), leases (§11.3), Evidence (§13.2) and Approvals (§12)."""

from __future__ import annotations

from typing import Any

from missions.models import GroupEvent
from missions.snapshots import group_state
from tests.protocol.normative import normative_problems, require_bundle
from tests.workitems.flow import Flow, contract

# Where each WorkItem Event kind embeds a normative object: (payload member, schema, is a list).
EMBEDDED: dict[str, list[tuple[str, str, bool]]] = {
    "work.authorized": [("workItem", "work-item", False)],
    "work.offer.created": [("contract", "work-contract", False)],
    "work.offer.accepted": [("ownershipLease", "lease", False)],
    "work.contract.revised": [("contract", "work-contract", False)],
    "work.started": [("executionLease", "lease", False)],
    "work.progressed": [("executionLease", "lease", False)],
    "work.submitted": [("evidence", "evidence", True)],
    "work.result.accepted": [("evidence", "evidence", True)],
    "work.failed": [("evidence", "evidence", True)],
    "approval.execution.granted": [("approval", "approval", False)],
    "mission.approved": [("approval", "approval", False)],
}


def problems_of(event: GroupEvent) -> list[str]:
    document = event.as_wire()
    found = [f"{event.type} event: {p}" for p in normative_problems("event", document)]
    for member, schema, many in EMBEDDED.get(event.type, []):
        if member not in document["payload"]:
            continue
        values: list[Any] = document["payload"][member] if many else [document["payload"][member]]
        for value in values:
            found += [f"{event.type} {member}: {p}" for p in normative_problems(schema, value)]
    return found


def test_every_workitem_event_and_embedded_object_is_normative_spec_15_2(flow: Flow) -> None:
    require_bundle()
    gated = flow.authorize(contract(sideEffectRisk="external", executionApproval="human_required"))
    flow.offer(gated)
    flow.accept(gated)
    flow.approve(gated)
    flow.start(gated)
    flow.renew(gated)
    flow.checkpoint(gated)
    flow.drive_to("verified")
    flow.drive_to("blocked")
    failed = flow.drive_to("active")
    flow.lease_command(
        "work.fail", failed, {"reason": "bad input", "evidence": flow.evidence(failed, flow.worker, result="failed")}
    )
    flow.fail(flow.drive_to("offered"))
    events = GroupEvent.objects.filter(group_id=flow.group).order_by("sequence")
    kinds = {e.type for e in events}
    assert {"work.progressed", "approval.execution.granted", "work.result.accepted", "work.failed"} <= kinds
    assert [p for e in events for p in problems_of(e)] == []


def test_the_snapshot_state_objects_are_normative_spec_16(flow: Flow) -> None:
    require_bundle()
    flow.drive_to("active")
    flow.drive_to("offered")
    flow.drive_to("submitted")
    state = group_state(flow.group)
    found = [p for item in state["workItems"] for p in normative_problems("work-item", item)]
    found += [p for lease in state["executionLeases"] for p in normative_problems("lease", lease)]
    assert found == []


def test_the_flow_contract_is_normative_spec_10_1() -> None:
    require_bundle()
    assert normative_problems("work-contract", contract()) == []
