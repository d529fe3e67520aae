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
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db.models import QuerySet

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


def agent_actor(agent: AgentKey) -> dict[str, str]:
    """The ``actor`` of what ``agent`` signed as an Agent."""
    return {"type": "agent", "id": agent.urn}


@dataclass
class Demo:
    """The portal under test (daphne), its Organization and the Mission's ``flow``; ``lines`` collects
    what the demo Coordinators run against it log, one line per action."""

    portal: Any
    org: dict[str, str]
    flow: Flow
    lines: list[str] = field(default_factory=list)

    @property
    def group(self) -> str:
        return self.flow.group

    def coordinator(self, agent: AgentKey) -> Coordinator:
        """The demo Coordinator with ``agent``'s key, as its DESIGN §4 key file would give it."""
        key = Key(agent.key.key_id, agent.key.seed, ("agent", agent.id), self.org["id"])
        return Coordinator(self.portal.url, key, log=self.lines.append)

    def kinds(self) -> list[str]:
        """The types of the Group's Events, in sequence order."""
        return list(self.events().order_by("sequence").values_list("type", flat=True))

    def events(self, type_: str | None = None, **filters: Any) -> QuerySet[GroupEvent]:
        kind = {"type": type_} if type_ else {}
        return GroupEvent.objects.filter(group_id=self.group, **kind, **filters)

    def offers(self, item: str) -> QuerySet[GroupEvent]:
        """The ``work.offer.created`` Events of WorkItem ``item``."""
        return self.events("work.offer.created", aggregate_id=item)

    def renewals(self) -> list[dict[str, Any]]:
        """The ``mission.coordinator.renewed`` Events, in sequence order (PostgreSQL keeps no other)."""
        return [e.as_wire() for e in self.events("mission.coordinator.renewed").order_by("sequence")]

    def actions(self) -> list[str]:
        """What each log line is about: the session, the Command kind sent, a lease or a refusal."""
        return [line.split(" ")[0] for line in self.lines]

    def sends_nothing(self, agent: Coordinator, passes: int = 2) -> None:
        """``passes`` more passes of ``agent`` append no Event to the Group."""
        log = self.kinds()
        for _ in range(passes):
            agent.run_once()
        assert self.kinds() == log, self.lines

    def assert_offered_to_the_workers(self, item: str, by: AgentKey) -> None:
        """``item``'s one offer, signed by ``by``, names both of the Group's Workers."""
        offered = self.offers(item).get()
        assert offered.as_wire()["actor"] == agent_actor(by)
        assert sorted(offered.body["candidateAgentIds"]) == sorted([self.flow.worker.urn, self.flow.worker2.urn])


@pytest.fixture
def demo(portal: Any, org: dict[str, str], flow: Flow) -> Demo:  # noqa: F811
    return Demo(portal, org, flow)


def test_a_coordinator_pass_accepts_the_submitted_result_and_submits_the_mission_spec_10_2_7_3(
    demo: Demo, flow: Flow
) -> None:
    item = flow.drive_to("submitted")
    agent = demo.coordinator(flow.coordinator)

    agent.run_once()

    log = demo.kinds()
    assert "work.result.accepted" in log, demo.lines
    assert "mission.submitted_for_approval" in log, demo.lines
    assert log.index("work.submitted") < log.index("work.result.accepted") < log.index("mission.submitted_for_approval")
    assert flow.item(item).state == "verified"
    (evidence,) = demo.events("work.result.accepted").get().body["evidence"]
    assert evidence["generatedBy"] == agent_actor(flow.coordinator)
    submitted = demo.events("mission.submitted_for_approval").get()
    cited = demo.events("work.submitted").get().body["evidence"][0]
    assert submitted.body["artifactHashes"] == cited["artifactHashes"]
    assert submitted.as_wire()["actor"] == agent_actor(flow.coordinator)
    # One line per action: the session, the lease renewed on first sight (§7.2: its expiry is not
    # in mission.created), the acceptance and the submission.
    assert demo.actions() == [
        "session", "mission.renew_coordinator", "work.accept_result", "mission.submit_for_approval"
    ]  # fmt: skip

    # A second pass finds nothing left to do: no Command is sent twice.
    demo.sends_nothing(agent, passes=1)
    assert len(demo.lines) == 4, demo.lines


def test_the_coordinator_verifies_every_event_it_folds_spec_6_4_15_2(demo: Demo, flow: Flow) -> None:
    """The Group's Events are read through the REST page, each one verified with the Group Authority
    key the portal serves; they are normative Event documents."""
    require_bundle()
    flow.drive_to("active")
    agent = demo.coordinator(flow.coordinator)

    agent.run_once()

    state = agent.groups[urn(demo.group)]
    stored = demo.events().order_by("sequence")
    last = stored.last()
    assert last is not None and state.after == last.sequence
    assert not state.awaiting and state.verified_since_decision is False
    (only,) = state.items.values()
    assert only.state == "active"
    for event in stored:
        assert normative_problems("event", event.as_wire()) == []
    assert "work.result.accepted" not in demo.kinds()


