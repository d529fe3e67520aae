"""The Worker's cross-Group Scheduler (spec 11.1-11.3; MWP-WRK-009..012; DESIGN §5).

Pure and deterministic: no I/O, no clock (``now`` is always an argument, in
POSIX seconds for the core and an aware ``datetime`` for the adapter), no
randomness. Two layers:

- ``SchedulerCore``: indexed structures with an incremental API (``upsert``,
  ``remove``, ``set_running``, ``select``, ``dispatch``) that the simulator,
  the benchmark and ``explain`` drive directly;
- ``FairScheduler``: the runtime's ``Picker`` (``pick``/``dispatched``/
  ``set_policy`` over ``WorkRow``), which diffs the candidate rows into a core.

Effective order
===============

*Across Groups*: Start-time Fair Queueing (Goyal, Vin and Cheng, 1996) over
the Groups that are *schedulable* (at least one eligible item and a free slot
under the Group's quota). Every Group ``g`` has a weight ``w_g``, the
Organization policy's class weight (``classes[groups[g].class or
default_class]``, ``missions/policy.py``), a virtual start tag ``S_g`` and
finish tag ``F_g = S_g + c/w_g`` (``c``: the cost of one dispatch, 1). The
next dispatch goes to the schedulable Group with the smallest ``S_g`` (ties:
the smaller ``F_g``, i.e. the heavier Group, which keeps the lag behind the
weighted share lower, then the earlier effective due of the Group's head item
when it last entered the order, then the Group's arrival order); the system virtual time ``V`` becomes that start
tag, and the Group's next start tag is its finish tag. A Group that becomes
schedulable (new work, a slot freed under its quota, a gate opened) gets
``S_g = max(V, F_g)``: no credit is banked while idle, so a Group cannot save
up share and burst past the others later.

Only weights and tags decide which Group is next. A Coordinator's urgency,
deadline and business impact never enter the cross-Group choice except as the
tie-break between Groups whose start tags are equal, so flooding
``critical`` items cannot move a Group ahead of unrelated Groups beyond its
weight (MWP-WRK-009); and since the cross-Group choice is by virtual time,
not by priority, this is not highest-priority-first (MWP-WRK-010).

*Within a Group*: earliest *effective due* first, a static key per item::

    level   = URGENCY[urgency] + IMPACT[business_impact]          (0..6)
    due     = max(enqueued_at,
                  min(enqueued_at + aging_seconds * (6 - level),   # urgency with aging
                      deadline - service_estimate,                # latest start that meets the deadline
                      start_by))                                  # the ownership grant's start-by
    order   = (due, -level, enqueued_at, arrival number)      (times to the millisecond)

Aging needs no timer: every item's claim grows at the same rate, so ordering
by the time at which an item would reach the top level is the same as ordering
by current aged level. A ``low``/``low`` item outranks every item that arrives
more than ``6 * aging_seconds`` after it; clamping ``due`` at ``enqueued_at``
keeps a flood of overdue or ``critical`` items from passing an older item
forever.

*Gates*: an item is eligible only when its Approval gate is open
(``execution_approved``), every required capability ``(id, version)`` is
among the Worker's, its retry backoff (``retry_not_before``) has passed and
its risk class is within the Worker's ceiling. A gated item sits outside the
heaps and joins them the moment the gate opens (``upsert`` with the gate open,
``set_capabilities``, or the clock passing ``not_before``). Dependencies are
the runtime's: ``candidates`` are the items it may start.

Anti-starvation bound
=====================

Let ``g`` stay schedulable over a span of dispatches and let ``H`` be the
other Groups schedulable at some moment of the span. Between two consecutive
dispatches of ``g`` (or from the moment ``g`` becomes schedulable to its
first dispatch) the number of dispatches to other Groups is at most::

    D_g = sum over h in H of ( floor(w_h / w_g) + 1 )                 (BOUND)

(``D_g <= (W - w_g)/w_g + |H|`` with ``W`` the total weight: a Group of
weight 1 among 99 others of weight 1 waits at most 198 dispatches; one of
weight 1 beside one of weight 8, at most 9.) Proof: (i) every schedulable
``h`` has ``S_h >= V``: ``V`` is set to the smallest start tag, a dispatched
Group's tag moves to ``F > V``, and a Group joins at ``max(V, F) >= V``.
(ii) ``S_g <= V + c/w_g``: a Group's tag is ``V`` when it is served and then
moves up by ``c/w_g``; ``V`` only grows. During the span ``g``'s tag is fixed
at some ``S_g <= V_0 + c/w_g`` and ``h`` is only served with
``S_h <= S_g``; by (i) each such tag is at least ``V_0``, and successive tags
of ``h`` are at least ``c/w_h`` apart, so ``h`` is served at most
``floor(w_h/w_g) + 1`` times. ``starvation_bound()`` computes ``D_g``; the
tests replay adversarial (hypothesis) workloads with arrivals, quotas, gates
and several slots and check every gap against it, together with (i) and (ii).

An item at in-Group position ``k`` therefore starts within ``k * (D_g + 1)``
dispatches while its Group stays schedulable, and ``k`` counts only items
that arrived before the item's ``due`` (at most ``6 * aging_seconds`` after
it). Shares: over any span in which a set of Groups stays schedulable, the
normalised services ``n_g/w_g`` of two of them differ by at most
``c/w_g + c/w_h`` (the SFQ fairness bound).

Reordering, preemption and disclosure
=====================================

A new item revision (``upsert``), a new policy (``set_policy``: weights,
classes, quotas, aging) or new capabilities re-key the queues at once, so the
next ``select`` reflects them (spec 11.3; MWP-WRK-015). On a weight change a
Group's lead over ``V`` (``x`` items is ``x/w`` of virtual time) is rescaled
to the new weight, which keeps (ii) of the bound's proof true.

``preemption_requests()`` says which running items should be *asked* to
preempt (cooperatively, at their next checkpoint; spec 11.3, MWP-WRK-015):
those of Groups holding more slots than their weighted max-min fair share
while a Group with eligible queued work holds fewer, and those above a
Group's (lowered) quota.
``SchedulerCore.disclose()`` estimates one item's start window and completion
(MWP-WRK-012) from its own Group's queue and the share its weight guarantees,
rounded outward, so it carries no other Group's identity, content,
assignments, counts or exact queue position.

Exceptions: ``SchedulerError`` (unknown item; a bad policy document).
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from .projection import WorkRow

# --- constants and policy ------------------------------------------------------------

URGENCY = {"low": 0, "normal": 1, "high": 2, "critical": 3}
IMPACT = {"low": 0, "medium": 1, "high": 2, "critical": 3}
RISK = {"low": 0, "medium": 1, "high": 2, "critical": 3}
MAX_LEVEL = 6
DEFAULT_POLICY: dict[str, Any] = {
    "classes": {"critical": 8, "high": 4, "normal": 2, "low": 1},
    "default_class": "normal",
    "groups": {},
    "aging_seconds": 300,
}
INF = math.inf
_EPS = 1e-9
# Disclosure times are rounded outward to this grid so they do not encode other
# Groups' exact counts (MWP-WRK-012).
DISCLOSURE_GRID_SECONDS = 60.0


class SchedulerError(Exception):
    """The Scheduler was asked about an item it does not hold, or given a bad policy."""


@dataclass(frozen=True, slots=True)
class Policy:
    """The parts of the Organization priority policy the Scheduler uses."""

    classes: Mapping[str, float]
    default_class: str
    groups: Mapping[str, Mapping[str, Any]]
    aging_seconds: float

    @staticmethod
    def parse(document: Mapping[str, Any] | None) -> Policy:
        doc = dict(DEFAULT_POLICY if document is None else document)
        classes = doc.get("classes")
        if not isinstance(classes, Mapping) or not classes:
            raise SchedulerError("policy.classes: must map at least one class to a weight")
        weights = {}
        for name, weight in classes.items():
            if not isinstance(weight, int | float) or isinstance(weight, bool) or weight <= 0:
                raise SchedulerError(f"policy.classes.{name}: must be a positive number")
            weights[str(name)] = float(weight)
        default = doc.get("default_class")
        if default not in weights:
            raise SchedulerError("policy.default_class: must name one of the classes")
        groups = doc.get("groups") or {}
        if not isinstance(groups, Mapping):
            raise SchedulerError("policy.groups: must be an object")
        aging = doc.get("aging_seconds", DEFAULT_POLICY["aging_seconds"])
        if not isinstance(aging, int | float) or isinstance(aging, bool) or aging <= 0:
            raise SchedulerError("policy.aging_seconds: must be a positive number")
        return Policy(weights, str(default), {str(k): dict(v) for k, v in groups.items()}, float(aging))

    def group_class(self, group: str) -> str:
        entry = self.groups.get(group) or {}
        cls = entry.get("class")
        return cls if isinstance(cls, str) and cls in self.classes else self.default_class

    def weight(self, group: str) -> float:
        return self.classes[self.group_class(group)]

    def quota(self, group: str) -> int | None:
        quota = (self.groups.get(group) or {}).get("quota")
        return quota if isinstance(quota, int) and not isinstance(quota, bool) and quota >= 1 else None


def starvation_bound(weights: Iterable[float], w_g: float) -> int:
    """``D_g`` of the module docstring: the most dispatches to other Groups
    between two dispatches of a Group of weight ``w_g`` that stays
    schedulable, given the weights of the *other* Groups schedulable at some
    moment of the span."""
    return sum(math.floor(w_h / w_g + _EPS) + 1 for w_h in weights)


# --- items -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Item:
    """The Scheduler's view of one queued item (times in POSIX seconds)."""

    key: str
    group: str
    enqueued_at: float
    urgency: int = 1
    impact: int = 1
    deadline: float | None = None
    start_by: float | None = None
    requires: frozenset[tuple[str, str]] = frozenset()
    approved: bool = True  # the Approval gate: no Approval needed, or granted for this contract revision
    not_before: float | None = None  # retry backoff
    risk: int = 0
    service_estimate: float = 0.0  # seconds; moves the latest start ahead of the deadline
    cost: float = 1.0  # virtual service charged per dispatch
    title: str | None = None  # never disclosed; explain shows it to the operator

    @property
    def level(self) -> int:
        return self.urgency + self.impact


