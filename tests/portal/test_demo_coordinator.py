"""The demo Coordinator Agent (``portal/demo_coordinator.py``) against a real portal (daphne on the test database).

It speaks MWP 0.1 from outside: HELLO over REST (§6.3), its Memberships, the
Group's Events verified with the Group Authority's key (§6.4, §15.2), and
signed Commands (§15.1): ``work.accept_result`` for a submitted WorkItem once
the review pipeline passed it, a reviewer Agent other than the submitter
included where a criterion requires one (§10.2, §13.2), ``work.offer`` for
what nobody can take as it stands (§10.3, §10.4), and
``mission.submit_for_approval`` once every WorkItem is verified (§7.3), and
``mission.renew_coordinator`` before its lease runs out, until another
Coordinator is assigned (§7.2); appointed as a replacement, it verifies the
signed Context Package its appointment names and reconciles before any new
assignment (§7.2). The review pipeline runs as each submission commits
(``MWP_REVIEW_ON_SUBMIT`` inline).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from artifacts.models import ContextPackage, ReviewRequest
from missions.models import GroupEvent, Mission
from missions.service_keys import context_packager
from missions.tasks import expire_coordinator_leases
from mwportal.protocol import jcs
from mwportal.protocol.command import Key
from mwportal.protocol.ids import urn
from mwportal.protocol.values import parse_timestamp
from mwportal.protocol.verification import sign_document
from portal.demo_coordinator import Coordinator
from tests.conftest import AgentKey, add_member, make_agent
from tests.core.test_coordinator_lease import appointment, assign, publish_package, reconcile, renew
from tests.protocol.normative import normative_problems, require_bundle
from tests.worker.conftest import portal, portal_env  # noqa: F401 (the daphne fixture)
from tests.workitems.flow import Flow, contract, give_card, survey_mission

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _review_inline(settings: Any) -> None:
    """The review pipeline runs as each submission commits (§13.2): the Coordinator waits for it."""
    settings.MWP_REVIEW_ON_SUBMIT = "inline"


@pytest.fixture
def mission(owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey) -> dict[str, str]:
    """A Mission Olivia owns, Carl (with his Agent Card) coordinates and Wanda works in."""
    return survey_mission(owner, coordinator, [worker, worker2])


def coordinator_of(url: str, agent: AgentKey, org: dict[str, str], lines: list[str]) -> Coordinator:
    """The demo Coordinator with ``agent``'s key, as its DESIGN §4 key file would give it."""
    key = Key(agent.key.key_id, agent.key.seed, ("agent", agent.id), org["id"])
    return Coordinator(url, key, log=lines.append)


def kinds(group: str) -> list[str]:
    return list(GroupEvent.objects.filter(group_id=group).order_by("sequence").values_list("type", flat=True))


def test_a_coordinator_pass_accepts_the_submitted_result_and_submits_the_mission_spec_10_2_7_3(
    portal: Any,  # noqa: F811
    org: dict[str, str],
    mission: dict[str, str],
    owner: AgentKey,
    coordinator: AgentKey,
    worker: AgentKey,
    worker2: AgentKey,
) -> None:
    flow = Flow(mission, owner, coordinator, worker, worker2)
    item = flow.drive_to("submitted")
    lines: list[str] = []
    agent = coordinator_of(portal.url, coordinator, org, lines)

    agent.run_once()

    log = kinds(mission["group"])
    assert "work.result.accepted" in log, lines
    assert "mission.submitted_for_approval" in log, lines
    assert log.index("work.submitted") < log.index("work.result.accepted") < log.index("mission.submitted_for_approval")
    assert flow.item(item).state == "verified"
    accepted = GroupEvent.objects.get(group_id=mission["group"], type="work.result.accepted")
    (evidence,) = accepted.body["evidence"]
    assert evidence["generatedBy"] == {"type": "agent", "id": coordinator.urn}
    submitted = GroupEvent.objects.get(group_id=mission["group"], type="mission.submitted_for_approval")
    cited = GroupEvent.objects.get(group_id=mission["group"], type="work.submitted").body["evidence"][0]
    assert submitted.body["artifactHashes"] == cited["artifactHashes"]
    assert submitted.as_wire()["actor"] == {"type": "agent", "id": coordinator.urn}
    # One line per action: the session, the lease renewed on first sight (§7.2: its expiry is not
    # in mission.created), the acceptance and the submission.
    assert [line.split(" ")[0] for line in lines] == [
        "session", "mission.renew_coordinator", "work.accept_result", "mission.submit_for_approval"
    ]  # fmt: skip

    # A second pass finds nothing left to do: no Command is sent twice.
    agent.run_once()
    assert kinds(mission["group"]) == log
    assert len(lines) == 4, lines


