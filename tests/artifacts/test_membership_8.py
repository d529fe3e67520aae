"""Membership over the REST binding (PROTOCOL §8): the roles of ``membership.schema.json``, epochs,
``visibilityStartSequence`` on every read path, and just-in-time (provisional) Membership.

Every Command here is a signed document posted to ``/api/v0.1/commands``; every read is a GET of the
REST binding with the reader's bearer token.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from missions.models import Group, GroupEvent, Membership
from missions.snapshots import group_state, snapshot_now
from mwportal.protocol.command import format_timestamp
from mwportal.protocol.ids import urn
from tests.api.support import (
    COMMANDS,
    MEMBERSHIPS,
    error_of,
    events_url,
    http,
    normative,
    post_json,
    show,
    snapshot_url,
)
from tests.artifacts.conftest import Artifacts, give_card
from tests.artifacts.test_context import package_doc, package_url, publish
from tests.conftest import AgentKey, group_revision, make_agent, make_person

pytestmark = pytest.mark.django_db

# membership.schema.json's role enum, written out: the oracle is the schema, not the code's table.
SCHEMA_ROLES = ["mission_owner", "coordinator", "worker", "reviewer", "observer", "work_delegate"]


def post(agent: AgentKey, kind: str, group: str, payload: dict[str, Any], **kw: Any) -> Any:
    """``agent``'s signed Command, posted to the REST binding."""
    return post_json(http(), COMMANDS, agent.command(kind, group, payload, **kw))


def created(response: Any) -> dict[str, Any]:
    assert response.status_code == 201, show(response)
    return dict(response.json())


def grant(by: AgentKey, group: str, member: AgentKey, roles: list[str], **payload: Any) -> Any:
    kw: dict[str, Any] = {"expected_revision": group_revision(group)}
    if by.kind == "agent":
        kw["coordinator_epoch"] = 1
    return post(by, "membership.change", group, {"principal": member.actor, "roles": roles, **payload}, **kw)


def changed(group: str, member: AgentKey) -> list[dict[str, Any]]:
    """The ``membership.changed`` Memberships of ``member``, in log order."""
    rows = GroupEvent.objects.filter(group_id=group, type="membership.changed").order_by("sequence")
    return [r.body["membership"] for r in rows if r.body["membership"]["member"]["id"] == member.urn]


def page(group: str, reader: AgentKey, after: int = 0) -> list[int]:
    response = http().get(events_url(group, f"afterSequence={after}&limit=1000"), **auth(reader))
    assert response.status_code == 200, show(response)
    return [e["sequence"] for e in response.json()["events"]]


def auth(agent: AgentKey) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {agent.extra['token']}"}


def head(group: str) -> int:
    return int(Group.objects.get(id=group).last_sequence)


def message(agent: AgentKey, group: str, **kw: Any) -> Any:
    from missions.handlers.common import main_conversation_id

    payload = {"messageId": urn(uuid.uuid4()), "conversationId": urn(main_conversation_id(group)), "content": "hi"}
    return post(agent, "message.post", group, payload, **kw)


@pytest.fixture
def jit(org: dict[str, str]) -> AgentKey:
    """Jin, a candidate Worker with an Agent Card and no Membership yet."""
    return give_card(make_agent("acme", "Jin Justintime", ["worker"]))


@pytest.fixture
def package(art: Artifacts) -> dict[str, Any]:
    """A signed Context Package the Coordinator published in the Group, citing its log so far."""
    doc = package_doc(art, art.coordinator)
    publish(art.coordinator, art.group, doc)
    return doc


# --- roles (membership.schema.json) -----------------------------------------------------------


@pytest.mark.parametrize("role", ["worker", "reviewer", "observer", "work_delegate"])
def test_each_grantable_schema_role_is_a_normative_membership_8(art: Artifacts, jit: AgentKey, role: str) -> None:
    created(grant(art.owner, art.group, jit, [role]))
    [doc] = changed(art.group, jit)
    normative("membership", doc)
    assert doc["role"] == role and doc["role"] in SCHEMA_ROLES and doc["state"] == "active"


