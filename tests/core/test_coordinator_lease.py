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

import json
import stat
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from artifacts.models import ContextPackage
from missions.authority import accept
from missions.commands import group_service_command, service_command
from missions.handlers.missions import mission_document
from missions.models import Group, GroupEvent, Membership, Mission
from missions.tasks import expire_coordinator_leases
from mwportal.protocol import ErrorCode, catalogue, jcs, schemas
from mwportal.protocol.ids import urn
from mwportal.protocol.values import b64url_decode, parse_timestamp
from mwportal.protocol.verification import sign_document
from tests.api.support import API, bearer, http
from tests.conftest import AgentKey, Because, group_revision, make_agent, refused
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
PUBLISHED = "ext.mwportal.context.package_published"
RECONCILE = "ext.mwportal.mission.coordinator_reconcile"
ASSIGNED = "mission.coordinator.assigned"
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


def appointment(group: str) -> tuple[int, dict[str, Any]]:
    """The sequence and payload of the Group's latest ``mission.coordinator.assigned``."""
    event = GroupEvent.objects.filter(group_id=group, type=ASSIGNED).order_by("-sequence").first()
    assert event is not None
    return event.sequence, event.body


def head(group: str) -> int:
    return Group.objects.values_list("last_sequence", flat=True).get(id=group)


def reconcile(
    by: AgentKey, group: str, epoch: int | None = None, membership_epoch: int | None = None, **changes: Any
) -> dict[str, Any]:
    """The replacement cites the package its appointment named, processed through the head (§7.2)."""
    _, body = appointment(group)
    payload = {"contextPackageId": body["contextPackageId"], "contextPackageHash": body["contextPackageHash"],
               "throughSequence": head(group), **changes}  # fmt: skip
    fence = {"membership_epoch": membership_epoch} if membership_epoch else {}
    return by.send(RECONCILE, group, payload, coordinator_epoch=epoch or epoch_of(group), **fence)


def over_rest(path: str, by: AgentKey) -> dict[str, Any]:
    response = http().get(f"{API}/{path}", **bearer(by.extra["token"]))
    assert response.status_code == 200, response.content[:300]
    return dict(response.json())


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
    assert not ContextPackage.objects.filter(group_id=flow.group).exists()  # it dies without publishing one
    renew(flow.coordinator, flow.group, seconds=1)
    time.sleep(1.2)
    refused(ErrorCode.WORK_LEASE_EXPIRED, flow.authorize)
    refused(ErrorCode.WORK_LEASE_EXPIRED, renew, flow.coordinator, flow.group)
    assert expire_coordinator_leases() == 1  # the beat records it, as the control plane's Command
    assert expire_coordinator_leases() == 0  # once per epoch
    expired = GroupEvent.objects.get(group_id=flow.group, type=EXPIRE.replace("_expire", "_expired")).body
    assert (expired["coordinatorEpoch"], expired["coordinatorId"]) == (1, flow.coordinator.urn)
    assign(flow.owner, flow.group, cora)
    reconcile(cora, flow.group)
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
    # The replacement's package is a new version, generated now; the Coordinator's is the version before
    # it (§13.3: an update retains provenance to the previous version).
    url = f"groups/{urn(flow.group)}/context-packages/{assigned['contextPackageId']}"
    served = over_rest(url, cora)
    generated = served["contextPackage"]
    assert (generated["version"], generated["previousContextPackageId"]) == (2, package["contextPackageId"])
    assert generated["generatedBy"] != flow.coordinator.actor
    stored = ContextPackage.objects.get(package=assigned["contextPackageId"].removeprefix("urn:uuid:"))
    assert stored.document == generated and stored.previous_package is not None
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
    refused(ErrorCode.AUTH_STALE_COORDINATOR, reconcile, flow.coordinator, flow.group, epoch=1, membership_epoch=1)
    reconcile(cora, flow.group)
    new.send(cora, "work.authorize", item, {"contract": contract(goal="Second pass")}, coordinator_epoch=2)
    new.send(cora, "work.accept_result", submitted_item,
             {"evidence": new.evidence(submitted_item, cora)}, coordinator_epoch=2)  # fmt: skip
    assert flow.item(submitted_item).state == "verified"
    renew(cora, flow.group, 2)


