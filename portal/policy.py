"""The priority policy editor: its Groups and the preview of fair shares per Group (spec 11.1;
``missions/policy.py``).

The page builds the policy document from the form and signs
``ext.mwportal.scheduling.priority_policy_set`` (``static/portal/sign.js``);
validation is ``missions.policy.check_policy`` itself, in that Command's
handler, so the editor and the Authority cannot disagree about what a valid
policy is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from missions.models import Agent, Organization

from .access import member_groups


@dataclass(slots=True)
class GroupRow:
    id: str
    title: str  # "" for a Group the editor is not a member of (shown by id only)
    klass: str  # "" means the default class
    quota: int | None


def group_rows(agent: Agent, policy: dict[str, Any]) -> list[GroupRow]:
    """The editor's Mission Groups, then any other Group the policy already names.

    Another Group's title stays hidden (never another Group's data); its id is
    in the policy document, which every Agent of the Organization may read.
    """
    entries: dict[str, Any] = policy.get("groups") or {}
    rows = []
    mine = set()
    for m in member_groups(agent):
        gid = str(m.group_id)
        mine.add(gid)
        entry = entries.get(gid, {})
        rows.append(GroupRow(gid, m.group.mission.title, entry.get("class", ""), entry.get("quota")))
    for gid, entry in sorted(entries.items()):
        if gid not in mine:
            rows.append(GroupRow(gid, "", entry.get("class", ""), entry.get("quota")))
    return rows


@dataclass(slots=True)
class Share:
    group: GroupRow
    klass: str
    weight: float
    percent: float


def shares(policy: dict[str, Any], rows: list[GroupRow]) -> list[Share]:
    """Each listed Group's fair share of a Worker's slots when every one has work waiting."""
    classes = policy.get("classes") or {}
    default = policy.get("default_class", "")
    weights = []
    for row in rows:
        klass = row.klass or default
        weights.append((row, klass, float(classes.get(klass, 0) or 0)))
    total = sum(w for _, _, w in weights) or 1.0
    return [Share(row, klass, w, round(100 * w / total, 1)) for row, klass, w in weights]


def current_policy(org: Organization) -> dict[str, Any]:
    return dict(org.priority_policy or {})
