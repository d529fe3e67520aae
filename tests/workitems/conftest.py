import json
from typing import Any

import pytest

from mwportal.protocol import ErrorCode, ProtocolError
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


@pytest.fixture
def rest(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Command the test's Principals send goes through the public REST binding
    (``POST /api/v0.1/commands``) as its signed document; a refusal is raised as the
    ProtocolError its normative error document names (§19)."""
    from tests.api.support import COMMANDS, http, post_json
    from tests.protocol.normative import normative_errors

    client = http()

    def over_rest(self: AgentKey, document: dict[str, Any]) -> dict[str, Any]:
        response = post_json(client, COMMANDS, document)
        body = json.loads(response.content)
        if response.status_code in (200, 201):
            return body  # type: ignore[no-any-return]
        assert normative_errors(body) == [], body
        raise ProtocolError(ErrorCode(body["code"]), body["message"], details=body.get("details"))

    monkeypatch.setattr(AgentKey, "send_document", over_rest)
