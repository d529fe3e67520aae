"""Context Packages (PROTOCOL §13.3): signed, versioned, scoped; never across Groups by default.

Each version is a normative ``context-package.schema.json`` document signed by
its generating Agent; version n+1 names version n in ``previousContextPackageId``.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from artifacts.models import ContextForward, ContextPackage
from missions.models import Group, GroupEvent
from mwportal.protocol import ErrorCode, jcs
from mwportal.protocol.command import Key
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import sign_document
from tests.api.support import API, error_of, normative
from tests.artifacts.conftest import Artifacts, events_of, make_coordinator, new_mission, now_text
from tests.conftest import AgentKey, Because, add_member, make_agent, refused

PUBLISH = "ext.mwportal.context.package_publish"
FORWARD = "ext.mwportal.context.package_forward"


def package_doc(
    art: Artifacts,
    agent: AgentKey,
    *,
    version: int = 1,
    previous: str | None = None,
    group: str | None = None,
    mission: str | None = None,
    artifacts: list[str] | None = None,
    key: Key | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """A complete Context Package version citing the Group's whole log, signed by ``agent`` (or ``key``)."""
    group = group or art.group
    events = list(GroupEvent.objects.filter(group_id=group).order_by("sequence").values_list("event_id", flat=True))
    doc: dict[str, Any] = {
        "contextPackageId": urn(uuid.uuid4()),
        "version": version,
        "missionId": urn(mission or art.mission),
        "groupId": urn(group),
        "sourceEventRange": {"fromSequence": 1, "toSequence": len(events), "eventIds": [urn(e) for e in events]},
        "artifactHashes": artifacts or [],
        "summary": "The survey covers 2026; late responses are open.",
        "decisions": [{"description": "use the 2026 survey only", "sourceEventIds": [urn(events[0])]}],
        "constraints": ["no personal data leaves the Group"],
        "unresolvedQuestions": ["are late responses in scope?"],
        "generatedBy": agent.actor,
        "generatedAt": now_text(),
    }
    if previous is not None:
        doc["previousContextPackageId"] = previous
    doc.update(overrides)
    signer = key or agent.key
    return sign_document(doc, key_id=signer.key_id, seed=signer.seed, profile="context-package")


def publish(agent: AgentKey, group: str, doc: dict[str, Any]) -> dict[str, Any]:
    return agent.send(PUBLISH, group, {"contextPackage": doc}, coordinator_epoch=1)


def forward(agent: AgentKey, group: str, doc: dict[str, Any], to_group: str, **kw: Any) -> dict[str, Any]:
    payload = {"contextPackageId": doc["contextPackageId"], "version": doc["version"], "toGroupId": urn(to_group)}
    return agent.send(FORWARD, group, {**payload, **kw}, coordinator_epoch=1)


def package_url(group: str, package: str = "", tail: str = "") -> str:
    return f"{API}/groups/{urn(group)}/context-packages" + (f"/{package}" if package else "") + tail


def test_a_package_is_signed_scoped_and_carries_every_field_of_13_3(art: Artifacts) -> None:
    sha = art.upload(b"notes")
    doc = package_doc(art, art.coordinator, artifacts=[sha], workItemId=urn(art.authorize()))
    normative("context-package", doc)
    publish(art.coordinator, art.group, doc)
    (event,) = events_of(art.group, "ext.mwportal.context.package_published")
    normative("event", event)
    digest = jcs.sha256_hash(jcs.canonicalize(doc))
    assert event["payload"] == {"contextPackage": doc, "documentHash": digest}
    row = ContextPackage.objects.get(package=doc["contextPackageId"].removeprefix("urn:uuid:"))
    assert row.document == doc and f"sha256:{row.document_hash}" == digest
    assert (row.from_sequence, row.to_sequence) == (1, doc["sourceEventRange"]["toSequence"])
    shown = art.get(package_url(art.group, doc["contextPackageId"]), art.worker).json()
    assert shown["contextPackage"] == doc and shown["documentHash"] == digest and shown["forwarded"] is False


