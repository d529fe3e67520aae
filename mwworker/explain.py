"""``mwworker explain``: why each of this Worker's queued items waits.

    mwworker explain --store PATH --agent AGENT_ID [--capability ID@VERSION ...]
                     [--risk-ceiling CLASS] [--now RFC3339] [--limit N] [--json]

Reads the Worker's local ``mwworker.Store`` (no server, no network): the
Organization priority policy from the administrative Group's projection
(``org.priority_policy_set``), this Worker's queued WorkItems (state
``queued``, owner = ``--agent``) in the Groups where it is a member, and the
slots it holds (its ``active`` WorkItems). It loads them into a
``SchedulerCore`` and prints one row per item, in the projected dispatch
order, with every factor of that order: the Group's class, weight, quota and
slots in use, its virtual start tag against the virtual time, the item's
urgency, business impact, age, deadline, start-by, effective due, in-Group
position and any gate (approval, capability, risk, backoff) holding it back.

Only this Worker's own Groups and items appear (the store holds nothing
else). The enqueue time of an item is the ``occurred_at`` of the last Event
that put it in the queue (accepted, checkpointed, unblocked, retried,
expired, revoked), read from the inbox.

``main(argv)`` returns the exit status; ``explain_rows(store, agent, ...)``
gives the rows to other callers.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from mwportal.protocol.catalogue import PROJECT

from .fairness import RISK
from .picker import item_from_row, parse_time
from .scheduler import ExplainRow, SchedulerCore
from .store import Store

# WorkItem Events after which the item sits in its Group's queue again.
# The catalogue Event kinds that put a WorkItem (back) into its owner's queue.
_QUEUEING = frozenset(
    {
        "work.offer.accepted", "work.checkpointed", "work.unblocked", f"{PROJECT}.work.lease_expired",
        "ext.missionweaveprotocol.core.work_execution_lease_revoked",
    }
)  # fmt: skip


def _policy(store: Store) -> dict[str, Any] | None:
    best: tuple[int, dict[str, Any]] | None = None
    for gid in store.groups():
        meta = store.meta(gid)
        if meta is None or meta.kind != "admin" or not meta.priority_policy:
            continue
        policy = json.loads(meta.priority_policy)
        if isinstance(policy, dict) and (best is None or (meta.policy_revision or 0) > best[0]):
            best = (meta.policy_revision or 0, policy)
    return None if best is None else best[1]


def explain_rows(
    store: Store,
    agent: str,
    *,
    now: datetime,
    capabilities: frozenset[tuple[str, str]] | None = None,
    risk_ceiling: int | None = None,
) -> tuple[list[ExplainRow], dict[str, str]]:
    """The explain rows of ``agent``'s queued items, and a label per Group (its Mission title)."""
    core = SchedulerCore(_policy(store), capabilities=capabilities, risk_ceiling=risk_ceiling)
    labels: dict[str, str] = {}
    mine: list[str] = []
    for gid in store.groups():
        meta = store.meta(gid)
        if meta is None or meta.kind == "admin":
            continue
        rows = store.queue(gid)
        queued = [r for r in rows if r.state == "queued" and r.owner == agent]
        running = sum(1 for r in rows if r.state == "active" and r.owner == agent)
        if not queued and not running:
            continue
        mine.append(gid)
        labels[gid] = meta.mission_title or ""
        enqueued: dict[str, float] = {}
        wanted = {r.workitem for r in queued}
        for event in store.inbox(gid):
            item = event.get("workItemId") or event["payload"].get("workItemId")
            if item in wanted and event["kind"] in _QUEUEING:
                enqueued[item] = parse_time(event.get("occurredAt")) or now.timestamp()
        for row in queued:
            core.upsert(item_from_row(row, enqueued_at=enqueued.get(row.workitem, now.timestamp())), now.timestamp())
        if running:
            core.set_running(gid, running)
    return core.explain(now.timestamp(), groups=mine), labels


def _when(ts: float | None, now: float) -> str:
    if ts is None:
        return "-"
    delta = ts - now
    sign = "-" if delta < 0 else "+"
    delta = abs(delta)
    if delta >= 86400:
        return f"{sign}{delta / 86400:.1f}d"
    if delta >= 3600:
        return f"{sign}{delta / 3600:.1f}h"
    return f"{sign}{delta / 60:.0f}m"


