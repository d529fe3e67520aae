"""Portal pages (issue 7): parse -> build a catalogue Command -> ``accept()`` -> render.

Every page starts at an ``access_*`` gate: a Mission the person is not a
member of is 404, the policy editor without an Organization role that sets
policy is 403. Every button POSTs a form that carries the revision the page
showed; the view issues one Command with that ``expectedRevision``
(compare-and-set, §15.3), so a stale form is refused by ``accept()`` with
``REVISION_CONFLICT`` and the page says so in plain words, having changed
nothing.

A person issues the MissionOwner's Commands (DESIGN §4): execution Approval,
cancelling a WorkItem, final Approval or a request for changes, the priority
policy. The Coordinator is an Agent (§7.2; ``work.accept_result`` is an
Agent's Command, ``command.schema.json``), so the review page shows the
Coordinator's review to people and decides nothing.

The timeline reads the stored signed Event documents (``GroupEvent.as_wire()``),
exactly what the UI socket ``/ws/ui/groups/{id}`` carries to ``portal.js``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from artifacts.models import BlobGroup
from artifacts.store import check_sha256
from artifacts.views import blob_download
from missions.models import Agent, Approval, Group, GroupEvent
from mwportal.protocol import ProtocolError, format_time
from workitems.models import ExecutionLease, WorkItem

from . import actions, visuals
from .access import (
    OWNER,
    MissionAccess,
    access_mission,
    access_policy,
    access_workitem,
    may_edit_policy,
    member_groups,
    person_agent,
)
from .actions import Outcome, issue
from .errors import explain
from .policy import current_policy, group_rows, policy_from_form, shares
from .review import review_summary

TIMELINE_LENGTH = 60


def _page(request: HttpRequest, agent: Agent, template: str, ctx: dict[str, Any], status: int = 200) -> HttpResponse:
    memberships = member_groups(agent)
    ctx.update(
        agent=agent,
        nav_approvals=any(OWNER in m.roles for m in memberships),
        nav_policy=may_edit_policy(agent),
    )
    return render(request, template, ctx, status=status)


def _revision(request: HttpRequest) -> int:
    try:
        return int(request.POST.get("revision", ""))
    except ValueError:
        raise Http404("the form has no revision") from None


def _text(request: HttpRequest, name: str, limit: int = 2000) -> str:
    return (request.POST.get(name) or "").strip()[:limit]


def _back(request: HttpRequest, default: str) -> str:
    nxt = request.POST.get("next") or ""
    if nxt and url_has_allowed_host_and_scheme(nxt, allowed_hosts={request.get_host()}):
        return nxt
    return default


def _report(request: HttpRequest, outcome: Outcome) -> None:
    (messages.success if outcome.ok else messages.error)(request, outcome.message)


# --- the dashboard ----------------------------------------------------------------


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    agent = person_agent(request.user)
    cards = []
    series = []
    for i, m in enumerate(member_groups(agent)):
        items = list(
            WorkItem.objects.filter(group_id=m.group_id).values_list(
                "state", "contract", "approved_contract_revision", "contract_revision"
            )
        )
        counts: dict[str, int] = {}
        for state, *_ in items:
            counts[state] = counts.get(state, 0) + 1
        waiting = sum(
            1 for state, contract, approved, rev in items
            if state == "queued" and visuals.needs_execution_approval(contract) and approved != rev
        )  # fmt: skip
        colour = visuals.SERIES_COLOURS[i % len(visuals.SERIES_COLOURS)]
        queued, _ = visuals.queue_depth(m.group_id, m.group.mission.title, colour)
        series.append(queued)
        cards.append({
            "membership": m, "mission": m.group.mission, "roles": m.roles, "total": len(items),
            "states": [(s, counts[s], visuals.STATE_COLOURS[s]) for s in visuals.STATE_COLOURS if counts.get(s)],
            "waiting_approval": waiting if OWNER in m.roles else 0,
            "waiting_review": counts.get("submitted", 0) if set(m.roles) & {OWNER, "coordinator"} else 0,
            "colour": colour,
        })  # fmt: skip
    return _page(request, agent, "portal/home.html", {"cards": cards, "chart": visuals.step_chart(series)})


# --- the Mission page --------------------------------------------------------------


def _leases(access: MissionAccess) -> list[dict[str, Any]]:
    rows = (
        ExecutionLease.objects.filter(workitem__group_id=access.group.id, status="active")
        .select_related("workitem", "agent")
        .order_by("expires_at")
    )
    now = datetime.now(UTC)
    return [
        {"lease": lease, "goal": lease.workitem.contract.get("goal", ""), "expires_at": format_time(lease.expires_at),
         "seconds_left": max(0, int((lease.expires_at - now).total_seconds()))}
        for lease in rows
    ]  # fmt: skip


def _live_parts(access: MissionAccess) -> dict[str, Any]:
    queued, active = visuals.queue_depth(access.group.id, "queued", "#2563eb")
    items = list(WorkItem.objects.filter(group_id=access.group.id))
    counts = {s: 0 for s in visuals.STATE_COLOURS}
    for item in items:
        counts[item.state] = counts.get(item.state, 0) + 1
    return {
        "access": access,
        "dag": visuals.dag_layout(access.group.id),
        "leases": _leases(access),
        "chart": visuals.step_chart([queued, active], dashed={active.label}),
        "state_counts": [(s, n, visuals.STATE_COLOURS[s]) for s, n in counts.items()],
        "pending_approvals": [i for i in items if _needs_approval(i)] if access.is_owner else [],
        "pending_reviews": [i for i in items if i.state == "submitted"] if access.coordinates else [],
    }


def _needs_approval(item: WorkItem) -> bool:
    return (
        visuals.needs_execution_approval(item.contract)
        and (item.approved_contract_revision != item.contract_revision)
        and item.state in ("open", "offered", "queued")
    )


def _goals(group_id: Any) -> dict[str, str]:
    """Each WorkItem's goal by its bare id (what the timeline's lines start with)."""
    rows = WorkItem.objects.filter(group_id=group_id).values_list("id", "contract")
    return {str(k): str(v.get("goal", "")) for k, v in rows}


def _timeline(group_id: Any) -> tuple[list[dict[str, Any]], int, dict[str, str]]:
    """The newest stored signed Event documents of the Group, described for a person."""
    events = [e.as_wire() for e in GroupEvent.objects.filter(group_id=group_id).order_by("-sequence")[
        :TIMELINE_LENGTH]]  # fmt: skip
    goals = _goals(group_id)
    names = visuals.actor_names({str(e["actor"]["id"]) for e in events})
    rows = []
    for e in events:
        actor = visuals.bare(e["actor"]["id"])
        rows.append({"event": e, "kind": e["kind"], "sequence": e["sequence"], "at": e["occurredAt"],
                     "actor": names.get(actor, actor[:8]), "text": visuals.describe(e, goals, names)})  # fmt: skip
    head = events[0]["sequence"] if events else 0
    return rows, head, goals


@login_required
@require_GET
def mission(request: HttpRequest, group_id: str) -> HttpResponse:
    agent = person_agent(request.user)
    access = access_mission(agent, group_id)
    timeline, head, goals = _timeline(access.group.id)
    names = {str(k): v for k, v in Agent.objects.filter(
        memberships__group_id=access.group.id).values_list("id", "name")}  # fmt: skip
    ctx = {
        **_live_parts(access),
        "timeline": timeline,
        "head": head,
        "client": {
            "group": str(access.group.id),
            "after": head,
            "goals": goals,
            "names": names,
            "words": visuals.EVENT_WORDS,
            "socket_path": f"/ws/ui/groups/{access.group.id}",
            "live_url": reverse("portal:mission-live", args=[access.group.id]),
        },  # fmt: skip
    }
    return _page(request, agent, "portal/mission.html", ctx)


@login_required
@require_GET
def mission_live(request: HttpRequest, group_id: str) -> JsonResponse:
    """The parts of the Mission page that the live timeline refreshes after each Event."""
    agent = person_agent(request.user)
    access = access_mission(agent, group_id)
    parts = _live_parts(access)
    return JsonResponse({
        name: render_to_string(f"portal/_{name}.html", parts, request=request)
        for name in ("dag", "leases", "chart", "counts", "actions")
    })  # fmt: skip


@login_required
@require_GET
def artifact(request: HttpRequest, group_id: str, sha256: str) -> HttpResponse | StreamingHttpResponse:
    """Download an Artifact of this Mission, its hash checked before the first byte.

    Served exactly as the API's download (``blob_download``): an attachment,
    ``nosniff`` and sandboxed, so a Worker's ``text/html`` or SVG never runs
    as the signed-in viewer (issue 16 item 2).
    """
    agent = person_agent(request.user)
    access = access_mission(agent, group_id)
    try:
        sha256 = check_sha256(sha256)
    except ProtocolError:
        raise Http404("no such Artifact") from None
    held = BlobGroup.objects.filter(blob_id=sha256, group_id=access.group.id).select_related("blob").first()
    if held is None:
        raise Http404("no such Artifact in this Mission")
    try:
        return blob_download(request, held.blob)
    except ProtocolError as error:
        return HttpResponse(explain(error), status=error.http_status, content_type="text/plain")


# --- execution Approvals (MissionOwner) ------------------------------------------------


def _approvals_page(request: HttpRequest, agent: Agent, *, error: str = "", status: int = 200) -> HttpResponse:
    queues = []
    for m in member_groups(agent):
        if OWNER not in m.roles:
            continue
        items = [i for i in WorkItem.objects.filter(group_id=m.group_id).order_by("created_at") if _needs_approval(i)]
        if items:
            queues.append({"mission": m.group.mission, "group": m.group, "items": items})
    return _page(request, agent, "portal/approvals.html", {"queues": queues, "error": error}, status)


@login_required
@require_GET
def approvals(request: HttpRequest) -> HttpResponse:
    return _approvals_page(request, person_agent(request.user))


def _item_command(request: HttpRequest, group_id: str, item_id: str) -> tuple[Agent, MissionAccess, WorkItem]:
    agent = person_agent(request.user)
    access = access_mission(agent, group_id)
    return agent, access, access_workitem(access, item_id)


@login_required
@require_POST
def grant(request: HttpRequest, group_id: str, item_id: str) -> HttpResponse:
    """``approval.grant_execution`` (§12) for the WorkItem's current Ownership Epoch."""
    agent, access, item = _item_command(request, group_id, item_id)
    outcome = issue(agent, "approval.grant_execution", str(access.group.id), actions.grant_execution(item, _text(
        request, "note")), expected_revision=_revision(request), work_item_id=str(item.id))  # fmt: skip
    if not outcome.ok:
        return _approvals_page(request, agent, error=outcome.message, status=outcome.status)
    _report(request, outcome)
    return redirect(_back(request, reverse("portal:approvals")))


