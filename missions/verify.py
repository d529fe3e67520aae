"""Recompute a Group's sequences and hash chain from the database rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mwportal.protocol import first_break

from .models import Group, GroupEvent


def _rows(group: Group, batch: int = 2000) -> Iterator[dict[str, Any]]:
    # Keyset pagination on (group, sequence): constant memory for any log.
    after = 0
    while True:
        page = list(GroupEvent.objects.filter(group=group, sequence__gt=after).order_by("sequence")[:batch])
        if not page:
            return
        for event in page:
            yield event.as_wire()
        after = page[-1].sequence


def verify_group_log(group: Group) -> tuple[int, tuple[int, str] | None]:
    """``(events_checked, first_break)``; ``first_break`` is ``(sequence, reason)``.

    Also checks that the Group head (``last_sequence``, ``head_hash``) names
    the last Event, so a deleted tail is caught too.
    """
    count = 0
    last_hash = None

    def counted() -> Iterator[dict[str, Any]]:
        nonlocal count, last_hash
        for event in _rows(group):
            count += 1
            last_hash = event["hash"]
            yield event

    broken = first_break(counted())
    if broken is not None:
        return count, broken
    if count != group.last_sequence:
        return count, (count + 1, f"the Group head is at {group.last_sequence} but the log ends at {count}")
    if count and last_hash != group.head_hash:
        return count, (count, "the Group head hash does not match the last Event")
    return count, None
