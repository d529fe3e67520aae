"""The Context Package a replacement Coordinator receives (PROTOCOL §7.2, §13.3).

``mission.assign_coordinator`` calls ``replacement_package`` inside its
transaction: the Group Authority generates the package from authoritative
state as it stands before the appointment, and the Organization's context
packager Agent (``missions.service_keys.CONTEXT_PACKAGER``; the schema names
an ``agent`` as generator) signs it. It states:

- scope: the Mission and the whole Group (no ``workItemId``), the source
  Event range ``1..head`` (the Group's last sequence before the appointment)
  and, as ``eventIds``, every Event it cites: the Mission's first Event, each
  decision's source, and each WorkItem's latest Event;
- ``summary``: the Mission objective and definition of done, and every
  WorkItem with its state, owner, Ownership Epoch and revisions;
- ``decisions``: the Group's decision Events (``DECISIONS``), each citing its
  source Event ID;
- ``constraints``: the Mission's deadline, budget, approval policy and
  declared permissions;
- ``unresolvedQuestions``: open essential ambiguities (§10.1), blocked
  WorkItems and results awaiting review;
- ``artifactHashes``: every Artifact the Group holds.

The Coordinator's own latest Group-wide package, when there is one, is the
version before it (``previousContextPackageId``): §13.3's provenance. Its
content is not carried over; the new version restates authoritative state.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from conversations.models import Ambiguity
from missions.authority import HandlerContext
from missions.handlers.common import stamp
from missions.handlers.missions import FIRST_EVENTS, mission_document
from missions.handlers.organization import context_packager_agent
from missions.models import GroupEvent, Mission, Organization
from missions.service_keys import context_packager
from mwportal.protocol import schemas
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import sign_document
from workitems import state_machine as sm
from workitems.models import WorkItem

from .models import Artifact, BlobGroup, ContextPackage
from .store import wire_hash

SUMMARY_MAX = 50000
TEXT_MAX = 4000
WORK_ITEM_EVENTS = "work_item"


def _short(text: str, limit: int = TEXT_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _item(body: dict[str, Any]) -> str:
    return urn(str(body.get("workItemId", "")).removeprefix("urn:uuid:")) if body.get("workItemId") else "a WorkItem"


# The Events that record a decision, and how the package states each (its source Event is cited).
DECISIONS: dict[str, Callable[[dict[str, Any]], str]] = {
    "mission.created": lambda b: f"Mission created with objective: {b['mission']['objective']}",
    "mission.follow_up.created": lambda b: f"Follow-up Mission created with objective: {b['mission']['objective']}",
    "work.authorized": lambda b: (
        f"WorkItem {b['workItem']['workItemId']} authorized: {b['workItem']['contract']['goal']}"
    ),
    "work.contract.revised": lambda b: f"{_item(b)}'s Work Contract revised to revision {b.get('revision')}",
    "work.result.accepted": lambda b: f"{_item(b)}'s result accepted after review (verified)",
    "work.cancelled": lambda b: f"{_item(b)} cancelled: {b.get('reason', '')}",
    "mission.child.created": lambda b: (
        f"WorkItem {b['parentWorkItemId']} promoted to child Mission {b['childMissionId']}"
    ),
    "mission.submitted_for_approval": lambda b: (
        f"Mission revision {b.get('missionRevision')} submitted for approval with "
        f"{len(b.get('artifactHashes', []))} Artifact(s)"
    ),
    "mission.changes_requested": lambda b: (
        f"Changes requested (Mission revision {b.get('newRevision')}): {b.get('feedback', '')}"
    ),
    "approval.execution.granted": lambda b: f"Execution approved for: {', '.join(b.get('operations', []))}",
    "membership.delegation.granted": lambda b: "A Delegation Grant was issued",
    "policy.cooperation_override.granted": lambda b: (
        f"Cooperation override granted for policy {b['cooperationOverrideGrant'].get('policyName')}"
    ),
    "mission.coordinator.assigned": lambda b: (
        f"Coordinator {b['coordinatorId']} appointed at Coordinator Epoch {b['coordinatorEpoch']}"
    ),
}


def replacement_package(ctx: HandlerContext, mission: Mission, replacement_id: str) -> dict[str, Any]:
    """The signed, schema-valid Context Package of the Group for ``replacement_id`` (not yet stored)."""
    org = Organization.objects.get(id=ctx.group.organization_id)
    packager = context_packager_agent(org, ctx.now)
    key = context_packager(str(org.id))
    head = ctx.group.last_sequence
    events = GroupEvent.objects.filter(group_id=ctx.group.id, sequence__lte=head)
    decisions = [
        (str(event_id), sequence, DECISIONS[kind](body))
        for event_id, sequence, kind, body in events.filter(type__in=DECISIONS)
        .order_by("sequence")
        .values_list("event_id", "sequence", "type", "body")
    ]
    items = list(WorkItem.objects.filter(group_id=ctx.group.id).order_by("created_at", "id"))
    latest = _latest_events(ctx.group.id, head)
    cited = {event_id: sequence for event_id, sequence, _ in decisions}
    first = events.filter(type__in=FIRST_EVENTS).values_list("event_id", "sequence").first()
    if first is not None:
        cited[str(first[0])] = first[1]
    for item in items:
        if str(item.id) in latest:
            cited.update([latest[str(item.id)]])
    document = mission_document(ctx.group.id) or {}
    package_id = str(uuid.uuid4())
    doc: dict[str, Any] = {
        "contextPackageId": urn(package_id),
        "version": 1,
        "missionId": urn(str(mission.id)),
        "groupId": urn(ctx.group.id),
        "sourceEventRange": {
            "fromSequence": 1,
            "toSequence": head,
            "eventIds": [urn(e) for e, _ in sorted(cited.items(), key=lambda pair: pair[1])],
        },
        "artifactHashes": _held(ctx.group.id),
        "summary": _summary(mission, document, items, replacement_id, head),
        "decisions": [{"description": _short(text), "sourceEventIds": [urn(e)]} for e, _, text in decisions],
        "constraints": _constraints(mission, document),
        "unresolvedQuestions": _questions(ctx.group.id, items, head),
        "generatedBy": {"type": "agent", "id": urn(str(packager.id))},
        "generatedAt": stamp(ctx.now),
    }
    before = _previous(ctx.group.id)
    if before is not None:
        doc["version"], doc["previousContextPackageId"] = before.version + 1, urn(str(before.package))
    signed = sign_document(doc, key_id=key.key_id, seed=key.seed, profile="context-package")
    schemas.validate("context-package", signed)
    return signed


def _previous(group_id: str) -> ContextPackage | None:
    """The latest version of the Group's latest Group-wide package chain: the new version's predecessor."""
    last = ContextPackage.objects.filter(group_id=group_id, workitem__isnull=True).order_by("-published_at", "-id")
    newest = last.first()
    if newest is None:
        return None
    return ContextPackage.objects.filter(lineage=newest.lineage).order_by("-version").first()


def _latest_events(group_id: str, head: int) -> dict[str, tuple[str, int]]:
    """Each WorkItem's latest Event up to ``head``: ``{work item id: (event id, sequence)}``."""
    latest: dict[str, tuple[str, int]] = {}
    rows = GroupEvent.objects.filter(group_id=group_id, sequence__lte=head, aggregate_kind=WORK_ITEM_EVENTS)
    for event_id, sequence, item_id in rows.order_by("sequence").values_list("event_id", "sequence", "aggregate_id"):
        latest[str(item_id).removeprefix("urn:uuid:")] = (str(event_id), sequence)
    return latest


