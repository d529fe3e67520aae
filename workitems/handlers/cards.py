"""Agent Cards in assignments (PROTOCOL §6.1): capability eligibility, pins, and card upgrades.

- Eligibility: an Agent accepts work that requires a capability only when its
  current Organization-signed Agent Card (``active``) lists that capability
  with the Organization's verification Evidence, at a compatible version (the
  same major version, not older than the contract asks). What a Worker says of
  itself (its runtime's handlers, a Presence Record, a Coordinator's selection
  basis) earns no trust: ``AUTH_FORBIDDEN``, reason ``capability-not-verified``.
- Pins: the acceptance records the card version and the card's version of
  every required capability (``WorkItem.pins``, the ``work.offer.accepted``
  Event's ``capabilityPins``, the WorkItem document's ``owner``).
- Performance: each accepted result and each failure counts, in the Registry's
  ``CapabilityRecord`` of every capability version the assignment pinned, apart
  from the card and never as one global score.
- Upgrades: a new card version is compatible for an assignment when every
  pinned capability keeps its major version and still satisfies the contract;
  the work continues under its pins. Otherwise the active work is checkpointed
  (its Execution Lease is revoked, its last checkpoint stays the resume point)
  and its ownership fenced, so execution continues only after a new offer and
  a renewed acceptance under the new card.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from missions.authority import Emit, GroupHead, HandlerContext
from missions.models import AgentCard, CapabilityRecord
from missions.registry import accepted_hooks, card_registered_hooks
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import urn

from .. import state_machine as sm
from ..models import WorkItem
from ..wire import refuse
from .common import active_lease, emit, save
from .expiry import LEASE_REVOKED, OWNERSHIP_FENCED, _fence_owner, _revoke_lease

INCOMPATIBLE = "incompatible_card_upgrade"
_SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def _version(text: str) -> tuple[int, int, int]:
    found = _SEMVER.match(text)
    if found is None:
        return (0, 0, 0)
    return (int(found[1]), int(found[2]), int(found[3]))


def satisfies(held: str, required: str) -> bool:
    """A card's capability ``held`` serves a contract asking for ``required``: same major, not older."""
    have, want = _version(held), _version(required)
    return have[0] == want[0] and have >= want


def current_card(agent_id: str) -> AgentCard | None:
    return AgentCard.objects.filter(agent_id=agent_id).order_by("-version").first()


def verified(card: AgentCard | None, required: dict[str, str]) -> dict[str, str] | None:
    """The card's capability serving ``required`` (a capabilityRef), with verification Evidence; else None."""
    if card is None or (card.document or {}).get("status", "active") != "active":
        return None
    for held in card.capabilities:
        serves = held["id"] == required["id"] and satisfies(held["version"], required["version"])
        if serves and held.get("verifiedEvidence"):
            return {"id": held["id"], "version": held["version"]}
    return None


def pin(agent_id: str, contract: dict[str, Any]) -> dict[str, Any]:
    """What an acceptance pins (§6.1), or ``AUTH_FORBIDDEN`` when the Agent's current card does not
    carry a verified, compatible version of every capability the contract requires."""
    card = current_card(agent_id)
    pins = []
    for i, required in enumerate(contract["requiredCapabilities"]):
        held = verified(card, required)
        if held is None:
            raise refuse(
                ErrorCode.AUTH_FORBIDDEN,
                f"the Agent's current Agent Card carries no Organization-verified {required['id']} "
                f"compatible with {required['version']} (§6.1: a declared capability earns no trust)",
                field=f"/contract/requiredCapabilities/{i}",
                reason="capability-not-verified",
                capability=required,
            )
        pins.append(held)
    assert card is not None  # a contract requires at least one capability
    return {"agentId": urn(agent_id), "agentCardVersion": card.version, "capabilities": pins}


def _compatible(pins: dict[str, Any], capabilities: list[dict[str, Any]], contract: dict[str, Any]) -> bool:
    """Whether a new card keeps every pinned capability's major version and still serves the contract."""
    by_id = {c["id"]: c["version"] for c in capabilities}
    for pinned in pins["capabilities"]:
        held = by_id.get(pinned["id"])
        if held is None or _version(held)[0] != _version(pinned["version"])[0]:
            return False
    return all(
        any(c["id"] == r["id"] and satisfies(c["version"], r["version"]) for c in capabilities)
        for r in contract["requiredCapabilities"]
    )


def fence_incompatible_upgrade(
    ctx: HandlerContext, agent_id: str, version: int, capabilities: list[dict[str, Any]]
) -> list[tuple[GroupHead, list[Emit]]]:
    """``agent_card_register``: each WorkItem the Agent owns whose pins the new card breaks is
    checkpointed and fenced (§6.1). Groups are locked in ascending id order, then the WorkItems."""
    owned = WorkItem.objects.filter(
        owner_id=uuid.UUID(agent_id), state__in=(sm.QUEUED, sm.ACTIVE, sm.BLOCKED), pins__isnull=False
    ).values_list("group_id", "id", "pins", "contract")
    by_group: dict[str, list[str]] = {}
    for owned_group, owned_item, pins, contract in owned:
        if pins is not None and not _compatible(pins, capabilities, contract):
            by_group.setdefault(str(owned_group), []).append(str(owned_item))
    out: list[tuple[GroupHead, list[Emit]]] = []
    for group_id in sorted(by_group):
        head = ctx.lock_other_group(group_id)
        events: list[Emit] = []
        for item_id in sorted(by_group[group_id]):
            item = WorkItem.objects.select_for_update().get(id=item_id)
            if str(item.owner_id) != agent_id or item.state not in (sm.QUEUED, sm.ACTIVE, sm.BLOCKED):
                continue
            lease = active_lease(item) if item.state == sm.ACTIVE else None
            revoked = _revoke_lease(item, lease, INCOMPATIBLE, ctx.now) if lease is not None else None
            sm.check_transition(item.state, "expire.blocked_lease" if item.state == sm.BLOCKED else "expire.start_by")
            fenced = _fence_owner(item, INCOMPATIBLE)
            save(item, ctx.now)
            if revoked is not None:
                events.append(emit(LEASE_REVOKED, item, revoked))
            events.append(emit(OWNERSHIP_FENCED, item, {**fenced, "agentCardVersion": version}))
        out.append((head, events))
    return out


card_registered_hooks.append(fence_incompatible_upgrade)


# The outcomes a capability's performance record counts (§6.1), by the Command that decides them.
OUTCOMES = {"work.accept_result": "completed", "work.fail": "failed"}


def record_performance(ctx: HandlerContext, receipt: dict[str, Any]) -> None:
    """After ``work.accept_result`` or ``work.fail``: one more outcome for each pinned capability version."""
    outcome = OUTCOMES.get(ctx.command.kind)
    if outcome is None:
        return
    item = WorkItem.objects.filter(id=ctx.payload["workItemId"].removeprefix("urn:uuid:")).first()
    if item is None or not item.pins:
        return
    agent_id = item.pins["agentId"].removeprefix("urn:uuid:")
    for capability in item.pins["capabilities"]:
        record, _ = CapabilityRecord.objects.select_for_update().get_or_create(
            agent_id=agent_id,
            capability_id=capability["id"],
            capability_version=capability["version"],
            defaults={"updated_at": ctx.now},
        )
        setattr(record, outcome, getattr(record, outcome) + 1)
        record.updated_at = ctx.now
        record.save(update_fields=[outcome, "updated_at"])


accepted_hooks.append(record_performance)
