"""The four-phase HELLO of MWP 0.1 (PROTOCOL §6.3, DESIGN §5) as pure state machines.

No I/O and no clock: the caller passes every received frame (a parsed
:class:`~mwportal.protocol.frames.Frame` or its document) and ``now``, and
sends what comes back.

Server::

    hs = ServerHandshake(resolve_key)
    send(hs.receive_client_init(frame, now))            # HELLO/server_challenge
    auth = hs.receive_client_response(frame, now)       # Authenticated, or ProtocolError
    send(hs.accept_frame(token, epoch, expires_at))     # HELLO/server_accept

Client::

    hc = ClientHandshake(agent_id, key)
    send(hc.start())                                    # HELLO/client_init
    send(hc.receive_challenge(frame))                   # HELLO/client_response
    token, epoch, expires_at = hc.receive_accept(frame)

The challenge (DESIGN §5) is the base64url of the JCS bytes of the transcript
``{agentId, keyId, clientNonce, serverNonce, protocolVersion, challengeId,
expiresAt}``; the client signs exactly those decoded bytes with Ed25519. The
reference implementation (python-sdk) builds the same seven-member
transcript and its client signs the decoded ``challenge`` the same way, so
either side interoperates with it.

Refusals (every one a ``ProtocolError``; the handshake is over after any of
them, further frames get ``PROTOCOL_VIOLATION``):

- ``PROTOCOL_VIOLATION``: a frame other than the one the phase expects, a
  handshake step out of order, an echoed nonce, Agent ID or key ID that is not
  the one of this handshake (``details.reason`` says which); on the client, a
  challenge whose transcript is not this handshake's.
- ``UNSUPPORTED_VERSION``: a ``client_init`` whose ``supportedVersions``
  lacks ``"0.1"`` (``frames.parse`` refuses it already; checked again for
  documents that did not come through it).
- ``AUTH_INVALID_SIGNATURE``: the signature does not verify over the
  challenge, the key ID is unknown or its evidence unavailable, the key is
  bound to another Principal or not valid now, or the challenge expired. One
  message for all (§6.4's rule that a peer cannot tell key-resolution
  failures from signature failures); the reason goes to the protected
  diagnostics (``verification.record_diagnostic``, profile ``hello``).

Refusals of the server side carry ``fatal: true``: the caller sends the ERROR
frame and closes the connection.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from fractions import Fraction
from typing import Any, NamedTuple, Protocol

from . import ed25519, frames, jcs, strictjson
from .errors import ErrorCode, ProtocolError, occurred_at_text
from .registry import ALGORITHM, KeyBinding, Principal, key_valid_at
from .values import Timestamp, TimestampError, b64url_decode, b64url_encode, parse_timestamp
from .verification import Diagnostic, record_diagnostic

__all__ = [
    "DIAGNOSTIC_PROFILE",
    "SUPPORTED_VERSIONS",
    "Authenticated",
    "Challenge",
    "ClientHandshake",
    "Phase",
    "ServerHandshake",
    "Session",
    "SigningKey",
    "issue_challenge",
    "peer_error",
    "verify_response",
]

SUPPORTED_VERSIONS = (frames.PROTOCOL_VERSION,)
DIAGNOSTIC_PROFILE = "hello"
SERVER_NONCE_BYTES = 32
CLIENT_NONCE_BYTES = 32
# A nonce shorter than this is not unpredictable enough to be one (128 bits).
MIN_NONCE_BYTES = 16
_INVALID_SIGNATURE = "the HELLO challenge signature could not be verified"

Frameish = frames.Frame | Mapping[str, Any]


class SigningKey(Protocol):
    """What the client needs of a key: ``mwportal.protocol.command.Key`` has both."""

    @property
    def key_id(self) -> str: ...

    @property
    def seed(self) -> bytes: ...


class Phase(StrEnum):
    AWAIT_INIT = "await-init"
    AWAIT_RESPONSE = "await-response"
    AUTHENTICATED = "authenticated"
    ACCEPTED = "accepted"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Challenge:
    """One issued challenge: the transcript and the exact bytes the client signs."""

    agent_id: str
    key_id: str
    client_nonce: str
    server_nonce: str
    challenge_id: str
    expires_at: datetime
    transcript: bytes
    protocol_version: str = frames.PROTOCOL_VERSION

    @property
    def encoded(self) -> str:
        """The frame's ``challenge`` member."""
        return b64url_encode(self.transcript)

    def frame(self) -> dict[str, Any]:
        """The ``HELLO/server_challenge`` frame carrying it."""
        return frames.hello_server_challenge(self.client_nonce, self.server_nonce, self.encoded, self.protocol_version)

    @classmethod
    def from_transcript(cls, transcript: bytes) -> Challenge:
        """The challenge whose transcript these are (a REST binding keeps only
        the bytes between its two requests). ``ValueError`` if they are not one."""
        try:
            members = _transcript_members(transcript)
            expires = _datetime(parse_timestamp(members["expiresAt"]))
        except (strictjson.StrictJSONError, KeyError, TypeError, TimestampError) as exc:
            raise ValueError(f"not a HELLO challenge transcript: {exc}") from None
        return cls(
            agent_id=members["agentId"],
            key_id=members["keyId"],
            client_nonce=members["clientNonce"],
            server_nonce=members["serverNonce"],
            challenge_id=members["challengeId"],
            expires_at=expires,
            transcript=transcript,
            protocol_version=members["protocolVersion"],
        )


