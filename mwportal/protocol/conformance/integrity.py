"""Artifact integrity: the bundle's bytes are the bytes its manifests declare.

- every ``artifacts[]`` entry of the cryptography and admission manifests:
  the file exists, has the declared ``byteLength`` and the declared
  ``sha256`` of its exact bytes;
- each manifest's ``artifactDigest``: SHA-256 of the RFC 8785 bytes of the
  parsed manifest with exactly the top-level ``artifactDigest`` removed
  (both bundle READMEs, "Digest calculation");
- the admission manifest's ``cryptography.artifactDigest`` pin equals the
  cryptography manifest's own digest;
- every file an evaluation reads is a declared artifact (of its own
  manifest, or for admission of the pinned cryptography manifest), so no
  input escapes the digests;
- the project's own pins: MWP 0.1 as of the normative repository's commit
  f7e70a72, whose manifest digests are the values below (a newer bundle is
  a new pin, made on purpose). The
  structural bundle has no digest of its own, so the project pins one: the
  SHA-256 of the RFC 8785 bytes of ``{path: "sha256:<hex>"}`` over
  ``conformance/manifest.json`` and every instance it names.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .files import BundleError, BundleFiles, sha256_hex
from .report import Check

PINNED_DIGESTS = {
    "cryptography/manifest.json": "sha256:5eade516e4bc5dcf04477727ebcccd11f33348b2d9135fb6fe0365c6e6cc2ea3",
    "admission/manifest.json": "sha256:39971bfafb68ef6c18f9026220cccc4f023fd4d5c8074f8ff0276cb1129cd0a0",
    "conformance/manifest.json": "sha256:93a595a739e9957caf57705dbf8353f46f149af5c22c71cca221b5a84c0fce4f",
}


def manifest_digest(manifest: dict[str, Any]) -> str:
    """The ``artifactDigest`` a manifest should carry (ImportError without the kernel's JCS)."""
    from mwportal.protocol import jcs

    rest = {k: v for k, v in manifest.items() if k != "artifactDigest"}
    return jcs.sha256_hash(jcs.canonicalize(rest))


def declared_paths(manifest: dict[str, Any]) -> set[str]:
    artifacts = manifest.get("artifacts")
    if not isinstance(artifacts, list):
        return set()
    return {a["path"] for a in artifacts if isinstance(a, dict) and isinstance(a.get("path"), str)}


def check_artifacts(files: BundleFiles, manifest_path: str, manifest: dict[str, Any]) -> list[Check]:
    checks: list[Check] = []
    artifacts = manifest.get("artifacts")
    if not isinstance(artifacts, list) or not artifacts:
        return [Check(manifest_path, False, "no artifacts[] declared")]
    for i, entry in enumerate(artifacts):
        if not isinstance(entry, dict) or set(entry) != {"path", "byteLength", "sha256"}:
            checks.append(Check(f"{manifest_path} artifacts/{i}", False, "not {path, byteLength, sha256}"))
            continue
        path = entry["path"]
        try:
            data = files.read_bytes(path)
        except BundleError as exc:
            checks.append(Check(str(path), False, f"unreadable ({exc})"))
            continue
        problems = []
        if entry["byteLength"] != len(data):
            problems.append(f"byteLength {len(data)}, declared {entry['byteLength']}")
        actual = sha256_hex(data)
        if entry["sha256"] != actual:
            problems.append(f"sha256 {actual}, declared {entry['sha256']}")
        checks.append(Check(path, not problems, "; ".join(problems)))
    return checks


def check_manifest_digest(manifest_path: str, manifest: dict[str, Any]) -> list[Check]:
    declared = manifest.get("artifactDigest")
    try:
        actual = manifest_digest(manifest)
    except ImportError as exc:
        return [Check(f"{manifest_path} artifactDigest", False, f"kernel missing: mwportal.protocol.jcs ({exc})")]
    except Exception as exc:  # jcs.DataModelError (outside I-JSON), or a broken kernel: a mismatch either way
        return [Check(f"{manifest_path} artifactDigest", False, f"cannot canonicalize: {exc}")]
    checks = [
        Check(
            f"{manifest_path} artifactDigest",
            declared == actual,
            "" if declared == actual else f"computed {actual}, declared {declared}",
        )
    ]
    pinned = PINNED_DIGESTS[manifest_path]
    checks.append(
        Check(
            f"{manifest_path} pinned MWP 0.1 digest",
            actual == pinned,
            "" if actual == pinned else f"computed {actual}, the project pins {pinned}",
        )
    )
    return checks


def check_cryptography_pin(admission: dict[str, Any], cryptography: dict[str, Any] | None) -> Check:
    pin = admission.get("cryptography")
    pinned = pin.get("artifactDigest") if isinstance(pin, dict) else None
    subject = "admission/manifest.json cryptography.artifactDigest"
    if not isinstance(pin, dict) or pin.get("manifest") != "cryptography/manifest.json":
        return Check(subject, False, "no pin of cryptography/manifest.json")
    if cryptography is None:
        return Check(subject, False, "cryptography/manifest.json unreadable")
    try:
        actual = manifest_digest(cryptography)
    except Exception as exc:  # as in check_manifest_digest
        return Check(subject, False, f"cannot compute the cryptography digest: {exc}")
    return Check(subject, pinned == actual, "" if pinned == actual else f"pins {pinned}, manifest is {actual}")


def check_inputs_declared(manifest_path: str, used: Iterable[str], declared: set[str]) -> list[Check]:
    missing = sorted(set(used) - declared)
    if not missing:
        return [Check(f"{manifest_path} inputs declared", True)]
    return [Check(f"{manifest_path} inputs declared", False, f"undeclared: {p}") for p in missing]


def structural_digest(files: BundleFiles, instances: Iterable[str]) -> str:
    from mwportal.protocol import jcs

    hashes = {"conformance/manifest.json": sha256_hex(files.read_bytes("conformance/manifest.json"))}
    for path in instances:
        hashes[path] = sha256_hex(files.read_bytes(path))
    return jcs.sha256_hash(jcs.canonicalize(hashes))


def check_structural_pin(files: BundleFiles, instances: list[str]) -> Check:
    subject = "conformance/manifest.json pinned MWP 0.1 digest"
    try:
        actual = structural_digest(files, instances)
    except Exception as exc:  # an unreadable instance or a broken kernel: a mismatch either way
        return Check(subject, False, str(exc))
    pinned = PINNED_DIGESTS["conformance/manifest.json"]
    return Check(subject, actual == pinned, "" if actual == pinned else f"computed {actual}, the project pins {pinned}")
