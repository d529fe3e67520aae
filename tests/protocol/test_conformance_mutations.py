"""Mutation guards (issue 17, item 10): the runner fails when the kernel is broken.

Each test breaks one kernel property with ``monkeypatch`` and shows that the
bundle runner notices: failures are reported (naming the evaluations the
broken property decides) and the exit status is non-zero. The runner calls
the kernel through its module attributes at call time
(mwportal/protocol/conformance/kernel.py), which is what lets a patched
function be the one that runs.
"""

from __future__ import annotations

import json
import types
from typing import Any

import pytest

from mwportal.protocol import ed25519, schemas, verification
from mwportal.protocol.conformance import Report, run
from mwportal.protocol.conformance.__main__ import main
from mwportal.protocol.conformance.signed_documents import evaluations

from .bundle import bundle_root


def failing(report: Report, bundle: str) -> set[str]:
    return {o.id for o in report.failures if o.bundle == bundle}


def assert_cli_fails(capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["--root", str(bundle_root())]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[-1] != "150 passed, 0 failed"
    return out


def test_it_fails_when_the_schema_validator_accepts_everything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def accept_all(name: str, document: Any) -> None:
        return None

    monkeypatch.setattr(schemas, "validate", accept_all)
    report = run(bundle_root())
    # Exactly the 31 invalid structural vectors now pass as valid, and they
    # are the ones reported.
    failed = failing(report, "structural")
    assert len(failed) == 31
    assert all(eid.startswith("invalid/") for eid in failed)
    # The cryptography bundle's schema-stage rejects are decided by the same
    # validator (a malformed protected time is still caught by the timestamp
    # parser behind it, so not every one of them).
    crypto = failing(report, "cryptography")
    assert "reject.schema.padded-signature-base64url" in crypto
    assert all(eid.startswith("reject.schema.") for eid in crypto), crypto
    out = assert_cli_fails(capsys)
    assert "FAIL structural invalid/command-missing-signature: expected invalid" in out


STRICT_ED25519 = {
    "reject.key-resolution.matrix/public-key-identity",
    "reject.key-resolution.matrix/public-key-small-order",
    "reject.key-resolution.matrix/public-key-mixed-order",
    "reject.key-resolution.matrix/public-key-off-curve",
    "reject.key-resolution.matrix/public-key-negative-zero",
    "reject.key-resolution.matrix/public-key-noncanonical-encoding",
    "reject.key-resolution.matrix/public-key-y-equals-p",
    "reject.key-resolution.public-key-wrong-length",
    "reject.signature-envelope.ed25519-encoding-matrix/signature-r-mixed-order",
    "reject.signature-envelope.ed25519-encoding-matrix/signature-r-negative-zero",
    "reject.signature-envelope.ed25519-encoding-matrix/signature-r-noncanonical",
    "reject.signature-envelope.ed25519-encoding-matrix/signature-r-off-curve",
    "reject.signature-envelope.ed25519-encoding-matrix/signature-r-small-order",
    "reject.signature-envelope.ed25519-encoding-matrix/signature-r-y-equals-p",
    "reject.signature-envelope.ed25519-encoding-matrix/signature-s-out-of-range",
    "reject.signature-envelope.ed25519-encoding-matrix/signature-wrong-length",
}


PUBLIC_KEY_CHECKS = ("check_public_key",)
SIGNATURE_CHECKS = ("check_signature", "check_signature_encoding", "check_signature_point")


@pytest.mark.parametrize(
    ("removed", "expected"),
    [
        (PUBLIC_KEY_CHECKS + SIGNATURE_CHECKS, STRICT_ED25519),
        (PUBLIC_KEY_CHECKS, {e for e in STRICT_ED25519 if e.startswith("reject.key-resolution.")}),
        (SIGNATURE_CHECKS, {e for e in STRICT_ED25519 if e.startswith("reject.signature-envelope.")}),
    ],
    ids=["all", "public-key", "signature"],
)
def test_it_fails_when_the_ed25519_strictness_is_removed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], removed: tuple[str, ...], expected: set[str]
) -> None:
    def lax(raw: bytes) -> None:
        return None

    # The signature check may be split into a cheap and a costly half; every
    # one the kernel has goes.
    present = [name for name in removed if hasattr(ed25519, name)]
    assert present
    for name in present:
        monkeypatch.setattr(ed25519, name, lax)
    report = run(bundle_root())
    # Exactly the evaluations strict Ed25519 decides fail: without the checks
    # they are refused at a later stage (the equation) instead.
    assert failing(report, "cryptography") == expected
    assert_cli_fails(capsys)


def test_it_fails_when_two_stages_classifications_are_swapped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # verification.py classifies each failure by naming a Stage member where
    # the check fails; a Stage whose SCHEMA and SIGNATURE_ENVELOPE names are
    # exchanged is that classification with the two labels swapped (and the
    # wire code, which follows the stage, swapped with them).
    Stage = verification.Stage
    labels = {member.name: member for member in Stage}
    labels["SCHEMA"], labels["SIGNATURE_ENVELOPE"] = Stage.SIGNATURE_ENVELOPE, Stage.SCHEMA
    monkeypatch.setattr(verification, "Stage", types.SimpleNamespace(**labels))
    report = run(bundle_root())
    failed = failing(report, "cryptography")
    # Exactly the evaluations the manifest expects to stop at one of the two
    # swapped stages fail.
    manifest = json.loads((bundle_root() / "cryptography/manifest.json").read_text())
    swapped_stages = {"schema", "signature-envelope"}
    expected = {eid for eid, e in evaluations(manifest) if e.get("expect", {}).get("stage") in swapped_stages}
    assert len(expected) == 16  # 5 schema, 11 signature-envelope
    assert failed == expected
    assert_cli_fails(capsys)


@pytest.mark.parametrize("verdict", [True, False], ids=["accepts-every-signature", "refuses-every-signature"])
def test_it_fails_when_the_signature_equation_gives_one_answer(monkeypatch: pytest.MonkeyPatch, verdict: bool) -> None:
    def constant(public_key: bytes, message: bytes, signature: bytes) -> bool:
        return verdict

    monkeypatch.setattr(ed25519, "verify", constant)
    report = run(bundle_root())
    failed = {o.id: o for o in report.failures}
    manifest = json.loads((bundle_root() / "cryptography/manifest.json").read_text())
    stages = {eid: e.get("expect", {}).get("stage") for eid, e in evaluations(manifest)}
    if verdict:
        # The four stage-6 rejects complete instead (and so may signature
        # envelopes whose R point the kernel checks only once a later stage
        # has failed).
        crypto = {eid for eid in failed if eid in stages}
        assert crypto >= {eid for eid, s in stages.items() if s == "signature"}
        assert all(stages[eid] in ("signature", "signature-envelope") for eid in crypto), crypto
    else:
        # Every expected-complete document is refused, at stage 6, and so is
        # every admission evaluation, which needs a complete verification first.
        complete = {eid for eid, s in stages.items() if s == "complete"}
        assert {eid for eid in failed if eid in stages} == complete
        assert all(failed[eid].actual.startswith("stage signature, AUTH_INVALID_SIGNATURE") for eid in complete)
        assert report.tally("admission") == (0, 30)