@login_required
@require_POST
def cancel(request: HttpRequest, group_id: str, item_id: str) -> HttpResponse:
    """Refuse execution by cancelling the WorkItem (``work.cancel``, §10.2), with the reason.

    A MissionOwner cannot fail a WorkItem (``work.fail`` is the Coordinator's
    or the owner Agent's); the Coordinator may authorize a revised WorkItem.
    """
    agent, access, item = _item_command(request, group_id, item_id)
    reason = _text(request, "reason")
    if not reason:
        return _approvals_page(request, agent, error="Say why the WorkItem is cancelled.", status=400)
    outcome = issue(agent, "work.cancel", str(access.group.id), actions.cancel_work(item, reason),
                    expected_revision=_revision(request), work_item_id=str(item.id))  # fmt: skip
    if not outcome.ok:
        return _approvals_page(request, agent, error=outcome.message, status=outcome.status)
    _report(request, outcome)
    return redirect(_back(request, reverse("portal:approvals")))


# --- the Coordinator's review, as people see it ------------------------------------


@login_required
@require_GET
def review(request: HttpRequest, group_id: str, item_id: str) -> HttpResponse:
    """The review pipeline's results and the Coordinator's decision (spec 13.2), read-only.

    The page hashes the Artifacts' stored bytes again (through the store), so
    a blob damaged after the pipeline ran shows as failed.
    """
    agent, access, item = _item_command(request, group_id, item_id)
    ctx = {"access": access, "item": item, "review": review_summary(item, recheck=True),
           "colour": visuals.STATE_COLOURS.get(item.state, "#94a3b8")}  # fmt: skip
    return _page(request, agent, "portal/review.html", ctx)


