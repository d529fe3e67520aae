"""The per-Group hash chain (DESIGN §3 step 6).

``hash = sha256(prev_hash || canonical(event without "hash"))``, hex encoded;
the first Event of a Group chains from ``GENESIS_HASH``. Anyone holding the
Events can recompute the chain without a database (``verify_chain``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from .canonical import canonicalize

GENESIS_HASH = "0" * 64


def event_hash(prev_hash: str, event: dict[str, Any]) -> str:
    content = {k: v for k, v in event.items() if k != "hash"}
    return hashlib.sha256(prev_hash.encode("ascii") + canonicalize(content)).hexdigest()


def first_break(
    events: Iterable[dict[str, Any]], *, start_sequence: int = 1, start_hash: str = GENESIS_HASH
) -> tuple[int, str] | None:
    """The first ``(sequence, reason)`` where the chain breaks, else ``None``.

    Checks that sequences run ``start_sequence, start_sequence + 1, ...`` with
    no gap or duplicate, that each ``prev_hash`` names the previous hash, and
    that each ``hash`` is recomputed exactly.
    """
    expected_seq = start_sequence
    prev = start_hash
    for event in events:
        seq = event.get("sequence")
        if seq != expected_seq:
            return (expected_seq, f"expected sequence {expected_seq}, found {seq}")
        if event.get("prev_hash") != prev:
            return (expected_seq, "prev_hash does not match the previous event's hash")
        recomputed = event_hash(prev, event)
        if event.get("hash") != recomputed:
            return (expected_seq, "hash does not match the event's content")
        prev = recomputed
        expected_seq += 1
    return None