def item_due(item: Item, aging_seconds: float) -> float:
    """The in-Group order key (module docstring): when this item should start."""
    due = item.enqueued_at + aging_seconds * (MAX_LEVEL - item.level)
    if item.deadline is not None:
        due = min(due, item.deadline - item.service_estimate)
    if item.start_by is not None:
        due = min(due, item.start_by)
    return max(item.enqueued_at, due)


# An item in its Group's queue is a *code*, one int that sorts like
# ``(due, -level, enqueued_at, arrival number)`` (times at millisecond
# resolution): the Group's heap is a list of ints, so a heap operation compares
# ints, one object each, which keeps the cold memory a pick touches small at a
# million queued items. ``entries`` maps a live code to ``[code, Item, Group]``;
# a code whose entry is gone is dropped when it reaches the top of the heap.
_Entry = list[Any]
_CODE, _ITEM, _GROUP = 0, 1, 2
_T_OFFSET = 1 << 45  # milliseconds (about 1,115 years): keeps codes positive for times after the year 855
_SEQ_BITS, _TIME_BITS = 40, 48


def _code(due: float, level: int, enqueued_at: float, seq: int) -> int:
    due_ms = max(0, min((1 << _TIME_BITS) - 1, int(due * 1000) + _T_OFFSET))
    enq_ms = max(0, min((1 << _TIME_BITS) - 1, int(enqueued_at * 1000) + _T_OFFSET))
    return ((((due_ms << 3) | (MAX_LEVEL - level)) << _TIME_BITS | enq_ms) << _SEQ_BITS) | seq


