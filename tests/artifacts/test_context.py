"""Context Packages (spec 13.3): signed, versioned, scoped; never across Groups by default."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from artifacts.models import ContextForward, ContextPackage
from missions.models import Group, GroupEvent
from mwportal.protocol import ErrorCode, format_time, generate_keypair, signed
from mwportal.protocol.documents import CONTEXT_MEMBERS, document_hash
from tests.api.support import error_of
from tests.artifacts.conftest import Artifacts
from tests.conftest import AgentKey, Because, refused


def package_doc(
    art: Artifacts,
    agent: AgentKey,
    *,
    package: str | None = None,
    version: int = 1,
    previous: str | None = None,
    group: str | None = None,
    mission: str | None = None,
    artifacts: list[str] | None = None,
    key: str | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    group = group or art.group
    head = Group.objects.get(id=group).last_sequence
    doc: dict[str, Any] = {
        "schema": "mwp.context-package/1",
        "package": package or str(uuid.uuid4()),
        "version": version,
        "previous": previous,
        "scope": {"mission": mission or art.mission, "group": group, "workitem": None},
        "events": {"from": 1, "to": head},
        "artifacts": artifacts or [],
        "decisions": ["use the 2026 survey only"],
        "constraints": ["no personal data leaves the Group"],
        "questions": ["are late responses in scope?"],
        "generator": {"agent": agent.id, "agent_card_version": 0},
        "created_at": format_time(datetime.now(UTC)),
    }
    doc.update(overrides)
    return signed(key or agent.private_key, doc)


def publish(agent: AgentKey, group: str, doc: dict[str, Any]) -> dict[str, Any]:
    return agent.send("context.publish", group, {"package": doc})


def test_a_package_is_signed_scoped_and_carries_every_field_of_13_3(art: Artifacts) -> None:
    sha = art.upload(b"notes")
    doc = package_doc(art, art.coordinator, artifacts=[sha])
    receipt = publish(art.coordinator, art.group, doc)
    event = GroupEvent.objects.get(event_id=receipt["events"][0]["event_id"])
    assert event.type == "context.published"
    assert set(event.body["package"]) == set(CONTEXT_MEMBERS)
    row = ContextPackage.objects.get(package=doc["package"])
    assert row.document == doc and row.document_hash == document_hash(doc)
    assert (row.from_sequence, row.to_sequence) == (1, doc["events"]["to"])


def test_a_new_version_links_to_the_previous_one_13_3(art: Artifacts) -> None:
    first = package_doc(art, art.coordinator)
    publish(art.coordinator, art.group, first)
    package = first["package"]
    # A second version must name the first's hash.
    wrong = package_doc(art, art.coordinator, package=package, version=2, previous="ab" * 32)
    refused(ErrorCode.REVISION_CONFLICT, publish, art.coordinator, art.group, wrong)
    skipped = package_doc(art, art.coordinator, package=package, version=3, previous=document_hash(first))
    refused(ErrorCode.REVISION_CONFLICT, publish, art.coordinator, art.group, skipped)
    second = package_doc(art, art.coordinator, package=package, version=2, previous=document_hash(first))
    publish(art.coordinator, art.group, second)
    rows = list(ContextPackage.objects.filter(package=package).order_by("version"))
    assert [r.version for r in rows] == [1, 2]
    assert rows[1].previous_hash == rows[0].document_hash
    latest = art.get(f"/api/v1/groups/{art.group}/context-packages/{package}").json()
    assert latest["version"] == 2 and latest["document"]["previous"] == document_hash(first)
    assert art.get(f"/api/v1/groups/{art.group}/context-packages/{package}?version=1").json()["document"] == first


def test_a_package_signed_by_another_key_is_refused(art: Artifacts) -> None:
    stranger, _ = generate_keypair()
    refused(
        ErrorCode.AUTH_INVALID_SIGNATURE,
        publish,
        art.coordinator,
        art.group,
        package_doc(art, art.coordinator, key=stranger),
    )


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"generator": {"agent": "00000000-0000-4000-8000-000000000000", "agent_card_version": 0}},
         "body.package.generator.agent"),
        ({"events": {"from": 1, "to": 10_000}}, "body.package.events.to"),
        ({"version": 1, "previous": "ab" * 32}, "body.package.previous"),
        ({"reasoning": "my private thoughts"}, "body.package.reasoning"),
    ],
)  # fmt: skip
def test_a_malformed_package_is_refused_naming_the_field(art: Artifacts, override: dict[str, Any], field: str) -> None:
    err = refused(
        ErrorCode.SCHEMA_VALIDATION_FAILED,
        publish,
        art.coordinator,
        art.group,
        package_doc(art, art.coordinator, **override),
    )
    assert err.details["field"] == field


def test_group_content_never_enters_another_missions_context_by_default_13_3(
    art: Artifacts, other: dict[str, str]
) -> None:
    a_blob = art.upload(b"A's notes")
    # A package of B may not cite A's Artifacts, nor claim A's scope.
    refused(
        Because(ErrorCode.INVALID_COMMAND, "not_found"), publish, art.coordinator, other["group"],
        package_doc(art, art.coordinator, group=other["group"], mission=other["mission"], artifacts=[a_blob]),
    )  # fmt: skip
    refused(
        ErrorCode.SCHEMA_VALIDATION_FAILED, publish, art.coordinator, other["group"],
        package_doc(art, art.coordinator, group=art.group),
    )  # fmt: skip


def test_a_context_package_of_group_a_cannot_be_read_through_group_b_13_3(
    art: Artifacts, other: dict[str, str]
) -> None:
    doc = package_doc(art, art.coordinator)
    publish(art.coordinator, art.group, doc)
    package = doc["package"]
    # Carl and Walt are members of both Groups; through B the package does not exist.
    for agent in (art.coordinator, art.worker2):
        error_of(art.get(f"/api/v1/groups/{other['group']}/context-packages/{package}", agent), 404, "GROUP_NOT_FOUND")
        error_of(
            art.get(f"/api/v1/groups/{other['group']}/context-packages/{package}/events", agent), 404, "GROUP_NOT_FOUND"
        )
        assert art.get(f"/api/v1/groups/{other['group']}/context-packages", agent).json() == {"packages": []}
    # Through A, members read it; a non-member of A cannot use A at all.
    assert art.get(f"/api/v1/groups/{art.group}/context-packages/{package}", art.worker).status_code == 200
    assert (
        art.get(f"/api/v1/groups/{art.group}/context-packages", art.worker).json()["packages"][0]["package"] == package
    )


def test_non_members_and_unknown_packages_get_the_same_404_issue_16_item_8(art: Artifacts, outsider: AgentKey) -> None:
    doc = package_doc(art, art.coordinator)
    publish(art.coordinator, art.group, doc)
    error_of(art.get(f"/api/v1/groups/{art.group}/context-packages/{doc['package']}", outsider), 404, "GROUP_NOT_FOUND")
    error_of(art.get(f"/api/v1/groups/{art.group}/context-packages", outsider), 404, "GROUP_NOT_FOUND")
    error_of(art.get(f"/api/v1/groups/{art.group}/context-packages/{uuid.uuid4()}"), 404, "GROUP_NOT_FOUND")


def test_a_member_fetches_the_cited_events_13_3(art: Artifacts) -> None:
    doc = package_doc(art, art.coordinator)
    publish(art.coordinator, art.group, doc)
    response = art.get(f"/api/v1/groups/{art.group}/context-packages/{doc['package']}/events", art.worker)
    assert response.status_code == 200, response.content
    events = response.json()["events"]
    assert [e["sequence"] for e in events] == list(range(1, doc["events"]["to"] + 1))
    assert events[0]["type"] == "mission.created"


def test_forwarding_across_groups_needs_permission_and_leaves_an_auditable_event_13_3(
    art: Artifacts, other: dict[str, str], owner: AgentKey
) -> None:
    doc = package_doc(art, art.coordinator)
    publish(art.coordinator, art.group, doc)
    body = {"package": doc["package"], "version": 1, "to_group": other["group"]}
    # Wanda is only a worker of A: no forwarding.
    refused(ErrorCode.AUTH_FORBIDDEN, art.worker.send, "context.forward", art.group, body)
    # Carl coordinates A but is not in a third Mission Group: the check
    # covers the receiving Group too, and a Group he is not in answers as an
    # absent one (issue 16), exactly.
    third = _mission_without(owner, str(uuid.uuid4()))
    unseen = refused(
        ErrorCode.GROUP_NOT_FOUND, art.coordinator.send, "context.forward", art.group, {**body, "to_group": third}
    )
    absent = str(uuid.uuid4())
    missing = refused(
        ErrorCode.GROUP_NOT_FOUND, art.coordinator.send, "context.forward", art.group, {**body, "to_group": absent}
    )
    assert unseen.message.replace(third, "G") == missing.message.replace(absent, "G")
    assert unseen.details == missing.details == {"field": "body.to_group"}
    before_b = Group.objects.get(id=other["group"]).last_sequence
    receipt = art.coordinator.send("context.forward", art.group, body)
    assert [e["type"] for e in receipt["events"]] == ["context.forwarded"]
    received = GroupEvent.objects.get(group_id=other["group"], sequence=before_b + 1)
    assert received.type == "context.received" and received.body["from_group"] == art.group
    assert received.actor == art.coordinator.id
    assert ContextForward.objects.filter(to_group_id=other["group"]).count() == 1
    # Now B's members read that version through B...
    via_b = art.get(f"/api/v1/groups/{other['group']}/context-packages/{doc['package']}", art.worker2).json()
    assert via_b["forwarded"] is True and via_b["document"] == doc
    # ...but the cited Events stay A's: only A's members fetch them.
    outsider_of_a = _b_only_member(owner, other["group"])
    error_of(
        art.get(f"/api/v1/groups/{other['group']}/context-packages/{doc['package']}/events", outsider_of_a),
        404,
        "GROUP_NOT_FOUND",
    )
    refused(ErrorCode.INVALID_STATE_TRANSITION, art.coordinator.send, "context.forward", art.group, body)


def _mission_without(owner: AgentKey, group_id: str) -> str:
    owner.send("mission.create", group_id, {"mission": str(uuid.uuid4()), "title": "Third", "objective": "x"})
    return group_id


def _b_only_member(owner: AgentKey, group: str) -> AgentKey:
    from tests.artifacts.conftest import add_member
    from tests.conftest import make_agent

    bea = make_agent("acme", "Bea", ["worker"])
    add_member(owner, group, bea, ["worker"])
    return bea
