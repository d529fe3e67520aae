"""CURSOR_TOO_OLD on the socket, then restore and resume (PROTOCOL §16).

The snapshots themselves (their signature, cadence, archival, redaction)
are tested with the Group log (``tests/core``) and the REST page's 410
with the REST binding (``tests/api``); this is the socket's side.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from missions.api.groups import snapshot_artifact_hash
from missions.models import GroupSnapshot
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey
from tests.delivery.conftest import Client, Daphne, in_db_thread
from tests.delivery.test_agent_socket import churn, head
from tests.protocol.normative import require_bundle


@pytest.fixture
def small_window(settings: Any) -> None:
    settings.MWP_ONLINE_REPLAY_EVENTS = 5


@pytest.mark.django_db(transaction=True)
def test_socket_cursor_too_old_then_restore_and_resume_spec_16(
    small_window: None, daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    require_bundle()
    g = mission["group"]
    churn(owner, g, worker, 10)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], list[int]]:
        client = await Client.open(daphne, worker)
        sent = await client.subscribe(g, 0)
        error = await client.error()
        reference = error["details"]["snapshot"]
        await client.subscribe(g, reference["throughSequence"])
        # A live snapshot appends no Event (§15.2): it is at the head; later Events follow it.
        top = await in_db_thread(churn, owner, g, worker, 2)
        got = [e["sequence"] for e in await client.events(g, top)]
        await client.close()
        return sent, error, got

    sent, error, got = asyncio.run(scenario())
    assert (error["code"], error["groupId"], error["relatedFrameId"]) == ("CURSOR_TOO_OLD", urn(g), sent["frameId"])
    reference = error["details"]["snapshot"]
    snapshot = GroupSnapshot.objects.get(group_id=g, sequence=reference["throughSequence"])
    # The reference names the signed snapshot by its content address, as the REST page's does.
    content_hash = snapshot_artifact_hash(snapshot)
    assert error["snapshotArtifactHash"] == reference["snapshotArtifactHash"] == content_hash
    assert got == list(range(reference["throughSequence"] + 1, head(g) + 1))