def test_a_new_version_names_the_previous_one_13_3(art: Artifacts) -> None:
    first = package_doc(art, art.coordinator)
    publish(art.coordinator, art.group, first)
    # Version 2 names version 1; a version that skips, or names none, is refused.
    skipped = package_doc(art, art.coordinator, version=3, previous=first["contextPackageId"])
    conflict = refused(ErrorCode.REVISION_CONFLICT, publish, art.coordinator, art.group, skipped)
    assert (conflict.expected_revision, conflict.current_revision) == (2, 1)
    orphan = package_doc(art, art.coordinator, version=2)
    assert refused(ErrorCode.SCHEMA_VALIDATION_FAILED, publish, art.coordinator, art.group, orphan).details == {
        "field": "/payload/contextPackage/previousContextPackageId"
    }
    unknown = package_doc(art, art.coordinator, version=2, previous=urn(uuid.uuid4()))
    refused(Because(ErrorCode.INVALID_COMMAND, "not_found"), publish, art.coordinator, art.group, unknown)
    second = package_doc(art, art.coordinator, version=2, previous=first["contextPackageId"])
    publish(art.coordinator, art.group, second)
    # A fork of version 1 (another version 2) is a conflict: one chain, one version of each number.
    fork = package_doc(art, art.coordinator, version=2, previous=first["contextPackageId"])
    refused(ErrorCode.REVISION_CONFLICT, publish, art.coordinator, art.group, fork)
    rows = list(ContextPackage.objects.order_by("version"))
    assert [r.version for r in rows] == [1, 2]
    assert rows[1].previous_package == rows[0].package and rows[1].lineage == rows[0].package
    shown = art.get(package_url(art.group, second["contextPackageId"])).json()
    assert shown["version"] == 2 and shown["lineageId"] == first["contextPackageId"]
    assert art.get(package_url(art.group, first["contextPackageId"])).json()["contextPackage"] == first


def test_a_package_signed_by_another_key_is_refused_6_4(art: Artifacts) -> None:
    stranger = Key.generate()
    refused(
        ErrorCode.AUTH_INVALID_SIGNATURE,
        publish,
        art.coordinator,
        art.group,
        package_doc(art, art.coordinator, key=Key(art.coordinator.key.key_id, stranger.seed)),
    )


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"generatedBy": {"type": "agent", "id": urn(uuid.uuid4())}}, "/payload/contextPackage/generatedBy"),
        ({"sourceEventRange": {"fromSequence": 1, "toSequence": 10_000, "eventIds": [urn(uuid.uuid4())]}},
         "/payload/contextPackage/sourceEventRange/toSequence"),
        ({"reasoning": "my private thoughts"}, "/payload/contextPackage"),
    ],
)  # fmt: skip
def test_a_malformed_package_is_refused_naming_the_member(art: Artifacts, override: dict[str, Any], field: str) -> None:
    err = refused(
        ErrorCode.SCHEMA_VALIDATION_FAILED,
        publish,
        art.coordinator,
        art.group,
        package_doc(art, art.coordinator, **override),
    )
    assert err.details["field"].startswith(field), err.details


def test_a_package_citing_an_event_of_another_group_is_refused_13_3(art: Artifacts, other: dict[str, str]) -> None:
    theirs = GroupEvent.objects.filter(group_id=other["group"]).values_list("event_id", flat=True).first()
    doc = package_doc(art, art.coordinator)
    doc = package_doc(art, art.coordinator, sourceEventRange={**doc["sourceEventRange"], "eventIds": [urn(theirs)]})
    refused(Because(ErrorCode.INVALID_COMMAND, "not_found"), publish, art.coordinator, art.group, doc)


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


def test_only_the_coordinator_publishes_a_package_13_3(art: Artifacts) -> None:
    refused(
        ErrorCode.AUTH_FORBIDDEN, art.worker.send, PUBLISH, art.group, {"contextPackage": package_doc(art, art.worker)}
    )


def test_a_context_package_of_group_a_cannot_be_read_through_group_b_13_3(
    art: Artifacts, other: dict[str, str]
) -> None:
    doc = package_doc(art, art.coordinator)
    publish(art.coordinator, art.group, doc)
    package = doc["contextPackageId"]
    # Carl and Walt are members of both Groups; through B the package does not exist.
    for agent in (art.coordinator, art.worker2):
        error_of(art.get(package_url(other["group"], package), agent), 404, "GROUP_NOT_FOUND")
        error_of(art.get(package_url(other["group"], package, "/events"), agent), 404, "GROUP_NOT_FOUND")
        assert art.get(package_url(other["group"]), agent).json() == {"contextPackages": []}
    # Through A, members read it; a non-member of A cannot use A at all.
    assert art.get(package_url(art.group, package), art.worker).status_code == 200
    listed = art.get(package_url(art.group), art.worker).json()["contextPackages"]
    assert [p["contextPackageId"] for p in listed] == [package]


