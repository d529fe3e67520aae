"""The cryptography bundle: ``cryptography/manifest.json``, 22 cases, 62 evaluations.

How an evaluation's inputs are formed (cryptography manifest schema and
README): every signed-document evaluation names its own ``document`` file
and its own ``registry`` fixture; the document's exact bytes go to the
kernel's six-stage verification (§6.4) with the evaluation's ``profileId``
and the Registry built from that fixture. A ``fault`` object
(``{id, basis: {caseId, profileId}}``) is a label: it names the isolated
fault and the accepted evaluation it was derived from, but the faulty bytes
are already in the named files, so nothing is applied to anything here.
The runner checks that each basis names an accepted evaluation of the
same manifest.

What is checked:

- ``complete``: the canonical signing bytes equal the ``signingBytes`` file
  byte for byte; the signing hash, the resolved ``keyId`` and Principal, the
  protected time's exact lexical form and the signature value equal the
  expectation; ``signedDocumentHash`` equals the SHA-256 of the RFC 8785
  bytes of the whole parsed document, signature included (the vectors fix
  this: it is neither the file bytes, which are not canonical, nor the
  signing bytes); and the test-only signing key reproduces both its public
  key and, deterministically, the signature.
- a reject: verification stops at the expected stage with the expected
  wire code.
- ``canonicalization``: the RFC 8785 bytes of the parsed input equal the
  ``expectedJcs`` file, and their SHA-256 the declared hash.

Registry and signing-key fixtures are structurally checked first
(fixtures.py); a malformed fixture fails its evaluation without running it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import kernel
from .evaluate import Mismatch, run_evaluations
from .files import BundleError, BundleFiles
from .fixtures import registry_fixture_errors, signing_key_fixture_errors
from .report import Outcome

BUNDLE = "cryptography"
MANIFEST = "cryptography/manifest.json"
KINDS = ("single", "profile-matrix", "failure-matrix", "canonicalization")


def evaluations(manifest: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(evaluation id, evaluation) in manifest order.

    A single or canonicalization case has one evaluation, named by the
    case; a profile matrix's are told apart by profile, a failure matrix's
    by fault.
    """
    cases = manifest.get("cases")
    if not isinstance(cases, list) or not cases:
        raise BundleError(f"{MANIFEST}: no cases")
    out: list[tuple[str, dict[str, Any]]] = []
    for i, case in enumerate(cases):
        if not isinstance(case, dict) or case.get("kind") not in KINDS or not isinstance(case.get("id"), str):
            raise BundleError(f"{MANIFEST} case {i}: not {{id, kind, evaluations}}")
        evals = case.get("evaluations")
        if not isinstance(evals, list) or not evals or not all(isinstance(e, dict) for e in evals):
            raise BundleError(f"{MANIFEST} case {case['id']}: no evaluations")
        for e in evals:
            if case["kind"] == "profile-matrix":
                eid = f"{case['id']}/{e.get('profileId')}"
            elif case["kind"] == "failure-matrix":
                fault = e.get("fault")
                eid = f"{case['id']}/{fault.get('id') if isinstance(fault, dict) else None}"
            else:
                eid = case["id"]
            out.append((eid, e))
    seen: set[str] = set()
    for eid, _ in out:
        if eid in seen:
            raise BundleError(f"{MANIFEST}: two evaluations named {eid}")
        seen.add(eid)
    return out


def used_paths(manifest: dict[str, Any]) -> list[str]:
    """Every file the evaluations read (they must all be declared artifacts)."""
    paths: list[str] = []
    for _, e in evaluations(manifest):
        paths += [e[k] for k in ("document", "registry", "signingKey", "input", "expectedJcs") if e.get(k)]
        verified = e.get("expect", {}).get("verified") if isinstance(e.get("expect"), dict) else None
        if isinstance(verified, dict) and verified.get("signingBytes"):
            paths.append(verified["signingBytes"])
    return paths


def _describe(e: dict[str, Any]) -> str:
    if "input" in e:
        return f"the RFC 8785 bytes of {e.get('expectedJcs')}"
    expect = e.get("expect") or {}
    if expect.get("stage") == "complete":
        return "complete"
    return f"stage {expect.get('stage')}, {expect.get('wireCode')}"


def run(files: BundleFiles, manifest: dict[str, Any] | None) -> list[Outcome]:
    return run_evaluations(
        BUNDLE,
        MANIFEST,
        manifest,
        evaluations=evaluations,
        needs=kernel.CRYPTOGRAPHY,
        describe=_describe,
        checker=lambda: _checker(files, manifest or {}),
    )


def _checker(files: BundleFiles, manifest: dict[str, Any]) -> Callable[[dict[str, Any]], tuple[str, str]]:
    # A fault names the accepted evaluation it was derived from (its basis).
    accepted = {
        (case.get("id"), e.get("profileId"))
        for case in manifest["cases"]
        for e in case["evaluations"]
        if isinstance(e.get("expect"), dict) and e["expect"].get("stage") == "complete"
    }

    def check(e: dict[str, Any]) -> tuple[str, str]:
        if "input" in e:
            return _canonicalization(files, e)
        _check_basis(e, accepted)
        return _signed_document(files, e)

    return check


