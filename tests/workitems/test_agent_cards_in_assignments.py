"""Agent Cards in assignments, through ``POST /api/v0.1/commands`` (PROTOCOL §6.1).

§6.1, in short: a capability the Agent merely claims earns it no trust; an assignment records the Agent Card
version and the version of each capability the contract needs; an upgrade that stays compatible may carry on in
place if Organization policy allows, while an incompatible one first checkpoints the running work and needs a
fresh acceptance before execution resumes; performance records are kept per capability and context, apart from
the cards, and never collapsed into a single global reputation number.

The rules written out here (the oracle): a card capability serves a required one when the IDs are equal, the
major versions are equal and the card's version is not older; an upgrade is compatible for an assignment when
every pinned capability keeps its major version and still serves the contract.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from missions.handlers.sessions import capability, issue_agent_card
from missions.models import AgentCard, GroupEvent
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import bare, urn
from tests.api.support import API, bearer, error_of, http, show
from tests.conftest import AgentKey, Because, make_agent, refused
from tests.workitems.flow import BASIS, Flow, contract
from workitems.snapshot import snapshot_workitems

pytestmark = pytest.mark.usefixtures("rest")

SUMMARIZE = {"id": "text.summarize", "version": "1.0.0"}
TRANSLATE = {"id": "text.translate", "version": "1.0.0"}
NOT_VERIFIED = Because(ErrorCode.AUTH_FORBIDDEN, "capability-not-verified")


def card(agent: AgentKey, *held: tuple[str, str]) -> int:
    """The Registry's next Organization-signed card for ``agent``, each capability with verification Evidence."""
    return issue_agent_card(agent.id, [capability(i, v, verified_evidence=[urn(uuid.uuid4())]) for i, v in held])


def events(flow: Flow, kind: str, item_id: str) -> list[dict[str, Any]]:
    rows = GroupEvent.objects.filter(group_id=flow.group, type=kind, aggregate_id=item_id).order_by("sequence")
    return [r.body for r in rows]


def join(flow: Flow, agent: AgentKey) -> AgentKey:
    """``agent`` becomes a worker of the Mission by ``membership.change``, keeping whatever card it has."""
    from tests.conftest import group_revision

    flow.owner.send(
        "membership.change", flow.group, {"principal": agent.actor, "roles": ["worker"]},
        expected_revision=group_revision(flow.group),
    )  # fmt: skip
    return agent


# --- a declared capability earns no trust ----------------------------------------------------------------


def test_a_capability_the_worker_merely_declares_earns_no_trust_6_1(flow: Flow) -> None:
    """The selection basis claims a verified match and the Worker accepts: no card, or a card without the
    capability, or one at another major or an older version, is refused and nothing is owned."""
    nobody = join(flow, make_agent("acme", "Nell No-card", ["worker"]))
    translator = make_agent("acme", "Tara Translator", ["worker"])
    card(translator, ("text.translate", "1.0.0"))
    major = make_agent("acme", "Max Major", ["worker"])
    card(major, ("text.summarize", "2.0.0"))
    older = make_agent("acme", "Olly Older", ["worker"])
    card(older, ("text.summarize", "1.1.0"))
    for agent in (translator, major, older):
        join(flow, agent)
    item = flow.authorize(contract(requiredCapabilities=[{"id": "text.summarize", "version": "1.2.0"}]))
    claim = {**BASIS, "requiredCapabilities": [{"id": "text.summarize", "version": "1.2.0"}]}
    claim["verifiedMatches"] = claim["requiredCapabilities"]  # the claim: "verified"
    flow.offer(item, agents=[nobody, translator, major, older], selectionBasis=claim)
    for agent in (nobody, translator, major, older):
        error = refused(NOT_VERIFIED, flow.accept, item, agent)
        assert error.details["capability"] == {"id": "text.summarize", "version": "1.2.0"}
    it = flow.item(item)
    assert (it.state, it.owner_id, it.ownership_epoch, it.pins) == ("offered", None, 0, None)


