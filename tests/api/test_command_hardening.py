"""``POST /api/v0.1/commands`` keeps issue 16's hardening on the new wire (§6.4, §15.1, §19):

- a replay is verified before its stored receipt is returned: a copy of a known Command re-signed with
  another key, or with its signature mangled, is 401 AUTH_INVALID_SIGNATURE, never the receipt;
- a new Command's ``issuedAt`` lies within ``MWP_COMMAND_FRESHNESS_SECONDS`` either way (reason
  ``stale``/``ahead``), while an unchanged retry of an accepted one keeps its receipt after the window;
- the control plane's own kinds (a Session Epoch, "this Group holds these bytes") are refused from a
  signed client with AUTH_FORBIDDEN: a session comes only from the HELLO, bytes only by sending them.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings

from missions.models import Agent, GroupEvent
from mwportal.protocol.command import Key
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import sign_document
from tests.api.support import COMMANDS, error_of, http, nothing_written, post_json, show
from tests.api.test_commands import create_mission
from tests.conftest import AgentKey

FRESHNESS = settings.MWP_COMMAND_FRESHNESS_SECONDS
SKEW = settings.MWP_COMMAND_MAX_SKEW_SECONDS


def resigned(document: dict[str, Any], key: Key) -> dict[str, Any]:
    """The same content signed by ``key`` under the document's own key ID."""
    return sign_document(document, key_id=document["signature"]["keyId"], seed=key.seed, profile="command")


def test_a_known_command_resigned_with_another_key_is_401_not_its_receipt_spec_6_4(
    owner: AgentKey, coordinator: AgentKey, outsider: AgentKey
) -> None:
    genuine = create_mission(owner, coordinator)
    first = post_json(http(), COMMANDS, genuine)
    assert first.status_code == 201, show(first)
    for forger in (outsider.key, Key.generate()):
        forged = resigned(genuine, forger)
        assert forged["signature"] != genuine["signature"]
        with nothing_written():
            response = post_json(http(), COMMANDS, forged)
        error_of(response, 401, "AUTH_INVALID_SIGNATURE")
        assert "events" not in response.json()
    again = post_json(http(), COMMANDS, genuine)
    assert again.status_code == 200 and again.json() == {**first.json(), "replayed": True}, show(again)


@pytest.mark.parametrize("change", ["mangled", "removed", "other-key-id"])
def test_a_known_command_with_its_signature_changed_is_refused(
    owner: AgentKey, coordinator: AgentKey, outsider: AgentKey, change: str
) -> None:
    genuine = create_mission(owner, coordinator)
    assert post_json(http(), COMMANDS, genuine).status_code == 201
    signature = dict(genuine["signature"])
    if change == "mangled":
        signature["value"] = signature["value"][:-4] + ("AAAA" if not signature["value"].endswith("AAAA") else "BBBB")
        document = {**genuine, "signature": signature}
    elif change == "removed":
        document = {k: v for k, v in genuine.items() if k != "signature"}
    else:
        document = {**genuine, "signature": {**signature, "keyId": outsider.key.key_id}}
    with nothing_written():
        response = post_json(http(), COMMANDS, document)
    assert response.status_code in (400, 401), show(response)
    error_of(response, response.status_code, response.json()["code"])
    assert "replayed" not in response.json()


@pytest.mark.parametrize(
    "issued_at", [datetime(2001, 1, 1, tzinfo=UTC), datetime(2999, 1, 1, tzinfo=UTC)], ids=["2001", "2999"]
)
def test_a_command_issued_far_outside_the_window_is_401_spec_19(
    owner: AgentKey, coordinator: AgentKey, issued_at: datetime
) -> None:
    with nothing_written():
        response = post_json(http(), COMMANDS, create_mission(owner, coordinator, issued_at=issued_at))
        error = error_of(response, 401, "AUTH_INVALID_SIGNATURE")
    # 2001 predates the key's validFrom as well (§6.4 stage 4 refuses it first); 2999 is ahead.
    if issued_at.year == 2999:
        assert error["details"] == {"field": "issuedAt", "reason": "ahead"}, error


