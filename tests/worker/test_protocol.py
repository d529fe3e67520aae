"""The sans-I/O ``/mwp/0.1`` client session (PROTOCOL §6.3, §16, §17, §19): no event loop, no server.

The server side of each exchange is the kernel's own sans-I/O pieces
(``ServerHandshake``, the ``frames`` builders), so the session is tested
against the frames a conforming server sends; every frame the session sends
is checked against the bundle's ``websocket-frame`` schema when it is present.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mwportal.protocol import frames
from mwportal.protocol.command import Key, build_command
from mwportal.protocol.errors import ErrorCode, ProtocolError
from mwportal.protocol.handshake import ServerHandshake
from mwportal.protocol.ids import bare
from mwportal.protocol.registry import KeyBinding, Principal
from mwportal.protocol.values import parse_timestamp
from mwworker import (
    Backpressure,
    BadFrame,
    ClientSession,
    Closed,
    CommandAccepted,
    CommandRefused,
    CursorTooOld,
    EventReceived,
    HelloRefused,
    Pong,
    Refused,
    ServerError,
    SubscriptionRefused,
    Welcome,
)
from mwworker.leases import lease_gone
from tests.protocol.normative import normative_problems
from tests.worker.streams import ME, Chain

NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
KEY = Key.generate(("agent", bare(ME, "agentId")), "00000000-0000-4000-8000-0000000000f1")
GROUP = "urn:uuid:00000000-0000-4000-8000-000000000a01"
OTHER_GROUP = "urn:uuid:00000000-0000-4000-8000-000000000a02"


def resolve(key_id: str) -> KeyBinding:
    assert key_id == KEY.key_id
    from mwportal.protocol.values import b64url_decode

    return KeyBinding(key_id, Principal("agent", ME), "Ed25519", b64url_decode(KEY.public_key),
                      parse_timestamp("2026-01-01T00:00:00Z"))  # fmt: skip


def sent(session: ClientSession) -> list[dict[str, Any]]:
    """The frames the session queued, each checked against the normative frame schema (§17.1)."""
    out = [json.loads(text) for text in session.frames_to_send()]
    for frame in out:
        assert normative_problems("websocket-frame", frame) == [], frame["frameType"]
    return out


def text(frame: dict[str, Any]) -> str:
    return frames.encode(frame)


def welcomed(epoch: int = 3) -> ClientSession:
    """A session through the four phases of HELLO against the kernel's server handshake."""
    session = ClientSession(ME, KEY, clock=lambda: NOW)
    server = ServerHandshake(resolve)
    session.hello()
    (init,) = sent(session)
    challenge = server.receive_client_init(init, NOW)
    assert session.feed(text(challenge)) == []
    (response,) = sent(session)
    server.receive_client_response(response, NOW)
    accept = server.accept_frame("t" * 32, epoch, NOW + timedelta(hours=1))
    assert session.feed(text(accept)) == [Welcome("t" * 32, epoch, NOW + timedelta(hours=1))]
    return session


def command(group: str = GROUP) -> dict[str, Any]:
    return build_command("message.post", actor=("agent", bare(ME, "agentId")), key=KEY,
                         payload={"messageId": "urn:uuid:00000000-0000-4000-8000-000000000c01", "content": "hi"},
                         group=bare(group, "groupId"), session_epoch=3, membership_epoch=1)  # fmt: skip


def error(code: ErrorCode, **members: Any) -> str:
    err = ProtocolError(code, "m", details=members.pop("details", None), retry_after_ms=members.pop("retry", None))
    return text(frames.error_frame(err, occurred_at=NOW, **members))


# --- HELLO (§6.3) ---------------------------------------------------------------------------