def test_a_worker_whose_signed_card_verifies_the_capability_is_eligible_6_1(flow: Flow) -> None:
    """The positive side: a compatible, verified capability on the current card (same major, not older)."""
    newer = make_agent("acme", "Nina Newer", ["worker"])
    card(newer, ("text.summarize", "1.4.1"))
    join(flow, newer)
    item = flow.authorize(contract(requiredCapabilities=[{"id": "text.summarize", "version": "1.2.0"}]))
    flow.offer(item, agents=[newer])
    flow.accept(item, newer)
    assert (flow.item(item).state, str(flow.item(item).owner_id)) == ("queued", newer.id)


def test_only_the_current_card_counts_6_1(flow: Flow) -> None:
    """A capability an earlier card version verified and the current one dropped earns nothing."""
    agent = make_agent("acme", "Cora Current", ["worker"])
    card(agent, ("text.summarize", "1.0.0"))
    card(agent, ("text.translate", "1.0.0"))
    join(flow, agent)
    item = flow.authorize()
    flow.offer(item, agents=[agent])
    refused(NOT_VERIFIED, flow.accept, item, agent)


# --- assignments pin the card and every required capability version -------------------------------------


def test_an_acceptance_pins_the_card_and_every_required_capability_version_6_1(flow: Flow) -> None:
    agent = make_agent("acme", "Pia Pinned", ["worker"])
    card(agent, ("text.summarize", "1.0.0"))
    assert card(agent, ("text.summarize", "1.3.0"), ("text.translate", "1.1.0")) == 2
    join(flow, agent)
    item = flow.authorize(contract(requiredCapabilities=[SUMMARIZE, TRANSLATE]))
    flow.offer(item, agents=[agent], selectionBasis={**BASIS, "requiredCapabilities": [SUMMARIZE, TRANSLATE]})
    receipt = flow.accept(item, agent)
    accepted = GroupEvent.objects.get(event_id=bare(receipt["events"][0]["eventId"], "eventId")).body
    # The card's versions, not the contract's minimums.
    pins = [{"id": "text.summarize", "version": "1.3.0"}, {"id": "text.translate", "version": "1.1.0"}]
    assert (accepted["agentCardVersion"], accepted["capabilityPins"]) == (2, pins)
    assert flow.item(item).pins == {"agentId": agent.urn, "agentCardVersion": 2, "capabilities": pins}
    # A later card leaves the pins of the assignment as accepted.
    card(agent, ("text.summarize", "1.5.0"), ("text.translate", "1.1.0"))
    assert flow.item(item).pins["agentCardVersion"] == 2
    # The WorkItem document (the Group snapshot's state) names the owner with the same pins.
    _, documents = snapshot_workitems(flow.group)
    owner = next(d for d in documents if d["workItemId"] == urn(item))["owner"]
    assert (owner["agentCardVersion"], owner["capabilityPins"]) == (2, pins)


# --- an incompatible upgrade fences active work; a compatible one continues ---------------------------------


@pytest.mark.parametrize(
    "upgrade",
    [(("text.summarize", "2.0.0"),), (("text.translate", "1.0.0"),)],
    ids=["major-version-changed", "capability-removed"],
)
def test_an_incompatible_upgrade_checkpoints_active_work_and_needs_renewed_acceptance_6_1(
    flow: Flow, upgrade: tuple[tuple[str, str], ...]
) -> None:
    item = flow.drive_to("active")
    flow.checkpoint(item)  # the Worker's last checkpoint: where the renewed attempt resumes
    flow.start(item)
    lease = flow.leases[item]
    epoch = flow.item(item).ownership_epoch
    version = card(flow.worker, *upgrade)
    it = flow.item(item)
    assert (it.state, it.owner_id, it.checkpoint_count) == ("queued", None, 1)
    fenced = events(flow, "ext.mwportal.work.ownership_fenced", item)[-1]
    assert fenced == {"workItemId": urn(item), "ownershipEpoch": epoch, "reason": "incompatible_card_upgrade",
                      "agentId": flow.worker.urn, "agentCardVersion": version}  # fmt: skip
    revoked = events(flow, "ext.missionweaveprotocol.core.work_execution_lease_revoked", item)[-1]
    assert (revoked["executionLeaseId"], revoked["reason"]) == (urn(lease), "incompatible_card_upgrade")
    # Execution does not continue under the old assignment ...
    refused(ErrorCode.WORK_STALE_OWNERSHIP, flow.start, item)
    # ... nor under the new card without a renewed acceptance it can win.
    flow.offer(item, agents=[flow.worker])
    refused(NOT_VERIFIED, flow.accept, item)
    card(flow.worker, ("text.summarize", "1.6.0"))
    flow.accept(item)
    assert (flow.item(item).ownership_epoch, flow.item(item).pins["agentCardVersion"]) == (epoch + 1, version + 1)
    flow.start(item)
    assert flow.item(item).state == "active"


