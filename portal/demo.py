"""The demo Organization of ``mwp demo`` (issue 7): people, Workers and two
Missions whose WorkItems sit in varied states, so the portal has something
to show on first start.

Every change goes through ``accept()``: the people's Commands are portal
Commands of their person Agents, the Workers' are signed with their own keys
(written under ``var/demo/``, mode 0600, for a Worker process to reuse).
Running it again changes nothing: the Missions have fixed ids.

Each demo person's password is generated on the first run and kept in
``var/demo-logins.json`` (mode 0600; issue 16 item 4: no installation shares
a known password), and every run prints them as ``login: NAME / PASSWORD``
lines, which ``./mw serve`` shows. The file sits beside ``var/demo/``, not in
it: ``./mw serve`` starts a Worker for every key file there.
"""

from __future__ import annotations

import io
import json
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model

from artifacts.store import store_stream
from missions.authority import Auth, Command, accept
from missions.commands import create_organization, portal_command, register_agent
from missions.models import Agent, Group, Mission
from mwportal.protocol import format_time, generate_keypair, make_envelope, parse_envelope
from mwportal.security import private_file, write_private_json
from workitems.models import WorkItem

ORG = "demo"
PEOPLE = (
    # username, display name, org roles
    ("owner", "Olivia Owner", ["mission_owner", "admin"]),
    ("coordinator", "Carl Coordinator", ["coordinator"]),
)
WORKERS = ("demo-worker-1", "demo-worker-2")
LOGINS_FILE = "demo-logins.json"


def _id(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "mwp:demo:" + ":".join(parts)))


def demo_passwords() -> tuple[dict[str, str], set[str]]:
    """Each demo person's password, and the people whose password is new.

    Read from ``VAR_DIR/demo-logins.json``; a person missing from it (the
    first run, or an installation from before the file) gets a random
    password, and the file is rewritten (mode 0600) before any user's
    password changes, so a password is never set that the file does not
    hold.
    """
    path = Path(settings.VAR_DIR) / LOGINS_FILE
    stored: dict[str, str] = {}
    if path.exists():
        private_file(path)  # a copy restored with looser permissions is closed again
        try:
            loaded = json.loads(path.read_text())
        except ValueError as exc:
            raise ValueError(f"{path}: not JSON ({exc}); delete it to generate new demo passwords") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: must be an object of user name to password; delete it to start over")
        stored = {k: v for k, v in loaded.items() if isinstance(k, str) and isinstance(v, str) and v}
    fresh = {username for username, _, _ in PEOPLE if username not in stored}
    if fresh:
        for username in sorted(fresh):
            stored[username] = secrets.token_urlsafe(12)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private_json(path, stored)
    return stored, fresh


def ensure_people() -> tuple[dict[str, Agent], dict[str, str]]:
    """The demo logins and their person Agents (created once), and their passwords."""
    create_organization(ORG, "Demo Organization")
    passwords, fresh = demo_passwords()
    user_model = get_user_model()
    agents = {}
    for username, name, roles in PEOPLE:
        user = user_model.objects.filter(username=username).first()
        if user is None:
            user = user_model.objects.create_user(username, password=passwords[username], is_staff=True)
        elif username in fresh:
            # An installation seeded before demo-logins.json (the fixed
            # password of old): the user gets the new password now.
            user.set_password(passwords[username])
            user.save(update_fields=["password"])
        agent = Agent.objects.filter(user=user).first()
        if agent is None:
            # A person without a key (issue 16 item 5): the portal acts for
            # them by their session; a key is theirs to enroll.
            register_agent(ORG, name, "person", roles, "", user=username)
            agent = Agent.objects.get(user=user)
        agents[username] = agent
    return agents, passwords


