"""Celery tasks of the missions app: snapshot cadence (§16) and archival (§7.4)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db.models import Max

from mwportal.protocol import ProtocolError

from .models import Group, GroupEvent, GroupSnapshot, Mission
from .registry import group_archived_hooks
from .snapshots import FINISHED, archive_group, snapshot_now

log = logging.getLogger(__name__)


@shared_task(name="missions.snapshot_groups")
def snapshot_groups() -> int:
    """Snapshot every Group that moved ``MWP_SNAPSHOT_EVERY_EVENTS`` past its
    latest snapshot; returns how many snapshots were taken."""
    every = settings.MWP_SNAPSHOT_EVERY_EVENTS
    taken = 0
    groups = Group.objects.annotate(last_snapshot=Max("snapshots__sequence")).values_list(
        "id", "last_sequence", "last_snapshot"
    )
    for group_id, head, last in groups:
        if head - (last or 0) >= every:
            snapshot_now(str(group_id))
            taken += 1
    return taken


def retention_delay(policy: dict[str, Any]) -> timedelta:
    """The Organization's retention delay before archival: its policy's ``archive_after_seconds``, else the
    deployment's default ``MWP_ARCHIVE_AFTER_SECONDS``."""
    seconds = policy.get("archive_after_seconds", settings.MWP_ARCHIVE_AFTER_SECONDS)
    return timedelta(seconds=int(seconds))


def due_for_archival(now: datetime) -> list[tuple[str, dict[str, Any]]]:
    """``(group id, retention record)`` of every unarchived Group whose Mission is finished and whose last
    Event is older than its Organization's retention delay."""
    archived = GroupSnapshot.objects.filter(final=True).values_list("group_id", flat=True)
    rows = (
        Mission.objects.filter(status__in=FINISHED)
        .exclude(group_id__in=archived)
        .values_list("group_id", "organization__priority_policy")
    )
    due = []
    for group_id, policy in rows:
        delay = retention_delay(policy or {})
        last = GroupEvent.objects.filter(group_id=group_id).aggregate(at=Max("occurred_at"))["at"]
        if last is not None and now - last >= delay:
            retention = {"trigger": "retention", "archiveAfterSeconds": int(delay.total_seconds())}
            due.append((str(group_id), retention))
    return due


@shared_task(name="missions.archive_groups")
def archive_groups(now: datetime | None = None) -> int:
    """Archive every finished Mission's Group past its Organization's retention delay (§7.4);
    returns how many were archived. A Group that moved meanwhile is tried again at the next beat."""
    now = now or datetime.now(UTC)
    archived = 0
    for group_id, retention in due_for_archival(now):
        try:
            archive_group(group_id, retention=retention)
        except ProtocolError as exc:
            log.warning("archival of Group %s refused: %s %s", group_id, exc.code, exc.message)
            continue
        archived += 1
    # What follows archival (the encrypted audit archive) is idempotent: done again where it failed.
    for sealed in GroupSnapshot.objects.filter(final=True).values_list("group_id", flat=True):
        for hook in group_archived_hooks:
            try:
                hook(str(sealed))
            except Exception:
                log.exception("after archival of Group %s: %s failed", sealed, getattr(hook, "__name__", hook))
    return archived


@shared_task(name="missions.expire_coordinator_leases")
def expire_coordinator_leases() -> int:
    """The beat (``CELERY_BEAT_SCHEDULE``): record every current Coordinator lease that ran out unrenewed
    (§7.2) as the control plane's Command, once per (Mission, Coordinator Epoch): the Command's action ID
    is derived from both. Returns how many were recorded."""
    from django.utils import timezone

    from .authority import accept, system_action_id
    from .commands import service_command
    from .handlers.coordinator import EXPIRE, EXPIRED, NON_TERMINAL

    now = timezone.now()
    recorded = 0
    due = Mission.objects.filter(status__in=NON_TERMINAL, coordinator_lease_expires_at__lte=now)
    for mission in due.select_related("group"):
        epoch = mission.coordinator_epoch
        if GroupEvent.objects.filter(group_id=mission.group_id, type=EXPIRED, body__coordinatorEpoch=epoch).exists():
            continue
        command = service_command(
            EXPIRE, str(mission.group_id), {"coordinatorEpoch": epoch},
            organization_id=str(mission.organization_id), expected_revision=mission.group.revision,
            action_id=system_action_id("coordinator-lease-expired", mission.id, epoch),
        )  # fmt: skip
        try:
            accept(command, now=now)
        except ProtocolError:
            continue  # renewed or replaced meanwhile: the next beat looks again
        recorded += 1
    return recorded
