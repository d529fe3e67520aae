"""``mwp export-audit`` / ``mwp verify-audit`` (PROTOCOL §6.4, §13, §15.2; MWP-MSN-009): a Group's
history of signed Event documents verified offline against the bundled Registry, and a tamper found where it is."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from missions.snapshots import snapshot_now
from mwportal.protocol.audit import AuditFailure, verify_bundle
from mwportal.protocol.command import Key
from mwportal.protocol.ids import urn
from tests.artifacts.conftest import Artifacts
from tests.artifacts.test_context import package_doc, publish
from tests.artifacts.test_review import REPORT, checked_contract

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def history(art: Artifacts, reviewer: Any) -> dict[str, Any]:
    """A Group with a published Artifact derived from another, a submission, a
    review run with a review WorkItem, a snapshot and a Context Package."""
    item = art.active_item(checked_contract())
    raw, raw_id = art.produce(item, b"raw,rows\n1,2\n", "text/csv")
    report, report_id = art.produce(item, REPORT, "application/json", sources=[raw])
    art.submit_with(item, {"complete": [report], "accurate": []}, [report_id])
    art.review(item)
    snapshot_now(art.group)
    publish(art.coordinator, art.group, package_doc(art, art.coordinator, artifacts=[report]))
    return {"item": item, "raw": raw, "report": report, "raw_id": raw_id, "report_id": report_id}


def hex_name(content_hash: str) -> str:
    return f"artifacts/{content_hash.removeprefix('sha256:')}"


def export(art: Artifacts, tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "bundle.tar"
    call_command("mwp", "export-audit", urn(art.group), "--out", str(out), *extra, stdout=io.StringIO())
    return out


def rewrite(bundle: Path, name: str, change: Callable[[bytes], bytes]) -> Path:
    """A copy of the bundle with one member changed (same order, same names)."""
    members: list[tuple[tarfile.TarInfo, bytes]] = []
    with tarfile.open(bundle) as tar:
        for info in tar.getmembers():
            fh = tar.extractfile(info)
            assert fh is not None
            members.append((info, fh.read()))
    out = bundle.with_name(f"tampered-{name.replace('/', '_')}.tar")
    with tarfile.open(out, "w") as tar:
        for info, data in members:
            if info.name == name:
                data = change(data)
                assert data
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def failure(path: Path) -> AuditFailure:
    with pytest.raises(AuditFailure) as info:
        verify_bundle(str(path))
    return info.value


def test_an_exported_bundle_verifies_and_holds_everything(
    art: Artifacts, history: dict[str, Any], tmp_path: Path
) -> None:
    bundle = export(art, tmp_path)
    report = verify_bundle(str(bundle))
    assert report.events > 10 and report.snapshots == 1 and report.manifests == 2 and report.context_packages == 1
    assert report.evidence >= 4 and report.artifacts_checked == 2
    with tarfile.open(bundle) as tar:
        names = set(tar.getnames())
    expected = {"events.jsonl", "snapshots.jsonl", "manifests.jsonl", "evidence.jsonl", "context_packages.jsonl",
                "keys.json", "index.json", hex_name(history["raw"]), hex_name(history["report"])}  # fmt: skip
    assert expected <= names
    out = io.StringIO()
    call_command("mwp", "verify-audit", str(bundle), stdout=out)
    assert out.getvalue().strip().endswith("OK")


def test_one_byte_changed_in_one_event_fails_at_that_event(
    art: Artifacts, history: dict[str, Any], tmp_path: Path
) -> None:
    bundle = export(art, tmp_path)

    def change(data: bytes) -> bytes:
        lines = data.splitlines(keepends=True)
        event = json.loads(lines[0])
        assert event["sequence"] == 1
        last = lines[0].index(b'"correlationId":"') + len(b'"correlationId":"urn:uuid:') + 2
        lines[0] = lines[0][:last] + (b"0" if lines[0][last : last + 1] != b"0" else b"1") + lines[0][last + 1 :]
        return b"".join(lines)  # one byte of one signed member

    err = failure(rewrite(bundle, "events.jsonl", change))
    assert err.where == "events: sequence 1: signature"
    with pytest.raises(CommandError, match="FAILED at events: sequence 1: signature"):
        call_command("mwp", "verify-audit", str(rewrite(bundle, "events.jsonl", change)))


def test_a_changed_event_later_in_the_log_is_named_by_its_sequence(
    art: Artifacts, history: dict[str, Any], tmp_path: Path
) -> None:
    bundle = export(art, tmp_path)
    with tarfile.open(bundle) as tar:
        fh = tar.extractfile("events.jsonl")
        assert fh is not None
        lines = fh.read().splitlines(keepends=True)
    target = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "work.submitted")
    sequence = json.loads(lines[target])["sequence"]

    def change(data: bytes) -> bytes:
        out = data.splitlines(keepends=True)
        assert b'"passed"' in out[target]
        out[target] = out[target].replace(b'"passed"', b'"failed"', 1)
        return b"".join(out)

    assert failure(rewrite(bundle, "events.jsonl", change)).where == f"events: sequence {sequence}: signature"


def test_one_changed_manifest_signature_fails_at_that_manifest(
    art: Artifacts, history: dict[str, Any], tmp_path: Path
) -> None:
    bundle = export(art, tmp_path)

    def change(data: bytes) -> bytes:
        lines = data.splitlines(keepends=True)
        manifest = json.loads(lines[1])
        sig = manifest["signature"]["value"]
        manifest["signature"]["value"] = ("B" if sig[0] != "B" else "C") + sig[1:]
        lines[1] = json.dumps(manifest).encode() + b"\n"
        return b"".join(lines)

    err = failure(rewrite(bundle, "manifests.jsonl", change))
    assert err.where == f"manifest {history['report_id']} (line 2): signature"


def test_one_changed_snapshot_signature_fails_at_that_snapshot(
    art: Artifacts, history: dict[str, Any], tmp_path: Path
) -> None:
    bundle = export(art, tmp_path)

    def change(data: bytes) -> bytes:
        snap = json.loads(data)
        value = snap["signature"]["value"]
        snap["signature"]["value"] = ("A" if value[0] != "A" else "B") + value[1:]
        return json.dumps(snap).encode() + b"\n"

    err = failure(rewrite(bundle, "snapshots.jsonl", change))
    assert err.where.startswith("snapshots: sequence ")
    assert "signature" in err.message


def test_one_byte_changed_in_one_artifact_fails_at_that_artifact(
    art: Artifacts, history: dict[str, Any], tmp_path: Path
) -> None:
    bundle = export(art, tmp_path)
    name = hex_name(history["raw"])
    err = failure(rewrite(bundle, name, lambda data: data[:-2] + bytes([data[-2] ^ 1]) + data[-1:]))
    assert err.where == f"artifact {history['raw']}"


def test_a_changed_index_or_a_reordered_key_file_fails_at_the_index(
    art: Artifacts, history: dict[str, Any], tmp_path: Path
) -> None:
    bundle = export(art, tmp_path)

    def change_index(data: bytes) -> bytes:
        index = json.loads(data)
        index["exportedAt"] = "2000-01-01T00:00:00.000000Z"
        return json.dumps(index).encode()

    assert failure(rewrite(bundle, "index.json", change_index)).where == "index: signature"
    keys = rewrite(bundle, "keys.json", lambda data: json.dumps(json.loads(data), indent=2).encode())
    assert failure(keys).where == "index: keys.json"


def test_a_pinned_group_authority_key_must_match(art: Artifacts, history: dict[str, Any], tmp_path: Path) -> None:
    from missions.models import Group
    from missions.service_keys import group_authority

    bundle = export(art, tmp_path)
    with pytest.raises(AuditFailure) as info:
        verify_bundle(str(bundle), server_key=Key.generate().public_key)
    assert info.value.where == "index: signature"
    own = group_authority(str(Group.objects.get(id=art.group).organization_id)).public_key
    assert verify_bundle(str(bundle), server_key=own).events > 10


def test_an_event_signed_by_a_key_outside_the_registry_fails_at_that_event(
    art: Artifacts, history: dict[str, Any], tmp_path: Path
) -> None:
    """§6.4 stage 4: a forger who re-signs an Event with a key of its own is caught
    at the Event, whatever else it rewrites."""
    from mwportal.protocol.verification import sign_document

    bundle = export(art, tmp_path)
    forger = Key.generate()

    def change(data: bytes) -> bytes:
        lines = data.splitlines(keepends=True)
        event = json.loads(lines[2])
        event["correlationId"] = urn(uuid.uuid4())
        forged = sign_document(event, key_id=forger.key_id, seed=forger.seed, profile="event")
        lines[2] = json.dumps(forged).encode() + b"\n"
        return b"".join(lines)

    err = failure(rewrite(bundle, "events.jsonl", change))
    assert err.where == "events: sequence 3: signature"


def test_a_blob_corrupted_in_the_store_is_exported_by_hash_only(
    art: Artifacts, history: dict[str, Any], tmp_path: Path
) -> None:
    from artifacts.store import blob_name

    (Path(settings.MWP_ARTIFACT_ROOT) / blob_name(history["raw"].removeprefix("sha256:"))).write_bytes(b"rotten")
    err = io.StringIO()
    out = tmp_path / "bundle.tar"
    call_command("mwp", "export-audit", urn(art.group), "--out", str(out), stdout=io.StringIO(), stderr=err)
    assert history["raw"] in err.getvalue()
    report = verify_bundle(str(out))
    assert report.artifacts_hash_only == [history["raw"]] and report.artifacts_checked == 1


def test_verification_needs_neither_django_nor_a_database(
    art: Artifacts, history: dict[str, Any], tmp_path: Path
) -> None:
    bundle = export(art, tmp_path)
    tampered = rewrite(bundle, hex_name(history["report"]), lambda d: d.replace(b"3", b"4"))
    # Django is made unimportable: the verifier is the protocol kernel alone.
    code = (
        "import sys, runpy; sys.modules['django'] = None; sys.argv = ['audit'] + sys.argv[1:];"
        " runpy.run_module('mwportal.protocol.audit', run_name='__main__')"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "MWP_"))}
    ok = subprocess.run([sys.executable, "-c", code, str(bundle)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip().endswith("OK")
    bad = subprocess.run([sys.executable, "-c", code, str(tampered)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert bad.returncode == 1
    assert f"FAILED at artifact {history['report']}" in bad.stderr
    # And the management command exits non-zero without touching a database.
    env["MWP_DATABASE_URL"] = f"sqlite:///{tmp_path}/no/such/dir/db.sqlite3"
    cli = subprocess.run(
        [sys.executable, "manage.py", "mwp", "verify-audit", str(tampered)], cwd=ROOT, env=env, capture_output=True,
        text=True,
    )  # fmt: skip
    assert cli.returncode != 0
    assert f"FAILED at artifact {history['report']}" in cli.stderr
    good = subprocess.run(
        [sys.executable, "manage.py", "mwp", "verify-audit", str(bundle)], cwd=ROOT, env=env, capture_output=True,
        text=True,
    )  # fmt: skip
    assert good.returncode == 0, good.stderr


def test_export_without_bytes_lists_hashes(art: Artifacts, history: dict[str, Any], tmp_path: Path) -> None:
    report = verify_bundle(str(export(art, tmp_path, "--no-bytes")))
    assert sorted(report.artifacts_hash_only) == sorted([history["raw"], history["report"]])


def test_a_dropped_tail_event_or_a_changed_evidence_record_is_named(
    art: Artifacts, history: dict[str, Any], tmp_path: Path
) -> None:
    bundle = export(art, tmp_path)
    truncated = rewrite(bundle, "events.jsonl", lambda data: b"".join(data.splitlines(keepends=True)[:-1]))
    assert failure(truncated).where == "events: head"

    def flip_evidence(data: bytes) -> bytes:
        lines = data.splitlines(keepends=True)
        entry = json.loads(lines[0])
        entry["evidence"]["result"] = "failed" if entry["evidence"]["result"] != "failed" else "passed"
        lines[0] = json.dumps(entry).encode() + b"\n"
        return b"".join(lines)

    err = failure(rewrite(bundle, "evidence.jsonl", flip_evidence))
    assert err.where == "evidence.jsonl line 1: signature"

    def move_evidence(data: bytes) -> bytes:
        lines = data.splitlines(keepends=True)
        entry = json.loads(lines[0])
        entry["sequence"] = 1  # a genuine record, claimed by another Event
        lines[0] = json.dumps(entry).encode() + b"\n"
        return b"".join(lines)

    err = failure(rewrite(bundle, "evidence.jsonl", move_evidence))
    assert err.where == "evidence.jsonl line 1" and "not in Event 1" in err.message

    def resign_package(data: bytes) -> bytes:
        doc = json.loads(data)
        doc["decisions"] = [{"description": "a decision nobody took", "sourceEventIds": [urn(uuid.uuid4())]}]
        return json.dumps(doc).encode() + b"\n"

    err = failure(rewrite(bundle, "context_packages.jsonl", resign_package))
    assert err.where.startswith("context package ") and err.where.endswith(": signature")
