"""A real portal (daphne on the test database) and the Coordinator's side, for the runtime's end-to-end tests.

The Worker under test runs in the test's event loop (``mwworker.Worker``) and
talks to daphne over ``/mwp/0.1`` and ``/api/v0.1/``; the Coordinator and the
MissionOwner are the persona fixtures of ``tests/conftest.py`` signing MWP 0.1
Commands (``tests.workitems.flow.Flow``) that go through ``accept_document()``
in this process, against the same database daphne serves.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mwportal.protocol.ids import urn
from mwworker import Identity, Worker
from tests.conftest import AgentKey
from tests.delivery.conftest import Daphne, database_url, in_db_thread
from tests.workitems.flow import Flow, contract

__all__ = ["Flow", "Portal", "contract", "in_db_thread"]


def portal_process(settings: Any, overrides: dict[str, str]) -> Daphne:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update({
        "MWP_DATABASE_URL": database_url(),
        "MWP_HEAD_POLL_SECONDS": "0.1",
        "MWP_ONLINE_REPLAY_EVENTS": str(settings.MWP_ONLINE_REPLAY_EVENTS),
        "MWP_SERVICE_KEY_DIR": str(settings.MWP_SERVICE_KEY_DIR),
        "MWP_ARTIFACT_ROOT": str(settings.MWP_ARTIFACT_ROOT),
        "DJANGO_SETTINGS_MODULE": "mwportal.settings",
        **overrides,
    })  # fmt: skip
    return Daphne(env)


class Portal:
    """The running portal."""

    def __init__(self, server: Daphne, org: dict[str, str]):
        self.server = server
        self.org = org

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def worker(self, agent: AgentKey, store: Path, **kw: Any) -> Worker:
        """The Worker runtime with ``agent``'s DESIGN §4 identity."""
        identity = Identity(agent.urn, urn(self.org["id"]), agent.key)
        return Worker(portal=self.url, identity=identity, store=store, **kw)


def state_of(worker: Worker, group: str, item: str) -> str | None:
    row = worker.store.row(urn(group), urn(item))
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