def test_the_coordinator_verifies_every_event_it_folds_spec_6_4_15_2(
    portal: Any,  # noqa: F811
    org: dict[str, str],
    mission: dict[str, str],
    owner: AgentKey,
    coordinator: AgentKey,
    worker: AgentKey,
    worker2: AgentKey,
) -> None:
    """The Group's Events are read through the REST page, each one verified with the Group Authority
    key the portal serves; they are normative Event documents."""
    require_bundle()
    flow = Flow(mission, owner, coordinator, worker, worker2)
    flow.drive_to("active")
    agent = coordinator_of(portal.url, coordinator, org, [])

    agent.run_once()

    state = agent.groups[urn(mission["group"])]
    stored = GroupEvent.objects.filter(group_id=mission["group"]).order_by("sequence")
    last = stored.last()
    assert last is not None and state.after == last.sequence
    assert not state.awaiting and state.verified_since_decision is False
    (only,) = state.items.values()
    assert only.state == "active"
    for event in stored:
        assert normative_problems("event", event.as_wire()) == []
    assert "work.result.accepted" not in kinds(mission["group"])


def test_a_work_item_whose_dependency_is_verified_is_offered_to_the_workers_spec_10_3_10_4(
    portal: Any,  # noqa: F811
    org: dict[str, str],
    mission: dict[str, str],
    owner: AgentKey,
    coordinator: AgentKey,
    worker: AgentKey,
    worker2: AgentKey,
) -> None:
    """The open WorkItem waits for the one it depends on; once that is verified it is offered to
    every worker of the Group, and the Mission is not submitted while it is unfinished (§7.3)."""
    flow = Flow(mission, owner, coordinator, worker, worker2)
    first = flow.drive_to("submitted")
    second = flow.authorize(contract(dependencyWorkItemIds=[urn(first)]))
    lines: list[str] = []
    agent = coordinator_of(portal.url, coordinator, org, lines)

    agent.run_once()

    assert flow.item(first).state == "verified"
    assert flow.item(second).state == "offered"
    offered = GroupEvent.objects.get(group_id=mission["group"], type="work.offer.created", aggregate_id=second)
    assert offered.as_wire()["actor"] == {"type": "agent", "id": coordinator.urn}
    assert sorted(offered.body["candidateAgentIds"]) == sorted([worker.urn, worker2.urn])
    assert "mission.submitted_for_approval" not in kinds(mission["group"]), lines


def test_the_coordinator_outlives_a_portal_restart_spec_6_3(
    portal: Any,  # noqa: F811
    org: dict[str, str],
    mission: dict[str, str],
    owner: AgentKey,
    coordinator: AgentKey,
    worker: AgentKey,
    worker2: AgentKey,
) -> None:
    """A pass against a portal that is down ends with one log line; the next, once it is back,
    accepts the result (the loop of ``python -m portal.demo_coordinator``)."""
    flow = Flow(mission, owner, coordinator, worker, worker2)
    item = flow.drive_to("submitted")
    lines: list[str] = []
    agent = coordinator_of(portal.url, coordinator, org, lines)
    passes = iter(range(2))

    portal.server.kill()
    agent.run(0.01, stop=lambda: next(passes, None) is None)
    assert [line.split(" (")[0] for line in lines] == ["portal unreachable"], lines
    assert flow.item(item).state == "submitted"

    portal.server.start()
    passes = iter(range(1))
    agent.run(0.01, stop=lambda: next(passes, None) is None)
    assert lines[-1] == "portal reachable again", lines
    assert flow.item(item).state == "verified"


