"""Signed MWP 0.1 Event streams for the Worker tests and ``bench/replay.py``.

``World(seed)`` is a small model of a Group Authority: an Organization with
its administrative Group and Mission Groups, Agents (a coordinator and
workers, one of them ``ME``, the Worker under test), and WorkItems driven
through their lifecycle: offers to candidate sets, acceptance with a new
Ownership Epoch and a start-by deadline, execution Approvals, leases with
renewals, checkpoints, blocking, submissions, retries, expiry, session
replacement revoking leases, usage records, cancellations, Memberships,
snapshots and tombstones, and Events the Worker does not fold.

Every payload comes from the catalogue (``mwportal.protocol.catalogue``): a
kind's published example, with the members this World decides written over
it, validated against the kind's schema before the Event is signed
(``payload``). There is no third copy of any Event body here: a payload the
catalogue refuses fails the generator, and a kind it lacks cannot be built.
Every Event is a normative Group Event document signed by the World's Group
Authority key with ``mwportal.protocol.eventdoc.build_event``
(``Authority.verifier()`` is the Worker's verifier of them).

Deterministic: the same seed gives the same stream, byte for byte (the Group
Authority's key is derived from the seed, so a cached stream verifies with
``Authority.for_seed(seed).verifier()``).
"""

from __future__ import annotations

import copy
import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from mwportal.protocol import catalogue, eventdoc, jcs
from mwportal.protocol.catalogue import PROJECT
from mwportal.protocol.catalogue import examples as ex
from mwportal.protocol.command import Key, format_timestamp
from mwportal.protocol.verification import sign_document
from mwworker.events import EventVerifier, KeyCache

Event = dict[str, Any]

ME = "urn:uuid:0000beef-0000-4000-8000-00000000beef"  # Wanda, the Worker under test
OTHERS = ("urn:uuid:0000cafe-0000-4000-8000-00000000cafe", "urn:uuid:0000f00d-0000-4000-8000-00000000f00d")
COORDINATOR = "urn:uuid:0000c00d-0000-4000-8000-00000000c00d"
START_BY = timedelta(seconds=900)
LEASE = timedelta(seconds=300)
VALID_FROM = "2026-01-01T00:00:00Z"
ORG = "urn:uuid:00000000-0000-4000-8000-0000000000f1"  # every World's Organization
CAPABILITIES = (("text.summarize", "1.2.0"), ("text.translate", "2.0.0"), ("data.clean", "1.0.0"))
GOALS = ("Summarise the survey", "Translate the brief", "Clean the dataset", "Draft the release notes")
DROP = object()  # a member of the catalogue example this payload leaves out


def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for name, value in over.items():
            if value is DROP:
                out.pop(name, None)
            else:
                out[name] = _merge(base.get(name), value)
        return out
    return copy.deepcopy(over)


def payload(kind: str, **members: Any) -> dict[str, Any]:
    """The catalogue's example payload of ``kind`` with ``members`` written over
    it (nested objects merged; ``DROP`` removes one), refused unless the
    catalogue's schema accepts the result."""
    example = catalogue.event(kind).examples[0]
    out: dict[str, Any] = _merge(copy.deepcopy(example), members)
    catalogue.validate_payload(kind, out)
    return out


def contract(rng: random.Random, *, version: int = 1, deps: list[str] | None = None, approval: bool = False,
             deadline: str = "2027-01-09T17:00:00Z") -> dict[str, Any]:  # fmt: skip
    """A Work Contract (``work-contract.schema.json``) from the catalogue's example one."""
    cap = rng.choice(CAPABILITIES)
    return _merge(
        ex.work_contract(),
        {
            "contractVersion": version,
            "goal": rng.choice(GOALS),
            "requiredCapabilities": [{"id": cap[0], "version": cap[1]}],
            "dependencyWorkItemIds": list(deps or []),
            "deadline": deadline,
            "requestedUrgency": rng.choice(("routine", "normal", "high", "critical")),
            "executionApproval": "human_required" if approval else "not_required",
            "sideEffectRisk": "external" if approval else "none",
        },
    )