@pytest.mark.parametrize("role", ["admin", "owner", "Worker", "delegate"])
def test_a_role_outside_the_schema_is_refused_8(art: Artifacts, jit: AgentKey, role: str) -> None:
    error_of(grant(art.owner, art.group, jit, [role]), 400, "SCHEMA_VALIDATION_FAILED")
    assert not Membership.objects.filter(group_id=art.group, agent_id=jit.id).exists()


def test_mission_owner_and_coordinator_memberships_see_the_whole_history_8(art: Artifacts) -> None:
    everything = list(range(1, head(art.group) + 1))
    assert page(art.group, art.coordinator) == everything
    assert Membership.objects.get(group_id=art.group, agent_id=art.owner.id).visibility_start == 0
    # The MissionOwner's visibility is not restricted by a change of its other roles.
    refusal = grant(art.owner, art.group, art.owner, ["mission_owner", "observer"], visibilityAfterSequence=2)
    error_of(refusal, 400, "INVALID_COMMAND")
    created(grant(art.owner, art.group, art.owner, ["mission_owner", "observer"]))
    assert all(d["visibilityStartSequence"] == 0 for d in changed(art.group, art.owner))


# --- epochs -----------------------------------------------------------------------------------


def test_every_change_moves_the_epoch_and_the_old_epoch_is_stale_8(art: Artifacts) -> None:
    g, wanda = art.group, art.worker
    epochs = [Membership.objects.get(group_id=g, agent_id=wanda.id).epoch]
    stale = wanda.command("message.post", g, {"messageId": urn(uuid.uuid4()), "conversationId": urn(uuid.uuid4()),
                                              "content": "x"})  # fmt: skip
    created(grant(art.owner, g, wanda, ["worker", "reviewer"]))  # a role change
    epochs.append(Membership.objects.get(group_id=g, agent_id=wanda.id).epoch)
    created(grant(art.owner, g, wanda, ["worker", "reviewer"], visibilityAfterSequence=1))  # a visibility change
    epochs.append(Membership.objects.get(group_id=g, agent_id=wanda.id).epoch)
    assert epochs == [epochs[0], epochs[0] + 1, epochs[0] + 2]
    assert [d["membershipEpoch"] for d in changed(g, wanda)][-2:] == [epochs[2]] * 2
    error_of(post_json(http(), COMMANDS, stale), 409, "MEMBERSHIP_STALE")
    created(message(wanda, g))  # the current epoch is accepted


def test_an_ended_memberships_commands_find_no_group_8(art: Artifacts) -> None:
    g, wanda = art.group, art.worker
    before = wanda.command("message.post", g, {"messageId": urn(uuid.uuid4()), "conversationId": urn(uuid.uuid4()),
                                               "content": "x"})  # fmt: skip
    created(post(art.owner, "membership.end", g, {"principal": wanda.actor}, expected_revision=group_revision(g)))
    # The project's answer for a Group one is not a member of (issue 16 item 8): GROUP_NOT_FOUND.
    error_of(post_json(http(), COMMANDS, before), 404, "GROUP_NOT_FOUND")
    ended = Membership.objects.get(group_id=g, agent_id=wanda.id).epoch
    error_of(message(wanda, g, membership_epoch=ended), 404, "GROUP_NOT_FOUND")  # under the ending's epoch too
    created(message(art.worker2, g))  # another member is unaffected


# --- visibilityStartSequence ------------------------------------------------------------------


def test_a_restricted_member_reads_events_from_its_visibility_start_only_8(art: Artifacts, jit: AgentKey) -> None:
    g = art.group
    cut = head(g)
    created(grant(art.owner, g, jit, ["worker"], visibilityAfterSequence=cut))
    [doc] = changed(g, jit)
    assert doc["visibilityStartSequence"] == cut + 1
    top = head(g)
    assert page(g, jit) == list(range(cut + 1, top + 1))  # afterSequence 0 starts at its visibility start
    assert page(g, jit, cut - 2) == list(range(cut + 1, top + 1))
    assert page(g, jit, cut + 1) == list(range(cut + 2, top + 1))
    assert page(g, art.worker) == list(range(1, top + 1))  # an unrestricted member reads everything
    error_of(grant(art.owner, g, art.worker2, ["worker"], visibilityAfterSequence=top + 5), 400, "INVALID_COMMAND")