REVIEWED = contract(
    acceptanceCriteria=[
        {"criterionId": "complete", "description": "covers all", "evidenceRequired": ["deterministic_test"]},
        {"criterionId": "accurate", "description": "no invented facts", "evidenceRequired": ["reviewer_assessment"]},
    ]
)


def submit_reviewed(flow: Flow) -> str:
    item = flow.authorize(REVIEWED)
    flow.offer(item)
    flow.accept(item)
    flow.start(item)
    flow.submit(item)  # Wanda's; the review pipeline runs as it commits
    return item


def test_a_result_whose_review_awaits_a_reviewer_is_not_accepted_spec_13_2(
    portal: Any,  # noqa: F811
    org: dict[str, str],
    mission: dict[str, str],
    owner: AgentKey,
    coordinator: AgentKey,
    worker: AgentKey,
    worker2: AgentKey,
) -> None:
    """A criterion requires ``reviewer_assessment`` and the Group has no reviewer: the review
    stays pending, and the Coordinator accepts nothing and submits nothing (§7.3)."""
    flow = Flow(mission, owner, coordinator, worker, worker2)
    item = submit_reviewed(flow)
    lines: list[str] = []
    agent = coordinator_of(portal.url, coordinator, org, lines)

    agent.run_once()
    agent.run_once()

    assert "ext.mwportal.review.reviewer_unavailable" in kinds(mission["group"])
    assert flow.item(item).state == "submitted", lines
    assert "work.result.accepted" not in kinds(mission["group"]), lines
    assert "mission.submitted_for_approval" not in kinds(mission["group"]), lines


def test_a_result_is_accepted_once_a_reviewer_other_than_the_submitter_passed_it_spec_13_2(
    portal: Any,  # noqa: F811
    org: dict[str, str],
    mission: dict[str, str],
    owner: AgentKey,
    coordinator: AgentKey,
    worker: AgentKey,
    worker2: AgentKey,
) -> None:
    """Walt is the Group's reviewer: the review WorkItem is offered to him, never to Wanda who
    submitted; until he answers nothing is accepted; once his review passed, the Coordinator
    accepts the result and the review, and submits the Mission (§7.3)."""
    add_member(owner, mission["group"], worker2, ["reviewer"])
    flow = Flow(mission, owner, coordinator, worker, worker2)
    item = submit_reviewed(flow)
    lines: list[str] = []
    agent = coordinator_of(portal.url, coordinator, org, lines)
    (request,) = ReviewRequest.objects.filter(subject__id=item)
    review = str(request.review_workitem_id)
    offered = GroupEvent.objects.get(group_id=mission["group"], type="work.offer.created", aggregate_id=review)
    assert offered.body["candidateAgentIds"] == [worker2.urn]

    agent.run_once()
    assert flow.item(item).state == "submitted", lines  # the reviewer has not answered yet
    assert "work.result.accepted" not in kinds(mission["group"]), lines

    flow.accept(review, worker2)
    flow.start(review, worker2)
    sha = flow.blob(b"# the figures match their sources\n")
    artifact = flow.publish(review, sha, worker2)
    evidence = flow.evidence(review, worker2, ["accurate"], [sha], type_="reviewer_assessment")
    flow.lease_command("work.submit", review, {"artifactIds": [artifact], "evidence": evidence}, agent=worker2)
    agent.run_once()

    assert flow.item(item).state == "verified", lines
    assert flow.item(review).state == "verified", lines
    assert kinds(mission["group"])[-1] == "mission.submitted_for_approval", lines


