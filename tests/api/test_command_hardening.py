"""POST /api/v1/commands after issue 16's hardening of ``accept()`` (item 1
and item 8's "smaller surfaces"), through the REST binding:

- a replay is verified before its stored receipt is returned: a forged copy
  of a known envelope (same content, another key's signature) is 401
  AUTH_INVALID_SIGNATURE, never the receipt (spec §8: verification precedes every
  other use of a signed document);
- a new signed Command's ``issued_at`` lies in the freshness window (at most
  MWP_COMMAND_FRESHNESS_SECONDS old, MWP_COMMAND_MAX_SKEW_SECONDS ahead):
  2001 and 2999 are refused, inside the window is accepted, and an
  unchanged retry of an accepted Command keeps its receipt after the window;
- internal kinds (``artifact.upload``: "this Group holds these bytes") are
  refused from signed clients with AUTH_FORBIDDEN: holding bytes is proven only
  by sending them.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings

from missions.models import GroupEvent
from mwportal.protocol import generate_keypair, signed
from tests.api.support import COMMANDS, bearer, error_of, http, nothing_written, post_json, show
from tests.conftest import AgentKey

FRESHNESS = settings.MWP_COMMAND_FRESHNESS_SECONDS
SKEW = settings.MWP_COMMAND_MAX_SKEW_SECONDS


def mission_create(owner: AgentKey, **kw: Any) -> dict[str, Any]:
    body = {"mission": str(uuid.uuid4()), "title": "Survey", "objective": "Map the coast"}
    return owner.envelope("mission.create", str(uuid.uuid4()), body, **kw)


def resigned(envelope: dict[str, Any], private_key: str) -> dict[str, Any]:
    """The same signed content with a signature by ``private_key``."""
    return signed(private_key, {k: v for k, v in envelope.items() if k != "signature"})


# --- a replay is verified first ---------------------------------------------


def test_it_refuses_a_forged_copy_of_a_known_envelope_instead_of_returning_its_receipt(
    owner: AgentKey, outsider: AgentKey
) -> None:
    genuine = mission_create(owner)
    first = post_json(http(), COMMANDS, genuine)
    assert first.status_code == 201, show(first)
    stranger_key, _ = generate_keypair()
    for forger in (outsider.private_key, stranger_key):
        forged = resigned(genuine, forger)
        assert forged["signature"] != genuine["signature"]
        with nothing_written():
            response = post_json(http(), COMMANDS, forged)
        error_of(response, 401, "AUTH_INVALID_SIGNATURE")
        assert "events" not in response.content.decode()
    # The genuine retry still gets its receipt.
    again = post_json(http(), COMMANDS, genuine)
    assert again.status_code == 200, show(again)
    assert again.json() == {**first.json(), "replayed": True}


def test_it_refuses_a_known_envelope_with_its_signature_removed_or_mangled(owner: AgentKey) -> None:
    genuine = mission_create(owner)
    assert post_json(http(), COMMANDS, genuine).status_code == 201
    signature = genuine["signature"]
    mangled = signature[:-4] + ("AAAA" if not signature.endswith("AAAA") else "BBBB")
    with nothing_written():
        error_of(post_json(http(), COMMANDS, {**genuine, "signature": mangled}), 401, "AUTH_INVALID_SIGNATURE")


# --- issued_at freshness ----------------------------------------------------


@pytest.mark.parametrize(
    "issued_at",
    [datetime(2001, 1, 1, tzinfo=UTC), datetime(2999, 1, 1, tzinfo=UTC)],
    ids=["2001", "2999"],
)
def test_it_refuses_a_command_issued_far_outside_the_window(owner: AgentKey, issued_at: datetime) -> None:
    with nothing_written():
        error = error_of(
            post_json(http(), COMMANDS, mission_create(owner, issued_at=issued_at)), 401, "AUTH_INVALID_SIGNATURE"
        )
    assert error["details"] == {"field": "issued_at"}
    assert "issued_at" in error["message"]


@pytest.mark.parametrize(
    ("offset", "accepted"),
    [
        (-(FRESHNESS - 60), True),
        (-(FRESHNESS + 60), False),
        (SKEW - 60, True),
        (SKEW + 60, False),
        (0, True),
    ],
    ids=["old-within", "too-old", "ahead-within", "too-far-ahead", "now"],
)
def test_it_accepts_exactly_the_freshness_window(owner: AgentKey, offset: int, accepted: bool) -> None:
    envelope = mission_create(owner, issued_at=datetime.now(UTC) + timedelta(seconds=offset))
    response = post_json(http(), COMMANDS, envelope)
    if accepted:
        assert response.status_code == 201, show(response)
    else:
        error_of(response, 401, "AUTH_INVALID_SIGNATURE")
        assert not GroupEvent.objects.filter(group_id=envelope["group"]).exists()


def test_an_unchanged_retry_after_the_window_still_gets_its_receipt_but_a_forgery_does_not(
    owner: AgentKey, outsider: AgentKey
) -> None:
    # spec §19: an unchanged retry keeps its Action ID and signed content, so
    # it must not fall foul of freshness; it is still verified.
    genuine = mission_create(owner)
    first = post_json(http(), COMMANDS, genuine)
    assert first.status_code == 201, show(first)
    with time_machine.travel(datetime.now(UTC) + timedelta(seconds=FRESHNESS * 4), tick=False):
        again = post_json(http(), COMMANDS, genuine)
        assert again.status_code == 200, show(again)
        assert again.json()["replayed"] is True
        error_of(post_json(http(), COMMANDS, resigned(genuine, outsider.private_key)), 401, "AUTH_INVALID_SIGNATURE")
        # New content signed with the old time is stale.
        stale = mission_create(owner, issued_at=datetime.fromisoformat(genuine["issued_at"].replace("Z", "+00:00")))
        error_of(post_json(http(), COMMANDS, stale), 401, "AUTH_INVALID_SIGNATURE")


# --- internal kinds ---------------------------------------------------------


@pytest.fixture
def stored_sha(settings: Any, tmp_path: Any, mission: dict[str, str], worker: AgentKey) -> str:
    """Bytes Wanda really uploaded to the Mission's Group, by the upload route."""
    settings.MWP_ARTIFACT_ROOT = str(tmp_path / "artifacts")
    content = b"# findings\n"
    response = http().post(
        f"/api/v1/artifacts?group={mission['group']}",
        data=content,
        content_type="text/markdown",
        **bearer(worker.extra["token"]),
    )
    assert response.status_code == 201, show(response)
    return hashlib.sha256(content).hexdigest()


@pytest.mark.parametrize("where", ["mission", "administrative"])
def test_it_refuses_a_signed_artifact_upload_with_forbidden(
    org: dict[str, str], mission: dict[str, str], stored_sha: str, worker2: AgentKey, outsider: AgentKey, where: str
) -> None:
    # The attack: claim a blob one never sent, by its hash, into a
    # Group one may append to, then read it through that Group.
    agent, group = (worker2, mission["group"]) if where == "mission" else (outsider, org["admin_group"])
    envelope = agent.envelope("artifact.upload", group, {"sha256": stored_sha})
    with nothing_written():
        error = error_of(post_json(http(), COMMANDS, envelope), 403, "AUTH_FORBIDDEN")
    assert "artifact.upload" in error["message"]