def _held(group_id: str) -> list[str]:
    blobs = set(BlobGroup.objects.filter(group_id=group_id).values_list("blob_id", flat=True))
    blobs |= set(Artifact.objects.filter(group_id=group_id).values_list("sha256", flat=True))
    return [wire_hash(h) for h in sorted(blobs)]


def _summary(mission: Mission, document: dict[str, Any], items: list[WorkItem], replacement: str, head: int) -> str:
    lines = [
        f"Context Package for the replacement Coordinator {urn(replacement)} of Mission {urn(str(mission.id))} "
        f"({mission.title}), generated by the Group Authority from the Group's Events 1..{head}.",
        f"Objective: {mission.objective}",
        "Definition of done:",
        *(f"- {c['criterionId']}: {c['description']}" for c in document.get("definitionOfDone", [])),
        f"WorkItems ({len(items)}):",
    ]
    for item in items:
        owner = urn(str(item.owner_id)) if item.owner_id else "none"
        lines.append(
            f"- {urn(str(item.id))} state={item.state} owner={owner} ownershipEpoch={item.ownership_epoch} "
            f"revision={item.revision} contractRevision={item.contract_revision}: {item.contract.get('goal', '')}"
        )
    text = "\n".join(lines)
    return _short(text, SUMMARY_MAX)


