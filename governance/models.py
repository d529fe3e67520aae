"""Organization governance state (PROTOCOL §20): the cooperation policy and the
one-shot Cooperation Override Grants. Rows change only inside
``missions.authority.accept()`` (``governance.handlers``)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from missions.models import Group, Organization


class CooperationPolicy(models.Model):
    """The Organization's cooperation limits (``governance.policy``), set by a human's
    ``ext.mwportal.governance.cooperation_policy_set``; absent means the defaults."""

    organization = models.OneToOneField(
        Organization, primary_key=True, on_delete=models.PROTECT, related_name="cooperation_policy"
    )
    policy = models.JSONField(default=dict)
    revision = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"cooperation policy r{self.revision}"


class CooperationOverrideGrant(models.Model):
    """A durable, one-shot escalation of one cooperation limit for one named Command (§20).

    Every binding member is fixed at issuance; only the consumption columns
    are ever set, once, in the transaction that accepts the target Command.
    """

    id = models.UUIDField(primary_key=True, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    mission_id = models.UUIDField()
    group_id = models.UUIDField(db_index=True)
    policy_name = models.CharField(max_length=80)
    beneficiary_type = models.CharField(max_length=16)
    beneficiary_id = models.UUIDField()
    target_kind = models.CharField(max_length=200)
    target_action_id = models.UUIDField()
    reason = models.TextField()
    approver_type = models.CharField(max_length=16)
    approver_id = models.UUIDField()
    granted_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    consumed_at = models.DateTimeField(null=True, blank=True)
    consumed_event_id = models.UUIDField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(consumed_at__isnull=True) | Q(consumed_event_id__isnull=False),
                name="override_consumption_linked_to_event",
            )
        ]

    def __str__(self) -> str:
        return f"override {self.policy_name} for {self.target_kind}"


class ExtensionProfile(models.Model):
    """One Organization-approved version of an Extension Profile (PROTOCOL §18, ``extension-profile.schema.json``).

    ``document`` is the signed profile exactly as registered (its ``signature`` by an Organization service
    key, verified at registration); the other columns repeat its members for lookups. Registered only by
    ``ext.mwportal.extension.profile_register`` (``governance.extensions``).
    """

    id = models.BigAutoField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    profile_uri = models.CharField(max_length=2000)
    name = models.CharField(max_length=200)
    version = models.CharField(max_length=64)
    major = models.PositiveIntegerField()
    schema_uri = models.CharField(max_length=2000)
    schema_hash = models.CharField(max_length=71)
    required_capabilities = models.JSONField(default=list)
    critical = models.BooleanField()
    command_kinds = models.JSONField(default=list)
    event_kinds = models.JSONField(default=list)
    approved_by = models.CharField(max_length=200)
    approved_at = models.DateTimeField()
    document = models.JSONField()
    registered_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "profile_uri", "version"], name="extension_profile_once")
        ]

    def __str__(self) -> str:
        return f"{self.profile_uri} {self.version}"


class GroupProfilePin(models.Model):
    """The major version of a registered Extension Profile that a Group supports (§18), set by
    ``ext.mwportal.extension.profile_pin``."""

    id = models.BigAutoField(primary_key=True)
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="+")
    profile_uri = models.CharField(max_length=2000)
    major = models.PositiveIntegerField()
    pinned_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "profile_uri"], name="group_profile_pin_once")]

    def __str__(self) -> str:
        return f"{self.profile_uri} {self.major}.x in {self.group_id}"
