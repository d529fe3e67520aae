"""Authoritative Group state (spec 004: MWP-FND-023).

Every row here changes only inside ``missions.authority.accept()``; the admin
shows them read-only. ``GroupEvent`` rows never change at all: a database
trigger refuses UPDATE and DELETE (migration 0002).

The Registry's signing keys and validity records and the Admission Log
(PROTOCOL §6.4) are append-only too (migration 0006), written only through
``missions.keyregistry`` and ``missions.admission_log``, which run the
kernel's checks first: the registration handlers write keys and
``accept()``'s admission step writes First-Admission Records.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, cast

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Length

# ``auditor`` reads the Policy Log and protected diagnostics (DESIGN §1).
ORG_ROLES = ("mission_owner", "coordinator", "worker", "admin", "auditor")
GROUP_ROLES = ("owner", "coordinator", "worker", "reviewer")
# The six budget dimensions (spec 11.4) of Mission budgets and of WorkItem
# contracts; defined here, the lowest app that budgets, so workitems shares it.
BUDGET_DIMENSIONS = ("financial", "tokens", "tool_calls", "compute_seconds", "wall_clock_seconds", "side_effects")


class Organization(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    # The priority policy document (set by org.set_priority_policy); Workers
    # read it from the administrative Group's log.
    priority_policy = models.JSONField(default=dict)
    policy_revision = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.slug


class Agent(models.Model):
    KIND_AGENT = "agent"
    KIND_PERSON = "person"
    # An Organization service Principal (DESIGN §4): the Group Authority, the control plane.
    KIND_SERVICE = "service"
    # The wire's actor type of each kind (PROTOCOL §6: agent, human, service).
    ACTOR_TYPES = {KIND_AGENT: "agent", KIND_PERSON: "human", KIND_SERVICE: "service"}

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="agents")
    name = models.CharField(max_length=200)
    kind = models.CharField(
        max_length=10, choices=[(KIND_AGENT, "agent"), (KIND_PERSON, "person"), (KIND_SERVICE, "service")]
    )
    org_roles = models.JSONField(default=list)
    public_key = models.CharField(max_length=64, blank=True)
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="agent"
    )
    # The Session Epoch currently valid for this Agent (0: no session yet).
    # Kept on the Agent so authentication reads one row per Command.
    session_epoch = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=["agent", "person", "service"]), name="agent_kind_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class AgentCard(models.Model):
    """One published version of an Agent's capabilities (its aggregate revision)."""

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="cards")
    version = models.PositiveIntegerField()
    capabilities = models.JSONField(default=list)
    max_concurrency = models.PositiveIntegerField()
    published_at = models.DateTimeField()
    # The Organization-signed card document exactly as registered (agent-card.schema.json), served by
    # GET /api/v0.1/agents/{agentId}/card; None for a card registered before it was kept.
    document = models.JSONField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "version"], name="agentcard_version_unique")]

    def __str__(self) -> str:
        return f"{self.agent_id} card v{self.version}"


class CapabilityRecord(models.Model):
    """The Registry's performance record of one Agent's one capability version (PROTOCOL §6.1).

    Kept apart from the Agent Card (a card version never changes) and never
    folded into one global score: one row per (Agent, capability ID, version),
    counting the outcomes of the WorkItems whose assignment pinned it.
    """

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="capability_records")
    capability_id = models.CharField(max_length=200)
    capability_version = models.CharField(max_length=100)
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "capability_id", "capability_version"], name="capabilityrecord_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent_id} {self.capability_id}@{self.capability_version}"


class AgentSession(models.Model):
    """An authenticated Agent Session; a new one fences every older epoch (MWP-WRK-014)."""

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="sessions")
    epoch = models.PositiveIntegerField()
    # Only the SHA-256 of the bearer token is stored; the token itself leaves
    # once, in the session response.
    token_hash = models.CharField(max_length=64, unique=True)
    nonce = models.CharField(max_length=200)
    created_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "epoch"], name="agentsession_epoch_unique"),
            # A signed session request can be used once (replay protection).
            models.UniqueConstraint(fields=["agent", "nonce"], name="agentsession_nonce_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id} session {self.epoch}"


class Group(models.Model):
    """A Group log head: the row every append locks (DESIGN §3 step 3)."""

    KIND_MISSION = "mission"
    KIND_ADMIN = "admin"

    id = models.UUIDField(primary_key=True, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="groups")
    kind = models.CharField(max_length=10, choices=[(KIND_MISSION, "mission"), (KIND_ADMIN, "administrative")])
    last_sequence = models.BigIntegerField(default=0)
    head_hash = models.CharField(max_length=64)
    # Moves on Membership and Mission status changes, not on every Event.
    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=["mission", "admin"]), name="group_kind_valid"),
            # One administrative Group per Organization.
            models.UniqueConstraint(fields=["organization"], condition=Q(kind="admin"), name="group_one_admin_per_org"),
        ]

    def __str__(self) -> str:
        return str(self.id)