def test_a_work_item_whose_dependency_is_verified_is_offered_to_the_workers_spec_10_3_10_4(
    demo: Demo, flow: Flow
) -> None:
    """The open WorkItem waits for the one it depends on; once that is verified it is offered to
    every worker of the Group, and the Mission is not submitted while it is unfinished (§7.3)."""
    first = flow.drive_to("submitted")
    second = flow.authorize(contract(dependencyWorkItemIds=[urn(first)]))

    demo.coordinator(flow.coordinator).run_once()

    assert flow.item(first).state == "verified"
    assert flow.item(second).state == "offered"
    demo.assert_offered_to_the_workers(second, by=flow.coordinator)
    assert "mission.submitted_for_approval" not in demo.kinds(), demo.lines


def test_the_coordinator_outlives_a_portal_restart_spec_6_3(demo: Demo, flow: Flow) -> None:
    """A pass against a portal that is down ends with one log line; the next, once it is back,
    accepts the result (the loop of ``python -m portal.demo_coordinator``)."""
    item = flow.drive_to("submitted")
    agent = demo.coordinator(flow.coordinator)
    passes = iter(range(2))

    demo.portal.server.kill()
    agent.run(0.01, stop=lambda: next(passes, None) is None)
    assert [line.split(" (")[0] for line in demo.lines] == ["portal unreachable"], demo.lines
    assert flow.item(item).state == "submitted"

    demo.portal.server.start()
    passes = iter(range(1))
    agent.run(0.01, stop=lambda: next(passes, None) is None)
    assert demo.lines[-1] == "portal reachable again", demo.lines
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


def test_a_result_whose_review_awaits_a_reviewer_is_not_accepted_spec_13_2(demo: Demo, flow: Flow) -> None:
    """A criterion requires ``reviewer_assessment`` and the Group has no reviewer: the review
    stays pending, and the Coordinator accepts nothing and submits nothing (§7.3)."""
    item = submit_reviewed(flow)
    agent = demo.coordinator(flow.coordinator)

    agent.run_once()
    agent.run_once()

    assert "ext.mwportal.review.reviewer_unavailable" in demo.kinds()
    assert flow.item(item).state == "submitted", demo.lines
    assert "work.result.accepted" not in demo.kinds(), demo.lines
    assert "mission.submitted_for_approval" not in demo.kinds(), demo.lines


def test_a_result_is_accepted_once_a_reviewer_other_than_the_submitter_passed_it_spec_13_2(
    demo: Demo, flow: Flow
) -> None:
    """Walt is the Group's reviewer: the review WorkItem is offered to him, never to Wanda who
    submitted; until he answers nothing is accepted; once his review passed, the Coordinator
    accepts the result and the review, and submits the Mission (§7.3)."""
    walt = flow.worker2
    add_member(flow.owner, demo.group, walt, ["reviewer"])
    item = submit_reviewed(flow)
    agent = demo.coordinator(flow.coordinator)
    (request,) = ReviewRequest.objects.filter(subject__id=item)
    review = str(request.review_workitem_id)
    assert demo.offers(review).get().body["candidateAgentIds"] == [walt.urn]

    agent.run_once()
    assert flow.item(item).state == "submitted", demo.lines  # the reviewer has not answered yet
    assert "work.result.accepted" not in demo.kinds(), demo.lines

    flow.accept(review, walt)
    flow.start(review, walt)
    sha = flow.blob(b"# the figures match their sources\n")
    artifact = flow.publish(review, sha, walt)
    evidence = flow.evidence(review, walt, ["accurate"], [sha], type_="reviewer_assessment")
    flow.lease_command("work.submit", review, {"artifactIds": [artifact], "evidence": evidence}, agent=walt)
    agent.run_once()

    assert flow.item(item).state == "verified", demo.lines
    assert flow.item(review).state == "verified", demo.lines
    assert demo.kinds()[-1] == "mission.submitted_for_approval", demo.lines


def test_an_offer_every_candidate_declined_is_offered_again_and_a_pending_one_is_not_spec_10_3(
    demo: Demo, flow: Flow
) -> None:
    """An offered WorkItem whose every candidate declined would wait forever: the Coordinator
    offers it again to the Group's Workers. One with a candidate still to answer is left alone."""
    declined = flow.drive_to("offered")  # to Wanda only
    waiting = flow.authorize()
    flow.offer(waiting, [flow.worker, flow.worker2])
    flow.send(flow.worker, "ext.mwportal.work.offer_decline", declined, {"reason": "capacity"})
    flow.send(flow.worker, "ext.mwportal.work.offer_decline", waiting, {"reason": "capacity"})
    agent = demo.coordinator(flow.coordinator)

    agent.run_once()

    assert demo.offers(declined).count() == 2, demo.lines
    again = demo.offers(declined).order_by("sequence").last()
    assert again is not None and sorted(again.body["candidateAgentIds"]) == sorted([flow.worker.urn, flow.worker2.urn])
    assert demo.offers(waiting).count() == 1, demo.lines
    agent.run_once()
    assert demo.offers(declined).count() == 2, demo.lines  # the new offer is answered first


