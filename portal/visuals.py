"""Pictures of a Mission drawn on the server: the WorkItem DAG, queue depth
over time, and one-line descriptions of Events for the timeline.

Everything here reads rows and Events and returns plain data that the
templates turn into inline SVG; no JavaScript library, nothing from a CDN.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from missions.models import Agent, GroupEvent
from workitems.models import WorkDependency, WorkItem

STATE_COLOURS = {
    "open": "#94a3b8",
    "offered": "#a78bfa",
    "queued": "#60a5fa",
    "active": "#f59e0b",
    "blocked": "#f43f5e",
    "submitted": "#22d3ee",
    "verified": "#10b981",
    "failed": "#dc2626",
    "cancelled": "#6b7280",
}

# The state an Event leaves its WorkItem in (the transition table of
# workitems/state_machine.py as the catalogue's Event kinds tell it); None keeps
# the state. An Event whose payload names the state (``status``) says it itself.
_STATE_AFTER: dict[str, str | None] = {
    "work.authorized": "open",
    "work.offer.created": "offered",
    "work.offer.accepted": "queued",
    "work.started": "active",
    "work.progressed": None,
    "work.checkpointed": "queued",
    "work.blocked": "blocked",
    "work.unblocked": "queued",
    "work.submitted": "submitted",
    "work.result.accepted": "verified",
    "work.failed": "failed",
    "work.cancelled": "cancelled",
    "ext.mwportal.work.lease_expired": "queued",
    "ext.missionweaveprotocol.core.work_execution_lease_revoked": "queued",
}
_STATUS_SAYS = frozenset(
    {"work.unblocked", "ext.mwportal.work.lease_expired", "ext.missionweaveprotocol.core.work_execution_lease_revoked"}
)

URN = "urn:uuid:"


def bare(value: Any) -> str:
    """A ``urn:uuid:`` identifier's UUID (the database's form); other text as it is."""
    text = str(value or "")
    return text[len(URN) :] if text.startswith(URN) else text


def item_of(payload: dict[str, Any], work_item_id: Any = None) -> str:
    """The WorkItem an Event is about: its envelope ``workItemId``, else the payload's."""
    if work_item_id:
        return bare(work_item_id)
    if isinstance(payload.get("workItemId"), str):
        return bare(payload["workItemId"])
    work_item = payload.get("workItem")
    return bare(work_item.get("workItemId")) if isinstance(work_item, dict) else ""


def needs_execution_approval(contract: dict[str, Any]) -> bool:
    """The Work Contract requires an execution Approval before start (§12, ``executionApproval``)."""
    return bool(contract.get("executionApproval", "not_required") != "not_required")


# --- the DAG -------------------------------------------------------------------

NODE_W, NODE_H, COL_GAP, ROW_GAP, PAD = 176, 56, 46, 20, 14


@dataclass(slots=True)
class Node:
    id: str
    goal: str
    state: str
    colour: str
    x: int
    y: int
    needs_approval: bool

    @property
    def label(self) -> str:
        return self.goal if len(self.goal) <= 22 else self.goal[:21].rstrip() + "…"


@dataclass(slots=True)
class Edge:
    path: str
    policy: str


@dataclass(slots=True)
class Dag:
    nodes: list[Node]
    edges: list[Edge]
    width: int
    height: int


