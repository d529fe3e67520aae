"""What a catalogue entry is, and the payload shapes several entries share.

A payload names its members the way the official Python reference
implementation does (camelCase, ``docs/protocol-choices.md``); an object the
specification defines (a Work Contract, a lease, Evidence, ...) is embedded in
its normative shape, by reference to the kernel's schema for it.

Command payloads are open: a member the catalogue does not name is carried and
ignored (the Command envelope leaves ``payload`` open, and the bundle's signed
Command vector carries one), and an optional member the reference
implementation writes as ``null`` may be ``null``.  Event payloads are what the
Group Authority itself writes, so they are closed and never ``null``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..schemas.common import LOCAL_KEY
from ..schemas.dsl import (
    DIALECT,
    Schema,
    array,
    c,
    enum,
    ids,
    obj,
    ref,
    schema_id,
    string,
    text,
)

# --- who may issue a Command, and what it must carry ------------------------------------------

ROLES = (
    "mission_owner",  # the Mission's owner: a human, or the parent Coordinator for a child Mission
    "coordinator",  # the Agent holding the current Coordinator lease
    "work_delegate",  # an Agent using a persisted Delegation Grant (§9.1)
    "worker",  # an Agent with a worker or reviewer Membership, offered the WorkItem and not yet its owner
    "work_owner",  # the Agent owning the WorkItem under its current Ownership Epoch
    "member",  # any active member of the Group
    "service",  # an Organization service Principal (registry, control plane, Group Authority)
)
"""The issuer roles a Command definition names."""

EPOCHS = ("sessionEpoch", "membershipEpoch", "coordinatorEpoch", "ownershipEpoch", "executionLeaseId")
"""The fences a Command can be required to carry.

The first three are Command envelope members (§6.3, §8, §7.2); ``ownershipEpoch``
and ``executionLeaseId`` are payload members (§11.3).  Every Agent Command also
carries ``sessionEpoch`` (§15.1): for a role a human may hold too
(``mission_owner``, ``member``) the list names only what both carry.
"""

_AGENT = ("sessionEpoch", "membershipEpoch")
ROLE_EPOCHS: dict[str, tuple[str, ...]] = {
    "mission_owner": ("membershipEpoch",),
    "coordinator": (*_AGENT, "coordinatorEpoch"),
    "work_delegate": _AGENT,
    "worker": _AGENT,
    "work_owner": (*_AGENT, "ownershipEpoch"),
    "member": ("membershipEpoch",),
    "service": (),
}
LEASED = (*ROLE_EPOCHS["work_owner"], "executionLeaseId")
"""What the owner carries for a Command that must cite its current Execution Lease (§11.3)."""

AGGREGATES = (
    "organization",
    "agent",
    "mission",
    "group",
    "membership",
    "message",
    "work_proposal",
    "work_item",
    "artifact",
    "context_package",
)

SCOPES = ("group", "organization")


@dataclass(frozen=True, slots=True)
class CommandDefinition:
    kind: str
    payload_schema: Schema
    issuers: tuple[str, ...]
    # Issuer role -> the epochs (and lease) a Command from that role carries.
    epochs: dict[str, tuple[str, ...]]
    aggregate: str
    events: tuple[str, ...]
    # §15.3: the transition is compare-and-set, so ``expectedRevision`` is required.
    compare_and_set: bool = False
    # "organization": outside every Group (§15.1's bootstrap Commands).
    scope: str = "group"
    summary: str = ""
    examples: tuple[dict[str, Any], ...] = field(default=())

    def as_data(self) -> dict[str, Any]:
        return {
            "payloadSchema": self.payload_schema,
            "issuers": list(self.issuers),
            "epochs": {role: list(names) for role, names in self.epochs.items()},
            "aggregate": self.aggregate,
            "events": list(self.events),
            "compareAndSet": self.compare_and_set,
            "scope": self.scope,
        }


@dataclass(frozen=True, slots=True)
class EventDefinition:
    kind: str
    payload_schema: Schema
    aggregate: str
    scope: str = "group"
    summary: str = ""
    examples: tuple[dict[str, Any], ...] = field(default=())

    def as_data(self) -> dict[str, Any]:
        return {"payloadSchema": self.payload_schema, "aggregate": self.aggregate, "scope": self.scope}


def epochs_for(issuers: tuple[str, ...], *, leased: bool = False) -> dict[str, tuple[str, ...]]:
    """The default fences of each issuer role; ``leased``: the owner also cites its lease."""
    out = {role: ROLE_EPOCHS[role] for role in issuers}
    if leased and "work_owner" in out:
        out["work_owner"] = LEASED
    return out


# --- payload schemas ---------------------------------------------------------------------------


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def _payload_id(what: str, kind: str) -> str:
    return schema_id(f"catalogue/{what}/{kind}")


def command_payload(
    kind: str,
    required: dict[str, Schema],
    optional: dict[str, Schema] | None = None,
    **more: Any,
) -> Schema:
    """An open payload whose optional members may be ``null``."""
    body = obj(required, {name: nullable(s) for name, s in (optional or {}).items()}, closed=False, **more)
    return {"$schema": DIALECT, "$id": _payload_id("commands", kind), **body}


def event_payload(
    kind: str,
    required: dict[str, Schema],
    optional: dict[str, Schema] | None = None,
    **more: Any,
) -> Schema:
    """A closed payload, as the Group Authority writes it."""
    return {"$schema": DIALECT, "$id": _payload_id("events", kind), **obj(required, optional, **more)}


def pointer(name: str, path: str) -> Schema:
    """A reference into one of the kernel's object schemas (a member's normative shape)."""
    return {"$ref": f"{schema_id(name)}#{path}"}


# --- shapes the specification leaves open (named as the reference implementation names them) ---

ID = c("id")
TIME = c("timestamp")
HASH = c("sha256")
POSITIVE = c("positiveInteger")
COUNT = c("safeInteger")
ACTOR = c("actor")
REASON = text(4000)
SECONDS = c("positiveInteger")

ROLE = enum("mission_owner", "coordinator", "worker", "reviewer", "observer", "work_delegate")

USAGE_DIMENSIONS = (
    "financialMicrounits",
    "modelTokens",
    "toolCalls",
    "computeSeconds",
    "wallClockSeconds",
    "externalActions",
)
USAGE = obj({}, {name: COUNT for name in USAGE_DIMENSIONS}, minProperties=1)
"""A six-dimensional resource quantity (a delta, a cumulative use, a remainder)."""

CHECKPOINT = obj(
    {"phase": text(500), "createdAt": TIME},
    {
        "completedMilestones": array(text(500)),
        "nextStep": text(2000),
        "stateArtifactHash": HASH,
    },
)
"""A durable, resumable point of a WorkItem's execution (§11.3, §11.4)."""

