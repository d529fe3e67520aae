"""What every part of ``bench/commands.py`` shares: the layout, the clock, the pool sizing.

Not a benchmark itself (``bench/all.py`` runs only the ``bench/*.py`` whose
name does not start with ``_``).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = "commands"
CONCURRENCY = (1, 4, 8)
WORKLOADS = ("mix", "hot")
N_GROUPS = 1000
# --quick: fewer Mission Groups for "mix" (their set-up, two Commands each,
# dominates a quick run); each thread still cycles through its own disjoint share.
N_GROUPS_QUICK = 100
TARGET = 0.5  # project / raw at concurrency 8, both workloads
TARGET_CONCURRENCY = 8
REPEATS = 3
# Seconds per measurement. --quick keeps the whole run under two minutes.
DURATION_FULL = {"postgres": 10.0, "sqlite": 10.0}
DURATION_QUICK = {"postgres": 0.8, "sqlite": 0.5}
LIFECYCLE_DURATION_QUICK = {"postgres": 0.6, "sqlite": 0.4}
WARMUP_SECONDS = 0.3
PARTS = ("commands", "lifecycle")
# The lifecycle mix: (layout, threads) cells; the target is spread at 8 threads.
# SQLite serialises every writer of the database (IMMEDIATE transactions), so
# one shared Group is no different there and is not measured.
LIFECYCLE_CELLS = (("spread", 1), ("spread", 8), ("shared", 8))
SQLITE_LIFECYCLE_CELLS = (("spread", 1), ("spread", 8))
LIFECYCLE_CHECKPOINTS = 5
# The hot workload's Command: each Agent reports a usage delta against its own
# WorkItem under its Execution Lease, all in one Mission Group.
USAGE = "ext.missionweaveprotocol.core.resource_usage_record"


def log(msg: str) -> None:
    """Progress goes to stderr so stdout carries only the table and RESULT lines."""
    print(msg, file=sys.stderr, flush=True)


def conninfo(url: str) -> str:
    """psycopg wants ``postgresql://``; dj-database-url also takes ``postgres://``."""
    scheme, rest = url.split("://", 1)
    return "postgresql://" + rest if scheme in ("postgres", "pgsql", "postgresql") else url


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}"


def roles_for(revision: int, base: int) -> list[str]:
    """Alternate the member's roles: each accepted change moves the Group revision by one.
    At ``base`` the member holds ``["worker"]``, so the change from there adds "reviewer"."""
    return ["reviewer", "worker"] if (revision - base) % 2 == 0 else ["worker"]


@dataclass
class Measurement:
    cps: float
    accepted: int
    seconds: float
    errors: int
    exhausted: bool


Runner = tuple[Callable[[], Any], Callable[[Any, Any], None], Callable[[Any], None]]


def measure(
    pools: list[list[Any]],
    duration: float,
    open_conn: Callable[[], Any],
    send: Callable[[Any, Any], None],
    close_conn: Callable[[Any], None],
) -> Measurement:
    """Run every pool from its own thread for ``duration`` seconds.

    A thread stops when the clock runs out or when any thread's pool runs
    dry; the window ends when the last thread finishes its in-flight Command,
    so every counted Command lies inside it.
    """
    n = len(pools)
    barrier = threading.Barrier(n + 1)
    stop = threading.Event()
    counts = [0] * n
    ends = [0.0] * n
    errors: list[str] = []
    exhausted = threading.Event()

    def worker(i: int) -> None:
        state = None
        try:
            state = open_conn()
        except Exception as exc:
            errors.append(f"connect: {exc!r}")
        barrier.wait()
        done = 0
        try:
            if state is not None:
                for item in pools[i]:
                    if stop.is_set():
                        break
                    send(state, item)
                    done += 1
                else:
                    exhausted.set()
                    stop.set()
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            stop.set()
        finally:
            ends[i] = time.perf_counter()
            counts[i] = done
            if state is not None:
                close_conn(state)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    stop.wait(duration)
    stop.set()
    for t in threads:
        t.join()
    seconds = max(ends) - start
    for e in errors[:3]:
        log(f"    error: {e}")
    accepted = sum(counts)
    return Measurement(accepted / seconds if seconds > 0 else 0.0, accepted, seconds, len(errors), exhausted.is_set())


class PoolSizer:
    """How many Commands to pre-build per thread: enough for the duration at
    the best rate seen so far, with headroom. Running dry only shortens the
    window (see ``measure``), it does not bias the rate."""

    def __init__(self) -> None:
        self.best: dict[tuple[str, str, int], float] = {}

    def size(self, impl: str, workload: str, threads: int, duration: float) -> int:
        rate = self.best.get((impl, workload, threads)) or max(
            (v for (i, w, _), v in self.best.items() if (i, w) == (impl, workload)), default=1500.0
        )
        return int(rate * 1.5 * duration / threads) + 50

    def seen(self, impl: str, workload: str, threads: int, cps: float) -> None:
        key = (impl, workload, threads)
        self.best[key] = max(self.best.get(key, 0.0), cps)
