"""The demo Organization of ``mwp demo`` (issue 7): people, a Coordinator Agent,
Workers and two Missions whose WorkItems sit in varied states, so the portal
has something to show on first start.

Every change is a normative Command document (PROTOCOL §15.1) signed by its
Principal's own key and accepted through ``accept_document``, the six
verification stages included, exactly as a client on the wire would send it.
Each demo Agent has a DESIGN §4 key file in the keys directory (``--keys
DIR``, default ``VAR_DIR/demo/``, mode 0600): the Coordinator Agent's
(``demo-coordinator.json``; §7.2: the Coordinator is an Agent) and the
Workers' (``demo-worker-N.json``), for which ``./mw serve`` starts ``mwworker
demo`` on ``/mwp/0.1``, and the reviewer Agent's (``demo-reviewer.json``), a
``reviewer`` member of every demo Mission whose ``mwworker demo`` answers the
review WorkItems the review pipeline offers (§13.2), so a qualitative
criterion is reviewed by an Agent other than its submitter. The Website
refresh Mission needs no execution Approval: the demo Agents alone take it to
``awaiting_approval`` and its owner approves it in the browser; the report's
mailing waits for the owner's execution Approval (§12) first. Running it
again changes nothing: the Missions have fixed ids, and the key files of
registered Principals are reused.

The demo people (owner, observer) have no key file: the service's files hold
no person's private key (DESIGN §4, issue 19 item 2). They sign in the
browser, which enrols a non-extractable key of its own on their first
sign-in (``portal/signing.py``). The MissionOwner's seeding Commands (the
Missions' ``mission.create`` and ``membership.change``, §7.1: a human
creates a Mission) are signed with a one-shot key made in this process's
memory, enrolled for the owner only while ``seed`` runs and revoked before it
returns; its private half is never written anywhere. A key file an older
``mwp demo`` wrote for a person (``owner.json``, ``observer.json``) is
revoked and deleted.

Each demo person's password is generated on the first run and kept in
``var/demo-logins.json`` (mode 0600; issue 16 item 4: no installation shares
a known password), and every run prints them as ``login: NAME / PASSWORD``
lines, which ``./mw serve`` shows.
"""

from __future__ import annotations

import json
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model

from artifacts.review_handlers import REVIEW_CAPABILITY
from missions.authority import accept, accept_document
from missions.commands import membership_epoch, open_session, register_principal, service_command
from missions.handlers.sessions import capability, issue_agent_card
from missions.models import Agent, AgentCard, Group, Mission, SigningKey, SigningKeyValidity
from mwportal.protocol import canonicalize
from mwportal.protocol.command import Key, build_command, format_timestamp
from mwportal.protocol.ids import new_urn, urn
from mwportal.security import private_file, write_private_json
from workitems.models import WorkItem

from .keys import enrol_key, reuse_key
from .signing import ENROLL, REVOKE, admin_group_id

ORG = "demo"
PEOPLE: tuple[tuple[str, str, list[str], str], ...] = (
    # username, display name, Organization roles, Membership role in the demo Missions
    ("owner", "Olivia Owner", ["mission_owner", "admin"], "mission_owner"),
    ("observer", "Oscar Observer", [], "observer"),
)
COORDINATOR = "demo-coordinator"
WORKERS = ("demo-worker-1", "demo-worker-2")
REVIEWER = "demo-reviewer"
LOGINS_FILE = "demo-logins.json"
# The capabilities of the demo's Work Contracts, which ``mwworker demo`` registers.
ANALYSIS = {"id": "demo.analysis", "version": "1.0.0"}
MAILING = {"id": "demo.mailing", "version": "1.0.0"}
COORDINATION = {"id": "demo.coordination", "version": "1.0.0"}
# A Coordinator Command of a Mission the demo just created carries its first Coordinator Epoch (§7.2).
FIRST_COORDINATOR_EPOCH = 1


