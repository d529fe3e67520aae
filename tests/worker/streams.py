"""Realistic Event streams for the Worker tests and ``bench/replay.py``.

``World(seed)`` is a small model of the Group Authority: an Organization with
its administrative Group and Mission Groups, Agents (an owner, a coordinator
and workers, one of them ``ME``, the Worker under test), and WorkItems driven
through the transition table of ``workitems/state_machine.py`` by the rules of
``workitems/handlers/``: offers to candidate sets, acceptance with a new
Ownership Epoch, execution Approvals, leases with renewals, checkpoints with
usage charges, blocking, submissions with Evidence, retries within the
contract, expiry by the system actor, session replacement revoking leases in
other Groups, child Missions propagating to their parent WorkItem, Mission
terminal states, archival with a final snapshot, snapshots and tombstones.

Every Event has the server's wire shape and body (``missions/authority.py``
``_append``; the handlers' ``Emit`` bodies) and is hash-chained with
``mwportal.protocol.event_hash``: the generator shares no code with
``mwworker``. ``World.snapshot_state(group)`` is ``missions.snapshots
.group_state`` of the model, so snapshot documents can be signed for any
sequence the generator recorded.

Deterministic: the same seed gives the same stream, byte for byte.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from mwportal.protocol import GENESIS_HASH, SYSTEM_ACTOR, event_hash, format_time
from mwportal.protocol.snapshot import build_snapshot

Event = dict[str, Any]

ME = "0000beef-0000-4000-8000-00000000beef"  # Wanda, the Worker under test
START_BY = timedelta(seconds=900)  # mwportal/settings.py defaults
LEASE = timedelta(seconds=300)
BLOCKED_LEASE = timedelta(seconds=86400)
BUDGET_DIMENSIONS = ("financial", "tokens", "tool_calls", "compute_seconds", "wall_clock_seconds", "side_effects")
DEFAULT_POLICY = {
    "classes": {"critical": 8, "high": 4, "normal": 2, "low": 1},
    "default_class": "normal",
    "groups": {},
    "aging_seconds": 300,
}
OFFERABLE = ("open", "offered", "queued", "active", "blocked", "failed")
ENDABLE = ("open", "offered", "queued", "active", "blocked", "submitted")
CHILDABLE = ("open", "offered", "queued", "active", "blocked")
SATISFIED = {
    "verified": {"verified"},
    "submitted": {"submitted", "verified"},
    "terminal": {"verified", "failed", "cancelled"},
}
GOALS = ("Summarise the survey", "Translate the brief", "Clean the dataset", "Draft the release notes", "Review the PR")
CAPABILITIES = ("summarize", "translate", "etl", "writing", "code-review")


def system_action_id(*parts: object) -> str:
    """``missions.authority.system_action_id``."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "mwp:system:" + ":".join(str(p) for p in parts)))


@dataclass
class Lease:
    id: str
    agent: str
    session_epoch: int
    expires_at: datetime
    renewals: int = 0


@dataclass
class Item:
    """The model of ``workitems.models.WorkItem``."""

    id: str
    contract: dict[str, Any]
    dependencies: dict[str, str]
    state: str = "open"
    revision: int = 1
    contract_revision: int = 1
    accepted_contract_revision: int | None = None
    approved_contract_revision: int | None = None
    owner: str | None = None
    ownership_epoch: int = 0
    start_by: datetime | None = None
    owner_expires_at: datetime | None = None
    attempt: int = 0
    needs_new_attempt: bool = True
    retry_not_before: datetime | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    checkpoint_count: int = 0
    lease: Lease | None = None
    offers: dict[str, int] = field(default_factory=dict)  # open offers: agent -> contract revision
    offer_expires_at: datetime | None = None
    child_mission: str | None = None
    child_failure_policy: str = ""
    old_leases: list[tuple[str, str, int]] = field(default_factory=list)  # (agent, lease id, epoch)


@dataclass
class Group:
    id: str
    kind: str
    owner: str | None = None
    revision: int = 1
    last_sequence: int = 0
    head_hash: str = GENESIS_HASH
    mission: dict[str, Any] | None = None
    parent: tuple[str, str] | None = None
    memberships: dict[str, dict[str, Any]] = field(default_factory=dict)
    items: dict[str, Item] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)
    policy_revision: int = 0
    quota: int = 10**9  # Events before the Mission winds down towards its final Approval
    winding_down: bool = False
    doomed_at: int | None = None  # the Event count at which the owner gives up (fail or cancel)
    pending_members: list[tuple[str, list[str]]] = field(default_factory=list)
    dead: bool = False
    events: list[Event] = field(default_factory=list)
    # (sequence, head_hash, state) at every snapshot the server took.
    snapshots: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)