def test_an_offer_every_candidate_declined_is_offered_again_and_a_pending_one_is_not_spec_10_3(
    portal: Any,  # noqa: F811
    org: dict[str, str],
    mission: dict[str, str],
    owner: AgentKey,
    coordinator: AgentKey,
    worker: AgentKey,
    worker2: AgentKey,
) -> None:
    """An offered WorkItem whose every candidate declined would wait forever: the Coordinator
    offers it again to the Group's Workers. One with a candidate still to answer is left alone."""
    flow = Flow(mission, owner, coordinator, worker, worker2)
    declined = flow.drive_to("offered")  # to Wanda only
    waiting = flow.authorize()
    flow.offer(waiting, [worker, worker2])
    flow.send(worker, "ext.mwportal.work.offer_decline", declined, {"reason": "capacity"})
    flow.send(worker, "ext.mwportal.work.offer_decline", waiting, {"reason": "capacity"})
    lines: list[str] = []
    agent = coordinator_of(portal.url, coordinator, org, lines)

    agent.run_once()

    offers = GroupEvent.objects.filter(group_id=mission["group"], type="work.offer.created")
    assert offers.filter(aggregate_id=declined).count() == 2, lines
    again = offers.filter(aggregate_id=declined).order_by("sequence").last()
    assert again is not None and sorted(again.body["candidateAgentIds"]) == sorted([worker.urn, worker2.urn])
    assert offers.filter(aggregate_id=waiting).count() == 1, lines
    agent.run_once()
    assert offers.filter(aggregate_id=declined).count() == 2, lines  # the new offer is answered first


def test_an_offer_that_expired_unanswered_is_offered_again_spec_10_3(
    portal: Any,  # noqa: F811
    org: dict[str, str],
    mission: dict[str, str],
    owner: AgentKey,
    coordinator: AgentKey,
    worker: AgentKey,
    worker2: AgentKey,
) -> None:
    """Nobody answered the offer before it expired: it binds nobody, so the Coordinator offers
    the WorkItem again; one whose offer is still open is left alone."""
    flow = Flow(mission, owner, coordinator, worker, worker2)
    expired = flow.authorize()
    flow.offer(expired, expires_in=1)
    still_open = flow.drive_to("offered")
    time.sleep(2.5)
    lines: list[str] = []
    agent = coordinator_of(portal.url, coordinator, org, lines)

    agent.run_once()

    offers = GroupEvent.objects.filter(group_id=mission["group"], type="work.offer.created")
    assert offers.filter(aggregate_id=expired).count() == 2, lines
    assert offers.filter(aggregate_id=still_open).count() == 1, lines


def renewals(group: str) -> list[dict[str, Any]]:
    return [e.as_wire() for e in GroupEvent.objects.filter(group_id=group, type="mission.coordinator.renewed")]


def test_the_coordinator_renews_its_lease_at_half_its_period_with_its_epoch_spec_7_2(
    portal: Any,  # noqa: F811
    org: dict[str, str],
    mission: dict[str, str],
    coordinator: AgentKey,
) -> None:
    """A demo left running outlives its lease: once half of it has run the Coordinator sends
    ``mission.renew_coordinator`` with its current Coordinator Epoch, so the beat never records
    an expiry; before that it sends none."""
    group = mission["group"]
    renew(coordinator, group, seconds=4)  # a 4 s lease, the Mission's period from now on
    lines: list[str] = []
    agent = coordinator_of(portal.url, coordinator, org, lines)

    agent.run_once()
    agent.run_once()
    assert len(renewals(group)) == 1, lines  # under half the lease has run: nothing to renew

    deadline = time.monotonic() + 6
    while len(renewals(group)) < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
        agent.run_once()
    first, *renewed = renewals(group)
    assert len(renewed) == 2, lines
    for event in renewed:
        assert event["actor"] == {"type": "agent", "id": coordinator.urn}
        assert event["payload"]["coordinatorEpoch"] == 1
        lease = parse_timestamp(event["payload"]["leaseExpiresAt"]).epoch_seconds
        assert 3 <= lease - parse_timestamp(event["occurredAt"]).epoch_seconds <= 5  # the Mission's period kept
    expiries = [parse_timestamp(e["payload"]["leaseExpiresAt"]).epoch_seconds for e in (first, *renewed)]
    assert expiries == sorted(expiries) and expiries[-1] > expiries[0]
    # Past the first lease's expiry, the lease is alive: the beat has nothing to record.
    time.sleep(max(0.0, expiries[0] + 1 - time.time()))
    agent.run_once()
    assert expire_coordinator_leases() == 0
    assert "ext.mwportal.mission.coordinator_lease_expired" not in kinds(group)
    assert lines[0].startswith("session") and {line.split(" ")[0] for line in lines[1:]} == {
        "mission.renew_coordinator"
    }, lines


