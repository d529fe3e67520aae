"""Bounded offline execution (spec 11.5; MWP-WRK-020..022): progress buffered with
its binding while the Group service is unreachable, reconciled first on reconnect.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mwportal.protocol import format_time, make_envelope

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

    def _offline_binding(self, slot: _Slot, usage: Mapping[str, float], now: datetime) -> dict[str, Any]:
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
            "critical": True, "agent": self.me, "group": slot.group, "workitem": slot.workitem,
            "session_epoch": self.session_epoch, "ownership_epoch": slot.ownership_epoch, "lease_id": slot.lease_id,
            "disconnected_at": format_time(self._disconnected_at or now), "buffered_at": format_time(now),
            "grace_deadline": format_time(grace_deadline), "lease_expires_at": format_time(slot.lease_expires_at),
            "usage_delta": dict(usage),
        }  # fmt: skip

    async def _buffer_checkpoint(self, slot: _Slot, body: dict[str, Any]) -> None:
        """Persist a checkpoint made offline with its binding (MWP-WRK-021).
        The usage travels in the binding's delta, not in the body."""
        usage = body.pop("usage", None) or {}
        binding = self._offline_binding(slot, usage, utcnow())
        assert self.session_epoch is not None
        envelope = make_envelope(
            type="work.checkpoint", actor=self.me, group=slot.group, body=body, session_epoch=self.session_epoch,
            private_key=self.identity.private_key, target={"kind": "workitem", "id": slot.workitem},
            ownership_epoch=slot.ownership_epoch, lease_id=slot.lease_id, extensions={OFFLINE_EXTENSION: binding},
        )  # fmt: skip
        await asyncio.to_thread(self.store.buffer_command, slot.group, slot.workitem, envelope, binding)
        self.log.append(("buffered", slot.workitem, slot.lease_id or ""))

    async def _reconcile(self) -> None:
        """Send every buffered Command, rebased and re-signed under the current
        session with its binding kept (MWP-WRK-021), before anything else; the
        Group Authority charges the offline usage and applies the checkpoint
        in one transaction (MWP-WRK-022). A refusal drops the Command (its
        progress is not authoritative); a lost connection keeps it."""
        buffered = await asyncio.to_thread(self.store.buffered_commands)
        for command_id, old, _binding in buffered:
            assert self.session_epoch is not None
            envelope = self._resigned(old, session_epoch=self.session_epoch)
            try:
                await self._send(envelope)
                self.log.append(("reconciled", str(old["target"]["id"]), ""))
            except Refused as exc:
                if exc.code == "AUTH_STALE_SESSION":
                    return  # reconnecting under a new session; reconciled then
                if exc.code != "ACTION_ID_COLLISION":  # a collision: an earlier send was accepted
                    log.warning("buffered %s refused: %s", old["type"], exc)
                    self.log.append(("reconcile.refused", str(old["target"]["id"]), exc.code))
            await asyncio.to_thread(self.store.drop_buffered_command, command_id)
        self._disconnected_at = None
        self._reconciled.set()
