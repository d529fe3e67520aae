"""Messages and their amendments (PROTOCOL §9, §9.1).

A Message's content lives only in its signed ``message.posted`` Event (and a
correction's in its ``message.corrected`` Event): these rows index the log
(who wrote what where, and what became of it) so a handler can check an
amendment without reading content, and a redaction leaves no copy to forget.
An accepted Message is immutable; ``state`` is the latest effective form
(§9.1), each step of which is an appended Event and a ``MessageAmendment`` row.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from missions.models import Agent, Group
from workitems.models import WorkItem


class Message(models.Model):
    STATES = ("posted", "corrected", "retracted", "redacted")

    id = models.UUIDField(primary_key=True, editable=False)  # the messageId
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="messages")
    conversation_id = models.UUIDField()
    # The WorkItem whose dedicated Conversation holds the Message (None: the planning Conversation).
    work_item = models.ForeignKey(WorkItem, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    author = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    mentions = models.JSONField(default=list)  # bare UUIDs of the mentioned Principals
    state = models.CharField(max_length=10, default="posted")
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=["posted", "corrected", "retracted", "redacted"]), name="message_state_valid"
            ),
        ]
        indexes = [models.Index(fields=["group", "conversation_id"], name="message_conversation_idx")]

    def __str__(self) -> str:
        return f"message {self.id} ({self.state})"


class MessageAmendment(models.Model):
    """A correction, retraction or redaction: a new Event referencing the original Message (§9.1)."""

    KINDS = ("correction", "retraction", "redaction")

    id = models.UUIDField(primary_key=True, editable=False)  # the amendmentId
    message = models.ForeignKey(Message, on_delete=models.PROTECT, related_name="amendments")
    kind = models.CharField(max_length=10)
    actor = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    reason = models.TextField()  # auditable; for a redaction, the policy reason (§7.4)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=["correction", "retraction", "redaction"]), name="amendment_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} of {self.message_id}"


class Ambiguity(models.Model):
    """An essential ambiguity raised by a Message in a WorkItem Conversation (§10.1).

    While the WorkItem's contract is at ``contract_revision``, no candidate
    accepts it; a corrected contract (a higher revision) or a replacement
    WorkItem resolves it."""

    message = models.OneToOneField(Message, on_delete=models.PROTECT, primary_key=True, related_name="ambiguity")
    work_item = models.ForeignKey(WorkItem, on_delete=models.PROTECT, related_name="+")
    contract_revision = models.PositiveIntegerField()

    class Meta:
        indexes = [models.Index(fields=["work_item", "contract_revision"], name="ambiguity_item_idx")]

    def __str__(self) -> str:
        return f"ambiguity of {self.work_item_id} at contract {self.contract_revision}"
