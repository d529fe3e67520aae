"""The sans-I/O agent WebSocket session (DESIGN §4 frames; STYLE §7): no
sockets, no event loop; frames in, protocol events and frames out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mwworker import (
    BadFrame,
    ClientSession,
    Closed,
    CommandRefused,
    CursorTooOld,
    EventReceived,
    MembershipChanged,
    ReceiptReceived,
    ServerError,
    SessionClosed,
    SubscriptionRefused,
    Welcome,
)
from mwworker.errors import Refused
from mwworker.leases import lease_gone
from tests.worker.streams import ME, Event, World

GROUP = "11111111-1111-4111-8111-111111111111"
OTHER_GROUP = "22222222-2222-4222-8222-222222222222"
ACTION = "33333333-3333-4333-8333-333333333333"


def frames(session: ClientSession) -> list[dict[str, Any]]:
    return [json.loads(f) for f in session.frames_to_send()]


def welcomed() -> ClientSession:
    session = ClientSession()
    session.hello("token")
    session.frames_to_send()
    session.feed(json.dumps({"op": "welcome", "agent": ME, "session_epoch": 3}))
    return session


def envelope(action_id: str = ACTION) -> dict[str, Any]:
    return {"type": "work.start", "action_id": action_id, "actor": ME, "group": GROUP, "session_epoch": 3,
            "issued_at": "2026-11-29T10:00:00.000000Z", "body": {}, "signature": "sig"}  # fmt: skip


def test_hello_goes_first_and_everything_else_waits_for_welcome() -> None:
    session = ClientSession()
    session.hello("secret-token")
    session.subscribe(GROUP, after=41)
    session.ack({GROUP: 41})
    session.presence({"slots": 2, "free": 1})
    assert frames(session) == [{"op": "hello", "token": "secret-token"}]
    events = session.feed(json.dumps({"op": "welcome", "agent": ME, "session_epoch": 3}))
    assert events == [Welcome(ME, 3)]
    assert (session.state, session.agent, session.session_epoch) == ("open", ME, 3)
    assert frames(session) == [
        {"op": "subscribe", "group": GROUP, "after": 41, "ref": GROUP},
        {"op": "ack", "cursors": [{"group": GROUP, "sequence": 41}]},
        {"op": "presence", "capacity": {"slots": 2, "free": 1}},
    ]


def test_hello_is_sent_once() -> None:
    session = ClientSession()
    session.hello("t")
    with pytest.raises(ValueError, match="first frame"):
        session.hello("t")


def test_an_event_frame_becomes_an_event_received(small: tuple[World, list[Event]]) -> None:
    session = welcomed()
    event = small[1][3]
    assert session.feed(json.dumps({"op": "event", "event": event})) == [EventReceived(event["group"], event)]


def test_a_malformed_event_is_a_bad_frame_not_a_crash(small: tuple[World, list[Event]]) -> None:
    session = welcomed()
    event = dict(small[1][3])
    del event["prev_hash"]
    (bad,) = session.feed(json.dumps({"op": "event", "event": event}))
    assert isinstance(bad, BadFrame)
    assert "prev_hash" in bad.reason


@pytest.mark.parametrize(
    "text",
    ['{"op": "event"', "[1, 2]", '{"no_op": 1}', '{"op": "teleport"}', '{"op": "welcome"}', '{"a": 1, "a": 2}', "NaN"],
)
def test_unreadable_frames_are_reported_and_the_session_carries_on(text: str) -> None:
    session = welcomed()
    (bad,) = session.feed(text)
    assert isinstance(bad, BadFrame)
    assert session.state == "open"
    removed = {"op": "membership", "group": GROUP, "roles": [], "membership_epoch": 2, "active": False}
    assert session.feed(json.dumps(removed)) == [MembershipChanged(GROUP, (), 2, False)]


def test_ack_reports_only_cursors_that_moved() -> None:
    session = welcomed()
    session.ack({GROUP: 5, OTHER_GROUP: 0})
    session.ack({GROUP: 5})
    session.ack({GROUP: 7, OTHER_GROUP: 2})
    session.ack({})
    assert frames(session) == [
        {"op": "ack", "cursors": [{"group": GROUP, "sequence": 5}]},
        {"op": "ack", "cursors": [{"group": GROUP, "sequence": 7}, {"group": OTHER_GROUP, "sequence": 2}]},
    ]


def test_a_command_is_answered_by_its_receipt() -> None:
    session = welcomed()
    session.command(envelope())
    assert frames(session) == [{"op": "command", "envelope": envelope(), "ref": ACTION}]
    assert session.in_doubt() == [envelope()]
    receipt = {"action_id": ACTION, "actor": ME, "group": GROUP, "status": "accepted", "events": [], "replayed": False}
    assert session.feed(json.dumps({"op": "receipt", "receipt": receipt})) == [ReceiptReceived(ACTION, receipt)]
    assert session.in_doubt() == []


def test_a_refused_command_names_its_action_id() -> None:
    session = welcomed()
    session.command(envelope())
    refusal = {"op": "error", "code": "WORK_LEASE_EXPIRED", "message": "lease x is not current", "ref": ACTION}
    assert session.feed(json.dumps(refusal)) == [CommandRefused(ACTION, "WORK_LEASE_EXPIRED", "lease x is not current")]
    assert session.in_doubt() == []


def test_a_refusal_carries_the_reason_of_its_error_document() -> None:
    # §19 document inside the frame: details.reason is the finer case.
    session = welcomed()
    session.command(envelope())
    refusal = {"op": "error", "ref": ACTION, "code": "WORK_LEASE_EXPIRED", "message": "m", "retryable": False,
               "occurredAt": "2026-12-01T12:00:00.000Z", "details": {"reason": "stale_lease"}}  # fmt: skip
    assert session.feed(json.dumps(refusal)) == [CommandRefused(ACTION, "WORK_LEASE_EXPIRED", "m", "stale_lease")]


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


def test_a_refused_subscription_names_its_group() -> None:
    session = welcomed()
    session.subscribe(GROUP, after=0)
    refusal = {"op": "error", "code": "MEMBERSHIP_REQUIRED", "message": "not a member", "ref": GROUP}
    assert session.feed(json.dumps(refusal)) == [SubscriptionRefused(GROUP, "MEMBERSHIP_REQUIRED", "not a member")]
    assert session.subscriptions == {}


def test_other_errors_are_server_errors() -> None:
    session = welcomed()
    error = {
        "op": "error",
        "code": "SCHEMA_VALIDATION_FAILED",
        "message": "cursors: must be a non-empty list",
        "ref": None,
    }
    assert session.feed(json.dumps(error)) == [
        ServerError("SCHEMA_VALIDATION_FAILED", "cursors: must be a non-empty list", None)
    ]


def test_cursor_too_old_hands_over_the_snapshot_reference() -> None:
    session = welcomed()
    session.subscribe(GROUP, after=3)
    snapshot = {"group": GROUP, "sequence": 900, "hash": "ab" * 32, "signature": "s", "url": "/api/v1/..."}
    assert session.feed(json.dumps({"op": "cursor_too_old", "group": GROUP, "snapshot": snapshot})) == [
        CursorTooOld(GROUP, snapshot)
    ]
    assert GROUP not in session.subscriptions  # the server did not subscribe; subscribe again after restoring


def test_membership_frames_track_subscriptions() -> None:
    session = welcomed()
    session.subscribe(GROUP, after=0)
    added = {"op": "membership", "group": OTHER_GROUP, "roles": ["worker"], "membership_epoch": 1, "active": True}
    removed = {"op": "membership", "group": GROUP, "roles": [], "membership_epoch": 4, "active": False}
    assert session.feed(json.dumps(added)) == [MembershipChanged(OTHER_GROUP, ("worker",), 1, True)]
    assert session.feed(json.dumps(removed)) == [MembershipChanged(GROUP, (), 4, False)]
    assert session.subscriptions == {}


def test_a_closed_connection_ends_the_session_and_leaves_commands_in_doubt() -> None:
    session = welcomed()
    session.command(envelope())
    assert session.connection_lost(4001, "session replaced") == [
        Closed(code=4001, reason="session replaced", session_replaced=True, unauthenticated=False)
    ]
    assert session.frames_to_send() == []
    assert session.in_doubt() == [envelope()]  # resend with the same action_id: the receipt comes back (MWP-EVT-003)
    with pytest.raises(SessionClosed):
        session.subscribe(GROUP, after=0)


def test_an_unauthenticated_close_says_so() -> None:
    session = ClientSession()
    session.hello("stale")
    error = {"op": "error", "code": "AUTH_STALE_SESSION", "message": "the session token is not current", "ref": None}
    assert session.feed(json.dumps(error)) == [
        ServerError("AUTH_STALE_SESSION", "the session token is not current", None)
    ]
    (closed,) = session.connection_lost(4003)
    assert isinstance(closed, Closed) and closed.unauthenticated and not closed.session_replaced
