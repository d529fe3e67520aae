"""The WebSocket frame layer of MWP 0.1 (PROTOCOL §17), sans I/O.

Exception tree: none of its own. Every refusal is a
:class:`~mwportal.protocol.errors.ProtocolError`; the connection survives it
(the caller answers with :func:`error_frame` and reads on) unless the caller
decides otherwise.

Reading: :func:`parse` takes one WebSocket text message (``str`` or UTF-8
``bytes``) and returns a :class:`Frame`, or refuses with

- ``PROTOCOL_VIOLATION`` when the message is not exactly one strict UTF-8
  JSON value (§17.1, §17.4: duplicate member names are refused here, before
  any schema), ``details.reason`` the strict parser's reason
  (``invalid-json``, ``duplicate-member``, ``invalid-utf8``, ...);
- ``UNSUPPORTED_VERSION`` when it names a ``protocolVersion`` other than
  ``"0.1"``, or is a ``HELLO/client_init`` whose ``supportedVersions`` lacks
  ``"0.1"`` (§21: version negotiation happens in the handshake, so this is
  told apart from a malformed frame);
- ``SCHEMA_VALIDATION_FAILED`` when it is not one of the ten frame shapes of
  ``websocket-frame.schema.json``: ``details.reason`` is ``not-an-object``,
  ``unknown-frame-type``, ``unknown-hello-phase`` or ``schema`` (then
  ``details.field`` is the JSON pointer of the first offending member and
  ``details.errors`` the first few messages); ``relatedFrameId`` is set
  whenever the frame's own ``frameId`` is a usable identifier.

A COMMAND or EVENT frame is checked as a frame only: its envelope members and
that ``command``/``event`` is an object. The nested document is the Signed
Document Verification Profile's business (§6.4: six stages, each with its own
code), so :attr:`Frame.nested` hands over its exact bytes as received, for
``accept_document`` on the server and ``verify_event`` in the Worker. Judging
it here as well would both repeat that work and answer with the wrong stage.

Writing: one builder per frame type, each returning a schema-valid dict with
``protocolVersion "0.1"``, a fresh ``frameId`` (``urn:uuid:``) and its
``frameType``; :func:`encode` makes the compact JSON text to send. A builder
given arguments that make an invalid frame raises ``ValueError``: that is a
bug in the caller, not the peer's fault.
"""

from __future__ import annotations

import functools
import json
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from json.decoder import scanstring  # type: ignore[attr-defined]  # public, untyped in typeshed
from typing import Any

import jsonschema_rs

from . import ids, schemas, strictjson, values
from .errors import ErrorCode, ProtocolError, occurred_at_text

__all__ = [
    "FRAME_TYPES",
    "HELLO_PHASES",
    "PROTOCOL_VERSION",
    "Frame",
    "ack",
    "backpressure_frame",
    "check",
    "command",
    "encode",
    "error_frame",
    "event",
    "event_text",
    "hello_client_init",
    "hello_client_response",
    "hello_server_accept",
    "hello_server_challenge",
    "new_id",
    "new_nonce",
    "parse",
    "ping",
    "refuse_binary",
    "subscribe",
    "usable_id",
]

PROTOCOL_VERSION = "0.1"

# frameType -> the websocket-frame.schema.json definition (HELLO has four, by phase).
FRAME_TYPES: dict[str, str] = {
    "SUBSCRIBE": "subscribe",
    "COMMAND": "command",
    "EVENT": "event",
    "ACK": "ack",
    "PING": "ping",
    "ERROR": "error",
}
HELLO_PHASES: dict[str, str] = {
    "client_init": "helloClientInit",
    "server_challenge": "helloServerChallenge",
    "client_response": "helloClientResponse",
    "server_accept": "helloServerAccept",
}
# The frames that wrap a signed document whose own verification comes later.
_NESTED = {"COMMAND": "command", "EVENT": "event"}
_MAX_REPORTED_ERRORS = 5
_MAX_ERROR_TEXT = 200


@dataclass(frozen=True, slots=True)
class Frame:
    """One received frame, valid as a frame.

    ``doc`` is the parsed frame. ``nested`` is, for COMMAND and EVENT, the
    exact UTF-8 bytes of the ``command``/``event`` member as they arrived
    (hand them to the six stages); ``None`` for every other frame type.
    """

    type: str
    phase: str | None
    doc: dict[str, Any]
    nested: bytes | None = None

    @property
    def frame_id(self) -> str:
        return str(self.doc["frameId"])


# --- reading ---------------------------------------------------------------------------------


@functools.cache
def _registry() -> Any:
    everything = (schemas.COMMON, *schemas.NAMES)
    return jsonschema_rs.Registry([(schemas.schema_id(n), schemas.json_schema(n)) for n in everything])