@dataclass(frozen=True)
class Authority:
    """The World's Organization and its Group Authority service Principal and key."""

    org: str
    principal: dict[str, str]
    key: Key

    @classmethod
    def for_seed(cls, seed: int) -> Authority:
        rng = random.Random(f"authority-{seed}")
        ident = lambda: "urn:uuid:" + str(uuid.UUID(int=rng.getrandbits(128), version=4))  # noqa: E731
        principal, key_id = ident(), ident()
        return cls(ORG, {"type": "service", "id": principal}, Key(key_id, rng.randbytes(32)))

    def binding(self) -> dict[str, Any]:
        """The key binding as ``GET /api/v0.1/keys/{keyId}`` serves it (DESIGN §5)."""
        return {"keyId": self.key.key_id, "principal": self.principal, "algorithm": "Ed25519",
                "publicKey": self.key.public_key, "validFrom": VALID_FROM}  # fmt: skip

    def verifier(self) -> EventVerifier:
        return verifier(self)


def verifier(*authorities: Authority | int) -> EventVerifier:
    """A Worker's verifier knowing the Group Authority keys of these Worlds (by seed or Authority)."""
    keys = KeyCache(ORG)
    for a in authorities:
        keys.add((a if isinstance(a, Authority) else Authority.for_seed(a)).binding())
    return EventVerifier(keys)


@dataclass
class Item:
    id: str
    contract: dict[str, Any]
    conversation: str
    state: str = "open"
    revision: int = 0
    owner: str | None = None
    ownership_epoch: int = 0
    start_by: str | None = None
    lease: dict[str, Any] | None = None
    candidates: list[str] = field(default_factory=list)
    offer_expires_at: str | None = None
    approved: int | None = None  # the contract version an execution Approval was granted for


@dataclass
class Group:
    id: str
    mission: str
    kind: str = "mission"  # or "admin"
    sequence: int = 0
    revision: int = 0  # of its Mission, Group and Membership aggregates
    other_revision: int = 0  # of the Messages, Artifacts and Organization it holds
    joined: bool = False
    usage: dict[str, int] = field(default_factory=dict)
    items: dict[str, Item] = field(default_factory=dict)
    my_roles: set[str] = field(default_factory=set)
    membership_epoch: int = 0
    status: str = "active"
    mission_doc: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] | None = None
    policy_revision: int = 0
    # (throughSequence, last Event ID, state) of each snapshot the World recorded.
    snapshots: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    last_event_id: str = ""


