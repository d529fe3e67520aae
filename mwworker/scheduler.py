"""The Worker's cross-Group Scheduler (spec 11.1-11.3; MWP-WRK-009..012; DESIGN §5).

Pure and deterministic: no I/O, no clock (``now`` is always an argument, in
POSIX seconds for the core and an aware ``datetime`` for the adapter), no
randomness. Two layers:

- ``SchedulerCore``: indexed structures with an incremental API (``upsert``,
  ``remove``, ``set_running``, ``select``, ``dispatch``) that the simulator,
  the benchmark and ``explain`` drive directly;
- ``FairScheduler`` (``picker``): the runtime's ``Picker`` (``pick``/``dispatched``/
  ``set_policy`` over ``WorkRow``), which diffs the candidate rows into a core.

The policy this order follows (weights, the in-Group due, the anti-starvation
bound) is in ``fairness``; which running items to ask to preempt, in
``preemption``.

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

Reordering and disclosure
=========================

A new item revision (``upsert``), a new policy (``set_policy``: weights,
classes, quotas, aging) or new capabilities re-key the queues at once, so the
next ``select`` reflects them (spec 11.3; MWP-WRK-015). On a weight change a
Group's lead over ``V`` (``x`` items is ``x/w`` of virtual time) is rescaled
to the new weight, which keeps (ii) of the bound's proof (``fairness``) true.

``SchedulerCore.disclose()`` estimates one item's start window and completion
(MWP-WRK-012) from its own Group's queue and the share its weight guarantees,
rounded outward, so it carries no other Group's identity, content,
assignments, counts or exact queue position.

Exceptions: ``SchedulerError`` (unknown item; a bad policy document).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .fairness import EPS, MAX_LEVEL, Item, Policy, SchedulerError, item_due

INF = math.inf


# Disclosure times are rounded outward to this grid so they do not encode other
# Groups' exact counts (MWP-WRK-012).
DISCLOSURE_GRID_SECONDS = 60.0


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
            if self.total_weight < EPS:
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