# --- final Mission Approval -------------------------------------------------------------

_MISSION_DECISIONS = (
    "mission.submitted_for_approval",
    "mission.approved",
    "mission.changes_requested",
    "mission.cancelled",
    "mission.terminated",
)


def awaiting_approval(group_id: Any) -> dict[str, Any] | None:
    """The Mission revision and Artifact set the Coordinator submitted (§7.3), while no
    decision followed it: ``{missionRevision, artifactHashes, expectedRevision, sequence}``.

    Read from the stored ``mission.submitted_for_approval`` Event document; the
    form carries the Mission's revision as the page saw it (its Group's revision:
    a Mission's status change is a Group revision change) as ``expectedRevision``.
    """
    last = GroupEvent.objects.filter(group_id=group_id, type__in=_MISSION_DECISIONS).order_by("-sequence").first()
    if last is None or last.type != "mission.submitted_for_approval":
        return None
    document = last.as_wire()
    return {
        "missionRevision": document["payload"]["missionRevision"],
        "artifactHashes": document["payload"]["artifactHashes"],
        "expectedRevision": Group.objects.values_list("revision", flat=True).get(id=group_id),
        "sequence": document["sequence"],
    }


def _final_page(
    request: HttpRequest, agent: Agent, access: MissionAccess, *, error: str = "", status: int = 200
) -> HttpResponse:
    items = list(WorkItem.objects.filter(group_id=access.group.id).order_by("created_at"))
    unfinished = [i for i in items if i.state not in ("verified", "failed", "cancelled")]
    ctx = {
        "access": access,
        "results": [(i, review_summary(i), visuals.STATE_COLOURS.get(i.state, "#94a3b8")) for i in items],
        "unfinished": unfinished,
        "submitted": awaiting_approval(access.group.id),
        "approvals": Approval.objects.filter(group_id=access.group.id).select_related("granted_by").order_by(
            "granted_at"),
        "error": error,
    }  # fmt: skip
    return _page(request, agent, "portal/final.html", ctx, status)


