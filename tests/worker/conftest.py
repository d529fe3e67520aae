"""Fixtures of the Worker suite: generated signed Event streams, stores that verify them.

Nothing here touches Django's database: the Worker is a separate,
Django-free package (DESIGN §6), and its tests need no server (STYLE §7);
except ``portal``, the real daphne of the runtime's end-to-end tests
(``tests/worker/portal.py``), which imports its Django side when used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mwworker import EventVerifier, Store
from tests.worker.streams import ME, Event, World, generate, verifier

# The seeds whose Group Authority keys the test stores know: the fixtures'
# Worlds and the scripted Chains (seed 0 unless a test says otherwise).
KNOWN_SEEDS = (0, 1, 2, 3, 11, 15, 21)


@pytest.fixture(scope="session")
def small() -> tuple[World, list[Event]]:
    """1,500 signed Events over 5 Groups (one administrative)."""
    return generate(11, 1500, groups=5)


@pytest.fixture(scope="session")
def medium() -> tuple[World, list[Event]]:
    """4,000 signed Events over 10 Groups: every kind the model drives."""
    return generate(15, 4000, groups=10)


@pytest.fixture
def known_keys() -> EventVerifier:
    """A verifier holding the Group Authority keys of the test Worlds (one Organization)."""
    return verifier(*KNOWN_SEEDS)


@pytest.fixture
def open_store(tmp_path: Path, known_keys: EventVerifier) -> Iterator[Callable[..., Store]]:
    """``open_store(name="worker", **kw)``: a verifying Store file under tmp_path, closed afterwards."""
    opened: list[Store] = []

    def factory(name: str = "worker", **kw: Any) -> Store:
        kw.setdefault("agent", ME)
        kw.setdefault("verifier", known_keys)
        store = Store(tmp_path / f"{name}.sqlite3", **kw)
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
    transactional_db: None, settings: Any, portal_env: dict[str, str], org: Any, tmp_path: Path,
    django_db_blocker: Any,
) -> Iterator[Any]:  # fmt: skip
    """A daphne on the test database (``tests.worker.portal.Portal``)."""
    from tests.worker.portal import Portal, portal_process

    settings.MWP_ARTIFACT_ROOT = str(tmp_path / "artifacts")
    for name, value in portal_env.items():
        if name.endswith("_SECONDS") or name.endswith("_EVENTS"):
            setattr(settings, name, int(value))
    server = portal_process(settings, portal_env)
    server.start()
    yield Portal(server, org)
    server.kill()
    with django_db_blocker.unblock():
        _lift_append_only_rows()


def _lift_append_only_rows() -> None:
    """Empty the append-only tables before ``transactional_db`` flushes SQLite:
    ``tests/conftest.py``'s autouse ``purge_events_after`` is torn down after the
    flush (autouse fixtures are set up first), too late for it."""
    from django.db import connection

    if connection.vendor != "sqlite":
        return
    from tests.conftest import empty_append_only_tables

    empty_append_only_tables()