def test_hello_runs_four_phases_and_everything_else_waits_for_server_accept_spec_6_3() -> None:
    session = ClientSession(ME, KEY, clock=lambda: NOW)
    server = ServerHandshake(resolve)
    session.hello()
    session.subscribe(GROUP, after=7)
    session.ack({GROUP: 7})
    (init,) = sent(session)  # only HELLO/client_init: the rest is held
    assert (init["frameType"], init["phase"], init["agentId"], init["keyId"]) == ("HELLO", "client_init", ME,
                                                                                  KEY.key_id)  # fmt: skip
    session.feed(text(server.receive_client_init(init, NOW)))
    (response,) = sent(session)
    assert response["phase"] == "client_response"
    authenticated = server.receive_client_response(response, NOW)  # the signature verifies against the key
    assert authenticated.agent_id == ME
    assert sent(session) == []
    (welcome,) = session.feed(text(server.accept_frame("t" * 32, 4, NOW + timedelta(hours=1))))
    assert isinstance(welcome, Welcome) and welcome.session_epoch == 4
    subscribe, ack = sent(session)
    assert subscribe["groups"] == [{"groupId": GROUP, "afterSequence": 7}]
    assert ack["acknowledgements"] == [{"groupId": GROUP, "sequence": 7}]


def test_hello_is_sent_once() -> None:
    session = ClientSession(ME, KEY)
    session.hello()
    with pytest.raises(ValueError, match="first frame"):
        session.hello()


def test_a_challenge_of_another_handshake_is_not_signed_spec_6_3() -> None:
    session = ClientSession(ME, KEY, clock=lambda: NOW)
    session.hello()
    sent(session)
    other = ServerHandshake(resolve)
    foreign = ClientSession(ME, KEY)
    foreign.hello()
    (init,) = sent(foreign)
    (refused,) = session.feed(text(other.receive_client_init(init, NOW)))  # echoes the other clientNonce
    assert isinstance(refused, HelloRefused) and refused.code == "PROTOCOL_VIOLATION"
    assert sent(session) == []  # nothing signed


def test_an_error_during_hello_is_a_refused_hello() -> None:
    session = ClientSession(ME, KEY, clock=lambda: NOW)
    session.hello()
    sent(session)
    assert session.feed(error(ErrorCode.AUTH_INVALID_SIGNATURE)) == [HelloRefused("AUTH_INVALID_SIGNATURE", "m")]


# --- SUBSCRIBE, EVENT, ACK (§16, §17.2) ------------------------------------------------------


def test_subscribe_names_each_group_with_its_after_sequence_spec_17_2() -> None:
    session = welcomed()
    session.subscribe(GROUP, after=0)
    session.subscribe(OTHER_GROUP, after=41, attention={"mentionsOnly": True})
    first, second = sent(session)
    assert first["groups"] == [{"groupId": GROUP, "afterSequence": 0}]
    assert second["groups"] == [{"groupId": OTHER_GROUP, "afterSequence": 41, "attention": {"mentionsOnly": True}}]
    assert session.subscriptions == {GROUP: 0, OTHER_GROUP: 41}
    with pytest.raises(ValueError):
        session.subscribe(GROUP, after=-1)


def test_an_event_frame_becomes_an_event_received_with_its_bytes() -> None:
    session = welcomed()
    event = Chain(seed=1).forge()
    (received,) = session.feed(text(frames.event(event)))
    assert isinstance(received, EventReceived)
    assert (received.group, received.event) == (event["groupId"], event)
    assert json.loads(received.data) == event


def test_the_event_a_command_caused_answers_it_spec_15_1() -> None:
    """A WebSocket has no receipt frame (DESIGN §5): the EVENT whose cause is the Command answers it."""
    session = welcomed()
    doc = command()
    session.command(doc)
    (frame,) = sent(session)
    assert frame["frameType"] == "COMMAND" and frame["command"] == doc
    event = {**Chain(seed=1).forge(), "cause": {"type": "command", "id": doc["actionId"]}}
    received, accepted = session.feed(text(frames.event(event)))
    assert isinstance(received, EventReceived)
    assert accepted == CommandAccepted(doc["actionId"], event)
    assert session.in_doubt() == []


def test_ack_reports_only_cursors_that_moved_spec_16() -> None:
    session = welcomed()
    session.ack({GROUP: 3, OTHER_GROUP: 9})
    (ack,) = sent(session)
    assert ack["acknowledgements"] == [{"groupId": GROUP, "sequence": 3}, {"groupId": OTHER_GROUP, "sequence": 9}]
    session.ack({GROUP: 3, OTHER_GROUP: 9})
    assert sent(session) == []
    session.ack({GROUP: 4, OTHER_GROUP: 9})
    (ack,) = sent(session)
    assert ack["acknowledgements"] == [{"groupId": GROUP, "sequence": 4}]


