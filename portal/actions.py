"""The payloads of the Commands people issue from the portal, as far as the server knows them.

A page never issues a Command itself (DESIGN §4, issue 19): it renders each
form with the Command's context (``portal.signing.command_context``), whose
payload members come from the builders below, and the person's browser adds
what they typed, signs the document and POSTs it to ``/api/v0.1/commands``.

The builders are the portal's only knowledge of payload shapes; each follows
its catalogue entry (``mwportal/protocol/catalogue/``), and the tests validate
what the browser sends against it. Members the person types (comments, a
reason, feedback) and fresh identifiers (an ``approvalId``) are the page's.
"""

from __future__ import annotations

from typing import Any

from missions.models import Agent, Mission
from mwportal.protocol.ids import urn

# §12: an execution Approval names the operations it permits; a contract that
# grants no resource operation is approved to execute its work as contracted.
DEFAULT_OPERATIONS = ("work.execute",)
# The version of the acceptance policy a MissionOwner's final Approval applies
# (the Approval object's ``acceptancePolicyVersion``, semver).
ACCEPTANCE_POLICY_VERSION = "1.0.0"


def operations_of(contract: dict[str, Any]) -> list[str]:
    """The operations a Work Contract's resource grants name, in order, each once."""
    seen: dict[str, None] = {}
    for grant in contract.get("allowedResources") or []:
        for operation in grant.get("operations") or []:
            seen.setdefault(str(operation), None)
    return list(seen) or list(DEFAULT_OPERATIONS)


def grant_execution(item: Any) -> dict[str, Any]:
    """``approval.grant_execution`` (§12) for a queued WorkItem under its current Ownership Epoch
    (the page adds ``approvalId`` and the person's ``comments``)."""
    operations = operations_of(item.contract)
    return {"workItemId": urn(item.id), "ownershipEpoch": item.ownership_epoch, "operations": operations}


def cancel_work(item: Any) -> dict[str, Any]:
    """``work.cancel`` (§10.2): the MissionOwner stops a WorkItem (the page adds the ``reason``)."""
    return {"workItemId": urn(item.id)}


def approve_mission(revision: int, artifact_hashes: list[str]) -> dict[str, Any]:
    """``mission.approve`` (§7.3) of an exact Mission revision and Artifact set (the page adds
    ``approvalId``, ``comments`` and the signed Approval document)."""
    return {
        "missionRevision": revision,
        "artifactHashes": list(artifact_hashes),
        "acceptancePolicyVersion": ACCEPTANCE_POLICY_VERSION,
    }


def final_approval(
    person: Agent, mission: Mission, group: str, revision: int, artifact_hashes: list[str]
) -> dict[str, Any]:
    """The Approval document (``approval.schema.json``, kind ``mission_final``) the MissionOwner's
    browser completes (``approvalId``, ``comments``, ``occurredAt``) and signs as its ``approver``."""
    return {
        "kind": "mission_final",
        "decision": "approved",
        "missionId": urn(mission.pk),
        "groupId": urn(group),
        "missionRevision": revision,
        "artifactHashes": list(artifact_hashes),
        "acceptancePolicyVersion": ACCEPTANCE_POLICY_VERSION,
        "approver": {"type": Agent.ACTOR_TYPES[person.kind], "id": urn(person.pk)},
        "conditions": [],
    }


def request_changes(revision: int) -> dict[str, Any]:
    """``mission.request_changes`` (§7.1): reopen the submitted revision (the page adds the ``feedback``)."""
    return {"missionRevision": revision}