_TRANSCRIPT_MEMBERS = ("agentId", "keyId", "clientNonce", "serverNonce", "protocolVersion", "challengeId", "expiresAt")


def _transcript_members(transcript: bytes) -> dict[str, str]:
    value = strictjson.parse(transcript)
    if not isinstance(value, dict) or set(value) != set(_TRANSCRIPT_MEMBERS):
        raise TypeError("the transcript is not an object of the seven HELLO members")
    if not all(isinstance(v, str) for v in value.values()):
        raise TypeError("every transcript member is a string")
    return value


@dataclass(frozen=True, slots=True)
class Authenticated:
    """A client_response that proved possession of the Agent's key (§6.3).

    The caller now issues the session (a new Session Epoch, fencing every
    older one) and answers with :meth:`ServerHandshake.accept_frame`.
    """

    agent_id: str
    key_id: str
    binding: KeyBinding
    challenge_id: str
    protocol_version: str
    authenticated_at: datetime


class Session(NamedTuple):
    """What ``HELLO/server_accept`` grants the client."""

    session_token: str
    session_epoch: int
    expires_at: datetime


# --- helpers -----------------------------------------------------------------------------------


def _doc(frame: Frameish) -> dict[str, Any]:
    return frame.doc if isinstance(frame, frames.Frame) else dict(frame)


def _violation(
    reason: str, message: str, *, fatal: bool | None = True, related_frame_id: str | None = None, **details: Any
) -> ProtocolError:
    return ProtocolError(
        ErrorCode.PROTOCOL_VIOLATION,
        message,
        details={"reason": reason, **details},
        fatal=fatal,
        related_frame_id=related_frame_id,
    )


def _expect(frame: Frameish, phase: str, *, client: bool = False) -> dict[str, Any]:
    """The document of ``frame`` if it is a valid ``HELLO/<phase>``. On the
    client, a server's ERROR frame is raised as the error it states."""
    doc = _doc(frame)
    if client and doc.get("frameType") == "ERROR" and isinstance(doc.get("error"), dict):
        raise peer_error(doc["error"])
    if doc.get("frameType") != "HELLO" or doc.get("phase") != phase:
        got = f"{doc.get('frameType')}/{doc.get('phase')}" if doc.get("frameType") == "HELLO" else doc.get("frameType")
        raise _violation(
            "unexpected-frame",
            f"expected HELLO/{phase}, not {got}",
            fatal=None if client else True,
            related_frame_id=frames.usable_id(doc.get("frameId")),
            expected=f"HELLO/{phase}",
        )
    if not isinstance(frame, frames.Frame):
        frames.check(doc)
    return doc


