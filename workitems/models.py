"""Authoritative WorkItem state (PROTOCOL §10, §11.3-§11.5).

Every row changes only inside ``missions.authority.accept()`` through the
handlers of ``workitems/handlers/``. The WorkItem row is the aggregate: its
``revision`` is what Commands compare-and-set (MWP-EVT-007).
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from missions.models import Agent, Group, Mission

from . import state_machine as sm


class WorkProposal(models.Model):
    """A member's proposal of work (spec 10.2 first row); no WorkItem exists yet."""

    id = models.UUIDField(primary_key=True, editable=False)
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="proposals")
    proposer = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    contract = models.JSONField()
    status = models.CharField(max_length=12, default="open")  # open | authorized
    # The WorkItem it would decompose (``parentWorkItemId``), for duplicate decomposition (§20).
    parent_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(status__in=["open", "authorized"]), name="proposal_status_valid")
        ]

    def __str__(self) -> str:
        return f"proposal {self.id} ({self.status})"


class WorkItem(models.Model):
    id = models.UUIDField(primary_key=True, editable=False)
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="workitems")
    mission = models.ForeignKey(Mission, on_delete=models.PROTECT, related_name="workitems")
    proposal = models.OneToOneField(WorkProposal, null=True, blank=True, on_delete=models.PROTECT)
    state = models.CharField(max_length=12, choices=[(s, s) for s in sm.STATES])
    revision = models.PositiveIntegerField(default=1)
    # The normative Work Contract (work-contract.schema.json), camelCase as sent;
    # contract_revision mirrors its contractVersion.
    contract = models.JSONField()
    contract_revision = models.PositiveIntegerField(default=1)
    # The contract revision the current owner accepted; a material revision
    # needs renewed acceptance (spec 10.1).
    accepted_contract_revision = models.PositiveIntegerField(null=True, blank=True)
    # Ownership (spec 10.3/11.3): the epoch grows with every acceptance; the
    # owner is live while owner_expires_at is ahead (start-by while queued,
    # the bounded blocked lease while blocked).
    owner = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    ownership_epoch = models.PositiveIntegerField(default=0)
    start_by = models.DateTimeField(null=True, blank=True)
    owner_expires_at = models.DateTimeField(null=True, blank=True)
    selection_basis = models.JSONField(null=True, blank=True)
    # The contract revision an execution Approval was granted for.
    approved_contract_revision = models.PositiveIntegerField(null=True, blank=True)
    # Retries (spec 11.4): attempt counts executions begun after an abnormal
    # end; the next attempt may not start before retry_not_before.
    attempt = models.PositiveIntegerField(default=0)
    needs_new_attempt = models.BooleanField(default=True)
    retry_not_before = models.DateTimeField(null=True, blank=True)
    usage = models.JSONField(default=dict)
    checkpoint_count = models.PositiveIntegerField(default=0)
    # A linked child Mission (mission.create_child) and its failure policy.
    child_mission = models.ForeignKey(
        Mission, null=True, blank=True, on_delete=models.PROTECT, related_name="parent_workitems"
    )
    child_failure_policy = models.CharField(max_length=12, blank=True)
    # Decomposition (§9.1, §20): the WorkItem this one was authorized under
    # (``parentWorkItemId``), its depth below the Mission (1: no parent) and the
    # Delegation Grant a delegate authorized it under.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    depth = models.PositiveIntegerField(default=1)
    delegation_grant = models.ForeignKey(
        "DelegationGrant", null=True, blank=True, on_delete=models.PROTECT, related_name="work_items"
    )
    # The Grant a delegate last offered it under: its budget counts against that Grant's ceilings.
    offered_under_grant = models.ForeignKey(
        "DelegationGrant", null=True, blank=True, on_delete=models.PROTECT, related_name="offered_items"
    )
    # What the last acceptance pinned (§6.1): {"agentId", "agentCardVersion", "capabilities": [capabilityRef]},
    # the owner's Agent Card version and the card's version of every required capability; kept after the
    # ownership ends, so the outcome is recorded against the capability versions that produced it.
    pins = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(state__in=list(sm.STATES)), name="workitem_state_valid"),
        ]
        indexes = [
            # Expiry sweeps: "leases/start-by/blocked leases past their time".
            models.Index(fields=["state", "owner_expires_at"], name="workitem_expiry_idx"),
        ]

    def __str__(self) -> str:
        return f"{str(self.contract.get('goal', ''))[:60]} ({self.state})"


