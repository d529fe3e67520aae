"""Portal pages (issue 7): parse -> build Command -> ``accept()`` -> render.

Every page starts at an ``access_*`` gate: a Mission the person is not a
member of is 404, the policy editor without an Organization role that sets
policy is 403. Every button POSTs a form that carries the revision the page
showed; the view issues one Command with that revision (compare-and-set,
MWP-EVT-007), so a stale form is refused by ``accept()`` and the page says so
in plain words, having changed nothing.
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
from missions.models import Agent, Approval, GroupEvent
from mwportal.protocol import ProtocolError, format_time
from workitems.contract import criteria_ids
from workitems.models import ExecutionLease, WorkItem

from . import visuals
from .access import (
    MissionAccess,
    access_mission,
    access_policy,
    access_workitem,
    may_edit_policy,
    member_groups,
    person_agent,
)
from .actions import Outcome, group_target, human_evidence, issue, workitem_target
from .errors import explain
from .policy import current_policy, group_rows, policy_from_form, shares
from .review import review_summary

TIMELINE_LENGTH = 60


def _page(request: HttpRequest, agent: Agent, template: str, ctx: dict[str, Any], status: int = 200) -> HttpResponse:
    memberships = member_groups(agent)
    ctx.update(
        agent=agent,
        nav_approvals=any("owner" in m.roles for m in memberships),
        nav_policy=may_edit_policy(agent),
    )
    return render(request, template, ctx, status=status)


def _revision(request: HttpRequest) -> int:
    try:
        return int(request.POST.get("revision", ""))
    except ValueError:
        raise Http404("the form has no revision") from None


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
            if state == "queued" and contract["risk"]["requires_execution_approval"] and approved != rev
        )  # fmt: skip
        colour = visuals.SERIES_COLOURS[i % len(visuals.SERIES_COLOURS)]
        queued, _ = visuals.queue_depth(m.group_id, m.group.mission.title, colour)
        series.append(queued)
        cards.append({
            "membership": m, "mission": m.group.mission, "roles": m.roles, "total": len(items),
            "states": [(s, counts[s], visuals.STATE_COLOURS[s]) for s in visuals.STATE_COLOURS if counts.get(s)],
            "waiting_approval": waiting if "owner" in m.roles else 0,
            "waiting_review": counts.get("submitted", 0) if set(m.roles) & {"owner", "coordinator"} else 0,
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
        bool(item.contract["risk"]["requires_execution_approval"])
        and (item.approved_contract_revision != item.contract_revision)
        and item.state in ("open", "offered", "queued")
    )


def _timeline(group_id: Any) -> tuple[list[dict[str, Any]], int, dict[str, str]]:
    events = list(GroupEvent.objects.filter(group_id=group_id).order_by("-sequence")[:TIMELINE_LENGTH])
    goals = {str(k): v.get("goal", "") for k, v in WorkItem.objects.filter(group_id=group_id).values_list(
        "id", "contract")}  # fmt: skip
    names = visuals.actor_names({e.actor for e in events} | {str(e.body.get("agent")) for e in events})
    rows = []
    for e in events:
        wire = e.as_wire()
        actor = names.get(e.actor, e.actor[:8])
        text = visuals.describe(wire, goals, names)
        rows.append({"event": wire, "type": e.type, "sequence": e.sequence, "at": e.occurred_at, "actor": actor,
                     "text": text})  # fmt: skip
    head = events[0].sequence if events else 0
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
        if "owner" not in m.roles:
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
    agent, access, item = _item_command(request, group_id, item_id)
    note = (request.POST.get("note") or "").strip()[:2000]
    outcome = issue(agent, "approval.grant_execution", str(access.group.id), {"note": note},
                    target=workitem_target(item.id, _revision(request)))  # fmt: skip
    if not outcome.ok:
        return _approvals_page(request, agent, error=outcome.message, status=outcome.status)
    _report(request, outcome)
    return redirect(_back(request, reverse("portal:approvals")))


@login_required
@require_POST
def deny(request: HttpRequest, group_id: str, item_id: str) -> HttpResponse:
    """Deny execution: the WorkItem fails with the MissionOwner's Evidence and
    returns to the Coordinator, who may re-offer it under a revised contract
    (spec 10.2: ``failed`` continues only through a new ``work.offer``)."""
    agent, access, item = _item_command(request, group_id, item_id)
    reason = (request.POST.get("reason") or "").strip()
    if not reason:
        return _approvals_page(request, agent, error="Say why execution is denied.", status=400)
    evidence = human_evidence(str(item.id), criteria_ids(item.contract), str(agent.id), "fail",
                              f"execution Approval denied: {reason}")  # fmt: skip
    outcome = issue(agent, "work.fail", str(access.group.id), {"evidence": [evidence]},
                    target=workitem_target(item.id, _revision(request)))  # fmt: skip
    if not outcome.ok:
        return _approvals_page(request, agent, error=outcome.message, status=outcome.status)
    _report(request, outcome)
    return redirect(_back(request, reverse("portal:approvals")))


# --- Coordinator review -------------------------------------------------------------


def _review_page(
    request: HttpRequest, agent: Agent, access: MissionAccess, item: WorkItem, *, error: str = "", status: int = 200
) -> HttpResponse:
    # The review page hashes the Artifacts' stored bytes again (through the
    # store), so a blob damaged after the pipeline ran shows as failed.
    ctx = {"access": access, "item": item, "review": review_summary(item, recheck=True), "error": error,
           "colour": visuals.STATE_COLOURS.get(item.state, "#94a3b8")}  # fmt: skip
    return _page(request, agent, "portal/review.html", ctx, status)


@login_required
@require_GET
def review(request: HttpRequest, group_id: str, item_id: str) -> HttpResponse:
    agent, access, item = _item_command(request, group_id, item_id)
    return _review_page(request, agent, access, item)


@login_required
@require_POST
def accept_result(request: HttpRequest, group_id: str, item_id: str) -> HttpResponse:
    """Accept the result with the Coordinator's judgement retained as Evidence.

    The review pipeline's results (integrity, schema and deterministic
    checks, reviewer Evidence, combined evaluation) were already retained by
    ``review.record`` as Evidence of this submission (spec 13.2: retain all
    results for final human Approval), so the decision carries only the
    person's own record, citing the Artifacts the review covered.
    """
    agent, access, item = _item_command(request, group_id, item_id)
    summary = review_summary(item)
    note = (request.POST.get("note") or "").strip() or "reviewed the Evidence of every criterion"
    evidence = human_evidence(str(item.id), criteria_ids(item.contract), str(agent.id), "pass", note,
                              [a["sha256"] for a in summary["artifacts"]])  # fmt: skip
    outcome = issue(agent, "work.accept_result", str(access.group.id), {"evidence": [evidence]},
                    target=workitem_target(item.id, _revision(request)))  # fmt: skip
    if not outcome.ok:
        return _review_page(request, agent, access, item, error=outcome.message, status=outcome.status)
    _report(request, outcome)
    return redirect(reverse("portal:review", args=[access.group.id, item.id]))


@login_required
@require_POST
def fail_result(request: HttpRequest, group_id: str, item_id: str) -> HttpResponse:
    agent, access, item = _item_command(request, group_id, item_id)
    reason = (request.POST.get("reason") or "").strip()
    if not reason:
        return _review_page(request, agent, access, item, error="Say why the result fails.", status=400)
    summary = review_summary(item)
    evidence = human_evidence(str(item.id), criteria_ids(item.contract), str(agent.id), "fail", reason,
                              [a["sha256"] for a in summary["artifacts"]])  # fmt: skip
    outcome = issue(agent, "work.fail", str(access.group.id), {"evidence": [evidence]},
                    target=workitem_target(item.id, _revision(request)))  # fmt: skip
    if not outcome.ok:
        return _review_page(request, agent, access, item, error=outcome.message, status=outcome.status)
    _report(request, outcome)
    return redirect(reverse("portal:review", args=[access.group.id, item.id]))


# --- final Mission Approval -------------------------------------------------------------


def _final_page(
    request: HttpRequest, agent: Agent, access: MissionAccess, *, error: str = "", status: int = 200
) -> HttpResponse:
    items = list(WorkItem.objects.filter(group_id=access.group.id).order_by("created_at"))
    unfinished = [i for i in items if i.state not in ("verified", "failed", "cancelled")]
    ctx = {
        "access": access,
        "results": [(i, review_summary(i), visuals.STATE_COLOURS.get(i.state, "#94a3b8")) for i in items],
        "unfinished": unfinished,
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


@login_required
@require_POST
def approve_mission(request: HttpRequest, group_id: str) -> HttpResponse:
    agent = person_agent(request.user)
    access = access_mission(agent, group_id)
    note = (request.POST.get("note") or "").strip()[:2000]
    outcome = issue(agent, "mission.approve", str(access.group.id), {"note": note},
                    target=group_target(access.group.id, _revision(request)))  # fmt: skip
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
    outcome = issue(agent, "org.set_priority_policy", str(admin_group.id), {"policy": document},
                    target={"kind": "organization", "id": str(org.id), "revision": revision})  # fmt: skip
    if not outcome.ok:
        return _policy_page(request, agent, document, revision=revision, error=outcome.message, status=outcome.status)
    _report(request, outcome)
    return redirect(reverse("portal:policy"))
