"""Evidence for every core Command and Event kind through the public REST binding (PROTOCOL §15.1, §15.2, §22).

The positive tests drive Missions with signed Command documents posted to
``/api/v0.1/commands`` (the ``rest`` fixture) and then read the Group's log
back from its REST event pages (``/api/v0.1/groups/<id>/events``): every Event
kind named here must be served there. The negative tests post a Command of
each kind whose payload breaks its schema: the answer is the normative
``SCHEMA_VALIDATION_FAILED`` error document and nothing is written, so the
Event the kind would yield is not appended. docs/core-kinds.md cites these
tests kind by kind (checked by tests/test_core_kinds_evidence.py).
"""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from missions.models import Mission
from mwportal.protocol import ErrorCode, ProtocolError, catalogue
from mwportal.protocol.ids import urn
from mwportal.protocol.values import b64url_encode
from tests.api.support import COMMANDS, bearer, error_of, events_url, http, nothing_written, post_json, show
from tests.conftest import AgentKey, add_member, group_revision, make_agent
from tests.conversations.conftest import amend, post
from tests.core.mission_support import (
    approve,
    end,
    flow_fixture,  # noqa: F401  (the flow fixture)
    held,
    new_mission_payload,
    request_changes,
    rest_fixture,  # noqa: F401  (every Command over REST)
    submit,
)
from tests.workitems.flow import COORDINATOR_EPOCH, RENEW, Flow, contract, give_card, stamp
from tests.workitems.test_delegation_grants import grant_payload

DEPENDENCY_ADD = "ext.missionweaveprotocol.core.work_dependency_add"
GROUP_ARCHIVE = "ext.missionweaveprotocol.core.group_archive"


def served_kinds(group: str, reader: AgentKey) -> list[str]:
    """The kinds of the Events the REST event pages serve ``reader`` for ``group``, in sequence order."""
    response = http().get(events_url(group, "afterSequence=0&limit=1000"), **bearer(reader.extra["token"]))
    assert response.status_code == 200, show(response)
    return [event["kind"] for event in response.json()["events"]]


# --- positive: accepted over REST, appended, served on the event pages (§15.2) ---------------------------


def test_the_workitem_kinds_are_accepted_appended_and_served_15_1_15_2(flow: Flow) -> None:
    flow.worker.send("work.propose", flow.group, {"proposalId": urn(uuid.uuid4()), "contract": contract(goal="Idea")})
    flow.drive_to("verified")  # authorize, offer, accept, start, publish, submit, accept_result
    paused = flow.drive_to("active")
    flow.renew(paused)
    flow.checkpoint(paused)
    flow.start(paused)
    flow.block(paused)
    flow.unblock(paused)
    flow.fail(flow.drive_to("offered"))
    flow.cancel(flow.drive_to("open"))
    gated = flow.authorize(contract(sideEffectRisk="external", executionApproval="human_required"))
    flow.offer(gated)
    flow.accept(gated)
    flow.approve(gated)
    first, second = flow.authorize(contract(goal="First part")), flow.authorize(contract(goal="Second part"))
    flow.send(flow.coordinator, DEPENDENCY_ADD, second, {"dependencyId": urn(first)})
    served = served_kinds(flow.group, flow.worker)
    expected = {
        "work.proposed", "work.authorized", "work.offer.created", "work.offer.accepted", "work.started",
        "artifact.published", "work.submitted", "work.result.accepted", "work.progressed", "work.checkpointed",
        "work.blocked", "work.unblocked", "work.failed", "work.cancelled", "approval.execution.granted",
        "work.contract.revised",
    }  # fmt: skip
    assert expected <= set(served), sorted(expected - set(served))


def test_the_message_and_membership_kinds_are_accepted_appended_and_served_15_1_15_2(flow: Flow) -> None:
    message = post(flow, flow.worker, "the survey has 412 answers")
    amend(flow, flow.worker, "message.correct", message, "typo", replacementContent="the survey has 421 answers")
    amend(flow, flow.worker, "message.retract", post(flow, flow.worker, "wrong thread"))
    amend(flow, flow.coordinator, "message.redact", post(flow, flow.worker2, "a password"), "contained a credential")
    dora = make_agent("acme", "Dora Delegate", ["worker"])
    add_member(flow.owner, flow.group, dora, ["work_delegate"])
    grant = grant_payload(dora, flow.authorize())
    flow.coordinator.send("membership.grant_delegation", flow.group, grant, coordinator_epoch=COORDINATOR_EPOCH)
    override = {
        "grantId": urn(uuid.uuid4()), "policyName": "queued_work_items", "beneficiary": flow.coordinator.actor,
        "targetCommandKind": "work.authorize", "targetActionId": urn(uuid.uuid4()),
        "reason": "one more WorkItem waiting", "expiresAt": stamp(datetime.now(UTC) + timedelta(hours=1)),
    }  # fmt: skip
    flow.owner.send("policy.grant_cooperation_override", flow.group, override)
    payload = {"principal": dora.actor}
    flow.owner.send("membership.end", flow.group, payload, expected_revision=group_revision(flow.group))
    served = served_kinds(flow.group, flow.worker)
    expected = {
        "message.posted", "message.corrected", "message.retracted", "message.redacted", "membership.changed",
        "membership.delegation.granted", "policy.cooperation_override.granted", "membership.ended",
    }  # fmt: skip
    assert expected <= set(served), sorted(expected - set(served))