def test_a_compatible_upgrade_continues_the_active_work_6_1(flow: Flow) -> None:
    item = flow.drive_to("active")
    before = flow.item(item)
    card(flow.worker, ("text.summarize", "1.9.0"), ("text.translate", "1.0.0"))
    after = flow.item(item)
    assert (after.state, after.owner_id, after.ownership_epoch, after.revision) == (
        "active", before.owner_id, before.ownership_epoch, before.revision
    )  # fmt: skip
    assert not events(flow, "ext.mwportal.work.ownership_fenced", item)
    flow.checkpoint(item)  # the lease still holds


# --- per-capability performance records, apart from the card ----------------------------------------------


def performance(reader: AgentKey, agent: AgentKey) -> Any:
    return http().get(f"{API}/agents/{agent.urn}/performance", **bearer(reader.extra["token"]))


def test_each_capability_keeps_its_own_performance_record_apart_from_the_card_6_1(flow: Flow) -> None:
    agent = make_agent("acme", "Rita Records", ["worker"])
    card(agent, ("text.summarize", "1.0.0"), ("text.translate", "1.0.0"))
    join(flow, agent)
    card_before = http().get(f"{API}/agents/{agent.urn}/card", **bearer(flow.coordinator.extra["token"])).json()
    empty = performance(flow.coordinator, agent)
    assert empty.status_code == 200 and empty.json() == {"agentId": agent.urn, "records": []}, show(empty)
    summary = flow.authorize()
    flow.offer(summary, agents=[agent])
    flow.accept(summary, agent)
    flow.start(summary, agent)
    flow.submit(summary, agent)
    flow.accept_result(summary)
    translation = flow.authorize(contract(requiredCapabilities=[TRANSLATE], goal="Translate the survey"))
    flow.offer(translation, agents=[agent], selectionBasis={**BASIS, "requiredCapabilities": [TRANSLATE]})
    flow.accept(translation, agent)
    flow.fail(translation)
    response = performance(flow.coordinator, agent)
    assert response.status_code == 200, show(response)
    records = {(r["capability"]["id"], r["capability"]["version"]): (r["completed"], r["failed"])
               for r in response.json()["records"]}  # fmt: skip
    assert records == {("text.summarize", "1.0.0"): (1, 0), ("text.translate", "1.0.0"): (0, 1)}
    assert set(response.json()) == {"agentId", "records"}  # no global score beside them
    card_after = http().get(f"{API}/agents/{agent.urn}/card", **bearer(flow.coordinator.extra["token"])).json()
    assert card_after == card_before
    assert AgentCard.objects.filter(agent_id=agent.id).count() == 1


def test_performance_records_are_the_organizations_not_every_agents_6_1(flow: Flow) -> None:
    """A Worker (no Coordinator role) reads none, not even its own, and another Organization's Agents none."""
    error_of(performance(flow.worker, flow.worker2), 404, "GROUP_NOT_FOUND")
    error_of(performance(flow.worker, flow.worker), 404, "GROUP_NOT_FOUND")
    error_of(http().get(f"{API}/agents/{flow.worker.urn}/performance"), 401, "AUTH_REQUIRED")
    assert performance(flow.coordinator, flow.worker).status_code == 200
