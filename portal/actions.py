"""Issuing Commands from the portal and the admin: build, ``accept()``, report.

The one way a page changes anything: ``issue()`` builds a catalogue Command
(its normative kind and payload, ``docs/protocol-choices.md``) for the person
signed in by their Django session (``missions.commands.portal_command``,
``Auth.PORTAL``: until issue 19 moves human signing into the browser) and hands
it to ``missions.authority.accept()``. A refusal comes back as an ``Outcome``
carrying the normative error document; nothing was written.

The payload builders below are the portal's only knowledge of payload shapes;
each follows its catalogue entry (``mwportal/protocol/catalogue/``), and the
tests validate what they build against it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from missions.authority import accept
from missions.commands import portal_command
from missions.models import Agent
from mwportal.protocol import ProtocolError
from mwportal.protocol.ids import urn

from .errors import explain

# §12: an execution Approval names the operations it permits; a contract that
# grants no resource operation is approved to execute its work as contracted.
DEFAULT_OPERATIONS = ("work.execute",)
# The version of the acceptance policy a MissionOwner's final Approval applies
# (the Approval object's ``acceptancePolicyVersion``, semver).
ACCEPTANCE_POLICY_VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Outcome:
    receipt: dict[str, Any] | None
    error: ProtocolError | None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def message(self) -> str:
        """What to tell the person: the receipt in short, or the error document in plain words."""
        if self.error is not None:
            return explain(self.error)
        assert self.receipt is not None
        events = ", ".join(f"{e['kind']} (#{e['sequence']})" for e in self.receipt["events"])
        replayed = " (already recorded earlier)" if self.receipt.get("replayed") else ""
        action = str(self.receipt["actionId"]).removeprefix("urn:uuid:")
        return f"Accepted{replayed}: {events}; action {action[:8]}"

    @property
    def status(self) -> int:
        return 200 if self.error is None else self.error.http_status


def issue(
    person: Agent,
    kind: str,
    group: str,
    payload: dict[str, Any],
    *,
    expected_revision: int | None = None,
    work_item_id: str | None = None,
    creates_group: bool = False,
) -> Outcome:
    """Accept one Command by the signed-in ``person``; never raises ``ProtocolError``.

    ``creates_group``: the Command founds ``group`` (``mission.create``), so it
    carries no Membership Epoch (§15.1)."""
    try:
        command = portal_command(
            person,
            kind,
            str(group),
            payload,
            expected_revision=expected_revision,
            work_item_id=None if work_item_id is None else str(work_item_id),
            creates_group=creates_group,
        )
        receipt = accept(command)
    except ProtocolError as error:
        return Outcome(None, error)
    return Outcome(receipt, None)


# --- payloads (catalogue entries) -------------------------------------------------------


def new_id() -> str:
    return urn(uuid.uuid4())


def operations_of(contract: dict[str, Any]) -> list[str]:
    """The operations a Work Contract's resource grants name, in order, each once."""
    seen: dict[str, None] = {}
    for grant in contract.get("allowedResources") or []:
        for operation in grant.get("operations") or []:
            seen.setdefault(str(operation), None)
    return list(seen) or list(DEFAULT_OPERATIONS)


def grant_execution(item: Any, comments: str) -> dict[str, Any]:
    """``approval.grant_execution`` (§12) for a queued WorkItem under its current Ownership Epoch."""
    payload: dict[str, Any] = {
        "approvalId": new_id(),
        "workItemId": urn(item.id),
        "ownershipEpoch": item.ownership_epoch,
        "operations": operations_of(item.contract),
    }
    if comments:
        payload["comments"] = comments[:10000]
    return payload


def cancel_work(item: Any, reason: str) -> dict[str, Any]:
    """``work.cancel`` (§10.2): the MissionOwner stops a WorkItem, saying why."""
    return {"workItemId": urn(item.id), "reason": reason[:4000]}


def approve_mission(revision: int, artifact_hashes: list[str], comments: str) -> dict[str, Any]:
    """``mission.approve`` (§7.3) of an exact Mission revision and Artifact set."""
    payload: dict[str, Any] = {
        "approvalId": new_id(),
        "missionRevision": revision,
        "artifactHashes": list(artifact_hashes),
        "acceptancePolicyVersion": ACCEPTANCE_POLICY_VERSION,
    }
    if comments:
        payload["comments"] = comments[:10000]
    return payload


def request_changes(revision: int, feedback: str) -> dict[str, Any]:
    """``mission.request_changes`` (§7.1): reopen the submitted revision with feedback."""
    return {"missionRevision": revision, "feedback": feedback[:10000]}


def cancel_mission(reason: str) -> dict[str, Any]:
    """``mission.cancel`` (§7.1): propagates to unfinished WorkItems."""
    return {"reason": reason[:4000]}