@pytest.mark.parametrize("who", ["coordinator", "worker"])
def test_only_the_mission_owner_or_policy_appoints_a_replacement_7_2(flow: Flow, cora: AgentKey, who: str) -> None:
    by = flow.coordinator if who == "coordinator" else flow.worker
    refused(ErrorCode.AUTH_FORBIDDEN, assign, by, flow.group, cora)
    assert epoch_of(flow.group) == 1
    payload = {"coordinatorId": cora.urn}
    org = str(Group.objects.values_list("organization_id", flat=True).get(id=flow.group))
    accept(service_command("mission.assign_coordinator", flow.group, payload, organization_id=org,
                           expected_revision=group_revision(flow.group)))  # fmt: skip
    assert epoch_of(flow.group) == 2


def test_a_replacement_needs_a_context_package_and_another_agent_7_2(flow: Flow, cora: AgentKey) -> None:
    refused(ErrorCode.INVALID_COMMAND, assign, flow.owner, flow.group, flow.coordinator)
    assert epoch_of(flow.group) == 1
    assert not ContextPackage.objects.filter(group_id=flow.group).exists()  # a refused appointment publishes none
    assign(flow.owner, flow.group, cora)  # no package was published: the appointment generates one
    _, assigned = appointment(flow.group)
    package = ContextPackage.objects.get(group_id=flow.group)
    assert (assigned["contextPackageId"], assigned["contextPackageHash"]) == (
        urn(str(package.package)), f"sha256:{package.document_hash}")  # fmt: skip


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


def _packager(flow: Flow) -> dict[str, str]:
    """The Organization's context packager Agent, as the test knows it: registered with the Organization."""
    from missions.models import Agent

    org = Group.objects.values_list("organization_id", flat=True).get(id=flow.group)
    row = Agent.objects.get(organization_id=org, name="Context packager")
    assert row.kind == "agent"
    return {"type": "agent", "id": urn(str(row.id))}


