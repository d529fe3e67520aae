"""Which running items to ask to preempt (spec 11.3: cooperative; MWP-WRK-015).

``preemption_requests()`` says which running items should be *asked* to
preempt (cooperatively, at their next checkpoint; spec 11.3, MWP-WRK-015):
those of Groups holding more slots than their weighted max-min fair share
while a Group with eligible queued work holds fewer, and those above a
Group's (lowered) quota.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .fairness import EPS
from .scheduler import SchedulerCore


@dataclass(frozen=True, slots=True)
class RunningItem:
    """An item occupying a slot, for ``preemption_requests``."""

    key: str
    group: str
    started_at: float


@dataclass(frozen=True, slots=True)
class PreemptRequest:
    key: str
    group: str
    reason: str  # "quota" or "fair_share"


def fair_slots(demand: Mapping[str, int], weights: Mapping[str, float], slots: int) -> dict[str, float]:
    """Weighted max-min fair division of ``slots`` among Groups wanting ``demand``
    slots each (demand already capped by quota): water-filling."""
    share = dict.fromkeys(demand, 0.0)
    left = float(slots)
    open_groups = {g for g, d in demand.items() if d > 0}
    while open_groups and left > EPS:
        wsum = sum(weights[g] for g in open_groups)
        step = left / wsum
        capped = {g for g in open_groups if share[g] + weights[g] * step >= demand[g] - EPS}
        if not capped:
            for g in open_groups:
                share[g] += weights[g] * step
            break
        for g in capped:
            left -= demand[g] - share[g]
            share[g] = float(demand[g])
        open_groups -= capped
    return share


def preemption_requests(
    core: SchedulerCore, running: Sequence[RunningItem], *, slots: int, now: float
) -> list[PreemptRequest]:
    """Which running items the runtime should *ask* to preempt (they stop at their
    next safe checkpoint and re-enter their queue; spec 11.3).

    1. Above quota (the policy lowered it): the most recently started items of
       the Group beyond its quota.
    2. Fair share: while every slot is busy and a Group with eligible queued work
       holds at least one whole slot fewer than its weighted max-min share,
       the most recently started item of the Group furthest above its share
       (by at least one whole slot, so requests do not ping-pong).
    """
    by_group: dict[str, list[RunningItem]] = {}
    for r in running:
        by_group.setdefault(r.group, []).append(r)
    for items in by_group.values():
        items.sort(key=lambda r: (r.started_at, r.key))
    requests: list[PreemptRequest] = []
    held = {g: len(items) for g, items in by_group.items()}
    for gid, items in sorted(by_group.items()):
        quota = core.policy.quota(gid)
        if quota is not None and len(items) > quota:
            requests.extend(PreemptRequest(r.key, gid, "quota") for r in items[quota:][::-1])
            held[gid] = quota
    if sum(held.values()) < slots:
        return requests  # a free slot: nobody needs to yield
    if core._timers:
        core._release_timers(now)
    demand: dict[str, int] = {}
    weights: dict[str, float] = {}
    for gid in set(held) | {g for g, grp in core._groups.items() if grp.live > 0}:
        quota = core.policy.quota(gid)
        grp = core._groups.get(gid)
        queued = grp.live if grp is not None else 0
        want = held.get(gid, 0) + queued
        demand[gid] = want if quota is None else min(quota, want)
        weights[gid] = core.policy.weight(gid)
    share = fair_slots(demand, weights, slots)
    victims = dict(held)
    asked = {r.key for r in requests}
    while True:
        # The Group furthest below its share that has queued work, and the one furthest above.
        under = max(
            (g for g in demand if core._groups.get(g) is not None and core._groups[g].live > 0),
            key=lambda g: (share[g] - victims.get(g, 0), g),
            default=None,
        )
        over = max(victims, key=lambda g: (victims[g] - share[g], g), default=None)
        if under is None or over is None or under == over:
            break
        if share[under] - victims.get(under, 0) < 1.0 - EPS or victims[over] - share[over] < 1.0 - EPS:
            break
        candidates = [r for r in by_group[over] if r.key not in asked]
        if not candidates:
            break
        requests.append(PreemptRequest(candidates[-1].key, over, "fair_share"))
        asked.add(candidates[-1].key)
        victims[over] -= 1
        victims[under] = victims.get(under, 0) + 1
    return requests
