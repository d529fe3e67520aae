import pytest

from tests.conftest import AgentKey
from tests.workitems.flow import Flow


@pytest.fixture(autouse=True)
def _artifact_root(settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings.MWP_ARTIFACT_ROOT = str(tmp_path / "artifacts")


@pytest.fixture
def flow(mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey) -> Flow:
    return Flow(mission, owner, coordinator, worker, worker2)
