"""The HELLO over REST (DESIGN §5, PROTOCOL §6.3): ``POST /api/v0.1/sessions/challenge`` takes
``HELLO/client_init`` and answers ``HELLO/server_challenge``; ``POST /api/v0.1/sessions`` takes
``HELLO/client_response`` and answers ``HELLO/server_accept`` with a new Session Epoch, which fences
every older session (§6.3). Every frame the server sends is checked against the bundle's
``websocket-frame.schema.json``, every refusal against ``error.schema.json``."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from missions.api import sessions
from missions.models import Agent, AgentSession, OrganizationEvent
from mwportal.protocol import frames, handshake
from mwportal.protocol.command import Key
from mwportal.protocol.ids import new_urn
from mwportal.protocol.values import b64url_decode
from tests.api.support import (
    CHALLENGE,
    MEMBERSHIPS,
    SESSIONS,
    bearer,
    challenge,
    error_of,
    events_url,
    hello,
    http,
    normative,
    nothing_written,
    post_json,
    post_raw,
    show,
    state,
)
from tests.conftest import AgentKey


def test_the_challenge_is_a_server_challenge_over_the_transcript_spec_6_3(worker: AgentKey) -> None:
    hc, frame = challenge(http(), worker)
    assert frame["frameType"] == "HELLO" and frame["phase"] == "server_challenge"
    assert frame["selectedVersion"] == "0.1" and frame["clientNonce"] == hc.client_nonce
    transcript = json.loads(b64url_decode(frame["challenge"]))
    assert set(transcript) == {
        "agentId",
        "keyId",
        "clientNonce",
        "serverNonce",
        "protocolVersion",
        "challengeId",
        "expiresAt",
    }
    assert transcript["agentId"] == worker.urn and transcript["keyId"] == worker.key.key_id
    assert transcript["serverNonce"] == frame["serverNonce"]


def test_a_challenge_is_issued_alike_for_an_unknown_agent_and_key_spec_6_4(org: dict[str, str]) -> None:
    # Nothing is looked up before the response: the challenge tells no one which Agents or keys exist.
    hc = handshake.ClientHandshake(new_urn(), Key.generate())
    with nothing_written():
        response = post_json(http(), CHALLENGE, hc.start())
    assert response.status_code == 200, show(response)
    assert normative("websocket-frame", response.json())["clientNonce"] == hc.client_nonce


def test_a_signed_response_opens_a_session_at_the_next_epoch_spec_6_3(org: dict[str, str], worker: AgentKey) -> None:
    client = http()
    before = Agent.objects.get(id=worker.id).session_epoch
    accepted = hello(client, worker)
    assert accepted["sessionEpoch"] == before + 1 == Agent.objects.get(id=worker.id).session_epoch
    expires = datetime.fromisoformat(accepted["expiresAt"].replace("Z", "+00:00"))
    assert datetime.now(UTC) < expires <= datetime.now(UTC) + timedelta(seconds=sessions_ttl() + 5)
    # The token is a bearer token for REST.
    token = bearer(accepted["sessionToken"])
    assert client.get(events_url(org["admin_group"]), **token).status_code == 200
    assert client.get(MEMBERSHIPS, **token).status_code == 200


def sessions_ttl() -> int:
    from missions.auth import SESSION_SECONDS

    return SESSION_SECONDS


def test_a_new_session_fences_every_older_token_spec_6_3(org: dict[str, str], worker: AgentKey) -> None:
    client = http()
    first = hello(client, worker)
    second = hello(client, worker)
    assert second["sessionEpoch"] == first["sessionEpoch"] + 1 and second["sessionToken"] != first["sessionToken"]
    for stale in (first["sessionToken"], worker.extra["token"]):
        error_of(client.get(events_url(org["admin_group"]), **bearer(stale)), 401, "AUTH_STALE_SESSION")
    assert client.get(events_url(org["admin_group"]), **bearer(second["sessionToken"])).status_code == 200


def test_opening_a_session_is_an_organization_event_without_the_token_spec_15_2(worker: AgentKey) -> None:
    accepted = hello(http(), worker)
    event = OrganizationEvent.objects.filter(type="ext.missionweaveprotocol.identity.session_opened").latest("id")
    document = normative("event", event.as_wire())
    assert document["payload"] == {"agentId": worker.urn, "sessionEpoch": accepted["sessionEpoch"]}
    assert "groupId" not in document and "sequence" not in document
    assert accepted["sessionToken"] not in event.document


def test_the_session_row_keeps_a_digest_not_the_token(worker: AgentKey) -> None:
    accepted = hello(http(), worker)
    row = AgentSession.objects.get(agent_id=worker.id, epoch=accepted["sessionEpoch"])
    assert row.revoked_at is None and accepted["sessionToken"] not in row.token_hash
    assert not AgentSession.objects.filter(agent_id=worker.id, epoch__lt=row.epoch, revoked_at__isnull=True).exists()


def test_an_expired_token_no_longer_authenticates_spec_6_3(
    org: dict[str, str], worker: AgentKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    import missions.auth

    token = bearer(hello(http(), worker)["sessionToken"])
    monkeypatch.setattr(missions.auth, "SESSION_SECONDS", 0)
    error_of(http().get(events_url(org["admin_group"]), **token), 401, "AUTH_STALE_SESSION")


# --- the proof: one answer for every failure ---------------------------------------------------


def respond(agent: AgentKey, *, key: Key | None = None, agent_id: str | None = None) -> tuple[Any, Any]:
    """A challenge for ``agent_id`` (default ``agent``) answered with ``key``; (response, client_response)."""
    client = http()
    signer = AgentKey(agent.id, key or agent.key, agent.org_slug)
    hc = handshake.ClientHandshake(agent_id or agent.urn, signer.key)
    frame = post_json(client, CHALLENGE, hc.start()).json()
    reply = hc.receive_challenge(frame)
    return post_json(client, SESSIONS, reply), reply


def refusal(response: Any) -> dict[str, Any]:
    error = error_of(response, 401, "AUTH_INVALID_SIGNATURE")
    error.pop("relatedFrameId", None)
    return error


def test_a_response_answers_its_challenge_once_spec_6_3(worker: AgentKey) -> None:
    response, reply = respond(worker)
    assert response.status_code == 201, show(response)
    with nothing_written():
        refusal(post_json(http(), SESSIONS, reply))


def test_a_wrong_key_an_unknown_key_and_an_unknown_agent_answer_alike_spec_6_4(
    worker: AgentKey, outsider: AgentKey
) -> None:
    with nothing_written():
        wrong_key = refusal(respond(worker, key=outsider.key)[0])  # outsider's key under its own key ID
        stray = Key(worker.key.key_id, Key.generate().seed)
        wrong_bytes = refusal(respond(worker, key=stray)[0])  # the right key ID, other bytes
        unknown_key = refusal(respond(worker, key=Key.generate())[0])
        unknown_agent = refusal(respond(worker, agent_id=new_urn())[0])
        not_an_agent = refusal(respond(worker, agent_id="urn:example:nobody")[0])
    assert wrong_key == wrong_bytes == unknown_key == unknown_agent == not_an_agent


def test_a_challenge_of_another_installation_is_refused(worker: AgentKey, settings: Any) -> None:
    client = http()
    hc, frame = challenge(client, worker)
    settings.SECRET_KEY = "another installation's secret " + "x" * 40
    with nothing_written():
        refusal(post_json(client, SESSIONS, hc.receive_challenge(frame)))


def test_a_person_cannot_open_an_agent_session_spec_6_3(owner: AgentKey) -> None:
    with nothing_written():
        refusal(respond(owner)[0])


def test_an_expired_challenge_is_refused_spec_6_3(worker: AgentKey) -> None:
    hc = handshake.ClientHandshake(worker.urn, worker.key)
    init = frames.parse(json.dumps(hc.start()))
    issued = sessions.issue_challenge(init, datetime.now(UTC) - timedelta(seconds=sessions.CHALLENGE_SECONDS + 1))
    with nothing_written():
        refusal(post_json(http(), SESSIONS, hc.receive_challenge(issued)))


def test_a_response_to_a_challenge_never_issued_is_refused(worker: AgentKey) -> None:
    hc = handshake.ClientHandshake(worker.urn, worker.key)
    invented = handshake.issue_challenge(frames.parse(json.dumps(hc.start())), datetime.now(UTC))
    with nothing_written():
        refusal(post_json(http(), SESSIONS, hc.receive_challenge(invented.frame())))


@pytest.mark.parametrize("member", ["agentId", "keyId", "clientNonce"])
def test_a_response_echoing_another_member_than_its_challenge_is_refused_spec_6_3(
    worker: AgentKey, worker2: AgentKey, member: str
) -> None:
    # The challenge is bound to the Agent, key and client nonce it was issued for.
    client = http()
    hc, frame = challenge(client, worker)
    other = {"agentId": worker2.urn, "keyId": worker2.key.key_id, "clientNonce": frames.new_nonce()}[member]
    with nothing_written():
        refusal(post_json(client, SESSIONS, {**hc.receive_challenge(frame), member: other}))


# --- frames that are not the phase's ------------------------------------------------------------


def client_init(agent: AgentKey) -> dict[str, Any]:
    return handshake.ClientHandshake(agent.urn, agent.key).start()


def test_each_route_takes_its_own_phase_only_spec_17_1(worker: AgentKey) -> None:
    with nothing_written():
        error = error_of(post_json(http(), SESSIONS, client_init(worker)), 400, "PROTOCOL_VIOLATION")
        assert error["details"]["expected"] == "HELLO/client_response"
        ping = frames.ping()
        error_of(post_json(http(), CHALLENGE, ping), 400, "PROTOCOL_VIOLATION")


def test_a_client_without_version_0_1_is_unsupported_version_spec_21(worker: AgentKey) -> None:
    frame = {**client_init(worker), "supportedVersions": ["9.9"]}
    error_of(post_json(http(), CHALLENGE, frame), 400, "UNSUPPORTED_VERSION")


@pytest.mark.parametrize("member", ["agentId", "keyId", "clientNonce", "frameId", "supportedVersions"])
def test_a_missing_member_is_schema_validation_failed(worker: AgentKey, member: str) -> None:
    frame = client_init(worker)
    del frame[member]
    error_of(post_json(http(), CHALLENGE, frame), 400, "SCHEMA_VALIDATION_FAILED")


def test_an_unknown_member_is_schema_validation_failed_spec_17_4(worker: AgentKey) -> None:
    error_of(post_json(http(), CHALLENGE, {**client_init(worker), "token": "x"}), 400, "SCHEMA_VALIDATION_FAILED")


@pytest.mark.parametrize("route", [CHALLENGE, SESSIONS])
@pytest.mark.parametrize("raw", ["not json", "{", b"\xff\xfe", "NaN", '{"a": 1, "a": 2}'], ids=repr)
def test_a_body_that_is_not_strict_json_is_a_protocol_violation_spec_17_4(
    org: dict[str, str], route: str, raw: str | bytes
) -> None:
    with nothing_written():
        error_of(post_raw(http(), route, raw), 400, "PROTOCOL_VIOLATION")


@pytest.mark.parametrize("route", [CHALLENGE, SESSIONS])
def test_an_empty_body_is_a_protocol_violation(org: dict[str, str], route: str) -> None:
    error_of(post_raw(http(), route, b""), 400, "PROTOCOL_VIOLATION")


@pytest.mark.parametrize("route", [CHALLENGE, SESSIONS])
@pytest.mark.parametrize(
    "media_type", ["text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1"]
)
def test_a_body_that_is_not_declared_json_is_415(worker: AgentKey, route: str, media_type: str) -> None:
    error = error_of(post_raw(http(), route, json.dumps(client_init(worker)), media_type), 415, "PROTOCOL_VIOLATION")
    assert error["details"]["field"] == "Content-Type"


@pytest.mark.parametrize("route", [CHALLENGE, SESSIONS])
def test_a_body_over_one_mebibyte_is_413(org: dict[str, str], route: str) -> None:
    error_of(post_raw(http(), route, b" " * (1024 * 1024 + 1)), 413, "PROTOCOL_VIOLATION")


@pytest.mark.parametrize("route", [CHALLENGE, SESSIONS])
@pytest.mark.parametrize("method", ["get", "put", "delete"])
def test_other_methods_are_405_in_the_error_document(org: dict[str, str], route: str, method: str) -> None:
    error_of(getattr(http(), method)(route), 405, "PROTOCOL_VIOLATION")


# --- no input answers 500 (issue 16 item 6) ------------------------------------------------------

any_text = st.text(alphabet=st.characters() | st.characters(categories=["Cs"]), max_size=12)
member_values = st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.floats() | any_text


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    member=st.sampled_from(["agentId", "keyId", "clientNonce", "serverNonce", "challengeSignature", "frameId"]),
    value=member_values,
)
def test_no_member_value_of_a_response_answers_500(worker: AgentKey, member: str, value: Any) -> None:
    client = http()
    hc, frame = challenge(client, worker)
    reply = {**hc.receive_challenge(frame), member: value}
    try:
        text = json.dumps(reply)
    except ValueError:
        text = "null"
    before = state()
    response = post_raw(client, SESSIONS, text)
    assert response.status_code in {201, 400, 401}, show(response)
    if response.status_code != 201:
        error_of(response, response.status_code, response.json()["code"])
        assert state() == before
