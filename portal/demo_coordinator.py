"""The demo Coordinator Agent (issue 18): the demo Organization's Coordinator, speaking MWP 0.1 from outside.

    python -m portal.demo_coordinator --portal URL --key var/demo/demo-coordinator.json

In MWP 0.1 the Coordinator is an Agent (§7.2): ``work.accept_result`` and
``mission.submit_for_approval`` are its Commands, no person's. ``./mw serve``
runs this process next to the demo Workers (``mwportal/supervise.py``) so the
live demo's WorkItems go past ``submitted``:

- HELLO over REST (§6.3, DESIGN §5): ``POST /api/v0.1/sessions/challenge``,
  ``POST /api/v0.1/sessions`` (``mwportal.protocol.handshake.ClientHandshake``);
- its Groups: the Memberships with the ``coordinator`` role
  (``GET /api/v0.1/memberships``), with the Membership Epoch to cite;
- each Group's Events (``GET /api/v0.1/groups/{groupId}/events?afterSequence=N``),
  every one verified (§6.4, profile ``event``) with the Group Authority key
  ``GET /api/v0.1/keys/{keyId}`` serves, before it is folded;
- every WorkItem whose dependencies are verified (§10.4) and that no Agent
  can take as it stands: ``open``, ``offered`` with every candidate declined
  or the offer expired, or ``queued`` with its owner fenced (§11.3): ``work.offer`` (§10.3) to the
  Group's Workers, or, for a review WorkItem (capability ``mwportal.review``),
  to its reviewers other than the reviewed submitter (§13.2);
- for each ``work.submitted`` whose review passed (the portal's review
  pipeline, §13.2: the latest ``ext.mwportal.review.result_recorded`` after
  the submission, whose combined evaluation passed every acceptance
  criterion, the reviewer Agent's Evidence included):
  ``work.accept_result`` (§10.2) with Evidence this Agent signs (profile
  ``evidence``), citing the submission's criteria and Artifact hashes, the
  Coordinator Epoch and the WorkItem's revision (``expectedRevision``, §15.3).
  A failed review is logged and left to a person; a pending one is waited for;
- once every WorkItem of the Mission is verified (or cancelled) and one was
  verified since the last decision: ``mission.submit_for_approval`` (§7.3)
  with the Artifact hashes of the verified results, so the MissionOwner
  approves in the portal.
- its Coordinator lease (§7.2): ``mission.renew_coordinator`` with its
  current Coordinator Epoch once half the lease has run (the expiry and its
  start are those of the last ``mission.coordinator.renewed`` or
  ``mission.coordinator.assigned``; a Mission whose lease it has not seen
  renewed yet, from ``mission.created``, is renewed on first sight), so a
  demo left running outlives the lease. It follows the lease: once the
  MissionOwner assigns another Coordinator, or the lease lapsed
  (``ext.mwportal.mission.coordinator_lease_expired``), it sends nothing for
  that Mission until a lease is assigned to it again.
- appointed as a replacement (a ``mission.coordinator.assigned`` naming it
  with a Coordinator Epoch past 1), it reconciles before any new assignment
  (§7.2): it reads the Context Package the appointment names
  (``GET /api/v0.1/groups/{groupId}/context-packages/{contextPackageId}``),
  verifies its signature (profile ``context-package``) with the key
  ``GET /api/v0.1/keys/{keyId}`` serves and its hash against the
  appointment's, then sends ``ext.mwportal.mission.coordinator_reconcile``
  citing the package and the Group sequence it has folded through. A package
  that fails either check is not reconciled with: the Agent logs it and sends
  nothing for that Mission (no renewal either, so the lease lapses and the
  MissionOwner appoints another Coordinator) until a new Event arrives.

It polls every ``--interval`` seconds (2 by default), logs one line per
action, and outlives portal restarts (a refused connection is retried; a stale
session is opened again). Django-free: only ``mwportal.protocol`` and the
standard library.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mwportal.protocol import jcs
from mwportal.protocol.catalogue.commands_group import ESSENTIAL_AMBIGUITY
from mwportal.protocol.command import Key, build_command, format_timestamp
from mwportal.protocol.errors import ProtocolError
from mwportal.protocol.eventdoc import verify_event
from mwportal.protocol.handshake import ClientHandshake
from mwportal.protocol.ids import bare, new_urn, urn
from mwportal.protocol.registry import KeyResolutionError, MemoryRegistry, Principal, RegistrationError
from mwportal.protocol.values import parse_timestamp
from mwportal.protocol.verification import VerificationFailed, sign_document, verify_document

API = "/api/v0.1"
PAGE = 500
MAX_CANDIDATES = 5
OFFER_SECONDS = 8 * 3600
# The WorkItem state each Event kind leaves (§10.2); kinds not named leave it as it was.
STATE_AFTER = {
    "work.authorized": "open",
    "work.offer.created": "offered",
    "work.offer.accepted": "queued",
    "work.started": "active",
    "work.checkpointed": "queued",
    "work.blocked": "blocked",
    "work.unblocked": "queued",
    "ext.missionweaveprotocol.core.work_execution_lease_revoked": "queued",
    "ext.mwportal.work.lease_expired": "failed",
    "mission.child.created": "blocked",
    "work.submitted": "submitted",
    "work.result.accepted": "verified",
    "work.failed": "failed",
    "work.cancelled": "cancelled",
}
# A Mission is submitted once each WorkItem is verified, or cancelled (no longer required).
FINISHED = frozenset({"verified", "cancelled"})
REVIEW_RECORDED = "ext.mwportal.review.result_recorded"
REVIEW_CAPABILITY = "mwportal.review"  # what a review WorkItem requires (artifacts.review_handlers)
# Events that close one candidate's offer without moving the WorkItem (§10.3).
OFFER_CLOSED = frozenset({"ext.mwportal.work.offer_declined"})
FENCED = "ext.mwportal.work.ownership_fenced"
CLOSED = frozenset({"mission.approved", "mission.cancelled", "mission.terminated"})
# Refusals a new session answers (§6.3): the token or the Session Epoch is no longer the current one.
SESSION_ERRORS = frozenset({"AUTH_REQUIRED", "AUTH_STALE_SESSION"})
LEASE_EXPIRED = "ext.mwportal.mission.coordinator_lease_expired"
# The lease is renewed once this share of it has run (§7.2: the Coordinator keeps its lease alive).
RENEW_AT = 0.5
ASSIGNED = "mission.coordinator.assigned"
RECONCILE = "ext.mwportal.mission.coordinator_reconcile"
RECONCILED = "ext.mwportal.mission.coordinator_reconciled"


def _ambiguous(payload: dict[str, Any]) -> bool:
    """A Message that raises an essential ambiguity (its ``ESSENTIAL_AMBIGUITY`` content item)."""
    message = payload.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return any(isinstance(c, dict) and c.get("schema") == ESSENTIAL_AMBIGUITY for c in content or [])


class Unreachable(Exception):
    """The portal did not answer (down, restarting): the pass ends, the next one tries again."""


class Refused(Exception):
    """An error document (§19) in answer to a request."""

    def __init__(self, status: int, document: Any):
        self.status = status
        self.document = document if isinstance(document, dict) else {"code": "HTTP", "message": str(document)}
        self.code = str(self.document.get("code", "HTTP"))
        super().__init__(f"{self.code} ({status}): {self.document.get('message', '')}")


@dataclass
class Item:
    state: str = "open"
    revision: int = 0
    contract: dict[str, Any] = field(default_factory=dict)  # the current Work Contract (§10.1)
    submitted: dict[str, Any] | None = None  # the last work.submitted payload
    submitter: str | None = None  # urn of the Agent that submitted it
    review: dict[str, str] | None = None  # criterion -> the pipeline's combined outcome for that submission
    candidates: set[str] = field(default_factory=set)  # of the last offer
    declined: set[str] = field(default_factory=set)  # candidates whose offer closed without acceptance
    offer_expires: int | None = None  # of the last offer, in epoch seconds: unanswered by then, it binds nobody (§10.3)
    fenced: bool = False  # queued, its owner fenced (§11.3): nobody will start it
    acting: bool = False  # a Command was sent or refused for this state: wait for a new Event

    def criteria(self) -> list[str]:
        return [str(c["criterionId"]) for c in self.contract.get("acceptanceCriteria") or []]

    def review_passed(self) -> bool:
        """The review pipeline passed every acceptance criterion of this submission (§13.2)."""
        return self.review is not None and all(self.review.get(c) == "pass" for c in self.criteria())

    def is_review(self) -> bool:
        return any(c.get("id") == REVIEW_CAPABILITY for c in self.contract.get("requiredCapabilities") or [])


@dataclass
class GroupState:
    """What this Agent folded from one Group's verified Events."""

    group: str  # urn
    mission: str | None = None  # urn
    coordinator: str | None = None  # urn of the Coordinator lease holder
    coordinator_epoch: int | None = None
    after: int = 0
    items: dict[str, Item] = field(default_factory=dict)  # by WorkItem urn
    workers: set[str] = field(default_factory=set)  # urns of the Agents with an active worker Membership
    reviewers: set[str] = field(default_factory=set)  # urns of the Agents with an active reviewer Membership
    artifacts: dict[str, str] = field(default_factory=dict)  # Artifact ID -> content hash
    awaiting: bool = False  # submitted for Approval; no decision yet
    closed: bool = False
    verified_since_decision: bool = False
    submit_refused_at: int | None = None  # the sequence a submission was refused at
    lease_granted: float | None = None  # epoch seconds: when the current lease was renewed or assigned
    lease_expires: float | None = None  # epoch seconds; None: not seen since mission.created (renew at once)
    lease_lapsed: bool = False  # the current epoch's lease expired unrenewed: a new assignment is needed
    lapse_told: bool = False  # the lapse was logged
    group_revision: int | None = None  # the Group revision the last renewal cited (§15.3)
    renew_refused_at: int | None = None  # the sequence a renewal was refused at
    # The latest appointment's sequence and the Context Package it names (ID, hash); the epoch reconciled (§7.2).
    appointed: tuple[int, str | None, str | None] | None = None
    reconciled_epoch: int | None = None
    reconcile_failed_at: int | None = None  # the sequence a reconciliation failed (or was refused) at

    def fold(self, event: dict[str, Any]) -> None:
        kind, payload = event["kind"], event["payload"]
        self.after = max(self.after, int(event["sequence"]))
        if kind == "mission.created":
            mission = payload["mission"]
            self.mission = mission["missionId"]
            self.coordinator = mission["coordinator"]["agentId"]
            self.coordinator_epoch = int(mission["coordinator"]["coordinatorEpoch"])
        elif kind == ASSIGNED:
            self.coordinator, self.coordinator_epoch = payload["coordinatorId"], int(payload["coordinatorEpoch"])
            self.lease(event)
            package = (payload.get("contextPackageId"), payload.get("contextPackageHash"))
            self.appointed, self.reconcile_failed_at = (int(event["sequence"]), *package), None
        elif kind == RECONCILED:
            self.reconciled_epoch = int(payload["coordinatorEpoch"])
        elif kind == "mission.coordinator.renewed":
            self.coordinator_epoch = int(payload["coordinatorEpoch"])
            self.lease(event)
            self.group_revision = int(event.get("aggregateRevision") or 0) or self.group_revision
        elif kind == LEASE_EXPIRED and int(payload["coordinatorEpoch"]) == self.coordinator_epoch:
            self.lease_lapsed = True
        elif kind == "artifact.published":
            self.artifacts[payload["artifact"]["artifactId"]] = payload["artifact"]["contentHash"]
        elif kind == "mission.submitted_for_approval":
            self.awaiting = True
        elif kind == "mission.changes_requested":
            self.awaiting, self.verified_since_decision = False, False
        elif kind in CLOSED:
            self.closed = True
        elif kind == "membership.changed":
            membership = payload["membership"]
            roles = {"worker": self.workers, "reviewer": self.reviewers}
            if membership["role"] in roles and membership["member"]["type"] == "agent":
                members = roles[membership["role"]]
                active = membership["state"] == "active"
                (members.add if active else members.discard)(membership["member"]["id"])
        item_id = event.get("workItemId") or _payload_item(payload)
        if item_id is None:
            return
        self.fold_offers(kind, payload, item_id)
        if kind == "work.contract.revised" and item_id in self.items and isinstance(payload.get("contract"), dict):
            self.items[item_id].contract = payload["contract"]  # a new edge (§10.4); the state stays
        if kind not in STATE_AFTER:
            return
        item = self.items.setdefault(item_id, Item())
        if kind == "work.authorized":
            item.contract = payload["workItem"]["contract"]
        item.state = STATE_AFTER[kind]
        if kind == "ext.mwportal.work.lease_expired":
            # A timed-out Execution Lease is a failed attempt (§10.2 work.fail row); the payload says where it went.
            item.state = str(payload.get("status") or "failed")
        item.revision = int(event.get("aggregateRevision") or item.revision)
        item.acting = False
        if kind == "work.submitted":
            item.submitted, item.submitter, item.review = payload, event["actor"]["id"], None
        elif kind == "work.result.accepted":
            self.verified_since_decision = True

    def lease(self, event: dict[str, Any]) -> None:
        """A lease renewed or assigned: its start (the Event's time) and expiry (§7.2)."""
        self.lease_granted = float(parse_timestamp(event["occurredAt"]).epoch_seconds)
        self.lease_expires = float(parse_timestamp(event["payload"]["leaseExpiresAt"]).epoch_seconds)
        self.lease_lapsed, self.lapse_told, self.renew_refused_at = False, False, None

    def must_reconcile(self, agent: str) -> bool:
        """``agent`` holds the lease as a replacement (epoch past 1) and has not reconciled it yet (§7.2)."""
        epoch = self.coordinator_epoch
        replacement = self.coordinator == agent and epoch is not None and epoch > 1 and self.appointed is not None
        return replacement and self.reconciled_epoch != epoch

    def renewal_due(self, now: float) -> bool:
        """Half the current lease has run, or its expiry is not known yet; not after a refusal
        until a new Event arrives."""
        if self.lease_lapsed or self.renew_refused_at == self.after:
            return False
        if self.lease_expires is None or self.lease_granted is None:
            return True
        return now >= self.lease_granted + RENEW_AT * (self.lease_expires - self.lease_granted)

    def fold_offers(self, kind: str, payload: dict[str, Any], item_id: str) -> None:
        """What the offers, the review pipeline and the fencing of an owner tell about a WorkItem."""
        item = self.items.get(item_id)
        if item is None:
            return
        if kind == "work.offer.created":
            item.candidates, item.declined, item.fenced = set(payload["candidateAgentIds"]), set(), False
            expires = payload.get("offerExpiresAt")
            item.offer_expires = parse_timestamp(expires).epoch_seconds + 1 if expires else None
        elif kind in OFFER_CLOSED:
            item.declined.add(payload["agentId"])
            item.acting = False
        elif kind == "message.posted" and _ambiguous(payload):
            # An essential ambiguity (§10.1): no candidate accepts this contract revision.
            item.declined |= item.candidates
            item.acting = False
        elif kind == FENCED:
            item.fenced, item.acting = True, False
        elif kind == "work.offer.accepted":
            item.fenced = False
        elif kind == REVIEW_RECORDED and item.submitted is not None:
            # The latest run for the latest submission: its combined evaluation per criterion.
            item.review = {
                c: str(e["details"]["outcome"])
                for e in payload["evidence"]
                if isinstance(e.get("details"), dict) and e["details"].get("stage") == "combined"
                for c in e["criterionIds"]
            }
            item.acting = False

    def ready_to_offer(self, item: Item) -> bool:
        """Every WorkItem it depends on verified (§10.4), and nobody can take it as it stands:
        open, offered with every candidate declined or the offer expired, or queued with its owner fenced."""
        deps = item.contract.get("dependencyWorkItemIds") or []
        stuck = (
            item.state == "open"
            or (item.state == "offered" and bool(item.candidates) and item.candidates <= item.declined)
            or (item.state == "offered" and item.offer_expires is not None and item.offer_expires <= time.time())
            or (item.state == "queued" and item.fenced)
        )
        return stuck and not item.acting and all(d in self.items and self.items[d].state == "verified" for d in deps)

    def candidates(self, item: Item) -> list[str]:
        """Who may take it: the Group's Workers; for a review WorkItem its reviewers,
        never the submitter of the reviewed result (§13.2)."""
        if not item.is_review():
            return sorted(self.workers)[:MAX_CANDIDATES]
        subject = str((item.contract.get("constraints") or {}).get("review", {}).get("workItemId", ""))
        submitter = self.items[subject].submitter if subject in self.items else None
        return sorted(self.reviewers - {submitter})[:MAX_CANDIDATES]

    def artifact_hashes(self) -> list[str]:
        """The content hashes of the verified results: the submitted Artifacts' and those the Evidence cites."""
        hashes: set[str] = set()
        for item in self.items.values():
            if item.state != "verified" or item.submitted is None:
                continue
            hashes.update(self.artifacts[a] for a in item.submitted["artifactIds"] if a in self.artifacts)
            hashes.update(h for e in item.submitted["evidence"] for h in e.get("artifactHashes", []))
        return sorted(hashes)