class _Group:
    __slots__ = (
        "active", "cls", "entries", "finish", "gid", "heap", "live", "ordinal", "quota", "running", "slot", "start",
        "weight",
    )  # fmt: skip

    def __init__(self, gid: str, ordinal: int):
        self.gid = gid
        self.ordinal = ordinal
        self.weight = 1.0
        self.cls = ""
        self.quota: int | None = None
        self.heap: list[int] = []
        self.entries: dict[int, _Entry] = {}
        self.live = 0  # alive entries in heap
        self.running = 0
        self.active = False  # schedulable and in one of the two Group heaps
        self.start = 0.0  # S_g
        self.finish = 0.0  # F_g of the last dispatch (S of the next while backlogged)
        # Its live entry in the Group heap (None: not in it); older entries are stale.
        # Checked by identity, so a pick dereferences no version number.
        self.slot: tuple[float, float, int, int, _Group] | None = None

    def head(self) -> _Entry | None:
        heap, entries = self.heap, self.entries
        while heap and heap[0] not in entries:
            heapq.heappop(heap)
        return entries[heap[0]] if heap else None

    def schedulable(self) -> bool:
        return self.live > 0 and (self.quota is None or self.running < self.quota)


# --- explain and disclosure rows -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExplainRow:
    """One queued item with every factor of its effective order (``explain``)."""

    rank: int | None  # position in the projected dispatch order (1 = next); None: gated
    group: str
    key: str
    title: str | None
    group_class: str
    weight: float
    quota: int | None
    running: int
    virtual_start: float
    virtual_finish: float
    virtual_time: float
    group_rank: int | None  # position inside its Group's queue
    urgency: int
    impact: int
    level: int
    age_seconds: float
    aged_level: float
    deadline: float | None
    start_by: float | None
    due: float
    gates: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Disclosure:
    """A schedule disclosure for one item (spec 11.2; MWP-WRK-012)."""

    start_earliest: float
    start_latest: float
    completion: float
    confidence: float
    capacity_status: str  # "available", "queued", "saturated", "gated"
    calculated_at: float

    def as_json(self) -> dict[str, Any]:
        return {
            "estimated_start_window": {"earliest": _iso(self.start_earliest), "latest": _iso(self.start_latest)},
            "estimated_completion": _iso(self.completion),
            "confidence": self.confidence,
            "capacity_status": self.capacity_status,
            "calculated_at": _iso(self.calculated_at),
        }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


# --- the core ------------------------------------------------------------------------


