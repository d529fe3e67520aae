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
# workitems/state_machine.py as its Events tell it); None keeps the state.
_STATE_AFTER: dict[str, str | None] = {
    "work.authorized": "open",
    "work.offered": "offered",
    "work.offer_accepted": "queued",
    "work.started": "active",
    "work.checkpointed": "queued",
    "work.blocked": "blocked",
    "work.unblocked": "queued",
    "work.submitted": "submitted",
    "work.result_accepted": "verified",
    "work.child_approved": "verified",
    "work.failed": "failed",
    "work.attempt_failed": "queued",
    "work.cancelled": "cancelled",
    "work.lease_expired": "queued",
    "work.lease_revoked": "queued",
    "mission.child_created": "blocked",
    "work.child_failed": "blocked",
}

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
            needs_approval=bool(item.contract["risk"]["requires_execution_approval"])
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
        .values_list("type", "aggregate_id", "occurred_at", "body")[:limit]
    )
    for type_, aggregate_id, at, body in rows:
        state = _STATE_AFTER[type_]
        if type_ in ("work.unblocked", "work.child_failed") and isinstance(body, dict):
            state = body.get("state") or state
        if state is not None:
            states[aggregate_id] = state
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
    ids = [a for a in actor_ids if len(a) == 36]
    names = {str(k): v for k, v in Agent.objects.filter(id__in=ids).values_list("id", "name")}
    names["system"] = "system"
    return names


# What a person reads for each Event type; the live timeline gets the same
# table (``mission-client`` JSON), so the server-drawn and live lines agree.
EVENT_WORDS: dict[str, str] = {
    "approval.execution_granted": "execution approved",
    "work.result_accepted": "result accepted",
    "work.failed": "failed",
    "work.submitted": "submitted with Evidence",
    "work.started": "started under a lease",
    "work.offer_accepted": "offer accepted",
    "work.offered": "offered",
    "work.authorized": "authorized",
    "work.checkpointed": "checkpointed",
    "work.blocked": "blocked",
    "work.unblocked": "unblocked",
    "work.cancelled": "cancelled",
    "mission.created": "Mission created",
    "mission.approved": "final Approval given",
    "membership.removed": "removed",
}


def describe(event: dict[str, Any], goals: dict[str, str], names: dict[str, str] | None = None) -> str:
    """One line about an Event for a person (``static/portal/portal.js`` says the same with ``EVENT_WORDS``)."""
    body = event.get("body") or {}
    subject = goals.get(event["aggregate"]["id"], "")
    if event["type"].startswith("membership.") and isinstance(body.get("agent"), str):
        subject = (names or {}).get(body["agent"], body["agent"][:8])
    roles = ", ".join(body.get("roles") or [])
    text = {"membership.added": "added as " + roles,
            "membership.roles_set": "now " + roles}.get(event["type"]) or EVENT_WORDS.get(
        event["type"], event["type"].split(".", 1)[-1].replace("_", " "))  # fmt: skip
    detail = body.get("note") or body.get("reason") or body.get("resolution_required") or ""
    if not detail and isinstance(body.get("evidence"), list) and body["evidence"]:
        detail = str(body["evidence"][-1].get("summary", ""))
    parts = [p for p in (subject, text) if p]
    line = " — ".join(parts)
    return f"{line}: {detail}" if detail else line