class World:
    """The Group Authority model: ``run(n)`` emits ``n`` signed Group Events."""

    def __init__(self, seed: int, *, groups: int = 10) -> None:
        self.rng = random.Random(seed)
        self.authority = Authority.for_seed(seed)
        self.org = self.authority.org
        self.now = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
        self.groups: dict[str, Group] = {}
        self.events: list[Event] = []
        self.group_count = groups

    def uuid(self) -> str:
        return "urn:uuid:" + str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def time(self, after: timedelta = timedelta(0)) -> str:
        return format_timestamp(self.now + after)

    # --- emitting ----------------------------------------------------------------------

    def emit(self, g: Group, kind: str, body: dict[str, Any], *, actor: dict[str, str] | None = None,
             item: Item | None = None) -> Event:  # fmt: skip
        """The next signed Event of ``g``; ``item``'s revision moves for a WorkItem kind."""
        self.now += timedelta(seconds=self.rng.randint(1, 30))
        g.sequence += 1
        aggregate = catalogue.event(kind).aggregate
        if item is not None and aggregate == "work_item":
            item.revision += 1
            revision = item.revision
        elif aggregate in ("mission", "group", "membership"):
            g.revision += 1
            revision = g.revision
        else:
            g.other_revision += 1
            revision = g.other_revision
        event = eventdoc.build_event(
            event_id=self.uuid(), kind=kind, actor=actor or self.authority.principal,
            cause={"type": "command", "id": self.uuid()}, correlation_id=self.uuid(), occurred_at=self.now,
            payload=body, accepted_by=self.authority.principal, key=self.authority.key, group_id=g.id,
            sequence=g.sequence, aggregate_revision=revision, command_hash=jcs.sha256_hash(g.id.encode()),
            work_item_id=item.id if item is not None else None,
        )  # fmt: skip
        g.last_event_id = event["eventId"]
        self.events.append(event)
        return event

    # --- the model -------------------------------------------------------------------

    def open_group(self, kind: str = "mission") -> Group:
        g = Group(id=self.uuid(), mission=self.uuid(), kind=kind)
        self.groups[g.id] = g
        if kind == "admin":
            self.emit(
                g,
                f"{PROJECT}.admin.organization_created",
                payload(f"{PROJECT}.admin.organization_created", organizationId=self.org, slug="acme", name="Acme"),
            )
            g.policy = {"classes": {"critical": 8, "high": 4, "normal": 2, "low": 1}, "default_class": "normal",
                        "groups": {}, "aging_seconds": 300}  # fmt: skip
            self.set_policy(g)
            return g
        g.mission_doc = _merge(ex.mission(), {
            "missionId": g.mission, "groupId": g.id, "objective": self.rng.choice(GOALS),
            "coordinator": {"agentId": COORDINATOR}, "createdAt": self.time(),
        })  # fmt: skip
        group_doc = _merge(ex.group(), {"groupId": g.id, "missionId": g.mission, "createdAt": self.time()})
        self.emit(g, "mission.created", payload("mission.created", mission=g.mission_doc, group=group_doc))
        self.join(g, "worker")
        return g

    def set_policy(self, g: Group) -> None:
        assert g.policy is not None
        g.policy_revision += 1
        g.policy = {**g.policy, "aging_seconds": self.rng.choice((60, 300, 900))}
        kind = f"{PROJECT}.scheduling.priority_policy_changed"
        self.emit(g, kind, payload(kind, policy=g.policy, revision=g.policy_revision))

    def membership(self, g: Group, member: str, role: str, state: str = "active") -> dict[str, Any]:
        extra: dict[str, Any] = {"activatedAt": self.time()} if state == "active" else {"endedAt": self.time()}
        return _merge(ex.membership(), {
            "membershipId": self.uuid(), "missionId": g.mission, "groupId": g.id,
            "member": {"type": "agent", "id": member}, "role": role, "state": state,
            "membershipEpoch": g.membership_epoch, "grantedAt": self.time(), "activatedAt": DROP, **extra,
        })  # fmt: skip

    def join(self, g: Group, role: str) -> None:
        g.membership_epoch += 1
        g.my_roles.add(role)
        g.joined = True
        self.emit(g, "membership.changed", payload("membership.changed", membership=self.membership(g, ME, role)))

    def leave(self, g: Group) -> None:
        g.membership_epoch += 1
        g.my_roles.clear()
        self.emit(g, "membership.ended", payload(
            "membership.ended", principal={"type": "agent", "id": ME}, reason="rotation",
            membership=self.membership(g, ME, "worker", "ended")))  # fmt: skip

    def authorize(self, g: Group) -> None:
        deps = [i.id for i in g.items.values() if i.state != "cancelled"][:1] if self.rng.random() < 0.2 else []
        item = Item(self.uuid(), contract(self.rng, deps=deps, approval=self.rng.random() < 0.2), self.uuid())
        g.items[item.id] = item
        doc = _merge(ex.work_item(), {
            "workItemId": item.id, "missionId": g.mission, "groupId": g.id, "conversationId": item.conversation,
            "contract": item.contract, "createdBy": {"type": "agent", "id": COORDINATOR}, "createdAt": self.time(),
        })  # fmt: skip
        self.emit(g, "work.authorized", payload("work.authorized", workItem=doc), item=item)

    def lease_doc(self, g: Group, item: Item, kind: str, **members: Any) -> dict[str, Any]:
        return _merge(ex.lease(kind), {
            "leaseId": self.uuid(), "missionId": g.mission, "groupId": g.id, "holderAgentId": item.owner,
            "issuedAt": self.time(), "startsAt": self.time(), "expiresAt": self.time(LEASE), "workItemId": item.id,
            "ownershipEpoch": item.ownership_epoch, **members,
        })  # fmt: skip

    def step_item(self, g: Group, item: Item) -> None:  # noqa: C901 (one branch per state, as the table)
        rng, wid = self.rng, item.id
        if item.state in ("open", "queued") and rng.random() < 0.04:
            kind = "work.contract.revised"
            version = item.contract["contractVersion"] + 1
            item.contract = {**item.contract, "contractVersion": version}
            self.emit(g, kind, payload(kind, workItemId=wid, revision=version, contract=item.contract,
                                       dependencyId=DROP), item=item)  # fmt: skip
        elif item.state == "blocked" and rng.random() < 0.1:
            self.emit(g, "mission.child.created", payload(
                "mission.child.created", parentMissionId=g.mission, parentWorkItemId=wid,
                childMissionId=self.uuid(), childGroupId=self.uuid()))  # fmt: skip
        elif (
            (item.state == "open" and rng.random() < 0.7)
            or (item.state == "offered" and rng.random() < 0.1)
            or (item.state == "failed" and rng.random() < 0.3)  # a retry (§11.4) or the Coordinator's re-offer
        ):
            pool = [ME, *OTHERS]
            item.candidates = sorted(rng.sample(pool, rng.randint(1, 3)))
            item.state, item.offer_expires_at = "offered", self.time(timedelta(minutes=10))
            self.emit(
                g,
                "work.offer.created",
                payload(
                    "work.offer.created",
                    workItemId=wid,
                    candidateAgentIds=item.candidates,
                    offerExpiresAt=item.offer_expires_at,
                    contractVersion=item.contract["contractVersion"],
                ),
                item=item,
            )
        elif item.state == "offered" and ME in item.candidates and rng.random() < 0.15:
            item.candidates.remove(ME)
            kind = f"{PROJECT}.work.offer_declined"
            self.emit(g, kind, payload(kind, workItemId=wid, agentId=ME, reason="capacity"), item=item)
        elif item.state == "offered" and item.candidates:
            item.owner = ME if ME in item.candidates and rng.random() < 0.7 else rng.choice(item.candidates)
            item.ownership_epoch += 1
            item.state, item.start_by, item.candidates = "queued", self.time(START_BY), []
            lease = self.lease_doc(g, item, "ownership", startBy=item.start_by, expiresAt=self.time(START_BY))
            self.emit(g, "work.offer.accepted", payload(
                "work.offer.accepted", workItemId=wid, assigneeId=item.owner, ownershipEpoch=item.ownership_epoch,
                ownershipLeaseExpiresAt=lease["expiresAt"], ownershipLease=lease,
                contractVersion=item.contract["contractVersion"],
                capabilityPins=item.contract["requiredCapabilities"]), actor={"type": "agent", "id": item.owner},
                item=item)  # fmt: skip
        elif (item.state == "queued" and item.contract["executionApproval"] != "not_required"
              and item.approved != item.contract["contractVersion"]):  # fmt: skip
            item.approved = item.contract["contractVersion"]
            approval = _merge(ex.approval("work_execution"), {
                "approvalId": self.uuid(), "missionId": g.mission, "groupId": g.id, "workItemId": wid,
                "occurredAt": self.time()})  # fmt: skip
            self.emit(
                g,
                "approval.execution.granted",
                payload(
                    "approval.execution.granted",
                    approval=approval,
                    ownershipEpoch=item.ownership_epoch,
                    expiresAt=self.time(LEASE),
                    contractVersion=item.contract["contractVersion"],
                ),
                item=item,
            )
        elif item.state == "queued" and rng.random() < 0.1:
            kind = f"{PROJECT}.work.ownership_fenced"
            item.owner, item.start_by, item.state = None, None, "open"
            self.emit(g, kind, payload(kind, workItemId=wid, ownershipEpoch=item.ownership_epoch,
                                       reason="start_by_missed"), item=item)  # fmt: skip
            # The fenced WorkItem is offered again: the fold keeps its state, the model re-offers.
            item.state = "offered" if rng.random() < 0.5 else "open"
            if item.state == "offered":
                item.candidates = [ME]
                self.emit(
                    g,
                    "work.offer.created",
                    payload(
                        "work.offer.created",
                        workItemId=wid,
                        candidateAgentIds=[ME],
                        offerExpiresAt=self.time(timedelta(minutes=10)),
                    ),
                    item=item,
                )
                item.offer_expires_at = self.events[-1]["payload"]["offerExpiresAt"]
            else:
                self.emit(g, "work.unblocked", payload("work.unblocked", workItemId=wid, status="open",
                                                       startBy=DROP, resolution=DROP), item=item)  # fmt: skip
        elif item.state == "queued":
            item.state, item.start_by = "active", None
            item.lease = self.lease_doc(g, item, "execution")
            self.emit(g, "work.started", payload(
                "work.started", workItemId=wid, ownershipEpoch=item.ownership_epoch, executionLease=item.lease,
                executionLeaseExpiresAt=item.lease["expiresAt"]), actor={"type": "agent", "id": item.owner or ME},
                item=item)  # fmt: skip
        elif item.state == "active":
            self.step_active(g, item)
        elif item.state == "blocked":
            status = "queued" if rng.random() < 0.7 else "open"
            item.state, item.start_by = status, (self.time(START_BY) if status == "queued" else None)
            if status == "open":
                item.owner = None
            self.emit(
                g,
                "work.unblocked",
                payload("work.unblocked", workItemId=wid, status=status, startBy=item.start_by or DROP),
                item=item,
            )
        elif item.state == "submitted":
            if rng.random() < 0.2:
                kind = f"{PROJECT}.work.late_result_recorded"
                self.emit(g, kind, payload(kind, workItemId=wid, ownershipEpoch=item.ownership_epoch), item=item)
            else:
                item.state = "verified"
                self.emit(g, "work.result.accepted", payload("work.result.accepted", workItemId=wid), item=item)

    def step_active(self, g: Group, item: Item) -> None:
        rng, wid = self.rng, item.id
        assert item.lease is not None
        leased = {"workItemId": wid, "ownershipEpoch": item.ownership_epoch}
        roll = rng.random()
        owner = {"type": "agent", "id": item.owner or ME}
        if roll < 0.2:
            item.lease = {**item.lease, "expiresAt": self.time(LEASE), "renewalCount": item.lease["renewalCount"] + 1,
                          "lastRenewedAt": self.time()}  # fmt: skip
            self.emit(g, "work.progressed", payload("work.progressed", **leased, executionLease=item.lease,
                                                    executionLeaseExpiresAt=item.lease["expiresAt"]),
                      actor=owner, item=item)  # fmt: skip
        elif roll < 0.3:
            kind = "ext.missionweaveprotocol.core.resource_usage_recorded"
            used = rng.randint(100, 2000)
            g.usage["modelTokens"] = g.usage.get("modelTokens", 0) + used
            self.emit(g, kind, payload(kind, **leased, executionLeaseId=item.lease["leaseId"],
                                       usageDelta={"modelTokens": used}, cumulativeUsage={"modelTokens": used},
                                       remainingBudget={"modelTokens": 100000}), actor=owner, item=item)  # fmt: skip
        elif roll < 0.5:
            item.state, item.lease, item.start_by = "queued", None, self.time(START_BY)
            checkpoint = {**ex.checkpoint(), "createdAt": self.time()}
            self.emit(g, "work.checkpointed", payload(
                "work.checkpointed", workItemId=wid, checkpoint=checkpoint, ownershipLeaseExpiresAt=item.start_by,
                startBy=item.start_by), actor=owner, item=item)  # fmt: skip
        elif roll < 0.6:
            item.state, item.lease = "blocked", None
            self.emit(g, "work.blocked", payload(
                "work.blocked", workItemId=wid, reason="needs the appendix",
                checkpoint={**ex.checkpoint(), "createdAt": self.time()}), actor=owner, item=item)  # fmt: skip
        elif roll < 0.75:
            item.state, item.lease = "submitted", None
            self.emit(g, "work.submitted", payload("work.submitted", workItemId=wid), actor=owner, item=item)
        elif roll < 0.82:
            # A retryable failed attempt is the table's work.fail row (§10.2, §11.4): failed,
            # then (step_item) the retry policy's work.offer from failed.
            item.state, item.lease, item.owner, item.start_by = "failed", None, None, None
            self.emit(g, "work.failed", payload("work.failed", workItemId=wid, reason="timeout", attempt=1),
                      actor=owner, item=item)  # fmt: skip
        elif roll < 0.88:
            # A timed-out Execution Lease is a failed attempt too.
            kind = f"{PROJECT}.work.lease_expired"
            self.emit(g, kind, payload(kind, workItemId=wid, ownershipEpoch=item.ownership_epoch,
                                       leaseType="execution", leaseId=item.lease["leaseId"], status=DROP,
                                       attempt=1, retryNotBefore=self.time(LEASE)), item=item)  # fmt: skip
            item.state, item.lease, item.owner, item.start_by = "failed", None, None, None
            self.emit(g, "work.failed", payload("work.failed", workItemId=wid, reason="lease timeout", attempt=1),
                      item=item)  # fmt: skip
        elif roll < 0.94:
            kind = "ext.missionweaveprotocol.core.work_execution_lease_revoked"
            self.emit(g, kind, payload(kind, workItemId=wid, executionLeaseId=item.lease["leaseId"],
                                       reason="session_replaced", status="queued", sessionEpoch=2,
                                       agentId=item.owner or ME), item=item)  # fmt: skip
            item.state, item.lease, item.start_by = "queued", None, None
        elif roll < 0.97:
            item.state, item.lease, item.owner, item.start_by = "failed", None, None, None
            self.emit(g, "work.failed", payload("work.failed", workItemId=wid, evidence=DROP), item=item)
        else:
            item.state, item.lease, item.owner, item.start_by = "cancelled", None, None, None
            self.emit(g, "work.cancelled", payload("work.cancelled", workItemId=wid), item=item)

    def step_group(self, g: Group) -> None:
        roll = self.rng.random()
        if g.kind == "admin":
            self.set_policy(g)
        elif roll < 0.2 and g.my_roles:
            self.leave(g)
        elif roll < 0.4:
            self.join(g, self.rng.choice(("worker", "reviewer")))
        elif roll < 0.6:
            self.emit(g, "message.posted", payload("message.posted", messageId=self.uuid(), message=DROP))
        elif roll < 0.8 and g.sequence > 3:
            self.take_snapshot(g)
        else:
            kind = f"{PROJECT}.audit.event_redacted"
            self.emit(g, kind, payload(kind, sequence=self.rng.randint(1, g.sequence), eventId=DROP))

    def take_snapshot(self, g: Group) -> None:
        state = self.snapshot_state(g)
        g.snapshots.append((g.sequence, g.last_event_id, state))
        self.emit(g, "group.snapshot.created", payload(
            "group.snapshot.created", snapshotId=self.uuid(), throughSequence=g.sequence,
            stateHash=jcs.sha256_hash(jcs.canonicalize(state))))  # fmt: skip

    def snapshot_state(self, g: Group) -> dict[str, Any]:
        """The state artifact a Group Snapshot commits to (``projection.SNAPSHOT_STATE_MEMBERS``)."""
        memberships = [self.membership(g, ME, role) for role in sorted(g.my_roles)]
        if g.joined and not g.my_roles:
            memberships = [self.membership(g, ME, "worker", "ended")]
        items = []
        for item in g.items.values():
            doc: dict[str, Any] = _merge(ex.work_item(), {
                "workItemId": item.id, "missionId": g.mission, "groupId": g.id, "conversationId": item.conversation,
                "revision": item.revision, "state": item.state, "contract": item.contract,
            })  # fmt: skip
            if item.owner is not None:
                doc["owner"] = {"agentId": item.owner, "agentCardVersion": 1, "ownershipEpoch": item.ownership_epoch,
                                "capabilityPins": item.contract["requiredCapabilities"],
                                "ownershipLeaseId": ex.LEASE_ID, "acceptedAt": self.time()}  # fmt: skip
            if item.state == "offered":
                doc["offers"] = [
                    {
                        "offerId": self.uuid(),
                        "agentId": a,
                        "agentCardVersion": 1,
                        "expiresAt": item.offer_expires_at,
                        "status": "pending",
                    }
                    for a in item.candidates
                ]
            items.append(doc)
        return {"mission": {**g.mission_doc, "revision": g.revision} if g.mission_doc else None,
                "memberships": memberships, "workItems": items,
                "priorityPolicy": {"policy": g.policy, "revision": g.policy_revision} if g.policy else None,
                "ownershipLeases": [{"workItemId": i.id, "startBy": i.start_by} for i in g.items.values()
                                    if i.start_by and i.owner],
                "executionApprovals": [{"workItemId": i.id, "contractVersion": i.approved}
                                       for i in g.items.values() if i.approved is not None],
                "missionUsage": dict(g.usage)}  # fmt: skip

    def run(self, events: int) -> list[Event]:
        self.open_group("admin")
        for _ in range(self.group_count - 1):
            self.open_group()
        missions = [g for g in self.groups.values() if g.kind == "mission"]
        while len(self.events) < events:
            g = self.rng.choice(missions)
            live = [i for i in g.items.values() if i.state not in ("verified", "failed", "cancelled")]
            roll = self.rng.random()
            if roll < 0.05:
                self.step_group(self.groups[next(iter(self.groups))] if roll < 0.005 else g)
            elif roll < 0.15 or not live:
                self.authorize(g)
            else:
                self.step_item(g, self.rng.choice(live))
        return self.events