def _id(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "mwp:demo:" + ":".join(parts)))


def keys_dir(keys: Path | None = None) -> Path:
    return Path(keys) if keys is not None else Path(settings.VAR_DIR) / "demo"


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
    fresh = {username for username, *_ in PEOPLE if username not in stored}
    if fresh:
        for username in sorted(fresh):
            stored[username] = secrets.token_urlsafe(12)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private_json(path, stored)
    return stored, fresh


class Principal:
    """A demo Principal; it signs and sends its own Commands."""

    def __init__(self, key: Key, kind: str):
        assert key.principal is not None
        self._key, self.kind = key, kind
        self.id = key.principal[1]
        self.session_epoch: int | None = None

    @classmethod
    def with_key_file(cls, path: Path, name: str, roles: list[str]) -> Principal:
        """A demo Agent and its DESIGN §4 key file (reused while its Principal is registered here)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        key = reuse_key(path)
        if key is None:
            key = enrol_key(ORG, name, "agent", roles)
            key.write(path)
        return cls(key, "agent")

    @property
    def key(self) -> Key:
        return self._key

    @property
    def actor(self) -> dict[str, str]:
        return {"type": Agent.ACTOR_TYPES[self.kind], "id": urn(self.id)}

    def open_session(self) -> None:
        """A new Session Epoch (§6.3) for the Agent's Commands below; its Worker process opens its own."""
        _, self.session_epoch = open_session(self.id)

    def send(self, kind: str, group: str, payload: dict[str, Any], *, creates: bool = False, **kw: Any) -> Any:
        if self.kind == "agent":
            kw["session_epoch"] = self.session_epoch
        if not creates:
            kw["membership_epoch"] = membership_epoch(self.id, group)
        key = self.key
        assert key.principal is not None
        document = build_command(kind, actor=key.principal, key=key, payload=payload, group=group, **kw)
        return accept_document(canonicalize(document))


class Person(Principal):
    """A demo person: a human Principal with no key file (DESIGN §4).

    What they sign while the demo is seeded is signed with a one-shot key,
    made in memory on first use and enrolled for them by the control plane;
    ``retire`` revokes it, and the private half goes with this object.
    """

    def __init__(self, agent: Agent):
        self.agent = agent
        self.kind, self.id, self.session_epoch = "person", str(agent.id), None
        self._one_shot: Key | None = None

    @property
    def key(self) -> Key:
        if self._one_shot is None:
            unbound = Key.generate()
            key_id = new_urn()
            public_key = {"keyId": key_id, "algorithm": "Ed25519", "publicKey": unbound.public_key,
                          "validFrom": format_timestamp(datetime.now(UTC))}  # fmt: skip
            self._control(ENROLL, {"principal": self.actor, "publicKey": public_key})
            self._one_shot = Key(key_id, unbound.seed, ("human", self.id), str(self.agent.organization_id))
        return self._one_shot

    def retire(self) -> None:
        """Revoke the one-shot key, if one was made: nobody holds its private half any more."""
        if self._one_shot is not None:
            revoke_person_key(self.agent, self._one_shot.key_id, "the demo's one-shot seeding key")
            self._one_shot = None

    def _control(self, kind: str, payload: dict[str, Any]) -> None:
        org = str(self.agent.organization_id)
        accept(service_command(kind, admin_group_id(self.agent), payload, organization_id=org))


def revoke_person_key(agent: Agent, key_id: str, reason: str) -> None:
    """The control plane revokes a person's key (DESIGN §4), unless it is revoked already."""
    row = SigningKey.objects.filter(key_id=key_id, principal_type="human", principal_id=urn(agent.id)).first()
    if row is None or SigningKeyValidity.objects.filter(key=row, revoked_at__isnull=False).exists():
        return
    payload = {"keyId": key_id, "reason": reason}
    accept(service_command(REVOKE, admin_group_id(agent), payload, organization_id=str(agent.organization_id)))