class WorkDependency(models.Model):
    """An edge of the Mission's WorkItem DAG (spec 10.4)."""

    POLICIES = ("verified", "submitted", "terminal")

    workitem = models.ForeignKey(WorkItem, on_delete=models.PROTECT, related_name="dependencies")
    depends_on = models.ForeignKey(WorkItem, on_delete=models.PROTECT, related_name="dependents")
    policy = models.CharField(max_length=12)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workitem", "depends_on"], name="dependency_unique"),
            models.CheckConstraint(
                condition=Q(policy__in=["verified", "submitted", "terminal"]), name="dependency_policy_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workitem_id} -> {self.depends_on_id} ({self.policy})"


class Offer(models.Model):
    """A durable offer to one Agent; it reserves nothing (spec 10.3)."""

    STATUSES = ("open", "accepted", "declined", "withdrawn")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workitem = models.ForeignKey(WorkItem, on_delete=models.PROTECT, related_name="offers")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="offers")
    contract_revision = models.PositiveIntegerField()
    selection_basis = models.JSONField()
    status = models.CharField(max_length=10, default="open")
    decline_reason = models.CharField(max_length=20, blank=True)
    decline_detail = models.TextField(blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["open", "accepted", "declined", "withdrawn"]), name="offer_status_valid"
            ),
        ]
        indexes = [models.Index(fields=["workitem", "status"], name="offer_open_idx")]

    def __str__(self) -> str:
        return f"offer of {self.workitem_id} to {self.agent_id} ({self.status})"


class ExecutionLease(models.Model):
    """An Execution Lease (spec 11.3; MWP-WRK-013): a stable Lease ID bound to
    the Agent, Session Epoch, WorkItem and Ownership Epoch."""

    STATUSES = ("active", "released", "expired", "revoked")

    id = models.UUIDField(primary_key=True, editable=False)
    workitem = models.ForeignKey(WorkItem, on_delete=models.PROTECT, related_name="leases")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="leases")
    session_epoch = models.PositiveIntegerField()
    ownership_epoch = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    renewals = models.JSONField(default=list)
    status = models.CharField(max_length=10, default="active")
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=40, blank=True)
    # The capability token is bound to the lease and expires no later than
    # it; only its hash is kept, the token leaves once in the receipt.
    token_hash = models.CharField(max_length=64)
    token_expires_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["active", "released", "expired", "revoked"]), name="lease_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(token_expires_at__lte=models.F("expires_at")), name="lease_token_within_lease"
            ),
            # At most one active lease per WorkItem.
            models.UniqueConstraint(fields=["workitem"], condition=Q(status="active"), name="lease_one_active"),
        ]
        indexes = [models.Index(fields=["agent", "status"], name="lease_agent_active_idx")]

    def __str__(self) -> str:
        return f"lease {self.id} ({self.status})"


class Checkpoint(models.Model):
    """Durable progress of a WorkItem under one lease (spec 11.3/11.4)."""

    workitem = models.ForeignKey(WorkItem, on_delete=models.PROTECT, related_name="checkpoints")
    lease = models.ForeignKey(ExecutionLease, on_delete=models.PROTECT, related_name="checkpoints")
    ownership_epoch = models.PositiveIntegerField()
    number = models.PositiveIntegerField()
    state = models.JSONField()
    progress = models.JSONField()
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workitem", "number"], name="checkpoint_number_unique")]

    def __str__(self) -> str:
        return f"checkpoint {self.number} of {self.workitem_id}"


class Submission(models.Model):
    """What a Worker submitted: Artifacts and Evidence. ``authoritative`` is
    False for a late result from a fenced owner (spec 11.5; MWP-WRK-019)."""

    workitem = models.ForeignKey(WorkItem, on_delete=models.PROTECT, related_name="submissions")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    ownership_epoch = models.PositiveIntegerField()
    lease_id = models.UUIDField(null=True, blank=True)
    artifacts = models.JSONField(default=list)
    evidence = models.JSONField(default=list)
    authoritative = models.BooleanField()
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        kind = "submission" if self.authoritative else "late result"
        return f"{kind} for {self.workitem_id}"


class DelegationGrant(models.Model):
    """A scoped Delegation Grant (PROTOCOL §9.1), issued by ``membership.grant_delegation``.

    Every member of the normative Grant is a column, looked up by its ID at
    each use; ``document`` is the Grant as ``membership.delegation.granted``
    carried it. A Grant never changes: its use is checked against the
    current authoritative state (Coordinator Epoch, Membership, target).
    """

    id = models.UUIDField(primary_key=True, editable=False)
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="delegation_grants")
    mission = models.ForeignKey(Mission, on_delete=models.PROTECT, related_name="delegation_grants")
    grantee = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    target = models.ForeignKey(WorkItem, on_delete=models.PROTECT, related_name="delegation_grants")
    # [{"id", "version"}]: allowed capability IDs and their minimum versions.
    allowed_capabilities = models.JSONField()
    # The currency and an explicit ceiling for each of the six budget dimensions.
    budget = models.JSONField()
    max_descendant_depth = models.PositiveIntegerField()
    grantee_membership_epoch = models.PositiveIntegerField()
    coordinator_epoch = models.PositiveIntegerField()
    granted_by = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    granted_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    document = models.JSONField()

    def __str__(self) -> str:
        return f"delegation grant {self.id}"
