"""Admin for WorkItems and their rows (the workitems app): read-only; actions issue Commands."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from missions.models import Agent
from workitems.models import Checkpoint, ExecutionLease, Offer, Submission, WorkDependency, WorkItem, WorkProposal

from ..actions import cancel_work, grant_execution, issue
from ..adminkit import ReadOnlyAdmin, run_action


def _goal(item: WorkItem) -> str:
    return f"WorkItem “{item.contract.get('goal', item.id)}”"


@admin.register(WorkItem)
class WorkItemAdmin(ReadOnlyAdmin):
    list_display = ("goal", "state", "revision", "contract_revision", "owner", "ownership_epoch", "updated_at")
    list_filter = ("state",)
    # The MissionOwner's Commands; accepting a result is the Coordinator Agent's (§13.2).
    actions = ["grant_execution_approval", "cancel_workitem"]

    @admin.display(description="goal")
    def goal(self, item: WorkItem) -> str:
        return str(item.contract.get("goal", ""))

    @admin.action(description="Grant execution Approval (approval.grant_execution)")
    def grant_execution_approval(self, request: HttpRequest, queryset: QuerySet[WorkItem]) -> None:
        def one(agent: Agent, item: WorkItem) -> Any:
            return issue(agent, "approval.grant_execution", str(item.group_id), grant_execution(
                item, "granted in the admin"), expected_revision=item.revision, work_item_id=str(item.id))  # fmt: skip

        run_action(self, request, queryset, one, _goal)

    @admin.action(description="Cancel (work.cancel)")
    def cancel_workitem(self, request: HttpRequest, queryset: QuerySet[WorkItem]) -> None:
        def one(agent: Agent, item: WorkItem) -> Any:
            return issue(agent, "work.cancel", str(item.group_id), cancel_work(item, "cancelled in the admin"),
                         expected_revision=item.revision, work_item_id=str(item.id))  # fmt: skip

        run_action(self, request, queryset, one, _goal)


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