def test_a_coordinator_that_never_published_is_replaced_with_a_generated_signed_package_7_2_13_3(
    flow: Flow, cora: AgentKey
) -> None:
    """§7.2: the replacement MUST receive a signed Context Package, though the dead Coordinator published none."""
    done = verified(flow, "Tabulate the answers")
    offered = flow.authorize(contract(goal="Chart the regional split"))
    flow.offer(offered)
    running = flow.authorize(contract(goal="Draft the conclusions"))
    flow.offer(running, [flow.worker2])
    flow.accept(running, flow.worker2)
    flow.start(running, flow.worker2)
    flow.submit(running, flow.worker2)
    artifact = held(flow.group, flow.worker)
    assert not ContextPackage.objects.filter(group_id=flow.group).exists()
    before = head(flow.group)
    assign(flow.owner, flow.group, cora)
    sequence, assigned = appointment(flow.group)
    # Published in the same transaction, just before the appointment that names it.
    published = GroupEvent.objects.get(group_id=flow.group, sequence=before + 1)
    assert (published.type, sequence) == (PUBLISHED, before + 2)
    served = over_rest(f"groups/{urn(flow.group)}/context-packages/{assigned['contextPackageId']}", cora)
    package = served["contextPackage"]
    assert served["documentHash"] == assigned["contextPackageHash"] == published.body["documentHash"]
    schemas.validate("context-package", package)
    # Signed by the packager Agent, verified against its key as the Registry serves it.
    assert package["generatedBy"] == _packager(flow)
    binding = over_rest(f"keys/{package['signature']['keyId']}", cora)
    assert binding["principal"] == package["generatedBy"]
    body = {k: v for k, v in package.items() if k != "signature"}
    Ed25519PublicKey.from_public_bytes(b64url_decode(binding["publicKey"])).verify(
        b64url_decode(package["signature"]["value"]), jcs.canonicalize(body)
    )
    # Scope and source range: the whole Group log before the appointment; every cited Event is in it.
    assert (package["missionId"], package["groupId"], package["version"]) == (urn(flow.mission), urn(flow.group), 1)
    assert "workItemId" not in package and "previousContextPackageId" not in package
    span = package["sourceEventRange"]
    assert (span["fromSequence"], span["toSequence"]) == (1, before)
    in_range = {urn(str(e)) for e in GroupEvent.objects.filter(group_id=flow.group, sequence__lte=before)
                .values_list("event_id", flat=True)}  # fmt: skip
    assert set(span["eventIds"]) <= in_range
    # The WorkItems with their states and owners.
    for item, state, owner in ((done, "verified", flow.worker), (offered, "offered", None),
                               (running, "submitted", flow.worker2)):  # fmt: skip
        line = next(line for line in package["summary"].splitlines() if urn(item) in line)
        assert f"state={state}" in line and f"owner={owner.urn if owner else 'none'}" in line
    # Each decision cites the Event it came from; each authorization is one of them.
    authorized = {
        urn(str(e)): b["workItem"]["workItemId"]
        for e, b in GroupEvent.objects.filter(group_id=flow.group, type="work.authorized").values_list(
            "event_id", "body"
        )
    }
    cited = {d["sourceEventIds"][0]: d["description"] for d in package["decisions"]}
    for event_id, item in authorized.items():
        assert item in cited[event_id] and event_id in span["eventIds"]
    assert artifact in package["artifactHashes"]
    assert [q for q in package["unresolvedQuestions"] if urn(running) in q]  # its result awaits review
    assert not [q for q in package["unresolvedQuestions"] if urn(done) in q]
    mission = Mission.objects.get(id=flow.mission)
    assert mission.objective in package["summary"] and package["constraints"]


def test_the_former_coordinator_is_stale_after_a_replacement_without_a_package_7_2(flow: Flow, cora: AgentKey) -> None:
    item = flow.authorize()
    assign(flow.owner, flow.group, cora)
    body = {"candidateAgentIds": [flow.worker.urn], "offerExpiresInSeconds": 600, "selectionBasis": BASIS}
    old = {"membership_epoch": 1, "coordinator_epoch": 1}  # what it last knew
    refused(ErrorCode.AUTH_STALE_COORDINATOR, flow.send, flow.coordinator, "work.offer", item, body, **old)
    refused(ErrorCode.AUTH_STALE_COORDINATOR, reconcile, flow.coordinator, flow.group, epoch=1, membership_epoch=1)