class SchedulerCore:
    """Indexed start-time fair queueing across Groups, earliest effective due within a Group.

    Costs: ``select``/``dispatch`` O(log G + log I) amortized (G Groups, I items
    in the Group), ``upsert``/``remove`` O(log G + log I); ``set_policy`` and
    ``set_capabilities`` re-key everything (O(N log N), rare).
    """

    def __init__(
        self,
        policy: Mapping[str, Any] | None = None,
        *,
        capabilities: Iterable[tuple[str, str]] | None = None,
        risk_ceiling: int | None = None,
    ):
        self.policy = Policy.parse(policy)
        self.capabilities: frozenset[tuple[str, str]] | None = (
            None if capabilities is None else frozenset(capabilities)
        )  # None: capabilities not checked
        self.risk_ceiling = risk_ceiling
        self.vtime = 0.0
        self.total_weight = 0.0  # of the active (schedulable) Groups
        self.dispatches = 0
        self._groups: dict[str, _Group] = {}
        self._items: dict[str, _Entry | Item] = {}  # key -> heap entry (eligible) or Item (gated)
        self._gated: dict[str, Item] = {}
        self._timers: list[tuple[float, str, Item]] = []  # (not_before, key, item) for backoff gates
        # Active Groups by (S, F, head item code, arrival ordinal); an entry that is
        # not its Group's ``slot`` is stale and dropped when it reaches the top.
        self._heap: list[tuple[float, float, int, int, _Group]] = []
        self._busy: set[_Group] = set()  # Groups with slots in use
        self._selected: tuple[_Group, _Entry] | None = None  # what select() last returned
        self._seq = 0

    # --- Groups ---------------------------------------------------------------

    def _group(self, gid: str) -> _Group:
        grp = self._groups.get(gid)
        if grp is None:
            grp = _Group(gid, len(self._groups))
            grp.weight = self.policy.weight(gid)
            grp.cls = self.policy.group_class(gid)
            grp.quota = self.policy.quota(gid)
            grp.start = grp.finish = self.vtime
            self._groups[gid] = grp
        return grp

    def groups(self) -> list[str]:
        return list(self._groups)

    def _push(self, grp: _Group) -> None:
        """(Re-)enter an active Group into the heap with its current tags."""
        head = grp.head()
        assert head is not None
        heap = self._heap
        entry = (grp.start, grp.start + head[_ITEM].cost / grp.weight, head[0], grp.ordinal, grp)
        if heap and heap[0] is grp.slot:
            heapq.heapreplace(heap, entry)  # the usual case after a dispatch: one sift, not two
        else:
            heapq.heappush(heap, entry)
        grp.slot = entry

    def _refresh(self, grp: _Group, *, rekey: bool = False) -> None:
        """Bring ``grp``'s membership of the heaps in line with ``schedulable()``."""
        if grp.schedulable():
            if not grp.active:
                grp.active = True
                self.total_weight += grp.weight
                # No credit banked while idle (module docstring).
                grp.start = max(self.vtime, grp.finish)
                self._push(grp)
            elif rekey:
                self._push(grp)
        elif grp.active:
            grp.active = False
            grp.slot = None  # its heap entries go stale
            self.total_weight -= grp.weight
            if self.total_weight < _EPS:
                self.total_weight = 0.0

    # --- items ----------------------------------------------------------------

    def gates(self, item: Item, now: float | None = None) -> tuple[str, ...]:
        """Why ``item`` may not start (empty: eligible). Backoff is judged at ``now``."""
        gates = []
        if not item.approved:
            gates.append("approval")
        if self.capabilities is not None and not item.requires <= self.capabilities:
            gates.append("capability")
        if self.risk_ceiling is not None and item.risk > self.risk_ceiling:
            gates.append("risk")
        if item.not_before is not None and (now is None or item.not_before > now):
            gates.append("backoff")
        return tuple(gates)

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def item(self, key: str) -> Item:
        held = self._items.get(key)
        if held is None:
            raise SchedulerError(f"unknown item {key}")
        return held[_ITEM] if isinstance(held, list) else held

    def upsert(self, item: Item, now: float | None = None) -> None:
        """Add or replace an item (a new urgency, contract or gate state reorders at once)."""
        if item.key in self._items:
            self.remove(item.key)
        grp = self._group(item.group)
        gates = self.gates(item, now)
        if gates:
            self._items[item.key] = item
            self._gated[item.key] = item
            if gates == ("backoff",):
                assert item.not_before is not None
                heapq.heappush(self._timers, (item.not_before, item.key, item))
            return
        self._seq += 1
        code = _code(item_due(item, self.policy.aging_seconds), item.level, item.enqueued_at, self._seq)
        entry = [code, item, grp]
        self._items[item.key] = entry
        old_head = grp.head() if grp.active else None
        heapq.heappush(grp.heap, code)
        grp.entries[code] = entry
        grp.live += 1
        # Re-key the Group only when a new head changes its finish tag (another
        # cost). Its tie-break code stays the head's of its last entry into the
        # order: re-keying on every new head left stale entries that later picks
        # had to pop (the pick's p99 at 10,000 Groups came from those pops).
        self._refresh(grp, rekey=old_head is not None and grp.heap[0] == code and old_head[_ITEM].cost != item.cost)

    def remove(self, key: str) -> Item:
        """Forget an item (started elsewhere, cancelled, no longer ours)."""
        held = self._items.pop(key, None)
        if held is None:
            raise SchedulerError(f"unknown item {key}")
        if isinstance(held, Item):
            del self._gated[key]
            return held
        self._selected = None
        grp = held[_GROUP]
        del grp.entries[held[_CODE]]
        grp.live -= 1
        was_head = grp.active and grp.heap and grp.heap[0] == held[_CODE]
        new_head = grp.head() if was_head else None
        # As in upsert: re-key only when the finish tag changes.
        self._refresh(grp, rekey=new_head is not None and new_head[_ITEM].cost != held[_ITEM].cost)
        return held[_ITEM]  # type: ignore[no-any-return]

    def _release_timers(self, now: float) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, key, item = heapq.heappop(timers)
            if self._gated.get(key) is item:
                self.upsert(item, now)

    # --- slots and policy ---------------------------------------------------------

    def set_running(self, group: str, count: int) -> None:
        grp = self._group(group)
        if grp.running != count:
            grp.running = count
            if count:
                self._busy.add(grp)
            else:
                self._busy.discard(grp)
            self._refresh(grp)

    def sync_running(self, running: Mapping[str, int]) -> None:
        """Reconcile slot use with the runtime's view (only changed Groups are touched)."""
        for gid in [g.gid for g in self._busy if g.gid not in running]:
            self.set_running(gid, 0)
        for gid, count in running.items():
            self.set_running(gid, count)

    def set_policy(self, policy: Mapping[str, Any] | None) -> None:
        """New weights, classes, quotas and aging: queued work reorders at once (spec 11.3)."""
        new = Policy.parse(policy)
        self.policy = new
        self._rebuild()

    def set_capabilities(self, capabilities: Iterable[tuple[str, str]] | None) -> None:
        caps = None if capabilities is None else frozenset(capabilities)
        if caps != self.capabilities:
            self.capabilities = caps
            self._rebuild()

    def _rebuild(self) -> None:
        items = [self.item(k) for k in self._items]
        self._selected = None
        self._items.clear()
        self._gated.clear()
        self._timers.clear()
        self._heap.clear()
        self.total_weight = 0.0
        for grp in self._groups.values():
            grp.heap = []
            grp.entries = {}
            grp.live = 0
            if grp.active:
                grp.finish = max(grp.finish, grp.start)
            grp.active = False
            weight = self.policy.weight(grp.gid)
            if grp.finish > self.vtime and weight != grp.weight:
                # A lead over V of x items is x/w in virtual time: rescale it to the
                # new weight, so the change shows from the next pick on (spec 11.3)
                # and S <= V + c/w keeps holding (the bound's proof needs it).
                grp.finish = self.vtime + (grp.finish - self.vtime) * grp.weight / weight
            grp.weight = weight
            grp.cls = self.policy.group_class(grp.gid)
            grp.quota = self.policy.quota(grp.gid)
        for item in items:
            self.upsert(item)

    # --- picking --------------------------------------------------------------------

    def _top(self) -> _Group | None:
        """The active Group with the smallest start tag (stale heap entries dropped)."""
        heap = self._heap
        while heap:
            top = heap[0]
            grp = top[4]
            if grp.slot is top:
                return grp
            heapq.heappop(heap)
        return None

    def select(self, now: float, free_slots: int = 1) -> Item | None:
        """The item to start next, or None. Changes no share: call ``dispatch`` when it starts."""
        if self._timers:
            self._release_timers(now)
        if free_slots <= 0:
            return None
        grp = self._top()
        if grp is None:
            return None
        head = grp.head()
        assert head is not None
        self._selected = (grp, head)
        return head[_ITEM]  # type: ignore[no-any-return]

    def dispatch(self, key: str, now: float) -> Item:
        """``key`` started in a slot: charge its Group, take the item off the queue."""
        selected = self._selected
        if selected is not None and selected[1][_ITEM].key == key and selected[1][_CODE] in selected[0].entries:
            grp, held = selected  # the usual case: what select() just returned, no lookups
        else:
            found = self._items.get(key)
            if not isinstance(found, list):
                raise SchedulerError(f"{key} is not an eligible queued item")
            held = found
            grp = held[_GROUP]
        self._selected = None
        item: Item = held[_ITEM]
        heap = self._heap
        current = heap and heap[0] is grp.slot
        top = grp if current else self._top()
        if top is not None:
            # V is the start tag of the Group in service: the smallest active start
            # tag (taken from the heap top, so V never passes an active Group's S).
            self.vtime = max(self.vtime, top.start)
        if grp.active:
            grp.finish = grp.start + item.cost / grp.weight
        else:  # dispatched outside its turn (e.g. quota full): charged all the same
            grp.finish = max(self.vtime, grp.finish) + item.cost / grp.weight
        self.dispatches += 1
        del self._items[key]
        del grp.entries[held[_CODE]]
        grp.live -= 1
        grp.running += 1
        self._busy.add(grp)
        if grp.active and grp.schedulable():
            grp.start = grp.finish  # still backlogged: the next start is the last finish
            self._push(grp)
        else:
            self._refresh(grp)
        return item

    def finished(self, group: str) -> None:
        """A slot of ``group`` was released."""
        grp = self._group(group)
        self.set_running(group, max(0, grp.running - 1))

    # --- introspection --------------------------------------------------------------

    def group_state(self, gid: str) -> dict[str, Any]:
        grp = self._groups[gid]
        return {
            "weight": grp.weight, "class": grp.cls, "quota": grp.quota, "running": grp.running,
            "queued": grp.live, "active": grp.active, "start": grp.start, "finish": grp.finish,
        }  # fmt: skip

    def active_weights(self) -> dict[str, float]:
        return {g.gid: g.weight for g in self._groups.values() if g.active}

    def queued(self, group: str) -> list[Item]:
        """``group``'s eligible items in their in-Group order."""
        grp = self._groups.get(group)
        if grp is None:
            return []
        return [grp.entries[code][_ITEM] for code in sorted(grp.entries)]

    def projected_order(self, limit: int | None = None) -> list[Item]:
        """The dispatch order if nothing arrived and no slot were released: a
        dry run of ``select``/``dispatch`` on a copy (quotas count the slots in use)."""
        shadow = self.copy()
        order: list[Item] = []
        while limit is None or len(order) < limit:
            nxt = shadow._select_unchecked()
            if nxt is None:
                break
            shadow.dispatch(nxt.key, 0.0)
            order.append(nxt)
        return order

    def _select_unchecked(self) -> Item | None:
        grp = self._top()
        if grp is None:
            return None
        head = grp.head()
        return None if head is None else head[_ITEM]

    def copy(self) -> SchedulerCore:
        """An independent copy (same decisions from here on)."""
        twin = SchedulerCore.__new__(SchedulerCore)
        twin.policy = self.policy
        twin.capabilities = self.capabilities
        twin.risk_ceiling = self.risk_ceiling
        twin.vtime = self.vtime
        twin.total_weight = self.total_weight
        twin.dispatches = self.dispatches
        twin._seq = self._seq
        twin._groups = {}
        twin._items = {}
        for gid, grp in self._groups.items():
            g2 = _Group(gid, grp.ordinal)
            for name in ("weight", "cls", "quota", "running", "active", "start", "finish", "live"):
                setattr(g2, name, getattr(grp, name))
            g2.heap = sorted(grp.entries)  # a sorted list is a heap
            g2.entries = {}
            for code, entry in grp.entries.items():
                e2 = [code, entry[_ITEM], g2]
                g2.entries[code] = e2
                twin._items[entry[_ITEM].key] = e2
            twin._groups[gid] = g2
        twin._busy = {twin._groups[g.gid] for g in self._busy}
        twin._selected = None
        twin._gated = dict(self._gated)
        twin._items.update(self._gated)
        twin._timers = list(self._timers)
        twin._heap = []
        for g2 in twin._groups.values():
            if g2.active:
                twin._push(g2)
        return twin

    # --- explain ----------------------------------------------------------------------

    def explain(self, now: float, groups: Iterable[str] | None = None) -> list[ExplainRow]:
        """Every queued item of ``groups`` (default: all this Worker holds) with the
        factors of its effective order and its rank in the projected dispatch order."""
        wanted = set(self._groups) if groups is None else set(groups)
        if self._timers:
            self._release_timers(now)
        order = self.projected_order()
        rank = {item.key: i + 1 for i, item in enumerate(order)}
        rows: list[ExplainRow] = []
        aging = self.policy.aging_seconds
        for gid in sorted(wanted & set(self._groups)):
            grp = self._groups[gid]
            queued = self.queued(gid)
            in_group = {item.key: i + 1 for i, item in enumerate(queued)}
            gated = sorted((i for i in self._gated.values() if i.group == gid), key=lambda i: i.enqueued_at)
            head = grp.head()
            finish = grp.start + (head[_ITEM].cost if head else 1.0) / grp.weight
            for item in [*queued, *gated]:
                age = max(0.0, now - item.enqueued_at)
                rows.append(
                    ExplainRow(
                        rank=rank.get(item.key), group=gid, key=item.key, title=item.title, group_class=grp.cls,
                        weight=grp.weight, quota=grp.quota, running=grp.running, virtual_start=grp.start,
                        virtual_finish=finish, virtual_time=self.vtime, group_rank=in_group.get(item.key),
                        urgency=item.urgency, impact=item.impact, level=item.level, age_seconds=age,
                        aged_level=item.level + age / aging, deadline=item.deadline, start_by=item.start_by,
                        due=item_due(item, aging), gates=self.gates(item, now),
                    )
                )  # fmt: skip
        rows.sort(key=lambda r: (r.rank is None, r.rank or 0, r.group, r.group_rank or 0, r.key))
        return rows

    # --- disclosure (MWP-WRK-012) -----------------------------------------------------

    def disclose(self, key: str, now: float, *, slots: int, service_seconds: float) -> Disclosure:
        """Estimated start window and completion of one queued item.

        Uses only: the item's position in *its own* Group's queue, its Group's
        weight, quota and slots in use, the Worker's slot count, and the total
        weight of the currently schedulable Groups (an aggregate). The window
        runs from "every other Group goes idle" (the Group gets all the slots
        its quota allows) to "every Group with work now stays backlogged" (it
        gets its guaranteed weighted share), rounded outward to a one-minute
        grid, so no other Group's count or exact position can be read back.
        """
        held = self._items.get(key)
        if held is None:
            raise SchedulerError(f"unknown item {key}")
        item = held[_ITEM] if isinstance(held, list) else held
        grp = self._groups[item.group]
        slots = max(1, slots)
        service = max(1.0, service_seconds)
        gates = self.gates(item, now)
        if gates:
            ahead = grp.live
        else:
            assert isinstance(held, list)
            ahead = sum(1 for code in grp.entries if code < held[_CODE])
        cap = slots if grp.quota is None else min(slots, grp.quota)
        weight_total = max(self.total_weight, grp.weight) if grp.active else self.total_weight + grp.weight
        # Slots the Group is guaranteed when everyone is backlogged (never below one
        # dispatch per ``D_g`` when the share is under a slot).
        share = min(cap, slots * grp.weight / weight_total)
        free_here = max(0, cap - grp.running)
        best = 0.0 if ahead < free_here else service * (ahead - free_here + 1) / cap
        worst = service * (ahead + 1) / share if share > 0 else service * (ahead + 1) * weight_total / grp.weight
        if gates == ("backoff",) and item.not_before is not None:
            best = max(best, item.not_before - now)
            worst = max(worst, item.not_before - now)
        grid = DISCLOSURE_GRID_SECONDS
        earliest = math.floor((now + best) / grid) * grid
        latest = math.ceil((now + worst) / grid) * grid
        completion = latest + math.ceil(service / grid) * grid
        spread = max(0.0, latest - earliest)
        # Confidence falls as the window widens relative to the horizon it covers.
        confidence = round(1.0 / (1.0 + spread / max(grid, latest - now)), 2)
        if gates and gates != ("backoff",):
            status, confidence = "gated", 0.0
        elif best == 0.0:
            status = "available"
        elif grp.quota is not None and grp.running >= grp.quota:
            status = "saturated"
        else:
            status = "queued"
        return Disclosure(float(earliest), float(latest), float(completion), confidence, status, now)


