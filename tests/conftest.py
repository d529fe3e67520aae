"""Personas and helpers shared by every suite (STYLE §5).

- ``org``: the Organization "acme" with its administrative Group;
- ``owner`` (Olivia): a person, MissionOwner of ``mission``'s Group;
- ``coordinator`` (Carl): coordinator member;
- ``worker`` and ``worker2`` (Wanda, Walt): worker members;
- ``outsider`` (Oscar): an Agent of the Organization with no Membership.

Every persona is an ``AgentKey`` holding its own Ed25519 key, bound in the
Registry, and (for Agents) a current Session Epoch. It signs normative
Command documents (PROTOCOL §15.1) and sends their bytes through
``accept_document``, the six verification stages included, as a client would;
every fixture is built that way.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import connection

from missions.authority import accept_document
from missions.commands import create_organization, membership_epoch, open_session, register_principal
from missions.models import ActionReceipt, Agent, Group, GroupEvent
from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.command import Key, build_command
from mwportal.protocol.ids import urn

ON_POSTGRES = os.environ.get("MWP_DATABASE_URL", "").startswith(("postgres", "postgresql"))

# Kinds that create their Group, or stand outside every Group: no Membership Epoch (§15.1).
_NO_MEMBERSHIP = frozenset({"mission.create", "mission.create_follow_up"})


@dataclass
class AgentKey:
    """A test Principal: its id (bare UUID), signing key and current Session Epoch."""

    id: str
    key: Key
    org_slug: str
    kind: str = "agent"  # the Agent row's kind: "agent" or "person"
    session_epoch: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def urn(self) -> str:
        return urn(self.id)

    @property
    def actor_type(self) -> str:
        return Agent.ACTOR_TYPES[self.kind]

    @property
    def actor(self) -> dict[str, str]:
        return {"type": self.actor_type, "id": self.urn}

    @property
    def public_key(self) -> str:
        return self.key.public_key

    def command(self, kind: str, group: str | None, payload: dict[str, Any], **kw: Any) -> dict[str, Any]:
        """A signed Command document as this Principal's client would send it.

        An Agent carries its current Session Epoch; both Agents and people carry
        their current Membership Epoch in ``group`` unless given (pass
        ``membership_epoch=None`` explicitly to leave it out)."""
        if self.kind == "agent":
            kw.setdefault("session_epoch", self.session_epoch)
        if "membership_epoch" not in kw and group is not None and kind not in _NO_MEMBERSHIP:
            kw["membership_epoch"] = membership_epoch(self.id, group)
        return build_command(kind, actor=(self.actor_type, self.id), key=self.key, payload=payload, group=group, **kw)

    def send_document(self, document: dict[str, Any]) -> dict[str, Any]:
        return accept_document(json.dumps(document).encode())

    def send(self, kind: str, group: str | None, payload: dict[str, Any], **kw: Any) -> dict[str, Any]:
        """Sign and accept a Command through the six stages; its receipt (or ProtocolError)."""
        return self.send_document(self.command(kind, group, payload, **kw))

    def open_session(self) -> str:
        """Open a new Session as the bindings do after HELLO; the token."""
        token, self.session_epoch = open_session(self.id)
        return token


def make_principal(
    org_slug: str, name: str, roles: list[str], *, kind: str = "agent", open_session: bool = True
) -> AgentKey:
    key = Key.generate()
    principal_id, key_id = register_principal(org_slug, name, kind, roles, key.public_key)
    assert key_id is not None
    key = Key(key_id, key.seed, (Agent.ACTOR_TYPES[kind], principal_id), None)
    principal = AgentKey(principal_id, key, org_slug, kind)
    if open_session and kind == "agent":
        principal.extra["token"] = principal.open_session()
    return principal


def make_agent(org_slug: str, name: str, roles: list[str], *, open_session: bool = True) -> AgentKey:
    return make_principal(org_slug, name, roles, open_session=open_session)


def make_person(org_slug: str, name: str, roles: list[str]) -> AgentKey:
    """A person with a software key (DESIGN §4: ``create-human`` enrols one for scripts and tests)."""
    return make_principal(org_slug, name, roles, kind="person")


@contextmanager
def nothing_written() -> Iterator[None]:
    before = (
        GroupEvent.objects.count(),
        ActionReceipt.objects.count(),
        list(Group.objects.order_by("id").values_list("id", "last_sequence", "revision")),
    )
    yield
    after = (
        GroupEvent.objects.count(),
        ActionReceipt.objects.count(),
        list(Group.objects.order_by("id").values_list("id", "last_sequence", "revision")),
    )
    assert after == before


@dataclass(frozen=True)
class Because:
    """A core code with the ``details.reason`` it must carry: the finer
    meaning of a private code of DESIGN v1 (errors.py)."""

    code: ErrorCode
    reason: str


def refused(code: ErrorCode | Because, fn: Any, *args: Any, **kwargs: Any) -> ProtocolError:
    """Run ``fn``; it must raise ``ProtocolError(code)`` (with its reason) and write nothing."""
    with nothing_written(), pytest.raises(ProtocolError) as info:
        fn(*args, **kwargs)
    if isinstance(code, Because):
        assert (info.value.code, info.value.details.get("reason")) == (code.code, code.reason), info.value.message
    else:
        assert info.value.code == code, info.value.message
    return info.value


def group_revision(group_id: str) -> int:
    return Group.objects.values_list("revision", flat=True).get(id=group_id)


@pytest.fixture
def org(db: None) -> dict[str, str]:
    org_id, admin_group = create_organization("acme", "Acme")
    return {"id": org_id, "slug": "acme", "admin_group": admin_group}


@pytest.fixture
def owner(org: dict[str, str]) -> AgentKey:
    return make_person("acme", "Olivia Owner", ["mission_owner"])


@pytest.fixture
def coordinator(org: dict[str, str]) -> AgentKey:
    return make_agent("acme", "Carl Coordinator", ["coordinator"])


@pytest.fixture
def worker(org: dict[str, str]) -> AgentKey:
    return make_agent("acme", "Wanda Worker", ["worker"])


@pytest.fixture
def worker2(org: dict[str, str]) -> AgentKey:
    return make_agent("acme", "Walt Worker", ["worker"])


@pytest.fixture
def outsider(org: dict[str, str]) -> AgentKey:
    return make_agent("acme", "Oscar Outsider", ["worker"])


@pytest.fixture
def mission(owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey) -> dict[str, str]:
    """A Mission Group owned by Olivia with Carl coordinating and Wanda and Walt working.

    ``mission.create`` names the Coordinator, whose lease pins his Agent Card
    (§6.1, §7.2), and declares §7.1's terms; the Workers join by ``membership.change``."""
    from datetime import UTC, datetime, timedelta

    from missions.handlers.sessions import capability, issue_agent_card
    from mwportal.protocol.command import format_timestamp

    issue_agent_card(coordinator.id, [capability("mission.coordinate", "1.0.0", verified_evidence=[urn(uuid.uuid4())])])
    group_id, mission_id = str(uuid.uuid4()), str(uuid.uuid4())
    criterion = {
        "criterionId": "mapped",
        "description": "Every district is mapped.",
        "evidenceRequired": ["human_review"],
    }
    owner.send(
        "mission.create",
        group_id,
        {
            "missionId": urn(mission_id), "groupId": urn(group_id), "coordinatorId": coordinator.urn,
            "title": "Survey", "objective": "Map it", "definitionOfDone": [criterion],
            "deadline": format_timestamp(datetime.now(UTC) + timedelta(days=30)),
            "budget": {"currency": "EUR", "financialLimit": 100, "modelTokenLimit": 1_000_000},
        },
    )  # fmt: skip
    for member in (worker, worker2):
        add_member(owner, group_id, member, ["worker"])
    return {"group": group_id, "mission": mission_id}


