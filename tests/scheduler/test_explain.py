"""``mwworker explain`` over a real Store fed by a generated Event stream."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mwworker import Store
from mwworker.explain import explain_rows, main
from tests.worker.streams import ME, generate, verifier


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    _, stream = generate(1, 1500, groups=6)
    path = str(tmp_path_factory.mktemp("explain") / "worker.db")
    with Store(path, agent=ME, verifier=verifier(1)) as store:
        for event in stream:
            store.apply(event)
    return path


def test_explain_lists_exactly_this_workers_queued_items(store_path: str) -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    with Store(store_path, agent=ME) as store:
        mine = {
            (g, r.workitem) for g in store.groups() for r in store.queue(g) if r.state == "queued" and r.owner == ME
        }
        others = {r.workitem for g in store.groups() for r in store.queue(g)} - {w for _, w in mine}
        rows, labels = explain_rows(store, ME, now=now)
    assert len(mine) >= 2
    assert {(r.group, r.key) for r in rows} == mine
    assert not {r.key for r in rows} & others
    ranked = [r.rank for r in rows if r.rank is not None]
    assert ranked == sorted(ranked) and ranked == list(range(1, len(ranked) + 1))
    for r in rows:
        assert r.weight > 0 and r.age_seconds >= 0 and r.level == r.urgency + r.impact
    assert set(labels) == {g for g, _ in mine}


def test_explain_main_prints_a_table_and_json(store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--store", store_path, "--agent", ME, "--now", "2030-01-01T00:00:00Z"]) == 0
    table = capsys.readouterr().out
    assert "Queued work of this Worker" in table and "rank" in table
    assert main(["--store", store_path, "--agent", ME, "--now", "2030-01-01T00:00:00Z", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines and {"rank", "group", "key", "weight", "due", "gates"} <= set(lines[0])


def test_a_missing_capability_shows_as_a_gate(store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    main(["--store", store_path, "--agent", ME, "--now", "2030-01-01T00:00:00Z", "--json", "--capability", "x@0"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # The generated contracts require capabilities this Worker lacks: gated, unranked.
    assert rows and all("capability" in r["gates"] and r["rank"] is None for r in rows)


def test_explain_needs_no_server(tmp_path: Path) -> None:
    path = str(tmp_path / "empty.db")
    Store(path, agent=ME).close()
    assert main(["--store", path, "--agent", ME]) == 0
