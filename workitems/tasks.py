"""Expiry by Celery beat (spec 11.3, 11.5).

Each task finds what is past its time with a read-only query, then issues one
system Command per WorkItem through ``accept()``. Action IDs and ``issued_at``
derive from the expired thing itself (lease ID and its expiry, Ownership Epoch
and its deadline), so a task that runs twice, or two beat processes racing,
append each Event once: the second acceptance is a replayed receipt.

Offer expiry needs no task: it appends no Event, and an acceptance after it is
WORK_OFFER_EXPIRED.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.utils import timezone

from missions.authority import accept, system_action_id
from missions.commands import system_command
from mwportal.protocol import ProtocolError

from .models import ExecutionLease, WorkItem

log = logging.getLogger(__name__)
BATCH = 500


def _issue(type_: str, group_id: Any, body: dict[str, Any], key: tuple[Any, ...], issued_at: Any) -> bool:
    """Accept one system Command; False when it was refused (the thing moved on)."""
    command = system_command(type_, str(group_id), body, action_id=system_action_id(type_, *key), issued_at=issued_at)
    try:
        receipt = accept(command)
    except ProtocolError as exc:
        log.info("%s for %s skipped: %s", type_, body.get("workitem"), exc)
        return False
    return not receipt["replayed"]


@shared_task(name="workitems.expire_leases")
def expire_leases() -> int:
    """Expire Execution Leases past their expiry; returns how many were expired now."""
    now = timezone.now()
    due = ExecutionLease.objects.filter(status="active", expires_at__lte=now).select_related("workitem")[:BATCH]
    return sum(
        _issue("work.expire_lease", lease.workitem.group_id,
               {"workitem": str(lease.workitem_id), "ownership_epoch": lease.ownership_epoch,
                "lease_id": str(lease.id)},
               (lease.id, lease.expires_at.isoformat()), lease.expires_at)
        for lease in due
    )  # fmt: skip


def _fence_lapsed(state: str, type_: str) -> int:
    """Issue ``type_`` for every ``state`` WorkItem whose owner's lease (start-by
    or blocked lease) has run out."""
    now = timezone.now()
    due = WorkItem.objects.filter(state=state, owner__isnull=False, owner_expires_at__lt=now)[:BATCH]
    return sum(
        _issue(type_, item.group_id, {"workitem": str(item.id), "ownership_epoch": item.ownership_epoch},
               (item.id, item.ownership_epoch, item.owner_expires_at.isoformat()), item.owner_expires_at)
        for item in due if item.owner_expires_at is not None
    )  # fmt: skip


@shared_task(name="workitems.expire_start_by")
def expire_start_by() -> int:
    """Fence owners of queued WorkItems whose start-by deadline passed."""
    return _fence_lapsed("queued", "work.expire_start_by")


@shared_task(name="workitems.expire_blocked_leases")
def expire_blocked_leases() -> int:
    """End the bounded blocked lease of blocked WorkItems past it."""
    return _fence_lapsed("blocked", "work.expire_blocked_lease")
