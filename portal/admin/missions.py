"""Admin for the authoritative Group models (the missions app): read-only.

Rows change only inside ``accept()`` (DESIGN §2); every admin here is a
``portal.adminkit.ReadOnlyAdmin`` scoped to the Groups the user may read.
"""

from __future__ import annotations

from django.contrib import admin

from missions.models import (
    ActionReceipt,
    Agent,
    AgentCard,
    Approval,
    Group,
    GroupEvent,
    GroupSnapshot,
    Membership,
    Mission,
    Organization,
)

from ..adminkit import ReadOnlyAdmin

admin.site.site_header = "MissionWeave administration"
admin.site.site_title = "MissionWeave admin"
admin.site.index_title = "Read-only records; every change is a Command"


@admin.register(Organization)
class OrganizationAdmin(ReadOnlyAdmin):
    org_path = "id"
    list_display = ("slug", "name", "policy_revision", "created_at")


@admin.register(Agent)
class AgentAdmin(ReadOnlyAdmin):
    org_path = "organization_id"
    list_display = ("name", "kind", "org_roles", "session_epoch", "created_at")
    list_filter = ("kind",)
    search_fields = ("name",)


@admin.register(AgentCard)
class AgentCardAdmin(ReadOnlyAdmin):
    org_path = "agent__organization_id"
    list_display = ("agent", "version", "max_concurrency", "published_at")


@admin.register(Group)
class GroupAdmin(ReadOnlyAdmin):
    group_path = "id"
    list_display = ("id", "kind", "last_sequence", "revision", "created_at")
    list_filter = ("kind",)


@admin.register(Mission)
class MissionAdmin(ReadOnlyAdmin):
    list_display = ("title", "status", "created_by", "created_at")
    list_filter = ("status",)
    search_fields = ("title",)


@admin.register(Membership)
class MembershipAdmin(ReadOnlyAdmin):
    list_display = ("agent", "group", "roles", "epoch", "active", "updated_at")
    list_filter = ("active",)


@admin.register(GroupEvent)
class GroupEventAdmin(ReadOnlyAdmin):
    list_display = ("group", "sequence", "type", "aggregate_kind", "aggregate_id", "actor", "occurred_at")
    list_filter = ("type",)
    ordering = ("group", "-sequence")


@admin.register(ActionReceipt)
class ActionReceiptAdmin(ReadOnlyAdmin):
    list_display = ("actor", "action_id", "group", "accepted_at")


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ("kind", "subject_kind", "subject_id", "subject_revision", "granted_by", "granted_at")
    list_filter = ("kind",)


@admin.register(GroupSnapshot)
class GroupSnapshotAdmin(ReadOnlyAdmin):
    list_display = ("group", "sequence", "final", "created_at")
