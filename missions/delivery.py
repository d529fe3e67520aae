"""After-commit notifications that a Group head moved (DESIGN §3 step 7).

The channel layer only says "head moved"; readers fetch the Events from the
database, so order and completeness never depend on the layer.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


def group_channel(group_id: str) -> str:
    return f"mwp.group.{group_id}"


def notify_head_moved(group_id: str, sequence: int) -> None:
    """Tell subscribers of ``group_id`` that its head is now ``sequence``.

    Runs in ``transaction.on_commit``; a failure here loses only latency, never
    an Event, so it is logged and swallowed.
    """
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(
            group_channel(group_id), {"type": "group.head", "group": group_id, "sequence": sequence}
        )
    except Exception:  # the layer is best effort by design (see module docstring)
        log.warning("could not notify the channel layer for group %s", group_id, exc_info=True)