# The verified capabilities the Organization's Registry gives a test Worker before it joins a Group to execute
# (§6.1: accepting work needs them on its Organization-signed Agent Card): the flows' summaries and the review
# pipeline's review WorkItems.
WORKER_CAPABILITIES = (("text.summarize", "1.2.0"), ("mwportal.review", "1.0.0"))


def give_worker_card(agent: AgentKey) -> AgentKey:
    """The Registry's Agent Card for a test Worker with ``WORKER_CAPABILITIES``, each with verification Evidence,
    unless the Agent already has a card."""
    from missions.handlers.sessions import capability, issue_agent_card
    from missions.models import AgentCard

    if not AgentCard.objects.filter(agent_id=agent.id).exists():
        evidence = [urn(uuid.uuid4())]
        issue_agent_card(agent.id, [capability(i, v, verified_evidence=evidence) for i, v in WORKER_CAPABILITIES])
    return agent


def add_member(by: AgentKey, group_id: str, member: AgentKey, roles: list[str]) -> dict[str, Any]:
    """``membership.change`` granting ``roles`` (compare-and-set on the Group revision, §15.3). An Agent that
    joins to execute (worker, reviewer) first gets its Worker card (``give_worker_card``) if it has none."""
    if member.actor["type"] == "agent" and {"worker", "reviewer"} & set(roles):
        give_worker_card(member)
    return by.send(
        "membership.change",
        group_id,
        {"principal": member.actor, "roles": roles},
        expected_revision=group_revision(group_id),
    )


