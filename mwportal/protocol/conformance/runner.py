"""One conformance run over a bundle root: integrity first, then the three bundles.

Integrity never stops the run: a bundle whose bytes differ from its
manifest is still evaluated (the failures say more than "mismatch" alone),
but the run is not ``ok``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import first_admission, integrity, signed_documents, structural
from .files import BundleError, BundleFiles
from .report import Check, Report

CRYPTOGRAPHY = "cryptography/manifest.json"
ADMISSION = "admission/manifest.json"


def _manifest(files: BundleFiles, path: str, checks: list[Check]) -> dict[str, Any] | None:
    try:
        doc = files.load_json(path)
    except BundleError as exc:
        checks.append(Check(path, False, str(exc)))
        return None
    if not isinstance(doc, dict):
        checks.append(Check(path, False, "not an object"))
        return None
    return doc


def check_integrity(files: BundleFiles) -> tuple[list[Check], dict[str, Any] | None, dict[str, Any] | None]:
    """(checks, the cryptography manifest, the admission manifest)."""
    checks: list[Check] = []
    crypto = _manifest(files, CRYPTOGRAPHY, checks)
    admission = _manifest(files, ADMISSION, checks)
    crypto_declared: set[str] = set()
    if crypto is not None:
        checks += integrity.check_artifacts(files, CRYPTOGRAPHY, crypto)
        checks += integrity.check_manifest_digest(CRYPTOGRAPHY, crypto)
        crypto_declared = integrity.declared_paths(crypto)
        try:
            used = signed_documents.used_paths(crypto)
        except BundleError as exc:
            checks.append(Check(f"{CRYPTOGRAPHY} inputs declared", False, str(exc)))
        else:
            checks += integrity.check_inputs_declared(CRYPTOGRAPHY, used, crypto_declared)
    if admission is not None:
        checks += integrity.check_artifacts(files, ADMISSION, admission)
        checks += integrity.check_manifest_digest(ADMISSION, admission)
        checks.append(integrity.check_cryptography_pin(admission, crypto))
        try:
            used = first_admission.used_paths(admission)
        except BundleError as exc:
            checks.append(Check(f"{ADMISSION} inputs declared", False, str(exc)))
        else:
            # Admission evaluations reuse the cryptography bundle's documents
            # and Registries, bound through the pinned cryptography digest.
            declared = integrity.declared_paths(admission) | crypto_declared
            checks += integrity.check_inputs_declared(ADMISSION, used, declared)
    try:
        instances = [str(e["instance"]) for e in structural.read_manifest(files)]
    except BundleError as exc:
        checks.append(Check("conformance/manifest.json", False, str(exc)))
    else:
        checks.append(integrity.check_structural_pin(files, instances))
    return checks, crypto, admission


def run(root: Path) -> Report:
    """Every integrity check and every evaluation of the bundle at ``root``."""
    files = BundleFiles(root)
    report = Report(str(root))
    checks, crypto, admission = check_integrity(files)
    report.checks = checks
    report.outcomes += structural.run(files)
    report.outcomes += signed_documents.run(files, crypto)
    report.outcomes += first_admission.run(files, admission)
    return report
