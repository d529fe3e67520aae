"""Bounded offline execution: reconciling progress a Worker buffered while the
Group service was unreachable (spec 11.5; MWP-WRK-021, MWP-WRK-022).

A buffered ``work.checkpoint`` carries the critical extension
``urn:missionweaveprotocol:extension:bounded-offline-execution``::

    {"critical": true, "agent", "group", "workitem", "session_epoch",
     "ownership_epoch", "lease_id", "disconnected_at", "buffered_at",
     "grace_deadline", "lease_expires_at", "usage_delta": {six dimensions}}

The Worker keeps the binding as it was when it buffered the Command and, on
reconnect, re-signs the Command under its current session (``session_epoch``,
``membership_epoch``, ``issued_at`` of the envelope are the reconciliation
session's; the binding's ``session_epoch`` is the historical one). The
envelope's ``lease_id`` names the historical Execution Lease.

The Group Authority refuses the Command with INVALID_COMMAND (offline_binding_invalid) when the
progress was buffered outside the historical lease and its grace window
(``MWP_OFFLINE_GRACE_SECONDS`` after the lease's expiry), after the lease was
closed (released or revoked before the buffer time), for an owner other than
the current one, or for another WorkItem than the Command's target. A nonzero
usage delta is charged in the same transaction, with its own
``ext.missionweaveprotocol.core.resource_usage_recorded`` Event naming both
sessions, before the checkpoint applies; a budget overflow refuses both.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from missions.authority import HandlerContext
from missions.guards import check_object, refuse
from mwportal.protocol import ErrorCode, ProtocolError, malformed, parse_time, parse_uuid

from .guards import check_usage
from .models import ExecutionLease, WorkItem

OFFLINE_EXTENSION = "urn:missionweaveprotocol:extension:bounded-offline-execution"
USAGE_RECORDED = "ext.missionweaveprotocol.core.resource_usage_recorded"

_FIELDS = (
    "critical", "agent", "group", "workitem", "session_epoch", "ownership_epoch", "lease_id",
    "disconnected_at", "buffered_at", "grace_deadline", "lease_expires_at", "usage_delta",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class OfflineBinding:
    agent: str
    group: str
    workitem: str
    session_epoch: int
    ownership_epoch: int
    lease_id: str
    disconnected_at: datetime
    buffered_at: datetime
    grace_deadline: datetime
    lease_expires_at: datetime
    usage_delta: dict[str, float]

    def historical(self) -> dict[str, Any]:
        """The execution session the progress was made in."""
        return {"session_epoch": self.session_epoch, "lease_id": self.lease_id, "ownership_epoch": self.ownership_epoch}


def invalid(message: str, **details: Any) -> ProtocolError:
    return refuse(ErrorCode.INVALID_COMMAND, message, **details, reason="offline_binding_invalid")


def parse_binding(extensions: dict[str, Any]) -> OfflineBinding | None:
    """The binding of a buffered Command, or None for a live one; SCHEMA_VALIDATION_FAILED
    names the bad member of a binding that is not well formed."""
    if OFFLINE_EXTENSION not in extensions:
        return None
    prefix = f"extensions.{OFFLINE_EXTENSION}"
    raw = check_object(extensions[OFFLINE_EXTENSION], _FIELDS, field=prefix)
    if raw["critical"] is not True:
        raise malformed(f"{prefix}.critical", "the bounded-offline-execution binding is critical: must be true")
    for name in ("session_epoch", "ownership_epoch"):
        if isinstance(raw[name], bool) or not isinstance(raw[name], int) or raw[name] < 0:
            raise malformed(f"{prefix}.{name}", "must be a non-negative integer")

    def when(name: str) -> datetime:
        return parse_time(raw[name], f"{prefix}.{name}")

    return OfflineBinding(
        agent=parse_uuid(raw["agent"], f"{prefix}.agent"),
        group=parse_uuid(raw["group"], f"{prefix}.group"),
        workitem=parse_uuid(raw["workitem"], f"{prefix}.workitem"),
        lease_id=parse_uuid(raw["lease_id"], f"{prefix}.lease_id"),
        session_epoch=raw["session_epoch"],
        ownership_epoch=raw["ownership_epoch"],
        disconnected_at=when("disconnected_at"),
        buffered_at=when("buffered_at"),
        grace_deadline=when("grace_deadline"),
        lease_expires_at=when("lease_expires_at"),
        usage_delta=check_usage(raw["usage_delta"], f"{prefix}.usage_delta"),
    )


def check_binding(ctx: HandlerContext, item: WorkItem, binding: OfflineBinding) -> ExecutionLease:
    """The historical lease the buffered progress was made under, when the
    binding holds (MWP-WRK-021); INVALID_COMMAND (offline_binding_invalid) otherwise."""
    env = ctx.envelope
    if binding.agent != ctx.actor.id:
        raise invalid("the binding names another Agent than the actor")
    if binding.group != ctx.group.id or binding.workitem != str(item.id):
        raise invalid("the binding is for another Group or WorkItem than the Command's target")
    if env.lease_id != binding.lease_id:
        raise invalid("the Command must name the binding's historical Execution Lease")
    if env.session_epoch < binding.session_epoch:
        raise invalid("the Command must be re-signed under the current session")
    # Locked after the WorkItem row, per the write path's lock order.
    lease = ExecutionLease.objects.select_for_update().filter(id=binding.lease_id, workitem=item).first()
    if lease is None or str(lease.agent_id) != ctx.actor.id:
        raise invalid(f"no Execution Lease {binding.lease_id} of this Agent on this WorkItem")
    if lease.session_epoch != binding.session_epoch or lease.ownership_epoch != binding.ownership_epoch:
        raise invalid("the binding's session or Ownership Epoch is not the historical lease's")
    if item.ownership_epoch != binding.ownership_epoch or str(item.owner_id) != ctx.actor.id:
        raise invalid(
            "the WorkItem has changed owner since the progress was buffered",
            current_ownership_epoch=item.ownership_epoch,
        )
    grace = timedelta(seconds=settings.MWP_OFFLINE_GRACE_SECONDS)
    if binding.lease_expires_at > lease.expires_at:
        raise invalid("the binding's lease expiry is later than the lease's")
    if binding.grace_deadline > lease.expires_at + grace:
        raise invalid("the binding's grace deadline is beyond the lease's grace window")
    if not lease.started_at <= binding.disconnected_at <= binding.buffered_at <= binding.grace_deadline:
        raise invalid("the progress was buffered outside the historical lease and its grace window")
    if binding.buffered_at > ctx.now:
        raise invalid("the progress is dated in the future")
    if lease.status in ("released", "revoked") and lease.ended_at is not None and binding.buffered_at >= lease.ended_at:
        raise invalid(f"the lease was {lease.status} before the progress was buffered")
    return lease
