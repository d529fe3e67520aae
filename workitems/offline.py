"""Bounded offline execution: reconciling progress a Worker buffered while the
Group service was unreachable (PROTOCOL §11.5).

A buffered ``work.checkpoint`` carries the critical extension
``urn:missionweaveprotocol:extension:bounded-offline-execution`` in its
envelope's ``extensions``, as the reference implementation writes it
(``{"version": "0.1.0", "critical": true, "data": {...}}``), ``data`` being::

    {"agentId", "groupId", "workItemId", "sessionEpoch", "ownershipEpoch",
     "executionLeaseId", "disconnectedAt", "bufferedAt", "graceDeadline",
     "executionLeaseExpiresAt", "resourceUsageDelta": {six dimensions}}

The Worker keeps the binding as it was when it buffered the Command and, on
reconnect, re-signs the Command under its current session (the envelope's
``sessionEpoch``, ``membershipEpoch`` and ``issuedAt`` are the reconciliation
session's; the binding's ``sessionEpoch`` is the historical one). The payload's
``executionLeaseId`` names the historical Execution Lease.

The Group Authority refuses the Command with INVALID_COMMAND (reason
``offline_binding_invalid``) when the progress was buffered outside the
historical lease and its grace window (``MWP_OFFLINE_GRACE_SECONDS`` after the
lease's expiry), after the lease was closed (released or revoked before the
buffer time), for an owner other than the current one, or for another WorkItem
than the Command's. A nonzero usage delta is charged in the same transaction,
with its own ``ext.missionweaveprotocol.core.resource_usage_recorded`` Event
naming both sessions, before the checkpoint applies; a budget overflow refuses
both.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from missions.authority import HandlerContext
from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.ids import bare
from mwportal.protocol.values import is_timestamp

from .contract import LIMITS
from .models import ExecutionLease, WorkItem
from .wire import moment, refuse

OFFLINE_EXTENSION = "urn:missionweaveprotocol:extension:bounded-offline-execution"
USAGE_RECORDED = "ext.missionweaveprotocol.core.resource_usage_recorded"

_IDS = ("agentId", "groupId", "workItemId", "executionLeaseId")
_EPOCHS = ("sessionEpoch", "ownershipEpoch")
_TIMES = ("disconnectedAt", "bufferedAt", "graceDeadline", "executionLeaseExpiresAt")
_MEMBERS = (*_IDS, *_EPOCHS, *_TIMES, "resourceUsageDelta")


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
    usage_delta: dict[str, int]
    raw: dict[str, Any]


def invalid(message: str, **details: Any) -> ProtocolError:
    return refuse(ErrorCode.INVALID_COMMAND, message, **details, reason="offline_binding_invalid")


def _schema(field: str, problem: str) -> ProtocolError:
    return refuse(ErrorCode.SCHEMA_VALIDATION_FAILED, f"{field}: {problem}", field=field)


def parse_binding(extensions: dict[str, Any]) -> OfflineBinding | None:
    """The binding of a buffered Command, or None for a live one; SCHEMA_VALIDATION_FAILED
    names the bad member (a JSON Pointer into the Command) of one that is not well formed."""
    if OFFLINE_EXTENSION not in extensions:
        return None
    prefix = f"/extensions/{OFFLINE_EXTENSION}"
    entry = extensions[OFFLINE_EXTENSION]
    if not isinstance(entry, dict):
        raise _schema(prefix, "must be an extension object")
    if entry.get("critical") is not True:
        raise _schema(f"{prefix}/critical", "the bounded-offline-execution binding is critical: must be true")
    data = entry.get("data")
    if not isinstance(data, dict):
        raise _schema(f"{prefix}/data", "must be the binding object")
    at = f"{prefix}/data"
    for name in sorted(set(data) - set(_MEMBERS)):
        raise _schema(f"{at}/{name}", "is not a member of the binding")
    for name in _MEMBERS:
        if name not in data:
            raise _schema(f"{at}/{name}", "is required")
    for name in _EPOCHS:
        if isinstance(data[name], bool) or not isinstance(data[name], int) or data[name] < 1:
            raise _schema(f"{at}/{name}", "must be a positive integer")
    for name in _TIMES:
        if not is_timestamp(data[name]):
            raise _schema(f"{at}/{name}", "must be an RFC 3339 timestamp")
    usage = data["resourceUsageDelta"]
    if not isinstance(usage, dict):
        raise _schema(f"{at}/resourceUsageDelta", "must be a usage object")
    for name, value in usage.items():
        if name not in LIMITS:
            raise _schema(f"{at}/resourceUsageDelta/{name}", f"is not a usage dimension ({', '.join(LIMITS)})")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _schema(f"{at}/resourceUsageDelta/{name}", "must be a non-negative integer")
    ids = {name: bare(data[name], f"{at}/{name}") for name in _IDS}
    return OfflineBinding(
        agent=ids["agentId"],
        group=ids["groupId"],
        workitem=ids["workItemId"],
        lease_id=ids["executionLeaseId"],
        session_epoch=data["sessionEpoch"],
        ownership_epoch=data["ownershipEpoch"],
        disconnected_at=moment(data["disconnectedAt"]),
        buffered_at=moment(data["bufferedAt"]),
        grace_deadline=moment(data["graceDeadline"]),
        lease_expires_at=moment(data["executionLeaseExpiresAt"]),
        usage_delta={k: v for k, v in usage.items() if v},
        raw=data,
    )


def check_binding(ctx: HandlerContext, item: WorkItem, binding: OfflineBinding) -> ExecutionLease:
    """The historical lease the buffered progress was made under, when the
    binding holds (§11.5); INVALID_COMMAND (offline_binding_invalid) otherwise."""
    if binding.agent != ctx.actor.id:
        raise invalid("the binding names another Agent than the actor")
    if binding.group != ctx.group.id or binding.workitem != str(item.id):
        raise invalid("the binding is for another Group or WorkItem than the Command's")
    if bare(ctx.payload["executionLeaseId"], "/payload/executionLeaseId") != binding.lease_id:
        raise invalid("the Command must name the binding's historical Execution Lease")
    if ctx.payload["ownershipEpoch"] != binding.ownership_epoch:
        raise invalid("the Command must carry the binding's Ownership Epoch")
    if (ctx.command.session_epoch or 0) < binding.session_epoch:
        raise invalid("the Command must be re-signed under the current session")
    # Locked after the WorkItem row, per the write path's lock order.
    lease = ExecutionLease.objects.select_for_update().filter(id=binding.lease_id, workitem=item).first()
    if lease is None or str(lease.agent_id) != ctx.actor.id:
        raise invalid("no such Execution Lease of this Agent on this WorkItem")
    if lease.session_epoch != binding.session_epoch or lease.ownership_epoch != binding.ownership_epoch:
        raise invalid("the binding's session or Ownership Epoch is not the historical lease's")
    if item.ownership_epoch != binding.ownership_epoch or str(item.owner_id) != ctx.actor.id:
        raise invalid(
            "the WorkItem has changed owner since the progress was buffered",
            currentOwnershipEpoch=item.ownership_epoch,
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