@pytest.mark.parametrize(
    "message",
    ["not json", "[]", '{"frameType": "EVENT"}', '{"a": 1, "a": 2}', text(frames.ack([(GROUP, 1)]))],
)
def test_unreadable_frames_are_reported_and_the_session_carries_on(message: str) -> None:
    session = welcomed()
    (bad,) = session.feed(message)
    assert isinstance(bad, BadFrame)
    assert session.state == "open"
    session.ping()
    assert len(sent(session)) == 1


def test_an_event_frame_without_a_group_position_is_a_bad_frame() -> None:
    session = welcomed()
    event = {k: v for k, v in Chain(seed=1).forge().items() if k != "groupId"}
    (bad,) = session.feed(text(frames.event(event)))
    assert isinstance(bad, BadFrame)


# --- ERROR, BACKPRESSURE, CURSOR_TOO_OLD (§16, §17.3, §19) ------------------------------------


def test_a_refused_command_names_its_action_id_and_reason_spec_19() -> None:
    session = welcomed()
    doc = command()
    session.command(doc)
    sent(session)
    (refused,) = session.feed(error(ErrorCode.WORK_LEASE_EXPIRED, related_action_id=doc["actionId"],
                                    details={"reason": "stale_lease"}))  # fmt: skip
    assert isinstance(refused, CommandRefused)
    assert (refused.action_id, refused.code, refused.reason) == (doc["actionId"], "WORK_LEASE_EXPIRED", "stale_lease")
    assert session.in_doubt() == []


def test_backpressure_pauses_one_group_and_resume_subscribes_it_again_spec_17_3() -> None:
    """§17.3: a paused Group's Commands wait; the other Groups flow on; after
    retryAfterMs the Group is subscribed again from its Cursor and the held
    Commands go out unchanged (same Action ID, §19)."""
    session = welcomed()
    session.subscribe(GROUP, after=0)
    session.subscribe(OTHER_GROUP, after=0)
    sent(session)
    (pause,) = session.feed(text(frames.backpressure_frame(GROUP, 1500, occurred_at=NOW)))
    assert pause == Backpressure(GROUP, 1500)
    assert session.paused == {GROUP: NOW + timedelta(milliseconds=1500)}
    assert GROUP not in session.subscriptions and OTHER_GROUP in session.subscriptions
    held, flowing = command(GROUP), command(OTHER_GROUP)
    session.command(held)
    session.command(flowing)
    (out,) = sent(session)
    assert out["command"]["actionId"] == flowing["actionId"]
    session.resume(GROUP, after=12)
    subscribe, resent = sent(session)
    assert subscribe["groups"] == [{"groupId": GROUP, "afterSequence": 12}]
    assert resent["command"] == held
    assert session.paused == {}


def test_a_command_refused_with_backpressure_is_held_not_failed() -> None:
    session = welcomed()
    doc = command(GROUP)
    session.command(doc)
    sent(session)
    err = ProtocolError(ErrorCode.BACKPRESSURE, "slow down", group_id=GROUP, retry_after_ms=200)
    (pause,) = session.feed(text(frames.error_frame(err, related_action_id=doc["actionId"], occurred_at=NOW)))
    assert pause == Backpressure(GROUP, 200, doc["actionId"])
    assert session.in_doubt() == [doc]
    session.resume(GROUP, after=0)
    _, resent = sent(session)
    assert resent["command"] == doc


def test_cursor_too_old_hands_over_the_error_and_drops_the_subscription_spec_16() -> None:
    session = welcomed()
    session.subscribe(GROUP, after=1)
    sent(session)
    reference = {"groupId": GROUP, "throughSequence": 40, "href": "/api/v0.1/groups/x/snapshots/40"}
    err = ProtocolError(ErrorCode.CURSOR_TOO_OLD, "old", group_id=GROUP, snapshot_artifact_hash="sha256:" + "ab" * 32,
                        details={"snapshot": reference})  # fmt: skip
    (too_old,) = session.feed(text(frames.error_frame(err, occurred_at=NOW)))
    assert isinstance(too_old, CursorTooOld) and too_old.group == GROUP
    assert too_old.error["details"]["snapshot"] == reference
    assert GROUP not in session.subscriptions


