"""The four-phase HELLO (PROTOCOL §6.3, DESIGN §5), server and client, without I/O.

Each refusal path of the server: wrong frame, wrong order, echoed nonces and
identifiers, unsupported version, an unknown key, a key of another Principal,
a revoked key, a signature by another key, an expired challenge, a replayed
response; and the client's own checks of the challenge it is asked to sign.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mwportal.protocol import command, ed25519, frames, jcs, strictjson, values
from mwportal.protocol.errors import ErrorCode, ProtocolError
from mwportal.protocol.handshake import (
    Challenge,
    ClientHandshake,
    Phase,
    ServerHandshake,
    Session,
    issue_challenge,
    peer_error,
    verify_response,
)
from mwportal.protocol.registry import KeyBinding, KeyResolutionError, MemoryRegistry, Principal
from mwportal.protocol.verification import Diagnostic, add_diagnostic_sink

from .test_frames import normative_errors

ORG = "urn:uuid:0b8f4fc0-0000-4000-8000-000000000000"
AGENT = "urn:uuid:0b8f4fc0-0000-4000-8000-000000000001"
OTHER_AGENT = "urn:uuid:0b8f4fc0-0000-4000-8000-000000000002"
NOW = datetime(2026, 12, 1, 15, 0, 0, tzinfo=UTC)
TOKEN = "session-token-" + "x" * 32


@dataclass(frozen=True)
class Key:
    key_id: str
    seed: bytes

    @property
    def public_key(self) -> bytes:
        return ed25519.public_key(self.seed)


KEY = Key("urn:uuid:0b8f4fc0-0000-4000-8000-0000000000a1", bytes(range(32)))
OTHER_KEY = Key("urn:uuid:0b8f4fc0-0000-4000-8000-0000000000a2", bytes(range(1, 33)))
UNREGISTERED = Key("urn:uuid:0b8f4fc0-0000-4000-8000-0000000000a3", bytes(range(2, 34)))


@pytest.fixture
def registry() -> MemoryRegistry:
    reg = MemoryRegistry(ORG)
    reg.register(KEY.key_id, Principal("agent", AGENT), KEY.public_key, "2026-01-01T00:00:00Z")
    reg.register(OTHER_KEY.key_id, Principal("agent", OTHER_AGENT), OTHER_KEY.public_key, "2026-01-01T00:00:00Z")
    return reg


@pytest.fixture
def diagnostics() -> Any:
    seen: list[Diagnostic] = []
    remove = add_diagnostic_sink(seen.append)
    yield seen
    remove()


def _wire(frame: dict[str, Any]) -> frames.Frame:
    """What the peer receives: the frame encoded, sent, and parsed."""
    assert normative_errors(frame) == []
    return frames.parse(frames.encode(frame).encode())


def _refused(call: Any, *args: Any) -> ProtocolError:
    with pytest.raises(ProtocolError) as raised:
        call(*args)
    return raised.value


def _to_response(server: ServerHandshake, client: ClientHandshake) -> dict[str, Any]:
    challenge = server.receive_client_init(_wire(client.start()), NOW)
    return client.receive_challenge(_wire(challenge))


def test_a_full_round_trip_opens_a_session_PROTOCOL_6_3(registry: MemoryRegistry) -> None:
    server = ServerHandshake(registry.resolve, organization_id=ORG)
    client = ClientHandshake(AGENT, KEY)
    response = _to_response(server, client)
    auth = server.receive_client_response(_wire(response), NOW + timedelta(seconds=5))
    assert (auth.agent_id, auth.key_id, auth.protocol_version) == (AGENT, KEY.key_id, "0.1")
    assert auth.binding.principal == Principal("agent", AGENT)
    accept = server.accept_frame(TOKEN, 4, NOW + timedelta(minutes=15))
    session = client.receive_accept(_wire(accept))
    assert session == Session(TOKEN, 4, NOW + timedelta(minutes=15))
    token, epoch, expires_at = session
    assert (token, epoch) == (TOKEN, 4)
    assert server.phase is Phase.ACCEPTED


def test_the_kernels_signing_key_drives_the_client_PROTOCOL_6_3(registry: MemoryRegistry) -> None:
    server = ServerHandshake(registry.resolve)
    client = ClientHandshake(AGENT, command.Key(KEY.key_id, KEY.seed))
    assert server.receive_client_response(_wire(_to_response(server, client)), NOW).key_id == KEY.key_id


def test_the_challenge_is_the_jcs_transcript_of_the_handshake_DESIGN_5(registry: MemoryRegistry) -> None:
    server = ServerHandshake(registry.resolve, server_nonce_bytes=b"s" * 32)
    client = ClientHandshake(AGENT, KEY, client_nonce_bytes=b"c" * 32)
    init = client.start()
    assert init["supportedVersions"] == ["0.1"]
    challenge = server.receive_client_init(_wire(init), NOW)
    transcript = values.b64url_decode(challenge["challenge"])
    members = strictjson.parse(transcript)
    assert jcs.canonicalize(members) == transcript
    assert members == {
        "agentId": AGENT,
        "keyId": KEY.key_id,
        "clientNonce": values.b64url_encode(b"c" * 32),
        "serverNonce": values.b64url_encode(b"s" * 32),
        "protocolVersion": "0.1",
        "challengeId": members["challengeId"],
        "expiresAt": "2026-12-01T15:01:00.000Z",
    }
    assert members["challengeId"].startswith("urn:uuid:")
    assert (challenge["clientNonce"], challenge["serverNonce"]) == (members["clientNonce"], members["serverNonce"])
    response = client.receive_challenge(_wire(challenge))
    # The client signed exactly the decoded challenge bytes.
    assert ed25519.verify(KEY.public_key, transcript, values.b64url_decode(response["challengeSignature"]))


def test_server_nonces_are_fresh_per_challenge_PROTOCOL_6_3(registry: MemoryRegistry) -> None:
    init = _wire(ClientHandshake(AGENT, KEY).start())
    first = issue_challenge(init, NOW)
    second = issue_challenge(init, NOW)
    assert first.server_nonce != second.server_nonce
    assert first.challenge_id != second.challenge_id
    assert len(values.b64url_decode(first.server_nonce)) == 32


def test_a_challenge_is_rebuilt_from_its_transcript(registry: MemoryRegistry) -> None:
    # A REST binding keeps only the bytes between its two requests (DESIGN §5).
    client = ClientHandshake(AGENT, KEY)
    challenge = issue_challenge(_wire(client.start()), NOW)
    assert Challenge.from_transcript(challenge.transcript) == challenge
    response = client.receive_challenge(_wire(challenge.frame()))
    auth = verify_response(Challenge.from_transcript(challenge.transcript), response, NOW, registry.resolve)
    assert auth.agent_id == AGENT
    with pytest.raises(ValueError, match="transcript"):
        Challenge.from_transcript(b'{"agentId": "x"}')


# --- refusals: order and shape ---


def test_a_frame_other_than_client_init_first_is_a_protocol_violation_PROTOCOL_6_3(registry: MemoryRegistry) -> None:
    server = ServerHandshake(registry.resolve)
    err = _refused(server.receive_client_init, _wire(frames.ping(NOW)), NOW)
    assert (err.code, err.details["reason"], err.fatal) == (ErrorCode.PROTOCOL_VIOLATION, "unexpected-frame", True)
    assert server.phase is Phase.FAILED
    # The handshake is over: even a good client_init is refused now.
    err = _refused(server.receive_client_init, _wire(ClientHandshake(AGENT, KEY).start()), NOW)
    assert err.details["reason"] == "handshake-failed"


def test_steps_out_of_order_are_protocol_violations_PROTOCOL_6_3(registry: MemoryRegistry) -> None:
    client = ClientHandshake(AGENT, KEY)
    early = ServerHandshake(registry.resolve)
    response = _to_response(ServerHandshake(registry.resolve), client)
    err = _refused(early.receive_client_response, _wire(response), NOW)
    assert (err.code, err.details["reason"]) == (ErrorCode.PROTOCOL_VIOLATION, "hello-out-of-order")
    twice = ServerHandshake(registry.resolve)
    init = _wire(ClientHandshake(AGENT, KEY).start())
    twice.receive_client_init(init, NOW)
    assert _refused(twice.receive_client_init, init, NOW).details["reason"] == "hello-out-of-order"
    unproven = ServerHandshake(registry.resolve)
    assert _refused(unproven.accept_frame, TOKEN, 1, NOW).code is ErrorCode.PROTOCOL_VIOLATION


def test_a_client_response_in_place_of_client_init_is_refused_PROTOCOL_6_3(registry: MemoryRegistry) -> None:
    server = ServerHandshake(registry.resolve)
    response = _to_response(ServerHandshake(registry.resolve), ClientHandshake(AGENT, KEY))
    err = _refused(server.receive_client_init, _wire(response), NOW)
    assert err.details == {"reason": "unexpected-frame", "expected": "HELLO/client_init"}


def test_a_client_init_without_version_0_1_is_unsupported_PROTOCOL_21(registry: MemoryRegistry) -> None:
    init = {**ClientHandshake(AGENT, KEY).start(), "supportedVersions": ["0.2"]}
    assert _refused(frames.parse, json.dumps(init)).code is ErrorCode.UNSUPPORTED_VERSION
    # A document that did not come through frames.parse is judged the same way.
    assert _refused(ServerHandshake(registry.resolve).receive_client_init, init, NOW).code in {
        ErrorCode.UNSUPPORTED_VERSION
    }


def test_an_unparsed_document_is_schema_checked_PROTOCOL_17_1(registry: MemoryRegistry) -> None:
    init = ClientHandshake(AGENT, KEY).start()
    del init["clientNonce"]
    err = _refused(ServerHandshake(registry.resolve).receive_client_init, init, NOW)
    assert err.code is ErrorCode.SCHEMA_VALIDATION_FAILED


@pytest.mark.parametrize("member", ["agentId", "keyId", "clientNonce", "serverNonce"])
def test_a_response_echoing_another_member_is_a_protocol_violation_PROTOCOL_6_3(
    registry: MemoryRegistry, member: str
) -> None:
    server = ServerHandshake(registry.resolve)
    response = _to_response(server, ClientHandshake(AGENT, KEY))
    replacement = {"agentId": OTHER_AGENT, "keyId": OTHER_KEY.key_id}.get(member, values.b64url_encode(b"z" * 32))
    err = _refused(server.receive_client_response, _wire({**response, member: replacement}), NOW)
    assert err.code is ErrorCode.PROTOCOL_VIOLATION
    assert err.details == {"reason": "transcript-mismatch", "field": f"/{member}"}
    assert server.phase is Phase.FAILED


# --- refusals: proof of possession ---


def _signature_refusal(server: ServerHandshake, response: dict[str, Any], now: datetime) -> ProtocolError:
    err = _refused(server.receive_client_response, _wire(response), now)
    assert err.code is ErrorCode.AUTH_INVALID_SIGNATURE
    assert err.fatal is True
    # One answer for every cause (§6.4): the wire cannot tell them apart.
    assert err.message == "the HELLO challenge signature could not be verified"
    assert not err.details
    assert server.phase is Phase.FAILED
    return err


def test_a_signature_by_another_key_fails_PROTOCOL_6_3(registry: MemoryRegistry, diagnostics: list[Any]) -> None:
    server = ServerHandshake(registry.resolve, organization_id=ORG)
    client = ClientHandshake(AGENT, KEY)
    challenge = server.receive_client_init(_wire(client.start()), NOW)
    response = client.receive_challenge(_wire(challenge))
    forged = ed25519.sign(OTHER_KEY.seed, values.b64url_decode(challenge["challenge"]))
    _signature_refusal(server, {**response, "challengeSignature": values.b64url_encode(forged)}, NOW)
    assert [(d.profile, d.reason, d.organization_id) for d in diagnostics] == [("hello", "equation-mismatch", ORG)]


def test_a_signature_over_other_bytes_fails_PROTOCOL_6_3(registry: MemoryRegistry, diagnostics: list[Any]) -> None:
    server = ServerHandshake(registry.resolve)
    response = _to_response(server, ClientHandshake(AGENT, KEY))
    other = values.b64url_encode(ed25519.sign(KEY.seed, b"something else"))
    _signature_refusal(server, {**response, "challengeSignature": other}, NOW)


def test_a_malformed_signature_fails_PROTOCOL_6_3(registry: MemoryRegistry, diagnostics: list[Any]) -> None:
    server = ServerHandshake(registry.resolve)
    response = _to_response(server, ClientHandshake(AGENT, KEY))
    _signature_refusal(server, {**response, "challengeSignature": values.b64url_encode(b"short")}, NOW)
    assert diagnostics[0].reason.startswith("signature-encoding")


def test_an_unknown_key_fails_like_a_bad_signature_PROTOCOL_6_4(
    registry: MemoryRegistry, diagnostics: list[Any]
) -> None:
    server = ServerHandshake(registry.resolve)
    _signature_refusal(server, _to_response(server, ClientHandshake(AGENT, UNREGISTERED)), NOW)
    assert diagnostics[0].reason == "key-resolution: unknown-key"


def test_unavailable_key_evidence_fails_closed_PROTOCOL_6_4(diagnostics: list[Any]) -> None:
    def unavailable(key_id: str) -> KeyBinding:
        raise ConnectionError("registry down")

    server = ServerHandshake(unavailable)
    _signature_refusal(server, _to_response(server, ClientHandshake(AGENT, KEY)), NOW)
    assert diagnostics[0].reason == "key-resolution: ConnectionError"


def test_a_key_of_another_principal_fails_PROTOCOL_6_3(registry: MemoryRegistry, diagnostics: list[Any]) -> None:
    # The Agent claims OTHER_AGENT's key as its own and signs with it.
    server = ServerHandshake(registry.resolve)
    _signature_refusal(server, _to_response(server, ClientHandshake(AGENT, OTHER_KEY)), NOW)
    assert diagnostics[0].reason == "key-of-another-principal"


def test_a_revoked_key_fails_PROTOCOL_6_4(registry: MemoryRegistry, diagnostics: list[Any]) -> None:
    registry.record_status(KEY.key_id, "2026-11-01T00:00:00Z", revoked_at="2026-11-01T00:00:00Z")
    server = ServerHandshake(registry.resolve)
    _signature_refusal(server, _to_response(server, ClientHandshake(AGENT, KEY)), NOW)
    assert diagnostics[0].reason == "key-not-valid-now"


def test_a_resolver_answering_for_another_key_fails(registry: MemoryRegistry, diagnostics: list[Any]) -> None:
    server = ServerHandshake(lambda key_id: registry.resolve(OTHER_KEY.key_id))
    _signature_refusal(server, _to_response(server, ClientHandshake(AGENT, KEY)), NOW)
    assert diagnostics[0].reason == "resolved-binding-mismatch"


def test_an_expired_challenge_fails_PROTOCOL_6_3(registry: MemoryRegistry, diagnostics: list[Any]) -> None:
    server = ServerHandshake(registry.resolve, challenge_ttl=30)
    response = _to_response(server, ClientHandshake(AGENT, KEY))
    _signature_refusal(server, response, NOW + timedelta(seconds=30))
    assert diagnostics[0].reason == "challenge-expired"
    fresh = ServerHandshake(registry.resolve, challenge_ttl=30)
    in_time = _to_response(fresh, ClientHandshake(AGENT, KEY))
    assert fresh.receive_client_response(_wire(in_time), NOW + timedelta(seconds=29, microseconds=999000))


def test_replaying_a_response_against_a_new_challenge_fails_PROTOCOL_6_3(
    registry: MemoryRegistry, diagnostics: list[Any]
) -> None:
    client = ClientHandshake(AGENT, KEY)
    first = ServerHandshake(registry.resolve)
    recorded = _to_response(first, client)
    first.receive_client_response(_wire(recorded), NOW)
    # An eavesdropper replays the recorded response on a connection of its own,
    # opened with the same client_init (same clientNonce).
    second = ServerHandshake(registry.resolve)
    second_challenge = second.receive_client_init(
        _wire(ClientHandshake(AGENT, KEY).start() | {"clientNonce": recorded["clientNonce"]}), NOW
    )
    err = _refused(second.receive_client_response, _wire(recorded), NOW)
    assert (err.code, err.details["field"]) == (ErrorCode.PROTOCOL_VIOLATION, "/serverNonce")
    # ... and with the new server nonce pasted in, the old signature no longer verifies.
    third = ServerHandshake(registry.resolve)
    third_challenge = third.receive_client_init(
        _wire(frames.hello_client_init(AGENT, KEY.key_id, recorded["clientNonce"])), NOW
    )
    assert third_challenge["serverNonce"] != second_challenge["serverNonce"]
    _signature_refusal(third, {**recorded, "serverNonce": third_challenge["serverNonce"]}, NOW)


def test_one_response_per_challenge_PROTOCOL_6_3(registry: MemoryRegistry) -> None:
    server = ServerHandshake(registry.resolve)
    response = _to_response(server, ClientHandshake(AGENT, KEY))
    server.receive_client_response(_wire(response), NOW)
    err = _refused(server.receive_client_response, _wire(response), NOW)
    assert err.details["reason"] == "hello-out-of-order"


def test_every_refusal_makes_a_valid_error_frame_PROTOCOL_19(registry: MemoryRegistry) -> None:
    server = ServerHandshake(registry.resolve)
    err = _refused(server.receive_client_init, _wire(frames.ping(NOW)), NOW)
    assert normative_errors(frames.error_frame(err)) == []
    server = ServerHandshake(registry.resolve)
    response = _to_response(server, ClientHandshake(AGENT, UNREGISTERED))
    err = _refused(server.receive_client_response, _wire(response), NOW)
    frame = frames.error_frame(err)
    assert normative_errors(frame) == []
    assert frame["error"]["relatedFrameId"] == response["frameId"]


# --- the client's checks ---


def _challenge_for(client: ClientHandshake, **transcript_changes: Any) -> dict[str, Any]:
    challenge = issue_challenge(_wire(client.start()), NOW)
    members = {**strictjson.parse(challenge.transcript), **transcript_changes}
    return frames.hello_server_challenge(
        challenge.client_nonce, challenge.server_nonce, values.b64url_encode(jcs.canonicalize(members))
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"agentId": OTHER_AGENT}, "agentId"),
        ({"keyId": OTHER_KEY.key_id}, "keyId"),
        ({"serverNonce": values.b64url_encode(b"q" * 32)}, "serverNonce"),
        ({"clientNonce": values.b64url_encode(b"q" * 32)}, "clientNonce"),
    ],
)
def test_the_client_signs_only_its_own_transcript_PROTOCOL_6_3(change: dict[str, str], field: str) -> None:
    client = ClientHandshake(AGENT, KEY)
    err = _refused(client.receive_challenge, _wire(_challenge_for(client, **change)))
    assert (err.code, err.details["field"]) == (ErrorCode.PROTOCOL_VIOLATION, field)


def test_the_client_refuses_a_challenge_that_is_no_transcript_PROTOCOL_6_3() -> None:
    client = ClientHandshake(AGENT, KEY)
    challenge = _challenge_for(client)
    opaque = {**challenge, "challenge": values.b64url_encode(b"random bytes to sign")}
    err = _refused(client.receive_challenge, _wire(opaque))
    assert err.details["reason"] == "challenge-not-a-transcript"


def test_the_client_refuses_another_client_nonce_PROTOCOL_6_3() -> None:
    client = ClientHandshake(AGENT, KEY)
    challenge = {**_challenge_for(client), "clientNonce": values.b64url_encode(b"q" * 32)}
    assert _refused(client.receive_challenge, _wire(challenge)).details["field"] == "/clientNonce"


def test_the_client_raises_the_servers_error_PROTOCOL_19() -> None:
    client = ClientHandshake(AGENT, KEY)
    client.start()
    refusal = ProtocolError(ErrorCode.AUTH_INVALID_SIGNATURE, "no", fatal=True)
    err = _refused(client.receive_challenge, _wire(frames.error_frame(refusal)))
    assert (err.code, err.fatal) == (ErrorCode.AUTH_INVALID_SIGNATURE, True)
    assert peer_error({"code": "NOT_A_CODE", "message": "?"}).code is ErrorCode.PROTOCOL_VIOLATION


def test_the_client_keeps_its_order_PROTOCOL_6_3(registry: MemoryRegistry) -> None:
    client = ClientHandshake(AGENT, KEY)
    server = ServerHandshake(registry.resolve)
    assert _refused(client.receive_challenge, _wire(frames.ping(NOW))).details["reason"] == "hello-out-of-order"
    challenge = server.receive_client_init(_wire(client.start()), NOW)
    assert _refused(client.start).details["reason"] == "hello-out-of-order"
    early_accept = frames.hello_server_accept(TOKEN, 1, NOW)
    assert _refused(client.receive_accept, _wire(early_accept)).details["reason"] == "hello-out-of-order"
    client2 = ClientHandshake(AGENT, KEY)
    client2.start()
    assert _refused(client2.receive_challenge, _wire(early_accept)).details["reason"] == "unexpected-frame"
    assert challenge


def test_resolve_key_raising_key_resolution_error_is_refused(diagnostics: list[Any]) -> None:
    def unknown(key_id: str) -> KeyBinding:
        raise KeyResolutionError("unknown-key")

    server = ServerHandshake(unknown)
    _signature_refusal(server, _to_response(server, ClientHandshake(AGENT, KEY)), NOW)
