"""Admin for WorkItems and their rows (the workitems app): read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from workitems.models import Checkpoint, ExecutionLease, Offer, Submission, WorkDependency, WorkItem, WorkProposal

from ..adminkit import ReadOnlyAdmin


@admin.register(WorkItem)
class WorkItemAdmin(ReadOnlyAdmin):
    list_display = ("goal", "state", "revision", "contract_revision", "owner", "ownership_epoch", "updated_at")
    list_filter = ("state",)

    @admin.display(description="goal")
    def goal(self, item: WorkItem) -> str:
        return str(item.contract.get("goal", ""))


@admin.register(WorkProposal)
class WorkProposalAdmin(ReadOnlyAdmin):
    list_display = ("id", "status", "proposer", "created_at")


@admin.register(WorkDependency)
class WorkDependencyAdmin(ReadOnlyAdmin):
    group_path = "workitem__group_id"
    list_display = ("workitem", "depends_on", "policy")


@admin.register(Offer)
class OfferAdmin(ReadOnlyAdmin):
    group_path = "workitem__group_id"
    list_display = ("workitem", "agent", "status", "contract_revision", "expires_at")
    list_filter = ("status",)


@admin.register(ExecutionLease)
class ExecutionLeaseAdmin(ReadOnlyAdmin):
    group_path = "workitem__group_id"
    list_display = ("id", "workitem", "agent", "ownership_epoch", "status", "expires_at")
    list_filter = ("status",)
    exclude = ("token_hash",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f for f in super().get_readonly_fields(request, obj) if f != "token_hash"]


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    group_path = "workitem__group_id"
    list_display = ("workitem", "number", "ownership_epoch", "created_at")


@admin.register(Submission)
class SubmissionAdmin(ReadOnlyAdmin):
    group_path = "workitem__group_id"
    list_display = ("workitem", "agent", "authoritative", "created_at")