def peer_error(document: Mapping[str, Any]) -> ProtocolError:
    """The ``ProtocolError`` a peer's error document states (a client reading ERROR)."""
    try:
        code = ErrorCode(str(document.get("code")))
    except ValueError:
        code = ErrorCode.PROTOCOL_VIOLATION
    details = document.get("details")
    retry = document.get("retryAfterMs")
    return ProtocolError(
        code,
        str(document.get("message") or code),
        details=dict(details) if isinstance(details, dict) else None,
        retry_after_ms=retry if isinstance(retry, int) and not isinstance(retry, bool) and retry >= 0 else None,
        fatal=document.get("fatal") if isinstance(document.get("fatal"), bool) else None,
    )


def _timestamp(now: datetime) -> Timestamp:
    """``now`` as an exact §2 instant (microseconds kept)."""
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime")
    utc = now.astimezone(UTC)
    whole = int((utc.replace(microsecond=0) - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds())
    text = utc.strftime("%Y-%m-%dT%H:%M:%S") + f".{utc.microsecond:06d}Z"
    return Timestamp(text, (whole, Fraction(utc.microsecond, 1_000_000)))


def _datetime(stamp: Timestamp) -> datetime:
    seconds, fraction = stamp.instant
    return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=int(fraction * 1_000_000))


def _nonce(given: bytes | None, size: int) -> str:
    raw = secrets.token_bytes(size) if given is None else given
    if len(raw) < MIN_NONCE_BYTES:
        raise ValueError(f"a nonce is at least {MIN_NONCE_BYTES} bytes")
    return b64url_encode(raw)


# --- the server --------------------------------------------------------------------------------


def issue_challenge(
    client_init: Frameish, now: datetime, *, server_nonce: bytes | None = None, ttl: float = 60
) -> Challenge:
    """The challenge answering a ``HELLO/client_init`` (phase 2 of §6.3).

    The key is not looked up yet: an unknown key ID is refused at
    :func:`verify_response` with the same answer as a wrong signature.
    """
    doc = _expect(client_init, "client_init")
    if frames.PROTOCOL_VERSION not in doc["supportedVersions"]:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_VERSION,
            f"this server speaks MWP {frames.PROTOCOL_VERSION} only",
            details={"reason": "unsupported-version", "supportedVersions": list(SUPPORTED_VERSIONS)},
            related_frame_id=doc["frameId"],
            fatal=True,
        )
    expires_text = occurred_at_text(now + timedelta(seconds=ttl))
    members = {
        "agentId": doc["agentId"],
        "keyId": doc["keyId"],
        "clientNonce": doc["clientNonce"],
        "serverNonce": _nonce(server_nonce, SERVER_NONCE_BYTES),
        "protocolVersion": frames.PROTOCOL_VERSION,
        "challengeId": frames.new_id(),
        "expiresAt": expires_text,
    }
    return Challenge(
        agent_id=members["agentId"],
        key_id=members["keyId"],
        client_nonce=members["clientNonce"],
        server_nonce=members["serverNonce"],
        challenge_id=members["challengeId"],
        expires_at=_datetime(parse_timestamp(expires_text)),
        transcript=jcs.canonicalize(members),
    )


