"""WebSocket frames (PROTOCOL §17): exactly one of the ten frame shapes.

Every frame carries ``protocolVersion``, ``frameId`` and ``frameType``; HELLO
frames add their handshake ``phase``.  COMMAND, EVENT and ERROR frames wrap the
normative object whole, PING may carry a presence record.
"""

from __future__ import annotations

from .dsl import Schema, array, boolean, c, const, document, ids, local, obj, one_of, ref, string

_FRAMES = (
    "helloClientInit",
    "helloServerChallenge",
    "helloClientResponse",
    "helloServerAccept",
    "subscribe",
    "command",
    "event",
    "ack",
    "ping",
    "error",
)


def _frame(frame_type: str, required: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    head = {"protocolVersion": c("protocolVersion"), "frameId": c("id"), "frameType": const(frame_type)}
    return obj({**head, **required}, optional)


def _hello(phase: str, members: dict[str, Schema]) -> Schema:
    return _frame("HELLO", {"phase": const(phase), **members})


_attention = obj(
    {},
    {
        "eventKinds": array(c("kind"), unique=True),
        "conversationIds": ids(),
        "workItemIds": ids(),
        "mentionsOnly": boolean(),
        "announcements": boolean(),
    },
)

DEFINITIONS: dict[str, Schema] = {
    "helloClientInit": _hello(
        "client_init",
        {
            "agentId": c("id"),
            "keyId": c("id"),
            "clientNonce": c("base64url"),
            "supportedVersions": array(c("protocolVersion"), min_items=1, unique=True),
        },
    ),
    "helloServerChallenge": _hello(
        "server_challenge",
        {
            "selectedVersion": c("protocolVersion"),
            "clientNonce": c("base64url"),
            "serverNonce": c("base64url"),
            "challenge": c("base64url"),
        },
    ),
    "helloClientResponse": _hello(
        "client_response",
        {
            "agentId": c("id"),
            "keyId": c("id"),
            "clientNonce": c("base64url"),
            "serverNonce": c("base64url"),
            "challengeSignature": c("base64url"),
        },
    ),
    "helloServerAccept": _hello(
        "server_accept",
        {
            "selectedVersion": c("protocolVersion"),
            "sessionToken": string(min_length=16, max_length=8192),
            "sessionEpoch": c("positiveInteger"),
            "expiresAt": c("timestamp"),
        },
    ),
    "subscribe": _frame(
        "SUBSCRIBE",
        {
            "subscriptionId": c("id"),
            "groups": array(
                obj({"groupId": c("id"), "afterSequence": c("safeInteger")}, {"attention": _attention}),
                min_items=1,
            ),
        },
    ),
    "command": _frame("COMMAND", {"command": ref("command")}),
    "event": _frame("EVENT", {"event": ref("event")}),
    "ack": _frame(
        "ACK",
        {
            "acknowledgements": array(obj({"groupId": c("id"), "sequence": c("safeInteger")}), min_items=1),
            "sentAt": c("timestamp"),
        },
    ),
    "ping": _frame(
        "PING",
        {"nonce": c("base64url"), "sentAt": c("timestamp")},
        {"replyToNonce": c("base64url"), "presence": ref("presence-record")},
    ),
    "error": _frame("ERROR", {"error": ref("error")}),
}

WEBSOCKET_FRAME = document("websocket-frame", one_of(*(local(name) for name in _FRAMES)), DEFINITIONS)

SCHEMAS: dict[str, Schema] = {"websocket-frame": WEBSOCKET_FRAME}