def test_a_replacement_assigns_nothing_until_it_reconciles_7_2(
    flow: Flow, cora: AgentKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§7.2: a replacement catches up with the WorkItems' current state before it assigns anything."""
    waiting = flow.authorize()
    assign(flow.owner, flow.group, cora)
    monkeypatch.setattr("tests.workitems.flow.COORDINATOR_EPOCH", 2)  # the Flow helpers sign with Cora's epoch
    new = Flow({"group": flow.group, "mission": flow.mission}, flow.owner, cora, flow.worker, flow.worker2)
    # Before reconciling: no authorization, no offer, no child Mission.
    for attempt in (lambda: new.authorize(), lambda: new.offer(waiting), lambda: new.create_child(waiting)):
        refused(Because(ErrorCode.INVALID_STATE_TRANSITION, "coordinator-not-reconciled"), attempt)
    # A reconciliation must cite the package its appointment named, through at least the appointment.
    sequence, assigned = appointment(flow.group)
    other = publish_package(Flow({"group": flow.group, "mission": flow.mission}, flow.owner, cora, flow.worker,
                                 flow.worker2))  # fmt: skip
    refused(ErrorCode.INVALID_COMMAND, reconcile, cora, flow.group, contextPackageId=other["contextPackageId"])
    refused(ErrorCode.INVALID_COMMAND, reconcile, cora, flow.group, contextPackageHash="sha256:" + "0" * 64)
    refused(ErrorCode.INVALID_COMMAND, reconcile, cora, flow.group, throughSequence=sequence - 1)
    refused(ErrorCode.INVALID_COMMAND, reconcile, cora, flow.group, throughSequence=head(flow.group) + 1)
    refused(ErrorCode.AUTH_STALE_COORDINATOR, reconcile, cora, flow.group, epoch=1)
    refused(ErrorCode.AUTH_STALE_COORDINATOR, reconcile, flow.worker, flow.group)
    refused(ErrorCode.INVALID_STATE_TRANSITION, new.offer, waiting)
    reconcile(cora, flow.group, throughSequence=sequence)
    done = GroupEvent.objects.get(group_id=flow.group, type=RECONCILE + "d").body
    assert (done["coordinatorId"], done["coordinatorEpoch"], done["contextPackageId"]) == (
        cora.urn, 2, assigned["contextPackageId"])  # fmt: skip
    refused(ErrorCode.INVALID_STATE_TRANSITION, reconcile, cora, flow.group)  # once per epoch
    new.offer(waiting)
    new.authorize(contract(goal="Replanned"))
    assert flow.item(waiting).state == "offered"


def test_the_first_coordinator_has_nothing_to_reconcile_7_2(flow: Flow) -> None:
    flow.authorize()  # epoch 1 planned from the start: no reconciliation gates it
    package = publish_package(flow)
    payload = {"contextPackageId": package["contextPackageId"], "contextPackageHash": "sha256:" + "0" * 64,
               "throughSequence": head(flow.group)}  # fmt: skip
    refused(ErrorCode.INVALID_STATE_TRANSITION, flow.coordinator.send, RECONCILE, flow.group, payload,
            coordinator_epoch=1)  # fmt: skip


@pytest.fixture
def older_organization(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Organization is created as before the context packager existed (no Organization-owned Agents)."""
    monkeypatch.setattr("missions.handlers.organization.AGENTS", {})


def test_the_packager_is_registered_on_first_use_in_an_older_organization_and_once_7_2(
    older_organization: None, flow: Flow, cora: AgentKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Organization made before the packager existed gets it, key bound in the Registry, at its first
    replacement (in that transaction); later replacements reuse it (idempotent)."""
    from missions import service_keys
    from missions.models import Agent, SigningKey

    org = str(Group.objects.values_list("organization_id", flat=True).get(id=flow.group))
    assert not Agent.objects.filter(organization_id=org, name="Context packager").exists()
    monkeypatch.setattr("missions.handlers.organization.AGENTS", service_keys.AGENTS)  # this build's code runs
    assign(flow.owner, flow.group, cora)
    packager = _packager(flow)
    assert SigningKey.objects.filter(principal_type="agent", principal_id=packager["id"]).count() == 1
    # Its key is a DESIGN §4 key file beside the services' (mode 0600), naming the Agent.
    path = service_keys.key_dir() / org / "context-packager.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["principal"] == packager
    reconcile(cora, flow.group)
    assign(flow.owner, flow.group, give_card(make_agent("acme", "Cy Coordinator", ["coordinator"])))
    assert _packager(flow) == packager
    assert SigningKey.objects.filter(principal_id=packager["id"]).count() == 1
    _, assigned = appointment(flow.group)
    second = ContextPackage.objects.get(package=assigned["contextPackageId"].removeprefix("urn:uuid:"))
    # The generated packages form one chain: version 2 names the first replacement's.
    assert (second.version, second.document["generatedBy"]) == (2, packager)
