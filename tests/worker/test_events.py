"""Event documents as the Worker reads them (PROTOCOL §6.4, §15.2; DESIGN §2, §6).

The Worker's fold reads kinds and payloads through the catalogue: every kind
it folds is one the catalogue defines, every generated payload is one the
catalogue's schema accepts, and every Event is verified against the Group
Authority's key before it is folded.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mwportal.protocol import catalogue
from mwworker import EventVerifier, KeyCache, MalformedEvent, SignatureRefused, projection
from mwworker.events import check_event
from tests.protocol.normative import normative_problems, require_bundle
from tests.worker.streams import ORG, Authority, Event, World


def test_every_kind_the_worker_folds_is_a_catalogue_kind_DESIGN_2() -> None:
    """One catalogue (issue 18 item 3): the fold has no kind of its own."""
    missing = sorted(k for k in projection.FOLDED_KINDS if not catalogue.is_event(k))
    assert missing == []


def test_a_fold_of_a_kind_the_catalogue_lacks_fails_at_import_DESIGN_2() -> None:
    """The check ``projection`` runs when it is imported: a folder for a kind the
    catalogue does not define (a drifted copy of a payload) stops the Worker."""
    projection.check_folded_kinds(projection.FOLDED_KINDS)
    with pytest.raises(RuntimeError, match="catalogue lacks.*work.made_up"):
        projection.check_folded_kinds(projection.FOLDED_KINDS | {"work.made_up"})


def test_the_generated_stream_covers_every_kind_the_worker_folds(medium: tuple[World, list[Event]]) -> None:
    seen = {e["kind"] for e in medium[1]}
    # Kinds the World does not drive: Mission terminal states and archival end a Group's stream.
    undriven = {"mission.follow_up.created", "mission.approved", "mission.cancelled", "mission.terminated",
                "mission.submitted_for_approval", "mission.changes_requested", "group.archived"}  # fmt: skip
    assert projection.FOLDED_KINDS - seen == undriven


def test_every_generated_payload_is_one_the_catalogue_accepts(medium: tuple[World, list[Event]]) -> None:
    """The stream generator builds payloads from the catalogue (no third copy of any body)."""
    for event in medium[1]:
        catalogue.validate_payload(event["kind"], event["payload"])


def test_every_generated_event_is_a_normative_event_document_spec_15_2(small: tuple[World, list[Event]]) -> None:
    require_bundle()
    for event in small[1][:200]:
        assert normative_problems("event", event) == [], event["kind"]


def test_every_generated_event_verifies_against_its_group_authority_key(small: tuple[World, list[Event]]) -> None:
    world, events = small
    verifier = world.authority.verifier()
    for event in events[:300]:
        assert verifier.verify(event) is event


def test_an_event_signed_by_another_key_is_refused_spec_6_4(small: tuple[World, list[Event]]) -> None:
    verifier = Authority.for_seed(12345).verifier()  # the same Organization, another Group Authority key
    with pytest.raises(SignatureRefused):
        verifier.verify(small[1][0])


@pytest.mark.parametrize("member", ["payload", "sequence", "kind", "acceptedBy", "occurredAt"])
def test_a_changed_member_breaks_the_signature_spec_6_4(small: tuple[World, list[Event]], member: str) -> None:
    world, events = small
    event = copy.deepcopy(events[5])
    event[member] = {
        "payload": {**event["payload"], "extra": 1},
        "sequence": event["sequence"] + 1,
        "kind": "message.posted",
        "acceptedBy": {"type": "service", "id": "urn:uuid:00000000-0000-4000-8000-0000000000ee"},
        "occurredAt": "2026-11-30T00:00:00Z",
    }[member]
    with pytest.raises(SignatureRefused):
        world.authority.verifier().verify(event)


def test_an_event_accepted_by_an_agent_is_refused(small: tuple[World, list[Event]]) -> None:
    """§15.2: the Group Authority, a service Principal, accepts and signs Events."""
    world, _ = small
    agent = Authority(ORG, {"type": "agent", "id": "urn:uuid:00000000-0000-4000-8000-0000000000ad"},
                      Authority.for_seed(77).key)  # fmt: skip
    from tests.worker.streams import Chain

    chain = Chain(seed=77)
    forged = chain.forge()
    forged = Chain.resign({**forged, "acceptedBy": agent.principal}, agent)
    keys = KeyCache(ORG)
    keys.add(agent.binding())
    with pytest.raises(SignatureRefused):
        EventVerifier(keys).verify(forged)


def test_the_key_cache_refuses_a_rebinding_of_a_known_key_id(small: tuple[World, list[Event]]) -> None:
    world, _ = small
    keys = KeyCache(ORG)
    keys.add(world.authority.binding())
    other = Authority.for_seed(4242)
    with pytest.raises(SignatureRefused, match="refused"):
        keys.add({**other.binding(), "keyId": world.authority.key.key_id})
    assert keys.knows(world.authority.key.key_id)
    assert not keys.knows(other.key.key_id)


def test_check_event_accepts_a_group_event(small: tuple[World, list[Event]]) -> None:
    for e in small[1][:50]:
        assert check_event(e) is e


@pytest.mark.parametrize(
    "breakage",
    [
        lambda e: e.pop("groupId"),  # an Organization-scoped Event has no place in a Group's log
        lambda e: e.update(sequence=0),
        lambda e: e.update(sequence=True),
        lambda e: e.update(payload=[]),
        lambda e: e.update(signature={}),
        lambda e: e.update(kind=""),
    ],
)
def test_check_event_refuses_what_is_not_a_group_event(small: tuple[World, list[Event]], breakage: Any) -> None:
    event = copy.deepcopy(small[1][0])
    breakage(event)
    with pytest.raises(MalformedEvent):
        check_event(event)
    with pytest.raises(MalformedEvent):
        check_event("not an object")