def dag_layout(group_id: Any) -> Dag:
    """Layered layout: a WorkItem's column is the longest dependency path to
    it; rows within a column follow creation order."""
    items = list(WorkItem.objects.filter(group_id=group_id).order_by("created_at", "id"))
    deps = list(
        WorkDependency.objects.filter(workitem__group_id=group_id).values_list("workitem_id", "depends_on_id", "policy")
    )
    parents: dict[str, list[str]] = {str(i.id): [] for i in items}
    for child, parent, _ in deps:
        if str(child) in parents and str(parent) in parents:
            parents[str(child)].append(str(parent))
    column: dict[str, int] = {}

    def col(node: str, seen: frozenset[str] = frozenset()) -> int:
        if node not in column:
            # The DAG is acyclic (INVALID_COMMAND (dependency_cycle) is refused); ``seen`` only guards a corrupt one.
            column[node] = 1 + max((col(p, seen | {node}) for p in parents[node] if p not in seen), default=-1)
        return column[node]

    rows: dict[int, int] = {}
    nodes: dict[str, Node] = {}
    for item in items:
        c = col(str(item.id))
        r = rows.get(c, 0)
        rows[c] = r + 1
        nodes[str(item.id)] = Node(
            id=str(item.id),
            goal=str(item.contract.get("goal", "")),
            state=item.state,
            colour=STATE_COLOURS.get(item.state, "#94a3b8"),
            x=PAD + c * (NODE_W + COL_GAP),
            y=PAD + r * (NODE_H + ROW_GAP),
            needs_approval=needs_execution_approval(item.contract)
            and item.approved_contract_revision != item.contract_revision,
        )
    edges = []
    for child, parent, policy in deps:
        a, b = nodes.get(str(parent)), nodes.get(str(child))
        if a is None or b is None:
            continue
        x1, y1 = a.x + NODE_W, a.y + NODE_H // 2
        x2, y2 = b.x - 6, b.y + NODE_H // 2
        mid = (x1 + x2) // 2
        edges.append(Edge(f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}", policy))
    width = PAD * 2 + (max(column.values(), default=0) + 1) * (NODE_W + COL_GAP) - COL_GAP
    height = PAD * 2 + max(rows.values(), default=1) * (NODE_H + ROW_GAP) - ROW_GAP
    return Dag(list(nodes.values()), edges, max(width, 240), max(height, 90))


# --- queue depth over time --------------------------------------------------------


@dataclass(slots=True)
class Series:
    label: str
    colour: str
    points: list[tuple[datetime, int]]


def queue_depth(group_id: Any, label: str, colour: str, *, limit: int = 5000) -> tuple[Series, Series]:
    """How many WorkItems waited in the Group's Work queue (``queued``) and how
    many ran (``active``) after each WorkItem Event, folded from the log."""
    states: dict[str, str] = {}
    queued: list[tuple[datetime, int]] = []
    active: list[tuple[datetime, int]] = []
    rows = (
        GroupEvent.objects.filter(group_id=group_id, type__in=list(_STATE_AFTER))
        .order_by("sequence")
        .values_list("type", "occurred_at", "body")[:limit]
    )
    for kind, at, payload in rows:
        state = _STATE_AFTER[kind]
        if kind in _STATUS_SAYS and isinstance(payload.get("status"), str):
            state = payload["status"]
        item = item_of(payload)
        if state is not None and item:
            states[item] = state
        values = list(states.values())
        queued.append((at, values.count("queued")))
        active.append((at, values.count("active")))
    return Series(label, colour, queued), Series("running", "#f59e0b", active)


CHART_W, CHART_H, CHART_PAD = 560, 180, 32
SERIES_COLOURS = ["#2563eb", "#7c3aed", "#0891b2", "#db2777", "#16a34a", "#ea580c"]


@dataclass(slots=True)
class ChartLine:
    label: str
    colour: str
    points: str
    dashed: bool


@dataclass(slots=True)
class Chart:
    lines: list[ChartLine]
    y_ticks: list[tuple[int, int]]
    x_labels: list[tuple[int, str]]
    width: int = CHART_W
    height: int = CHART_H
    pad: int = CHART_PAD

    @property
    def empty(self) -> bool:
        return not self.lines


def step_chart(series: list[Series], dashed: set[str] | None = None) -> Chart:
    """Step lines of ``series`` on one time axis (sequence order when all Events share one instant)."""
    series = [s for s in series if s.points]
    if not series:
        return Chart([], [], [])
    times = sorted({t for s in series for t, _ in s.points})
    t0, t1 = times[0], times[-1]
    span = (t1 - t0).total_seconds()
    rank = {t: i for i, t in enumerate(times)}
    top = max(1, max(v for s in series for _, v in s.points))
    inner_w, inner_h = CHART_W - CHART_PAD * 2, CHART_H - CHART_PAD * 2

    def x(t: datetime) -> float:
        frac = (t - t0).total_seconds() / span if span > 0 else rank[t] / max(len(times) - 1, 1)
        return CHART_PAD + frac * inner_w

    def y(v: int) -> float:
        return CHART_PAD + inner_h - v / top * inner_h

    lines = []
    for s in series:
        pts: list[str] = []
        prev: int | None = None
        for t, v in s.points:
            if prev is not None:
                pts.append(f"{x(t):.1f},{y(prev):.1f}")
            pts.append(f"{x(t):.1f},{y(v):.1f}")
            prev = v
        pts.append(f"{CHART_PAD + inner_w:.1f},{y(prev or 0):.1f}")
        lines.append(ChartLine(s.label, s.colour, " ".join(pts), s.label in (dashed or set())))
    step = max(1, top // 4)
    ticks = [(round(y(v)), v) for v in range(0, top + 1, step)]
    fmt = "%H:%M:%S" if span < 86400 else "%d %b %H:%M"
    labels = [(CHART_PAD, t0.strftime(fmt)), (CHART_PAD + inner_w, t1.strftime(fmt))]
    return Chart(lines, ticks, labels)


# --- the timeline ------------------------------------------------------------------


def actor_names(actor_ids: set[str]) -> dict[str, str]:
    """Display names by bare UUID for the Principals of ``actor_ids`` (bare or ``urn:uuid:``)."""
    ids = [bare(a) for a in actor_ids if len(bare(a)) == 36]
    return {str(k): v for k, v in Agent.objects.filter(id__in=ids).values_list("id", "name")}


# What a person reads for each Event kind; the live timeline gets the same
# table (``mission-client`` JSON), so the server-drawn and live lines agree.
EVENT_WORDS: dict[str, str] = {
    "approval.execution.granted": "execution approved",
    "work.result.accepted": "result accepted",
    "work.failed": "failed",
    "work.submitted": "submitted with Evidence",
    "work.started": "started under a lease",
    "work.progressed": "lease renewed",
    "work.offer.accepted": "offer accepted",
    "work.offer.created": "offered",
    "work.authorized": "authorized",
    "work.checkpointed": "checkpointed",
    "work.blocked": "blocked",
    "work.unblocked": "unblocked",
    "work.cancelled": "cancelled",
    "artifact.published": "Artifact published",
    "mission.created": "Mission created",
    "mission.coordinator.assigned": "Coordinator assigned",
    "mission.submitted_for_approval": "submitted for final Approval",
    "mission.approved": "final Approval given",
    "mission.changes_requested": "changes requested",
    "mission.cancelled": "Mission cancelled",
    "membership.ended": "removed",
    "message.posted": "Message (context only)",
    "message.corrected": "Message corrected",
}


def describe(event: dict[str, Any], goals: dict[str, str], names: dict[str, str] | None = None) -> str:
    """One line about a signed Event document for a person (``static/portal/portal.js`` says the same)."""
    payload = event.get("payload") or {}
    kind = str(event["kind"])
    names = names or {}
    subject = goals.get(item_of(payload, event.get("workItemId")), "")
    text = EVENT_WORDS.get(kind, " ".join(kind.split(".")[1:]).replace("_", " "))
    if kind == "membership.changed" and isinstance(payload.get("membership"), dict):
        who = bare(payload["membership"]["member"]["id"])
        subject, text = names.get(who, who[:8]), "now " + str(payload["membership"]["role"])
    elif kind == "membership.ended" and isinstance(payload.get("principal"), dict):
        who = bare(payload["principal"]["id"])
        subject = names.get(who, who[:8])
    elif kind == "mission.created" and isinstance(payload.get("mission"), dict):
        subject = str(payload["mission"].get("objective", ""))[:80]
    said = ""
    if kind in ("message.posted", "message.corrected"):
        # Context, never an assignment (§9); a redacted Message is served without content (§7.4).
        message = payload.get("message")
        content = message.get("content") if isinstance(message, dict) else payload.get("replacementContent")
        texts = [str(c.get("text", "")) for c in content or [] if isinstance(c, dict) and c.get("type") == "text"]
        said = " ".join(texts)[:300] or "content withheld"
    approval = payload.get("approval")
    detail = (
        said
        or payload.get("reason")
        or payload.get("feedback")
        or payload.get("resolution")
        or (approval.get("comments") if isinstance(approval, dict) else "")
        or ""
    )
    evidence = payload.get("evidence")
    if not detail and isinstance(evidence, list) and evidence:
        detail = str(evidence[-1].get("method", ""))
    line = " — ".join(p for p in (subject, text) if p)
    return f"{line}: {detail}" if detail else line