def forget_key_file(path: Path, agent: Agent) -> None:
    """A person's key file an older ``mwp demo`` wrote: its key is revoked and the file deleted."""
    if not path.exists():
        return
    try:
        key = Key.from_file(path)
    except (ValueError, KeyError, TypeError):
        key = None
    if key is not None:
        revoke_person_key(agent, key.key_id, "a key file in the service's directory; people sign in the browser")
    path.unlink()


def ensure_people(keys: Path) -> tuple[dict[str, Person], dict[str, str]]:
    """The demo logins and their human Principals (created once, without a key), and their passwords."""
    passwords, fresh = demo_passwords()
    users = get_user_model().objects
    people = {}
    for username, name, roles, _ in PEOPLE:
        user = users.filter(username=username).first()
        if user is None:
            user = users.create_user(username, password=passwords[username], is_staff=True)
        elif username in fresh:
            # An installation seeded before demo-logins.json: the user gets the new password now.
            user.set_password(passwords[username])
            user.save(update_fields=["password"])
        agent = Agent.objects.filter(user=user, kind=Agent.KIND_PERSON, organization__slug=ORG).first()
        if agent is None:
            principal_id, _ = register_principal(ORG, name, "person", roles, None, username)
            agent = Agent.objects.get(id=principal_id)
        forget_key_file(keys / f"{username}.json", agent)
        people[username] = Person(agent)
    return people, passwords


def publish_card(agent: Principal, capabilities: list[dict[str, str]]) -> None:
    """The Agent's first Agent Card (§6.1), issued by the Organization's Registry service, once;
    each capability verified by the demo's own (named) Evidence."""
    if AgentCard.objects.filter(agent_id=agent.id).exists():
        return
    cards = [capability(c["id"], c["version"], verified_evidence=[urn(_id("verified", c["id"]))]) for c in capabilities]
    issue_agent_card(agent.id, cards, max_concurrency=2)


def contract(
    goal: str,
    criteria: list[tuple[str, str, str]],
    *,
    deps: tuple[str, ...] | list[str] = (),
    risk: str = "none",
    approval: bool = False,
    human: bool | None = None,
    urgency: str = "normal",
    capability: dict[str, str] = ANALYSIS,
) -> dict[str, Any]:
    """A normative Work Contract (``work-contract.schema.json``) for the demo: ``approval``, a
    delivery to customers; ``human`` (by default as ``approval``), an execution Approval first."""
    deliverable = goal.lower().replace(" ", "-")[:40]
    resources = [{"resource": urn(_id("mailing-list")), "operations": ["email.send"]}] if approval else []
    return {
        "contractVersion": 1,
        "goal": goal,
        "requiredDeliverables": [
            {
                "deliverableId": deliverable,
                "description": goal,
                "mediaType": "application/json",
                "schema": "https://schemas.missionweave.example/demo/report",
            }
        ],  # fmt: skip
        "acceptanceCriteria": [{"criterionId": c, "description": d, "evidenceRequired": [m]} for c, d, m in criteria],
        "inputArtifacts": [],
        "dependencyWorkItemIds": [urn(d) for d in deps],
        "allowedResources": resources,
        "requiredCapabilities": [capability],
        "deadline": format_timestamp(datetime.now(UTC) + timedelta(days=7)),
        "requestedUrgency": urgency,
        "businessImpact": "customers read it" if approval else "internal planning",
        "retryPolicy": {"maxAttempts": 3, "backoff": "exponential", "maxDelay": "PT5M", "retryableFailures": []},
        "budget": {
            "currency": "EUR",
            "financialLimit": 250,
            "modelTokenLimit": 200000,
            "toolCallLimit": 120,
            "computeSecondsLimit": 3600,
            "wallClockSecondsLimit": 14400,
            # A zero limit would be spent before the start (workitems: usage >= limit); none is named instead.
            **({"externalSideEffectLimit": 3} if approval else {}),
        },  # fmt: skip
        "sideEffectRisk": risk,
        "executionApproval": "human_required" if (approval if human is None else human) else "not_required",
    }