def test_an_offer_that_expired_unanswered_is_offered_again_spec_10_3(demo: Demo, flow: Flow) -> None:
    """Nobody answered the offer before it expired: it binds nobody, so the Coordinator offers
    the WorkItem again; one whose offer is still open is left alone."""
    expired = flow.authorize()
    flow.offer(expired, expires_in=1)
    still_open = flow.drive_to("offered")
    time.sleep(2.5)

    demo.coordinator(flow.coordinator).run_once()

    assert demo.offers(expired).count() == 2, demo.lines
    assert demo.offers(still_open).count() == 1, demo.lines


def test_the_coordinator_renews_its_lease_at_half_its_period_with_its_epoch_spec_7_2(
    demo: Demo, coordinator: AgentKey
) -> None:
    """A demo left running outlives its lease: once half of it has run the Coordinator sends
    ``mission.renew_coordinator`` with its current Coordinator Epoch, so the beat never records
    an expiry; before that it sends none."""
    renew(coordinator, demo.group, seconds=4)  # a 4 s lease, the Mission's period from now on
    lines = demo.lines
    agent = demo.coordinator(coordinator)

    agent.run_once()
    agent.run_once()
    assert len(demo.renewals()) == 1, lines  # under half the lease has run: nothing to renew

    deadline = time.monotonic() + 6
    while len(demo.renewals()) < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
        agent.run_once()
    first, *renewed = demo.renewals()
    assert len(renewed) == 2, lines
    for event in renewed:
        assert event["actor"] == agent_actor(coordinator)
        assert event["payload"]["coordinatorEpoch"] == 1
        lease = parse_timestamp(event["payload"]["leaseExpiresAt"]).epoch_seconds
        assert 3 <= lease - parse_timestamp(event["occurredAt"]).epoch_seconds <= 5  # the Mission's period kept
    expiries = [parse_timestamp(e["payload"]["leaseExpiresAt"]).epoch_seconds for e in (first, *renewed)]
    assert expiries == sorted(expiries) and expiries[-1] > expiries[0]
    # Past the first lease's expiry, the lease is alive: the beat has nothing to record.
    time.sleep(max(0.0, expiries[0] + 1 - time.time()))
    agent.run_once()
    assert expire_coordinator_leases() == 0
    assert "ext.mwportal.mission.coordinator_lease_expired" not in demo.kinds()
    assert lines[0].startswith("session") and set(demo.actions()[1:]) == {"mission.renew_coordinator"}, lines


def replacement_coordinator() -> AgentKey:
    """Cora, another coordinator Agent of the Organization, with her Agent Card (a lease pins one, §6.1)."""
    return give_card(make_agent("acme", "Cora Coordinator", ["coordinator"]))


def test_a_replaced_coordinator_sends_nothing_for_that_mission_spec_7_2(demo: Demo, flow: Flow) -> None:
    """The MissionOwner assigns another Coordinator: the former one follows the lease and sends
    nothing for that Mission, no renewal once its old lease's half has run, no offer of an open
    WorkItem (which would be AUTH_STALE_COORDINATOR); the new Coordinator renews its own."""
    group = demo.group
    renew(flow.coordinator, group, seconds=3)
    publish_package(flow)  # what a replacement receives
    cora = replacement_coordinator()
    former = demo.coordinator(flow.coordinator)
    former.run_once()  # it knew the Mission as its own
    told = len(demo.lines)
    assign(flow.owner, group, cora, seconds=4)
    reconcile(cora, group)  # §7.2: before Cora's new assignments
    # An open WorkItem, authorized by Cora at her epoch: what a Coordinator would offer.
    flow.send(cora, "work.authorize", str(uuid.uuid4()), {"contract": contract()}, coordinator_epoch=2)
    log = demo.kinds()

    time.sleep(2)  # past half of the former lease
    former.run_once()
    former.run_once()

    assert demo.kinds() == log, demo.lines
    assert len(demo.lines) == told, demo.lines
    assert urn(group) not in former.coordinated_groups()  # the coordinator role moved to Cora (§7.2)

    # The Agent that holds the lease now keeps it: half of its lease has run, it renews.
    demo.coordinator(cora).run_once()
    (renewed,) = [e for e in demo.renewals() if e["actor"]["id"] == cora.urn]
    epoch = Mission.objects.values_list("coordinator_epoch", flat=True).get(group_id=group)
    assert renewed["payload"]["coordinatorEpoch"] == epoch == 2