def test_a_replaced_coordinator_sends_nothing_for_that_mission_spec_7_2(
    portal: Any,  # noqa: F811
    org: dict[str, str],
    mission: dict[str, str],
    owner: AgentKey,
    coordinator: AgentKey,
    worker: AgentKey,
    worker2: AgentKey,
) -> None:
    """The MissionOwner assigns another Coordinator: the former one follows the lease and sends
    nothing for that Mission, no renewal once its old lease's half has run, no offer of an open
    WorkItem (which would be AUTH_STALE_COORDINATOR); the new Coordinator renews its own."""
    group = mission["group"]
    renew(coordinator, group, seconds=3)
    publish_package(Flow(mission, owner, coordinator, worker, worker2))  # what a replacement receives
    cora = give_card(make_agent("acme", "Cora Coordinator", ["coordinator"]))
    lines: list[str] = []
    former = coordinator_of(portal.url, coordinator, org, lines)
    former.run_once()  # it knew the Mission as its own
    told = len(lines)
    assign(owner, group, cora, seconds=4)
    reconcile(cora, group)  # §7.2: before Cora's new assignments
    # An open WorkItem, authorized by Cora at her epoch: what a Coordinator would offer.
    Flow(mission, owner, cora, worker, worker2).send(cora, "work.authorize", str(uuid.uuid4()),
                                                     {"contract": contract()}, coordinator_epoch=2)  # fmt: skip
    log = kinds(group)

    time.sleep(2)  # past half of the former lease
    former.run_once()
    former.run_once()

    assert kinds(group) == log, lines
    assert len(lines) == told, lines
    assert urn(group) not in former.coordinated_groups()  # the coordinator role moved to Cora (§7.2)

    # The Agent that holds the lease now keeps it: half of its lease has run, it renews.
    successor = coordinator_of(portal.url, cora, org, [])
    successor.run_once()
    (renewed,) = [e for e in renewals(group) if e["actor"]["id"] == cora.urn]
    epoch = Mission.objects.values_list("coordinator_epoch", flat=True).get(group_id=group)
    assert renewed["payload"]["coordinatorEpoch"] == epoch == 2


def test_a_lapsed_lease_is_not_renewed_and_nothing_is_sent_for_that_mission_spec_7_2(
    portal: Any,  # noqa: F811
    org: dict[str, str],
    mission: dict[str, str],
    owner: AgentKey,
    coordinator: AgentKey,
    worker: AgentKey,
    worker2: AgentKey,
) -> None:
    """An expired lease (the beat recorded it) is the MissionOwner's to replace (§7.2): the
    Coordinator logs it once and sends nothing for that Mission, no renewal and no offer."""
    group = mission["group"]
    Flow(mission, owner, coordinator, worker, worker2).authorize()  # open: what a Coordinator would offer
    renew(coordinator, group, seconds=1)
    time.sleep(1.5)
    assert expire_coordinator_leases() == 1
    lines: list[str] = []
    agent = coordinator_of(portal.url, coordinator, org, lines)
    log = kinds(group)

    agent.run_once()
    agent.run_once()

    assert kinds(group) == log, lines
    assert [line.split(" ")[0] for line in lines] == ["session", "lease"], lines


RECONCILED = "ext.mwportal.mission.coordinator_reconciled"


