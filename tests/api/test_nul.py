"""A NUL character in a request body is 400 SCHEMA_VALIDATION_FAILED naming the member, on
SQLite and on PostgreSQL (issue 16 item 6).

PostgreSQL's text columns and jsonb refuse ``\\u0000``: before the fix a
validly signed Mission title or Work Contract holding one was accepted on
SQLite and answered 500 on PostgreSQL. The strict parser of every binding
now refuses it before anything else looks at the document (the WebSocket
consumer parses frames with the same ``loads_strict``).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mwportal.protocol import signed
from tests.api.support import (
    COMMANDS,
    SESSIONS,
    http,
    malformed_naming,
    nothing_written,
    post_raw,
    session_request,
)
from tests.conftest import AgentKey
from tests.workitems.flow import contract


def send(document: dict[str, Any]) -> Any:
    # json.dumps writes the NUL as the escape \u0000, as any JSON client does.
    return post_raw(http(), COMMANDS, json.dumps(document))


def test_it_refuses_a_nul_in_a_signed_mission_title(owner: AgentKey) -> None:
    body = {"mission": str(uuid.uuid4()), "title": "Sur\x00vey", "objective": "Map it"}
    with nothing_written():
        error = malformed_naming(send(owner.envelope("mission.create", str(uuid.uuid4()), body)), "body.title")
    assert "NUL" in error["message"]


def test_it_refuses_a_nul_deep_in_a_signed_work_contract(mission: dict[str, str], worker: AgentKey) -> None:
    terms = contract()
    terms["acceptance_criteria"][1]["description"] = "no invented\x00facts"
    body = {"proposal": str(uuid.uuid4()), "contract": terms}
    with nothing_written():
        malformed_naming(
            send(worker.envelope("work.propose", mission["group"], body)),
            "body.contract.acceptance_criteria[1].description",
        )


def test_it_refuses_a_nul_in_a_member_name(owner: AgentKey) -> None:
    body = {"mission": str(uuid.uuid4()), "title": "Survey", "objective": "Map it", "no\x00te": 1}
    with nothing_written():
        malformed_naming(send(owner.envelope("mission.create", str(uuid.uuid4()), body)), 'body["no\\u0000te"]')


@pytest.mark.parametrize("member", ["nonce", "issued_at", "agent"])
def test_it_refuses_a_nul_in_a_session_request(org: dict[str, str], worker: AgentKey, member: str) -> None:
    request = session_request(worker)
    request[member] += "\x00"
    with nothing_written():
        malformed_naming(post_raw(http(), SESSIONS, json.dumps(request)), member)


# A member of a valid signed envelope to put a NUL into, and the path the
# answer must name.
PLACES = {
    "title": ("body", "title"),
    "objective": ("body", "objective"),
    "type": (None, "type"),
    "action_id": (None, "action_id"),
    "issued_at": (None, "issued_at"),
    "signature": (None, "signature"),
}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    place=st.sampled_from(sorted(PLACES)),
    before=st.text(alphabet=st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=5),
    after=st.text(alphabet=st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=5),
)
def test_no_nul_anywhere_in_a_signed_envelope_answers_anything_but_400(
    owner: AgentKey, place: str, before: str, after: str
) -> None:
    body = {"mission": str(uuid.uuid4()), "title": "Survey", "objective": "Map it"}
    envelope = owner.envelope("mission.create", str(uuid.uuid4()), body)
    parent, member = PLACES[place]
    holder = envelope[parent] if parent else envelope
    holder[member] = before + "\x00" + after
    # Signed with the NUL in, so that a parser that let it through would
    # reach the handler (and the database) with a valid signature.
    resigned = signed(owner.private_key, {k: v for k, v in envelope.items() if k != "signature"})
    if member == "signature":
        resigned["signature"] = envelope["signature"]
    with nothing_written():
        malformed_naming(send(resigned), f"{parent}.{member}" if parent else member)
