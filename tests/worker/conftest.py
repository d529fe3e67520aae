"""Fixtures of the Worker suite: generated Event streams, stores, a server key.

Nothing here touches Django's database: the Worker is a separate,
Django-free package (DESIGN §5), and its tests need no server (STYLE §7).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

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
