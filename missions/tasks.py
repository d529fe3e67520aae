"""Celery tasks of the missions app: snapshot cadence (spec 16)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.db.models import Max

from .models import Group
from .snapshots import snapshot_now


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
