"""What a Worker still owes in a Group (PROTOCOL §8 step 4): a WorkItem it owns that is not finished, or an
open offer to it. A just-in-time Membership ends once there is none (``missions.handlers.memberships``)."""

from __future__ import annotations

import uuid

from missions.registry import obligation_checks

from . import state_machine as sm
from .models import Offer, WorkItem

# A WorkItem its owner is done with: verified, cancelled, or failed (a retry is a new offer).
RELEASED = (*sm.TERMINAL, sm.FAILED)


def has_obligations(agent_id: str, group_id: str) -> bool:
    owned = WorkItem.objects.filter(group_id=group_id, owner_id=uuid.UUID(agent_id)).exclude(state__in=RELEASED)
    offered = Offer.objects.filter(workitem__group_id=group_id, agent_id=agent_id, status="open")
    return owned.exists() or offered.exists()


obligation_checks.append(has_obligations)
