"""The Coordinator lease (PROTOCOL §7.2, §15.1) and parent/child Missions (§14), through the REST binding.

§7.2 as the specification writes it: exactly one Coordinator Epoch is current;
only the current epoch authorizes or assigns WorkItems, accepts results,
submits the Mission or creates child Missions; a replacement gets a higher
epoch and a signed Context Package; the former Coordinator's later
coordination Commands are stale (AUTH_STALE_COORDINATOR); the Coordinator is
never the sole reviewer of its own output. §15.1 names the Commands that carry
the Coordinator Epoch.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from artifacts.models import ContextPackage
from missions.authority import accept
from missions.commands import group_service_command, service_command
from missions.handlers.missions import mission_document
from missions.models import Group, GroupEvent, Membership, Mission
from missions.tasks import expire_coordinator_leases
from mwportal.protocol import ErrorCode, catalogue, schemas
from mwportal.protocol.ids import urn
from mwportal.protocol.values import parse_timestamp
from mwportal.protocol.verification import sign_document
from tests.api.support import API, bearer, http
from tests.conftest import AgentKey, group_revision, make_agent, refused
from tests.core.mission_support import (
    epoch_of,
    flow_fixture,  # noqa: F401  (the flow fixture)
    held,
    rest_fixture,  # noqa: F401  (every Command over REST)
    status,
    verified,
)
from tests.workitems.flow import BASIS, Flow, contract, give_card, stamp

PUBLISH = "ext.mwportal.context.package_publish"
EXPIRE = "ext.mwportal.mission.coordinator_lease_expire"
# §15.1: the Agent Commands whose authority derives from the Coordinator lease.
LEASE_KINDS = [
    "mission.renew_coordinator",
    "mission.submit_for_approval",
    "mission.create_child",
    "membership.grant_delegation",
    "work.accept_result",
    "mission.terminate",
]


def renew(by: AgentKey, group: str, epoch: int | None = None, seconds: int | None = None) -> dict[str, Any]:
    payload = {"leaseSeconds": seconds} if seconds else {}
    return by.send(
        "mission.renew_coordinator", group, payload, coordinator_epoch=epoch or epoch_of(group),
        expected_revision=group_revision(group),
    )  # fmt: skip


def assign(by: AgentKey, group: str, replacement: AgentKey, seconds: int = 600) -> dict[str, Any]:
    payload = {"coordinatorId": replacement.urn, "leaseSeconds": seconds}
    return by.send("mission.assign_coordinator", group, payload, expected_revision=group_revision(group))


def publish_package(flow: Flow) -> dict[str, Any]:
    """The Coordinator's signed Context Package of the whole Group log (§13.3)."""
    events = list(
        GroupEvent.objects.filter(group_id=flow.group).order_by("sequence").values_list("event_id", flat=True)
    )
    doc = {
        "contextPackageId": urn(uuid.uuid4()), "version": 1, "missionId": urn(flow.mission), "groupId": urn(flow.group),
        "sourceEventRange": {"fromSequence": 1, "toSequence": len(events), "eventIds": [urn(e) for e in events]},
        "artifactHashes": [], "summary": "Survey summary under way; one WorkItem verified.",
        "decisions": [{"description": "summarise the 2026 survey", "sourceEventIds": [urn(events[0])]}],
        "constraints": ["no personal data leaves the Group"], "unresolvedQuestions": [],
        "generatedBy": flow.coordinator.actor, "generatedAt": stamp(),
    }  # fmt: skip
    signed = sign_document(doc, key_id=flow.coordinator.key.key_id, seed=flow.coordinator.key.seed,
                           profile="context-package")  # fmt: skip
    flow.coordinator.send(PUBLISH, flow.group, {"contextPackage": signed}, coordinator_epoch=epoch_of(flow.group))
    return signed


@pytest.fixture
def cora(org: dict[str, str]) -> AgentKey:
    """A replacement Coordinator with her Agent Card (a lease pins one, §6.1)."""
    return give_card(make_agent("acme", "Cora Coordinator", ["coordinator"]))


