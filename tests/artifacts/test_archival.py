"""Archival (PROTOCOL §7.4, §15.2): one transaction for the signed final snapshot and ``group.archived``,
nothing accepted afterwards, archival triggered by beat after the Organization's retention delay and by
``mwp archive``, and the audit log kept encrypted at rest (AES-256-GCM) and still verifiable.

§7.4, in short: archiving yields a signed final snapshot that lists the decisions, WorkItems, approvals and
Artifact references, and the encrypted audit log stays kept for as long as Organization policy says.
§15.2, in short: group.snapshot.created and group.archived are appended together, in one step, by the
ext.missionweaveprotocol.core.group_archive Command the Organization owns, and only once the signed snapshot
and its link to the policy log have been validated.
"""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from artifacts.archive import archive_path, key_fingerprint
from missions.handlers.common import main_conversation_id
from missions.keyregistry import DjangoRegistry
from missions.models import Group, GroupEvent, GroupSnapshot, Organization, PolicyLogEntry
from missions.tasks import archive_groups
from mwportal.protocol import jcs
from mwportal.protocol.ids import urn
from mwportal.protocol.values import b64url_encode
from mwportal.protocol.verification import verify_document
from tests.api.support import COMMANDS, error_of, http, nothing_written, post_json, show
from tests.artifacts.conftest import Artifacts, contract
from tests.conftest import AgentKey, group_revision, make_agent
from tests.protocol.normative import normative_problems

KEY = b64url_encode(bytes(range(32)))
OTHER_KEY = b64url_encode(bytes(range(1, 33)))


@pytest.fixture(autouse=True)
def _audit_key(settings: Any, tmp_path: Path) -> None:
    settings.MWP_AUDIT_ENCRYPTION_KEY = KEY
    settings.MWP_AUDIT_ARCHIVE_DIR = str(tmp_path / "audit-archive")
    settings.MWP_ARCHIVE_AFTER_SECONDS = 3600


@pytest.fixture
def worked(art: Artifacts) -> dict[str, str]:
    """A Mission with an active WorkItem that published an Artifact."""
    item = art.active_item()
    content_hash, artifact_id = art.produce(item, b"district,mapped\nnorth,yes\n", "text/csv")
    return {"item": item, "hash": content_hash, "artifact": artifact_id}


def cancel(art: Artifacts) -> None:
    revision = group_revision(art.group)
    art.owner.send("mission.cancel", art.group, {"reason": "the survey moved"}, expected_revision=revision)


def archive_by_cli(group: str) -> str:
    out = io.StringIO()
    call_command("mwp", "archive", urn(group), stdout=out)
    return out.getvalue()


# --- one transaction, the signed final snapshot and its contents (§7.4, §15.2) ----------------------------


def test_group_archive_appends_snapshot_created_and_archived_in_one_transaction_7_4_15_2(
    art: Artifacts, worked: dict[str, str], org: dict[str, str]
) -> None:
    cancel(art)
    head = Group.objects.get(id=art.group).last_sequence
    assert "archived: final snapshot" in archive_by_cli(art.group)
    tail = list(GroupEvent.objects.filter(group_id=art.group, sequence__gt=head).order_by("sequence"))
    assert [e.type for e in tail] == ["group.snapshot.created", "group.archived"]
    # One Command, one transaction: the same cause, the same moment, consecutive sequences.
    assert tail[0].action_id == tail[1].action_id and tail[0].occurred_at == tail[1].occurred_at
    final = GroupSnapshot.objects.get(group_id=art.group, final=True)
    assert final.sequence == head and tail[1].body["snapshotId"] == final.document["snapshotId"]
    document = final.document
    assert normative_problems("group-snapshot", document) == []
    verified = verify_document(
        jcs.canonicalize(document), "group-snapshot", DjangoRegistry(Organization.objects.get(id=org["id"]))
    )
    assert (verified.principal.type, document["createdBy"]["type"]) == ("service", "service")
    assert document["stateHash"] == jcs.sha256_hash(jcs.canonicalize(final.state))
    state = final.state
    # Decisions: the Mission's cancellation and the WorkItem's authorisation are among them.
    kinds = {d["kind"] for d in state["decisions"]}
    assert {"mission.created", "mission.cancelled", "work.authorized", "work.offer.accepted"} <= kinds
    assert "message.posted" not in kinds and "work.started" not in kinds
    assert urn(worked["item"]) in {w["workItemId"] for w in state["workItems"]}
    assert [a["artifactId"] for a in state["artifacts"]] == [urn(worked["artifact"])]
    assert state["artifacts"][0]["contentHash"] == worked["hash"]
    assert isinstance(state["approvals"], list)
    # The policy-log linkage: the snapshot's entry is the Policy Log's reference for this archival.
    [entry] = document["policyLog"]
    assert entry["details"]["missionStatus"] == "cancelled" and entry["details"]["throughSequence"] == head
    logged = PolicyLogEntry.objects.get(group_id=art.group, kind="final_snapshot")
    assert logged.reference == entry["entryId"] and logged.detail["snapshotId"] == document["snapshotId"]