class World:
    """A deterministic Group Authority model producing hash-chained Events."""

    def __init__(self, seed: int, *, groups: int = 20, me: str = ME, child_missions: bool = True):
        self.rng = random.Random(seed)
        self.me = me
        self.now = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
        self.max_groups = groups
        self.child_missions = child_missions
        self.stream: list[Event] = []
        self.groups: dict[str, Group] = {}
        self.session_epoch: dict[str, int] = {}
        self.org = self.uuid()
        self.owner = self.uuid()
        self.coordinator = self.uuid()
        self.workers = [me] + [self.uuid() for _ in range(3)]
        self.spare_workers: list[str] = []
        self.admin = self._create_org()
        roots = max(1, groups - 1 - (groups // 5 if child_missions else 0))
        for _ in range(roots):
            self._create_mission()

    # --- plumbing -----------------------------------------------------------

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def tick(self, low: float = 0.2, high: float = 2.0) -> None:
        self.now += timedelta(seconds=round(self.rng.uniform(low, high), 3))

    def emit(
        self, g: Group, etype: str, agg: tuple[str, str, int], body: dict[str, Any], actor: str, action_id: str
    ) -> Event:
        """``_append`` of missions/authority.py: next sequence, hash chain, head and revision."""
        event: Event = {
            "event_id": self.uuid(),
            "group": g.id,
            "sequence": g.last_sequence + 1,
            "type": etype,
            "aggregate": {"kind": agg[0], "id": agg[1], "revision": agg[2]},
            "actor": actor,
            "action_id": action_id,
            "occurred_at": format_time(self.now),
            # Through JSON, as the server stores and serves it: no aliasing with the model.
            "body": json.loads(json.dumps(body)),
            "prev_hash": g.head_hash,
        }
        event["hash"] = event_hash(g.head_hash, event)
        g.last_sequence, g.head_hash = event["sequence"], event["hash"]
        if agg[0] == "group" and agg[1] == g.id:
            g.revision = max(g.revision, agg[2])
        g.events.append(event)
        self.stream.append(event)
        return event

    def group_ref(self, g: Group, bump: bool) -> tuple[str, str, int]:
        return ("group", g.id, g.revision + 1 if bump else g.revision)

    @staticmethod
    def item_ref(item: Item) -> tuple[str, str, int]:
        return ("workitem", item.id, item.revision)

    def is_member(self, g: Group, agent: str, *roles: str) -> bool:
        m = g.memberships.get(agent)
        return bool(m and m["active"] and (not roles or set(roles) & set(m["roles"])))

    def coordinator_of(self, g: Group) -> str:
        return self.coordinator if self.is_member(g, self.coordinator, "coordinator", "owner") else str(g.owner)

    # --- the administrative Group ------------------------------------------------

    def _create_org(self) -> Group:
        g = Group(id=self.uuid(), kind="admin", policy=dict(DEFAULT_POLICY))
        self.groups[g.id] = g
        body = {"organization": self.org, "slug": "acme", "name": "Acme", "policy": DEFAULT_POLICY}
        self.emit(g, "org.created", ("group", g.id, 1), body, SYSTEM_ACTOR, self.uuid())
        for agent, name, roles in [
            (self.owner, "olivia", ["mission_owner"]),
            (self.coordinator, "carl", ["coordinator"]),
            *[(w, f"worker{i}", ["worker"]) for i, w in enumerate(self.workers)],
        ]:
            self._register(g, agent, name, roles)
        for w in self.workers:
            self._publish_card(g, w)
        return g

    def _register(self, g: Group, agent: str, name: str, roles: list[str]) -> None:
        key = hashlib.sha256(agent.encode()).digest()
        public_key = base64.urlsafe_b64encode(key).rstrip(b"=").decode()
        body = {"agent": agent, "name": name, "kind": "agent", "org_roles": roles, "public_key": public_key}
        self.emit(g, "agent.registered", ("agent", agent, 1), body, SYSTEM_ACTOR, self.uuid())
        self.session_epoch[agent] = 0

    def _publish_card(self, g: Group, agent: str) -> None:
        version = sum(1 for e in g.events if e["type"] == "agent_card.published" and e["body"]["agent"] == agent) + 1
        caps = [{"id": c, "version": "1.0"} for c in self.rng.sample(CAPABILITIES, 2)]
        body = {"agent": agent, "version": version, "capabilities": caps, "max_concurrency": self.rng.randint(1, 4)}
        self.emit(g, "agent_card.published", ("agent_card", agent, version), body, agent, self.uuid())

    def _admin_actions(self, g: Group) -> list[tuple[float, Callable[[], None]]]:
        actions: list[tuple[float, Callable[[], None]]] = [
            (1.0, lambda: self._publish_card(g, self.rng.choice(self.workers))),
            (1.0, lambda: self._set_policy(g)),
            (1.5, lambda: self._open_session(self.rng.choice(self.workers))),
        ]
        if len(self.workers) < 8:
            actions.append((0.5, lambda: self._new_worker(g)))
        return actions

    def _new_worker(self, g: Group) -> None:
        agent = self.uuid()
        self._register(g, agent, f"worker{len(self.workers)}", ["worker"])
        self.workers.append(agent)
        self.spare_workers.append(agent)

    def _set_policy(self, g: Group) -> None:
        policy = json.loads(json.dumps(g.policy))
        mission_groups = [x.id for x in self.groups.values() if x.kind == "mission"]
        target = self.rng.choice(mission_groups)
        policy["groups"][target] = {"class": self.rng.choice(["low", "normal", "high", "critical"])}
        if self.rng.random() < 0.5:
            policy["groups"][target]["quota"] = self.rng.randint(1, 3)
        g.policy, g.policy_revision = policy, g.policy_revision + 1
        body = {"policy": policy, "revision": g.policy_revision}
        self.emit(
            g, "org.priority_policy_set", ("organization", self.org, g.policy_revision), body, self.owner, self.uuid()
        )

    def _open_session(self, agent: str) -> None:
        """``agent.open_session``: fence older sessions; revoke active leases everywhere (MWP-WRK-014)."""
        self.session_epoch[agent] += 1
        epoch = self.session_epoch[agent]
        action = self.uuid()
        body = {"agent": agent, "session_epoch": epoch}
        self.emit(self.admin, "agent.session_opened", ("agent", agent, epoch), body, agent, action)
        for gid in sorted(self.groups):
            g = self.groups[gid]
            for iid in sorted(g.items):
                item = g.items[iid]
                if item.lease is None or item.lease.agent != agent or item.state != "active":
                    continue
                lease = self._end_lease(item)
                item.state = "queued"
                item.needs_new_attempt = True
                item.start_by = self.now + START_BY
                item.owner_expires_at = item.start_by
                item.revision += 1
                body = {"lease_id": lease.id, "agent": agent, "reason": "session replaced"}
                self.emit(g, "work.lease_revoked", self.item_ref(item), body, agent, action)

    # --- Missions and Memberships ------------------------------------------------

    def _create_mission(
        self,
        *,
        parent: tuple[str, str] | None = None,
        owner: str | None = None,
        ids: tuple[str, str] | None = None,
        action: str | None = None,
    ) -> Group:
        owner = owner or self.owner
        group_id, mission_id = ids or (self.uuid(), self.uuid())
        if parent:
            quota = self.rng.randint(40, 120)  # a child Mission finishes and reports to its parent
        else:
            quota = self.rng.randint(150, 600) if self.rng.random() < 0.3 else 10**9
        g = Group(id=group_id, kind="mission", owner=owner, quota=quota)
        self.groups[g.id] = g
        budgets: dict[str, Any] = {"financial": 100000} if self.rng.random() < 0.5 else {}
        g.mission = {
            "id": mission_id,
            "title": f"Mission {len(self.groups)}",
            "objective": "Ship the quarterly report",
            "status": "active",
            "budgets": budgets,
            "usage": {},
        }
        g.parent = parent
        created: dict[str, Any] = {
            "mission": mission_id,
            "organization": self.org,
            "title": g.mission["title"],
            "objective": g.mission["objective"],
            "budgets": budgets,
        }
        if parent:
            created["parent"] = {"group": parent[0], "workitem": parent[1]}
        g.memberships[owner] = {"roles": ["owner"], "epoch": 1, "active": True}
        if parent is None:
            self.tick()
            g.pending_members = [(self.coordinator, ["coordinator"]), (self.me, ["worker"])]
            g.pending_members += [(w, ["worker"]) for w in self.rng.sample(self.workers[1:4], 2)]
        else:
            g.pending_members = [(self.me, ["worker"]), (self.rng.choice(self.workers[1:4]), ["worker"])]
        # A child Group's founding Events come with the parent's Command (Decision.also): same action.
        action = action or self.uuid()
        self.emit(g, "mission.created", ("group", g.id, 1), created, owner, action)
        body = {"agent": owner, "roles": ["owner"], "membership_epoch": 1}
        self.emit(g, "membership.added", ("group", g.id, 1), body, owner, action)
        return g

    def _add_member(self, g: Group, agent: str, roles: list[str]) -> None:
        existing = g.memberships.get(agent)
        epoch = existing["epoch"] + 1 if existing else 1
        g.memberships[agent] = {"roles": roles, "epoch": epoch, "active": True}
        self.tick()
        body = {"agent": agent, "roles": roles, "membership_epoch": epoch}
        self.emit(g, "membership.added", self.group_ref(g, True), body, str(g.owner), self.uuid())

    def _membership_actions(self, g: Group) -> list[tuple[float, Callable[[], None]]]:
        out: list[tuple[float, Callable[[], None]]] = []
        outsiders = [w for w in self.workers if not self.is_member(g, w)]
        if outsiders:
            out.append((0.3, lambda: self._add_member(g, self.rng.choice(outsiders), ["worker"])))
        others = [a for a in g.memberships if self.is_member(g, a) and a not in (g.owner, self.me, self.coordinator)]
        mine = [a for a in g.memberships if self.is_member(g, a) and a not in (g.owner, self.coordinator)]
        if mine:
            out.append((0.3, lambda: self._set_roles(g, self.rng.choice(mine))))
        if others:
            out.append((0.15, lambda: self._remove(g, self.rng.choice(others))))
        return out

    def _set_roles(self, g: Group, agent: str) -> None:
        m = g.memberships[agent]
        m["roles"] = ["worker"] if "reviewer" in m["roles"] else ["worker", "reviewer"]
        m["epoch"] += 1
        self.tick()
        body = {"agent": agent, "roles": m["roles"], "membership_epoch": m["epoch"]}
        self.emit(g, "membership.roles_set", self.group_ref(g, True), body, str(g.owner), self.uuid())

    def _remove(self, g: Group, agent: str) -> None:
        m = g.memberships[agent]
        m["active"], m["epoch"] = False, m["epoch"] + 1
        self.tick()
        body = {"agent": agent, "membership_epoch": m["epoch"]}
        self.emit(g, "membership.removed", self.group_ref(g, True), body, str(g.owner), self.uuid())

    # --- snapshots, tombstones, Mission terminal states -------------------------------

    def snapshot_state(self, g: Group) -> dict[str, Any]:
        """``missions.snapshots.group_state`` of the model."""
        state: dict[str, Any] = {"kind": g.kind, "revision": g.revision}
        state["mission"] = json.loads(json.dumps(g.mission)) if g.mission else None
        state["memberships"] = [
            {"agent": a, "roles": list(m["roles"]), "membership_epoch": m["epoch"], "active": m["active"]}
            for a, m in sorted(g.memberships.items())
        ]
        if g.kind == "admin":
            state["priority_policy"] = {"policy": json.loads(json.dumps(g.policy)), "revision": g.policy_revision}
        state["workitems"] = [self._item_state(g.items[i]) for i in sorted(g.items)]
        return json.loads(json.dumps(state))

    @staticmethod
    def _item_state(item: Item) -> dict[str, Any]:
        return {
            "id": item.id,
            "state": item.state,
            "revision": item.revision,
            "contract": item.contract,
            "contract_revision": item.contract_revision,
            "accepted_contract_revision": item.accepted_contract_revision,
            "owner": item.owner,
            "ownership_epoch": item.ownership_epoch,
            "start_by": format_time(item.start_by) if item.start_by else None,
            "approved_contract_revision": item.approved_contract_revision,
            "attempt": item.attempt,
            "usage": item.usage,
            "checkpoint_count": item.checkpoint_count,
            "dependencies": [{"workitem": w, "policy": p} for w, p in sorted(item.dependencies.items())],
        }

    def _snapshot(self, g: Group, *, final: bool = False) -> None:
        """The system Command ``group.snapshot``: sign the state at the head, then record it."""
        from mwportal.protocol.snapshot import state_hash

        state = self.snapshot_state(g)
        g.snapshots.append((g.last_sequence, g.head_hash, state))
        body = {"sequence": g.last_sequence, "head_hash": g.head_hash, "state_hash": state_hash(state), "final": final}
        kind = "final-snapshot" if final else "snapshot"
        parts = (kind, g.id) if final else (kind, g.id, g.last_sequence)
        self.emit(g, "group.snapshot_taken", self.group_ref(g, False), body, SYSTEM_ACTOR, system_action_id(*parts))

    def _redact(self, g: Group) -> None:
        candidates = [e for e in g.events if e["type"] in ("work.checkpointed", "work.blocked")] or g.events
        target = self.rng.choice(candidates)
        body = {"sequence": target["sequence"], "event_id": target["event_id"], "reason": "personal data"}
        self.emit(g, "event.redacted", self.group_ref(g, False), body, str(g.owner), self.uuid())

    def _close_mission(self, g: Group, status: str) -> None:
        assert g.mission is not None
        etype = {"completed": "mission.approved", "failed": "mission.failed", "cancelled": "mission.cancelled"}[status]
        action = self.uuid()
        self.tick()
        body: dict[str, Any] = {"mission": g.mission["id"]}
        if status == "completed":
            body["note"] = "all done"
        else:
            reason = "out of time" if status == "failed" else "no longer needed"
            body["reason"] = reason
            cause = f"mission {status}: {reason}"
            for iid in sorted(g.items):
                item = g.items[iid]
                if item.state not in ENDABLE:
                    continue
                self._end(item, status)
                item.revision += 1
                if status == "failed":
                    item_body: dict[str, Any] = {"reason": cause, "evidence": self._system_evidence(g, item, cause)}
                    self.emit(g, "work.failed", self.item_ref(item), item_body, str(g.owner), action)
                else:
                    self.emit(g, "work.cancelled", self.item_ref(item), {"reason": cause}, str(g.owner), action)
        g.mission["status"] = status
        self.emit(g, etype, self.group_ref(g, True), body, str(g.owner), action)
        if g.parent is not None:
            self._to_parent(g, {"completed": "approved", "failed": "failed", "cancelled": "cancelled"}[status], action)

    def _to_parent(self, child: Group, outcome: str, action: str) -> None:
        assert child.parent is not None and child.mission is not None
        parent = self.groups[child.parent[0]]
        item = parent.items.get(child.parent[1])
        if item is None or item.state != "blocked" or item.child_mission != child.mission["id"]:
            return
        if outcome == "approved":
            item.state = "verified"
            item.revision += 1
            evidence = [self._evidence(item, str(child.owner), method="human", artifacts=[])[0]]
            evidence[0]["summary"] = f"child Mission {child.mission['id']} received final Approval"
            body: dict[str, Any] = {"child_mission": child.mission["id"], "evidence": evidence}
            self.emit(parent, "work.child_approved", self.item_ref(item), body, str(child.owner), action)
            return
        to = "failed" if item.child_failure_policy == "fail_parent" else "blocked"
        body = {"child_mission": child.mission["id"], "outcome": outcome, "state": to}
        if to == "failed":
            self._end(item, "failed")
            body["evidence"] = self._system_evidence(parent, item, f"child Mission {child.mission['id']} {outcome}")
        else:
            item.child_mission = None
        item.revision += 1
        self.emit(parent, "work.child_failed", self.item_ref(item), body, str(child.owner), action)

    def _archive(self, g: Group) -> None:
        assert g.mission is not None
        g.mission["status"] = "archived"
        at = g.last_sequence + 1
        body = {"mission": g.mission["id"], "final_snapshot_at": at}
        self.emit(g, "mission.archived", self.group_ref(g, True), body, str(g.owner), self.uuid())
        self._snapshot(g, final=True)
        g.dead = True

    # --- WorkItems ----------------------------------------------------------------

    def _contract(self, g: Group) -> dict[str, Any]:
        rng = self.rng
        criteria = [
            {"id": f"c{i}", "description": f"criterion {i}", "evidence_methods": [rng.choice(["test", "reviewer"])]}
            for i in range(rng.randint(1, 3))
        ]
        existing = [i for i in g.items.values() if i.state not in ("failed", "cancelled")]
        deps = [
            {"workitem": d.id, "policy": rng.choice(["verified", "submitted", "terminal"])}
            for d in rng.sample(existing, min(len(existing), rng.choice([0, 0, 0, 1, 2])))
        ]
        contract: dict[str, Any] = {
            "goal": f"{rng.choice(GOALS)} #{rng.randint(1, 9999)}",
            "deliverables": [f"out-{rng.randint(1, 99)}.md"],
            "acceptance_criteria": criteria,
            "inputs": [{"kind": "dataset", "ref": f"ds-{rng.randint(1, 99)}"}],
            "dependencies": deps,
            "allowed": {"tools": ["search"], "data": ["survey"], "operations": ["read"]},
            "resources": {"memory_mb": rng.choice([256, 512, 1024])},
            "capabilities": [{"id": rng.choice(CAPABILITIES), "version": "1.0"}],
            "deadline": format_time(self.now + timedelta(days=rng.randint(1, 30))) if rng.random() < 0.5 else None,
            "urgency": rng.choice(["low", "normal", "high", "critical"]),
            "business_impact": rng.choice(["low", "medium", "high", "critical"]),
            "budgets": {d: (rng.choice([None, 10**6]) if d != "financial" else 5000) for d in BUDGET_DIMENSIONS},
            "retry": {
                "max_attempts": rng.randint(1, 4),
                "backoff_seconds": rng.choice([0, 5, 30]),
                "backoff_multiplier": rng.choice([1, 1.5, 2]),
                "deadline": None,
                "max_cost": rng.choice([None, 4000]),
            },
            "risk": {
                "class": rng.choice(["low", "medium", "high"]),
                "requires_execution_approval": rng.random() < 0.25,
            },
        }
        if rng.random() < 0.3:
            contract["notes"] = "Prefer primary sources."
        return contract

    def _authorize(self, g: Group) -> None:
        self.tick()
        actor = self.coordinator_of(g)
        proposal = None
        if self.rng.random() < 0.15:
            proposal = self.uuid()
            contract = self._contract(g)
            proposer = self.rng.choice([m for m in g.memberships if self.is_member(g, m)])
            self.emit(
                g,
                "work.proposed",
                ("proposal", proposal, 1),
                {"proposal": proposal, "contract": contract},
                proposer,
                self.uuid(),
            )
        else:
            contract = self._contract(g)
        contract = {**contract, "revision": 1}
        item = Item(
            id=self.uuid(),
            contract=contract,
            dependencies={d["workitem"]: d["policy"] for d in contract["dependencies"]},
        )
        g.items[item.id] = item
        body = {"workitem": item.id, "contract": contract, "proposal": proposal}
        self.emit(g, "work.authorized", self.item_ref(item), body, actor, self.uuid())

    def _end_lease(self, item: Item) -> Lease:
        lease = item.lease
        assert lease is not None
        item.old_leases.append((lease.agent, lease.id, item.ownership_epoch))
        item.lease = None
        return lease

    def _end(self, item: Item, state: str) -> None:
        """``_end``: revoke the lease, withdraw offers, no owner."""
        if item.lease is not None:
            self._end_lease(item)
        item.offers.clear()
        item.state = state
        item.owner, item.owner_expires_at, item.start_by = None, None, None

    def owner_live(self, item: Item) -> bool:
        return item.owner is not None and item.owner_expires_at is not None and item.owner_expires_at > self.now

    def _evidence(
        self,
        item: Item,
        producer: str,
        *,
        method: str = "test",
        result: str = "pass",
        artifacts: list[str] | None = None,
    ) -> list[dict[str, Any]]:
        sha = hashlib.sha256(f"{item.id}:{self.rng.random()}".encode()).hexdigest()
        return [
            {
                "subject": item.id,
                "criteria": [c["id"] for c in item.contract["acceptance_criteria"]],
                "method": method,
                "result": result,
                "producer": producer,
                "timestamp": format_time(self.now),
                "artifacts": [sha] if artifacts is None else artifacts,
                "summary": "checked against every criterion",
            }
        ]

    def _system_evidence(self, g: Group, item: Item, summary: str) -> list[dict[str, Any]]:
        return [
            {
                "subject": item.id,
                "criteria": [c["id"] for c in item.contract["acceptance_criteria"]],
                "method": "other",
                "result": "fail",
                "producer": item.owner or g.id,
                "timestamp": format_time(self.now),
                "artifacts": [],
                "summary": summary,
            }
        ]

    def _retry_allowed(self, item: Item) -> bool:
        retry = item.contract["retry"]
        if item.attempt >= retry["max_attempts"]:
            return False
        return retry["max_cost"] is None or item.usage.get("financial", 0) < retry["max_cost"]

    def _backoff(self, item: Item) -> timedelta:
        retry = item.contract["retry"]
        return timedelta(seconds=retry["backoff_seconds"] * retry["backoff_multiplier"] ** max(item.attempt - 1, 0))

    def _deps_met(self, g: Group, item: Item) -> bool:
        return all(g.items[d].state in SATISFIED[p] for d, p in item.dependencies.items() if d in g.items)

    def _item_actions(self, g: Group, item: Item) -> list[tuple[float, Callable[[], None]]]:
        s = item.state
        out: list[tuple[float, Callable[[], None]]] = []
        add = out.append
        reoffer = s != "failed" or not g.winding_down
        if s in OFFERABLE and not self.owner_live(item) and item.child_mission is None and reoffer:
            add(({"open": 2.0, "failed": 2.0, "offered": 0.2}.get(s, 1.0), lambda: self._offer(g, item)))
        if s == "offered":
            live_offers = [a for a in item.offers if self.is_member(g, a, "worker")]
            if live_offers and item.offer_expires_at and item.offer_expires_at > self.now:
                add((4.0, lambda: self._accept_offer(g, item, self.rng.choice(live_offers))))
                add((0.5, lambda: self._decline_offer(g, item, self.rng.choice(live_offers))))
        if s == "queued" and self.owner_live(item):
            needs = item.contract["risk"]["requires_execution_approval"]
            if needs and item.approved_contract_revision != item.contract_revision:
                add((2.0, lambda: self._grant(g, item)))
            elif (
                item.accepted_contract_revision == item.contract_revision
                and self.is_member(g, str(item.owner), "worker")
                and self._deps_met(g, item)
                and (not item.needs_new_attempt or self._retry_allowed(item))
            ):
                add((4.0, lambda: self._start(g, item)))
        soon = self.now + timedelta(seconds=5)  # the expiry sweeper acts once a deadline has passed
        if s == "queued" and item.owner is not None and item.owner_expires_at and item.owner_expires_at <= soon:
            add((2.0, lambda: self._expire_start_by(g, item)))
        if s == "active" and item.lease is not None:
            if item.lease.expires_at > self.now and self.is_member(g, item.lease.agent, "worker"):
                add((2.0, lambda: self._renew(g, item)))
                add((3.0, lambda: self._checkpoint(g, item, block=False)))
                add((0.6, lambda: self._checkpoint(g, item, block=True)))
                add((2.5, lambda: self._submit(g, item)))
                add((0.4, lambda: self._worker_fail(g, item)))
            if item.lease.expires_at <= soon:
                add((2.0, lambda: self._expire_lease(g, item)))
        if s == "blocked" and item.child_mission is None:
            add((2.0, lambda: self._unblock(g, item)))
            if item.owner is not None:
                add((0.05, lambda: self._expire_blocked(g, item)))
        if s == "submitted":
            add((4.0, lambda: self._accept_result(g, item)))
        if s in ENDABLE and item.child_mission is None:
            add((0.04, lambda: self._coordinator_end(g, item, "failed")))
            add((0.03, lambda: self._coordinator_end(g, item, "cancelled")))
        if s in CHILDABLE and self.child_missions and len(self.groups) < self.max_groups and not g.winding_down:
            add((0.1, lambda: self._create_child(g, item)))
        if item.old_leases and s in ("queued", "offered", "open", "active"):
            add((0.05, lambda: self._late_result(g, item)))
        return out

    def _offer(self, g: Group, item: Item) -> None:
        self.tick()
        actor = self.coordinator_of(g)
        workers = [a for a in g.memberships if self.is_member(g, a, "worker")]
        if not workers:
            return
        k = self.rng.randint(1, min(3, len(workers)))
        agents = self.rng.sample(workers, k)
        if self.me in workers and self.me not in agents and self.rng.random() < 0.4:
            agents[0] = self.me
        action = self.uuid()
        if item.owner is not None:
            fenced = item.owner
            if item.lease is not None:
                self._end_lease(item)
            item.owner, item.owner_expires_at, item.start_by = None, None, None
            item.revision += 1
            body: dict[str, Any] = {"agent": fenced, "ownership_epoch": item.ownership_epoch}
            self.emit(g, "work.owner_fenced", self.item_ref(item), body, actor, action)
        new_contract = None
        changed = False
        if self.rng.random() < 0.12:
            new_contract = {k: v for k, v in item.contract.items() if k != "revision"}
            if self.rng.random() < 0.5:
                new_contract["goal"] = new_contract["goal"] + " (revised)"
                item.contract_revision += 1
                item.accepted_contract_revision = None
                changed = True
            else:
                new_contract["notes"] = "Clarified: prose only."
            item.contract = {**new_contract, "revision": item.contract_revision}
        item.offers = {a: item.contract_revision for a in agents}
        item.offer_expires_at = self.now + timedelta(hours=1)
        item.state = "offered"
        item.revision += 1
        basis = {
            "capability_matches": ["summarize@1.0"],
            "authorization_eligibility": True,
            "availability_estimate": "now",
            "expected_cost": 3,
            "reliability_evidence": [],
            "policy_rules": ["default"],
        }
        body = {
            "agents": agents,
            "expires_at": format_time(item.offer_expires_at),
            "selection_basis": basis,
            "contract_revision": item.contract_revision,
        }
        if new_contract is not None:
            body["contract"] = item.contract
            body["contract_changed"] = changed
        self.emit(g, "work.offered", self.item_ref(item), body, actor, action)

    def _accept_offer(self, g: Group, item: Item, agent: str) -> None:
        self.tick()
        withdrawn = sorted(a for a in item.offers if a != agent)
        item.offers.clear()
        item.ownership_epoch += 1
        item.owner = agent
        item.start_by = self.now + START_BY
        item.owner_expires_at = item.start_by
        item.accepted_contract_revision = item.contract_revision
        item.state = "queued"
        item.revision += 1
        basis = {
            "capability_matches": ["summarize@1.0"],
            "authorization_eligibility": True,
            "availability_estimate": "now",
            "expected_cost": 3,
            "reliability_evidence": [],
            "policy_rules": ["default"],
        }
        body = {
            "agent": agent,
            "ownership_epoch": item.ownership_epoch,
            "start_by": format_time(item.start_by),
            "contract_revision": item.contract_revision,
            "selection_basis": basis,
            "withdrawn": withdrawn,
        }
        self.emit(g, "work.offer_accepted", self.item_ref(item), body, agent, self.uuid())

    def _decline_offer(self, g: Group, item: Item, agent: str) -> None:
        self.tick()
        del item.offers[agent]
        reason = self.rng.choice(["capacity", "deadline", "capability", "authorization", "dependency", "budget"])
        body = {"agent": agent, "reason": reason, "detail": ""}
        self.emit(g, "work.offer_declined", self.item_ref(item), body, agent, self.uuid())

    def _grant(self, g: Group, item: Item) -> None:
        self.tick()
        item.approved_contract_revision = item.contract_revision
        item.revision += 1
        body = {"workitem": item.id, "contract_revision": item.contract_revision, "note": "approved"}
        self.emit(g, "approval.execution_granted", self.item_ref(item), body, str(g.owner), self.uuid())

    def _start(self, g: Group, item: Item) -> None:
        self.tick()
        assert item.owner is not None
        if item.retry_not_before is not None and item.retry_not_before > self.now:
            self.now = item.retry_not_before + timedelta(seconds=1)  # waited out the backoff
            if not self.owner_live(item):
                return
        if item.needs_new_attempt:
            item.attempt += 1
            item.needs_new_attempt = False
        lease = Lease(self.uuid(), item.owner, self.session_epoch[item.owner], self.now + LEASE)
        item.lease = lease
        item.state = "active"
        item.owner_expires_at = lease.expires_at
        item.revision += 1
        body = {
            "agent": item.owner,
            "lease_id": lease.id,
            "ownership_epoch": item.ownership_epoch,
            "session_epoch": lease.session_epoch,
            "lease_expires_at": format_time(lease.expires_at),
            "attempt": item.attempt,
        }
        self.emit(g, "work.started", self.item_ref(item), body, item.owner, self.uuid())

    def _renew(self, g: Group, item: Item) -> None:
        self.tick()
        assert item.lease is not None
        item.lease.expires_at = self.now + LEASE
        item.lease.renewals += 1
        item.owner_expires_at = item.lease.expires_at
        body = {
            "lease_id": item.lease.id,
            "lease_expires_at": format_time(item.lease.expires_at),
            "renewal": item.lease.renewals,
        }
        self.emit(g, "work.lease_renewed", self.item_ref(item), body, item.lease.agent, self.uuid())

    def _charge(self, g: Group, item: Item) -> dict[str, Any]:
        """``charge_usage``: a delta within the WorkItem and Mission budgets, or none."""
        if self.rng.random() < 0.4:
            return {}
        usage = {"tokens": self.rng.randint(100, 5000), "tool_calls": self.rng.randint(0, 5)}
        if self.rng.random() < 0.5:
            usage["financial"] = self.rng.choice([0.25, 0.5, 1.75, 3])
        usage = {k: v for k, v in usage.items() if v}
        budgets = item.contract["budgets"]
        new_item = {
            d: item.usage.get(d, 0) + usage.get(d, 0)
            for d in BUDGET_DIMENSIONS
            if item.usage.get(d, 0) + usage.get(d, 0)
        }
        if any(budgets.get(d) is not None and t > budgets[d] for d, t in new_item.items()):
            return {}
        assert g.mission is not None
        mission_usage = dict(g.mission["usage"])
        for d, v in usage.items():
            mission_usage[d] = mission_usage.get(d, 0) + v
            if g.mission["budgets"].get(d) is not None and mission_usage[d] > g.mission["budgets"][d]:
                return {}
        item.usage = new_item
        g.mission["usage"] = mission_usage
        return {"delta": usage, "workitem_total": new_item}

    def _checkpoint(self, g: Group, item: Item, *, block: bool) -> None:
        self.tick(1, 30)
        assert item.lease is not None
        lease = self._end_lease(item)
        usage = self._charge(g, item)
        item.checkpoint_count += 1
        progress = {
            "phase": self.rng.choice(["reading", "drafting", "checking"]),
            "milestones": ["read inputs"],
            "next_checkpoint": "outline",
            "blockers": [],
            "estimate": {"remaining_seconds": self.rng.randint(60, 3600), "confidence": 0.7},
            "evidence": [],
        }
        body: dict[str, Any] = {
            "lease_id": lease.id,
            "checkpoint_number": item.checkpoint_count,
            "checkpoint": {"step": item.checkpoint_count, "cursor": self.rng.randint(0, 10**6)},
            "progress": progress,
            "usage": usage,
        }
        if block:
            body["resolution_required"] = "Need access to the archive"
            item.state = "blocked"
            item.owner_expires_at = self.now + BLOCKED_LEASE
            etype = "work.blocked"
        else:
            item.state = "queued"
            item.start_by = self.now + START_BY
            item.owner_expires_at = item.start_by
            etype = "work.checkpointed"
        item.revision += 1
        self.emit(g, etype, self.item_ref(item), body, lease.agent, self.uuid())

    def _unblock(self, g: Group, item: Item) -> None:
        self.tick()
        if self.owner_live(item):
            item.state = "queued"
            item.start_by = self.now + START_BY
            item.owner_expires_at = item.start_by
        else:
            item.state = "open"
            item.owner, item.owner_expires_at, item.start_by = None, None, None
        item.revision += 1
        body = {"resolution": "Access granted", "state": item.state}
        self.emit(g, "work.unblocked", self.item_ref(item), body, self.coordinator_of(g), self.uuid())

    def _submit(self, g: Group, item: Item) -> None:
        self.tick(1, 30)
        assert item.lease is not None
        lease = self._end_lease(item)
        usage = self._charge(g, item)
        evidence = self._evidence(item, lease.agent)
        item.state = "submitted"
        item.owner_expires_at = None
        item.revision += 1
        body = {"lease_id": lease.id, "artifacts": evidence[0]["artifacts"], "evidence": evidence, "usage": usage}
        self.emit(g, "work.submitted", self.item_ref(item), body, lease.agent, self.uuid())

    def _accept_result(self, g: Group, item: Item) -> None:
        self.tick()
        item.state = "verified"
        item.revision += 1
        actor = self.coordinator_of(g)
        body = {"evidence": self._evidence(item, actor, method="reviewer")}
        self.emit(g, "work.result_accepted", self.item_ref(item), body, actor, self.uuid())

    def _worker_fail(self, g: Group, item: Item) -> None:
        self.tick()
        assert item.lease is not None
        agent = item.lease.agent
        evidence = self._evidence(item, agent, result="fail")
        body: dict[str, Any] = {"evidence": evidence, "attempt": item.attempt}
        retryable = self.rng.random() < 0.7
        if retryable and self._retry_allowed(item):
            self._end_lease(item)
            item.state = "queued"
            item.needs_new_attempt = True
            item.retry_not_before = self.now + self._backoff(item)
            item.start_by = item.retry_not_before + START_BY
            item.owner_expires_at = item.start_by
            item.revision += 1
            body = {
                "evidence": evidence,
                "attempt": item.attempt,
                "retry_not_before": format_time(item.retry_not_before),
                "reason": "failure reported",
            }
            self.emit(g, "work.attempt_failed", self.item_ref(item), body, agent, self.uuid())
            return
        if retryable:
            body["reason"] = "retries exhausted: no attempts left"
        self._end(item, "failed")
        item.revision += 1
        self.emit(g, "work.failed", self.item_ref(item), body, agent, self.uuid())

    def _coordinator_end(self, g: Group, item: Item, state: str) -> None:
        self.tick()
        actor = self.coordinator_of(g)
        self._end(item, state)
        item.revision += 1
        if state == "failed":
            body: dict[str, Any] = {"evidence": self._evidence(item, actor, result="fail"), "attempt": item.attempt}
            self.emit(g, "work.failed", self.item_ref(item), body, actor, self.uuid())
        else:
            self.emit(g, "work.cancelled", self.item_ref(item), {"reason": "superseded"}, actor, self.uuid())

    def _expire_lease(self, g: Group, item: Item) -> None:
        assert item.lease is not None
        self.now = max(self.now, item.lease.expires_at + timedelta(seconds=1))
        lease = self._end_lease(item)
        action = system_action_id("expire-lease", lease.id)
        if not self._retry_allowed(item):
            self._end(item, "failed")
            item.revision += 1
            cause = "lease expired; all attempts are used"
            body: dict[str, Any] = {
                "evidence": self._system_evidence(g, item, cause),
                "attempt": item.attempt,
                "reason": "retries exhausted",
            }
            self.emit(g, "work.failed", self.item_ref(item), body, SYSTEM_ACTOR, action)
            return
        item.state = "queued"
        item.needs_new_attempt = True
        item.retry_not_before = self.now + self._backoff(item)
        item.start_by = item.retry_not_before + START_BY
        item.owner_expires_at = item.start_by
        item.revision += 1
        body = {
            "lease_id": lease.id,
            "ownership_epoch": item.ownership_epoch,
            "attempt": item.attempt,
            "start_by": format_time(item.start_by),
        }
        self.emit(g, "work.lease_expired", self.item_ref(item), body, SYSTEM_ACTOR, action)

    def _expire_start_by(self, g: Group, item: Item) -> None:
        assert item.owner is not None and item.owner_expires_at is not None
        self.now = max(self.now, item.owner_expires_at + timedelta(seconds=1))
        body = {"agent": item.owner, "ownership_epoch": item.ownership_epoch}
        item.owner, item.owner_expires_at, item.start_by = None, None, None
        item.revision += 1
        action = system_action_id("expire-start-by", item.id, body["ownership_epoch"])
        self.emit(g, "work.start_deadline_missed", self.item_ref(item), body, SYSTEM_ACTOR, action)

    def _expire_blocked(self, g: Group, item: Item) -> None:
        assert item.owner is not None and item.owner_expires_at is not None
        if item.owner_expires_at - self.now > timedelta(hours=2):
            item.owner_expires_at = self.now  # the model's shortcut: the blocked lease ran out early
        self.now = max(self.now, item.owner_expires_at + timedelta(seconds=1))
        body = {"agent": item.owner, "ownership_epoch": item.ownership_epoch}
        item.owner, item.owner_expires_at, item.start_by = None, None, None
        item.revision += 1
        action = system_action_id("expire-blocked", item.id, body["ownership_epoch"])
        self.emit(g, "work.blocked_lease_expired", self.item_ref(item), body, SYSTEM_ACTOR, action)

    def _late_result(self, g: Group, item: Item) -> None:
        agent, lease_id, _epoch = self.rng.choice(item.old_leases)
        if item.lease is not None and item.lease.id == lease_id:
            return
        self.tick()
        body = {
            "agent": agent,
            "lease_id": lease_id,
            "artifacts": [],
            "evidence": [],
            "refused": "WORK_LEASE_EXPIRED",
            "authoritative": False,
        }
        action = system_action_id("late-result", agent, self.uuid())
        self.emit(g, "work.late_result_recorded", self.item_ref(item), body, SYSTEM_ACTOR, action)

    def _create_child(self, g: Group, item: Item) -> None:
        self.tick()
        actor = self.coordinator_of(g)
        if item.lease is not None:
            self._end_lease(item)
        item.offers.clear()
        item.owner, item.owner_expires_at, item.start_by = None, None, None
        item.state = "blocked"
        policy = self.rng.choice(["fail_parent", "keep_blocked"])
        item.child_failure_policy = policy
        item.revision += 1
        # The parent's Event first, then the child Group's founding Events
        # (missions/authority.py appends decision.events before decision.also).
        child_group, child_mission = self.uuid(), self.uuid()
        item.child_mission = child_mission
        action = self.uuid()
        body = {"child_mission": child_mission, "child_group": child_group, "failure_policy": policy}
        self.emit(g, "mission.child_created", self.item_ref(item), body, actor, action)
        self._create_mission(parent=(g.id, item.id), owner=actor, ids=(child_group, child_mission), action=action)

    # --- driving -------------------------------------------------------------------

    def _group_actions(self, g: Group) -> list[tuple[float, Callable[[], None]]]:
        if g.kind == "admin":
            return self._admin_actions(g)
        assert g.mission is not None
        out: list[tuple[float, Callable[[], None]]] = []
        if g.pending_members:
            return [(1.0, lambda: self._add_pending(g))]
        status = g.mission["status"]
        if status != "active":
            if status in ("completed", "failed", "cancelled"):
                return [(1.0, lambda: self._archive(g))]
            return []
        live = [i for i in g.items.values() if i.state not in ("verified", "cancelled", "failed")]
        if not g.winding_down and len(live) < 6:
            out.append((3.0 if len(live) < 2 else 1.0, lambda: self._authorize(g)))
        for item in g.items.values():
            out += self._item_actions(g, item)
        out += self._membership_actions(g)
        out.append((0.1, lambda: self._snapshot(g)))
        if len(g.events) > 20:
            out.append((0.05, lambda: self._redact(g)))
        if g.winding_down and not [i for i in g.items.values() if i.state not in ("verified", "cancelled", "failed")]:
            out = [(1.0, lambda: self._close_mission(g, "completed"))]
        elif g.winding_down and (len(g.events) > g.quota * 2 or len(g.events) >= (g.doomed_at or 10**9)):
            out = [(1.0, lambda: self._close_mission(g, self.rng.choice(["failed", "cancelled"])))]
        return out

    def _add_pending(self, g: Group) -> None:
        agent, roles = g.pending_members.pop(0)
        if not self.is_member(g, agent):
            self._add_member(g, agent, roles)

    def step(self) -> None:
        alive = [g for g in self.groups.values() if not g.dead]
        g = self.rng.choices(alive, weights=[0.3 if x.kind == "admin" else 1.0 for x in alive])[0]
        if g.kind == "mission" and not g.winding_down and len(g.events) > g.quota:
            g.winding_down = True
            if self.rng.random() < 0.35:
                g.doomed_at = len(g.events) + self.rng.randint(5, 30)
        actions = self._group_actions(g)
        if not actions:
            self.tick()
            return
        weights = [w for w, _ in actions]
        _, action = self.rng.choices(actions, weights=weights)[0]
        action()
        if len(self.groups) < self.max_groups and self.rng.random() < 0.002:
            self._create_mission()

    def run(self, events: int) -> list[Event]:
        """At least ``events`` Events (commit order over all Groups), then exactly that many."""
        while len(self.stream) < events:
            self.step()
        return self.stream[:events]


def generate(seed: int, events: int, *, groups: int = 20, child_missions: bool = True) -> tuple[World, list[Event]]:
    world = World(seed, groups=groups, child_missions=child_missions)
    return world, world.run(events)


# --- delivery: duplicates, reordering, reconnect replays -----------------------------


def deliver(
    events: list[Event], rng: random.Random, *, dup_rate: float = 0.1, swap_rate: float = 0.2, window: int = 8
) -> list[Event]:
    """An at-least-once delivery of ``events``: some frames held back up to
    ``window`` places (a reordering transport), some delivered again up to
    ``4 * window`` places later (a reconnect's replay). Every Event is
    delivered at least once; nothing arrives before its original position."""
    keyed: list[tuple[float, int, Event]] = []
    for i, e in enumerate(events):
        delay = rng.randint(1, window) + 0.5 if rng.random() < swap_rate else 0
        keyed.append((i + delay, len(keyed), e))
        if rng.random() < dup_rate:
            keyed.append((i + rng.randint(0, 4 * window) + 0.25, len(keyed), e))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [e for _, _, e in keyed]


def resume_delivery(
    events: list[Event],
    cursors: dict[str, int],
    rng: random.Random,
    *,
    overlap: int = 5,
    limit: int | None = None,
    **kw: Any,
) -> list[Event]:
    """What a reconnecting Worker receives: per Group, the Events after its
    durable Cursor and up to ``overlap`` before it (the server replays from a
    little earlier: duplicates around the disconnect, spec 16), the Groups
    interleaved at random, then ``deliver``'s duplicates and reordering.
    ``limit`` keeps only about the first ``limit`` frames."""
    by_group: dict[str, list[Event]] = {}
    for e in events:
        by_group.setdefault(e["group"], []).append(e)
    tails = {}
    for group, evs in sorted(by_group.items()):
        start = max(0, cursors.get(group, 0) - rng.randint(0, overlap))
        if evs[start:]:
            tails[group] = evs[start:]
    # Interleave the Groups at random, each in its own order (the server's per-Group order).
    order = [g for g, evs in tails.items() for _ in evs]
    rng.shuffle(order)
    if limit is not None:
        order = order[:limit]
    positions = {g: iter(evs) for g, evs in tails.items()}
    merged = [next(positions[g]) for g in order]
    frames = deliver(merged, rng, **kw)
    return frames if limit is None else frames[:limit]


def snapshot_document(world: World, group: str, index: int, private_key: str) -> dict[str, Any]:
    """A signed snapshot document of ``group`` at its ``index``-th recorded snapshot."""
    g = world.groups[group]
    sequence, head_hash, state = g.snapshots[index]
    return build_snapshot(
        private_key=private_key,
        organization=world.org,
        group=group,
        sequence=sequence,
        head_hash=head_hash,
        state=state,
        created_at="2026-11-29T12:00:00.000000Z",
    )


def dump_jsonl(events: list[Event], path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for e in events:
            fh.write(json.dumps(e, separators=(",", ":")) + "\n")


def load_jsonl(path: str) -> Iterator[Event]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            yield json.loads(line)


class Chain:
    """Hand-built, hash-chained Events of one Group, for scripted tests.

    ``add(type, aggregate, body, actor=...)`` appends the next Event with the
    server's wire shape and returns it; ``forge(...)`` builds one with
    whatever members a test wants to break, hashed consistently over them.
    """

    def __init__(self, group: str | None = None, *, seed: int = 0):
        self.rng = random.Random(seed)
        self.group = group or self.uuid()
        self.events: list[Event] = []
        self.head = GENESIS_HASH
        self.now = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def forge(self, **members: Any) -> Event:
        self.now += timedelta(seconds=1)
        event: Event = {
            "event_id": self.uuid(),
            "group": self.group,
            "sequence": len(self.events) + 1,
            "type": "work.lease_renewed",
            "aggregate": {"kind": "group", "id": self.group, "revision": 1},
            "actor": ME,
            "action_id": self.uuid(),
            "occurred_at": format_time(self.now),
            "body": {},
            "prev_hash": self.head,
        }
        event.update(members)
        event["hash"] = event_hash(event["prev_hash"], event)
        return event

    def add(
        self, etype: str, aggregate: tuple[str, str, int], body: dict[str, Any], *, actor: str = ME, **members: Any
    ) -> Event:
        kind, agg_id, revision = aggregate
        event = self.forge(
            type=etype, aggregate={"kind": kind, "id": agg_id, "revision": revision}, body=body, actor=actor, **members
        )
        self.events.append(event)
        self.head = event["hash"]
        return event