def test_mission_create_grants_epoch_1_lease_7_2(flow: Flow) -> None:
    mission = Mission.objects.get(id=flow.mission)
    assert (str(mission.coordinator_id), mission.coordinator_epoch) == (flow.coordinator.id, 1)
    assert mission.coordinator_lease_expires_at is not None and mission.coordinator_lease_id is not None
    document = mission_document(flow.group)
    assert document is not None and document["coordinator"]["coordinatorEpoch"] == 1
    assert document["coordinator"]["leaseId"] == urn(str(mission.coordinator_lease_id))


def test_renewal_by_the_current_coordinator_moves_the_expiry_7_2(flow: Flow) -> None:
    asked = datetime.now(UTC)
    renew(flow.coordinator, flow.group, seconds=7200)
    after = Mission.objects.get(id=flow.mission).coordinator_lease_expires_at
    assert after is not None and timedelta(seconds=7200) <= after - asked < timedelta(seconds=7260)
    renewed = GroupEvent.objects.get(group_id=flow.group, type="mission.coordinator.renewed").body
    assert renewed["coordinatorEpoch"] == 1
    assert parse_timestamp(renewed["leaseExpiresAt"]) == parse_timestamp(stamp(after))


def test_renewal_with_another_epoch_or_by_another_agent_is_stale_7_2(flow: Flow) -> None:
    refused(ErrorCode.AUTH_STALE_COORDINATOR, renew, flow.coordinator, flow.group, 2)
    refused(ErrorCode.AUTH_STALE_COORDINATOR, renew, flow.worker, flow.group, 1)
    refused(
        ErrorCode.SCHEMA_VALIDATION_FAILED,
        flow.coordinator.send,
        "mission.renew_coordinator",
        flow.group,
        {},
        expected_revision=group_revision(flow.group),
    )  # fmt: skip  (§15.1: it carries the epoch)


def test_an_expired_lease_refuses_coordination_until_a_replacement_7_2(flow: Flow, cora: AgentKey) -> None:
    item = verified(flow)
    assert flow.item(item).state == "verified"
    publish_package(flow)
    renew(flow.coordinator, flow.group, seconds=1)
    time.sleep(1.2)
    refused(ErrorCode.WORK_LEASE_EXPIRED, flow.authorize)
    refused(ErrorCode.WORK_LEASE_EXPIRED, renew, flow.coordinator, flow.group)
    assert expire_coordinator_leases() == 1  # the beat records it, as the control plane's Command
    assert expire_coordinator_leases() == 0  # once per epoch
    expired = GroupEvent.objects.get(group_id=flow.group, type=EXPIRE.replace("_expire", "_expired")).body
    assert (expired["coordinatorEpoch"], expired["coordinatorId"]) == (1, flow.coordinator.urn)
    assign(flow.owner, flow.group, cora)
    Flow({"group": flow.group, "mission": flow.mission}, flow.owner, cora, flow.worker, flow.worker2).send(
        cora, "work.authorize", str(uuid.uuid4()), {"contract": contract(goal="Fresh start")}, coordinator_epoch=2
    )


def test_the_beat_leaves_a_live_lease_alone_7_2(flow: Flow) -> None:
    assert expire_coordinator_leases() == 0
    command = group_service_command(EXPIRE, flow.group, {"coordinatorEpoch": 1},
                                    expected_revision=group_revision(flow.group))  # fmt: skip
    refused(ErrorCode.INVALID_STATE_TRANSITION, accept, command)