_URGENCY = {v: k for k, v in {"low": 0, "normal": 1, "high": 2, "critical": 3}.items()}
_IMPACT = {v: k for k, v in {"low": 0, "medium": 1, "high": 2, "critical": 3}.items()}


def render(rows: Sequence[ExplainRow], labels: dict[str, str], now: datetime, *, limit: int | None = None) -> None:
    """Print the rows as a rich table."""
    from rich.console import Console
    from rich.table import Table

    ts = now.timestamp()
    table = Table(title=f"Queued work of this Worker at {now.strftime('%Y-%m-%dT%H:%M:%SZ')}", show_lines=False)
    for name, justify in (
        ("rank", "right"), ("group", "left"), ("item", "left"), ("class (w)", "left"), ("slots", "right"),
        ("S - V", "right"), ("in grp", "right"), ("urgency", "left"), ("impact", "left"), ("age", "right"),
        ("aged lvl", "right"), ("deadline", "right"), ("start by", "right"), ("due", "right"), ("gates", "left"),
    ):  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in rows[:limit] if limit else rows:
        label = labels.get(row.group) or ""
        quota = "∞" if row.quota is None else str(row.quota)
        table.add_row(
            "-" if row.rank is None else str(row.rank),
            f"{row.group[:8]} {label[:18]}".strip(),
            f"{row.key[:8]} {(row.title or '')[:24]}".strip(),
            f"{row.group_class} ({row.weight:g})",
            f"{row.running}/{quota}",
            f"{row.virtual_start - row.virtual_time:.3f}",
            "-" if row.group_rank is None else str(row.group_rank),
            _URGENCY.get(row.urgency, str(row.urgency)),
            _IMPACT.get(row.impact, str(row.impact)),
            _when(ts - row.age_seconds, ts).lstrip("-+"),
            f"{row.aged_level:.1f}",
            _when(row.deadline, ts),
            _when(row.start_by, ts),
            _when(row.due, ts),
            ", ".join(row.gates) or "ready",
        )
    # Not a terminal (a pipe, a file): wide enough that no column is squeezed.
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    console.print(
        "Order: the Group with the smallest virtual start tag S goes next (S - V: how far ahead of the virtual "
        "time V its share already is); inside a Group the earliest effective due (urgency + impact with aging, "
        "deadline, start-by). 'slots' is in use / quota."
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mwworker explain", description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="the Worker's SQLite store file")
    parser.add_argument("--agent", required=True, help="this Worker's Agent ID")
    parser.add_argument("--capability", action="append", default=[], help="ID@VERSION this Worker has (repeat)")
    parser.add_argument("--risk-ceiling", choices=sorted(RISK, key=RISK.__getitem__), help="highest risk class run")
    parser.add_argument("--now", help="RFC 3339 time to explain at (default: the clock)")
    parser.add_argument("--limit", type=int, help="show the first N rows")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON lines instead of a table")
    args = parser.parse_args(argv)
    now = datetime.now(UTC)
    if args.now:
        parsed = parse_time(args.now)
        if parsed is None:
            parser.error(f"--now: not an RFC 3339 time: {args.now}")
        now = datetime.fromtimestamp(parsed, UTC)
    caps = None
    if args.capability:
        pairs = [c.split("@", 1) for c in args.capability]
        if any(len(p) != 2 for p in pairs):
            parser.error("--capability: expected ID@VERSION")
        caps = frozenset((p[0], p[1]) for p in pairs)
    ceiling = None if args.risk_ceiling is None else RISK[args.risk_ceiling]
    with Store(args.store, agent=args.agent) as store:
        rows, labels = explain_rows(store, args.agent, now=now, capabilities=caps, risk_ceiling=ceiling)
    if args.json:
        for row in rows[: args.limit] if args.limit else rows:
            print(json.dumps({name: getattr(row, name) for name in row.__slots__}, sort_keys=True))
    else:
        render(rows, labels, now, limit=args.limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