@login_required
@require_GET
def final(request: HttpRequest, group_id: str) -> HttpResponse:
    agent = person_agent(request.user)
    return _final_page(request, agent, access_mission(agent, group_id))


def _submitted_or_refuse(
    request: HttpRequest, agent: Agent, access: MissionAccess
) -> tuple[dict[str, Any] | None, HttpResponse | None]:
    submitted = awaiting_approval(access.group.id)
    if submitted is None:
        words = "The Coordinator has not submitted this Mission for Approval; there is nothing to decide yet."
        return None, _final_page(request, agent, access, error=words, status=409)
    return submitted, None


@login_required
@require_POST
def approve_mission(request: HttpRequest, group_id: str) -> HttpResponse:
    """``mission.approve`` (§7.3) of the submitted Mission revision and its Artifact set."""
    agent = person_agent(request.user)
    access = access_mission(agent, group_id)
    submitted, refused = _submitted_or_refuse(request, agent, access)
    if refused is not None:
        return refused
    assert submitted is not None
    payload = actions.approve_mission(submitted["missionRevision"], submitted["artifactHashes"], _text(request, "note"))
    outcome = issue(agent, "mission.approve", str(access.group.id), payload, expected_revision=_revision(request))
    if not outcome.ok:
        return _final_page(request, agent, access, error=outcome.message, status=outcome.status)
    _report(request, outcome)
    return redirect(reverse("portal:final", args=[access.group.id]))


@login_required
@require_POST
def request_changes(request: HttpRequest, group_id: str) -> HttpResponse:
    """``mission.request_changes`` (§7.1): the submitted revision goes back with feedback."""
    agent = person_agent(request.user)
    access = access_mission(agent, group_id)
    feedback = _text(request, "feedback", 10000)
    if not feedback:
        return _final_page(request, agent, access, error="Say what should change.", status=400)
    submitted, refused = _submitted_or_refuse(request, agent, access)
    if refused is not None:
        return refused
    assert submitted is not None
    outcome = issue(agent, "mission.request_changes", str(access.group.id), actions.request_changes(
        submitted["missionRevision"], feedback), expected_revision=_revision(request))  # fmt: skip
    if not outcome.ok:
        return _final_page(request, agent, access, error=outcome.message, status=outcome.status)
    _report(request, outcome)
    return redirect(reverse("portal:final", args=[access.group.id]))


# --- the Organization priority policy ---------------------------------------------------


def _policy_page(
    request: HttpRequest,
    agent: Agent,
    policy: dict[str, Any],
    *,
    revision: int | None = None,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    org = agent.organization
    rows = group_rows(agent, policy)
    classes = list((policy.get("classes") or {}).items())
    ctx = {
        "org": org,
        "policy": policy,
        "classes": classes,
        "class_count": len(classes),
        "rows": rows,
        "shares": shares(policy, rows),
        "revision": org.policy_revision if revision is None else revision,
        "error": error,
    }
    return _page(request, agent, "portal/policy.html", ctx, status)


@login_required
def policy(request: HttpRequest) -> HttpResponse:
    agent = person_agent(request.user)
    access_policy(agent)
    org = agent.organization
    if request.method != "POST":
        return _policy_page(request, agent, current_policy(org))
    revision = _revision(request)
    group_ids = [r.id for r in group_rows(agent, current_policy(org))]
    try:
        document = policy_from_form(request.POST, group_ids)
    except ProtocolError as error:
        return _policy_page(request, agent, current_policy(org), revision=revision, error=explain(error), status=400)
    admin_group = org.groups.get(kind="admin")
    outcome = issue(agent, "ext.mwportal.scheduling.priority_policy_set", str(admin_group.id), {"policy": document},
                    expected_revision=revision)  # fmt: skip
    if not outcome.ok:
        return _policy_page(request, agent, document, revision=revision, error=outcome.message, status=outcome.status)
    _report(request, outcome)
    return redirect(reverse("portal:policy"))