def basis(capability: dict[str, str]) -> dict[str, Any]:
    """The offer's selection basis (§10.3, the WorkItem schema's ``selectionBasis``)."""
    return {
        "requiredCapabilities": [capability],
        "verifiedMatches": [capability],
        "authorizationEligible": True,
        "availabilityEstimate": format_timestamp(datetime.now(UTC)),
        "expectedCost": 12,
        "reliabilityEvidence": [],
        "policyRulesApplied": ["demo: the first Worker with the capability"],
    }


class DemoMission:
    def __init__(self, key: str, owner: Principal, coordinator: Principal, people: list[Principal]):
        self.key, self.group, self.mission = key, _id(key, "group"), _id(key, "mission")
        self.owner, self.coordinator, self.people = owner, coordinator, people

    def revision(self, item: str) -> int:
        return int(WorkItem.objects.values_list("revision", flat=True).get(id=item))

    def coordinate(self, kind: str, payload: dict[str, Any], **kw: Any) -> Any:
        return self.coordinator.send(kind, self.group, payload, coordinator_epoch=FIRST_COORDINATOR_EPOCH, **kw)

    def create(self, title: str, objective: str, workers: list[Principal], reviewer: Principal) -> None:
        self.owner.send("mission.create", self.group, {
            "missionId": urn(self.mission), "groupId": urn(self.group), "coordinatorId": urn(self.coordinator.id),
            "title": title, "objective": objective,
            "definitionOfDone": [{"criterionId": "delivered", "description": objective,
                                  "evidenceRequired": ["human_review"]}],
            "deadline": format_timestamp(datetime.now(UTC) + timedelta(days=14)),
            "budget": {"currency": "EUR", "financialLimit": 5000, "modelTokenLimit": 5000000},
            "approvalPolicy": {"finalHumanApproval": True, "highRiskExecutionApproval": True},
        }, creates=True)  # fmt: skip
        members = [(p, role) for p, (*_, role) in zip(self.people, PEOPLE, strict=True) if p is not self.owner]
        for principal, role in [*members, *((w, "worker") for w in workers), (reviewer, "reviewer")]:
            revision = Group.objects.values_list("revision", flat=True).get(id=self.group)
            self.owner.send("membership.change", self.group, {"principal": principal.actor, "roles": [role]},
                            expected_revision=revision)  # fmt: skip

    def authorize(self, name: str, terms: dict[str, Any]) -> str:
        item = _id(self.group, name)
        self.coordinate("work.authorize", {"workItemId": urn(item), "contract": terms})
        return item

    def offer(self, item: str, worker: Principal) -> None:
        capability = WorkItem.objects.get(id=item).contract["requiredCapabilities"][0]
        self.coordinate("work.offer", {"workItemId": urn(item), "candidateAgentIds": [urn(worker.id)],
                                       "selectionBasis": basis(capability), "offerExpiresInSeconds": 8 * 3600},
                        expected_revision=self.revision(item), work_item_id=item)  # fmt: skip

    def queue(self, item: str, worker: Principal) -> None:
        self.offer(item, worker)
        worker.send("work.accept_offer", self.group, {"workItemId": urn(item)},
                    expected_revision=self.revision(item), work_item_id=item)  # fmt: skip

    def start(self, item: str, worker: Principal) -> None:
        self.queue(item, worker)
        epoch = WorkItem.objects.values_list("ownership_epoch", flat=True).get(id=item)
        worker.send("work.start", self.group, {"workItemId": urn(item), "ownershipEpoch": epoch,
                                               "executionLeaseSeconds": 900},
                    expected_revision=self.revision(item), work_item_id=item)  # fmt: skip


