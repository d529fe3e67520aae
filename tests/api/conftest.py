"""The REST suites' personas: the root ones, with the Coordinator holding an Agent Card (§6.1: a
Coordinator's lease pins its card, so ``mission.create`` names only a carded Agent)."""

from __future__ import annotations

import pytest

from missions.handlers.sessions import capability, issue_agent_card
from missions.models import AgentCard
from mwportal.protocol.ids import new_urn
from tests.conftest import AgentKey


@pytest.fixture
def coordinator(coordinator: AgentKey) -> AgentKey:
    if not AgentCard.objects.filter(agent_id=coordinator.id).exists():
        issue_agent_card(coordinator.id, [capability("mission.coordinate", "1.0.0", verified_evidence=[new_urn()])])
    return coordinator