def test_a_restricted_member_reads_no_snapshot_of_the_whole_history_8(art: Artifacts, jit: AgentKey) -> None:
    g = art.group
    created(grant(art.owner, g, jit, ["worker"], visibilityAfterSequence=head(g)))
    snapshot = snapshot_now(g)
    error_of(http().get(snapshot_url(g, snapshot.sequence), **auth(jit)), 403, "AUTH_FORBIDDEN")
    assert http().get(snapshot_url(g, snapshot.sequence), **auth(art.worker)).status_code == 200


def test_a_restricted_member_retrieves_the_events_its_context_package_cites_8(
    art: Artifacts, jit: AgentKey, package: dict[str, Any]
) -> None:
    g = art.group
    cited = package["sourceEventRange"]
    art.authorize()  # history after the package and before the grant: neither cited nor visible
    created(grant(art.coordinator, g, jit, ["worker"], visibilityAfterSequence=head(g)))
    start = changed(g, jit)[0]["visibilityStartSequence"]
    response = http().get(package_url(g, package["contextPackageId"], "/events"), **auth(jit))
    assert response.status_code == 200, show(response)
    served = [e["sequence"] for e in response.json()["events"]]
    assert served == list(range(cited["fromSequence"], cited["toSequence"] + 1))
    assert set(range(cited["toSequence"] + 1, start)).isdisjoint(served + page(g, jit))


# --- just-in-time Membership (§8 steps 1-4) ---------------------------------------------------


def test_a_provisional_member_receives_its_offer_and_context_package_and_activates_by_accepting_8(
    art: Artifacts, jit: AgentKey, package: dict[str, Any]
) -> None:
    g = art.group
    item = art.authorize()
    before = head(g)
    # Step 1: the Coordinator grants scoped provisional Membership with the candidate's Context Package.
    created(grant(art.coordinator, g, jit, ["worker"], provisional=True, contextPackageId=package["contextPackageId"]))
    [doc] = changed(g, jit)
    normative("membership", doc)
    assert (doc["state"], doc["contextPackageId"]) == ("provisional", package["contextPackageId"])
    assert doc["visibilityStartSequence"] == before + 1 and "provisionalExpiresAt" in doc
    # Step 2: it receives the expiring offer and the signed Context Package.
    art.offer(item, [jit])
    offers = [e for e in http().get(events_url(g), **auth(jit)).json()["events"] if e["kind"] == "work.offer.created"]
    assert [o["payload"]["candidateAgentIds"] for o in offers] == [[jit.urn]]
    shown = http().get(package_url(g, package["contextPackageId"]), **auth(jit))
    assert shown.status_code == 200 and shown.json()["contextPackage"] == package
    assert page(g, jit)[0] == before + 1  # no history before its grant
    [mine] = [m for m in http().get(MEMBERSHIPS, **auth(jit)).json()["memberships"] if m["groupId"] == urn(g)]
    assert mine == normative("membership", mine) and mine["state"] == "provisional"
    assert mine["visibilityStartSequence"] == before + 1
    # Step 3: accepting activates the Membership (a new epoch) and creates ownership.
    epoch = Membership.objects.get(group_id=g, agent_id=jit.id).epoch
    stale = jit.command("message.post", g, {"messageId": urn(uuid.uuid4()), "conversationId": urn(uuid.uuid4()),
                                            "content": "x"})  # fmt: skip
    created(post(jit, "work.accept_offer", g, {"workItemId": urn(item)}, expected_revision=art.item(item).revision))
    assert str(art.item(item).owner_id) == jit.id
    row = Membership.objects.get(group_id=g, agent_id=jit.id)
    assert (row.provisional, row.epoch) == (False, epoch + 1)
    active = changed(g, jit)[-1]
    normative("membership", active)
    assert (active["state"], active["membershipEpoch"]) == ("active", epoch + 1)
    error_of(post_json(http(), COMMANDS, stale), 409, "MEMBERSHIP_STALE")
    created(message(jit, g))  # an active member speaks in the Group
    [restored] = [m for m in group_state(g)["memberships"] if m["member"]["id"] == jit.urn]
    assert (restored["state"], restored["visibilityStartSequence"]) == ("active", before + 1)


