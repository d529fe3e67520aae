"""Expiry by Celery beat (PROTOCOL §11.3, §11.5).

Each task finds what is past its time with a read-only query, then issues one
``ext.mwportal.work.lease_expire`` Command per lease, by the Organization's
control-plane service Principal (``missions.commands.service_command``,
``Auth.SERVICE``), through ``accept()``. Action IDs and ``issuedAt`` derive from
the expired thing itself (the lease and its expiry, the Ownership Epoch and its
deadline), so a task that runs twice, or two beat processes racing, append each
Event once: the second acceptance is a replayed receipt.

Offer expiry needs no task: it appends no Event (§10.2), and an acceptance
after it is WORK_OFFER_EXPIRED.

Automatic retries (§11.4) are a sweep too: a failed attempt left the WorkItem
``failed`` (or ``active`` without a lease, after a lease timeout) with a
scheduled retry; once the contract's backoff has passed, the control plane
issues the retry policy's ``work.offer`` (a §10.2 row) to the Worker whose
attempt failed, which accepts it as any offer.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from celery import shared_task
from django.db.models import Q
from django.utils import timezone

from missions.authority import accept, system_action_id
from missions.commands import service_command
from mwportal.protocol import ProtocolError
from mwportal.protocol.ids import urn

from .handlers.common import last_holder, seconds
from .handlers.expiry import LEASE_EXPIRE
from .models import ExecutionLease, WorkItem

log = logging.getLogger(__name__)
BATCH = 500


def issue_expiry(item: WorkItem, lease_type: str, lease_id: str | None, key: tuple[Any, ...], due: datetime) -> bool:
    """Accept one expiry Command; False when it was refused (the thing moved on) or replayed."""
    payload: dict[str, Any] = {
        "workItemId": urn(item.id),
        "ownershipEpoch": item.ownership_epoch,
        "leaseType": lease_type,
    }
    if lease_id is not None:
        payload["leaseId"] = urn(lease_id)
    command = service_command(
        LEASE_EXPIRE,
        str(item.group_id),
        payload,
        organization_id=str(item.group.organization_id),
        action_id=system_action_id(LEASE_EXPIRE, lease_type, *key),
        issued_at=due,
        work_item_id=str(item.id),
    )
    try:
        receipt = accept(command)
    except ProtocolError as exc:
        log.info("%s of %s (%s) skipped: %s", LEASE_EXPIRE, item.id, lease_type, exc)
        return False
    return not receipt["replayed"]


@shared_task(name="workitems.expire_leases")
def expire_leases() -> int:
    """Expire Execution Leases past their expiry; returns how many were expired now."""
    now = timezone.now()
    due = ExecutionLease.objects.filter(status="active", expires_at__lte=now).select_related(
        "workitem", "workitem__group"
    )[:BATCH]
    return sum(
        issue_expiry(
            lease.workitem, "execution", str(lease.id), (lease.id, lease.expires_at.isoformat()), lease.expires_at
        )
        for lease in due
    )


def _fence_lapsed(state: str, lease_type: str) -> int:
    """Expire the ownership lease (start-by) or blocked lease of every ``state``
    WorkItem whose owner's deadline has passed."""
    now = timezone.now()
    due = WorkItem.objects.filter(state=state, owner__isnull=False, owner_expires_at__lt=now).select_related("group")[
        :BATCH
    ]
    return sum(
        issue_expiry(
            item,
            lease_type,
            None,
            (item.id, item.ownership_epoch, item.owner_expires_at.isoformat()),
            item.owner_expires_at,
        )
        for item in due
        if item.owner_expires_at is not None
    )


@shared_task(name="workitems.expire_start_by")
def expire_start_by() -> int:
    """Fence owners of queued WorkItems whose start-by deadline passed."""
    return _fence_lapsed("queued", "ownership")


@shared_task(name="workitems.expire_blocked_leases")
def expire_blocked_leases() -> int:
    """End the bounded blocked lease of blocked WorkItems past it."""
    return _fence_lapsed("blocked", "blocked")


# The rule a retry offer cites in its selection basis (§10.3: applied policy rules).
RETRY_RULE = "retryPolicy"


def issue_retry_offer(item: WorkItem) -> bool:
    """Accept the retry policy's ``work.offer`` of one failed WorkItem; False when
    refused (the WorkItem moved on, the policy is spent) or replayed."""
    holder = last_holder(item)
    if holder is None or item.retry_not_before is None or item.selection_basis is None:
        return False
    basis = dict(item.selection_basis)
    basis["policyRulesApplied"] = sorted({*basis.get("policyRulesApplied", []), RETRY_RULE})
    payload = {
        "workItemId": urn(item.id),
        "candidateAgentIds": [urn(holder)],
        "selectionBasis": basis,
        "offerExpiresInSeconds": int(seconds("MWP_START_BY_SECONDS").total_seconds()),
    }
    command = service_command(
        "work.offer",
        str(item.group_id),
        payload,
        organization_id=str(item.group.organization_id),
        # One re-offer per failed attempt: a sweep that runs twice is replayed.
        action_id=system_action_id("retry-offer", item.id, item.attempt, item.retry_not_before.isoformat()),
        issued_at=item.retry_not_before,
        expected_revision=item.revision,
        work_item_id=str(item.id),
    )
    try:
        receipt = accept(command)
    except ProtocolError as exc:
        log.info("retry offer of %s skipped: %s", item.id, exc)
        return False
    return not receipt["replayed"]


@shared_task(name="workitems.retry_failed")
def retry_failed() -> int:
    """Re-offer the WorkItems whose retry the policy scheduled and whose backoff has
    passed (failed ones, and active ones whose lease timed out and whose owner's
    grace ran out); returns how many were offered now."""
    now = timezone.now()
    failed = Q(state="failed")
    # An active WorkItem whose Execution Lease timed out, once its owner's grace ran out.
    lapsed = Q(state="active") & ~Q(leases__status="active") & (Q(owner__isnull=True) | Q(owner_expires_at__lte=now))
    due = (
        WorkItem.objects.filter(failed | lapsed, needs_new_attempt=True, retry_not_before__lte=now)
        .distinct()
        .select_related("group")[:BATCH]
    )
    return sum(issue_retry_offer(item) for item in due)