# --- preemption (spec 11.3: cooperative) --------------------------------------------------


def fair_slots(demand: Mapping[str, int], weights: Mapping[str, float], slots: int) -> dict[str, float]:
    """Weighted max-min fair division of ``slots`` among Groups wanting ``demand``
    slots each (demand already capped by quota): water-filling."""
    share = dict.fromkeys(demand, 0.0)
    left = float(slots)
    open_groups = {g for g, d in demand.items() if d > 0}
    while open_groups and left > _EPS:
        wsum = sum(weights[g] for g in open_groups)
        step = left / wsum
        capped = {g for g in open_groups if share[g] + weights[g] * step >= demand[g] - _EPS}
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
        if share[under] - victims.get(under, 0) < 1.0 - _EPS or victims[over] - share[over] < 1.0 - _EPS:
            break
        candidates = [r for r in by_group[over] if r.key not in asked]
        if not candidates:
            break
        requests.append(PreemptRequest(candidates[-1].key, over, "fair_share"))
        asked.add(candidates[-1].key)
        victims[over] -= 1
        victims[under] = victims.get(under, 0) + 1
    return requests


# --- the runtime's Picker over WorkRow ---------------------------------------------------


class Picker(Protocol):
    """Chooses which queued WorkItem a Worker starts next; ``mwworker.runtime``
    calls it with this Worker's startable rows, its slots in use per Group and
    its capabilities (``FairScheduler`` is the default)."""

    def pick(
        self,
        candidates: Sequence[WorkRow],
        *,
        running: Mapping[str, int],
        free_slots: int,
        capabilities: frozenset[tuple[str, str]],
        now: datetime,
    ) -> WorkRow | None: ...

    def dispatched(self, row: WorkRow, now: datetime) -> None: ...

    def set_policy(self, policy: Mapping[str, Any]) -> None: ...