def test_the_mission_kinds_are_accepted_appended_and_served_15_1_15_2(flow: Flow) -> None:
    from tests.core.mission_support import verified
    from tests.core.test_coordinator_lease import assign, publish_package, renew

    renew(flow.coordinator, flow.group)
    parent_item = flow.drive_to("open")
    _, child = flow.create_child(parent_item)
    flow.cancel(parent_item)  # a finished WorkItem: the submission below needs every result reviewed (§7.3)
    verified(flow)
    hashes = [held(flow.group, flow.worker)]
    submit(flow.coordinator, flow.group, hashes)
    request_changes(flow.owner, flow.group)
    submit(flow.coordinator, flow.group, hashes)
    approve(flow.owner, flow.group, hashes)
    follow_up = new_mission_payload(flow.coordinator, followUpOfMissionId=urn(flow.mission))
    follow_group = follow_up["groupId"].removeprefix("urn:uuid:")
    flow.owner.send("mission.create_follow_up", follow_group, follow_up)
    served = served_kinds(flow.group, flow.coordinator)
    expected = {
        "mission.created", "mission.coordinator.renewed", "mission.child.created",
        "mission.submitted_for_approval", "mission.changes_requested", "mission.approved",
    }  # fmt: skip
    assert expected <= set(served), sorted(expected - set(served))
    assert served_kinds(follow_group, flow.coordinator)[0] == "mission.follow_up.created"
    assert served_kinds(child, flow.coordinator)[0] == "mission.created"  # the child's own first fact
    # The follow-up: its Coordinator replaced (with the former one's Context Package), then terminated.
    replaced = Flow({"group": follow_group, "mission": follow_up["missionId"][9:]}, *_cast(flow))
    publish_package(replaced)
    cora = give_card(make_agent("acme", "Cora Coordinator", ["coordinator"]))
    assign(flow.owner, follow_group, cora)
    assert "mission.coordinator.assigned" in served_kinds(follow_group, cora)
    end(cora, "mission.terminate", follow_group)
    assert served_kinds(follow_group, cora)[-1] == "mission.terminated"


def _cast(flow: Flow) -> tuple[AgentKey, AgentKey, AgentKey, AgentKey]:
    return flow.owner, flow.coordinator, flow.worker, flow.worker2


def test_a_cancelled_mission_is_archived_and_its_archival_facts_are_served_7_4_15_2(
    flow: Flow, settings: Any, tmp_path: Path
) -> None:
    settings.MWP_AUDIT_ENCRYPTION_KEY = b64url_encode(bytes(range(32)))
    settings.MWP_AUDIT_ARCHIVE_DIR = str(tmp_path / "audit-archive")
    end(flow.owner, "mission.cancel", flow.group)
    assert Mission.objects.get(group_id=flow.group).status == "cancelled"
    # The Organization-owned archival Command (§15.2) is the service's: its operator runs it.
    call_command("mwp", "archive", urn(flow.group), stdout=io.StringIO())
    served = served_kinds(flow.group, flow.worker)
    assert served[-3:] == ["mission.cancelled", "group.snapshot.created", "group.archived"], served[-3:]


# --- §7.1's first row: a human creates a root Mission, an Agent cannot -----------------------------------


def test_a_human_creates_a_root_mission_over_rest_and_an_agent_cannot_7_1(flow: Flow) -> None:
    payload = new_mission_payload(flow.coordinator)
    group = payload["groupId"].removeprefix("urn:uuid:")
    for agent in (flow.coordinator, flow.worker):
        document = agent.command("mission.create", group, payload)
        with nothing_written():
            response = post_json(http(), COMMANDS, document)
        error_of(response, 400, "SCHEMA_VALIDATION_FAILED")  # the Command schema holds the actor to a human
    assert not Mission.objects.filter(group_id=group).exists()
    flow.owner.send("mission.create", group, payload)
    assert Mission.objects.get(group_id=group).status == "active"
    assert served_kinds(group, flow.coordinator)[0] == "mission.created"


