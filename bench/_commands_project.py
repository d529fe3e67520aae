"""The project side of ``bench/commands.py``: personas, fixtures and pre-signed pools.

Every fixture is built the way a client builds it: normative signed Command
documents (PROTOCOL §15.1, ``mwportal.protocol.command.build_command``) sent
as bytes through ``missions.authority.accept_document``, the six
verification stages included. A person (Olivia, with a software key) creates
the Missions (``mission.create`` is a human Command) and changes Memberships;
Agents hold sessions from ``missions.commands.open_session``.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bench._commands_common import CONCURRENCY, N_GROUPS, USAGE, Runner, roles_for

CAPABILITY = {"id": "text.summarize", "version": "1.0.0"}
COORDINATE = ("mission.coordinate", "1.0.0")
# A new Mission's Coordinator lease is its Coordinator Epoch 1 (§7.2); the
# Coordinator's Commands carry it.
COORDINATOR_EPOCH = 1
# A budget no benchmark run exhausts (every hot Command charges one tool call).
BIG_BUDGET = {
    "currency": "EUR", "financialLimit": 10**6, "modelTokenLimit": 10**12, "toolCallLimit": 10**12,
    "computeSecondsLimit": 10**9, "wallClockSecondsLimit": 10**9, "externalSideEffectLimit": 10**6,
}  # fmt: skip
BASIS = {
    "requiredCapabilities": [CAPABILITY],
    "verifiedMatches": [CAPABILITY],
    "authorizationEligible": True,
    "availabilityEstimate": "2026-01-05T09:00:00Z",
    "expectedCost": 3,
    "reliabilityEvidence": [],
    "policyRulesApplied": ["default"],
}


def stamp(moment: datetime | None = None) -> str:
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def work_contract(budget: dict[str, Any] | None = None) -> dict[str, Any]:
    """A complete Work Contract (PROTOCOL §10.1, ``work-contract.schema.json``), the
    shape of ``tests/workitems/flow.py``'s (not imported: the benchmark does not
    import the test suite)."""
    return {
        "contractVersion": 1,
        "goal": "Summarise the survey responses",
        "requiredDeliverables": [
            {
                "deliverableId": "summary",
                "description": "A summary of every response",
                "mediaType": "text/markdown",
                "schema": "https://schemas.example.org/summary",
            }
        ],
        "acceptanceCriteria": [
            {"criterionId": "complete", "description": "covers all", "evidenceRequired": ["deterministic_test"]},
            {"criterionId": "accurate", "description": "no invented facts", "evidenceRequired": ["business_rule"]},
        ],
        "inputArtifacts": [],
        "dependencyWorkItemIds": [],
        "allowedResources": [{"resource": "urn:example:survey-2026", "operations": ["read"]}],
        "requiredCapabilities": [CAPABILITY],
        "deadline": stamp(datetime.now(UTC) + timedelta(days=30)),
        "requestedUrgency": "normal",
        "businessImpact": "Board meeting preparation",
        "retryPolicy": {"maxAttempts": 3, "backoff": "none", "maxDelay": "PT0S", "retryableFailures": []},
        "budget": budget or BIG_BUDGET,
        "sideEffectRisk": "none",
        "executionApproval": "not_required",
    }


@dataclass
class Persona:
    """A Principal of the bench Organization: its id (bare UUID), key and Session Epoch."""

    id: str
    key: Any  # mwportal.protocol.command.Key
    kind: str  # the Agent row's kind: "agent" or "person"
    session_epoch: int = 0
    epochs: dict[str, int] = field(default_factory=dict)  # Group -> Membership Epoch

    @property
    def actor_type(self) -> str:
        return "agent" if self.kind == "agent" else "human"

    @property
    def urn(self) -> str:
        return f"urn:uuid:{self.id}"

    @property
    def actor(self) -> dict[str, str]:
        return {"type": self.actor_type, "id": self.urn}

    def document(self, kind: str, group: str | None, payload: dict[str, Any], **kw: Any) -> bytes:
        """The bytes of a signed Command document, as this Principal's client sends them.

        An Agent carries its Session Epoch; both carry their Membership Epoch in
        ``group`` when one is known (``epochs``) unless given."""
        from mwportal.protocol.command import build_command

        if self.kind == "agent":
            kw.setdefault("session_epoch", self.session_epoch)
        if group is not None and group in self.epochs:
            kw.setdefault("membership_epoch", self.epochs[group])
        doc = build_command(kind, actor=(self.actor_type, self.id), key=self.key, payload=payload, group=group, **kw)
        return json.dumps(doc, separators=(",", ":")).encode()

    def send(self, kind: str, group: str | None, payload: dict[str, Any], **kw: Any) -> dict[str, Any]:
        from missions.authority import accept_document

        receipt: dict[str, Any] = accept_document(self.document(kind, group, payload, **kw))
        return receipt


def make_principal(org_slug: str, name: str, roles: list[str], kind: str = "agent") -> Persona:
    """Register a Principal with a fresh key bound in the Registry; an Agent opens a session."""
    from missions.commands import open_session, register_principal
    from mwportal.protocol.command import Key

    key = Key.generate()
    principal_id, key_id = register_principal(org_slug, name, kind, roles, key.public_key)
    assert key_id is not None
    persona = Persona(principal_id, Key(key_id, key.seed), kind)
    if kind == "agent":
        _, persona.session_epoch = open_session(principal_id)
    return persona


def with_card(agent: Persona, capability: tuple[str, str]) -> Persona:
    """The Agent's card (the Registry service's act, §6.1) listing ``capability``."""
    from missions.handlers.sessions import capability as card_capability
    from missions.handlers.sessions import issue_agent_card
    from mwportal.protocol.ids import new_urn

    issue_agent_card(agent.id, [card_capability(*capability, verified_evidence=[new_urn()])])
    return agent


def mission_epochs(group: str, personas: list[Persona]) -> None:
    """Record each persona's current Membership Epoch in ``group``."""
    from missions.models import Membership

    rows = Membership.objects.filter(group_id=group, agent_id__in=[p.id for p in personas], active=True)
    epochs = {str(a): e for a, e in rows.values_list("agent_id", "epoch")}
    for p in personas:
        if p.id in epochs:
            p.epochs[group] = epochs[p.id]