@pytest.mark.parametrize(
    ("offset", "accepted"),
    [(-(FRESHNESS - 60), True), (-(FRESHNESS + 60), False), (SKEW - 60, True), (SKEW + 60, False), (0, True)],
    ids=["old-within", "too-old", "ahead-within", "too-far-ahead", "now"],
)
def test_the_freshness_window_is_exact_spec_19(
    owner: AgentKey, coordinator: AgentKey, offset: int, accepted: bool
) -> None:
    # The key is valid from its registration, moments ago: an old Command is
    # one signed now and read by a server whose clock is ahead; one from the
    # future is signed ahead of the server's clock.
    if offset < 0:
        document = create_mission(owner, coordinator)
        with time_machine.travel(datetime.now(UTC) - timedelta(seconds=offset), tick=False):
            response = post_json(http(), COMMANDS, document)
    else:
        document = create_mission(owner, coordinator, issued_at=datetime.now(UTC) + timedelta(seconds=offset))
        response = post_json(http(), COMMANDS, document)
    if accepted:
        assert response.status_code == 201, show(response)
    else:
        error = error_of(response, 401, "AUTH_INVALID_SIGNATURE")
        assert error["details"] == {"field": "issuedAt", "reason": "stale" if offset < 0 else "ahead"}, error
        assert not GroupEvent.objects.filter(group_id=document["groupId"].removeprefix("urn:uuid:")).exists()


def test_an_unchanged_retry_after_the_window_keeps_its_receipt_but_a_forgery_does_not_spec_19(
    owner: AgentKey, coordinator: AgentKey, outsider: AgentKey
) -> None:
    genuine = create_mission(owner, coordinator)
    first = post_json(http(), COMMANDS, genuine)
    assert first.status_code == 201, show(first)
    with time_machine.travel(datetime.now(UTC) + timedelta(seconds=FRESHNESS * 4), tick=False):
        again = post_json(http(), COMMANDS, genuine)
        assert again.status_code == 200 and again.json()["replayed"] is True, show(again)
        error_of(post_json(http(), COMMANDS, resigned(genuine, outsider.key)), 401, "AUTH_INVALID_SIGNATURE")
        old = datetime.fromisoformat(genuine["issuedAt"].replace("Z", "+00:00"))
        stale = create_mission(owner, coordinator, issued_at=old)
        error_of(post_json(http(), COMMANDS, stale), 401, "AUTH_INVALID_SIGNATURE")


# --- the control plane's kinds ---------------------------------------------------------------------


def test_an_agent_cannot_open_its_own_session_by_command_spec_6_3(worker: AgentKey) -> None:
    epoch = Agent.objects.get(id=worker.id).session_epoch
    document = worker.command("ext.missionweaveprotocol.identity.session_open", None, {"agentId": worker.urn})
    with nothing_written():
        response = post_json(http(), COMMANDS, document)
    assert response.status_code in (400, 403), show(response)
    error_of(response, response.status_code, response.json()["code"])
    assert Agent.objects.get(id=worker.id).session_epoch == epoch


def test_an_agent_cannot_claim_stored_bytes_by_command(mission: dict[str, str], worker: AgentKey) -> None:
    payload = {"contentHash": "sha256:" + "ab" * 32, "sizeBytes": 2048, "mediaType": "text/markdown"}
    document = worker.command("ext.mwportal.artifact.content_store", mission["group"], payload)
    with nothing_written():
        error_of(post_json(http(), COMMANDS, document), 403, "AUTH_FORBIDDEN")


def test_a_person_cannot_issue_the_control_planes_organization_create(owner: AgentKey) -> None:
    organization = str(uuid.uuid4())
    payload = {"organizationId": urn(organization), "slug": "evil", "name": "Evil"}
    document = owner.command("ext.mwportal.admin.organization_create", None, payload)
    with nothing_written():
        response = post_json(http(), COMMANDS, document)
    assert response.status_code in (400, 403), show(response)
    error_of(response, response.status_code, response.json()["code"])