def verify_response(
    challenge: Challenge,
    client_response: Frameish,
    now: datetime,
    resolve_key: Callable[[str], KeyBinding],
    *,
    organization_id: str = "",
) -> Authenticated:
    """Check a ``HELLO/client_response`` against ``challenge`` (phase 3 of §6.3).

    ``resolve_key(key_id)`` returns the Registry's binding or raises
    (``KeyResolutionError``, or anything else: evidence that cannot be had
    fails closed, as in §6.4 stage 4).
    """
    doc = _expect(client_response, "client_response")
    echoed = {
        "agentId": challenge.agent_id,
        "keyId": challenge.key_id,
        "clientNonce": challenge.client_nonce,
        "serverNonce": challenge.server_nonce,
    }
    for member, expected in echoed.items():
        if doc[member] != expected:
            raise _violation(
                "transcript-mismatch",
                f"{member} is not the one of this handshake's challenge",
                field=f"/{member}",
                related_frame_id=doc["frameId"],
            )

    def refuse(reason: str) -> ProtocolError:
        record_diagnostic(
            Diagnostic(
                profile=DIAGNOSTIC_PROFILE,
                stage="client_response",
                reason=reason,
                organization_id=organization_id,
                key_id=challenge.key_id,
            )
        )
        return ProtocolError(
            ErrorCode.AUTH_INVALID_SIGNATURE, _INVALID_SIGNATURE, related_frame_id=doc["frameId"], fatal=True
        )

    if now >= challenge.expires_at:
        raise refuse("challenge-expired")
    try:
        signature = b64url_decode(doc["challengeSignature"])
        ed25519.check_signature(signature)
    except ValueError as exc:  # Ed25519EncodingError is one
        raise refuse(f"signature-encoding: {exc}") from None
    try:
        binding = resolve_key(challenge.key_id)
    except Exception as exc:  # unknown key and unavailable evidence alike: refuse (§6.4 stage 4)
        raise refuse(f"key-resolution: {getattr(exc, 'reason', type(exc).__name__)}") from None
    if binding.key_id != challenge.key_id or binding.algorithm != ALGORITHM:
        raise refuse("resolved-binding-mismatch")
    fault = ed25519.public_key_fault(binding.public_key)
    if fault is not None:
        raise refuse(fault)
    if binding.principal != Principal("agent", challenge.agent_id):
        raise refuse("key-of-another-principal")
    if not key_valid_at(binding, _timestamp(now)):
        raise refuse("key-not-valid-now")
    if not ed25519.verify(binding.public_key, challenge.transcript, signature):
        raise refuse("equation-mismatch")
    return Authenticated(
        agent_id=challenge.agent_id,
        key_id=challenge.key_id,
        binding=binding,
        challenge_id=challenge.challenge_id,
        protocol_version=challenge.protocol_version,
        authenticated_at=now,
    )


class ServerHandshake:
    """One connection's HELLO, server side: ``receive_client_init``, then
    ``receive_client_response``, then ``accept_frame``, once each, in order."""

    def __init__(
        self,
        resolve_key: Callable[[str], KeyBinding],
        *,
        server_nonce_bytes: bytes | None = None,
        challenge_ttl: float = 60,
        organization_id: str = "",
    ) -> None:
        """``server_nonce_bytes`` fixes the server nonce (tests); by default
        each challenge gets 32 fresh random bytes."""
        self._resolve_key = resolve_key
        self._server_nonce = server_nonce_bytes
        self._ttl = challenge_ttl
        self._organization_id = organization_id
        self.phase = Phase.AWAIT_INIT
        self.challenge: Challenge | None = None
        self.authenticated: Authenticated | None = None

    def _step(self, expected: Phase, what: str) -> None:
        if self.phase is not expected:
            failed = self.phase is Phase.FAILED
            self.phase = Phase.FAILED
            raise _violation(
                "handshake-failed" if failed else "hello-out-of-order",
                f"{what} is not expected now (handshake {'already refused' if failed else self.phase.value})",
            )

    def receive_client_init(self, frame: Frameish, now: datetime) -> dict[str, Any]:
        """Phase 1 in, phase 2 out: the ``HELLO/server_challenge`` frame to send."""
        self._step(Phase.AWAIT_INIT, "HELLO/client_init")
        try:
            self.challenge = issue_challenge(frame, now, server_nonce=self._server_nonce, ttl=self._ttl)
        except ProtocolError:
            self.phase = Phase.FAILED
            raise
        self.phase = Phase.AWAIT_RESPONSE
        return self.challenge.frame()

    def receive_client_response(self, frame: Frameish, now: datetime) -> Authenticated:
        """Phase 3 in: the proven identity, or a refusal. The challenge is
        used up either way (one response per challenge)."""
        self._step(Phase.AWAIT_RESPONSE, "HELLO/client_response")
        assert self.challenge is not None
        self.phase = Phase.FAILED
        self.authenticated = verify_response(
            self.challenge, frame, now, self._resolve_key, organization_id=self._organization_id
        )
        self.phase = Phase.AUTHENTICATED
        return self.authenticated

    def accept_frame(self, session_token: str, session_epoch: int, expires_at: datetime) -> dict[str, Any]:
        """Phase 4 out: ``HELLO/server_accept`` with the session the caller issued."""
        self._step(Phase.AUTHENTICATED, "HELLO/server_accept")
        accepted = frames.hello_server_accept(session_token, session_epoch, expires_at)
        self.phase = Phase.ACCEPTED
        return accepted