def test_a_replacement_gets_a_higher_epoch_and_a_signed_context_package_7_2(flow: Flow, cora: AgentKey) -> None:
    item = verified(flow)
    package = publish_package(flow)
    old_epoch = Membership.objects.get(group_id=flow.group, agent_id=flow.coordinator.id).epoch
    assign(flow.owner, flow.group, cora)
    mission = Mission.objects.get(id=flow.mission)
    assert (str(mission.coordinator_id), mission.coordinator_epoch) == (cora.id, 2)
    assigned = GroupEvent.objects.get(group_id=flow.group, type="mission.coordinator.assigned").body
    assert (assigned["coordinatorEpoch"], assigned["previousCoordinatorId"]) == (2, flow.coordinator.urn)
    assert assigned["contextPackageId"] == package["contextPackageId"]
    # The replacement reads the signed package over REST, as a member of the Group.
    url = f"{API}/groups/{urn(flow.group)}/context-packages/{package['contextPackageId']}"
    response = http().get(url, **bearer(cora.extra["token"]))
    assert response.status_code == 200, response.content[:300]
    stored = ContextPackage.objects.get(package=package["contextPackageId"].removeprefix("urn:uuid:"))
    assert stored.document == package
    # The former Coordinator lost the role; its Membership Epoch moved.
    old = Membership.objects.get(group_id=flow.group, agent_id=flow.coordinator.id)
    assert "coordinator" not in old.roles or not old.active
    assert old.epoch == old_epoch + 1
    document = mission_document(flow.group)
    assert document is not None and document["coordinator"]["agentId"] == cora.urn
    schemas.validate("mission", document)
    assert flow.item(item).state == "verified"  # its Events stay valid history


def test_the_former_coordinators_commands_are_stale_after_replacement_7_2(flow: Flow, cora: AgentKey) -> None:
    submitted_item = flow.drive_to("submitted")
    hashes = [held(flow.group, flow.worker)]
    publish_package(flow)
    assign(flow.owner, flow.group, cora)
    # The former Coordinator signs with what it last knew: Membership Epoch 1, Coordinator Epoch 1.
    old = {"membership_epoch": 1, "coordinator_epoch": 1}
    body = {"contract": contract(goal="Late plan")}
    refused(ErrorCode.AUTH_STALE_COORDINATOR, flow.send, flow.coordinator, "work.authorize", str(uuid.uuid4()), body,
            **old)  # fmt: skip
    evidence = {"evidence": flow.evidence(submitted_item, flow.coordinator)}
    refused(ErrorCode.AUTH_STALE_COORDINATOR, flow.send, flow.coordinator, "work.accept_result", submitted_item,
            evidence, **old)  # fmt: skip
    refused(ErrorCode.AUTH_STALE_COORDINATOR, flow.coordinator.send, "mission.submit_for_approval", flow.group,
            {"artifactHashes": hashes}, **old)  # fmt: skip
    refused(ErrorCode.AUTH_STALE_COORDINATOR, flow.coordinator.send, "mission.renew_coordinator", flow.group, {},
            expected_revision=group_revision(flow.group), **old)  # fmt: skip
    # The replacement with the old epoch is stale too; with its own it is the Coordinator.
    new = Flow({"group": flow.group, "mission": flow.mission}, flow.owner, cora, flow.worker, flow.worker2)
    item = str(uuid.uuid4())
    refused(ErrorCode.AUTH_STALE_COORDINATOR, new.send, cora, "work.authorize", item,
            {"contract": contract(goal="Second pass")}, coordinator_epoch=1)  # fmt: skip
    new.send(cora, "work.authorize", item, {"contract": contract(goal="Second pass")}, coordinator_epoch=2)
    new.send(cora, "work.accept_result", submitted_item,
             {"evidence": new.evidence(submitted_item, cora)}, coordinator_epoch=2)  # fmt: skip
    assert flow.item(submitted_item).state == "verified"
    renew(cora, flow.group, 2)


@pytest.mark.parametrize("who", ["coordinator", "worker"])
def test_only_the_mission_owner_or_policy_appoints_a_replacement_7_2(flow: Flow, cora: AgentKey, who: str) -> None:
    publish_package(flow)
    by = flow.coordinator if who == "coordinator" else flow.worker
    refused(ErrorCode.AUTH_FORBIDDEN, assign, by, flow.group, cora)
    assert epoch_of(flow.group) == 1
    payload = {"coordinatorId": cora.urn}
    org = str(Group.objects.values_list("organization_id", flat=True).get(id=flow.group))
    accept(service_command("mission.assign_coordinator", flow.group, payload, organization_id=org,
                           expected_revision=group_revision(flow.group)))  # fmt: skip
    assert epoch_of(flow.group) == 2