def _payload_item(payload: dict[str, Any]) -> str | None:
    if isinstance(payload.get("workItemId"), str):
        return str(payload["workItemId"])
    work_item = payload.get("workItem")
    if isinstance(work_item, dict) and isinstance(work_item.get("workItemId"), str):
        return str(work_item["workItemId"])
    return None


class Coordinator:
    """One Coordinator Agent's passes over its Groups."""

    def __init__(self, portal: str, key: Key, *, log: Callable[[str], None] | None = None):
        if key.principal is None or key.organization_id is None:
            raise ValueError("the key file names no principal or Organization (DESIGN §4)")
        self.base = portal.rstrip("/")
        self.key = key
        self.agent = urn(key.principal[1])
        self.registry = MemoryRegistry(urn(key.organization_id))  # the Organization whose Group Authority signs
        self.token: str | None = None
        self.session_epoch: int | None = None
        self.groups: dict[str, GroupState] = {}
        self.down = False  # the last pass found the portal unreachable (logged once)
        self.log = log or (lambda line: print(line, flush=True))  # noqa: T201 (the process's log)

    # --- HTTP ---------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None, *, auth: bool = True) -> Any:
        data = None if body is None else jcs.canonicalize(body)
        request = urllib.request.Request(self.base + path, data=data, method=method)  # noqa: S310 (the configured portal)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if auth and self.token is not None:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                document = json.loads(raw)
            except ValueError:
                document = {"code": "HTTP", "message": raw[:200].decode("utf-8", "replace")}
            raise Refused(exc.code, document) from None
        except (OSError, urllib.error.URLError) as exc:
            raise Unreachable(str(exc)) from None

    # --- session ------------------------------------------------------------

    def hello(self) -> None:
        """The four HELLO phases over REST (§6.3): a new session token and Session Epoch."""
        handshake = ClientHandshake(self.agent, self.key)
        challenge = self.call("POST", f"{API}/sessions/challenge", handshake.start(), auth=False)
        accepted = self.call("POST", f"{API}/sessions", handshake.receive_challenge(challenge), auth=False)
        session = handshake.receive_accept(accepted)
        self.token, self.session_epoch = session.session_token, session.session_epoch
        self.log(f"session opened: {self.agent} Session Epoch {self.session_epoch}")

    # --- Events -------------------------------------------------------------

    def learn_key(self, key_id: str) -> None:
        try:
            self.registry.resolve(key_id)
            return
        except KeyResolutionError:
            pass
        binding = self.call("GET", f"{API}/keys/{urllib.parse.quote(key_id, safe=':')}", auth=False)
        principal = binding["principal"]
        try:
            self.registry.register(
                str(binding["keyId"]),
                Principal(str(principal["type"]), str(principal["id"])),
                str(binding["publicKey"]),
                str(binding["validFrom"]),
                algorithm=str(binding.get("algorithm", "Ed25519")),
            )
        except RegistrationError as exc:
            raise ProtocolError("AUTH_INVALID_SIGNATURE", f"key {key_id} refused: {exc.reason}") from None
        ended = {k: binding[k] for k in ("validUntil", "revokedAt") if binding.get(k)}
        if ended:
            self.registry.record_status(
                key_id, str(ended.get("revokedAt") or ended.get("validUntil")),
                valid_until=ended.get("validUntil"), revoked_at=ended.get("revokedAt"),
            )  # fmt: skip

    def read_events(self, state: GroupState) -> None:
        """Every Event after the Group's cursor, each verified (§6.4) before it is folded."""
        while True:
            page = self.call("GET", f"{API}/groups/{state.group}/events?afterSequence={state.after}&limit={PAGE}")
            events = page["events"]
            for event in events:
                self.learn_key(str(event["signature"]["keyId"]))
                verify_event(jcs.canonicalize(event), self.registry)
                state.fold(event)
            if not events or state.after >= int(page.get("headSequence", state.after)):
                return

    # --- Commands -----------------------------------------------------------

    def send(self, state: GroupState, kind: str, payload: dict[str, Any], membership: int, **kw: Any) -> Any:
        assert self.key.principal is not None
        document = build_command(
            kind, actor=self.key.principal, key=self.key, payload=payload, group=bare(state.group, "groupId"),
            session_epoch=self.session_epoch, membership_epoch=membership, coordinator_epoch=state.coordinator_epoch,
            **kw,
        )  # fmt: skip
        return self.call("POST", f"{API}/commands", document)

    def evidence(self, state: GroupState, item_id: str, item: Item) -> dict[str, Any]:
        """This Agent's review of a submission (§13.2), signed with its key (profile ``evidence``)."""
        assert item.submitted is not None and state.mission is not None
        submitted = item.submitted["evidence"]
        criteria = sorted({c for e in submitted for c in e["criterionIds"]})
        hashes = sorted({h for e in submitted for h in e.get("artifactHashes", [])})
        document = {
            "evidenceId": new_urn(),
            "missionId": state.mission,
            "groupId": state.group,
            "workItemId": item_id,
            "type": "reviewer_assessment",
            "subject": {"type": "work_item", "id": item_id},
            "criterionIds": criteria,
            "method": "The demo Coordinator read the review pipeline's combined evaluation (spec 13.2): "
            "every criterion passed, with a reviewer Agent's Evidence where the criterion requires it.",
            "result": "passed",
            "artifactHashes": hashes,
            "generatedBy": {"type": "agent", "id": self.agent},
            "createdAt": format_timestamp(datetime.now(UTC)),
        }
        return sign_document(document, key_id=self.key.key_id, seed=self.key.seed, profile="evidence")

    def offer(self, state: GroupState, item_id: str, item: Item, membership: int) -> None:
        """A bounded candidate set of the Group's Workers (§10.3); the first valid acceptance wins."""
        required = list(item.contract.get("requiredCapabilities") or [])
        basis = {
            "requiredCapabilities": required,
            "verifiedMatches": required,
            "authorizationEligible": True,
            "availabilityEstimate": format_timestamp(datetime.now(UTC)),
            "expectedCost": 0,
            "reliabilityEvidence": [],
            "policyRulesApplied": ["demo: every worker of the Group, the first to accept"],
        }
        candidates = state.candidates(item)
        if not candidates:
            return
        payload = {
            "workItemId": item_id,
            "candidateAgentIds": candidates,
            "selectionBasis": basis,
            "offerExpiresInSeconds": OFFER_SECONDS,
        }
        item.acting = True  # until an Event about it arrives
        try:
            self.send(state, "work.offer", payload, membership, expected_revision=item.revision,
                      work_item_id=bare(item_id, "workItemId"))  # fmt: skip
        except Refused as exc:
            if exc.code in SESSION_ERRORS:
                raise
            self.log(f"work.offer {item_id} refused: {exc}")
            return
        self.log(f"work.offer {item_id} to {len(candidates)} {'reviewers' if item.is_review() else 'Workers'}")

    def accept_result(self, state: GroupState, item_id: str, item: Item, membership: int) -> None:
        payload = {"workItemId": item_id, "evidence": [self.evidence(state, item_id, item)]}
        revision = item.revision
        for _ in range(2):
            try:
                receipt = self.send(state, "work.accept_result", payload, membership,
                                    expected_revision=revision, work_item_id=bare(item_id, "workItemId"))  # fmt: skip
            except Refused as exc:
                current = exc.document.get("currentRevision")
                if exc.code == "REVISION_CONFLICT" and isinstance(current, int) and current != revision:
                    revision = current  # an Event this pass has not read yet moved the WorkItem on
                    continue
                if exc.code in SESSION_ERRORS:
                    raise
                item.acting = True
                self.log(f"work.accept_result {item_id} refused: {exc}")
                return
            item.acting = True  # the next page carries work.result.accepted
            self.log(f"work.accept_result {item_id} accepted (aggregate revision {receipt['aggregateRevision']})")
            return

    def renew(self, state: GroupState, membership: int) -> None:
        """``mission.renew_coordinator`` (§7.2) with the current Coordinator Epoch, for the lease's own
        period; the Group revision it cites is the last one seen, or the one a conflict names (§15.3)."""
        revision = state.group_revision or 1
        for _ in range(2):
            try:
                self.send(state, "mission.renew_coordinator", {}, membership, expected_revision=revision)
            except Refused as exc:
                current = exc.document.get("currentRevision")
                if exc.code == "REVISION_CONFLICT" and isinstance(current, int) and current != revision:
                    revision = current
                    continue
                if exc.code in SESSION_ERRORS:
                    raise
                state.renew_refused_at = state.after
                state.lease_lapsed = state.lease_lapsed or exc.code == "WORK_LEASE_EXPIRED"
                self.log(f"mission.renew_coordinator {state.mission} refused: {exc}")
                return
            state.group_revision = revision
            self.read_events(state)  # its mission.coordinator.renewed names the new expiry
            expires = format_timestamp(datetime.fromtimestamp(state.lease_expires or 0, UTC))
            self.log(f"mission.renew_coordinator {state.mission}: epoch {state.coordinator_epoch} until {expires}")
            return

    def package_problem(self, state: GroupState, package: Any, package_id: str, package_hash: str | None) -> str | None:
        """What is wrong with the Context Package the appointment named, if anything: its scope, its
        signature (profile ``context-package``, the key the Registry serves) and its hash (§7.2, §13.3)."""
        if not isinstance(package, dict):
            return "not a Context Package document"
        scope = (package.get("contextPackageId"), package.get("groupId"), package.get("missionId"))
        if scope != (package_id, state.group, state.mission):
            return f"its scope {scope} is not the appointment's package of this Group's Mission"
        signature = package.get("signature")
        try:
            if isinstance(signature, dict) and isinstance(signature.get("keyId"), str):
                self.learn_key(signature["keyId"])  # otherwise the schema stage refuses it
            verify_document(jcs.canonicalize(package), "context-package", self.registry)
        except VerificationFailed as exc:
            return f"its signature does not verify ({exc.stage.value}: {exc.reason})"
        except (Refused, ProtocolError) as exc:
            if isinstance(exc, Refused) and exc.code in SESSION_ERRORS:
                raise
            return f"its signing key is not one the Registry serves ({exc})"
        digest = jcs.sha256_hash(jcs.canonicalize(package))
        if digest != package_hash:
            return f"its hash {digest} is not the one the appointment names ({package_hash})"
        return None

    def reconcile(self, state: GroupState, membership: int) -> bool:
        """The replacement's reconciliation (§7.2): the appointment's Context Package verified, then
        ``ext.mwportal.mission.coordinator_reconcile`` through the last sequence folded (at or past the
        appointment). False when it failed: the Mission gets nothing else until a new Event."""
        assert state.appointed is not None
        _, package_id, package_hash = state.appointed
        state.reconcile_failed_at = state.after
        if package_id is None:
            self.log(f"{RECONCILE} {state.mission}: the appointment names no Context Package; not reconciling")
            return False
        path = f"{API}/groups/{state.group}/context-packages/{urllib.parse.quote(package_id, safe=':')}"
        try:
            served = self.call("GET", path)
            problem = self.package_problem(state, served.get("contextPackage"), package_id, package_hash)
        except Refused as exc:
            if exc.code in SESSION_ERRORS:
                raise
            problem = f"not served ({exc})"
        if problem is not None:
            self.log(f"Context Package {package_id} refused: {problem}; not reconciling with it (§7.2)")
            return False
        payload = {"contextPackageId": package_id, "contextPackageHash": package_hash, "throughSequence": state.after}
        try:
            self.send(state, RECONCILE, payload, membership)
        except Refused as exc:
            if exc.code in SESSION_ERRORS:
                raise
            self.log(f"{RECONCILE} {state.mission} refused: {exc}")
            return False
        self.log(f"{RECONCILE} {state.mission}: epoch {state.coordinator_epoch}, Context Package {package_id} "
                 f"verified, through sequence {payload['throughSequence']}")  # fmt: skip
        state.reconcile_failed_at = None
        self.read_events(state)  # its coordinator_reconciled
        return True

    def submit_mission(self, state: GroupState, membership: int) -> None:
        hashes = state.artifact_hashes()
        state.submit_refused_at = state.after
        if not hashes:
            self.log(f"mission.submit_for_approval {state.mission}: no Artifact hashes to submit; waiting")
            return
        try:
            self.send(state, "mission.submit_for_approval", {"artifactHashes": hashes}, membership)
        except Refused as exc:
            if exc.code in SESSION_ERRORS:
                raise
            self.log(f"mission.submit_for_approval {state.mission} refused: {exc}")
            return
        self.log(f"mission.submit_for_approval {state.mission}: {len(hashes)} Artifacts submitted for final Approval")

    # --- one pass -----------------------------------------------------------

    def coordinated_groups(self) -> dict[str, int]:
        """The Groups this Agent holds the ``coordinator`` role in, with their Membership Epochs."""
        memberships = self.call("GET", f"{API}/memberships")["memberships"]
        return {m["groupId"]: int(m["membershipEpoch"]) for m in memberships if m.get("role") == "coordinator"}

    def run_once(self) -> None:
        """One pass: read every coordinated Group's new Events and act on them."""
        if self.token is None:
            self.hello()
        try:
            self._pass()
        except Refused as exc:
            if exc.code not in SESSION_ERRORS:
                raise
            self.log(f"session refused ({exc.code}): opening a new one")
            self.hello()
            self._pass()

    def _pass(self) -> None:
        for group, membership in self.coordinated_groups().items():
            state = self.groups.setdefault(group, GroupState(group))
            self.read_events(state)
            if state.closed or state.coordinator != self.agent or state.coordinator_epoch is None:
                continue  # another Agent holds the lease now (§7.2): nothing more from this one
            if state.lease_lapsed:
                if not state.lapse_told:
                    self.log(f"lease of {state.mission} expired: waiting for the MissionOwner to assign one (§7.2)")
                    state.lapse_told = True
                continue
            if state.must_reconcile(self.agent) and (
                state.reconcile_failed_at == state.after or not self.reconcile(state, membership)
            ):
                continue  # §7.2: a replacement reconciles before anything else, new assignments included
            if state.renewal_due(time.time()):
                self.renew(state, membership)
                if state.lease_lapsed:
                    continue
            waiting = [
                (item_id, item)
                for item_id, item in state.items.items()
                if item.state == "submitted" and item.submitted is not None and not item.acting
            ]
            for item_id, item in waiting:
                if item.review is not None and not item.review_passed() and "pending" not in item.review.values():
                    item.acting = True  # until the next review run or submission
                    self.log(f"review of {item_id} did not pass ({item.review}): left for a person")
            submitted = [(i, item) for i, item in waiting if item.review_passed()]
            for item_id, item in submitted:
                self.accept_result(state, item_id, item, membership)
            if submitted:
                self.read_events(state)  # the acceptances this pass caused
            ready = [(i, item) for i, item in state.items.items() if state.ready_to_offer(item)]
            for item_id, item in ready:
                self.offer(state, item_id, item, membership)
            if ready:
                self.read_events(state)  # the offers this pass caused
            finished = (
                state.items
                and not state.awaiting
                and state.verified_since_decision
                and all(item.state in FINISHED for item in state.items.values())
                and any(item.state == "verified" for item in state.items.values())
                and state.submit_refused_at != state.after
            )
            if finished:
                self.submit_mission(state, membership)
                self.read_events(state)

    def run(self, interval: float, stop: Callable[[], bool] = lambda: False) -> None:
        while not stop():
            try:
                self.run_once()
                if self.down:
                    self.log("portal reachable again")
                self.down = False
            except Unreachable as exc:
                if not self.down:
                    self.log(f"portal unreachable ({exc}); retrying every {interval:g} s")
                self.down = True
            except (Refused, ProtocolError) as exc:
                self.log(f"pass failed: {exc}")
                self.token = None  # the next pass starts with a new session
            time.sleep(interval)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m portal.demo_coordinator", description=__doc__.split("\n\n")[0])
    parser.add_argument("--portal", required=True, help="the portal's base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--key", required=True, help="the Coordinator Agent's key file (DESIGN §4)")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between passes (default 2)")
    args = parser.parse_args(argv)
    coordinator = Coordinator(args.portal, Key.from_file(args.key))
    try:
        coordinator.run(args.interval)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