def _constraints(mission: Mission, document: dict[str, Any]) -> list[str]:
    out = []
    if document.get("deadline"):
        out.append(f"Mission deadline: {document['deadline']}")
    for name, limit in sorted((document.get("budget") or {}).items()):
        out.append(f"Mission budget {name}: {limit}")
    policy = document.get("approvalPolicy") or {}
    if policy.get("finalHumanApproval"):
        out.append("Final human Approval of the MissionOwner is required before completion")
    if policy.get("highRiskExecutionApproval"):
        out.append("High-risk execution needs an execution Approval first")
    out.extend(_short(f"Mission permission: {permission}") for permission in mission.permissions or [])
    return out


def _questions(group_id: str, items: list[WorkItem], head: int) -> list[str]:
    """What the replacement must still settle: open essential ambiguities, blocked WorkItems, results to review."""
    out: list[str] = []
    live = {str(i.id): i for i in items if i.state not in (sm.VERIFIED, sm.FAILED, sm.CANCELLED)}
    for row in Ambiguity.objects.filter(work_item_id__in=list(live)).order_by("message_id"):
        item = live[str(row.work_item_id)]
        if row.contract_revision != item.contract_revision:
            continue  # a corrected contract resolved it
        asked = _ambiguity_questions(group_id, str(row.message_id), head)
        text = "; ".join(asked) if asked else "see the Message"
        message = f"Message {urn(str(row.message_id))}, contract revision {row.contract_revision}"
        out.append(_short(f"WorkItem {urn(str(item.id))}: essential ambiguity ({message}): {text}"))
    for item in live.values():
        if item.state == sm.BLOCKED:
            out.append(f"WorkItem {urn(str(item.id))} is blocked: {_blocked_reason(group_id, str(item.id), head)}")
        elif item.state == sm.SUBMITTED:
            out.append(f"WorkItem {urn(str(item.id))}'s result is submitted and awaits an independent review")
    return out


def _ambiguity_questions(group_id: str, message_id: str, head: int) -> list[str]:
    from conversations.handlers import AMBIGUITY_SCHEMA

    posted = GroupEvent.objects.filter(
        group_id=group_id, sequence__lte=head, type="message.posted", body__messageId=urn(message_id)
    ).values_list("body", flat=True)
    body = posted.first() or {}
    content = (body.get("message") or {}).get("content")
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and part.get("schema") == AMBIGUITY_SCHEMA:
            return [str(q) for q in (part.get("data") or {}).get("questions", [])]
    return []


def _blocked_reason(group_id: str, item_id: str, head: int) -> str:
    blocked = GroupEvent.objects.filter(
        group_id=group_id, sequence__lte=head, type="work.blocked", aggregate_id=item_id
    ).order_by("-sequence")
    body = blocked.values_list("body", flat=True).first() or {}
    return str(body.get("reason") or "no reason recorded")