def test_a_replacement_needs_a_context_package_and_another_agent_7_2(flow: Flow, cora: AgentKey) -> None:
    refused(ErrorCode.INVALID_STATE_TRANSITION, assign, flow.owner, flow.group, cora)
    publish_package(flow)
    refused(ErrorCode.INVALID_COMMAND, assign, flow.owner, flow.group, flow.coordinator)
    assert epoch_of(flow.group) == 1


def _registered(kind: str) -> Any:
    from missions.registry import spec_for

    missing = spec_for(kind) is None
    return pytest.param(kind, marks=pytest.mark.skipif(missing, reason=f"{kind} has no handler in this build"))


@pytest.mark.parametrize("kind", [_registered(kind) for kind in LEASE_KINDS])
def test_lease_commands_carry_the_coordinator_epoch_15_1(flow: Flow, kind: str) -> None:
    """Without the epoch the Command is malformed; with a wrong one it is fenced before anything else."""
    payload = catalogue.command(kind).examples[0]  # a valid payload of the kind
    document = flow.coordinator.command(kind, flow.group, payload, coordinator_epoch=7)
    refused(ErrorCode.AUTH_STALE_COORDINATOR, flow.coordinator.send_document, document)
    bare = flow.coordinator.command(kind, flow.group, payload)
    refused(ErrorCode.SCHEMA_VALIDATION_FAILED, flow.coordinator.send_document, bare)
    assert status(flow.group) == "active"


def test_work_authorize_and_offer_as_coordinator_carry_the_current_epoch_7_2(flow: Flow) -> None:
    item = str(uuid.uuid4())
    refused(ErrorCode.AUTH_STALE_COORDINATOR, flow.send, flow.coordinator, "work.authorize", item,
            {"contract": contract()}, coordinator_epoch=None)  # fmt: skip
    flow.authorize(item_id=item)
    body = {"candidateAgentIds": [flow.worker.urn], "offerExpiresInSeconds": 600, "selectionBasis": BASIS}
    refused(
        ErrorCode.AUTH_STALE_COORDINATOR, flow.send, flow.coordinator, "work.offer", item, body, coordinator_epoch=2
    )
    flow.send(flow.coordinator, "work.offer", item, body, coordinator_epoch=1)


def test_the_coordinator_is_never_the_sole_reviewer_of_its_own_output_7_2(flow: Flow) -> None:
    from tests.conftest import add_member

    add_member(flow.owner, flow.group, flow.coordinator, ["coordinator", "worker"])  # it may execute work (§7.2)
    add_member(flow.owner, flow.group, flow.worker2, ["worker", "reviewer"])
    item = flow.authorize()
    flow.offer(item, [flow.coordinator])
    flow.accept(item, flow.coordinator)
    flow.start(item, flow.coordinator)
    flow.submit(item, flow.coordinator)
    own = flow.evidence(item, flow.coordinator)
    refused(ErrorCode.AUTH_FORBIDDEN, flow.send, flow.coordinator, "work.accept_result", item, {"evidence": own})
    independent = flow.evidence(item, flow.worker2, type_="human_review")
    flow.send(flow.coordinator, "work.accept_result", item, {"evidence": own + independent})
    assert flow.item(item).state == "verified"


def test_the_replacement_becomes_the_mission_owner_of_the_former_coordinators_children_7_2_14(
    flow: Flow, cora: AgentKey
) -> None:
    item = flow.authorize()
    child_mission, child_group = flow.create_child(item)
    publish_package(flow)
    assign(flow.owner, flow.group, cora)
    owners = Membership.objects.filter(group_id=child_group, active=True)
    assert [str(m.agent_id) for m in owners if "mission_owner" in m.roles] == [cora.id]
    document = mission_document(child_group)
    assert document is not None and document["missionOwner"] == cora.actor
    schemas.validate("mission", document)
    # The former Coordinator no longer owns the child; the replacement does (§14).
    cancel = {"reason": "replanned"}
    refused(ErrorCode.GROUP_NOT_FOUND, flow.coordinator.send, "mission.cancel", child_group, cancel,
            expected_revision=group_revision(child_group), membership_epoch=1)  # fmt: skip
    cora.send("mission.cancel", child_group, cancel, expected_revision=group_revision(child_group))
    assert status(child_group) == "cancelled"
    assert Mission.objects.get(id=child_mission).status == "cancelled"
