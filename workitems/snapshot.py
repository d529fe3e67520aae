"""The WorkItems of a Group snapshot's state (PROTOCOL §16), for a Worker restored from it alone.

Four members of the state (``missions.snapshots.group_state``), each a list:

- ``workItems``: every WorkItem in its normative shape (``work-item.schema.json``),
  with its ``owner``, pending ``offers``, ``selectionBasis`` and ``submission``;
- ``ownershipLeases``: ``{workItemId, startBy}`` of each owned WorkItem's
  start-by (or blocked-lease) deadline;
- ``executionApprovals``: ``{workItemId, contractVersion}`` of each execution
  Approval in force (§12);
- ``executionLeases``: every active Execution Lease (``lease.schema.json``) and
  ``checkpoints``: the latest checkpoint of each WorkItem, so a restored owner
  renews the lease it holds and a new owner resumes from the checkpoint.
"""

from __future__ import annotations

from typing import Any

from django.db.models import F, Prefetch

from missions.models import AgentCard, Group, GroupEvent
from missions.registry import snapshot_contributors
from missions.service_keys import GROUP_AUTHORITY, principal_id
from mwportal.protocol.ids import urn

from .content import content
from .documents import conversation_id
from .handlers.common import lease_document, ownership_lease_id
from .models import Checkpoint, ExecutionLease, Offer, WorkItem
from .wire import when

_OWNED = ("queued", "active", "blocked", "submitted", "verified")


def _rows(group_id: str) -> list[WorkItem]:
    return list(
        WorkItem.objects.filter(group_id=group_id)
        .prefetch_related(
            Prefetch("leases", queryset=ExecutionLease.objects.filter(status="active")),
            Prefetch("offers", queryset=Offer.objects.filter(status__in=("open", "accepted")).order_by("agent_id")),
            # Only the latest checkpoint: its number is the item's count.
            Prefetch("checkpoints", queryset=Checkpoint.objects.filter(number=F("workitem__checkpoint_count"))),
            "submissions",
        )
        .order_by("id")
    )


