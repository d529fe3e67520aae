"""Signed Document verification (§6.4) against a bare libsodium verify of the same bytes.

    python bench/documents.py [--quick] [--repeat N] [--iterations N]

A *typical Command*: an Agent's ``work.checkpoint`` into a Mission Group
(Session and Membership Epochs, a WorkItem, an expected revision, a payload
with a note, progress and two Artifact hashes; about 700 bytes of compact
JSON), signed with a fresh Ed25519 key bound in an in-memory Registry.

Measured in the same run, interleaved repeat by repeat so that noise from
other processes hits every side alike, and reported as medians over
``--repeat`` runs (5; quick 3) of ``--iterations`` calls each (20,000; quick
3,000):

- **full verification**: ``verify_document(bytes, "command", registry)``, all
  six stages (strict parse, schema, envelope and strict ``Renc``/``Senc``,
  Registry lookup and interval, JCS signing bytes, the Ed25519 equation),
  against the **baseline** ``nacl.bindings.crypto_sign_open`` of the same
  signing bytes and signature (PyNaCl's thinnest call into libsodium's
  verify; ``VerifyKey.verify`` is shown too). Target: verifications per second
  >= 0.3 x the baseline's (RESULT ``full_verification_ratio_vs_libsodium``).
- **schema validation alone**: ``schemas.validate("command", doc)`` on the
  parsed Command. Target >= 20,000 per second.
- **Registry size**: full verification against a Registry of 10,000 key
  bindings (a tenth of them with a validity-history record) over the same
  against 10. Target: time ratio <= 1.2 (RESULT ``registry_size_cost_ratio``):
  the §6.4 invariants are enforced when a binding is registered, so a
  verification reads one binding through an index.

Also printed: the per-stage cost (parse, schema, JCS, Ed25519, lookup), the
time to build each Registry, and the load average. Exit status 0 even when a
target is missed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import nacl.signing  # noqa: E402
from nacl import bindings as sodium  # noqa: E402

from mwportal.protocol import ed25519, jcs, schemas, strictjson  # noqa: E402
from mwportal.protocol.registry import MemoryRegistry, Principal  # noqa: E402
from mwportal.protocol.values import b64url_decode, b64url_encode  # noqa: E402
from mwportal.protocol.verification import sign_document, verify_document  # noqa: E402

BENCH = "documents"
ORG = "urn:example:organization:bench"
AGENT = Principal("agent", "urn:example:agent:bench-worker")
KEY_ID = "urn:example:key:bench-worker-1"
TARGET_RATIO = 0.3
TARGET_SCHEMA = 20_000
TARGET_SIZE = 1.2


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def typical_command() -> dict[str, object]:
    return {
        "protocolVersion": "0.1",
        "actionId": "urn:uuid:0f6c2b1e-3a4d-4e5f-8a9b-0c1d2e3f4a5b",
        "actor": {"type": AGENT.type, "id": AGENT.id},
        "sessionEpoch": 12,
        "membershipEpoch": 4,
        "groupId": "urn:uuid:7d3e9f10-2b4c-4d6e-9f80-1a2b3c4d5e6f",
        "workItemId": "urn:uuid:4c5d6e7f-8091-4a2b-bc3d-4e5f60718293",
        "kind": "work.checkpoint",
        "expectedRevision": 17,
        "correlationId": "urn:uuid:9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d",
        "issuedAt": "2026-07-15T09:30:00.250Z",
        "payload": {
            "leaseId": "urn:uuid:1b2c3d4e-5f60-4718-8293-a4b5c6d7e8f9",
            "note": "Parsed the three input files; the schema diff is done, tests next.",
            "progress": 0.6,
            "artifactHashes": ["sha256:" + "3f" * 32, "sha256:" + "a1" * 32],
        },
    }


def seed_of(n: int) -> bytes:
    return n.to_bytes(32, "big")


def build_registry(size: int) -> MemoryRegistry:
    """The signer's binding plus ``size - 1`` others; every tenth other one has a status record."""
    reg = MemoryRegistry(ORG)
    reg.register(KEY_ID, AGENT, ed25519.public_key(seed_of(1)), "2026-01-01T00:00:00Z")
    for i in range(2, size + 1):
        kid = f"urn:example:key:other-{i}"
        reg.register(
            kid,
            Principal("agent", f"urn:example:agent:other-{i}"),
            ed25519.public_key(seed_of(i)),
            "2026-01-01T00:00:00Z",
        )
        if i % 10 == 0:
            reg.record_status(kid, "2026-02-01T00:00:00Z", valid_until="2027-01-01T00:00:00Z")
    return reg


