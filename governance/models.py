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

