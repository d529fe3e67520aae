"""What every admin of an authoritative model shares (STYLE §1; issue 7).

``ReadOnlyAdmin`` offers no add, change or delete form: authoritative rows
change only inside ``accept()``. A staff user sees only the rows of Groups
their Agent may read (active Mission Memberships and their Organization's
administrative Group); a superuser sees every row. The admin has no actions:
a person's Command is built and signed in their browser on the portal's pages
(DESIGN §4, issue 19), and the admin's forms cannot sign.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest

from missions.models import Agent, Group, Membership


def visible_group_ids(request: HttpRequest) -> list[Any] | None:
    """The Groups the request's user may read; None means all (superuser)."""
    user = request.user
    if user.is_superuser:
        return None
    agent = Agent.objects.filter(user_id=user.pk).first() if user.pk is not None else None
    if agent is None:
        return []
    mine = list(Membership.objects.filter(agent=agent, active=True).values_list("group_id", flat=True))
    admin_groups = list(
        Group.objects.filter(organization_id=agent.organization_id, kind=Group.KIND_ADMIN).values_list("id", flat=True)
    )
    return mine + admin_groups


def request_agent(request: HttpRequest) -> Agent | None:
    pk = request.user.pk
    return Agent.objects.filter(user_id=pk).first() if pk is not None else None


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Read-only: no add, change or delete; rows scoped to the user's Groups.

    ``group_path`` is the lookup from the model to its Group id
    (``"group_id"``, ``"workitem__group_id"``); ``org_path`` scopes
    Organization-level rows instead.
    """

    group_path: str | None = "group_id"
    org_path: str | None = None
    list_per_page = 50

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        user = request.user
        return bool(user.is_active and user.is_staff and (user.is_superuser or request_agent(request)))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        return [f.name for f in self.model._meta.fields]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        qs = super().get_queryset(request)
        if request.user.is_superuser:
            return qs
        if self.org_path is not None:
            agent = request_agent(request)
            if agent is None:
                return qs.none()
            return qs.filter(Q(**{self.org_path: agent.organization_id}))
        groups = visible_group_ids(request)
        assert self.group_path is not None
        return qs.filter(**{f"{self.group_path}__in": groups or []})