@pytest.fixture
def agent_model() -> type[Agent]:
    return Agent


@pytest.fixture(autouse=True)
def purge_events_after(request: pytest.FixtureRequest, django_db_blocker: Any) -> Iterator[None]:
    """For transactional tests on SQLite: empty the append-only tables (Events,
    signing keys, validity records, admission records) before the flush, with
    their triggers lifted for that moment only (SQLite's flush deletes rows,
    which the triggers refuse; PostgreSQL's TRUNCATE fires no row trigger)."""
    marker = request.node.get_closest_marker("django_db")
    transactional = "transactional_db" in request.fixturenames or bool(marker and marker.kwargs.get("transaction"))
    yield
    if not transactional or connection.vendor != "sqlite":
        return
    # This teardown runs after transactional_db's (autouse fixtures are set up
    # first), when database access is blocked again.
    with django_db_blocker.unblock():
        empty_append_only_tables()


def empty_append_only_tables() -> None:
    """Empty the append-only tables (Events, Organization Events, signing keys,
    validity records, admission records, the Policy Log) with their SQLite triggers lifted for
    that moment only."""
    from missions import immutability, keyregistry, policylog

    with connection.cursor() as cur:
        for sql in (
            immutability.drop_sql("sqlite")
            + immutability.organization_drop_sql("sqlite")
            + keyregistry.drop_sql("sqlite")
            + policylog.drop_sql("sqlite")
        ):
            cur.execute(sql)
        cur.execute(f"DELETE FROM {immutability.TABLE}")
        cur.execute(f"DELETE FROM {immutability.ORGANIZATION_TABLE}")
        # The Registry's append-only tables too (PROTOCOL §6.4): validity
        # records before the keys they refer to.
        for table in sorted(keyregistry.APPEND_ONLY_TABLES, key=lambda t: t != "missions_signingkeyvalidity"):
            cur.execute(f"DELETE FROM {table}")
        cur.execute(f"DELETE FROM {policylog.TABLE}")  # the Policy Log (PROTOCOL §20)
        for sql in (
            immutability.install_sql("sqlite")
            + immutability.organization_install_sql("sqlite")
            + keyregistry.install_sql("sqlite")
            + policylog.install_sql("sqlite")
        ):
            cur.execute(sql)


_VOLATILE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|nonce|sentAt|issuedAt", re.I)


def pytest_make_parametrize_id(config: pytest.Config, val: object, argname: str) -> str | None:
    """Test IDs that are the same in every process: a parameter holding a fresh
    UUID, nonce or clock reading is named by its argument (pytest numbers
    duplicates), so that pytest-xdist's workers collect the same tests."""
    if isinstance(val, str) and (_VOLATILE.search(val) or len(val) > 80):
        return argname
    return None