@functools.cache
def _definition_validator(definition: str) -> Any:
    """A validator for one definition of the kernel's websocket-frame schema.

    The verdict on a whole frame is always ``schemas.validate("websocket-frame")``'s;
    this one says *what* is wrong (a ``oneOf`` of ten only says "none
    matched"), and, for COMMAND and EVENT, checks the envelope alone.
    """
    schema = schemas.json_schema("websocket-frame")["$defs"][definition]
    if definition in _NESTED.values():
        schema["properties"][definition] = {"type": "object"}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return jsonschema_rs.Draft202012Validator(
        schema,
        formats=schemas.FORMATS,
        validate_formats=True,
        ignore_unknown_formats=False,
        registry=_registry(),
    )


def _pointer(path: Iterable[Any]) -> str:
    return "".join(f"/{str(part).replace('~', '~0').replace('/', '~1')}" for part in path)


def usable_id(value: Any) -> str | None:
    """``value`` if it can name a frame or an action in an error document, else None."""
    return value if isinstance(value, str) and len(value) <= 512 and values.is_absolute_uri(value) else None


def _schema_error(doc: Any, reason: str, message: str, field: str, errors: list[str] | None = None) -> ProtocolError:
    details: dict[str, Any] = {"reason": reason, "field": field}
    if errors:
        details["errors"] = errors[:_MAX_REPORTED_ERRORS]
    frame_id = usable_id(doc.get("frameId")) if isinstance(doc, dict) else None
    action_id = None
    if isinstance(doc, dict) and doc.get("frameType") == "COMMAND" and isinstance(doc.get("command"), dict):
        action_id = usable_id(doc["command"].get("actionId"))
    return ProtocolError(
        ErrorCode.SCHEMA_VALIDATION_FAILED,
        message,
        details=details,
        related_frame_id=frame_id,
        related_action_id=action_id,
    )


def _check_version(doc: dict[str, Any]) -> None:
    version = doc.get("protocolVersion")
    offered = doc.get("supportedVersions") if doc.get("phase") == "client_init" else None
    refused = isinstance(version, str) and version != PROTOCOL_VERSION
    if (
        isinstance(offered, list)
        and offered
        and all(isinstance(v, str) for v in offered)
        and PROTOCOL_VERSION not in offered
    ):
        refused = True
    if refused:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_VERSION,
            f"this server speaks MWP {PROTOCOL_VERSION} only",
            details={"reason": "unsupported-version", "supportedVersions": [PROTOCOL_VERSION]},
            related_frame_id=usable_id(doc.get("frameId")),
        )


def _definition(doc: Any) -> str:
    if not isinstance(doc, dict):
        raise _schema_error(doc, "not-an-object", "a frame is a JSON object", "/")
    frame_type = doc.get("frameType")
    if frame_type == "HELLO":
        phase = doc.get("phase")
        if not isinstance(phase, str) or phase not in HELLO_PHASES:
            raise _schema_error(doc, "unknown-hello-phase", f"no HELLO phase {phase!r} in MWP 0.1", "/phase")
        return HELLO_PHASES[phase]
    if not isinstance(frame_type, str) or frame_type not in FRAME_TYPES:
        raise _schema_error(doc, "unknown-frame-type", f"no frame type {frame_type!r} in MWP 0.1", "/frameType")
    return FRAME_TYPES[frame_type]


def check(doc: Any) -> str:
    """Check a frame document (already parsed) against the frame schema;
    returns its definition name (``helloClientInit``, ``ack``, ...).

    For callers holding a document rather than a message (a REST body that
    is a HELLO frame). Raises as :func:`parse` does, JSON errors aside.
    """
    if isinstance(doc, dict):
        _check_version(doc)
    definition = _definition(doc)
    nested = definition in _NESTED.values()
    if not nested and schemas.is_valid("websocket-frame", doc):
        return definition
    validator = _definition_validator(definition)
    errors: list[tuple[str, str]] = []
    try:
        for error in validator.iter_errors(doc):
            # A message quotes the offending value: keep the echo short.
            errors.append((_pointer(error.instance_path) or "/", error.message[:_MAX_ERROR_TEXT]))
            if len(errors) == _MAX_REPORTED_ERRORS:
                break
    except ValueError as exc:  # only a value that is no JSON at all (a non-string member name)
        errors.append(("/", f"not JSON data ({exc})"))
    if not errors:
        if nested:
            return definition
        # The kernel's oneOf refused a frame its own definition accepts: two
        # definitions matched, which the frame types' constants rule out.
        errors.append(("/", "does not match exactly one frame definition"))
    field, first = errors[0]
    message = f"the frame does not conform to its schema: {field}: {first}"
    raise _schema_error(doc, "schema", message, field, [f"{p}: {m}" for p, m in errors])