def test_non_members_and_unknown_packages_get_the_same_404_issue_16_item_8(art: Artifacts, outsider: AgentKey) -> None:
    doc = package_doc(art, art.coordinator)
    publish(art.coordinator, art.group, doc)
    error_of(art.get(package_url(art.group, doc["contextPackageId"]), outsider), 404, "GROUP_NOT_FOUND")
    error_of(art.get(package_url(art.group), outsider), 404, "GROUP_NOT_FOUND")
    error_of(art.get(package_url(art.group, urn(uuid.uuid4()))), 404, "GROUP_NOT_FOUND")


def test_a_member_fetches_the_cited_signed_events_13_3(art: Artifacts) -> None:
    doc = package_doc(art, art.coordinator)
    publish(art.coordinator, art.group, doc)
    response = art.get(package_url(art.group, doc["contextPackageId"], "/events"), art.worker)
    assert response.status_code == 200, response.content
    events = response.json()["events"]
    assert [e["sequence"] for e in events] == list(range(1, doc["sourceEventRange"]["toSequence"] + 1))
    assert [e["eventId"] for e in events] == doc["sourceEventRange"]["eventIds"]
    assert events[0]["kind"] == "mission.created"
    for event in events:
        normative("event", event)


def test_forwarding_across_groups_needs_permission_and_leaves_an_auditable_event_13_3(
    art: Artifacts, other: dict[str, str], owner: AgentKey
) -> None:
    doc = package_doc(art, art.coordinator)
    publish(art.coordinator, art.group, doc)
    # Wanda is only a worker of A: no forwarding.
    refused(ErrorCode.AUTH_FORBIDDEN, forward, art.worker, art.group, doc, other["group"])
    # Carl coordinates A but is not in a third Mission Group: the check
    # covers the receiving Group too, and a Group he is not in answers as an
    # absent one (issue 16), exactly.
    third = new_mission(owner, make_coordinator("Cora Coordinator"), title="Third")["group"]
    unseen = refused(ErrorCode.GROUP_NOT_FOUND, forward, art.coordinator, art.group, doc, third)
    absent = str(uuid.uuid4())
    missing = refused(ErrorCode.GROUP_NOT_FOUND, forward, art.coordinator, art.group, doc, absent)
    assert unseen.message.replace(third, "G") == missing.message.replace(absent, "G")
    assert unseen.details == missing.details == {"field": "/payload/toGroupId"}
    before_b = Group.objects.get(id=other["group"]).last_sequence
    receipt = forward(art.coordinator, art.group, doc, other["group"])
    assert [e["kind"] for e in receipt["events"]] == ["ext.mwportal.context.package_forwarded"]
    (forwarded,) = events_of(art.group, "ext.mwportal.context.package_forwarded")
    assert forwarded["payload"] == {"contextPackageId": doc["contextPackageId"], "version": 1,
                                    "toGroupId": urn(other["group"])}  # fmt: skip
    received = GroupEvent.objects.get(group_id=other["group"], sequence=before_b + 1).as_wire()
    normative("event", received)
    assert received["kind"] == "ext.mwportal.context.package_received"
    assert received["payload"]["fromGroupId"] == urn(art.group) and received["payload"]["contextPackage"] == doc
    assert received["actor"] == art.coordinator.actor
    assert ContextForward.objects.filter(to_group_id=other["group"]).count() == 1
    # Now B's members read that version through B...
    via_b = art.get(package_url(other["group"], doc["contextPackageId"]), art.worker2).json()
    assert via_b["forwarded"] is True and via_b["contextPackage"] == doc
    # ...but the cited Events stay A's: only A's members fetch them.
    bea = make_agent("acme", "Bea", ["worker"])
    add_member(owner, other["group"], bea, ["worker"])
    error_of(art.get(package_url(other["group"], doc["contextPackageId"], "/events"), bea), 404, "GROUP_NOT_FOUND")
    refused(ErrorCode.INVALID_STATE_TRANSITION, forward, art.coordinator, art.group, doc, other["group"])
    # A version that is not the package's is not in this Group.
    refused(Because(ErrorCode.INVALID_COMMAND, "not_found"), forward, art.coordinator, art.group, {**doc, "version": 2},
            other["group"])  # fmt: skip