def new_mission(owner: Persona, coordinator: Persona, members: list[tuple[Persona, list[str]]], title: str) -> str:
    """``mission.create`` by the person ``owner`` with ``coordinator``'s lease, then one
    ``membership.change`` per member (compare-and-set on the Group revision, §15.3)."""
    group, mission = str(uuid.uuid4()), str(uuid.uuid4())
    receipt = owner.send(
        "mission.create",
        group,
        {
            "missionId": f"urn:uuid:{mission}",
            "groupId": f"urn:uuid:{group}",
            "coordinatorId": coordinator.urn,
            "title": title,
            "objective": "Measure the acceptance path.",
            "definitionOfDone": [
                {"criterionId": "measured", "description": "The numbers are in.", "evidenceRequired": ["human_review"]}
            ],
            "deadline": stamp(datetime.now(UTC) + timedelta(days=30)),
            "budget": BIG_BUDGET,
        },
    )
    mission_epochs(group, [owner])
    revision = int(receipt["aggregateRevision"])
    for member, roles in members:
        receipt = owner.send(
            "membership.change", group, {"principal": member.actor, "roles": roles}, expected_revision=revision
        )
        revision = int(receipt["aggregateRevision"])
    mission_epochs(group, [coordinator, *(m for m, _ in members)])
    return group


@dataclass
class Leased:
    """A WorkItem an Agent executes under an Execution Lease (bare UUIDs)."""

    agent: Persona
    item: str
    ownership_epoch: int
    lease: str


