"""The definitions every MWP 0.1 object shares (identifiers, times, integers, actors, ...).

PROTOCOL §2 fixes most of them: identifiers are absolute ASCII URIs, times the
§2 timestamp profile, integers non-negative and JSON-safe, hashes lower-case
``sha256:`` hex, binary values canonical unpadded base64url.
"""

from __future__ import annotations

from .dsl import Schema, array, boolean, c, const, document, enum, number, obj, open_object, string

MAX_SAFE_INTEGER = 2**53 - 1

# The first part of a URI up to its scheme's colon; format "uri" checks the rest.
SCHEME_PREFIX = "^[A-Za-z][A-Za-z0-9+.-]*:"
# Any character that can never occur in a URI: non-ASCII, whitespace, controls,
# and the ASCII characters RFC 3986 leaves out.  A pattern test, unlike an
# end-anchored one, also catches a final line feed.
NOT_URI_CHARACTER = "[^A-Za-z0-9._~:/?#\\[\\]@!$&'()*+,;=%-]"
SEMVER = "^(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)(?:-[0-9A-Za-z.-]+)?(?:\\+[0-9A-Za-z.-]+)?$"
DOTTED_KIND = "^[a-z][a-z0-9_]*(?:\\.[a-z][a-z0-9_]*)+$"
EXTENSION_KIND = "^ext\\.[a-z0-9][a-z0-9_-]*(?:\\.[a-z0-9][a-z0-9_-]*){2,}$"
CAPABILITY_ID = "^[a-z0-9]+(?:[.-][a-z0-9]+)+$"
LOCAL_KEY = "^[a-zA-Z0-9][a-zA-Z0-9._-]{0,127}$"  # criterion and deliverable names
OPERATION = "^[a-z][a-z0-9._:-]*$"  # resource operations and membership scopes
MEDIA_TYPE = "^[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+$"
# ISO 8601 durations of days, hours, minutes and seconds; at least one part.
DURATION = "^P(?!$)(?:[0-9]+D)?(?:T(?=[0-9])(?:[0-9]+H)?(?:[0-9]+M)?(?:[0-9]+(?:\\.[0-9]+)?S)?)?$"

EVIDENCE_METHODS = (
    "artifact_integrity",
    "schema_validation",
    "deterministic_test",
    "business_rule",
    "reviewer_assessment",
    "human_review",
    "policy_check",
)


def extension_kind() -> Schema:
    """A Command or Event kind an Extension Profile defines (``ext.<org>.<area>.<name>``)."""
    return string(pattern=EXTENSION_KIND, max_length=160)


def capability_id() -> Schema:
    return string(pattern=CAPABILITY_ID, max_length=200)


def _safe_integer(minimum: int) -> Schema:
    return {"type": "integer", "minimum": minimum, "maximum": MAX_SAFE_INTEGER}


def _actor(kind: Schema) -> Schema:
    return obj({"type": kind, "id": c("id")})


def _budget() -> Schema:
    limits = (
        "modelTokenLimit",
        "toolCallLimit",
        "computeSecondsLimit",
        "wallClockSecondsLimit",
        "externalSideEffectLimit",
    )
    # At least one limit; a money limit only with its currency.
    return obj(
        {},
        {
            "currency": string(pattern="^[A-Z]{3}$"),
            "financialLimit": number(minimum=0),
            **{name: c("safeInteger") for name in limits},
        },
        anyOf=[{"required": ["financialLimit", "currency"]}, *({"required": [name]} for name in limits)],
    )


DEFINITIONS: dict[str, Schema] = {
    "protocolVersion": const("0.1"),
    "id": {
        **string(fmt="uri", pattern=SCHEME_PREFIX, max_length=512),
        "not": {"pattern": NOT_URI_CHARACTER},
    },
    "kind": string(pattern=DOTTED_KIND, max_length=160),
    "timestamp": string(fmt="date-time"),
    "safeInteger": _safe_integer(0),
    "positiveInteger": _safe_integer(1),
    "semver": string(pattern=SEMVER, max_length=128),
    "base64url": string(pattern="^[A-Za-z0-9_-]+$", min_length=2, max_length=4096),
    "sha256": string(pattern="^sha256:[0-9a-f]{64}$"),
    "duration": string(pattern=DURATION, max_length=64),
    "actor": _actor(enum("agent", "human", "service")),
    "agentActor": _actor(const("agent")),
    "humanActor": _actor(const("human")),
    "signature": obj(
        {
            "algorithm": const("Ed25519"),
            "keyId": c("id"),
            "createdAt": c("timestamp"),
            "value": c("base64url"),
        }
    ),
    "publicKey": obj(
        {
            "keyId": c("id"),
            "algorithm": const("Ed25519"),
            "publicKey": c("base64url"),
            "validFrom": c("timestamp"),
        },
        {"validUntil": c("timestamp"), "revokedAt": c("timestamp")},
    ),
    "capabilityRef": obj({"id": capability_id(), "version": c("semver")}),
    "budget": _budget(),
    "acceptanceCriterion": obj(
        {
            "criterionId": string(pattern=LOCAL_KEY),
            "description": string(min_length=1, max_length=4000),
            "evidenceRequired": array(enum(*EVIDENCE_METHODS), min_items=1, unique=True),
        }
    ),
    "resourceGrant": obj(
        {
            "resource": c("id"),
            "operations": array(string(pattern=OPERATION, max_length=128), min_items=1, unique=True),
        },
        {"constraints": open_object()},
    ),
    "classification": enum("public", "internal", "confidential", "restricted"),
    "extensions": {
        "type": "object",
        # Keyed by the Extension Profile's URI; each entry versioned and flagged critical or not.
        "propertyNames": c("id"),
        "additionalProperties": obj({"version": c("semver"), "critical": boolean(), "data": {}}),
    },
}

SCHEMA = document("common", {}, DEFINITIONS)
