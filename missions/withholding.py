"""Withheld content: what every read path serves after a redaction tombstone (§7.4, §9.1).

A redaction never rewrites history: the redacted Event keeps its row, its
signed document and its place in the hash chain (the table refuses any
rewrite, ``missions.immutability``), so ``mwp verify-log`` still verifies the
stored log. A tombstone Event names what is withdrawn:

- ``message.redacted`` names a Message: its ``message.posted`` Event and every
  ``message.corrected`` Event of it are withheld;
- ``ext.mwportal.audit.event_redacted`` names one Event by sequence.

Every read path (the REST Event pages, the WebSocket replay and live reads,
the audit export, Context Package sources, the portal timeline) passes the
stored documents through ``served``. A withheld Event is served in its
*withheld form*: the same Event ID, Group, sequence, kind, actor, cause and
time, the payload without its content members, signed again by the Group
Authority over exactly that (so a reader's six-stage verification and the
catalogue's payload check still pass; Ed25519 is deterministic, so every read
serves the same bytes). A kind with no content-free form (``CONTENT``) is
served as stored: its tombstone is the only withdrawal (the Worker withholds
a redacted checkpoint itself).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from mwportal.protocol import jcs
from mwportal.protocol.verification import sign_document

from . import service_keys
from .feed import TOMBSTONES
from .models import GroupEvent

MESSAGE_REDACTED = "message.redacted"
EVENT_REDACTED = "ext.mwportal.audit.event_redacted"

MESSAGE_EVENTS = ("message.posted", "message.corrected")

# Kind -> the payload members that carry content; the rest of the payload is
# the Event's standing, which its withheld form keeps (the catalogue admits it).
CONTENT: dict[str, tuple[str, ...]] = {
    "message.posted": ("message",),
    "message.corrected": ("replacementContent", "message"),
}


def withheld_sequences(group_id: str, *, through: int | None = None) -> set[int]:
    """The sequences of ``group_id`` whose content a tombstone withdrew (tombstones up to ``through``)."""
    tombstones = GroupEvent.objects.filter(group_id=group_id, type__in=TOMBSTONES)
    if through is not None:
        tombstones = tombstones.filter(sequence__lte=through)
    sequences: set[int] = set()
    messages: list[str] = []
    for kind, body in tombstones.values_list("type", "body"):
        if kind == EVENT_REDACTED:
            sequences.add(body["sequence"])
        else:
            messages.append(body["messageId"])
    if messages:
        rows = GroupEvent.objects.filter(group_id=group_id, type__in=MESSAGE_EVENTS, body__messageId__in=messages)
        sequences.update(rows.values_list("sequence", flat=True))
    return sequences


def withheld_form(document: dict[str, Any], organization_id: str) -> dict[str, Any]:
    """The signed withheld form of a stored Event document (itself when its kind has none)."""
    members = CONTENT.get(document["kind"])
    if members is None:
        return document
    form = {k: v for k, v in document.items() if k != "signature"}
    form["payload"] = {k: v for k, v in document["payload"].items() if k not in members}
    key = service_keys.group_authority(organization_id)
    return sign_document(form, key_id=key.key_id, seed=key.seed, profile="event")


def withheld_text(text: str, organization_id: str) -> str:
    """``withheld_form`` of a stored JCS text, as JCS text."""
    return jcs.canonicalize(withheld_form(json.loads(text), organization_id)).decode("utf-8")


def served(group_id: str, organization_id: str, rows: Iterable[tuple[int, str, str]]) -> list[str]:
    """The JCS texts a read path serves for ``(sequence, stored text, kind)`` rows of one Group
    (a page without content kinds costs no query)."""
    rows = list(rows)
    if not any(kind in CONTENT for _, _, kind in rows):
        return [text for _, text, _ in rows]
    withheld = withheld_sequences(group_id)
    return [withheld_text(text, organization_id) if seq in withheld else text for seq, text, _ in rows]


def served_documents(group_id: str, organization_id: str, events: Iterable[GroupEvent]) -> list[dict[str, Any]]:
    """``served`` for ``GroupEvent`` rows of one Group, as documents (the row's ``as_wire()`` unless withheld)."""
    events = list(events)
    if not any(e.type in CONTENT for e in events):
        return [e.as_wire() for e in events]
    withheld = withheld_sequences(group_id)
    return [withheld_form(e.as_wire(), organization_id) if e.sequence in withheld else e.as_wire() for e in events]
