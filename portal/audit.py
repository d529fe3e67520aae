"""The Policy Log page (PROTOCOL §6.4, §20; DESIGN §1): the Organization's policy decisions,
override grants and their consumption, redactions and protected-diagnostic references, for
its auditors only. Everyone else is refused (403), as ``GET /api/v0.1/policy-log`` refuses
them AUTH_FORBIDDEN."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

from missions import policylog
from missions.models import PolicyLogEntry

from .access import person_agent
from .views import _page

PAGE_SIZE = 200


@login_required
def policy_log(request: HttpRequest) -> HttpResponse:
    """The latest entries, newest first."""
    agent = person_agent(request.user)
    if not policylog.readable_by(agent):
        raise PermissionDenied("only the Organization's auditors read the Policy Log")
    rows = PolicyLogEntry.objects.filter(organization_id=agent.organization_id).order_by("-pk")
    entries = [policylog.document(row) for row in rows[:PAGE_SIZE]]
    return _page(request, agent, "portal/policy_log.html", {"entries": entries, "org": agent.organization})
