"""Fixtures of the Worker suite: generated Event streams, stores, a server key.

Nothing here touches Django's database: the Worker is a separate,
Django-free package (DESIGN §5), and its tests need no server (STYLE §7);
except ``portal``, the real daphne of the runtime's end-to-end tests
(``tests/worker/portal.py``), which imports its Django side when used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mwportal.protocol import generate_keypair
from mwworker import Store
from tests.worker.streams import ME, Event, World, generate


@pytest.fixture(scope="session")
def small() -> tuple[World, list[Event]]:
    """1,500 Events over 5 Groups (one administrative): every Event type the model drives."""
    return generate(11, 1500, groups=5)


@pytest.fixture(scope="session")
def medium() -> tuple[World, list[Event]]:
    """4,000 Events over 10 Groups: every Event type, child Missions, terminal Missions."""
    return generate(15, 4000, groups=10)


@pytest.fixture(scope="session")
def server_key() -> tuple[str, str]:
    """The Group Authority's signing key pair (private, public)."""
    return generate_keypair()


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., Store]]:
    """``open_store(name="worker", **kw)``: a Store file under tmp_path, closed afterwards."""
    opened: list[Store] = []

    def factory(name: str = "worker", **kw: object) -> Store:
        kw.setdefault("agent", ME)
        store = Store(tmp_path / f"{name}.sqlite3", **kw)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def portal_env() -> dict[str, str]:
    """Settings of the daphne under test (a test overrides it for short leases)."""
    return {}


@pytest.fixture
def portal(
    transactional_db: None, settings: Any, portal_env: dict[str, str], org: dict[str, str], owner: Any,
    coordinator: Any, tmp_path: Path,
) -> Iterator[Any]:  # fmt: skip
    """A daphne on the test database and the Coordinator's side (``tests.worker.portal.Portal``)."""
    from tests.worker.portal import Portal, portal_process

    settings.MWP_ARTIFACT_ROOT = str(tmp_path / "artifacts")
    for name, value in portal_env.items():
        if name.endswith("_SECONDS") or name.endswith("_EVENTS"):
            setattr(settings, name, int(value))
    server = portal_process(settings, portal_env)
    server.start()
    yield Portal(server, org, owner, coordinator)
    server.kill()