def test_a_lapsed_lease_is_not_renewed_and_nothing_is_sent_for_that_mission_spec_7_2(demo: Demo, flow: Flow) -> None:
    """An expired lease (the beat recorded it) is the MissionOwner's to replace (§7.2): the
    Coordinator logs it once and sends nothing for that Mission, no renewal and no offer."""
    flow.authorize()  # open: what a Coordinator would offer
    renew(flow.coordinator, demo.group, seconds=1)
    time.sleep(1.5)
    assert expire_coordinator_leases() == 1

    demo.sends_nothing(demo.coordinator(flow.coordinator), passes=2)

    assert demo.actions() == ["session", "lease"], demo.lines


RECONCILED = "ext.mwportal.mission.coordinator_reconciled"


def leave_open_and_appoint_cora(flow: Flow) -> tuple[str, AgentKey]:
    """Carl authorizes a WorkItem and leaves it open; the MissionOwner appoints Cora in his place (epoch 2)."""
    item = flow.authorize()
    cora = replacement_coordinator()
    assign(flow.owner, flow.group, cora)
    return item, cora


def test_a_replacement_coordinator_reconciles_then_offers_the_open_work_item_spec_7_2(demo: Demo, flow: Flow) -> None:
    """§7.2: a replacement gets a signed Context Package and brings itself up to date with the
    WorkItems' current state before any new assignment. Cora, appointed at epoch 2, reads the package the
    appointment names, verifies it, reconciles through the Events she folded, and only then offers
    the WorkItem her predecessor left open."""
    item, cora = leave_open_and_appoint_cora(flow)
    sequence, assigned = appointment(demo.group)
    replacement = demo.coordinator(cora)

    replacement.run_once()

    log = demo.kinds()
    assert RECONCILED in log and "work.offer.created" in log, demo.lines
    assert log.index("mission.coordinator.assigned") < log.index(RECONCILED) < log.index("work.offer.created")
    done = demo.events(RECONCILED).get()
    assert done.as_wire()["actor"] == agent_actor(cora)
    assert (done.body["coordinatorId"], done.body["coordinatorEpoch"]) == (cora.urn, 2)
    assert done.body["contextPackageId"] == assigned["contextPackageId"]
    assert sequence <= done.body["throughSequence"] < done.sequence  # at or past its appointment
    demo.assert_offered_to_the_workers(item, by=cora)
    assert flow.item(item).state == "offered"
    assert demo.actions() == ["session", "ext.mwportal.mission.coordinator_reconcile", "work.offer"]

    # Reconciled once per epoch: a second pass has nothing to send.
    demo.sends_nothing(replacement, passes=1)
    assert len(demo.lines) == 3, demo.lines


@pytest.mark.parametrize(
    ("tampering", "told"),
    [("re-signed by the packager", "its hash"), ("left unsigned", "its signature does not verify")],
)
def test_a_replacement_does_not_reconcile_with_a_package_that_is_not_the_appointments_spec_7_2(
    demo: Demo, flow: Flow, tampering: str, told: str
) -> None:
    """The package served under the appointment's ID was altered after the appointment: signed again
    with the packager's own key, its hash is not the one the appointment names; not signed again, its
    signature does not verify. Cora does not reconcile with it, and without a reconciliation she
    assigns nothing (§7.2): the open WorkItem is not offered, on a second pass either."""
    item, cora = leave_open_and_appoint_cora(flow)
    _, assigned = appointment(demo.group)
    stored = ContextPackage.objects.filter(package=assigned["contextPackageId"].removeprefix("urn:uuid:"))
    altered = {k: v for k, v in stored.get().document.items() if k != "signature"}
    altered["summary"] = "Nothing is under way; every WorkItem may be authorized again."
    if tampering == "re-signed by the packager":
        key = context_packager(demo.org["id"])
        altered = sign_document(altered, key_id=key.key_id, seed=key.seed, profile="context-package")
        assert jcs.sha256_hash(jcs.canonicalize(altered)) != assigned["contextPackageHash"]
    else:
        altered["signature"] = stored.get().document["signature"]
    stored.update(document=altered)
    assert RECONCILED not in demo.kinds()

    demo.sends_nothing(demo.coordinator(cora), passes=2)

    assert flow.item(item).state == "open"
    assert not demo.events("work.offer.created").exists()
    (refusal,) = [line for line in demo.lines if line.startswith("Context Package")]
    assert assigned["contextPackageId"] in refusal and told in refusal, demo.lines
    assert len(demo.lines) == 2, demo.lines  # the session and the refusal: nothing retried before a new Event