_WHITESPACE = re.compile(r"[ \t\n\r]*")
# Only finds where a value ends: nothing it builds is kept, so no number is converted.
_SKIM = json.JSONDecoder(parse_int=lambda _: 0, parse_float=lambda _: 0, object_pairs_hook=lambda _: None).raw_decode


def _member_span(text: str, name: str) -> tuple[int, int]:
    """Where the value of the top-level member ``name`` lies in ``text``, a
    JSON object already accepted by the strict parser (so well-formed, without
    duplicates, and holding ``name``)."""
    position = _WHITESPACE.match(text, 0).end() + 1  # type: ignore[union-attr]  # always matches
    while True:
        position = _WHITESPACE.match(text, position).end()  # type: ignore[union-attr]
        member, position = scanstring(text, position + 1)
        position = _WHITESPACE.match(text, position).end() + 1  # type: ignore[union-attr]  # past ":"
        start = _WHITESPACE.match(text, position).end()  # type: ignore[union-attr]
        _, end = _SKIM(text, start)
        if member == name:
            return start, end
        position = _WHITESPACE.match(text, end).end() + 1  # type: ignore[union-attr]  # past ","


def parse(data: str | bytes | bytearray | memoryview) -> Frame:
    """One received text message as a :class:`Frame`; ``ProtocolError`` otherwise (see module docstring)."""
    try:
        if isinstance(data, str):
            text = data
            # A str can hold a lone surrogate no UTF-8 message can: the nested
            # bytes must be exactly what a peer could have sent.
            text.encode("utf-8")
        else:
            raw = bytes(data)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise strictjson.StrictJSONError("invalid-utf8", f"not UTF-8: {exc.reason}", exc.start) from None
        doc = strictjson.parse_text(text)
    except UnicodeEncodeError:
        raise _violation("invalid-utf8", "the frame is not UTF-8 text") from None
    except strictjson.StrictJSONError as exc:
        raise _violation(exc.reason, f"the frame is not one strict JSON value: {exc}") from None
    definition = check(doc)
    frame_type = doc["frameType"]
    nested = None
    if definition in _NESTED.values():
        start, end = _member_span(text, definition)
        nested = text[start:end].encode("utf-8")
    return Frame(type=frame_type, phase=doc.get("phase"), doc=doc, nested=nested)


def _violation(reason: str, message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.PROTOCOL_VIOLATION, message, details={"reason": reason})


# --- writing ---------------------------------------------------------------------------------


def new_id() -> str:
    """A fresh ``urn:uuid:`` identifier (frame IDs, subscription IDs, challenge IDs)."""
    return ids.new_urn()


def new_nonce(size: int = 32) -> str:
    """``size`` unpredictable bytes as canonical base64url (§6.3 nonces, PING nonces)."""
    return values.b64url_encode(secrets.token_bytes(size))


def _head(frame_type: str) -> dict[str, Any]:
    return {"protocolVersion": PROTOCOL_VERSION, "frameId": new_id(), "frameType": frame_type}


def _time(when: datetime | None) -> str:
    return occurred_at_text(when if when is not None else datetime.now(UTC))


def _built(frame: dict[str, Any]) -> dict[str, Any]:
    try:
        check(frame)
    except ProtocolError as exc:
        raise ValueError(f"built an invalid {frame['frameType']} frame: {exc.message}") from None
    return frame


def hello_client_init(
    agent_id: str, key_id: str, client_nonce: str, supported_versions: Iterable[str] = (PROTOCOL_VERSION,)
) -> dict[str, Any]:
    return _built(
        {
            **_head("HELLO"),
            "phase": "client_init",
            "agentId": agent_id,
            "keyId": key_id,
            "clientNonce": client_nonce,
            "supportedVersions": list(supported_versions),
        }
    )


def hello_server_challenge(
    client_nonce: str, server_nonce: str, challenge: str, selected_version: str = PROTOCOL_VERSION
) -> dict[str, Any]:
    return _built(
        {
            **_head("HELLO"),
            "phase": "server_challenge",
            "selectedVersion": selected_version,
            "clientNonce": client_nonce,
            "serverNonce": server_nonce,
            "challenge": challenge,
        }
    )


def hello_client_response(
    agent_id: str, key_id: str, client_nonce: str, server_nonce: str, challenge_signature: str
) -> dict[str, Any]:
    return _built(
        {
            **_head("HELLO"),
            "phase": "client_response",
            "agentId": agent_id,
            "keyId": key_id,
            "clientNonce": client_nonce,
            "serverNonce": server_nonce,
            "challengeSignature": challenge_signature,
        }
    )


def hello_server_accept(
    session_token: str, session_epoch: int, expires_at: datetime, selected_version: str = PROTOCOL_VERSION
) -> dict[str, Any]:
    return _built(
        {
            **_head("HELLO"),
            "phase": "server_accept",
            "selectedVersion": selected_version,
            "sessionToken": session_token,
            "sessionEpoch": session_epoch,
            "expiresAt": occurred_at_text(expires_at),
        }
    )