class Mission(models.Model):
    # mission.schema.json's states (§7.1), and the portal's archival after a terminal one (§7.4).
    STATUSES = ("active", "awaiting_approval", "approved", "failed", "cancelled", "archived")
    TERMINAL = ("approved", "failed", "cancelled", "archived")

    id = models.UUIDField(primary_key=True, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="missions")
    group = models.OneToOneField(Group, on_delete=models.PROTECT, related_name="mission")
    title = models.CharField(max_length=300)
    objective = models.TextField()
    status = models.CharField(max_length=20, default="active")
    created_by = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField()
    # Optional Mission-wide budgets over the six dimensions, and the usage
    # charged against them by every WorkItem of the Mission (spec 11.4).
    budgets = models.JSONField(default=dict)
    usage = models.JSONField(default=dict)
    # A child Mission's link to the parent WorkItem it runs for (spec 10.2:
    # mission.create_child). Plain ids: the parent lives in another Group.
    parent_group_id = models.UUIDField(null=True, blank=True)
    parent_workitem_id = models.UUIDField(null=True, blank=True)
    # The approved Mission a follow-up corrects or extends (§7.1: an approved
    # Mission is never reopened; a follow-up links to it).
    follow_up_of_id = models.UUIDField(null=True, blank=True)
    # The Mission's declared permissions (mission.create ``permissions``): a child's are a subset (§14).
    permissions = models.JSONField(default=list)
    # The one current Coordinator lease (§7.2): its Agent, Coordinator Epoch,
    # lease ID, expiry and renewal period (``missions.coordinator``).
    coordinator = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    coordinator_epoch = models.PositiveIntegerField(default=1)
    coordinator_card_version = models.PositiveIntegerField(default=1)  # the Agent Card version the lease pins
    coordinator_lease_id = models.UUIDField(null=True, blank=True)
    coordinator_lease_expires_at = models.DateTimeField(null=True, blank=True)
    coordinator_lease_seconds = models.PositiveIntegerField(default=300)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["active", "awaiting_approval", "approved", "failed", "cancelled", "archived"]),
                name="mission_status_valid",
            ),
            models.CheckConstraint(condition=Q(coordinator_epoch__gte=1), name="mission_coordinator_epoch_positive"),
        ]

    def __str__(self) -> str:
        return self.title


class Membership(models.Model):
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="memberships")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="memberships")
    roles = models.JSONField(default=list)
    # Bumped by every add, remove and role change of this Membership, so a
    # Command signed under older roles can be recognised.
    epoch = models.PositiveIntegerField(default=1)
    active = models.BooleanField(default=True)
    updated_at = models.DateTimeField()
    # §8: the first sequence of the Group's history this member reads (0: all of it).
    visibility_start = models.BigIntegerField(default=0)
    # §8 just-in-time Membership: granted provisionally with an offer and a
    # Context Package; accepting the offer activates it.
    provisional = models.BooleanField(default=False)
    context_package_id = models.CharField(max_length=64, blank=True, default="")
    provisional_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "agent"], name="membership_unique")]

    def __str__(self) -> str:
        return f"{self.agent_id} in {self.group_id} ({', '.join(self.roles)})"