def test_an_active_missions_group_is_not_archived_by_cli_nor_beat_7_4(art: Artifacts, worked: dict[str, str]) -> None:
    with nothing_written(), pytest.raises(CommandError, match="INVALID_STATE_TRANSITION"):
        archive_by_cli(art.group)
    assert archive_groups(now=datetime.now(UTC) + timedelta(days=365)) == 0
    assert not GroupSnapshot.objects.filter(group_id=art.group, final=True).exists()


def test_beat_archives_a_finished_mission_only_after_the_retention_delay_7_4(
    art: Artifacts, worked: dict[str, str], org: dict[str, str], settings: Any
) -> None:
    assert settings.CELERY_BEAT_SCHEDULE["archive_groups"]["task"] == archive_groups.name == "missions.archive_groups"
    cancel(art)
    now = datetime.now(UTC)
    assert archive_groups(now=now + timedelta(seconds=3000)) == 0  # the default delay is 3600 s here
    assert not GroupSnapshot.objects.filter(group_id=art.group, final=True).exists()
    assert archive_groups(now=now + timedelta(seconds=3700)) == 1
    assert GroupSnapshot.objects.filter(group_id=art.group, final=True).exists()
    assert archive_path(art.group).exists()  # sealed after the commit
    assert archive_groups(now=now + timedelta(days=2)) == 0  # archived once


def test_the_organizations_policy_sets_the_retention_delay_7_4(
    art: Artifacts, worked: dict[str, str], org: dict[str, str]
) -> None:
    policy = {"classes": {"normal": 1}, "default_class": "normal", "archive_after_seconds": 60}
    art.owner.send("ext.mwportal.scheduling.priority_policy_set", org["admin_group"], {"policy": policy})
    cancel(art)
    now = datetime.now(UTC)
    assert archive_groups(now=now + timedelta(seconds=30)) == 0
    assert archive_groups(now=now + timedelta(seconds=120)) == 1  # well before the deployment's 3600 s


# --- an archived Group accepts no further Command (§7.4) -------------------------------------------------


def _membership(art: Artifacts, n: int) -> tuple[AgentKey, str, dict[str, Any], dict[str, Any]]:
    newcomer = make_agent("acme", f"Late Joiner {n}", ["worker"])
    payload = {"principal": newcomer.actor, "roles": ["worker"]}
    return art.owner, "membership.change", payload, {"expected_revision": group_revision(art.group)}


def _message(art: Artifacts, n: int) -> tuple[AgentKey, str, dict[str, Any], dict[str, Any]]:
    payload = {"messageId": urn(uuid.uuid4()), "conversationId": urn(main_conversation_id(art.group)),
               "content": f"note {n}"}  # fmt: skip
    return art.worker, "message.post", payload, {}


def _redaction(art: Artifacts, n: int) -> tuple[AgentKey, str, dict[str, Any], dict[str, Any]]:
    return art.owner, "ext.mwportal.audit.event_redact", {"sequence": n, "reason": "personal data"}, {}


def _proposal(art: Artifacts, n: int) -> tuple[AgentKey, str, dict[str, Any], dict[str, Any]]:
    return art.worker, "work.propose", {"proposalId": urn(uuid.uuid4()), "contract": contract()}, {}


