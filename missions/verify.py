"""Recompute a Group's sequences and hash chain from the database rows (``mwp verify-log``).

Each stored Event keeps its signed document as the JCS text the Group
Authority signed (``GroupEvent.document``), and the chain links the documents:
``hash = sha256(prev_hash || JCS(document))``, the first Event chaining from
``GENESIS_HASH``. A row changed behind the append-only trigger's back (its
document, its link, a deleted row or tail) breaks the chain at its sequence,
and so does a column that no longer says what the document says.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

from mwportal.protocol import GENESIS_HASH

from .models import Group, GroupEvent

Row = tuple[int, str, str, str, str, object]  # sequence, document, prev_hash, hash, type, body


def _rows(group: Group, batch: int = 2000) -> Iterator[Row]:
    # Keyset pagination on (group, sequence): constant memory for any log.
    after = 0
    while True:
        page = list(
            GroupEvent.objects.filter(group=group, sequence__gt=after)
            .order_by("sequence")
            .values_list("sequence", "document", "prev_hash", "hash", "type", "body")[:batch]
        )
        if not page:
            return
        yield from page
        after = page[-1][0]


def verify_group_log(group: Group) -> tuple[int, tuple[int, str] | None]:
    """``(events_checked, first_break)``; ``first_break`` is ``(sequence, reason)``.

    Also checks that the Group head (``last_sequence``, ``head_hash``) names
    the last Event, so a deleted tail is caught too.
    """
    count, prev = 0, GENESIS_HASH
    for sequence, document, prev_hash, link, kind, body in _rows(group):
        expected = count + 1
        if sequence != expected:
            return count, (expected, f"expected sequence {expected}, found {sequence}")
        if prev_hash != prev:
            return count, (expected, "prev_hash does not match the previous Event's hash")
        if hashlib.sha256(prev.encode("ascii") + document.encode("utf-8")).hexdigest() != link:
            return count, (expected, "hash does not match the Event's signed document")
        signed = json.loads(document)
        if (signed.get("sequence"), signed.get("kind"), signed.get("payload")) != (sequence, kind, body):
            # The columns index the document; a handler reading them must read what was signed.
            return count, (expected, "the row's columns do not match its signed document")
        count, prev = expected, link
    if count != group.last_sequence:
        return count, (count + 1, f"the Group head is at {group.last_sequence} but the log ends at {count}")
    if count and prev != group.head_hash:
        return count, (count, "the Group head hash does not match the last Event")
    return count, None
