"""The admission bundle: ``admission/manifest.json``, 5 cases, 30 evaluations.

Each evaluation first reruns the unchanged six-stage verification of its
document against its Registry fixture (it must complete), then drives the
kernel's first admission (``admission.admit_first``) or historical replay
(``admission.replay_historical``) against the kernel's fixture Admission Log
(``admission.FixtureAdmissionLog``), which answers from the evaluation's
``lookup`` and ``append`` entries and reads records from the bundle. The
``trustedContext`` entry is offered through a counting source, so the runner
also sees that it was asked for only after authoritative absence.

Pass when:

- ``complete``: the kernel returned a record equal, as JSON and as the
  kernel's own parsed record, to the expectation's record file; the log was
  looked up exactly once; a found record meant no append and no trusted
  context; historical replay never appended;
- ``admission``: AdmissionFailed at stage ``admission``, wire code
  ``AUTH_INVALID_SIGNATURE``, and the expectation's reason.

A harness contract violation (``AdapterContractError``) or any other
exception fails the evaluation.
"""

from __future__ import annotations

import json
from typing import Any

from . import kernel
from .evaluate import Mismatch, run_evaluations
from .files import BundleError, BundleFiles
from .fixtures import registry_fixture_errors
from .report import Outcome

BUNDLE = "admission"
MANIFEST = "admission/manifest.json"
MODES = ("first-admission", "historical-replay")


def evaluations(manifest: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    cases = manifest.get("cases")
    if not isinstance(cases, list) or not cases:
        raise BundleError(f"{MANIFEST}: no cases")
    out: list[tuple[str, dict[str, Any]]] = []
    for i, case in enumerate(cases):
        evals = case.get("evaluations") if isinstance(case, dict) else None
        if not isinstance(evals, list) or not evals:
            raise BundleError(f"{MANIFEST} case {i}: no evaluations")
        for e in evals:
            if (
                not isinstance(e, dict)
                or not isinstance(e.get("id"), str)
                or e.get("mode") not in MODES
                or not isinstance(e.get("lookup"), dict)
                or not isinstance(e.get("expect"), dict)
            ):
                raise BundleError(f"{MANIFEST} case {case.get('id')}: an evaluation is not {{id, mode, lookup, ...}}")
            out.append((e["id"], e))
    ids = [eid for eid, _ in out]
    if len(set(ids)) != len(ids):
        raise BundleError(f"{MANIFEST}: evaluation ids are not unique")
    return out


def used_paths(manifest: dict[str, Any]) -> list[str]:
    paths: list[str] = []
    for _, e in evaluations(manifest):
        paths += [e["document"], e["registry"]]
        for name in ("lookup", "append", "expect"):
            entry = e.get(name)
            if isinstance(entry, dict) and "record" in entry:
                paths.append(entry["record"])
    return paths


def _describe(e: dict[str, Any]) -> str:
    expect = e["expect"]
    if expect.get("stage") == "complete":
        return f"complete with {expect.get('record')}"
    return f"stage {expect.get('stage')}, {expect.get('wireCode')}, {expect.get('reason')}"


def run(files: BundleFiles, manifest: dict[str, Any] | None) -> list[Outcome]:
    return run_evaluations(
        BUNDLE,
        MANIFEST,
        manifest,
        evaluations=evaluations,
        needs=kernel.ADMISSION,
        describe=_describe,
        checker=lambda: lambda e: (_describe(e), _evaluate(files, e)),
    )


def _verified(files: BundleFiles, e: dict[str, Any]) -> Any:
    from mwportal.protocol import registry, verification

    fixture = files.load_json(e["registry"])
    errors = registry_fixture_errors(fixture)
    if errors:
        raise Mismatch("a structurally valid Registry fixture", f"{e['registry']}: " + "; ".join(errors[:3]))
    evidence = registry.registry_from_fixture(fixture)
    try:
        return verification.verify_document(files.read_bytes(e["document"]), e["profileId"], evidence)
    except verification.VerificationFailed as exc:
        raise Mismatch(
            "a complete six-stage verification first", f"stage {getattr(exc.stage, 'value', exc.stage)} ({exc.reason})"
        ) from None


def _evaluate(files: BundleFiles, e: dict[str, Any]) -> str:
    from mwportal.protocol import admission

    verified = _verified(files, e)
    log = admission.FixtureAdmissionLog(e["lookup"], e.get("append"), files.read_bytes)
    context = e.get("trustedContext")
    source = admission.TrustedContextSource(
        admission.fixture_trusted_context(context) if isinstance(context, dict) else None
    )
    expect = e["expect"]
    try:
        if e["mode"] == "first-admission":
            admitted = admission.admit_first(verified, log, source)
        else:
            admitted = admission.replay_historical(verified, log)
    except admission.AdmissionFailed as exc:
        stage = str(getattr(exc.stage, "value", exc.stage))
        wire = str(getattr(exc.wire_code, "value", exc.wire_code))
        reason = str(getattr(exc.reason, "value", exc.reason))
        got = f"stage {stage}, {wire}, {reason}"
        if expect.get("stage") == "complete" or (stage, wire, reason) != (
            expect.get("stage"),
            expect.get("wireCode"),
            expect.get("reason"),
        ):
            raise Mismatch(_describe(e), f"{got} ({exc.detail})") from None
        return got
    if expect.get("stage") != "complete":
        raise Mismatch(_describe(e), f"complete ({admitted.outcome})")
    _check_admitted(files, e, admitted, log, source)
    return f"complete ({admitted.outcome})"


def _check_admitted(files: BundleFiles, e: dict[str, Any], admitted: Any, log: Any, source: Any) -> None:
    from mwportal.protocol import strictjson

    want_path = e["expect"]["record"]
    want = strictjson.parse(files.read_bytes(want_path))
    # The fixture files are pretty-printed, so records compare as JSON values.
    if strictjson.parse(admitted.record_bytes) != want:
        raise Mismatch(f"the record of {want_path}", "other record bytes: " + admitted.record_bytes[:120].decode())
    if admitted.record.to_json() != want:
        got = json.dumps(admitted.record.to_json(), ensure_ascii=False)
        raise Mismatch(f"the parsed record of {want_path}", got[:200])
    if log.lookups != 1:
        raise Mismatch("exactly one Admission Log lookup", f"{log.lookups} lookups")
    if (e["mode"] == "historical-replay" or e["lookup"]["status"] == "found") and (log.appends or source.calls):
        raise Mismatch(
            "no append and no trusted context after a found record or in historical replay",
            f"{log.appends} appends, {source.calls} trusted-context requests",
        )
    if log.appends > 1 or source.calls > 1:
        raise Mismatch("at most one append and one trusted-context request", f"{log.appends}, {source.calls}")
