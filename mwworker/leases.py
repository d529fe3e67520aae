"""Execution Leases (§11.3): taking one (``work.start``), renewing it before it ends
(``ext.missionweaveprotocol.core.work_execution_lease_renew``, yielding
``work.progressed``), and citing the current lease on every lease-bound Command
(``ownershipEpoch`` and ``executionLeaseId`` in the payload; MWP-WRK-013).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .commands import Commands
from .errors import LeaseLost, Refused
from .state import _Slot

log = logging.getLogger("mwworker")

RENEW = "ext.missionweaveprotocol.core.work_execution_lease_renew"

# Refusals that mean "this lease is not yours any more": the slot stops, no further lease-bound Command.
LEASE_GONE = frozenset({"WORK_LEASE_EXPIRED", "WORK_STALE_OWNERSHIP", "AUTH_STALE_SESSION", "INVALID_STATE_TRANSITION"})


# INVALID_STATE_TRANSITION also covers refusals that leave the lease standing
# (the Evidence or the dependencies are not there yet): not a lost lease.
LEASE_KEPT_REASONS = frozenset({"evidence_required", "dependency_unmet"})


def lease_gone(exc: Refused) -> bool:
    """The refusal says this Worker no longer holds the lease it used."""
    return exc.code in LEASE_GONE and exc.reason not in LEASE_KEPT_REASONS


def renew_delay(lease_seconds: float, *, fraction: float = 0.5, margin: float = 1.0) -> float:
    """Seconds after a grant at which to renew a lease of ``lease_seconds``:
    at ``fraction`` of it, and at least ``margin`` seconds before it ends."""
    return max(0.0, min(lease_seconds * fraction, lease_seconds - margin))


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Leases(Commands):
    """A slot's lease: start, the lease an Event grants, lease-bound Commands, renewal."""

    async def _start_lease(self, slot: _Slot) -> None:
        if not self._caught_up(slot.group):
            # The revision the caller knew may be older than the Group's head:
            # wait for it, then start from what the caught-up store says.
            if not await self._catch_up(slot.group, slot):
                raise Refused("WORK_LEASE_EXPIRED", f"{slot.workitem} stopped while its Group caught up", "stale_lease")
            row = await asyncio.to_thread(self.store.row, slot.group, slot.workitem)
            if (
                row is None or row.state != "queued" or row.owner != self.me
                or row.ownership_epoch != slot.ownership_epoch
            ):  # fmt: skip
                raise Refused("WORK_STALE_OWNERSHIP", f"{slot.workitem} is no longer this Worker's to start")
        payload = {"workItemId": slot.workitem, "ownershipEpoch": slot.ownership_epoch}
        event = await self._command("work.start", slot.group, payload, workitem=slot.workitem, owned=True)
        self._take_lease(slot, event)
        self.log.append(("started", slot.workitem, str(slot.lease_id)))

    def _take_lease(self, slot: _Slot, event: Mapping[str, Any]) -> None:
        """The Execution Lease a ``work.started`` or ``work.progressed`` grants (lease.schema.json)."""
        lease = event["payload"]["executionLease"]
        slot.lease = dict(lease)
        slot.lease_id = str(lease["leaseId"])
        slot.lease_expires_at = _instant(str(lease["expiresAt"]))
        granted = _instant(str(lease.get("lastRenewedAt") or lease["issuedAt"]))
        slot.lease_seconds = (slot.lease_expires_at - granted).total_seconds()
        if slot.ctx is not None:
            slot.ctx._rebind(slot.lease)

    def _leased(self, slot: _Slot, lease_id: str) -> dict[str, Any]:
        return {"workItemId": slot.workitem, "ownershipEpoch": slot.ownership_epoch, "executionLeaseId": lease_id}

    async def _lease_command(self, slot: _Slot, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        """A Command citing the slot's current Execution Lease (§11.3; MWP-WRK-013);
        ``LeaseLost`` when the Group Authority says the lease is not ours any more."""
        async with slot.lock:
            # Caught up first (issue 16 item 12): a revocation still in the
            # replay stops the slot here instead of earning a refusal.
            if not await self._catch_up(slot.group, slot) or slot.lease_id is None:
                raise LeaseLost("no current lease")
            body = {**self._leased(slot, slot.lease_id), **payload}
            try:
                return await self._command(kind, slot.group, body, workitem=slot.workitem, owned=True)
            except Refused as exc:
                if lease_gone(exc):
                    slot.lease_id = None
                    raise LeaseLost(f"{kind}: {exc.code}") from exc
                raise

    async def _renew_loop(self, slot: _Slot) -> None:
        """Renew before expiry; a refusal means the lease is gone: stop the slot."""
        while True:
            if slot.lease_id is None or slot.lease_seconds <= 0:
                await asyncio.sleep(0.05)
                continue
            lease = slot.lease_id
            await asyncio.sleep(renew_delay(slot.lease_seconds, fraction=self.renew_fraction))
            if slot.lease_id != lease:
                continue  # a checkpoint moved the slot to a new lease meanwhile
            async with slot.lock:
                if not await self._catch_up(slot.group, slot):
                    return  # stopped while its Group caught up (issue 16 item 12)
                if slot.lease_id != lease:
                    continue
                try:
                    event = await self._command(RENEW, slot.group, self._leased(slot, lease), workitem=slot.workitem,
                                                owned=True)  # fmt: skip
                except Refused as exc:
                    log.info("renewal of %s refused: %s", slot.workitem, exc)
                    self._stop_slot(slot, f"renewal refused: {exc.code}")
                    return
                self._take_lease(slot, event)
                slot.renewals += 1
                self.log.append(("renewed", slot.workitem, str(slot.renewals)))
            self._notify()
