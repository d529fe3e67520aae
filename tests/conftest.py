"""Personas and helpers shared by every suite (STYLE §5).

- ``org``: the Organization "acme" with its administrative Group;
- ``owner`` (Olivia): MissionOwner, owner of ``mission``'s Group;
- ``coordinator`` (Carl): coordinator member;
- ``worker`` and ``worker2`` (Wanda, Walt): worker members;
- ``outsider`` (Oscar): an Agent of the Organization with no Membership.

Every persona is an ``AgentKey`` that signs envelopes with its own key and
holds a current session epoch, and every fixture is built through
``accept()`` as a client would.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import connection

from missions.authority import Auth, Command, accept
from missions.commands import create_organization, register_agent
from missions.models import ActionReceipt, Agent, Group, GroupEvent
from mwportal.protocol import ErrorCode, ProtocolError, generate_keypair, make_envelope, parse_envelope

ON_POSTGRES = os.environ.get("MWP_DATABASE_URL", "").startswith(("postgres", "postgresql"))


@dataclass
class AgentKey:
    """A test Agent: its id, key pair and current session epoch."""

    id: str
    private_key: str
    public_key: str
    org_slug: str
    session_epoch: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def envelope(self, type_: str, group: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        """A signed envelope as this Agent's transport would send it."""
        kw.setdefault("session_epoch", self.session_epoch)
        return make_envelope(type=type_, actor=self.id, group=group, body=body, private_key=self.private_key, **kw)

    def send(self, type_: str, group: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        """Sign and ``accept()`` a Command; its receipt (or ProtocolError)."""
        return accept(Command(parse_envelope(self.envelope(type_, group, body, **kw)), Auth.SIGNED))

    def open_session(self) -> str:
        """Open a session through the same handler the REST view uses; the token."""
        from datetime import UTC, datetime

        from mwportal.protocol import format_time, signed

        request = signed(
            self.private_key, {"agent": self.id, "issued_at": format_time(datetime.now(UTC)), "nonce": uuid.uuid4().hex}
        )
        admin = Group.objects.get(organization__slug=self.org_slug, kind=Group.KIND_ADMIN)
        raw = make_envelope(
            type="agent.open_session",
            actor=self.id,
            group=str(admin.id),
            body={"request": request},
            session_epoch=self.session_epoch,
        )
        receipt = accept(Command(parse_envelope(raw, require_signature=False), Auth.SELF))
        self.session_epoch = receipt["grants"]["session_epoch"]
        return str(receipt["grants"]["token"])


def make_agent(org_slug: str, name: str, roles: list[str], *, open_session: bool = True) -> AgentKey:
    private_key, public_key = generate_keypair()
    agent_id = register_agent(org_slug, name, "agent", roles, public_key)
    key = AgentKey(agent_id, private_key, public_key, org_slug)
    if open_session:
        key.extra["token"] = key.open_session()
    return key


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
    return make_agent("acme", "Olivia Owner", ["mission_owner"])


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
    """A Mission Group owned by Olivia with Carl coordinating and Wanda and Walt working."""
    group_id, mission_id = str(uuid.uuid4()), str(uuid.uuid4())
    owner.send("mission.create", group_id, {"mission": mission_id, "title": "Survey", "objective": "Map it"})
    for member, roles in ((coordinator, ["coordinator"]), (worker, ["worker"]), (worker2, ["worker"])):
        owner.send(
            "membership.add",
            group_id,
            {"agent": member.id, "roles": roles},
            target={"kind": "group", "id": group_id, "revision": group_revision(group_id)},
        )
    return {"group": group_id, "mission": mission_id}


@pytest.fixture
def agent_model() -> type[Agent]:
    return Agent


@pytest.fixture(autouse=True)
def purge_events_after(request: pytest.FixtureRequest) -> Iterator[None]:
    """For transactional tests on SQLite: empty the append-only tables (Events,
    signing keys, validity records, admission records) before the flush, with
    their triggers lifted for that moment only (SQLite's flush deletes rows,
    which the triggers refuse; PostgreSQL's TRUNCATE fires no row trigger)."""
    marker = request.node.get_closest_marker("django_db")
    transactional = "transactional_db" in request.fixturenames or bool(marker and marker.kwargs.get("transaction"))
    yield
    if not transactional or connection.vendor != "sqlite":
        return
    from missions import immutability, keyregistry

    with connection.cursor() as cur:
        for sql in immutability.drop_sql("sqlite") + keyregistry.drop_sql("sqlite"):
            cur.execute(sql)
        cur.execute(f"DELETE FROM {immutability.TABLE}")
        # The Registry's append-only tables too (PROTOCOL §6.4): validity
        # records before the keys they refer to.
        for table in sorted(keyregistry.APPEND_ONLY_TABLES, key=lambda t: t != "missions_signingkeyvalidity"):
            cur.execute(f"DELETE FROM {table}")
        for sql in immutability.install_sql("sqlite") + keyregistry.install_sql("sqlite"):
            cur.execute(sql)