def test_a_refused_subscription_names_its_group_spec_17_2() -> None:
    session = welcomed()
    session.subscribe(GROUP, after=0)
    (frame,) = sent(session)
    (refused,) = session.feed(error(ErrorCode.GROUP_NOT_FOUND, related_frame_id=frame["frameId"]))
    assert refused == SubscriptionRefused(GROUP, "GROUP_NOT_FOUND", "m")
    assert session.subscriptions == {}


def test_other_errors_are_server_errors() -> None:
    session = welcomed()
    (other,) = session.feed(error(ErrorCode.AUTH_STALE_SESSION))
    assert isinstance(other, ServerError) and other.code == "AUTH_STALE_SESSION"


# --- PING and presence (§6.2, §17.3) ----------------------------------------------------------

PRESENCE = {
    "agentId": ME, "sessionEpoch": 3, "status": "online",
    "capacity": {"maxSlots": 2, "activeSlots": 1, "availableSlots": 1, "queuedItems": 0},
    "capabilityAvailability": [{"capability": {"id": "text.summarize", "version": "1.2.0"}, "status": "available"}],
    "lastHeartbeat": "2026-11-29T10:00:00Z", "expiresAt": "2026-11-29T10:01:00Z",
}  # fmt: skip


def test_a_ping_carries_the_presence_record_and_its_echo_is_a_pong_spec_17_3() -> None:
    session = welcomed()
    nonce = session.ping(PRESENCE)
    (ping,) = sent(session)
    assert (ping["nonce"], ping["presence"]) == (nonce, PRESENCE)
    assert normative_problems("presence-record", ping["presence"]) == []
    assert session.feed(text(frames.ping(NOW, reply_to_nonce=nonce))) == [Pong(nonce)]


def test_a_server_ping_is_answered_with_its_nonce_echoed_spec_17_3() -> None:
    session = welcomed()
    session.ping(PRESENCE)
    sent(session)
    probe = frames.ping(NOW)
    assert session.feed(text(probe)) == []
    (reply,) = sent(session)
    assert (reply["replyToNonce"], reply["presence"]) == (probe["nonce"], PRESENCE)


# --- the end of a connection ----------------------------------------------------------------


def test_a_closed_connection_ends_the_session_and_leaves_commands_in_doubt_spec_19() -> None:
    session = welcomed()
    doc = command()
    session.command(doc)
    assert session.connection_lost(1006, "gone") == [Closed(1006, "gone", False)]
    assert session.in_doubt() == [doc]
    assert session.frames_to_send() == []
    from mwworker import SessionClosed

    with pytest.raises(SessionClosed):
        session.ping()


@pytest.mark.parametrize(
    ("code", "reason", "gone"),
    [
        ("WORK_LEASE_EXPIRED", "stale_lease", True),
        ("WORK_LEASE_EXPIRED", "lease_expired", True),
        ("WORK_STALE_OWNERSHIP", None, True),
        ("AUTH_STALE_SESSION", None, True),
        ("INVALID_STATE_TRANSITION", None, True),
        # The same code for "not yet" leaves the lease standing.
        ("INVALID_STATE_TRANSITION", "evidence_required", False),
        ("INVALID_STATE_TRANSITION", "dependency_unmet", False),
        ("INVALID_COMMAND", "not_found", False),
    ],
)
def test_it_tells_a_lost_lease_from_a_refusal_that_keeps_it(code: str, reason: str | None, gone: bool) -> None:
    assert lease_gone(Refused(code, "m", reason)) is gone


def test_a_reply_ping_is_never_answered_spec_17_3() -> None:
    """Only a probe is echoed: answering replies would make two peers echo each other for ever."""
    session = welcomed()
    assert session.feed(text(frames.ping(NOW, reply_to_nonce=frames.new_nonce(16)))) == []
    assert sent(session) == []