# --- the client --------------------------------------------------------------------------------


class ClientHandshake:
    """One connection's HELLO, Agent side: ``start``, ``receive_challenge``, ``receive_accept``."""

    def __init__(self, agent_id: str, key: SigningKey, *, client_nonce_bytes: bytes | None = None) -> None:
        self.agent_id = agent_id
        self._key = key
        self.client_nonce = _nonce(client_nonce_bytes, CLIENT_NONCE_BYTES)
        self.phase = "new"
        self.session: Session | None = None

    def _step(self, expected: str, nxt: str, what: str) -> None:
        if self.phase != expected:
            raise _violation("hello-out-of-order", f"{what} is not expected now (handshake {self.phase})", fatal=None)
        self.phase = nxt

    def start(self) -> dict[str, Any]:
        """Phase 1 out: ``HELLO/client_init``."""
        self._step("new", "await-challenge", "start")
        return frames.hello_client_init(self.agent_id, self._key.key_id, self.client_nonce, SUPPORTED_VERSIONS)

    def receive_challenge(self, frame: Frameish) -> dict[str, Any]:
        """Phase 2 in, phase 3 out: ``HELLO/client_response`` signing the
        decoded challenge, once it is known to be this handshake's transcript
        (so the Agent never signs bytes that speak for another session)."""
        self._step("await-challenge", "failed", "HELLO/server_challenge")
        doc = _expect(frame, "server_challenge", client=True)
        if doc["selectedVersion"] not in SUPPORTED_VERSIONS:
            raise _violation("unsupported-version", "the server selected a version this client did not offer")
        if doc["clientNonce"] != self.client_nonce:
            raise _violation("transcript-mismatch", "the challenge echoes another clientNonce", field="/clientNonce")
        try:
            transcript = b64url_decode(doc["challenge"])
            members = _transcript_members(transcript)
        except (ValueError, TypeError) as exc:  # StrictJSONError is a ValueError
            raise _violation("challenge-not-a-transcript", f"the challenge is not a HELLO transcript: {exc}") from None
        ours = {
            "agentId": self.agent_id,
            "keyId": self._key.key_id,
            "clientNonce": self.client_nonce,
            "serverNonce": doc["serverNonce"],
            "protocolVersion": doc["selectedVersion"],
        }
        wrong = sorted(name for name, value in ours.items() if members[name] != value)
        if wrong:
            raise _violation(
                "transcript-mismatch", f"the challenge transcript names another {wrong[0]}", field=wrong[0]
            )
        signature = b64url_encode(ed25519.sign(self._key.seed, transcript))
        self.phase = "await-accept"
        return frames.hello_client_response(
            self.agent_id, self._key.key_id, self.client_nonce, doc["serverNonce"], signature
        )

    def receive_accept(self, frame: Frameish) -> Session:
        """Phase 4 in: the session token, the new Session Epoch and the token's expiry."""
        self._step("await-accept", "failed", "HELLO/server_accept")
        doc = _expect(frame, "server_accept", client=True)
        if doc["selectedVersion"] not in SUPPORTED_VERSIONS:
            raise _violation("unsupported-version", "the server selected a version this client did not offer")
        self.session = Session(doc["sessionToken"], doc["sessionEpoch"], _datetime(parse_timestamp(doc["expiresAt"])))
        self.phase = "accepted"
        return self.session