def subscribe(
    groups: Iterable[tuple[str, int]],
    *,
    subscription_id: str | None = None,
    attention: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """SUBSCRIBE (§17.2): ``(groupId, afterSequence)`` pairs, an optional
    attention filter per Group ID."""
    entries = []
    for group_id, after_sequence in groups:
        entry: dict[str, Any] = {"groupId": group_id, "afterSequence": after_sequence}
        if attention and group_id in attention:
            entry["attention"] = dict(attention[group_id])
        entries.append(entry)
    return _built({**_head("SUBSCRIBE"), "subscriptionId": subscription_id or new_id(), "groups": entries})


def command(document: Mapping[str, Any]) -> dict[str, Any]:
    """COMMAND wrapping a signed Command document (§15.1), unchanged."""
    return _built({**_head("COMMAND"), "command": dict(document)})


def event(document: Mapping[str, Any]) -> dict[str, Any]:
    """EVENT wrapping a signed Event document (§15.2), unchanged."""
    return _built({**_head("EVENT"), "event": dict(document)})


def event_text(document: str | bytes) -> str:
    """The encoded EVENT frame around a signed Event document already held as
    JSON text (the stored JCS text): no parse and no re-encoding on the
    delivery path. The text must be one JSON object (it is not re-checked)."""
    body = document.decode("utf-8") if isinstance(document, bytes | bytearray) else document
    return encode(_head("EVENT"))[:-1] + ',"event":' + body + "}"


def ack(acknowledgements: Iterable[tuple[str, int]], sent_at: datetime | None = None) -> dict[str, Any]:
    """ACK (§16): ``(groupId, sequence)`` Cursors."""
    entries = [{"groupId": group_id, "sequence": sequence} for group_id, sequence in acknowledgements]
    return _built({**_head("ACK"), "acknowledgements": entries, "sentAt": _time(sent_at)})


def ping(
    sent_at: datetime | None = None,
    *,
    nonce: str | None = None,
    reply_to_nonce: str | None = None,
    presence: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """PING (§17.3); a reply echoes the peer's nonce in ``replyToNonce``; a
    Presence Record (§6.2) may ride along."""
    frame: dict[str, Any] = {**_head("PING"), "nonce": nonce or new_nonce(16), "sentAt": _time(sent_at)}
    if reply_to_nonce is not None:
        frame["replyToNonce"] = reply_to_nonce
    if presence is not None:
        frame["presence"] = dict(presence)
    return _built(frame)


def error_frame(
    err: ProtocolError,
    related_action_id: str | None = None,
    group_id: str | None = None,
    *,
    related_frame_id: str | None = None,
    occurred_at: datetime | None = None,
) -> dict[str, Any]:
    """ERROR wrapping the normative error document of ``err`` (§19).

    The identifiers given here (``urn:uuid:`` text) are added to the
    document; the error's own are kept where none is given.
    """
    document = err.document(occurred_at)
    extra = {"relatedActionId": related_action_id, "relatedFrameId": related_frame_id, "groupId": group_id}
    document.update({name: value for name, value in extra.items() if value is not None})
    return _built({**_head("ERROR"), "error": document})


def backpressure_frame(group_id: str, retry_after_ms: int, *, occurred_at: datetime | None = None) -> dict[str, Any]:
    """BACKPRESSURE (§17.3) for one Group: in MWP 0.1 an ERROR frame with the
    code ``BACKPRESSURE`` (retryable, §19), the paused Group and the wait in
    the document (``groupId``, ``retryAfterMs``) and in its ``details``."""
    err = ProtocolError(
        ErrorCode.BACKPRESSURE,
        "this Group's delivery is paused; retry after retryAfterMs",
        details={"groupId": group_id, "retryAfterMs": retry_after_ms},
        group_id=group_id,
        retry_after_ms=retry_after_ms,
    )
    return error_frame(err, occurred_at=occurred_at)


def refuse_binary(*, occurred_at: datetime | None = None) -> dict[str, Any]:
    """The answer to a binary WebSocket message (§17.1: v0.1 carries none)."""
    err = ProtocolError(
        ErrorCode.PROTOCOL_VIOLATION,
        "binary WebSocket messages carry nothing in MWP 0.1; send one JSON text frame",
        details={"reason": "binary-message"},
    )
    return error_frame(err, occurred_at=occurred_at)


def encode(frame: Mapping[str, Any]) -> str:
    """Compact JSON text of a frame (member order kept; §17.4 needs no canonical order on the wire).

    ERROR frames are written in ASCII: their details may echo a peer's text,
    and a lone surrogate there must not make the message unsendable.
    """
    return json.dumps(frame, separators=(",", ":"), ensure_ascii=frame.get("frameType") == "ERROR", allow_nan=False)