@pytest.mark.parametrize("build", [_membership, _message, _redaction, _proposal], ids=lambda f: f.__name__[1:])
def test_an_archived_group_accepts_no_further_command_of_any_kind_7_4(
    art: Artifacts, worked: dict[str, str], build: Any
) -> None:
    sender, kind, payload, kw = build(art, 2)
    accepted = post_json(http(), COMMANDS, sender.command(kind, art.group, payload, **kw))
    assert accepted.status_code == 201, show(accepted)  # before archival the kind is accepted
    cancel(art)
    archive_by_cli(art.group)
    sender, kind, payload, kw = build(art, 3)
    with nothing_written():
        response = post_json(http(), COMMANDS, sender.command(kind, art.group, payload, **kw))
    error = error_of(response, 422, "INVALID_STATE_TRANSITION")
    assert error["details"].get("reason") == "group_archived", error


def test_archival_itself_is_refused_once_archived_7_4(art: Artifacts, worked: dict[str, str]) -> None:
    cancel(art)
    archive_by_cli(art.group)
    with nothing_written(), pytest.raises(CommandError, match="INVALID_STATE_TRANSITION: the Group is archived"):
        archive_by_cli(art.group)


# --- the audit log, encrypted at rest and verifiable (§7.4) -----------------------------------------------


def test_the_archived_audit_log_is_stored_encrypted_not_in_plaintext_7_4(
    art: Artifacts, worked: dict[str, str]
) -> None:
    cancel(art)
    archive_by_cli(art.group)
    stored = archive_path(art.group).read_bytes()
    events = list(GroupEvent.objects.filter(group_id=art.group).order_by("sequence"))
    assert len(events) > 5
    for event in events:
        assert urn(str(event.event_id)).encode() not in stored
        assert event.document.encode()[:60] not in stored
    for text in (b"the survey moved", b"district,mapped", b"signature", worked["hash"].encode()):
        assert text not in stored
    assert key_fingerprint(bytes(range(32))).encode() in stored  # the header names the key, not its bytes
    assert bytes(range(32)) not in stored and KEY.encode() not in stored


def test_export_and_verify_log_decrypt_the_archive_and_verify_chain_and_signatures_7_4(
    art: Artifacts, worked: dict[str, str], tmp_path: Path
) -> None:
    from mwportal.protocol.audit import verify_bundle

    cancel(art)
    archive_by_cli(art.group)
    out = io.StringIO()
    call_command("mwp", "verify-log", urn(art.group), stdout=out)
    head = Group.objects.get(id=art.group).last_sequence
    assert f"encrypted audit archive: {head} Events, chain and signatures verified" in out.getvalue()
    bundle = tmp_path / "bundle.tar"
    call_command("mwp", "export-audit", urn(art.group), "--out", str(bundle), stdout=io.StringIO())
    report = verify_bundle(str(bundle))
    assert report.events == head and report.snapshots >= 1 and report.artifacts_checked >= 1


def test_a_wrong_key_fails_clearly_and_a_changed_byte_fails_authentication_7_4(
    art: Artifacts, worked: dict[str, str], tmp_path: Path, settings: Any
) -> None:
    cancel(art)
    archive_by_cli(art.group)
    settings.MWP_AUDIT_ENCRYPTION_KEY = OTHER_KEY
    with pytest.raises(CommandError, match="wrong key: the archive was sealed with key"):
        call_command("mwp", "export-audit", urn(art.group), "--out", str(tmp_path / "x.tar"), stdout=io.StringIO())
    with pytest.raises(CommandError, match="wrong key"):
        call_command("mwp", "verify-log", urn(art.group), stdout=io.StringIO())
    assert not (tmp_path / "x.tar").exists()
    settings.MWP_AUDIT_ENCRYPTION_KEY = KEY
    path = archive_path(art.group)
    data = bytearray(path.read_bytes())
    data[-20] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CommandError, match="fails authentication"):
        call_command("mwp", "verify-log", urn(art.group), stdout=io.StringIO())


def test_a_missing_archive_fails_clearly_and_the_next_beat_pass_seals_it_again_7_4(
    art: Artifacts, worked: dict[str, str]
) -> None:
    cancel(art)
    archive_by_cli(art.group)
    archive_path(art.group).unlink()
    with pytest.raises(CommandError, match="has no sealed audit archive"):
        call_command("mwp", "verify-log", urn(art.group), stdout=io.StringIO())
    out = io.StringIO()
    call_command("mwp", "archive", "--due", stdout=out)
    assert out.getvalue().strip() == "0 Groups archived"  # archived once; only the seal is redone
    call_command("mwp", "verify-log", urn(art.group), stdout=io.StringIO())