def _check_basis(e: dict[str, Any], accepted: set[tuple[Any, Any]]) -> None:
    fault = e.get("fault")
    if fault is None:
        return
    basis = fault.get("basis") if isinstance(fault, dict) else None
    key = (basis.get("caseId"), basis.get("profileId")) if isinstance(basis, dict) else None
    if key not in accepted:
        raise Mismatch("a fault derived from an accepted evaluation", f"basis {basis!r} names none")


def _canonicalization(files: BundleFiles, e: dict[str, Any]) -> tuple[str, str]:
    from mwportal.protocol import jcs, strictjson

    expected_bytes = files.read_bytes(e["expectedJcs"])
    value = strictjson.parse(files.read_bytes(e["input"]))
    out = jcs.canonicalize(value)
    if out != expected_bytes:
        raise Mismatch(f"the bytes of {e['expectedJcs']}", f"{len(out)} other bytes: {out[:80]!r}")
    digest = jcs.sha256_hash(out)
    if digest != e["sha256"]:
        raise Mismatch(f"sha256 {e['sha256']}", digest)
    return "canonical bytes and sha256", "equal"


def _registry(files: BundleFiles, path: str) -> Any:
    from mwportal.protocol import registry

    doc = files.load_json(path)
    errors = registry_fixture_errors(doc)
    if errors:
        raise Mismatch("a structurally valid Registry fixture", f"{path}: " + "; ".join(errors[:3]))
    return registry.registry_from_fixture(doc)


def _signed_document(files: BundleFiles, e: dict[str, Any]) -> tuple[str, str]:
    from mwportal.protocol import verification

    expect = e["expect"]
    evidence = _registry(files, e["registry"])
    data = files.read_bytes(e["document"])
    expected = "complete" if expect["stage"] == "complete" else f"stage {expect['stage']}, {expect['wireCode']}"
    try:
        verified = verification.verify_document(data, e["profileId"], evidence)
    except verification.VerificationFailed as exc:
        stage = _text(exc.stage)
        wire = _text(exc.wire_code)
        actual = f"stage {stage}, {wire} ({exc.reason})"
        if (stage, wire) != (expect["stage"], expect["wireCode"]):
            raise Mismatch(expected, actual) from None
        return expected, actual
    if expect["stage"] != "complete":
        raise Mismatch(expected, f"complete (key {verified.key_id})")
    _check_verified(files, e, verified)
    return expected, "complete, every verified field equal"


def _text(value: Any) -> str:
    # Stage is a StrEnum and the wire code an ErrorCode: compare their values.
    return str(getattr(value, "value", value))


def _check_verified(files: BundleFiles, e: dict[str, Any], verified: Any) -> None:
    from mwportal.protocol import ed25519, jcs, values

    want = e["expect"]["verified"]
    signing_bytes = files.read_bytes(want["signingBytes"])
    got_principal = {"type": verified.principal.type, "id": verified.principal.id}
    signature = verified.document.get("signature", {}).get("value")
    fields = [
        ("signing bytes", f"the bytes of {want['signingBytes']}", signing_bytes, verified.signing_bytes),
        ("signingHash", want["signingHash"], want["signingHash"], verified.signing_hash),
        ("keyId", want["keyId"], want["keyId"], verified.key_id),
        ("principal", want["principal"], want["principal"], got_principal),
        ("protectedTime", want["protectedTime"], want["protectedTime"], verified.protected_time.text),
        ("signature", want["signature"], want["signature"], signature),
        (
            "signedDocumentHash",
            want["signedDocumentHash"],
            want["signedDocumentHash"],
            jcs.sha256_hash(jcs.canonicalize(verified.document)),
        ),
    ]
    for name, shown, expected, actual in fields:
        if expected != actual:
            got = f"{len(actual)} other bytes" if isinstance(actual, bytes) else repr(actual)
            raise Mismatch(f"{name} {shown}", got)
    if "signingKey" not in e:
        return
    key = files.load_json(e["signingKey"])
    errors = signing_key_fixture_errors(key)
    if errors:
        raise Mismatch("a structurally valid signing-key fixture", f"{e['signingKey']}: " + "; ".join(errors[:3]))
    if not values.is_absolute_uri(key["keyId"]):
        raise Mismatch("a signing-key fixture keyId that is an absolute URI", repr(key["keyId"]))
    if key["keyId"] != verified.key_id:
        raise Mismatch(f"signing key {e['signingKey']} for {verified.key_id}", key["keyId"])
    seed = values.b64url_decode(key["seed"])
    if ed25519.public_key(seed) != values.b64url_decode(key["publicKey"]):
        raise Mismatch(f"{e['signingKey']}: the seed's public key", "a different key")
    if values.b64url_encode(ed25519.sign(seed, signing_bytes)) != want["signature"]:
        raise Mismatch("the test-only key to reproduce the signature", "a different signature")
