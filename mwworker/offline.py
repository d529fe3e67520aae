"""Bounded offline execution (§11.5; MWP-WRK-020..022): progress buffered with
its binding while the Group service is unreachable, reconciled first on reconnect.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mwportal.protocol.command import build_command, format_timestamp
from mwportal.protocol.ids import bare, new_urn

from .commands import Commands
from .context import utcnow
from .errors import LeaseLost, Refused
from .state import _Slot

log = logging.getLogger("mwworker")

# The critical extension of progress buffered while the Group service is
# unreachable, and how long after its lease the Worker may go on buffering
# (the Group Authority's MWP_OFFLINE_GRACE_SECONDS must be at least this).
OFFLINE_EXTENSION = "urn:missionweaveprotocol:extension:bounded-offline-execution"


OFFLINE_GRACE_SECONDS = 600.0


class Offline(Commands):
    """Buffering checkpoints offline and reconciling them after a reconnect."""

    def _offline_binding(self, slot: _Slot, usage: Mapping[str, int], now: datetime) -> dict[str, Any]:
        """The critical bounded-offline-execution binding of progress made now,
        while the Group service is unreachable; ``LeaseLost`` once the lease and
        its grace are over (no progress may be buffered then)."""
        if slot.lease_id is None or slot.lease_expires_at is None:
            raise LeaseLost("offline without a lease")
        grace_deadline = slot.lease_expires_at + self.offline_grace
        if now > grace_deadline:
            raise LeaseLost("offline past the lease's grace window")
        assert self.session_epoch is not None
        return {
            "critical": True, "agentId": self.me, "groupId": slot.group, "workItemId": slot.workitem,
            "executionSessionEpoch": self.session_epoch, "ownershipEpoch": slot.ownership_epoch,
            "executionLeaseId": slot.lease_id, "disconnectedAt": format_timestamp(self._disconnected_at or now),
            "bufferedAt": format_timestamp(now), "graceDeadline": format_timestamp(grace_deadline),
            "leaseExpiresAt": format_timestamp(slot.lease_expires_at), "usageDelta": dict(usage),
        }  # fmt: skip

    def _offline_document(self, payload: dict[str, Any], binding: dict[str, Any], action_id: str) -> dict[str, Any]:
        """The buffered ``work.checkpoint`` signed under the current Session Epoch."""
        meta = self.store.meta(str(binding["groupId"]))
        assert self.identity.key.principal is not None
        return build_command(
            "work.checkpoint", actor=self.identity.key.principal, key=self.identity.key, payload=payload,
            group=bare(binding["groupId"], "groupId"), session_epoch=self.session_epoch,
            membership_epoch=meta.my_membership_epoch if meta is not None else None,
            work_item_id=bare(binding["workItemId"], "workItemId"), action_id=bare(action_id, "actionId"),
            extensions={OFFLINE_EXTENSION: binding},
        )  # fmt: skip

    async def _buffer_checkpoint(self, slot: _Slot, payload: dict[str, Any]) -> None:
        """Persist a checkpoint made offline with its binding (MWP-WRK-021).
        The usage travels in the binding's delta, not in the payload."""
        usage = payload.pop("usageDelta", None) or {}
        binding = self._offline_binding(slot, usage, utcnow())
        document = self._offline_document(payload, binding, new_urn())
        await asyncio.to_thread(self.store.buffer_command, slot.group, slot.workitem, document, binding)
        self.log.append(("buffered", slot.workitem, slot.lease_id or ""))

    async def _reconcile(self) -> None:
        """Send every buffered Command, re-signed under the current session with
        its binding kept (MWP-WRK-021), before anything else; the Group
        Authority charges the offline usage and applies the checkpoint in one
        transaction (MWP-WRK-022). A refusal drops the Command (its progress
        is not authoritative); a lost connection keeps it."""
        buffered = await asyncio.to_thread(self.store.buffered_commands)
        for command_id, old, binding in buffered:
            document = self._offline_document(old["payload"], binding, str(old["actionId"]))
            try:
                await self._send(document)
                self.log.append(("reconciled", str(binding["workItemId"]), ""))
            except Refused as exc:
                if exc.code == "AUTH_STALE_SESSION":
                    return  # reconnecting under a new session; reconciled then
                if exc.code != "ACTION_ID_COLLISION":  # a collision: an earlier send was accepted
                    log.warning("buffered %s refused: %s", old["kind"], exc)
                    self.log.append(("reconcile.refused", str(binding["workItemId"]), exc.code))
            await asyncio.to_thread(self.store.drop_buffered_command, command_id)
        self._disconnected_at = None
        self._reconciled.set()