def drive_to_active(group: str, coordinator: Persona, agent: Persona, contract: dict[str, Any]) -> Leased:
    """``work.authorize``, ``work.offer``, ``work.accept_offer``, ``work.start``: a WorkItem
    ``agent`` executes (§10, §11.3), each compare-and-set on the WorkItem's revision."""
    from workitems.models import WorkItem

    item = str(uuid.uuid4())
    wid = f"urn:uuid:{item}"
    receipt = coordinator.send(
        "work.authorize",
        group,
        {"workItemId": wid, "contract": contract},
        work_item_id=item,
        coordinator_epoch=COORDINATOR_EPOCH,  # §7.2: the Coordinator lease's epoch
    )
    offer = {
        "workItemId": wid,
        "candidateAgentIds": [agent.urn],
        "offerExpiresInSeconds": 3600,
        "selectionBasis": BASIS,
    }
    receipt = coordinator.send(
        "work.offer",
        group,
        offer,
        work_item_id=item,
        expected_revision=int(receipt["aggregateRevision"]),
        coordinator_epoch=COORDINATOR_EPOCH,
    )
    receipt = agent.send(
        "work.accept_offer",
        group,
        {"workItemId": wid},
        work_item_id=item,
        expected_revision=int(receipt["aggregateRevision"]),
    )
    epoch = int(WorkItem.objects.values_list("ownership_epoch", flat=True).get(id=item))
    receipt = agent.send(
        "work.start",
        group,
        {"workItemId": wid, "ownershipEpoch": epoch},
        work_item_id=item,
        expected_revision=int(receipt["aggregateRevision"]),
    )
    lease = str(receipt["grants"]["executionLeaseId"]).removeprefix("urn:uuid:")
    return Leased(agent, item, epoch, lease)


def usage_payload(leased: Leased) -> dict[str, Any]:
    """One tool call charged to the WorkItem under its current lease and Ownership Epoch (§12)."""
    return {
        "workItemId": f"urn:uuid:{leased.item}",
        "ownershipEpoch": leased.ownership_epoch,
        "executionLeaseId": f"urn:uuid:{leased.lease}",
        "usageDelta": {"toolCalls": 1},
    }


@dataclass
class Fixtures:
    admin_group: str
    owner: Persona  # Olivia, a person
    coordinator: Persona  # Carl, every Mission's Coordinator
    member: Persona  # Wanda, whose roles "mix" alternates
    groups: list[str]  # the mix workload's Mission Groups
    hot_group: str
    hot: list[Leased]  # one per thread, all in hot_group
    base: dict[str, int] = field(default_factory=dict)  # Group -> the revision at which Wanda is ["worker"]