def test_a_worker_cannot_end_a_membership_the_mission_owner_can_8(flow: Flow) -> None:
    payload = {"principal": flow.worker2.actor}
    document = flow.worker.command("membership.end", flow.group, payload, expected_revision=group_revision(flow.group))
    with nothing_written():
        response = post_json(http(), COMMANDS, document)
    assert "membership.end needs the Group role" in error_of(response, 403, "AUTH_FORBIDDEN")["message"]
    flow.owner.send("membership.end", flow.group, payload, expected_revision=group_revision(flow.group))
    assert served_kinds(flow.group, flow.worker)[-1] == "membership.ended"


# --- negative: a Command of each kind that breaks its schema writes nothing (§15.1, §19) ------------------

HUMAN_KINDS = {
    "mission.create", "mission.create_follow_up", "mission.approve", "mission.request_changes", "mission.cancel",
    "membership.change", "membership.end", "approval.grant_execution", "policy.grant_cooperation_override",
}  # fmt: skip
# The core Command kinds (§15.1) and the Organization-owned kinds whose core Events §15.2 names.
KINDS = [
    "mission.create", "mission.assign_coordinator", "mission.renew_coordinator", "mission.submit_for_approval",
    "mission.approve", "mission.request_changes", "mission.cancel", "mission.terminate", "mission.create_child",
    "mission.create_follow_up", "membership.change", "membership.end", "membership.grant_delegation",
    "message.post", "message.correct", "message.retract", "message.redact", "work.propose", "work.authorize",
    "work.offer", "work.accept_offer", "work.start", "work.checkpoint", "work.block", "work.unblock",
    "work.submit", "work.accept_result", "work.fail", "work.cancel", "artifact.publish",
    "approval.grant_execution", "policy.grant_cooperation_override", DEPENDENCY_ADD, RENEW, GROUP_ARCHIVE,
]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_a_command_of_each_kind_breaking_its_payload_schema_is_refused_and_nothing_written_15_1_19(
    flow: Flow, kind: str
) -> None:
    item = flow.drive_to({"work.accept_offer": "offered", "work.unblock": "blocked"}.get(kind, "active"))
    workers = {
        "work.accept_offer",
        "work.start",
        "work.checkpoint",
        "work.block",
        "work.submit",
        "artifact.publish",
        RENEW,
    }
    sender = flow.owner if kind in HUMAN_KINDS else flow.worker if kind in workers else flow.coordinator
    kw: dict[str, Any] = {}
    if catalogue.command(kind).compare_and_set:
        on_item = kind.startswith(("work.", "artifact.", "approval.")) or kind in (DEPENDENCY_ADD, RENEW)
        kw["expected_revision"] = flow.revision(item) if on_item else group_revision(flow.group)
    if sender is flow.coordinator:
        kw["coordinator_epoch"] = COORDINATOR_EPOCH
    group = str(uuid.uuid4()) if kind in ("mission.create", "mission.create_follow_up") else flow.group
    # Every payload schema here requires a member this payload lacks, or (where all but ``workItemId`` are
    # optional: mission.renew_coordinator, work.accept_offer, work.unblock) types one of these members otherwise.
    mistyped = {"leaseSeconds": "ten minutes", "ownershipLeaseSeconds": "long", "resolution": 42}
    payload = {"workItemId": urn(item), **mistyped}
    document = sender.command(kind, group, payload, work_item_id=item, **kw)
    with nothing_written():
        response = post_json(http(), COMMANDS, document)
    error = error_of(response, 400, "SCHEMA_VALIDATION_FAILED")
    assert "/payload" in str(error["details"].get("field", "")) or "payload" in error["message"], error


def test_the_archival_command_is_the_organizations_not_a_members_7_4_15_2(flow: Flow) -> None:
    end(flow.owner, "mission.cancel", flow.group)
    for sender in (flow.owner, flow.coordinator):
        kw = {"coordinator_epoch": COORDINATOR_EPOCH} if sender is flow.coordinator else {}
        example = dict(catalogue.command(GROUP_ARCHIVE).examples[0])  # a well-formed snapshot
        example["snapshot"] = {**example["snapshot"], "groupId": urn(flow.group)}
        document = sender.command(GROUP_ARCHIVE, flow.group, example, **kw)
        with nothing_written():
            response = post_json(http(), COMMANDS, document)
        assert "is not issued by" in error_of(response, 403, "AUTH_FORBIDDEN")["message"]
    assert "group.archived" not in served_kinds(flow.group, flow.worker)


def test_an_artifact_is_published_only_under_the_current_execution_lease_11_3_13_1(flow: Flow) -> None:
    item = flow.drive_to("active")
    content = flow.blob(b"# summary under the lease\n")
    with nothing_written(), pytest.raises(ProtocolError) as refusal:
        flow.publish(item, content, lease_id=str(uuid.uuid4()))  # a lease the WorkItem never had
    assert refusal.value.code == ErrorCode.WORK_LEASE_EXPIRED, refusal.value
    assert "artifact.published" not in served_kinds(flow.group, flow.worker)
    flow.publish(item, content)
    assert served_kinds(flow.group, flow.worker)[-1] == "artifact.published"
