"""Handlers of the missions app's Commands, by the catalogue's kinds (DESIGN §2, PROTOCOL §15.1).

Each handler runs inside ``accept()`` (the Group row locked, or, for an
Organization-scoped kind, no Group at all); it reads ``ctx.payload``, which
the catalogue has validated, checks what the schema cannot, writes its
aggregate's rows and returns the Events to append, whose payloads the
catalogue validates again before they are signed.

- ``organization``: the Organization's bootstrap, its Principals and their
  Registry keys, the priority policy;
- ``sessions``: Agent Sessions and Agent Cards (Organization-scoped);
- ``missions``: ``mission.create`` and what ``mission.create_child`` shares;
- ``coordinator``: renewing and expiring the Coordinator lease (§7.2);
- ``memberships``: ``membership.change``, ``membership.end``;
- ``archive``: snapshots, archival, redaction tombstones.
"""

from __future__ import annotations

from . import archive, coordinator, memberships, missions, organization, sessions
from .missions import coordinator_of, found_mission, mission_document, mission_terms
from .sessions import card_document, token_digest

__all__ = [
    "archive",
    "card_document",
    "coordinator",
    "coordinator_of",
    "found_mission",
    "memberships",
    "mission_document",
    "mission_terms",
    "missions",
    "organization",
    "sessions",
    "token_digest",
]
