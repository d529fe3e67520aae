"""Events as the Worker receives them (DESIGN §4): shape checks and the hash link.

``check_event(obj)`` accepts exactly the Event wire object ``{event_id, group,
sequence, type, aggregate{kind, id, revision}, actor, action_id, occurred_at,
body, prev_hash, hash}`` or raises ``MalformedEvent``.

``content_bytes(event)`` is the RFC 8785 form of the Event without ``hash``:
the bytes the Group Authority hashed (``mwportal.protocol.event_hash``) and
the bytes the store keeps in its inbox, from the kernel's one canonicalizer.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from mwportal.protocol import canonicalize
from mwportal.protocol.canonical import MAX_SAFE_INTEGER

from .errors import MalformedEvent

Event = dict[str, Any]

EVENT_MEMBERS = frozenset(
    {"event_id", "group", "sequence", "type", "aggregate", "actor", "action_id", "occurred_at", "body", "prev_hash",
     "hash"}
)  # fmt: skip
_HEX64 = re.compile(r"[0-9a-f]{64}")


def check_event(obj: Any) -> Event:
    """``obj`` when it has the Event shape of DESIGN §4, else ``MalformedEvent``.

    Only the shape: whether the Event continues its Group's chain is the
    store's check, and what its body means is the projection's.
    """
    if not isinstance(obj, dict):
        raise MalformedEvent("an Event is a JSON object")
    if set(obj) != EVENT_MEMBERS:
        missing = sorted(EVENT_MEMBERS - set(obj))
        extra = sorted(set(obj) - EVENT_MEMBERS)
        raise MalformedEvent(f"Event members: missing {missing}, unknown {extra}")
    for name in ("event_id", "group", "type", "actor", "action_id", "occurred_at"):
        if not isinstance(obj[name], str) or not obj[name]:
            raise MalformedEvent(f"{name}: must be a non-empty string")
    seq = obj["sequence"]
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise MalformedEvent("sequence: must be a positive integer")
    for name in ("prev_hash", "hash"):
        if not isinstance(obj[name], str) or not _HEX64.fullmatch(obj[name]):
            raise MalformedEvent(f"{name}: must be 64 lower-case hex digits")
    agg = obj["aggregate"]
    if not isinstance(agg, dict) or set(agg) != {"kind", "id", "revision"}:
        raise MalformedEvent("aggregate: must be {kind, id, revision}")
    if not isinstance(agg["kind"], str) or not isinstance(agg["id"], str):
        raise MalformedEvent("aggregate.kind and aggregate.id: must be strings")
    rev = agg["revision"]
    if isinstance(rev, bool) or not isinstance(rev, int) or rev < 0:
        raise MalformedEvent("aggregate.revision: must be a non-negative integer")
    if not isinstance(obj["body"], dict):
        raise MalformedEvent("body: must be an object")
    return obj


def _float_is_plain(value: float) -> bool:
    """A non-integral float whose RFC 8785 spelling parses back to the same
    float: fixed notation in both ECMAScript (from 1e-7) and here (below 1e16)."""
    return not value.is_integer() and 1e-4 <= abs(value) < 1e16


def _reads_back_unchanged(value: Any) -> bool:
    """True when parsing the RFC 8785 bytes of ``value`` gives back exactly its
    values and types: safe integers, plain floats, exact JSON types only.

    An integral float is not (``3.0`` is written ``3`` and reads back an
    ``int``), nor is anything a subclass might spell differently.
    """
    stack: list[Any] = [value]
    pop, push = stack.pop, stack.append
    while stack:
        item = pop()
        kind = type(item)
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            children = item.values()
        elif kind is list:
            children = item
        else:
            children = (item,)
        for child in children:
            ckind = type(child)
            if ckind is str or child is None or ckind is bool:
                continue
            if ckind is dict or ckind is list:
                push(child)
            elif ckind is int:
                if not -MAX_SAFE_INTEGER <= child <= MAX_SAFE_INTEGER:
                    return False
            elif ckind is not float or not _float_is_plain(child):
                return False
    return True


def content_bytes(event: Event) -> tuple[bytes, bool]:
    """The canonical Event without ``hash`` (what the chain hashes and the inbox
    keeps), and whether parsing those bytes gives back exactly the Event's
    values. It does not when RFC 8785 respells a number (``3.0`` is ``3``);
    then whoever folds the Event must fold the parsed bytes, so that a
    rebuild from the inbox folds the same values. The bytes are the kernel's
    one canonicalizer's (``mwportal.protocol.canonicalize``)."""
    content = {k: v for k, v in event.items() if k != "hash"}
    return canonicalize(content), _reads_back_unchanged(content)


def chain_hash(prev_hash: str, content: bytes) -> str:
    """``sha256(prev_hash || content)``: ``mwportal.protocol.event_hash`` given the content bytes."""
    return hashlib.sha256(prev_hash.encode("ascii") + content).hexdigest()


def text(value: Any) -> str:
    """The RFC 8785 text of a projection value: equal values are equal text,
    whichever way a number was spelled on the wire (``1.0`` and ``1``)."""
    return canonicalize(value).decode("utf-8")