def generate(seed: int, events: int, *, groups: int = 10) -> tuple[World, list[Event]]:
    world = World(seed, groups=groups)
    return world, world.run(events)


def snapshot_document(world: World, group: str, index: int) -> tuple[dict[str, Any], bytes]:
    """The signed Group Snapshot of ``group`` at its ``index``-th recorded
    snapshot, and its state artifact's bytes."""
    sequence, last_event_id, state = world.groups[group].snapshots[index]
    document = {
        "snapshotId": world.uuid(), "groupId": group, "throughSequence": sequence, "eventIds": [last_event_id],
        "stateHash": jcs.sha256_hash(jcs.canonicalize(state)),
        "policyLog": [{"entryId": world.uuid(), "decision": "live snapshot for replay",
                       "actor": world.authority.principal, "occurredAt": "2026-11-29T12:00:00.000000Z",
                       "details": {}}],
        "createdBy": world.authority.principal,
        "createdAt": "2026-11-29T12:00:00.000000Z",
    }  # fmt: skip
    signed = sign_document(document, key_id=world.authority.key.key_id, seed=world.authority.key.seed,
                           profile="group-snapshot")  # fmt: skip
    return signed, jcs.canonicalize(state)


# --- delivery: duplicates, reordering, reconnect replays -----------------------------


