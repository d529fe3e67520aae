"""A NUL character anywhere in a request body is refused with 400 and writes nothing, on SQLite and on
PostgreSQL (issue 16 item 6; PROTOCOL §2, §6.4).

PostgreSQL's text columns and jsonb refuse ``\\u0000``: a validly signed Command holding one must be
refused by the binding, not answered 500 by the database. The escape is what any JSON client writes.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mwportal.protocol import handshake
from mwportal.protocol.verification import sign_document
from tests.api.support import CHALLENGE, COMMANDS, error_of, http, nothing_written, post_json, post_raw, show
from tests.api.test_commands import create_mission
from tests.conftest import AgentKey


def refused(response: Any) -> dict[str, Any]:
    assert response.status_code == 400, show(response)
    assert response.json()["code"] in ("SCHEMA_VALIDATION_FAILED", "PROTOCOL_VIOLATION"), show(response)
    return error_of(response, 400, response.json()["code"])


def resign(document: dict[str, Any], agent: AgentKey) -> dict[str, Any]:
    return sign_document(document, key_id=agent.key.key_id, seed=agent.key.seed, profile="command")


def test_a_nul_in_a_signed_payload_member_is_400_spec_2(owner: AgentKey, coordinator: AgentKey) -> None:
    document = create_mission(owner, coordinator)
    document["payload"]["title"] = "Sur\x00vey"
    with nothing_written():
        refused(post_raw(http(), COMMANDS, json.dumps(resign(document, owner))))


def test_a_nul_in_a_member_name_is_400(owner: AgentKey, coordinator: AgentKey) -> None:
    document = create_mission(owner, coordinator)
    document["payload"]["no\x00te"] = 1
    with nothing_written():
        refused(post_raw(http(), COMMANDS, json.dumps(resign(document, owner))))


@pytest.mark.parametrize("member", ["agentId", "keyId", "clientNonce"])
def test_a_nul_in_a_hello_frame_is_400(worker: AgentKey, member: str) -> None:
    frame = handshake.ClientHandshake(worker.urn, worker.key).start()
    frame[member] += "\x00"
    with nothing_written():
        refused(post_json(http(), CHALLENGE, frame))


PLACES = ["title", "objective", "kind", "actionId", "issuedAt", "correlationId"]
clean = st.text(alphabet=st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(place=st.sampled_from(PLACES), before=clean, after=clean)
def test_no_nul_anywhere_in_a_signed_command_answers_anything_but_400(
    owner: AgentKey, coordinator: AgentKey, place: str, before: str, after: str
) -> None:
    document = create_mission(owner, coordinator)
    holder = document["payload"] if place in ("title", "objective") else document
    holder[place] = before + "\x00" + after
    # Signed with the NUL in, so that a parser letting it through would reach
    # the handler (and the database) with a valid signature; an issuedAt that
    # is no longer a timestamp cannot be signed, and goes with the old one.
    with contextlib.suppress(ValueError):
        document = resign(document, owner)
    with nothing_written():
        refused(post_raw(http(), COMMANDS, json.dumps(document)))
