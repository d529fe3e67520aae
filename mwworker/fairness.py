"""The Scheduler's policy: Group weights and quotas, the in-Group order key, and the anti-starvation bound.

What the Organization priority policy means for one Worker (``Policy``),
when an item should start (``item_due``, the order of ``scheduler``'s
module docstring) and how long a Group can wait (``starvation_bound``).

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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# The Work Contract's requestedUrgency (``routine`` is the lowest) and sideEffectRisk, on the Scheduler's scales.
URGENCY = {"low": 0, "routine": 0, "normal": 1, "high": 2, "critical": 3}
IMPACT = {"low": 0, "medium": 1, "high": 2, "critical": 3}
RISK = {
    "low": 0, "medium": 1, "high": 2, "critical": 3,
    "none": 0, "reversible": 0, "external": 1, "high_risk": 2, "destructive": 3,
}  # fmt: skip
MAX_LEVEL = 6
DEFAULT_POLICY: dict[str, Any] = {
    "classes": {"critical": 8, "high": 4, "normal": 2, "low": 1},
    "default_class": "normal",
    "groups": {},
    "aging_seconds": 300,
}


EPS = 1e-9


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
    return sum(math.floor(w_h / w_g + EPS) + 1 for w_h in weights)


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