class GroupEvent(models.Model):
    """An accepted, immutable fact of one Group's log (PROTOCOL §15.2).

    ``document`` is the signed Event document exactly as the Group Authority
    signed it (its JCS text): what every binding serves. The other columns
    index it: ``type`` is its kind, ``body`` its payload, ``actor`` the bare
    UUID of its actor. ``prev_hash``/``hash`` chain the documents per Group
    (``hash = sha256(prev_hash || JCS(document))``).
    """

    event_id = models.UUIDField(unique=True)
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="events")
    sequence = models.BigIntegerField()
    type = models.CharField(max_length=100)
    aggregate_kind = models.CharField(max_length=40)
    aggregate_id = models.CharField(max_length=64)
    aggregate_revision = models.PositiveIntegerField()
    actor = models.CharField(max_length=64)
    action_id = models.UUIDField()
    occurred_at = models.DateTimeField()
    body = models.JSONField()
    document = models.TextField(default="")
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        constraints = [
            # The unique (group, sequence) index is also the replay index:
            # "events of G after N in order" is a range scan on it.
            models.UniqueConstraint(fields=["group", "sequence"], name="groupevent_sequence_unique"),
            models.CheckConstraint(condition=Q(sequence__gte=1), name="groupevent_sequence_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.group_id}#{self.sequence} {self.type}"

    def as_wire(self) -> dict[str, Any]:
        """The signed Event document (PROTOCOL §15.2), as every binding carries it."""
        return cast(dict[str, Any], json.loads(self.document))


class OrganizationEvent(models.Model):
    """An Organization-scoped fact (PROTOCOL §15.2: Session activation, Agent Card
    registration): signed like a Group Event, outside every Group's sequence."""

    event_id = models.UUIDField(unique=True)
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="events")
    type = models.CharField(max_length=100)
    actor = models.CharField(max_length=64)
    action_id = models.UUIDField()
    occurred_at = models.DateTimeField()
    body = models.JSONField()
    document = models.TextField()

    def __str__(self) -> str:
        return f"{self.organization_id} {self.type}"

    def as_wire(self) -> dict[str, Any]:
        return cast(dict[str, Any], json.loads(self.document))


class ActionReceipt(models.Model):
    """The idempotency receipt of one accepted Command (MWP-EVT-003)."""

    actor = models.CharField(max_length=64)
    action_id = models.UUIDField()
    # The Command's signing hash, "sha256:" and 64 hex digits (§6.4).
    content_hash = models.CharField(max_length=71)
    # None for an Organization-scoped Command (PROTOCOL §15.1: no Group ID).
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="+", null=True)
    receipt = models.JSONField()
    accepted_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["actor", "action_id"], name="actionreceipt_unique")]

    def __str__(self) -> str:
        return f"{self.actor}/{self.action_id}"


class Approval(models.Model):
    """A recorded Approval: the execution gate of a WorkItem or a final Approval."""

    KIND_EXECUTION = "execution"
    KIND_FINAL = "final"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="approvals")
    kind = models.CharField(max_length=10, choices=[(KIND_EXECUTION, "execution"), (KIND_FINAL, "final")])
    subject_kind = models.CharField(max_length=40)
    subject_id = models.CharField(max_length=64)
    subject_revision = models.PositiveIntegerField()
    granted_by = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    note = models.TextField(blank=True)
    granted_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=["execution", "final"]), name="approval_kind_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} approval of {self.subject_kind} {self.subject_id}"


class GroupSnapshot(models.Model):
    """A signed snapshot of a Group's state through a sequence (PROTOCOL §7.4, §16).

    ``document`` is the normative Group Snapshot (``group-snapshot.schema.json``)
    signed by the Organization's Group Authority; ``state`` is the state its
    ``stateHash`` commits to (``sha256:`` of the state's JCS bytes), what a
    client restores; ``final`` marks the snapshot taken on archival
    (``missions.snapshots``).
    """

    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="snapshots")
    sequence = models.BigIntegerField()
    head_hash = models.CharField(max_length=64)
    document = models.JSONField()
    state = models.JSONField(default=dict)
    final = models.BooleanField(default=False)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "sequence"], name="snapshot_sequence_unique")]

    def __str__(self) -> str:
        return f"snapshot of {self.group_id} at {self.sequence}"