class _Worker:
    """A demo Worker Agent with a key file under ``var/demo/``."""

    def __init__(self, name: str):
        path = Path(settings.VAR_DIR) / "demo" / f"{name}.json"
        if path.exists():
            data = json.loads(path.read_text())
            if Agent.objects.filter(id=data["agent_id"]).exists():
                self.id, self.private_key = data["agent_id"], data["private_key"]
                return
        private_key, public_key = generate_keypair()
        self.id = register_agent(ORG, name, "agent", ["worker"], public_key)
        self.private_key = private_key
        path.parent.mkdir(parents=True, exist_ok=True)
        org_id = str(Agent.objects.get(id=self.id).organization_id)
        write_private_json(path, {"agent_id": self.id, "organization": org_id, "private_key": private_key,
                                  "public_key": public_key})  # fmt: skip

    def send(self, type_: str, group: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        epoch = Agent.objects.values_list("session_epoch", flat=True).get(id=self.id)
        raw = make_envelope(type=type_, actor=self.id, group=group, body=body, session_epoch=epoch,
                            private_key=self.private_key, **kw)  # fmt: skip
        return accept(Command(parse_envelope(raw), Auth.SIGNED))


def contract(
    goal: str,
    criteria: list[tuple[str, str, str]],
    *,
    deps: tuple[str, ...] | list[str] = (),
    risk: str = "low",
    approval: bool = False,
    urgency: str = "normal",
    capability: str = "analysis",
) -> dict[str, Any]:
    return {
        "goal": goal,
        "deliverables": [goal.lower().replace(" ", "-")[:40] + ".md"],
        "acceptance_criteria": [{"id": c, "description": d, "evidence_methods": [m]} for c, d, m in criteria],
        "inputs": [],
        "dependencies": [{"workitem": d, "policy": "verified"} for d in deps],
        "allowed": {"tools": ["python", "search"], "data": ["sales-db"], "operations": ["read", "write-report"]},
        "resources": {"memory_mb": 1024},
        "capabilities": [{"id": capability, "version": "1.0"}],
        "deadline": None,
        "urgency": urgency,
        "business_impact": "high" if approval else "medium",
        "budgets": {
            "financial": 250,
            "tokens": 200000,
            "tool_calls": 120,
            "compute_seconds": 3600,
            "wall_clock_seconds": 14400,
            "side_effects": 3 if approval else 0,
        },  # fmt: skip
        "retry": {
            "max_attempts": 3,
            "backoff_seconds": 30,
            "backoff_multiplier": 2,
            "deadline": None,
            "max_cost": None,
        },  # fmt: skip
        "risk": {"class": risk, "requires_execution_approval": approval},
    }


BASIS = {
    "capability_matches": ["analysis@1.0"],
    "authorization_eligibility": True,
    "availability_estimate": "now",
    "expected_cost": 12,
    "reliability_evidence": [],
    "policy_rules": ["demo"],
}
PROGRESS = {"phase": "analysis", "milestones": ["inputs read"], "next_checkpoint": "draft", "blockers": [],
            "estimate": {"remaining_seconds": 900, "confidence": 0.6}, "evidence": []}  # fmt: skip


class _Mission:
    def __init__(self, key: str, owner: Agent, coordinator: Agent, workers: list[_Worker]):
        self.group = _id(key, "group")
        self.owner, self.coordinator, self.workers = owner, coordinator, workers

    def rev(self, item: str) -> dict[str, Any]:
        return {"kind": "workitem", "id": item, "revision": WorkItem.objects.get(id=item).revision}

    def person(self, agent: Agent, type_: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return accept(portal_command(agent, type_, self.group, body, **kw))

    def create(self, key: str, title: str, objective: str) -> None:
        self.person(self.owner, "mission.create", {"mission": _id(key, "mission"), "title": title,
                                                   "objective": objective})  # fmt: skip
        members = [(self.coordinator.id, "coordinator")] + [(w.id, "worker") for w in self.workers]
        for agent_id, role in members:
            revision = Group.objects.values_list("revision", flat=True).get(id=self.group)
            self.person(self.owner, "membership.add", {"agent": str(agent_id), "roles": [role]},
                        target={"kind": "group", "id": self.group, "revision": revision})  # fmt: skip

    def authorize(self, key: str, c: dict[str, Any]) -> str:
        item = _id(self.group, key)
        self.person(self.coordinator, "work.authorize", {"workitem": item, "contract": c})
        return item

    def offer(self, item: str, worker: _Worker) -> None:
        expires = format_time(datetime.now(UTC) + timedelta(hours=8))
        self.person(self.coordinator, "work.offer", {"agents": [worker.id], "expires_at": expires,
                                                     "selection_basis": BASIS}, target=self.rev(item))  # fmt: skip

    def queue(self, item: str, worker: _Worker) -> None:
        self.offer(item, worker)
        worker.send("work.accept_offer", self.group, {}, target=self.rev(item))

    def start(self, item: str, worker: _Worker) -> str:
        self.queue(item, worker)
        epoch = WorkItem.objects.get(id=item).ownership_epoch
        receipt = worker.send("work.start", self.group, {}, target=self.rev(item), ownership_epoch=epoch)
        return str(receipt["grants"]["lease_id"])

    def submit(self, item: str, worker: _Worker, content: bytes, media_type: str, summaries: dict[str, str]) -> None:
        lease = self.start(item, worker)
        blob = store_stream(io.BytesIO(content), media_type, Group.objects.get(id=self.group),
                            Agent.objects.get(id=worker.id), 10_000_000)  # fmt: skip
        now = format_time(datetime.now(UTC))
        evidence = [
            {"subject": item, "criteria": [c], "method": "deterministic_check" if i == 0 else "reviewer",
             "result": "pass", "producer": worker.id, "timestamp": now, "artifacts": [blob.sha256], "summary": s}
            for i, (c, s) in enumerate(summaries.items())
        ]  # fmt: skip
        worker.send("work.submit", self.group, {"artifacts": [blob.sha256], "evidence": evidence},
                    target={"kind": "workitem", "id": item}, lease_id=lease)  # fmt: skip

    def verify(self, item: str) -> None:
        now = format_time(datetime.now(UTC))
        crit = [c["id"] for c in WorkItem.objects.get(id=item).contract["acceptance_criteria"]]
        evidence = [{"subject": item, "criteria": crit, "method": "human", "result": "pass",
                     "producer": str(self.coordinator.id), "timestamp": now, "artifacts": [],
                     "summary": "figures reconcile with the ledger"}]  # fmt: skip
        self.person(self.coordinator, "work.accept_result", {"evidence": evidence}, target=self.rev(item))


def seed() -> list[str]:
    """Create (once) the demo people, Workers and Missions; the login lines to print."""
    people, passwords = ensure_people()
    workers = [_Worker(name) for name in WORKERS]
    w1, w2 = workers
    report = _Mission("report", people["owner"], people["coordinator"], workers)
    if not Mission.objects.filter(group_id=report.group).exists():
        report.create("report", "Quarterly market report", "Publish the Q3 market report to customers, with "
                      "every figure traced to its source.")  # fmt: skip
        collect = report.authorize("collect", contract("Collect Q3 sales data", [
            ("complete", "every region is present", "deterministic_check"),
            ("sourced", "each figure cites its ledger row", "reviewer")]))  # fmt: skip
        report.submit(
            collect,
            w1,
            b'{"regions": 12, "rows": 48210}',
            "application/json",
            {"complete": "12 of 12 regions present", "sourced": "48210 rows cite a ledger id"},
        )
        report.verify(collect)
        clean = report.authorize("clean", contract("Clean and validate the dataset", [
            ("schema", "rows match the sales schema", "deterministic_check"),
            ("outliers", "outliers are explained", "reviewer")], deps=[collect]))  # fmt: skip
        report.submit(clean, w1, b'{"valid_rows": 48102, "dropped": 108, "outliers": 7}', "application/json",
                      {"schema": "48102 rows valid, 108 dropped with reasons",
                       "outliers": "7 outliers traced to a currency change"})  # fmt: skip
        scan = report.authorize("scan", contract("Scan competitor pricing", [
            ("coverage", "the five main competitors are covered", "reviewer")], urgency="high"))  # fmt: skip
        report.start(scan, w2)
        draft = report.authorize("draft", contract("Draft the report", [
            ("structure", "follows the house template", "reviewer")], deps=[clean, scan]))  # fmt: skip
        report.offer(draft, w1)
        report.authorize("legal", contract("Legal review of claims", [
            ("claims", "no claim without a source", "human")], deps=[draft]))  # fmt: skip
        publish = report.authorize("publish", contract("Publish the report to customers", [
            ("sent", "the mailing went to the approved list", "deterministic_check")], deps=[draft], risk="high",
            approval=True, capability="mailing"))  # fmt: skip
        report.queue(publish, w2)
    web = _Mission("web", people["owner"], people["coordinator"], workers)
    if not Mission.objects.filter(group_id=web.group).exists():
        web.create("web", "Website refresh", "Faster pages and clearer copy on the public site.")
        speed = web.authorize("speed", contract("Audit page speed", [
            ("measured", "every page has a Lighthouse score", "test")]))  # fmt: skip
        web.queue(speed, w1)
        copy = web.authorize("copy", contract("Rewrite the landing copy", [
            ("tone", "matches the style guide", "reviewer")], risk="medium", approval=True))  # fmt: skip
        web.queue(copy, w2)
        web.authorize("images", contract("Compress hero images", [
            ("size", "every image under 200 KB", "deterministic_check")]))  # fmt: skip
    return [
        f"login: owner / {passwords['owner']} (MissionOwner and admin of the demo Organization)",
        f"login: coordinator / {passwords['coordinator']} (Coordinator of the demo Missions)",
    ]
