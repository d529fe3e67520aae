"""Command and Event documents as the kernel builds and reads them (PROTOCOL §15.1, §15.2, §6.4).

Django-free: a ``MemoryRegistry`` holds the keys.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mwportal.protocol import ErrorCode, ProtocolError, jcs
from mwportal.protocol.command import Key, build_command, read_command
from mwportal.protocol.eventdoc import build_event, verify_event
from mwportal.protocol.ids import bare, is_portal_id, urn
from mwportal.protocol.registry import MemoryRegistry, Principal
from mwportal.protocol.verification import VerificationFailed, verify_document, wire_error
from tests.protocol.normative import normative_problems, require_bundle

ORG = str(uuid.uuid4())
AGENT = str(uuid.uuid4())
SERVICE = str(uuid.uuid4())
GROUP = str(uuid.uuid4())
KEY = Key.generate(("agent", AGENT), ORG)
AUTHORITY = Key.generate(("service", SERVICE), ORG)


def _registry() -> MemoryRegistry:
    registry = MemoryRegistry(urn(ORG))
    since = "2020-01-01T00:00:00Z"
    registry.register(KEY.key_id, Principal("agent", urn(AGENT)), KEY.public_key, since)
    registry.register(AUTHORITY.key_id, Principal("service", urn(SERVICE)), AUTHORITY.public_key, since)
    return registry


def _command(**kw: Any) -> dict[str, Any]:
    return build_command(
        "work.start",
        actor=("agent", AGENT),
        key=KEY,
        payload={"workItemId": urn(uuid.uuid4()), "ownershipEpoch": 1},
        group=GROUP,
        session_epoch=3,
        membership_epoch=2,
        **kw,
    )


def test_a_built_command_is_a_normative_command_document_spec_15_1() -> None:
    require_bundle()
    doc = _command(expected_revision=4)
    assert normative_problems("command", doc) == []
    assert doc["signature"]["createdAt"] == doc["issuedAt"]
    assert all(is_portal_id(doc[m]) for m in ("actionId", "groupId", "correlationId"))


def test_a_built_command_verifies_and_reads_back_spec_6_4() -> None:
    doc = _command(expected_revision=4, work_item_id=str(uuid.uuid4()))
    verified = verify_document(json.dumps(doc).encode(), "command", _registry())
    command = read_command(verified.document, signing_hash=verified.signing_hash, key_id=verified.key_id)
    assert (command.kind, command.actor_type, command.actor, command.group) == ("work.start", "agent", AGENT, GROUP)
    assert (command.session_epoch, command.membership_epoch, command.expected_revision) == (3, 2, 4)
    assert command.action_urn == doc["actionId"] and command.signing_hash == jcs.signing_hash(doc)
    assert command.issued_at.tzinfo is UTC


def test_read_command_refuses_identifiers_the_portal_cannot_store_design_4() -> None:
    doc = _command()
    doc["groupId"] = "urn:example:group"
    with pytest.raises(ProtocolError) as info:
        read_command(doc, signing_hash=jcs.signing_hash(doc), key_id=None)
    assert info.value.code == ErrorCode.SCHEMA_VALIDATION_FAILED
    assert info.value.details == {"field": "groupId", "reason": "not-urn-uuid"}


@pytest.mark.parametrize(
    "value",
    ["urn:uuid:ABCDEF00-0000-4000-8000-000000000000", "urn:uuid:abc", "uuid:" + str(uuid.uuid4()), 7, None],
)
def test_bare_accepts_only_the_lower_case_urn_uuid_form_design_4(value: Any) -> None:
    with pytest.raises(ProtocolError):
        bare(value, "x")


def _event(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "event_id": urn(uuid.uuid4()),
        "kind": "work.started",
        "actor": {"type": "agent", "id": urn(AGENT)},
        "cause": {"type": "command", "id": urn(uuid.uuid4())},
        "correlation_id": urn(uuid.uuid4()),
        "occurred_at": datetime.now(UTC),
        "payload": {"workItemId": urn(uuid.uuid4())},
        "accepted_by": {"type": "service", "id": urn(SERVICE)},
        "key": AUTHORITY,
    }
    base.update(kw)
    return build_event(**base)


def test_a_group_event_is_signed_by_the_group_authority_and_verifies_spec_15_2() -> None:
    require_bundle()
    doc = _event(group_id=urn(GROUP), sequence=1, aggregate_revision=1, command_hash="sha256:" + "a" * 64)
    assert normative_problems("event", doc) == []
    assert verify_event(json.dumps(doc).encode(), _registry()).principal == Principal("service", urn(SERVICE))


def test_an_organization_scoped_event_has_no_group_position_spec_15_2() -> None:
    require_bundle()
    kind = "ext.missionweaveprotocol.identity.session_opened"
    doc = _event(kind=kind, actor={"type": "service", "id": urn(SERVICE)})
    assert not {"groupId", "sequence", "aggregateRevision"} & set(doc)
    assert normative_problems("event", doc) == []
    with pytest.raises(ValueError):
        _event(kind=kind, group_id=urn(GROUP), sequence=1, aggregate_revision=1)
    with pytest.raises(ValueError):
        _event()  # a Group Event without its position


def test_an_event_signed_by_an_agent_is_refused_spec_15_2() -> None:
    doc = _event(group_id=urn(GROUP), sequence=1, aggregate_revision=1, accepted_by={"type": "agent", "id": urn(AGENT)})
    doc = build_event(
        event_id=doc["eventId"], kind=doc["kind"], actor=doc["actor"], cause=doc["cause"],
        correlation_id=doc["correlationId"], occurred_at=doc["occurredAt"], payload=doc["payload"],
        accepted_by={"type": "agent", "id": urn(AGENT)}, key=KEY, group_id=urn(GROUP), sequence=1,
        aggregate_revision=1,
    )  # fmt: skip
    with pytest.raises(ProtocolError) as info:
        verify_event(json.dumps(doc).encode(), _registry())
    assert info.value.code == ErrorCode.AUTH_INVALID_SIGNATURE


_STAGE_CODES = {ErrorCode.PROTOCOL_VIOLATION, ErrorCode.SCHEMA_VALIDATION_FAILED, ErrorCode.AUTH_INVALID_SIGNATURE}
_SIGNED = _command()
_TEXT = json.dumps(_SIGNED)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=len(_TEXT) - 1), st.characters(codec="utf-8"))
def test_any_one_character_change_is_verified_or_refused_with_a_stage_code_spec_6_4(at: int, char: str) -> None:
    """No mutation of a signed Command crashes verification or passes with other content."""
    mutated = (_TEXT[:at] + char + _TEXT[at + 1 :]).encode("utf-8", "surrogatepass")
    try:
        verified = verify_document(mutated, "command", _registry())
    except VerificationFailed as failure:
        assert wire_error(failure).code in _STAGE_CODES
        return
    assert jcs.signing_hash(verified.document) == jcs.signing_hash(_SIGNED)