def test_a_provisional_member_can_do_nothing_but_take_or_decline_its_offer_8(
    art: Artifacts, jit: AgentKey, package: dict[str, Any]
) -> None:
    g = art.group
    item = art.authorize()
    created(grant(art.coordinator, g, jit, ["worker"], provisional=True, contextPackageId=package["contextPackageId"]))
    art.offer(item, [jit])
    refusal = error_of(message(jit, g), 403, "AUTH_FORBIDDEN")
    assert refusal["details"]["reason"] == "membership_provisional"
    other = art.authorize()
    start = post(jit, "work.start", g, {"workItemId": urn(other), "ownershipEpoch": 1},
                 expected_revision=art.item(other).revision)  # fmt: skip
    assert error_of(start, 403, "AUTH_FORBIDDEN")["details"]["reason"] == "membership_provisional"
    assert Membership.objects.get(group_id=g, agent_id=jit.id).provisional


def test_an_expired_provisional_membership_cannot_accept_8(
    art: Artifacts, jit: AgentKey, package: dict[str, Any]
) -> None:
    g = art.group
    item = art.authorize()
    expires = format_timestamp(timezone.now() + timedelta(seconds=120))
    created(grant(art.coordinator, g, jit, ["worker"], provisional=True, contextPackageId=package["contextPackageId"],
                  provisionalExpiresAt=expires))  # fmt: skip
    art.offer(item, [jit])
    with time_machine.travel(timezone.now() + timedelta(seconds=180)):
        response = post(
            jit, "work.accept_offer", g, {"workItemId": urn(item)}, expected_revision=art.item(item).revision
        )
        assert error_of(response, 403, "MEMBERSHIP_REQUIRED")["details"]["reason"] == "provisional_expired"
        # Nor does it read the Group any more, nor its Context Package.
        error_of(http().get(events_url(g), **auth(jit)), 404, "GROUP_NOT_FOUND")
        error_of(http().get(package_url(g, package["contextPackageId"]), **auth(jit)), 404, "GROUP_NOT_FOUND")
    assert http().get(events_url(g), **auth(jit)).status_code == 200  # before its expiry it did
    assert art.item(item).owner_id is None


def test_a_provisional_grant_needs_a_context_package_of_the_group_and_an_agent_candidate_8(
    art: Artifacts, jit: AgentKey, package: dict[str, Any]
) -> None:
    g = art.group
    error_of(grant(art.coordinator, g, jit, ["worker"], provisional=True), 400, "INVALID_COMMAND")
    unknown = grant(art.coordinator, g, jit, ["worker"], provisional=True, contextPackageId=urn(uuid.uuid4()))
    assert error_of(unknown, 400, "INVALID_COMMAND")["details"]["reason"] == "not_found"
    error_of(grant(art.coordinator, g, jit, ["worker"], contextPackageId=package["contextPackageId"]),
             400, "INVALID_COMMAND")  # fmt: skip
    person = make_person("acme", "Polly Person", [])
    error_of(grant(art.coordinator, g, person, ["reviewer"], provisional=True,
                   contextPackageId=package["contextPackageId"]), 400, "INVALID_COMMAND")  # fmt: skip
    error_of(grant(art.coordinator, g, jit, ["observer"], provisional=True,
                   contextPackageId=package["contextPackageId"]), 400, "INVALID_COMMAND")  # fmt: skip
    # A member already active does not become provisional.
    error_of(grant(art.coordinator, g, art.worker, ["worker", "reviewer"], provisional=True,
                   contextPackageId=package["contextPackageId"]), 422, "INVALID_STATE_TRANSITION")  # fmt: skip
    assert not Membership.objects.filter(group_id=g, agent_id=jit.id).exists()


