"""``./mw conformance``: the MWP 0.1 bundles run against the kernel (issue 17, item 9).

The bundle is read from ``MWP_PROTOCOL_ROOT`` or ``../shared/mwp-0.1``
(tests/protocol/bundle.py) and never copied into the project; a test that
needs a damaged bundle copies it into ``tmp_path`` and damages the copy.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mwportal.protocol.conformance import Check, Outcome, Report, run
from mwportal.protocol.conformance.files import BundleError, BundleFiles, is_repository_path

from .bundle import REPO, bundle_root

# The bundle's declared sizes (the three READMEs): 58 structural vectors,
# 22 cryptography cases with 62 evaluations, 5 admission cases with 30.
EXPECTED = {"structural": 58, "cryptography": 62, "admission": 30}


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "MWP_PROTOCOL_ROOT"}
    return subprocess.run(  # noqa: S603 - a fixed argv: this interpreter and the runner module
        [sys.executable, "-m", "mwportal.protocol.conformance", *args],
        cwd=REPO,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def bundle_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "mwp-0.1"
    shutil.copytree(bundle_root(), copy)
    return copy


# --- the real bundle ----------------------------------------------------------


def test_it_passes_all_150_evaluations_and_every_artifact_matches() -> None:
    report = run(bundle_root())
    failures = [f"{o.bundle} {o.id}: expected {o.expected}; got {o.actual}" for o in report.failures]
    mismatches = [f"{c.subject}: {c.detail}" for c in report.mismatches]
    assert failures == []
    assert mismatches == []
    for bundle, count in EXPECTED.items():
        assert report.tally(bundle) == (count, 0)
    assert report.ok


def test_it_checks_every_declared_artifact_and_both_manifest_digests() -> None:
    report = run(bundle_root())
    subjects = {c.subject for c in report.checks if c.matched}
    # 98 cryptography artifacts and 19 admission artifacts (the manifests).
    crypto = json.loads((bundle_root() / "cryptography/manifest.json").read_text())
    admission = json.loads((bundle_root() / "admission/manifest.json").read_text())
    assert len(crypto["artifacts"]) == 98
    assert len(admission["artifacts"]) == 19
    for entry in crypto["artifacts"] + admission["artifacts"]:
        assert entry["path"] in subjects
    for subject in (
        "cryptography/manifest.json artifactDigest",
        "admission/manifest.json artifactDigest",
        "admission/manifest.json cryptography.artifactDigest",
        "cryptography/manifest.json pinned MWP 0.1 digest",
        "admission/manifest.json pinned MWP 0.1 digest",
        "conformance/manifest.json pinned MWP 0.1 digest",
    ):
        assert subject in subjects


def test_it_prints_one_line_per_bundle_then_integrity_then_the_total() -> None:
    done = cli("--root", str(bundle_root()))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-5:-2] == [
        "structural: 58 passed, 0 failed",
        "cryptography: 62 passed, 0 failed",
        "admission: 30 passed, 0 failed",
    ]
    assert lines[-2].startswith("integrity: ") and lines[-2].endswith(" matched, 0 mismatched")
    assert lines[-1] == "150 passed, 0 failed"


def test_it_prints_the_tallies_as_json() -> None:
    done = cli("--json", env={"MWP_PROTOCOL_ROOT": str(bundle_root())})
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    for bundle, count in EXPECTED.items():
        assert doc[bundle] == {"passed": count, "failed": 0}
    assert doc["integrity"]["mismatched"] == 0
    assert doc["failures"] == []


# --- exit codes ---------------------------------------------------------------


def test_it_exits_2_when_root_names_no_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    done = cli("--root", str(missing))
    assert done.returncode == 2
    assert str(missing) in done.stderr
    assert done.stdout == ""


def test_it_exits_2_when_MWP_PROTOCOL_ROOT_names_no_directory(tmp_path: Path) -> None:
    done = cli(env={"MWP_PROTOCOL_ROOT": str(tmp_path / "nowhere")})
    assert done.returncode == 2
    assert "no MWP 0.1 bundle at" in done.stderr


def test_it_exits_2_through_mw_when_there_is_no_bundle(tmp_path: Path) -> None:
    # The README's entry point, not only the module (ensure_venv is a no-op
    # on an installed .venv).
    done = subprocess.run(  # noqa: S603 - the project's own script
        [str(REPO / "mw"), "conformance", "--root", str(tmp_path / "nowhere")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no MWP 0.1 bundle at" in done.stderr


@pytest.mark.parametrize(
    ("damage", "detail"),
    [
        ("flip", "sha256"),
        ("append", "byteLength"),
        ("delete", "unreadable"),
    ],
)
def test_it_fails_naming_an_artifact_whose_bytes_differ(bundle_copy: Path, damage: str, detail: str) -> None:
    rel = "cryptography/vectors/canonicalization/command.signing.jcs"
    target = bundle_copy / rel
    data = target.read_bytes()
    if damage == "flip":
        target.write_bytes(data[:10] + bytes([data[10] ^ 0x01]) + data[11:])
    elif damage == "append":
        target.write_bytes(data + b" ")
    else:
        target.unlink()
    done = cli("--root", str(bundle_copy))
    assert done.returncode == 1
    mismatch = [line for line in done.stdout.splitlines() if line.startswith(f"MISMATCH {rel}:")]
    assert len(mismatch) == 1 and detail in mismatch[0]
    assert "integrity mismatch" in done.stdout.splitlines()[-1]


def test_it_fails_when_an_artifact_changes_in_the_admission_bundle(bundle_copy: Path) -> None:
    rel = "admission/records/valid/command.json"
    target = bundle_copy / rel
    target.write_bytes(target.read_bytes().replace(b"00:05:00Z", b"00:05:01Z"))
    done = cli("--root", str(bundle_copy), "--json")
    assert done.returncode == 1
    doc = json.loads(done.stdout)
    assert rel in [m["subject"] for m in doc["integrity"]["mismatches"]]


def _rewrite(path: Path, change: Any) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False))


def test_it_fails_when_a_manifest_expectation_is_edited(bundle_copy: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        case = next(c for c in doc["cases"] if c["id"] == "reject.key-resolution.unknown-key")
        case["evaluations"][0]["expect"]["stage"] = "signature"

    _rewrite(bundle_copy / "cryptography/manifest.json", edit)
    done = cli("--root", str(bundle_copy))
    assert done.returncode == 1
    out = done.stdout
    assert "MISMATCH cryptography/manifest.json artifactDigest" in out
    # The admission bundle pins the cryptography digest: the pin breaks too.
    assert "MISMATCH admission/manifest.json cryptography.artifactDigest" in out
    assert "FAIL cryptography reject.key-resolution.unknown-key: expected stage signature" in out


def test_it_fails_a_self_consistent_manifest_that_is_not_the_pinned_one(bundle_copy: Path) -> None:
    # Dropping a case and recomputing artifactDigest keeps the manifest
    # consistent with itself; only the project's pin notices.
    from mwportal.protocol.conformance.integrity import manifest_digest

    def drop(doc: dict[str, Any]) -> None:
        doc["cases"] = [c for c in doc["cases"] if c["id"] != "reject.key-resolution.unknown-key"]
        doc["artifactDigest"] = manifest_digest(doc)

    _rewrite(bundle_copy / "cryptography/manifest.json", drop)
    report = run(bundle_copy)
    subjects = [c.subject for c in report.mismatches]
    assert "cryptography/manifest.json artifactDigest" not in subjects
    assert "cryptography/manifest.json pinned MWP 0.1 digest" in subjects
    assert not report.ok


def test_it_fails_when_a_structural_vector_changes(bundle_copy: Path) -> None:
    target = bundle_copy / "conformance/vectors/valid/command.json"
    target.write_bytes(target.read_bytes() + b"\n")
    report = run(bundle_copy)
    assert [c.subject for c in report.mismatches] == ["conformance/manifest.json pinned MWP 0.1 digest"]


def test_it_fails_an_evaluation_whose_input_is_not_a_declared_artifact(bundle_copy: Path) -> None:
    def point_elsewhere(doc: dict[str, Any]) -> None:
        case = next(c for c in doc["cases"] if c["id"] == "accept.command.golden")
        case["evaluations"][0]["document"] = "cryptography/vectors/undeclared.json"

    shutil.copy(
        bundle_copy / "cryptography/vectors/signed-documents/valid/command.json",
        bundle_copy / "cryptography/vectors/undeclared.json",
    )
    _rewrite(bundle_copy / "cryptography/manifest.json", point_elsewhere)
    report = run(bundle_copy)
    assert any(
        c.subject == "cryptography/manifest.json inputs declared" and "undeclared.json" in c.detail
        for c in report.mismatches
    )


def test_it_reports_an_unreadable_manifest_as_a_failure_not_an_empty_pass(bundle_copy: Path) -> None:
    (bundle_copy / "admission/manifest.json").write_text('{"cases": [], "cases": []}')
    report = run(bundle_copy)
    assert report.tally("admission") == (0, 1)
    assert any(c.subject == "admission/manifest.json" for c in report.mismatches)
    assert not report.ok


# --- the report and the file reader (no bundle needed) ------------------------


def test_it_lists_each_failure_with_expected_and_actual_before_the_summary() -> None:
    report = Report(
        "/b",
        outcomes=[
            Outcome("structural", "valid/command", True, "valid", "valid"),
            Outcome("cryptography", "reject.x/y", False, "stage schema, SCHEMA_VALIDATION_FAILED", "complete"),
            Outcome("admission", "a.b", True, "complete", "complete"),
        ],
        checks=[Check("cryptography/keys/k.json", False, "sha256 sha256:00, declared sha256:11"), Check("x", True)],
    )
    assert report.render_text().splitlines() == [
        "MISMATCH cryptography/keys/k.json: sha256 sha256:00, declared sha256:11",
        "FAIL cryptography reject.x/y: expected stage schema, SCHEMA_VALIDATION_FAILED; got complete",
        "structural: 1 passed, 0 failed",
        "cryptography: 0 passed, 1 failed",
        "admission: 1 passed, 0 failed",
        "integrity: 1 matched, 1 mismatched",
        "2 passed, 1 failed; 1 integrity mismatch",
    ]
    doc = json.loads(report.render_json())
    assert doc["structural"] == {"passed": 1, "failed": 0}
    assert doc["cryptography"] == {"passed": 0, "failed": 1}
    assert doc["admission"] == {"passed": 1, "failed": 0}
    assert doc["integrity"]["mismatched"] == 1
    assert not report.ok


def test_it_does_not_call_an_empty_run_a_pass() -> None:
    assert not Report("/b").ok
    assert Report("/b", outcomes=[Outcome("structural", "v", True)]).ok


@pytest.mark.parametrize(
    "path", ["../etc/passwd", "/etc/passwd", "a/../b", "a//b", "A/b", ".hidden", "a/", "", "a\\b", "a/b\n"]
)
def test_it_refuses_to_open_a_path_outside_the_repository_path_grammar(tmp_path: Path, path: str) -> None:
    assert not is_repository_path(path)
    with pytest.raises(BundleError):
        BundleFiles(tmp_path).read_bytes(path)


def test_it_refuses_a_manifest_with_duplicate_members(tmp_path: Path) -> None:
    (tmp_path / "m.json").write_text('{"a": 1, "a": 2}')
    with pytest.raises(BundleError, match="duplicate"):
        BundleFiles(tmp_path).load_json("m.json")


# --- the runner checks what it says it checks ------------------------------------


def test_it_fails_every_evaluation_of_a_bundle_whose_kernel_module_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes the import raise ImportError.
    monkeypatch.setitem(sys.modules, "mwportal.protocol.admission", None)
    report = run(bundle_root())
    assert report.tally("admission") == (0, 30)
    assert all("kernel missing: mwportal.protocol.admission" in o.actual for o in report.failures)
    assert not report.ok


def test_it_fails_the_bundles_of_a_kernel_module_that_breaks_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from mwportal.protocol.conformance import kernel

    real = importlib.import_module

    def broken(name: str, package: str | None = None) -> Any:
        if name == "mwportal.protocol.verification":
            raise AttributeError("PROTOCOL_VIOLATION")
        return real(name, package)

    monkeypatch.setattr(kernel.importlib, "import_module", broken)
    report = run(bundle_root())
    assert report.tally("structural") == (58, 0)
    assert report.tally("cryptography") == (0, 62)
    assert report.tally("admission") == (0, 30)
    assert "AttributeError: PROTOCOL_VIOLATION" in report.failures[0].actual


def _tampered(field: str) -> Any:
    import dataclasses

    from mwportal.protocol import values, verification

    def change(verified: Any) -> Any:
        if field == "signing_bytes":
            return dataclasses.replace(verified, signing_bytes=verified.signing_bytes + b" ")
        if field == "signing_hash":
            return dataclasses.replace(verified, signing_hash="sha256:" + "0" * 64)
        if field == "key_id":
            return dataclasses.replace(verified, key_id="urn:example:other-key")
        if field == "principal":
            principal = dataclasses.replace(verified.principal, id="urn:example:someone-else")
            return dataclasses.replace(verified, principal=principal)
        if field == "protected_time":
            return dataclasses.replace(verified, protected_time=values.parse_timestamp("2026-07-15T00:00:00.0Z"))
        document = json.loads(json.dumps(verified.document))
        document["signature"]["value"] = document["signature"]["value"][::-1]
        return dataclasses.replace(verified, document=document)

    original = verification.verify_document
    return lambda data, profile, registry: change(original(data, profile, registry))


@pytest.mark.parametrize(
    ("field", "named"),
    [
        ("signing_bytes", "signing bytes"),
        ("signing_hash", "signingHash"),
        ("key_id", "keyId"),
        ("principal", "principal"),
        ("protected_time", "protectedTime"),
        ("signature", "signature"),
    ],
)
def test_it_fails_a_complete_verification_whose_evidence_differs(
    monkeypatch: pytest.MonkeyPatch, field: str, named: str
) -> None:
    from mwportal.protocol import verification

    monkeypatch.setattr(verification, "verify_document", _tampered(field))
    report = run(bundle_root())
    golden = next(o for o in report.outcomes if o.id == "accept.command.golden")
    assert not golden.passed
    assert golden.expected.startswith(named), golden
    # Every complete evaluation of the cryptography bundle is caught.
    assert {o.id for o in report.failures if o.bundle == "cryptography"} >= {
        o.id for o in report.outcomes if o.bundle == "cryptography" and o.id.startswith("accept.command")
    }


def test_it_checks_the_signed_document_hash_over_the_whole_canonical_document(monkeypatch: pytest.MonkeyPatch) -> None:
    # signedDocumentHash is the SHA-256 of the RFC 8785 bytes of the whole
    # parsed document, signature included: a document that canonicalizes
    # differently is caught even when every other field agrees.
    import dataclasses

    from mwportal.protocol import verification

    original = verification.verify_document

    def extra_member(data: bytes, profile: str, registry: Any) -> Any:
        verified = original(data, profile, registry)
        return dataclasses.replace(verified, document={**verified.document, "zz": 1})

    monkeypatch.setattr(verification, "verify_document", extra_member)
    report = run(bundle_root())
    golden = next(o for o in report.outcomes if o.id == "accept.command.golden")
    assert golden.expected.startswith("signedDocumentHash"), golden


def test_it_fails_a_reject_that_stops_at_another_stage_or_wire_code(monkeypatch: pytest.MonkeyPatch) -> None:
    from mwportal.protocol import verification

    original = verification.VerificationFailed.__init__

    def parse_is_schema(self: Any, stage: Any, reason: str) -> None:
        original(self, stage, reason)
        if stage == verification.Stage.PARSE:
            self.wire_code = verification.WIRE_CODES[verification.Stage.SCHEMA]

    monkeypatch.setattr(verification.VerificationFailed, "__init__", parse_is_schema)
    report = run(bundle_root())
    failed = {o.id for o in report.failures if o.bundle == "cryptography"}
    assert failed == {
        "reject.parse.byte-level-matrix/invalid-utf8",
        "reject.parse.byte-level-matrix/trailing-data",
        "reject.parse.byte-level-matrix/utf8-bom",
        "reject.parse.duplicate-decoded-member",
    }


def test_it_fails_an_admission_that_returns_another_record(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from mwportal.protocol import admission

    original = admission.replay_historical

    def other_record(verified: Any, log: Any) -> Any:
        admitted = original(verified, log)
        record = dataclasses.replace(admitted.record, admission_record_id="urn:example:another-record")
        return dataclasses.replace(admitted, record=record)

    monkeypatch.setattr(admission, "replay_historical", other_record)
    report = run(bundle_root())
    assert {o.id for o in report.failures} == {"historical-replay.later-expiry", "historical-replay.later-revocation"}


def test_it_fails_an_admission_that_asks_for_trusted_context_after_a_found_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # §6.4: a found record is validated and returned; the trusted context is
    # for a new admission only (the idempotent-retry evaluation).
    from mwportal.protocol import admission

    original = admission.admit_first

    def eager(verified: Any, log: Any, trusted_context: Any) -> Any:
        # The fixture source refuses when there is no trusted context; asking is the fault.
        with contextlib.suppress(admission.AdapterContractError):
            trusted_context()
        return original(verified, log, trusted_context)

    monkeypatch.setattr(admission, "admit_first", eager)
    report = run(bundle_root())
    failed = {o.id: o for o in report.failures}
    # Every successful first admission: after a found record (the retry) the
    # request is one too many, after authoritative absence it is the second.
    assert set(failed) == {o.id for o in report.outcomes if o.id.startswith("first-admission.")}
    assert "0 appends, 1 trusted-context requests" in failed["first-admission.idempotent-retry"].actual
    assert failed["first-admission.command"].expected == "at most one append and one trusted-context request"


def test_it_fails_an_admission_reject_with_another_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    from mwportal.protocol import admission

    original = admission.AdmissionFailed.__init__
    swap = {
        admission.Reason.RECORD_MISSING: admission.Reason.LOG_INDETERMINATE,
        admission.Reason.LOG_INDETERMINATE: admission.Reason.RECORD_MISSING,
    }

    def swapped(self: Any, reason: Any, detail: str = "") -> None:
        original(self, swap.get(reason, reason), detail)

    monkeypatch.setattr(admission.AdmissionFailed, "__init__", swapped)
    report = run(bundle_root())
    assert {o.id for o in report.failures} == {"historical-record-missing", "admission-log-indeterminate"}
