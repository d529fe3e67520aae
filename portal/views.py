"""Portal pages (issue 7): read, render, and give each form its Command's context.

Every page starts at an ``access_*`` gate: a Mission the person is not a
member of is 404, the policy editor without an Organization role that sets
policy is 403. A page never changes anything: each button's form carries the
Command's context (``portal.signing.command_context``: the kind, the Group,
the person's Membership Epoch, the ``expectedRevision`` the page showed and
the payload members the server knows), and the page itself builds the Command
document, signs it with the person's browser key and POSTs it to
``/api/v0.1/commands`` (DESIGN §4, issue 19). A stale form is refused there
with ``REVISION_CONFLICT`` (compare-and-set, §15.3), and the page says so.

A person issues the MissionOwner's Commands: creating a Mission, assigning its
Coordinator, execution Approval, cancelling a WorkItem or the Mission, final
Approval or a request for changes, the priority policy. The Coordinator is an
Agent (§7.2; ``work.accept_result`` is an Agent's Command,
``command.schema.json``), so the review page shows the Coordinator's review to
people and decides nothing.

The timeline reads the stored signed Event documents (``GroupEvent.as_wire()``),
exactly what the UI socket ``/ws/ui/groups/{id}`` carries to ``portal.js``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET

from artifacts.models import BlobGroup
from artifacts.store import check_sha256
from artifacts.views import blob_download
from missions.models import Agent, Approval, Group, GroupEvent, Membership, Mission
from missions.withholding import served_documents
from mwportal.protocol import ProtocolError, format_time
from mwportal.protocol.catalogue.model import COOPERATION_POLICY
from mwportal.protocol.ids import urn
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
from .errors import explain
from .policy import current_policy, group_rows, shares
from .review import review_summary
from .signing import command_context, coordinators, signer

TIMELINE_LENGTH = 60


def _page(request: HttpRequest, agent: Agent, template: str, ctx: dict[str, Any], status: int = 200) -> HttpResponse:
    memberships = member_groups(agent)
    ctx.update(
        agent=agent,
        nav_approvals=any(OWNER in m.roles for m in memberships),
        nav_policy=may_edit_policy(agent),
        nav_create=OWNER in agent.org_roles,
        signer=signer(request, agent),
    )
    return render(request, template, ctx, status=status)


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
    rows_ = GroupEvent.objects.filter(group_id=group_id).order_by("-sequence")[:TIMELINE_LENGTH]
    organization_id = Group.objects.values_list("organization_id", flat=True).get(id=group_id)
    # A redacted Message shows its withheld form (§7.4, ``missions.withholding``).
    events = served_documents(str(group_id), str(organization_id), rows_)
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
    if access.is_owner and access.mission.status not in Mission.TERMINAL:
        ctx.update(_owner_commands(agent, access))
    return _page(request, agent, "portal/mission.html", ctx)


def _owner_commands(agent: Agent, access: MissionAccess) -> dict[str, Any]:
    """The MissionOwner's Mission-wide Commands: ``mission.cancel`` (§7.1, propagated to
    unfinished WorkItems) and ``mission.assign_coordinator`` (§7.2, a higher Coordinator Epoch)."""
    group = str(access.group.id)
    return {
        "coordinators": coordinators(agent),
        "cmd_cancel_mission": command_context(agent, "mission.cancel", group, {}, fields={"reason": "reason"},
                                              expected_revision=access.group.revision),
        "cmd_assign": command_context(agent, "mission.assign_coordinator", group, {},
                                      fields={"coordinator": "coordinatorId"}, expected_revision=access.group.revision),
        # §20: a one-shot Cooperation Override Grant for one named Command of one member.
        "cmd_override": command_context(agent, "policy.grant_cooperation_override", group, {}, fresh=("grantId",),
                                        fields={"policy_name": "policyName", "target_kind": "targetCommandKind",
                                                "target_action": "targetActionId", "reason": "reason"},
                                        builder="override"),
        "cooperation_policies": COOPERATION_POLICY["enum"],
        "beneficiaries": [(json.dumps({"type": Agent.ACTOR_TYPES[m.agent.kind], "id": urn(m.agent_id)}), m.agent.name)
                          for m in Membership.objects.filter(group_id=access.group.id, active=True).select_related(
                              "agent").order_by("agent__name")],
    }  # fmt: skip


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


def _item_commands(agent: Agent, item: WorkItem) -> WorkItem:
    """``approval.grant_execution`` (§12) for the WorkItem's current Ownership Epoch, and
    ``work.cancel`` (§10.2) with the reason: a MissionOwner cannot fail a WorkItem."""
    group = str(item.group_id)
    item.cmd_grant = command_context(  # type: ignore[attr-defined]
        agent, "approval.grant_execution", group, actions.grant_execution(item), fields={"note": "comments"},
        fresh=("approvalId",), expected_revision=item.revision, work_item_id=str(item.id))  # fmt: skip
    item.cmd_cancel = command_context(  # type: ignore[attr-defined]
        agent, "work.cancel", group, actions.cancel_work(item), fields={"reason": "reason"},
        expected_revision=item.revision, work_item_id=str(item.id))  # fmt: skip
    item.cmd_grant_id, item.cmd_cancel_id = f"cmd-grant-{item.id}", f"cmd-cancel-{item.id}"  # type: ignore[attr-defined]
    return item


@login_required
@require_GET
def approvals(request: HttpRequest) -> HttpResponse:
    agent = person_agent(request.user)
    queues = []
    for m in member_groups(agent):
        if OWNER not in m.roles:
            continue
        items = [
            _item_commands(agent, i)
            for i in WorkItem.objects.filter(group_id=m.group_id).order_by("created_at")
            if _needs_approval(i)
        ]
        if items:
            queues.append({"mission": m.group.mission, "group": m.group, "items": items})
    return _page(request, agent, "portal/approvals.html", {"queues": queues})


# --- the Coordinator's review, as people see it ------------------------------------


@login_required
@require_GET
def review(request: HttpRequest, group_id: str, item_id: str) -> HttpResponse:
    """The review pipeline's results and the Coordinator's decision (spec 13.2), read-only.

    The page hashes the Artifacts' stored bytes again (through the store), so
    a blob damaged after the pipeline ran shows as failed.
    """
    agent = person_agent(request.user)
    access = access_mission(agent, group_id)
    item = access_workitem(access, item_id)
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


def _decisions(agent: Agent, access: MissionAccess, submitted: dict[str, Any]) -> dict[str, Any]:
    """The two Commands of the final page: ``mission.approve`` (§7.3) with the Approval document the
    page signs over that exact revision and Artifact set, and ``mission.request_changes`` (§7.1)."""
    group = str(access.group.id)
    revision, hashes = submitted["missionRevision"], submitted["artifactHashes"]
    approve = command_context(
        agent, "mission.approve", group, actions.approve_mission(revision, hashes), fields={"note": "comments"},
        fresh=("approvalId",), expected_revision=submitted["expectedRevision"])  # fmt: skip
    approve["approval"] = actions.final_approval(agent, access.mission, group, revision, hashes)
    changes = command_context(
        agent, "mission.request_changes", group, actions.request_changes(revision), fields={"feedback": "feedback"},
        expected_revision=submitted["expectedRevision"])  # fmt: skip
    return {"cmd_approve": approve, "cmd_changes": changes}


@login_required
@require_GET
def final(request: HttpRequest, group_id: str) -> HttpResponse:
    agent = person_agent(request.user)
    access = access_mission(agent, group_id)
    items = list(WorkItem.objects.filter(group_id=access.group.id).order_by("created_at"))
    submitted = awaiting_approval(access.group.id)
    ctx = {
        "access": access,
        "results": [(i, review_summary(i), visuals.STATE_COLOURS.get(i.state, "#94a3b8")) for i in items],
        "unfinished": [i for i in items if i.state not in ("verified", "failed", "cancelled")],
        "submitted": submitted,
        "approvals": Approval.objects.filter(group_id=access.group.id).select_related("granted_by").order_by(
            "granted_at"),
        **(_decisions(agent, access, submitted) if submitted and access.is_owner else {}),
    }  # fmt: skip
    return _page(request, agent, "portal/final.html", ctx)


# --- the Organization priority policy ---------------------------------------------------


@login_required
@require_GET
def policy(request: HttpRequest) -> HttpResponse:
    """The editor; the page builds the policy document from the form and signs
    ``ext.mwportal.scheduling.priority_policy_set``, which validates it (``missions.policy.check_policy``)."""
    agent = person_agent(request.user)
    access_policy(agent)
    org = agent.organization
    document = current_policy(org)
    rows = group_rows(agent, document)
    classes = list((document.get("classes") or {}).items())
    admin_group = str(org.groups.get(kind="admin").id)
    ctx = {
        "org": org,
        "policy": document,
        "classes": classes,
        "class_count": len(classes),
        "rows": rows,
        "shares": shares(document, rows),
        "cmd_policy": command_context(
            agent,
            "ext.mwportal.scheduling.priority_policy_set",
            admin_group,
            {},
            expected_revision=org.policy_revision,
            builder="policy",
        ),  # fmt: skip
    }
    return _page(request, agent, "portal/policy.html", ctx)
