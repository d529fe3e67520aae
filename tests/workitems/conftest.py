import pytest

from tests.conftest import AgentKey
from tests.workitems.flow import Flow, survey_mission


@pytest.fixture(autouse=True)
def _artifact_root(settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings.MWP_ARTIFACT_ROOT = str(tmp_path / "artifacts")


@pytest.fixture
def mission(owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey) -> dict[str, str]:
    """The Survey Mission (§7.1): Olivia owns it, Carl (with his Agent Card) holds its
    Coordinator lease, Wanda and Walt work in it, under a budget every flow contract fits in."""
    return survey_mission(owner, coordinator, [worker, worker2])


@pytest.fixture
def flow(mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey) -> Flow:
    return Flow(mission, owner, coordinator, worker, worker2)