def _card_versions(agent_ids: set[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for agent, version in AgentCard.objects.filter(agent_id__in=agent_ids).values_list("agent_id", "version"):
        out[str(agent)] = max(out.get(str(agent), 1), version)
    return out


def work_item_state(item: WorkItem, created_by: dict[str, str], cards: dict[str, int]) -> dict[str, Any]:
    """One WorkItem as ``work-item.schema.json`` has it."""
    doc: dict[str, Any] = {
        "workItemId": urn(item.id), "missionId": urn(item.mission_id), "groupId": urn(item.group_id),
        "conversationId": conversation_id(item), "revision": item.revision, "state": item.state, "exclusive": True,
        "contract": item.contract, "createdBy": created_by, "createdAt": when(item.created_at),
        "authorizedBy": created_by, "updatedAt": when(item.updated_at),
    }  # fmt: skip
    pending = [o for o in item.offers.all() if o.status == "open"]
    if pending:
        doc["offers"] = [
            {"offerId": urn(o.id), "agentId": urn(o.agent_id), "agentCardVersion": cards.get(str(o.agent_id), 1),
             "expiresAt": when(o.expires_at), "status": "pending"}
            for o in pending
        ]  # fmt: skip
    accepted = next((o for o in item.offers.all() if o.status == "accepted"), None)
    if item.state in _OWNED and accepted is not None and item.ownership_epoch:
        owner = item.owner_id or accepted.agent_id
        accepted_at = when(accepted.closed_at or item.updated_at)
        pins = item.pins or {}  # what the acceptance pinned (§6.1)
        doc["owner"] = {
            "agentId": urn(owner), "agentCardVersion": pins.get("agentCardVersion", cards.get(str(owner), 1)),
            "capabilityPins": pins.get("capabilities", item.contract["requiredCapabilities"]),
            "ownershipEpoch": item.ownership_epoch,
            "ownershipLeaseId": urn(ownership_lease_id(item)), "acceptedAt": accepted_at,
        }  # fmt: skip
        doc["selectionBasis"] = item.selection_basis or accepted.selection_basis
    latest = next(iter(item.checkpoints.all()), None)
    if latest is not None and latest.progress:
        doc["progress"] = latest.progress
    submitted = [s for s in item.submissions.all() if s.authoritative]
    if submitted and item.state in ("submitted", "verified"):
        last = max(submitted, key=lambda s: s.created_at)
        hashes = ["sha256:" + h for h in content().artifact_hashes(str(item.group_id), list(last.artifacts))]
        hashes = hashes or sorted({h for e in last.evidence for h in e["artifactHashes"]})
        doc["submission"] = {
            "artifactHashes": hashes, "evidenceIds": [e["evidenceId"] for e in last.evidence],
            "submittedAt": when(last.created_at),
        }  # fmt: skip
    return doc


def _creators(group_id: str) -> dict[str, dict[str, str]]:
    """Who authorized each WorkItem, as its ``work.authorized`` Event says."""
    out: dict[str, dict[str, str]] = {}
    for aggregate, body in GroupEvent.objects.filter(group_id=group_id, type="work.authorized").values_list(
        "aggregate_id", "body"
    ):
        out[str(aggregate)] = body["workItem"]["createdBy"]
    return out


def snapshot_workitems(group_id: str) -> tuple[str, Any]:
    rows = _rows(group_id)
    creators = _creators(group_id)
    agents = {o.agent_id for item in rows for o in item.offers.all()} | {i.owner_id for i in rows if i.owner_id}
    cards = _card_versions(agents)
    # A WorkItem whose authorization is not in the log (none today) is the Group Authority's.
    fallback = {
        "type": "service",
        "id": urn(principal_id(str(Group.objects.get(id=group_id).organization_id), GROUP_AUTHORITY)),
    }
    return "workItems", [work_item_state(item, creators.get(str(item.id), fallback), cards) for item in rows]


def snapshot_ownership_leases(group_id: str) -> tuple[str, Any]:
    rows = WorkItem.objects.filter(group_id=group_id, owner__isnull=False, owner_expires_at__isnull=False)
    return "ownershipLeases", [
        {"workItemId": urn(i.id), "startBy": when(i.start_by or i.owner_expires_at)}  # type: ignore[arg-type]
        for i in rows.order_by("id")
    ]


def snapshot_execution_approvals(group_id: str) -> tuple[str, Any]:
    rows = WorkItem.objects.filter(
        group_id=group_id, approved_contract_revision__isnull=False, approved_contract_revision=F("contract_revision")
    )
    return "executionApprovals", [
        {"workItemId": urn(i.id), "contractVersion": i.approved_contract_revision} for i in rows.order_by("id")
    ]


def snapshot_execution_leases(group_id: str) -> tuple[str, Any]:
    leases = ExecutionLease.objects.filter(workitem__group_id=group_id, status="active").select_related("workitem")
    return "executionLeases", [lease_document(lease.workitem, lease) for lease in leases.order_by("workitem_id")]


def snapshot_checkpoints(group_id: str) -> tuple[str, Any]:
    latest = Checkpoint.objects.filter(workitem__group_id=group_id, number=F("workitem__checkpoint_count"))
    return "checkpoints", [
        {
            "workItemId": urn(c.workitem_id),
            "number": c.number,
            "ownershipEpoch": c.ownership_epoch,
            "executionLeaseId": urn(c.lease_id),
            "checkpoint": c.state,
            "progress": c.progress,
            "createdAt": when(c.created_at),
        }  # fmt: skip
        for c in latest.order_by("workitem_id")
    ]


snapshot_contributors.extend(
    [
        snapshot_workitems,
        snapshot_ownership_leases,
        snapshot_execution_approvals,
        snapshot_execution_leases,
        snapshot_checkpoints,
    ]
)
