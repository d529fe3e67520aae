"""Replay a workload through the Scheduler and plot what each Group got.

    python -m mwworker.sim WORKLOAD.json --out DIR [--bins 60]

For operators tuning an Organization priority policy: the workload is replayed
through ``mwworker.scheduler.SchedulerCore`` on a simulated clock (no
randomness: the same file gives the same result), and ``DIR`` receives

- ``share.png``: per-Group share of the busy slots over time (stacked), and
  below it each Group's slots in use against its weighted max-min fair share
  of the slots (from the weights, the quotas and the work it has; dashed);
- ``waits.png``: the histogram of queue waits (enqueue to start) per Group;
- ``summary.json``: per Group the weight, dispatches, mean/p95/max wait,
  deadline misses, and the longest run of dispatches it waited while
  schedulable against the Scheduler's bound (``starvation_bound``).

Workload format (JSON; times in seconds from the start of the simulation)::

    {
      "slots": 4,                          # the Worker's declared concurrency
      "until": 7200,                       # optional: stop starting work after this time
      "policy": {                          # the Organization priority policy (missions/policy.py)
        "classes": {"critical": 8, "high": 4, "normal": 2, "low": 1},
        "default_class": "normal",
        "groups": {"payments": {"class": "high", "quota": 2}},
        "aging_seconds": 300
      },
      "capabilities": [["python", "3.12"]],   # optional: the Worker's (id, version) pairs
      "groups": {
        "payments": {"arrivals": [
          {"at": 0, "count": 50, "every": 30,   # 50 items, one every 30 s from t=0
           "duration": 120,                     # seconds each item runs in its slot
           "urgency": "high", "business_impact": "critical",
           "deadline_in": 3600,                 # optional: deadline = arrival + this
           "requires_approval": false,          # optional: the Approval gate ...
           "approved_after": 600,               # ... opens this long after arrival (never if absent)
           "capabilities": [["python", "3.12"]], # optional: required (id, version) pairs
           "title": "settle batch"}             # optional
        ]}
      },
      "policy_changes": [{"at": 3600, "policy": {...}}]   # optional
    }

The Scheduler charges one unit per dispatch (as the runtime's ``Picker``
does), so its fairness is in items started: a Group whose items run longer
holds more slot time than its weight's share, which the lower panel shows.
Group names are free text here (the policy's ``groups`` keys must match
them). ``mwworker/sim_examples/`` holds an example.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .fairness import IMPACT, URGENCY, Item, starvation_bound
from .preemption import fair_slots
from .scheduler import SchedulerCore


@dataclass
class GroupStats:
    weight: float
    dispatched: int = 0
    waits: list[float] = field(default_factory=list)
    deadline_items: int = 0
    deadline_misses: int = 0
    worst_gap: int = 0
    worst_gap_bound: int = 0


@dataclass
class SimResult:
    groups: dict[str, GroupStats]
    # per dispatch: (time, group, slot seconds, each Group's weighted max-min fair
    # share of the slots at that moment, from its weight, quota and work)
    dispatch_log: list[tuple[float, str, float, dict[str, float]]]
    end: float
    slots: int


def _caps(value: Any) -> frozenset[tuple[str, str]]:
    return frozenset((str(c[0]), str(c[1])) for c in value or [])


def simulate(workload: dict[str, Any]) -> SimResult:
    """Replay ``workload`` (the module docstring's format) and return what happened."""
    slots = int(workload.get("slots", 1))
    until = float(workload.get("until", math.inf))
    caps = workload.get("capabilities")
    core = SchedulerCore(workload.get("policy"), capabilities=None if caps is None else _caps(caps))
    # Timeline: (time, order, kind, payload); order keeps same-time events stable.
    timeline: list[tuple[float, int, str, Any]] = []
    order = 0

    def at(t: float, kind: str, payload: Any) -> None:
        nonlocal order
        order += 1
        heapq.heappush(timeline, (t, order, kind, payload))

    durations: dict[str, float] = {}
    deadlines: dict[str, float | None] = {}
    n = 0
    for gid, spec in sorted((workload.get("groups") or {}).items()):
        for arrival in spec.get("arrivals") or []:
            for i in range(int(arrival.get("count", 1))):
                n += 1
                t = float(arrival.get("at", 0)) + i * float(arrival.get("every", 0))
                key = f"{gid}#{n}"
                deadline_in = arrival.get("deadline_in")
                gated = bool(arrival.get("requires_approval"))
                item = Item(
                    key=key, group=gid, enqueued_at=t,
                    urgency=URGENCY.get(arrival.get("urgency", "normal"), 1),
                    impact=IMPACT.get(arrival.get("business_impact", "medium"), 1),
                    deadline=None if deadline_in is None else t + float(deadline_in),
                    requires=_caps(arrival.get("capabilities")), approved=not gated,
                    service_estimate=float(arrival.get("duration", 60)), title=arrival.get("title"),
                )  # fmt: skip
                durations[key] = float(arrival.get("duration", 60))
                deadlines[key] = item.deadline
                at(t, "arrive", item)
                if gated and arrival.get("approved_after") is not None:
                    at(t + float(arrival["approved_after"]), "approve", key)
    for change in workload.get("policy_changes") or []:
        at(float(change["at"]), "policy", change["policy"])

    stats = {gid: GroupStats(core.policy.weight(gid)) for gid in sorted(workload.get("groups") or {})}
    spans: dict[str, tuple[int, dict[str, float]]] = {}  # wait spans, as in the tests
    running = 0
    log: list[tuple[float, str, float, dict[str, float]]] = []
    now = 0.0
    while timeline:
        now = timeline[0][0]
        while timeline and timeline[0][0] == now:
            _, _, kind, payload = heapq.heappop(timeline)
            if kind == "arrive":
                core.upsert(payload, now)
            elif kind == "approve" and payload in core:
                old = core.item(payload)
                core.upsert(Item(**{**{s: getattr(old, s) for s in Item.__slots__}, "approved": True}), now)
            elif kind == "finish":
                running -= 1
                core.finished(payload)
            elif kind == "policy":
                core.set_policy(payload)
                for gid, st in stats.items():
                    st.weight = core.policy.weight(gid)
        _track(core, spans)
        while running < slots and now <= until:
            picked = core.select(now, slots - running)
            if picked is None:
                break
            item = core.dispatch(picked.key, now)
            running += 1
            st = stats.setdefault(item.group, GroupStats(core.policy.weight(item.group)))
            st.dispatched += 1
            st.waits.append(now - item.enqueued_at)
            deadline = deadlines[item.key]
            if deadline is not None:
                st.deadline_items += 1
                st.deadline_misses += now + durations[item.key] > deadline
            k0, seen = spans.pop(item.group, (core.dispatches - 1, {item.group: st.weight}))
            gap = core.dispatches - 1 - k0
            if gap >= st.worst_gap:
                st.worst_gap = gap
                st.worst_gap_bound = starvation_bound([w for h, w in seen.items() if h != item.group], seen[item.group])
            log.append((now, item.group, durations[item.key], _fair(core, slots)))
            at(now + durations[item.key], "finish", item.group)
            _track(core, spans)
    return SimResult(stats, log, now, slots)


def _fair(core: SchedulerCore, slots: int) -> dict[str, float]:
    demand, weights = {}, {}
    for gid in core.groups():
        st = core.group_state(gid)
        want = st["running"] + st["queued"]
        demand[gid] = want if st["quota"] is None else min(st["quota"], want)
        weights[gid] = st["weight"]
    return fair_slots(demand, weights, slots)


def _track(core: SchedulerCore, spans: dict[str, tuple[int, dict[str, float]]]) -> None:
    active = core.active_weights()
    for g in [g for g in spans if g not in active]:
        del spans[g]
    for g in active:
        if g in spans:
            spans[g][1].update(active)
        else:
            spans[g] = (core.dispatches, dict(active))


def _percentile(values: Sequence[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def summary(result: SimResult) -> dict[str, Any]:
    return {
        "slots": result.slots,
        "end": result.end,
        "groups": {
            gid: {
                "weight": st.weight,
                "dispatched": st.dispatched,
                "wait_mean": sum(st.waits) / len(st.waits) if st.waits else 0.0,
                "wait_p95": _percentile(st.waits, 0.95),
                "wait_max": max(st.waits, default=0.0),
                "deadline_items": st.deadline_items,
                "deadline_misses": st.deadline_misses,
                "worst_gap_dispatches": st.worst_gap,
                "bound_for_that_gap": st.worst_gap_bound,
            }  # fmt: skip
            for gid, st in result.groups.items()
        },
    }


def plot(result: SimResult, out: Path, bins: int = 60) -> list[Path]:
    """Write ``share.png`` and ``waits.png`` into ``out`` (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    groups = list(result.groups)
    end = max(result.end, 1.0)
    width = end / bins
    edges = [i * width for i in range(bins + 1)]
    busy = {g: [0.0] * bins for g in groups}
    entitled = {g: [0.0] * bins for g in groups}
    samples = [0] * bins
    for t, g, dur, fair in result.dispatch_log:
        b = min(bins - 1, int(t / width))
        samples[b] += 1
        for h in groups:
            entitled[h][b] += fair.get(h, 0.0)
        # Spread the item's slot time over the bins it covers.
        start, stop = t, t + dur
        while start < stop and start < end:
            k = min(bins - 1, int(start / width))
            upto = min(stop, edges[k + 1])
            busy[g][k] += (upto - start) / width
            start = upto if upto > start else stop
    mids = [(edges[i] + edges[i + 1]) / 2 / 60 for i in range(bins)]
    colors = plt.get_cmap("tab10")

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(13, 8), sharex=True)
    ax1.stackplot(mids, *[busy[g] for g in groups], labels=groups, colors=[colors(i % 10) for i in range(len(groups))])
    ax1.set_ylabel("slots in use")
    ax1.set_ylim(0, result.slots * 1.05)
    ax1.set_title("Per-Group share of the Worker's slots over time")
    ax1.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    for i, g in enumerate(groups):
        ideal = [entitled[g][b] / samples[b] if samples[b] else math.nan for b in range(bins)]
        w = result.groups[g].weight
        ax2.plot(mids, busy[g], color=colors(i % 10), linewidth=1.8, label=f"{g} (w={w:g} at end)")
        ax2.plot(mids, ideal, color=colors(i % 10), linestyle="--", linewidth=1)
    ax2.set_ylabel("slots in use")
    ax2.set_xlabel("minutes")
    ax2.set_ylim(0, result.slots * 1.05)
    ax2.set_title("Slots in use (solid) vs weighted max-min fair share given weights, quotas and queued work (dashed)")
    ax2.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    fig.tight_layout()
    share_png = out / "share.png"
    fig.savefig(share_png, dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(11, 5))
    longest = max((max(st.waits, default=0.0) for st in result.groups.values()), default=0.0) / 60
    edges_w = [longest * i / 40 for i in range(41)] if longest > 0 else [0.0, 1.0]
    for i, g in enumerate(groups):
        waits = [w / 60 for w in result.groups[g].waits]
        if waits:
            ax.hist(waits, bins=edges_w, histtype="step", linewidth=1.8, color=colors(i % 10), label=g)
    ax.set_xlabel("wait from enqueue to start (minutes)")
    ax.set_ylabel("items")
    ax.set_title("Queue wait per Group")
    ax.legend(fontsize=8)
    fig.tight_layout()
    waits_png = out / "waits.png"
    fig.savefig(waits_png, dpi=100)
    plt.close(fig)
    return [share_png, waits_png]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mwworker.sim", description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", type=Path, help="workload JSON (format: this module's docstring)")
    parser.add_argument("--out", type=Path, required=True, help="directory for share.png, waits.png, summary.json")
    parser.add_argument("--bins", type=int, default=60, help="time bins in the share plot (60)")
    args = parser.parse_args(argv)
    workload = json.loads(args.workload.read_text())
    result = simulate(workload)
    paths = plot(result, args.out, args.bins)
    data = summary(result)
    (args.out / "summary.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    for gid, row in data["groups"].items():
        print(
            f"{gid:<20} w={row['weight']:<5g} dispatched={row['dispatched']:<6} "
            f"wait mean={row['wait_mean'] / 60:.1f}m p95={row['wait_p95'] / 60:.1f}m "
            f"misses={row['deadline_misses']}/{row['deadline_items']} "
            f"worst gap={row['worst_gap_dispatches']} (bound {row['bound_for_that_gap']})"
        )
    for p in [*paths, args.out / "summary.json"]:
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
