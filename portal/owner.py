"""Pages of a person's own: creating a Mission, and the signing keys (DESIGN §4, issue 19).

- ``new_mission``: ``mission.create`` (§7.1), built and signed in the page: the
  person becomes the MissionOwner of a new Group with the Coordinator they
  choose (an Agent with an Agent Card, §6.1). It carries no epoch (§15.1).
- ``keys``: the person's keys (one per browser), and for an Organization admin
  every person's keys with a signed ``ext.mwportal.registry.principal_key_revoke``
  each: the key's validity history gains a ``revokedAt`` and a Command it
  signs afterwards is refused.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from missions.models import Agent, SigningKey, SigningKeyValidity
from mwportal.protocol.ids import bare, urn

from .access import OWNER, person_agent
from .signing import REVOKE, admin_group_id, command_context, coordinators
from .views import _page


@login_required
@require_GET
def new_mission(request: HttpRequest) -> HttpResponse:
    agent = person_agent(request.user)
    if OWNER not in agent.org_roles:
        raise PermissionDenied("creating a Mission needs the Organization role mission_owner")
    spec = command_context(
        agent, "mission.create", None, {}, creates_group=True, builder="mission", then="/missions/GROUP/",
        fields={"title": "title", "objective": "objective", "coordinator": "coordinatorId"},
    )  # fmt: skip
    return _page(request, agent, "portal/new_mission.html", {"coordinators": coordinators(agent), "cmd_create": spec})


def _rows(agent: Agent, principals: list[str]) -> list[dict[str, Any]]:
    keys = list(SigningKey.objects.filter(organization_id=agent.organization_id, principal_type="human",
                                          principal_id__in=principals).order_by("valid_from"))  # fmt: skip
    revoked = dict(
        SigningKeyValidity.objects.filter(key__in=keys, revoked_at__isnull=False).values_list("key_id", "revoked_at")
    )
    people = Agent.objects.filter(id__in=[bare(p, "principal") for p in principals])
    names = {str(pk): name for pk, name in people.values_list("id", "name")}
    admin_group = admin_group_id(agent)
    rows = []
    for key in keys:
        owner = names.get(bare(key.principal_id, "principal"))
        row: dict[str, Any] = {"key": key, "owner": owner, "revoked_at": revoked.get(key.pk)}
        if "admin" in agent.org_roles and row["revoked_at"] is None:
            row["cmd"] = command_context(agent, REVOKE, admin_group, {"keyId": key.key_id}, fields={"reason": "reason"})
            row["cmd_id"] = f"cmd-revoke-{key.pk}"
        rows.append(row)
    return rows


@login_required
@require_GET
def keys(request: HttpRequest) -> HttpResponse:
    agent = person_agent(request.user)
    if "admin" in agent.org_roles:
        people = Agent.objects.filter(organization_id=agent.organization_id, kind=Agent.KIND_PERSON)
        principals = [urn(pk) for pk in people.values_list("id", flat=True)]
    else:
        principals = [urn(agent.pk)]
    return _page(request, agent, "portal/keys.html", {"rows": _rows(agent, principals)})