def test_a_replacement_coordinator_reconciles_then_offers_the_open_work_item_spec_7_2(
    portal: Any,  # noqa: F811
    org: dict[str, str],
    mission: dict[str, str],
    owner: AgentKey,
    coordinator: AgentKey,
    worker: AgentKey,
    worker2: AgentKey,
) -> None:
    """§7.2: a replacement MUST receive a signed Context Package and MUST reconcile current WorkItem
    state before issuing new assignments. Cora, appointed at epoch 2, reads the package the
    appointment names, verifies it, reconciles through the Events she folded, and only then offers
    the WorkItem her predecessor left open."""
    group = mission["group"]
    flow = Flow(mission, owner, coordinator, worker, worker2)
    item = flow.authorize()  # open, by Carl at epoch 1
    cora = give_card(make_agent("acme", "Cora Coordinator", ["coordinator"]))
    assign(owner, group, cora)
    sequence, assigned = appointment(group)
    lines: list[str] = []
    replacement = coordinator_of(portal.url, cora, org, lines)

    replacement.run_once()

    log = kinds(group)
    assert RECONCILED in log and "work.offer.created" in log, lines
    assert log.index("mission.coordinator.assigned") < log.index(RECONCILED) < log.index("work.offer.created")
    done = GroupEvent.objects.get(group_id=group, type=RECONCILED)
    assert done.as_wire()["actor"] == {"type": "agent", "id": cora.urn}
    assert (done.body["coordinatorId"], done.body["coordinatorEpoch"]) == (cora.urn, 2)
    assert done.body["contextPackageId"] == assigned["contextPackageId"]
    assert sequence <= done.body["throughSequence"] < done.sequence  # at or past its appointment
    offered = GroupEvent.objects.get(group_id=group, type="work.offer.created", aggregate_id=item)
    assert offered.as_wire()["actor"] == {"type": "agent", "id": cora.urn}
    assert sorted(offered.body["candidateAgentIds"]) == sorted([worker.urn, worker2.urn])
    assert flow.item(item).state == "offered"
    assert [line.split(" ")[0] for line in lines] == ["session", "ext.mwportal.mission.coordinator_reconcile",
                                                      "work.offer"]  # fmt: skip

    # Reconciled once per epoch: a second pass has nothing to send.
    replacement.run_once()
    assert kinds(group) == log and len(lines) == 3, lines


@pytest.mark.parametrize(
    ("tampering", "told"),
    [("re-signed by the packager", "its hash"), ("left unsigned", "its signature does not verify")],
)
def test_a_replacement_does_not_reconcile_with_a_package_that_is_not_the_appointments_spec_7_2(
    portal: Any,  # noqa: F811
    org: dict[str, str],
    mission: dict[str, str],
    owner: AgentKey,
    coordinator: AgentKey,
    worker: AgentKey,
    worker2: AgentKey,
    tampering: str,
    told: str,
) -> None:
    """The package served under the appointment's ID was altered after the appointment: signed again
    with the packager's own key, its hash is not the one the appointment names; not signed again, its
    signature does not verify. Cora does not reconcile with it, and without a reconciliation she
    assigns nothing (§7.2): the open WorkItem is not offered, on a second pass either."""
    group = mission["group"]
    flow = Flow(mission, owner, coordinator, worker, worker2)
    item = flow.authorize()
    cora = give_card(make_agent("acme", "Cora Coordinator", ["coordinator"]))
    assign(owner, group, cora)
    _, assigned = appointment(group)
    stored = ContextPackage.objects.filter(package=assigned["contextPackageId"].removeprefix("urn:uuid:"))
    altered = {k: v for k, v in stored.get().document.items() if k != "signature"}
    altered["summary"] = "Nothing is under way; every WorkItem may be authorized again."
    if tampering == "re-signed by the packager":
        key = context_packager(org["id"])
        altered = sign_document(altered, key_id=key.key_id, seed=key.seed, profile="context-package")
        assert jcs.sha256_hash(jcs.canonicalize(altered)) != assigned["contextPackageHash"]
    else:
        altered["signature"] = stored.get().document["signature"]
    stored.update(document=altered)
    log = kinds(group)
    lines: list[str] = []
    replacement = coordinator_of(portal.url, cora, org, lines)

    replacement.run_once()
    replacement.run_once()

    assert kinds(group) == log, lines
    assert RECONCILED not in log and flow.item(item).state == "open"
    assert not GroupEvent.objects.filter(group_id=group, type="work.offer.created").exists()
    (refusal,) = [line for line in lines if line.startswith("Context Package")]
    assert assigned["contextPackageId"] in refusal and told in refusal, lines
    assert len(lines) == 2, lines  # the session and the refusal: nothing retried before a new Event