def seed_missions(report: DemoMission, web: DemoMission, workers: list[Principal], reviewer: Principal) -> None:
    """The demo Missions not created yet, with their WorkItems in varied states."""
    w1, w2 = workers
    if not Mission.objects.filter(id=report.mission).exists():
        report.create("Quarterly market report", "Publish the Q3 market report to customers, with every figure "
                      "traced to its source.", workers, reviewer)  # fmt: skip
        collect = report.authorize("collect", contract("Collect Q3 sales data", [
            ("complete", "every region is present", "deterministic_test"),
            ("sourced", "each figure cites its ledger row", "reviewer_assessment")]))  # fmt: skip
        report.queue(collect, w1)
        scan = report.authorize("scan", contract("Scan competitor pricing", [
            ("coverage", "the five main competitors are covered", "reviewer_assessment")], urgency="high"))  # fmt: skip
        report.start(scan, w2)
        clean = report.authorize("clean", contract("Clean and validate the dataset", [
            ("schema", "rows match the sales schema", "schema_validation")], deps=[collect]))  # fmt: skip
        draft = report.authorize("draft", contract("Draft the report", [
            ("structure", "follows the house template", "reviewer_assessment")], deps=[clean, scan]))  # fmt: skip
        report.offer(draft, w1)
        publish = report.authorize("publish", contract("Publish the report to customers", [
            ("sent", "the mailing went to the approved list", "deterministic_test")], risk="external",
            approval=True, capability=MAILING))  # fmt: skip
        report.queue(publish, w2)
    if not Mission.objects.filter(id=web.mission).exists():
        web.create("Website refresh", "Faster pages and clearer copy on the public site.", workers, reviewer)
        speed = web.authorize("speed", contract("Audit page speed", [
            ("measured", "every page has a Lighthouse score", "deterministic_test")]))  # fmt: skip
        web.queue(speed, w1)
        copy = web.authorize("copy", contract("Rewrite the landing copy", [
            ("tone", "matches the style guide", "reviewer_assessment")], risk="reversible", approval=True,
            human=False))  # fmt: skip
        web.queue(copy, w2)
        web.authorize("images", contract("Compress hero images", [
            ("size", "every image under 200 KB", "deterministic_test")]))  # fmt: skip


def seed(keys: Path | None = None) -> list[str]:
    """Create (once) the demo people, Agents and Missions; the login lines to print."""
    from missions.commands import create_organization

    directory = keys_dir(keys)
    create_organization(ORG, "Demo Organization")
    people, passwords = ensure_people(directory)
    owner = people["owner"]
    coordinator = Principal.with_key_file(directory / f"{COORDINATOR}.json", "Demo Coordinator", ["coordinator"])
    workers = [Principal.with_key_file(directory / f"{name}.json", name, ["worker"]) for name in WORKERS]
    # It executes review WorkItems under offers and leases (§13.2): a worker of the Organization.
    reviewer = Principal.with_key_file(directory / f"{REVIEWER}.json", "Demo Reviewer", ["worker"])
    publish_card(coordinator, [COORDINATION])
    for worker in workers:
        publish_card(worker, [ANALYSIS, MAILING])
    publish_card(reviewer, [REVIEW_CAPABILITY])
    everyone: list[Principal] = [people[username] for username, *_ in PEOPLE]
    report = DemoMission("report", owner, coordinator, everyone)
    web = DemoMission("web", owner, coordinator, everyone)
    if Mission.objects.filter(id__in=[report.mission, web.mission]).count() < 2:
        # A new Session Epoch revokes the Agent's leases (§11.3): only when there is something to seed.
        for agent in (coordinator, *workers, reviewer):
            agent.open_session()
    try:
        seed_missions(report, web, workers, reviewer)
    finally:
        for person in people.values():
            person.retire()  # the one-shot key of what the owner signed above, revoked
    return [
        f"login: owner / {passwords['owner']} (MissionOwner and admin of the demo Organization)",
        f"login: observer / {passwords['observer']} (observer of the demo Missions; the Coordinator is an Agent)",
    ]
