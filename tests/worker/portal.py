"""A real portal (daphne on the test database) and the Coordinator's side, for the runtime's end-to-end tests.

The Worker under test runs in the test's event loop (``mwworker.Worker``);
the Coordinator and the MissionOwner are the persona fixtures of
``tests/conftest.py`` signing Commands that go through ``accept()`` in this
process, against the same database daphne serves.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mwportal.protocol import format_time
from mwworker import Identity, Worker
from tests.conftest import AgentKey, group_revision
from tests.delivery.conftest import Daphne, database_url, in_db_thread
from tests.workitems.flow import BASIS, contract

__all__ = ["BASIS", "Portal", "contract", "in_db_thread"]


def portal_process(settings: Any, overrides: dict[str, str]) -> Daphne:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update({
        "MWP_DATABASE_URL": database_url(),
        "MWP_HEAD_POLL_SECONDS": "0.1",
        "MWP_ONLINE_REPLAY_EVENTS": str(settings.MWP_ONLINE_REPLAY_EVENTS),
        "MWP_SIGNING_KEY_FILE": str(settings.MWP_SIGNING_KEY_FILE),
        "MWP_ARTIFACT_ROOT": str(settings.MWP_ARTIFACT_ROOT),
        "DJANGO_SETTINGS_MODULE": "mwportal.settings",
        **overrides,
    })  # fmt: skip
    return Daphne(env)


class Portal:
    """The running portal plus the Coordinator's and owner's Commands."""

    def __init__(self, server: Daphne, org: dict[str, str], owner: AgentKey, coordinator: AgentKey):
        self.server = server
        self.org = org
        self.owner = owner
        self.coordinator = coordinator

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def worker(self, agent: AgentKey, store: Path, **kw: Any) -> Worker:
        identity = Identity(agent.id, self.org["id"], agent.private_key, agent.public_key)
        return Worker(portal=self.url, identity=identity, store=store, **kw)

    # --- Coordinator and owner (call through in_db_thread from the event loop) ---------

    def mission(self, members: list[AgentKey], title: str = "Survey") -> str:
        """A Mission Group owned by the owner, Carl coordinating, ``members`` as workers."""
        group, mission = str(uuid.uuid4()), str(uuid.uuid4())
        self.owner.send("mission.create", group, {"mission": mission, "title": title, "objective": "Map it"})
        for member, roles in [(self.coordinator, ["coordinator"])] + [(m, ["worker"]) for m in members]:
            self.owner.send(
                "membership.add", group, {"agent": member.id, "roles": roles},
                target={"kind": "group", "id": group, "revision": group_revision(group)},
            )  # fmt: skip
        return group

    def item(self, item: str) -> Any:
        from workitems.models import WorkItem

        return WorkItem.objects.get(id=item)

    def target(self, item: str) -> dict[str, Any]:
        return {"kind": "workitem", "id": item, "revision": self.item(item).revision}

    def authorize(self, group: str, **overrides: Any) -> str:
        item = str(uuid.uuid4())
        self.coordinator.send("work.authorize", group, {"workitem": item, "contract": contract(**overrides)})
        return item

    def offer(self, group: str, item: str, agents: list[AgentKey], seconds: int = 600) -> None:
        expires = format_time(datetime.now(UTC) + timedelta(seconds=seconds))
        self.coordinator.send(
            "work.offer", group, {"agents": [a.id for a in agents], "expires_at": expires, "selection_basis": BASIS},
            target=self.target(item),
        )  # fmt: skip

    def authorize_and_offer(self, group: str, agents: list[AgentKey], **overrides: Any) -> str:
        item = self.authorize(group, **overrides)
        self.offer(group, item, agents)
        return item

    def accept_result(self, group: str, item: str) -> None:
        row = self.item(item)
        criteria = [c["id"] for c in row.contract["acceptance_criteria"]]
        evidence = [{
            "subject": item, "criteria": criteria, "method": "reviewer", "result": "pass",
            "producer": self.coordinator.id, "timestamp": format_time(datetime.now(UTC)), "artifacts": [],
            "summary": "reviewed",
        }]  # fmt: skip
        self.coordinator.send("work.accept_result", group, {"evidence": evidence}, target=self.target(item))

    def unblock(self, group: str, item: str, resolution: str) -> None:
        self.coordinator.send("work.unblock", group, {"resolution": resolution}, target=self.target(item))


def state_of(worker: Worker, group: str, item: str) -> str | None:
    row = worker.store.row(group, item)
    return row.state if row else None


async def running(worker: Worker, body: Callable[[], Awaitable[None]], timeout: float = 40) -> None:
    """Run ``worker`` while ``body`` runs; stop it after (and surface its errors)."""
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(body(), timeout)
    except BaseException:
        print("worker log:", *worker.log, sep="\n  ")  # noqa: T201 (shown by pytest on failure)
        raise
    finally:
        worker.stop()
        try:
            await asyncio.wait_for(task, 15)
        finally:
            worker.close()