def deliver(
    events: list[Event], rng: random.Random, *, dup_rate: float = 0.1, swap_rate: float = 0.2, window: int = 8
) -> list[Event]:
    """An at-least-once delivery of ``events``: some frames held back up to
    ``window`` places (a reordering transport), some delivered again up to
    ``4 * window`` places later (a reconnect's replay). Every Event is
    delivered at least once; nothing arrives before its original position."""
    keyed: list[tuple[float, int, Event]] = []
    for i, e in enumerate(events):
        delay = rng.randint(1, window) + 0.5 if rng.random() < swap_rate else 0
        keyed.append((i + delay, len(keyed), e))
        if rng.random() < dup_rate:
            keyed.append((i + rng.randint(0, 4 * window) + 0.25, len(keyed), e))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [e for _, _, e in keyed]


def resume_delivery(
    events: list[Event],
    cursors: dict[str, int],
    rng: random.Random,
    *,
    overlap: int = 5,
    limit: int | None = None,
    **kw: Any,
) -> list[Event]:
    """What a reconnecting Worker receives: per Group, the Events after its
    durable Cursor and up to ``overlap`` before it (the server replays from a
    little earlier: duplicates around the disconnect, §16), the Groups
    interleaved at random, then ``deliver``'s duplicates and reordering.
    ``limit`` keeps only about the first ``limit`` frames."""
    by_group: dict[str, list[Event]] = {}
    for e in events:
        by_group.setdefault(e["groupId"], []).append(e)
    tails = {}
    for group, evs in sorted(by_group.items()):
        start = max(0, cursors.get(group, 0) - rng.randint(0, overlap))
        if evs[start:]:
            tails[group] = evs[start:]
    order = [g for g, evs in tails.items() for _ in evs]
    rng.shuffle(order)
    if limit is not None:
        order = order[:limit]
    positions = {g: iter(evs) for g, evs in tails.items()}
    merged = [next(positions[g]) for g in order]
    frames = deliver(merged, rng, **kw)
    return frames if limit is None else frames[:limit]


