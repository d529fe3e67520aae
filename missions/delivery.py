"""After-commit notifications through the channel layer (DESIGN §3 step 7).

The layer only says "head moved" (or "your Membership changed", "your session
was replaced"); readers fetch Events from the database, so order and
completeness never depend on the layer, only latency does.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


def group_channel(group_id: str) -> str:
    return f"mwp.group.{group_id}"


def agent_channel(agent_id: str) -> str:
    return f"mwp.agent.{agent_id}"


def notify(channel_group: str, message: dict[str, Any]) -> None:
    """Send ``message`` to a channel group; best effort (see the module docstring)."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(channel_group, message)
    except Exception:  # a lost notice costs latency only; the periodic head check recovers it
        log.warning("could not notify the channel layer group %s", channel_group, exc_info=True)


def notify_head_moved(group_id: str, sequence: int) -> None:
    notify(group_channel(group_id), {"type": "group.head", "group": group_id, "sequence": sequence})


def membership_notice(
    group_id: str, agent_id: str, roles: list[str], epoch: int, active: bool
) -> tuple[str, dict[str, Any]]:
    return agent_channel(agent_id), {
        "type": "agent.membership",
        "group": group_id,
        "roles": roles,
        "membership_epoch": epoch,
        "active": active,
    }


def session_notice(agent_id: str, epoch: int) -> tuple[str, dict[str, Any]]:
    return agent_channel(agent_id), {"type": "agent.session", "session_epoch": epoch}