CHILD_FAILURE_POLICY = enum("block_parent_work_item", "fail_parent_work_item", "fail_parent_mission")
# The Organization's cooperation limits (§20); each names a limit of the cooperation policy
# (``ext.mwportal.governance.cooperation_policy_set``) and what an override grant escalates.
COOPERATION_POLICY = enum(
    "message_rate",
    "proposal_rate",
    "clarification_rounds",
    "delegation_depth",
    "queued_work_items",
    "active_work_items",
    "duplicate_decomposition",
    "circular_decomposition",
)

SELECTION_BASIS = pointer("work-item", "/properties/selectionBasis")
PROGRESS = pointer("work-item", "/properties/progress")
# What an assignment pins of the owner's Agent Card (§6.1): the card's version of every required capability.
CAPABILITY_PINS = pointer("work-item", "/properties/owner/properties/capabilityPins")
DELEGATION_GRANT = pointer("membership", "/properties/delegationGrants/items")
APPROVAL_POLICY = pointer("mission", "/properties/approvalPolicy")
MESSAGE_CONTENT = pointer("message", "/properties/content")

WORK_CONTRACT = ref("work-contract")
LEASE = ref("lease")
EVIDENCE = ref("evidence")
EVIDENCE_LIST = array(EVIDENCE, min_items=1)
ARTIFACT = ref("artifact")
CONTEXT_PACKAGE = ref("context-package")
MEMBERSHIP = ref("membership")
APPROVAL = ref("approval")
MISSION = ref("mission")
GROUP = ref("group")
MESSAGE = ref("message")
WORK_ITEM = ref("work-item")
AGENT_CARD = ref("agent-card")
GROUP_SNAPSHOT = ref("group-snapshot")

CRITERIA = array(c("acceptanceCriterion"), min_items=1)
CRITERION_KEY = string(pattern=LOCAL_KEY)
CANDIDATES = ids(min_items=1)
PERMISSIONS = array(text(500), unique=True)

WORK_PROPOSAL = obj(
    {
        "id": ID,
        "missionId": ID,
        "groupId": ID,
        "proposedBy": ACTOR,
        "contract": WORK_CONTRACT,
        "dependencyIds": ids(),
        "status": enum("open", "authorized", "withdrawn"),
        "createdAt": TIME,
        "updatedAt": TIME,
    },
    {"parentWorkItemId": ID, "authorizedWorkItemId": ID},
)
"""A Work Proposal (§10.2: no WorkItem exists yet); the specification defines no object for it."""

COOPERATION_OVERRIDE_GRANT = obj(
    {
        "id": ID,
        "missionId": ID,
        "groupId": ID,
        "policyName": COOPERATION_POLICY,
        "beneficiary": ACTOR,
        "targetCommandKind": c("kind"),
        "targetActionId": ID,
        "approver": ACTOR,
        "reason": REASON,
        "grantedAt": TIME,
        "expiresAt": TIME,
    },
)
"""A one-shot cooperation escalation (§15.1 ``cooperationOverrideGrantId``)."""
