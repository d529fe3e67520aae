"""Checks the Artifact, review and Context Package handlers share (PROTOCOL §6.4, §13).

Each raises ``ProtocolError`` with the normative code; a member is named by
its JSON Pointer in the Command (``/payload/artifact/groupId``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from missions.authority import HandlerContext
from missions.keyregistry import DjangoRegistry
from missions.models import Organization
from mwportal.protocol import ErrorCode, ProtocolError, jcs, malformed
from mwportal.protocol.ids import bare
from mwportal.protocol.values import parse_timestamp
from mwportal.protocol.verification import WIRE_MESSAGES, VerificationFailed, verify_document

from .models import Artifact, BlobGroup


def not_found(message: str, **details: Any) -> ProtocolError:
    """Something a Command names is absent inside its (visible) Group: INVALID_COMMAND, reason not_found."""
    return ProtocolError(ErrorCode.INVALID_COMMAND, message, details={**details, "reason": "not_found"})


def instant(text: str, field: str) -> datetime:
    """The moment of an RFC 3339 timestamp of the §2 profile (its offset applied)."""
    try:
        parse_timestamp(text)
        return datetime.fromisoformat(text.upper()).astimezone(UTC)
    except ValueError:
        raise malformed(field, "must be an RFC 3339 timestamp") from None


def organization_of(ctx: HandlerContext) -> Organization:
    return Organization.objects.get(id=ctx.group.organization_id)


def verify_signed(ctx: HandlerContext, document: dict[str, Any], profile: str, field: str) -> None:
    """The six stages of §6.4 over an embedded Signed Document (an Artifact
    manifest, Evidence, a Context Package), its key resolved in the Group's
    Organization's Registry. A failure is its stage's wire code, naming the
    member that carried the document; the stage and reason stay in the
    protected diagnostics."""
    try:
        verify_document(jcs.canonicalize(document), profile, DjangoRegistry(organization_of(ctx)))
    except VerificationFailed as exc:
        code = exc.wire_code
        raise ProtocolError(code, f"{field}: {WIRE_MESSAGES[code]}", details={"field": field}) from None


def same_id(value: str, expected: str, field: str, problem: str) -> None:
    """``value`` (a ``urn:uuid:`` member) names ``expected`` (a bare UUID); else SCHEMA_VALIDATION_FAILED."""
    if bare(value, field) != str(expected):
        raise malformed(field, problem)


def check_pinned_producer(pins: dict[str, Any] | None, producer: dict[str, Any], field: str) -> None:
    """§6.1: an Artifact records the Agent Card and capability versions that produced it, which are the
    ones the WorkItem's assignment pinned: ``agentCardVersion`` equal, ``capabilities`` the same set."""
    if pins is None:  # never after an acceptance, which every lease follows
        raise malformed(f"{field}/agentCardVersion", "the WorkItem has no pinned assignment")
    if producer["agentCardVersion"] != pins["agentCardVersion"]:
        raise malformed(
            f"{field}/agentCardVersion", f"the assignment pinned Agent Card version {pins['agentCardVersion']}"
        )
    named = sorted((c["id"], c["version"]) for c in producer["capabilities"])
    if named != sorted((c["id"], c["version"]) for c in pins["capabilities"]):
        shown = ", ".join(f"{c['id']}@{c['version']}" for c in pins["capabilities"])
        raise malformed(f"{field}/capabilities", f"the assignment pinned the capability versions {shown}")


def in_group(group_id: str, hashes: list[str]) -> set[str]:
    """Which of ``hashes`` (hex) this Group holds: stored into it or published in it."""
    linked = set(BlobGroup.objects.filter(group_id=group_id, blob_id__in=hashes).values_list("blob_id", flat=True))
    published = set(Artifact.objects.filter(group_id=group_id, sha256__in=hashes).values_list("sha256", flat=True))
    return linked | published