# --- Organization services (§8, §15.1) ----------------------------------------------------------


def test_an_organization_service_command_carries_no_membership_epoch_and_holds_no_membership_8(
    art: Artifacts,
) -> None:
    from missions.authority import accept
    from missions.commands import group_service_command
    from missions.models import Agent

    g = art.group
    command = group_service_command("mission.terminate", g, {"reason": "policy"}, expected_revision=group_revision(g))
    assert command.doc.membership_epoch is None  # authorized by Organization policy, no invented epoch
    accept(command)
    assert GroupEvent.objects.filter(group_id=g, type="mission.terminated").exists()
    service = Agent.objects.filter(organization_id=Group.objects.get(id=g).organization_id, kind=Agent.KIND_SERVICE)
    assert not Membership.objects.filter(group_id=g, agent__in=service).exists()


def test_a_service_principal_is_granted_no_membership_8(art: Artifacts) -> None:
    from missions.models import Agent

    service = Agent.objects.filter(organization_id=Group.objects.get(id=art.group).organization_id,
                                   kind=Agent.KIND_SERVICE).first()  # fmt: skip
    assert service is not None
    actor = {"type": "service", "id": urn(service.id)}
    response = post(art.owner, "membership.change", art.group, {"principal": actor, "roles": ["observer"]},
                    expected_revision=group_revision(art.group))  # fmt: skip
    error_of(response, 400, "INVALID_COMMAND")


# --- the end of a just-in-time Membership (§8 step 4) -------------------------------------------


def _joined(art: Artifacts, jit: AgentKey, package: dict[str, Any]) -> str:
    """Jin joins provisionally, is offered a WorkItem and accepts it; the WorkItem's ID."""
    g = art.group
    item = art.authorize()
    created(grant(art.coordinator, g, jit, ["worker"], provisional=True, contextPackageId=package["contextPackageId"]))
    art.offer(item, [jit])
    created(post(jit, "work.accept_offer", g, {"workItemId": urn(item)}, expected_revision=art.item(item).revision))
    return item


def cancel(art: Artifacts, item: str) -> dict[str, Any]:
    payload = {"workItemId": urn(item), "reason": "superseded"}
    return created(post(art.coordinator, "work.cancel", art.group, payload, coordinator_epoch=1,
                        expected_revision=art.item(item).revision))  # fmt: skip


def test_a_just_in_time_membership_ends_when_its_worker_has_no_workitem_left_8(
    art: Artifacts, jit: AgentKey, package: dict[str, Any]
) -> None:
    g = art.group
    item = _joined(art, jit, package)
    second = art.authorize()
    art.offer(second, [jit])
    receipt = cancel(art, item)
    assert "membership.ended" not in [e["kind"] for e in receipt["events"]]  # an open offer is still its obligation
    assert Membership.objects.get(group_id=g, agent_id=jit.id).active
    epoch = Membership.objects.get(group_id=g, agent_id=jit.id).epoch
    payload = {"workItemId": urn(second), "reason": "superseded"}
    receipt = created(post(art.coordinator, "work.cancel", g, payload, coordinator_epoch=1,
                           expected_revision=art.item(second).revision))  # fmt: skip
    assert [e["kind"] for e in receipt["events"]][-1] == "membership.ended"
    [ended] = GroupEvent.objects.filter(group_id=g, type="membership.ended")
    assert ended.body["principal"] == jit.actor
    row = Membership.objects.get(group_id=g, agent_id=jit.id)
    assert (row.active, row.epoch) == (False, epoch + 1)
    error_of(message(jit, g, membership_epoch=row.epoch), 404, "GROUP_NOT_FOUND")


def test_a_workers_membership_granted_outright_does_not_end_with_its_work_8(art: Artifacts) -> None:
    g = art.group
    item = art.authorize()
    art.offer(item, [art.worker])
    art.accept(item)
    receipt = cancel(art, item)
    assert "membership.ended" not in [e["kind"] for e in receipt["events"]]
    assert Membership.objects.get(group_id=g, agent_id=art.worker.id).active
    created(message(art.worker, g))