def parse_time(value: str | None) -> float | None:
    """An RFC 3339 UTC timestamp (``...Z``) as POSIX seconds; None when absent or unreadable."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def item_from_row(row: WorkRow, *, enqueued_at: float, service_estimate: float = 0.0) -> Item:
    """The Scheduler's view of a ``WorkRow`` (the contract's scheduling fields)."""
    requires: set[tuple[str, str]] = set()
    title = None
    try:
        contract = json.loads(row.contract) if row.contract else {}
    except ValueError:
        contract = {}
    if isinstance(contract, dict):
        for cap in contract.get("capabilities") or []:
            if isinstance(cap, dict) and isinstance(cap.get("id"), str) and isinstance(cap.get("version"), str):
                requires.add((cap["id"], cap["version"]))
        goal = contract.get("goal")
        title = goal if isinstance(goal, str) else None
    return Item(
        key=row.workitem,
        group=row.group_id,
        enqueued_at=enqueued_at,
        urgency=URGENCY.get(row.urgency or "normal", 1),
        impact=IMPACT.get(row.business_impact or "medium", 1),
        deadline=parse_time(row.deadline),
        start_by=parse_time(row.start_by),
        requires=frozenset(requires),
        approved=bool(row.execution_approved) or not row.requires_approval,
        not_before=parse_time(row.retry_not_before),
        risk=RISK.get(row.risk_class or "low", 0),
        service_estimate=service_estimate,
        title=title,
    )


def _stamp(row: WorkRow) -> tuple[int, int, bool, str | None]:
    return (row.updated_sequence, row.revision, row.execution_approved, row.retry_not_before)


@dataclass
class FairScheduler:
    """The runtime's ``Picker``: a ``SchedulerCore`` fed by diffing the candidates.

    ``pick`` looks each candidate up by WorkItem ID and re-keys only the rows
    that changed (same object: skipped; else compared on ``(updated_sequence,
    revision, execution_approved, retry_not_before)``): one dict lookup per
    candidate, then the core's O(log n) choice. ``enqueued_at`` is when
    this Scheduler first saw the row (the projection does not record when an
    item was queued), so age restarts with the process.
    """

    policy: Mapping[str, Any] | None = None
    risk_ceiling: int | None = None
    service_estimate: float = 0.0
    core: SchedulerCore = field(init=False)
    _first_seen: dict[str, float] = field(init=False, default_factory=dict)
    _rows: dict[str, WorkRow] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.core = SchedulerCore(self.policy, risk_ceiling=self.risk_ceiling)

    def set_policy(self, policy: Mapping[str, Any]) -> None:
        self.policy = policy
        self.core.set_policy(policy)

    def _sync(self, candidates: Sequence[WorkRow], capabilities: frozenset[tuple[str, str]], now: float) -> None:
        core = self.core
        if core.capabilities != capabilities:
            core.set_capabilities(capabilities)
        rows = self._rows
        before = len(rows)
        still_there = 0
        for row in candidates:
            key = row.workitem
            known = rows.get(key)
            if known is row:  # the runtime passed the same row object: nothing to look at
                still_there += 1
                continue
            if known is not None:
                still_there += 1
                if _stamp(known) == _stamp(row):
                    rows[key] = row
                    continue
            rows[key] = row
            first = self._first_seen.setdefault(key, now)
            core.upsert(item_from_row(row, enqueued_at=first, service_estimate=self.service_estimate), now)
        if still_there < before:  # some rows left the candidates (started elsewhere, cancelled, ...)
            present = {row.workitem for row in candidates}
            for key in [k for k in rows if k not in present]:
                del rows[key]
                self._first_seen.pop(key, None)
                if key in core:
                    core.remove(key)

    def pick(
        self,
        candidates: Sequence[WorkRow],
        *,
        running: Mapping[str, int],
        free_slots: int,
        capabilities: frozenset[tuple[str, str]],
        now: datetime,
    ) -> WorkRow | None:
        ts = now.timestamp()
        self._sync(candidates, capabilities, ts)
        self.core.sync_running(running)
        item = self.core.select(ts, free_slots)
        return None if item is None else self._rows[item.key]

    def dispatched(self, row: WorkRow, now: datetime) -> None:
        key = row.workitem
        if key in self.core and key not in self.core._gated:
            self.core.dispatch(key, now.timestamp())
        elif key in self.core:
            self.core.remove(key)
        self._rows.pop(key, None)
        self._first_seen.pop(key, None)

    def disclose(self, workitem: str, now: datetime, *, slots: int, service_seconds: float) -> dict[str, Any]:
        """The disclosure body for one of the candidates last passed to ``pick``."""
        return self.core.disclose(workitem, now.timestamp(), slots=slots, service_seconds=service_seconds).as_json()

    def preemptions(
        self, running: Sequence[tuple[WorkRow, datetime]], *, slots: int, now: datetime
    ) -> list[PreemptRequest]:
        """``preemption_requests`` over (row, started_at) pairs of the slots in use."""
        items = [RunningItem(r.workitem, r.group_id, started.timestamp()) for r, started in running]
        return preemption_requests(self.core, items, slots=slots, now=now.timestamp())