class AgentCursor(models.Model):
    """The highest contiguous sequence an Agent acknowledged in a Group (MWP-WRK-030).

    Delivery bookkeeping, not Group state: an ACK never deletes history.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="cursors")
    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="+")
    sequence = models.BigIntegerField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "group"], name="cursor_unique")]

    def __str__(self) -> str:
        return f"{self.agent_id} at {self.group_id}#{self.sequence}"


class AgentPresence(models.Model):
    """The capacity an Agent last reported over its connection (spec 11.1)."""

    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, related_name="presence")
    capacity = models.JSONField()
    connected = models.BooleanField(default=True)
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.agent_id} presence"


# -- The Registry's signing keys and the Admission Log (PROTOCOL §6.4, DESIGN §4) --
#
# All three tables are append-only: the database refuses UPDATE and DELETE
# (missions.keyregistry.APPEND_ONLY_TABLES, installed by migration 0005). The
# Organization-wide invariants live in unique constraints, so a verification
# reads one key and its history, whatever the Registry's size.

PRINCIPAL_TYPES = ("agent", "human", "service")


class SigningKey(models.Model):
    """One immutable key binding ``keyId -> (Principal, algorithm, public key)``.

    Register through ``missions.keyregistry.register_key``, which runs the
    kernel's strict point check first. ``valid_from`` is kept in its lexical
    form (the §2 profile allows more fractional digits than a DateTimeField)
    and compared as an instant in Python.
    """

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="signing_keys")
    key_id = models.CharField(max_length=512)
    principal_type = models.CharField(max_length=16)
    principal_id = models.CharField(max_length=512)
    algorithm = models.CharField(max_length=16)
    # Canonical unpadded base64url of the 32 raw bytes: one spelling per key,
    # so uniqueness of the text is uniqueness of the key.
    public_key = models.CharField(max_length=43)
    valid_from = models.CharField(max_length=128)
    registered_at = models.DateTimeField()

    class Meta:
        constraints = [
            # §6.4: a key ID is never reused within the Organization ...
            models.UniqueConstraint(fields=["organization", "key_id"], name="signingkey_key_id_unique"),
            # ... one public key is never registered under another Principal or key ID ...
            models.UniqueConstraint(fields=["organization", "public_key"], name="signingkey_public_key_unique"),
            # ... and a (Principal, algorithm, key) tuple has no key-ID alias.
            models.UniqueConstraint(
                fields=["organization", "principal_type", "principal_id", "algorithm", "public_key"],
                name="signingkey_tuple_unique",
            ),
            models.CheckConstraint(condition=Q(principal_type__in=PRINCIPAL_TYPES), name="signingkey_principal_type"),
            models.CheckConstraint(condition=Q(algorithm="Ed25519"), name="signingkey_algorithm_ed25519"),
            models.CheckConstraint(
                condition=models.lookups.Exact(Length("public_key"), 43),
                name="signingkey_public_key_length",
            ),
        ]

    def __str__(self) -> str:
        return self.key_id


class SigningKeyValidity(models.Model):
    """One append-only validity-status record of a key (§6.4).

    A record may add or move ``validUntil``/``revokedAt`` earlier; the
    effective value is the earliest in the history, so even a row inserted
    behind the registration function's back can only shorten validity.
    """

    key = models.ForeignKey(SigningKey, on_delete=models.PROTECT, related_name="validity")
    sequence = models.PositiveIntegerField()
    valid_until = models.CharField(max_length=128, null=True, blank=True)
    revoked_at = models.CharField(max_length=128, null=True, blank=True)
    recorded_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key", "sequence"], name="signingkeyvalidity_sequence_unique"),
            models.CheckConstraint(condition=Q(sequence__gte=1), name="signingkeyvalidity_sequence_positive"),
            models.CheckConstraint(
                condition=Q(valid_until__isnull=False) | Q(revoked_at__isnull=False),
                name="signingkeyvalidity_sets_a_boundary",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key_id}#{self.sequence}"


class AdmissionRecord(models.Model):
    """A First-Admission Record in the Organization's Admission Log (§6.4).

    ``record`` holds the record's canonical (JCS) bytes, returned as they are
    stored; the other columns index them. ``service_*`` is the accepting
    service the log authenticated when it wrote the row, which a later
    lookup reports and the kernel compares with the record's ``acceptedBy``.
    """

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="admission_records")
    signing_hash = models.CharField(max_length=71)
    admission_record_id = models.CharField(max_length=512, unique=True)
    document_kind = models.CharField(max_length=32)
    key_id = models.CharField(max_length=512)
    principal_type = models.CharField(max_length=16)
    principal_id = models.CharField(max_length=512)
    record = models.BinaryField()
    service_type = models.CharField(max_length=16)
    service_id = models.CharField(max_length=512)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            # §6.4: at most one authoritative record per logical key.
            models.UniqueConstraint(fields=["organization", "signing_hash"], name="admissionrecord_logical_key_unique"),
            models.CheckConstraint(condition=Q(service_type="service"), name="admissionrecord_service_type"),
        ]

    def __str__(self) -> str:
        return self.admission_record_id


class PolicyLogEntry(models.Model):
    """One entry of an Organization's authoritative Policy Log (PROTOCOL §6.4, §20).

    Written only through ``missions.policylog.record`` (inside ``accept()``'s
    transaction, or right after a refused Command's rollback for a limit it
    hit); a database trigger refuses UPDATE and DELETE (migration
    ``0010_h3_policy_log``). Readable only by the Organization's auditors.
    """

    entry_id = models.UUIDField(unique=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="policy_log")
    group_id = models.UUIDField(null=True, blank=True, db_index=True)
    mission_id = models.UUIDField(null=True, blank=True)
    # What was decided: see ``missions.policylog.KINDS``.
    kind = models.CharField(max_length=40)
    policy_name = models.CharField(max_length=80, blank=True, default="")
    # The Principal the decision concerns (bare UUID), the Command (bare UUID)
    # and the accepted Event it is linked to, when there is one.
    actor = models.CharField(max_length=64, blank=True, default="")
    action_id = models.UUIDField(null=True, blank=True)
    command_kind = models.CharField(max_length=200, blank=True, default="")
    event_id = models.UUIDField(null=True, blank=True)
    # The record referred to: an override grant ID, a protected-diagnostic ID, a snapshot.
    reference = models.CharField(max_length=512, blank=True, default="")
    detail = models.JSONField(default=dict)
    recorded_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["organization", "id"], name="policylog_org_order")]

    def __str__(self) -> str:
        return f"{self.kind} {self.entry_id}"
