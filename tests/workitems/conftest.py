import uuid
from datetime import UTC, datetime, timedelta

import pytest

from mwportal.protocol.ids import urn
from tests.conftest import AgentKey, add_member
from tests.workitems.flow import MISSION_BUDGET, Flow, give_card, stamp


@pytest.fixture(autouse=True)
def _artifact_root(settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings.MWP_ARTIFACT_ROOT = str(tmp_path / "artifacts")


@pytest.fixture
def mission(owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey) -> dict[str, str]:
    """The Survey Mission (§7.1): Olivia owns it, Carl (with his Agent Card) holds its
    Coordinator lease, Wanda and Walt work in it, under a budget every flow contract fits in."""
    group_id, mission_id = str(uuid.uuid4()), str(uuid.uuid4())
    owner.send(
        "mission.create",
        group_id,
        {
            "missionId": urn(mission_id), "groupId": urn(group_id), "coordinatorId": give_card(coordinator).urn,
            "title": "Survey", "objective": "Summarise the survey", "budget": MISSION_BUDGET,
            "deadline": stamp(datetime.now(UTC) + timedelta(days=60)),
            "definitionOfDone": [
                {"criterionId": "done", "description": "the survey is summarised", "evidenceRequired": ["human_review"]}
            ],
        },
    )  # fmt: skip
    for member in (worker, worker2):
        add_member(owner, group_id, member, ["worker"])
    return {"group": group_id, "mission": mission_id}


@pytest.fixture
def flow(mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey) -> Flow:
    return Flow(mission, owner, coordinator, worker, worker2)