def build_fixtures(backend: str, n_groups: int = N_GROUPS) -> Fixtures:
    from django.db import connection

    from missions.commands import create_organization
    from missions.models import Group

    _, admin_group = create_organization("bench", "Bench Org")
    owner = make_principal("bench", "Olivia Owner", ["mission_owner"], kind="person")
    coordinator = with_card(make_principal("bench", "Carl Coordinator", ["coordinator"]), COORDINATE)
    member = make_principal("bench", "Wanda Worker", ["worker"])
    hot_agents = [
        with_card(make_principal("bench", f"Hot Agent {i}", ["worker"]), (CAPABILITY["id"], CAPABILITY["version"]))
        for i in range(max(CONCURRENCY))
    ]
    hot_group = new_mission(owner, coordinator, [(a, ["worker"]) for a in hot_agents], "Hot Group")
    contract = work_contract()
    hot = [drive_to_active(hot_group, coordinator, a, contract) for a in hot_agents]
    for leased in hot:  # one usage report each: a Command the pools repeat, checked once here
        leased.agent.send(USAGE, hot_group, usage_payload(leased), work_item_id=leased.item)

    groups: list[str] = []
    lock = threading.Lock()

    def create(count: int) -> None:
        try:
            for _ in range(count):
                gid = new_mission(owner, coordinator, [(member, ["worker"])], "Bench mission")
                with lock:
                    groups.append(gid)
        finally:
            connection.close()

    # PostgreSQL commits in parallel; SQLite serialises writers anyway.
    n_threads = 4 if backend == "postgres" else 1
    if n_threads == 1:
        create(n_groups)
    else:
        shares = [n_groups // n_threads + (1 if i < n_groups % n_threads else 0) for i in range(n_threads)]
        threads = [threading.Thread(target=create, args=(s,)) for s in shares]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    made = Group.objects.filter(id__in=groups).count()
    if made != n_groups:
        raise RuntimeError(f"fixture setup created {made} of {n_groups} Groups")
    groups.sort()
    mission_epochs_bulk(groups, [owner, member])
    base = {str(k): v for k, v in Group.objects.filter(id__in=groups).values_list("id", "revision")}
    return Fixtures(admin_group, owner, coordinator, member, groups, hot_group, hot, base)


def mission_epochs_bulk(groups: list[str], personas: list[Persona]) -> None:
    from missions.models import Membership

    by_id = {p.id: p for p in personas}
    rows = Membership.objects.filter(group_id__in=groups, agent_id__in=list(by_id), active=True)
    for agent, group, epoch in rows.values_list("agent_id", "group_id", "epoch"):
        by_id[str(agent)].epochs[str(group)] = epoch


# --------------------------------------------------------------------------
# Pools: what each thread sends, built and signed before the clock starts
# --------------------------------------------------------------------------


def project_pools(fx: Fixtures, workload: str, threads: int, per_thread: int) -> list[list[bytes]]:
    """Per thread, ``per_thread`` signed Command documents' bytes.

    mix: ``membership.change`` of Wanda's roles in the thread's own Groups,
    each at the Group revision it will find (compare-and-set, §15.3); hot:
    the thread's Agent's usage report against its own WorkItem in the one hot
    Group (not compare-and-set: no revision to predict)."""
    from missions.models import Group

    pools: list[list[bytes]] = []
    if workload == "mix":
        revs = {str(k): v for k, v in Group.objects.filter(id__in=fx.groups).values_list("id", "revision")}
        for t in range(threads):
            mine = fx.groups[t::threads]
            pool = []
            for i in range(per_thread):
                gid = mine[i % len(mine)]
                rev = revs[gid]
                revs[gid] = rev + 1
                pool.append(
                    fx.owner.document(
                        "membership.change",
                        gid,
                        {"principal": fx.member.actor, "roles": roles_for(rev, fx.base[gid])},
                        expected_revision=rev,
                    )
                )
            pools.append(pool)
        return pools
    for t in range(threads):
        leased = fx.hot[t]
        payload = usage_payload(leased)
        pools.append(
            [leased.agent.document(USAGE, fx.hot_group, payload, work_item_id=leased.item) for _ in range(per_thread)]
        )
    return pools


def project_runner() -> Runner:
    """Each thread its own database connection; ``send`` is ``accept_document(bytes)``:
    the six verification stages and the acceptance transaction (the server's cost)."""
    from django.db import connection

    from missions.authority import accept_document

    def open_conn() -> Any:
        connection.ensure_connection()
        return connection

    def send(_conn: Any, data: bytes) -> None:
        accept_document(data)

    def close_conn(conn: Any) -> None:
        conn.close()

    return open_conn, send, close_conn


def check_project_chain(fx: Fixtures) -> None:
    """Sanity: the hot Group's sequences are gap-free after all that concurrency."""
    from missions.models import Group, GroupEvent

    head = Group.objects.values_list("last_sequence", flat=True).get(id=fx.hot_group)
    count = GroupEvent.objects.filter(group_id=fx.hot_group).count()
    if head != count:
        raise RuntimeError(f"hot Group head {head} but {count} Events")