def per_second(fn: Callable[[], object], iterations: int) -> float:
    gc.collect()
    started = time.perf_counter()
    for _ in range(iterations):
        fn()
    return iterations / (time.perf_counter() - started)


def result(metric: str, value: float, digits: int, target: str | None = None, note: str = "") -> str:
    line = f"RESULT bench={BENCH} metric={metric} value={value:.{digits}f}"
    if target is not None:
        op, bound = target[:2], float(target[2:])
        ok = value >= bound if op == ">=" else value <= bound
        line += f" target{target} ok={'true' if ok else 'false'}"
    return line + (f" {note}" if note else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer iterations and repeats (well under a minute)")
    parser.add_argument("--repeat", type=int, help="interleaved runs per side (5; quick 3)")
    parser.add_argument("--iterations", type=int, help="calls per run (20,000; quick 3,000)")
    args = parser.parse_args(argv)
    repeat = args.repeat or (3 if args.quick else 5)
    iterations = args.iterations or (3_000 if args.quick else 20_000)
    load_before = os.getloadavg()[0]

    started = time.perf_counter()
    small = build_registry(10)
    small_seconds = time.perf_counter() - started
    started = time.perf_counter()
    large = build_registry(10_000)
    large_seconds = time.perf_counter() - started
    log(f"registries: 10 bindings in {small_seconds * 1000:.1f} ms, 10,000 in {large_seconds:.2f} s")

    signed = sign_document(typical_command(), key_id=KEY_ID, seed=seed_of(1))
    data = json.dumps(signed, separators=(",", ":"), ensure_ascii=False).encode()
    doc = strictjson.parse(data)
    message = jcs.signing_bytes(doc)
    signature = b64url_decode(signed["signature"]["value"])
    public_key = ed25519.public_key(seed_of(1))
    verify_key = nacl.signing.VerifyKey(public_key)
    assert verify_document(data, "command", small).signing_bytes == message
    assert verify_document(data, "command", large).signing_bytes == message
    signed_message = signature + message
    log(
        f"typical Command: {len(data)} bytes on the wire, {len(message)} signing bytes, key {b64url_encode(public_key)}"
    )

    sides: dict[str, Callable[[], object]] = {
        "baseline": lambda: sodium.crypto_sign_open(signed_message, public_key),
        "verifykey": lambda: verify_key.verify(message, signature),
        "full_10": lambda: verify_document(data, "command", small),
        "full_10000": lambda: verify_document(data, "command", large),
        "schema": lambda: schemas.validate("command", doc),
        "parse": lambda: strictjson.parse(data),
        "jcs": lambda: jcs.signing_bytes(doc),
        "ed25519": lambda: ed25519.verify(public_key, message, signature),
        "lookup_10000": lambda: large.resolve(KEY_ID),
    }
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(repeat):
        for name, fn in sides.items():
            rates[name].append(per_second(fn, iterations))
        log(
            f"run {r + 1}/{repeat}: "
            + ", ".join(f"{n} {rates[n][-1]:,.0f}/s" for n in ("baseline", "full_10", "full_10000", "schema"))
        )
    med = {name: statistics.median(values) for name, values in rates.items()}
    # The size ratio from per-run pairs (each pair measured back to back), then the median.
    size_ratio = statistics.median(a / b for a, b in zip(rates["full_10"], rates["full_10000"], strict=True))
    ratio = med["full_10"] / med["baseline"]

    print(f"{'measurement':<44} {'per second':>12} {'µs each':>9}")
    labels = {
        "baseline": "libsodium verify (crypto_sign_open), baseline",
        "verifykey": "PyNaCl VerifyKey.verify",
        "full_10": "verify_document, Registry of 10",
        "full_10000": "verify_document, Registry of 10,000",
        "schema": "schemas.validate('command')",
        "parse": "  stage 1: strictjson.parse",
        "jcs": "  stage 5: jcs.signing_bytes",
        "ed25519": "  stage 6: ed25519.verify",
        "lookup_10000": "  stage 4: resolve in 10,000",
    }
    for name, label in labels.items():
        print(f"{label:<44} {med[name]:>12,.0f} {1e6 / med[name]:>9.1f}")
    print(
        f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; {repeat} runs x {iterations:,} calls"
    )

    print(result("full_verification_ratio_vs_libsodium", ratio, 2, f">={TARGET_RATIO}"))
    print(result("schema_validations_per_second", med["schema"], 0, f">={TARGET_SCHEMA}"))
    print(result("registry_size_cost_ratio", size_ratio, 3, f"<={TARGET_SIZE}"))
    print(result("full_verifications_per_second", med["full_10"], 0))
    print(result("libsodium_verifications_per_second", med["baseline"], 0))
    print(result("full_verifications_per_second_10000_bindings", med["full_10000"], 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