def dump_jsonl(events: list[Event], path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for e in events:
            fh.write(json.dumps(e, separators=(",", ":")) + "\n")


def load_jsonl(path: str) -> Iterator[Event]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            yield json.loads(line)


class Chain:
    """Hand-built signed Events of one Group, for scripted tests.

    ``add(kind, payload, ...)`` appends the next Event (its payload checked
    against the catalogue) and returns it; ``forge(...)`` signs a document
    with whatever members a test wants to break.
    """

    def __init__(self, group: str | None = None, *, seed: int = 0):
        self.rng = random.Random(seed)
        self.authority = Authority.for_seed(seed)
        self.group = group or self.uuid()
        self.events: list[Event] = []
        self.now = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
        self.revisions: dict[str, int] = {}

    def uuid(self) -> str:
        return "urn:uuid:" + str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def forge(self, *, kind: str = "message.posted", body: dict[str, Any] | None = None, sequence: int | None = None,
              revision: int = 1, actor: str = ME, work_item_id: str | None = None,
              key: Key | None = None) -> Event:  # fmt: skip
        self.now += timedelta(seconds=1)
        return eventdoc.build_event(
            event_id=self.uuid(), kind=kind, actor={"type": "agent", "id": actor},
            cause={"type": "command", "id": self.uuid()}, correlation_id=self.uuid(), occurred_at=self.now,
            payload=body if body is not None else {"messageId": self.uuid(), "authority": False},
            accepted_by=self.authority.principal, key=key or self.authority.key, group_id=self.group,
            sequence=sequence if sequence is not None else len(self.events) + 1, aggregate_revision=revision,
            work_item_id=work_item_id,
        )  # fmt: skip

    @staticmethod
    def resign(event: Event, authority: Authority) -> Event:
        """``event`` signed again as it now stands (a test that changes a member on purpose)."""
        body = {k: v for k, v in event.items() if k != "signature"}
        return sign_document(body, key_id=authority.key.key_id, seed=authority.key.seed, profile="event")

    def add(self, kind: str, body: dict[str, Any], *, actor: str = ME, aggregate: str | None = None) -> Event:
        """The next Event; its aggregate revision counts per aggregate (``aggregate`` names it)."""
        catalogue.validate_payload(kind, body)
        item = body.get("workItemId") or (body.get("workItem") or {}).get("workItemId")
        name = aggregate or str(item or self.group)
        self.revisions[name] = self.revisions.get(name, 0) + 1
        event = self.forge(kind=kind, body=body, revision=self.revisions[name], actor=actor, work_item_id=item)
        self.events.append(event)
        return event
