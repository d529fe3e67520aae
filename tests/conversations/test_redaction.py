"""After ``message.redact`` the Message's content is withheld on every read path, while the
stored log, its signatures and its hash chain still verify (PROTOCOL §7.4, §9.1).

The WebSocket paths are in tests/delivery/test_message_redaction.py."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from artifacts.audit import export_audit
from missions.keyregistry import DjangoRegistry
from missions.models import Agent, Group, GroupEvent, Organization
from missions.readers import read_after
from missions.verify import verify_group_log
from mwportal.protocol import catalogue, jcs
from mwportal.protocol.audit import verify_bundle
from mwportal.protocol.eventdoc import verify_event
from tests.api.support import bearer, events_url, http
from tests.conversations.conftest import amend, post
from tests.protocol.normative import require_bundle
from tests.workitems.flow import Flow
from workitems.documents import conversation_id

pytestmark = pytest.mark.usefixtures("rest")


@pytest.fixture(autouse=True)
def _bundle() -> None:
    require_bundle()


def redacted(flow: Flow, secret: str) -> tuple[str, str]:
    """A Message holding ``secret`` in a WorkItem Conversation, corrected (the correction holds it too),
    then redacted by the Coordinator; (messageId, the other Message's ID)."""
    item = flow.authorize()
    message_id = post(flow, flow.worker, f"first: {secret}", conversation_id(flow.item(item)))
    amend(flow, flow.worker, "message.correct", message_id, "typo", replacementContent=f"again: {secret}")
    kept = post(flow, flow.worker2, "nothing secret here")
    amend(flow, flow.coordinator, "message.redact", message_id, "contained a credential")
    return message_id, kept


def check_served(documents: list[dict[str, Any]], organization_id: str, message_id: str) -> None:
    """Every served Event verifies (six stages, signed by the Group Authority) and the catalogue
    admits its payload; the redacted Message's Events carry no content, its ID and standing stay."""
    registry = DjangoRegistry(Organization.objects.get(id=organization_id))
    for document in documents:
        verify_event(jcs.canonicalize(document), registry)
        catalogue.validate_payload(document["kind"], document["payload"])
    mine = [d for d in documents if d["payload"].get("messageId") == message_id]
    assert [d["kind"] for d in mine] == ["message.posted", "message.corrected", "message.redacted"]
    posted, corrected, _ = mine
    standing = {"messageId": message_id, "authority": False, "conversationId": posted["conversationId"]}
    assert posted["payload"] == standing
    assert "replacementContent" not in corrected["payload"] and corrected["payload"]["reason"] == "typo"


def stored_log_verifies(flow: Flow, secret: str) -> None:
    """The rows are untouched: the redacted Events keep their signed documents, and the chain verifies."""
    group = Group.objects.get(id=flow.group)
    assert verify_group_log(group) == (group.last_sequence, None)
    assert sum(secret in row.document for row in GroupEvent.objects.filter(group=group)) == 2


def test_rest_event_pages_withhold_a_redacted_message_7_4(flow: Flow, secret: str) -> None:
    message_id, kept = redacted(flow, secret)
    response = http().get(events_url(flow.group, "afterSequence=0&limit=1000"), **bearer(flow.worker.extra["token"]))
    assert response.status_code == 200
    assert secret not in response.content.decode()
    documents = response.json()["events"]
    check_served(documents, str(Group.objects.get(id=flow.group).organization_id), message_id)
    other = next(d for d in documents if d["payload"].get("messageId") == kept)
    assert other["payload"]["message"]["content"][0]["text"] == "nothing secret here"  # only the redacted one
    assert [d["sequence"] for d in documents] == list(range(1, len(documents) + 1))
    stored_log_verifies(flow, secret)


def test_before_a_redaction_the_content_is_served_7_4(flow: Flow, secret: str) -> None:
    message_id = post(flow, flow.worker, secret)
    response = http().get(events_url(flow.group, "afterSequence=0&limit=1000"), **bearer(flow.worker.extra["token"]))
    served = [d for d in response.json()["events"] if d["payload"].get("messageId") == message_id]
    assert served[0]["payload"]["message"]["content"] == [{"type": "text", "text": secret}]


def test_the_replay_read_withholds_a_redacted_message_7_4(flow: Flow, secret: str) -> None:
    message_id, _ = redacted(flow, secret)
    events = read_after(flow.group, 0, 1000)
    assert not any(secret in e.frame for e in events)  # type: ignore[attr-defined]
    check_served([dict(e) for e in events], str(Group.objects.get(id=flow.group).organization_id), message_id)


def test_the_audit_export_withholds_and_still_verifies_7_4(flow: Flow, secret: str, tmp_path: Path) -> None:
    message_id, _ = redacted(flow, secret)
    out = tmp_path / "audit.tar"
    export_audit(flow.group, out, include_bytes=False)
    assert secret.encode() not in out.read_bytes()
    report = verify_bundle(str(out))
    assert report.events == Group.objects.get(id=flow.group).last_sequence
    with tarfile.open(out) as tar:
        member = tar.extractfile("events.jsonl")
        assert member is not None
        documents = [json.loads(line) for line in member.read().splitlines()]
    check_served(documents, str(Group.objects.get(id=flow.group).organization_id), message_id)
    stored_log_verifies(flow, secret)


def test_the_portal_timeline_withholds_a_redacted_message_7_4(flow: Flow, secret: str) -> None:
    redacted(flow, secret)
    user = get_user_model().objects.create_user("olivia-h2", password="pw-olivia-h2")
    Agent.objects.filter(id=flow.owner.id).update(user=user)
    client = Client()
    client.force_login(user)
    page = client.get(f"/missions/{flow.group}/")
    assert page.status_code == 200
    assert secret not in page.content.decode()
    assert "nothing secret here" in page.content.decode()  # the page does show Messages


def test_an_event_tombstone_of_a_message_withholds_it_the_same_way_7_4(flow: Flow, secret: str) -> None:
    """``ext.mwportal.audit.event_redact`` naming a Message's Event goes through the same withholding;
    an Event kind without a content-free form (a Membership change) is still served as stored."""
    message_id = post(flow, flow.worker, secret)
    sequence = GroupEvent.objects.get(group_id=flow.group, type="message.posted").sequence
    membership = GroupEvent.objects.filter(group_id=flow.group, type="membership.changed").first()
    assert membership is not None
    for target in (sequence, membership.sequence):
        flow.owner.send("ext.mwportal.audit.event_redact", flow.group, {"sequence": target, "reason": "personal data"})
    response = http().get(events_url(flow.group, "afterSequence=0&limit=1000"), **bearer(flow.worker.extra["token"]))
    assert secret not in response.content.decode()
    served = {d["sequence"]: d for d in response.json()["events"]}
    assert served[sequence]["payload"] == {"messageId": message_id, "authority": False,
                                           "conversationId": served[sequence]["conversationId"]}  # fmt: skip
    assert served[membership.sequence] == membership.as_wire()
    stored_log_verifies_once(flow, secret)


def stored_log_verifies_once(flow: Flow, secret: str) -> None:
    group = Group.objects.get(id=flow.group)
    assert verify_group_log(group) == (group.last_sequence, None)
    assert sum(secret in row.document for row in GroupEvent.objects.filter(group=group)) == 1


def test_a_context_packages_cited_events_withhold_a_redacted_message_7_4_13_3(flow: Flow, secret: str) -> None:
    """A Context Package published while the Message was readable cites it; read after the redaction,
    the cited Events are served in their withheld form."""
    from tests.artifacts.test_context import package_doc, package_url, publish

    item = flow.authorize()
    message_id = post(flow, flow.worker, f"first: {secret}", conversation_id(flow.item(item)))
    doc = package_doc(flow, flow.coordinator)  # type: ignore[arg-type]  # it reads .group and .mission
    publish(flow.coordinator, flow.group, doc)
    url = package_url(flow.group, doc["contextPackageId"], "/events")
    before = http().get(url, **bearer(flow.worker.extra["token"]))
    assert before.status_code == 200 and secret in before.content.decode()
    amend(flow, flow.owner, "message.redact", message_id, "contained a credential")
    after = http().get(url, **bearer(flow.worker.extra["token"]))
    assert after.status_code == 200 and secret not in after.content.decode()
    events = after.json()["events"]
    assert [e["eventId"] for e in events] == doc["sourceEventRange"]["eventIds"]
    posted = next(e for e in events if e["payload"].get("messageId") == message_id)
    assert "message" not in posted["payload"]
    registry = DjangoRegistry(Organization.objects.get(id=Group.objects.get(id=flow.group).organization_id))
    for event in events:
        verify_event(jcs.canonicalize(event), registry)


def test_a_snapshot_and_the_events_read_on_after_it_withhold_a_redacted_message_7_4_16(
    flow: Flow, secret: str, settings: Any
) -> None:
    """Outside the online window a reader restores the signed snapshot and reads on (§16): neither
    the snapshot artifact nor the Events after it carry the redacted content."""
    message_id, _ = redacted(flow, secret)
    settings.MWP_ONLINE_REPLAY_EVENTS = 3
    token = bearer(flow.worker.extra["token"])
    gone = http().get(events_url(flow.group, "afterSequence=0"), **token)
    assert gone.status_code == 410 and gone.json()["code"] == "CURSOR_TOO_OLD"
    reference = gone.json()["details"]["snapshot"]
    snapshot = http().get(reference["href"], **token)
    assert snapshot.status_code == 200 and secret not in snapshot.content.decode()
    after = reference["throughSequence"] - 4  # the snapshot is at the head: read the window before it
    settings.MWP_ONLINE_REPLAY_EVENTS = 10_000
    tail = http().get(events_url(flow.group, f"afterSequence={max(after, 0)}&limit=1000"), **token)
    assert tail.status_code == 200 and secret not in tail.content.decode()
    assert any(e["payload"].get("messageId") == message_id for e in tail.json()["events"])
