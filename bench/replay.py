"""Events per second through the Worker's apply cycle, against a raw sqlite3 loop.

    python bench/replay.py [--quick]                      the benchmark (DESIGN §7)
    python bench/replay.py --synchronous NORMAL           the same with SQLite's NORMAL sync
    python bench/replay.py --events 50000 --groups 40     another workload size

**Workload.** A realistic Event stream from ``tests/worker/streams.py``
(``World``: an Organization's administrative Group and Mission Groups with
WorkItems driven through offers, acceptances, leases, renewals, checkpoints,
blocks, submissions, retries, expiry, session replacement, child Missions,
snapshots and tombstones; every Event in the server's wire shape and
hash-chained): 100,000 Events over 100 Groups (``--quick``: 10,000 over 20).
It is generated once per size and seed and cached in the temporary directory
(generation hashes every Event with ``mwportal.protocol.event_hash`` and takes
a while); the Events are delivered in commit order.

**Project.** ``mwworker.Store(path, agent=ME).apply(event)`` for every Event:
the whole apply cycle, one transaction per Event (duplicate and contiguity
checks, hash-chain verification over RFC 8785 bytes, the fold into
``group_meta``/``group_queue``, checkpoint and outbox intents, inbox,
processed_event, cursor).

**Raw baseline**, measured in the same run: plain ``sqlite3`` on the same
schema (the tables are created by ``Store`` and the connection then closed),
one transaction per Event doing the same durable writes::

    BEGIN IMMEDIATE
    INSERT INTO inbox (...)              -- json.dumps of the Event
    INSERT INTO processed_event (...)
    INSERT OR REPLACE INTO group_queue    -- the WorkItem's full row (or group_meta for Group Events)
    INSERT INTO cursor ... ON CONFLICT DO UPDATE
    COMMIT

with the projection rows kept in a Python dict (no reads), the new state
looked up in a table by Event type, and no verification. Both sides use
``journal_mode=WAL`` and the same ``synchronous`` (``FULL``, the Store's
default, unless ``--synchronous``), each run in a fresh file of the same
temporary directory.

Runs alternate raw/project, ``--repeat`` times (3); the table shows each
side's median Events/s and the RESULT line the ratio of the medians.

Exit status 0 even when the target is missed (the numbers are the report).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = "replay"
TARGET = 0.5

# The raw loop's "fold": the state a WorkItem Event leaves, by type (None: unchanged).
TYPE_STATE = {
    "work.authorized": "open", "work.offered": "offered", "work.offer_accepted": "queued", "work.started": "active",
    "work.checkpointed": "queued", "work.blocked": "blocked", "work.submitted": "submitted",
    "work.result_accepted": "verified", "work.failed": "failed", "work.attempt_failed": "queued",
    "work.cancelled": "cancelled", "work.lease_expired": "queued", "work.lease_revoked": "queued",
    "mission.child_created": "blocked", "work.child_approved": "verified",
}  # fmt: skip
GROUP_TYPES = frozenset(
    {"org.created", "org.priority_policy_set", "mission.created", "membership.added", "membership.removed",
     "membership.roles_set", "mission.approved", "mission.failed", "mission.cancelled", "mission.archived",
     "group.snapshot_taken", "event.redacted"}
)  # fmt: skip


def log(msg: str) -> None:
    print(msg, flush=True)


def setup_path() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def load_stream(events: int, groups: int, seed: int) -> list[dict[str, Any]]:
    """The Event stream, generated once and cached as JSON lines."""
    setup_path()
    from tests.worker.streams import dump_jsonl, generate, load_jsonl

    cache = Path(tempfile.gettempdir()) / f"mwp-bench-replay-{seed}-{events}-{groups}.jsonl"
    if cache.exists():
        return list(load_jsonl(str(cache)))
    started = time.perf_counter()
    log(f"  generating {events:,} Events over {groups} Groups (seed {seed}) ...")
    world, stream = generate(seed, events, groups=groups)
    log(f"  generated in {time.perf_counter() - started:.1f} s; cached at {cache}")
    partial = cache.with_suffix(".tmp")
    dump_jsonl(stream, str(partial))
    partial.replace(cache)
    return stream


def fresh_path(directory: str, name: str) -> str:
    path = os.path.join(directory, name)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return path


def run_project(stream: list[dict[str, Any]], path: str, synchronous: str) -> float:
    from mwworker import Store
    from tests.worker.streams import ME

    store = Store(path, agent=ME, synchronous=synchronous)
    try:
        started = time.perf_counter()
        applied = 0
        for event in stream:
            applied += len(store.apply(event))
        elapsed = time.perf_counter() - started
    finally:
        store.close()
    if applied != len(stream):
        raise SystemExit(f"the Store applied {applied} of {len(stream)} Events")
    return len(stream) / elapsed


def run_raw(stream: list[dict[str, Any]], path: str, synchronous: str) -> float:
    from mwworker import Store
    from mwworker.projection import GroupMeta, WorkRow
    from tests.worker.streams import ME

    Store(path, agent=ME, synchronous=synchronous).close()  # the same schema
    row_cols = [f for f in WorkRow.__dataclass_fields__]
    meta_cols = [f for f in GroupMeta.__dataclass_fields__]
    i_state, i_rev, i_seq = row_cols.index("state"), row_cols.index("revision"), row_cols.index("updated_sequence")
    m_rev = meta_cols.index("revision")
    sql_meta = f"INSERT OR REPLACE INTO group_meta ({', '.join(meta_cols)}) VALUES ({', '.join('?' * len(meta_cols))})"
    sql_row = f"INSERT OR REPLACE INTO group_queue ({', '.join(row_cols)}) VALUES ({', '.join('?' * len(row_cols))})"
    rows: dict[tuple[str, str], list[Any]] = {}
    metas: dict[str, list[Any]] = {}
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    execute = conn.execute
    started = time.perf_counter()
    for event in stream:
        group, seq, etype, agg = event["group"], event["sequence"], event["type"], event["aggregate"]
        execute("BEGIN IMMEDIATE")
        execute(
            "INSERT INTO inbox (group_id, sequence, event_id, event, hash) VALUES (?, ?, ?, ?, ?)",
            (group, seq, event["event_id"], json.dumps(event, separators=(",", ":")), event["hash"]),
        )
        execute("INSERT INTO processed_event (event_id, group_id, sequence) VALUES (?, ?, ?)",
                (event["event_id"], group, seq))  # fmt: skip
        if agg["kind"] == "workitem":
            key = (group, agg["id"])
            row = rows.get(key)
            if row is None:
                row = [None] * len(row_cols)
                row[0], row[1] = group, agg["id"]
                row[row_cols.index("contract")] = json.dumps(event["body"].get("contract"), separators=(",", ":"))
                rows[key] = row
            row[i_state] = TYPE_STATE.get(etype, row[i_state])
            row[i_rev], row[i_seq] = agg["revision"], seq
            execute(sql_row, row)
        elif etype in GROUP_TYPES or agg["kind"] == "group":
            meta = metas.setdefault(group, [group] + [None] * (len(meta_cols) - 1))
            meta[m_rev] = agg["revision"]
            execute(sql_meta, meta)
        execute(
            "INSERT INTO cursor (group_id, sequence, last_hash) VALUES (?, ?, ?) ON CONFLICT (group_id)"
            " DO UPDATE SET sequence = excluded.sequence, last_hash = excluded.last_hash",
            (group, seq, event["hash"]),
        )
        execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return len(stream) / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10,000 Events over 20 Groups (under two minutes)")
    parser.add_argument("--events", type=int, help="Events in the stream (100,000; quick 10,000)")
    parser.add_argument("--groups", type=int, help="Groups in the stream (100; quick 20)")
    parser.add_argument("--repeat", type=int, default=3, help="alternating raw/project runs (3)")
    parser.add_argument("--synchronous", choices=("FULL", "NORMAL"), default="FULL", help="SQLite synchronous")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    events = args.events or (10_000 if args.quick else 100_000)
    groups = args.groups or (20 if args.quick else 100)
    setup_path()
    log(f"replay: {events:,} Events over {groups} Groups, WAL, synchronous={args.synchronous}, "
        f"{args.repeat} alternating run(s) per side")  # fmt: skip
    stream = load_stream(events, groups, args.seed)
    workdir = tempfile.mkdtemp(prefix="mwp-bench-replay-")
    project: list[float] = []
    raw: list[float] = []
    try:
        for i in range(args.repeat):
            raw.append(run_raw(stream, fresh_path(workdir, f"raw-{i}.sqlite3"), args.synchronous))
            log(f"  run {i + 1}: raw     {raw[-1]:9,.0f} Events/s")
            project.append(run_project(stream, fresh_path(workdir, f"project-{i}.sqlite3"), args.synchronous))
            log(f"  run {i + 1}: project {project[-1]:9,.0f} Events/s")
    finally:
        for name in os.listdir(workdir):
            os.remove(os.path.join(workdir, name))
        os.rmdir(workdir)
    p, r = statistics.median(project), statistics.median(raw)
    ratio = p / r
    log("")
    log(f"{'side':<10}{'median Events/s':>18}{'us/Event':>12}{'runs':>40}")
    for side, values, med in (("raw", raw, r), ("project", project, p)):
        runs = ", ".join(f"{v:,.0f}" for v in values)
        log(f"{side:<10}{med:>18,.0f}{1e6 / med:>12.1f}{runs:>40}")
    log(f"{'ratio':<10}{ratio:>18.2f}")
    log("")
    sync = args.synchronous.lower()
    suffix = "" if args.synchronous == "FULL" else f"_sync_{sync}"
    print(f"RESULT bench={BENCH} metric=ratio_vs_raw{suffix} value={ratio:.2f} target>={TARGET} "
          f"ok={'true' if ratio >= TARGET else 'false'}")  # fmt: skip
    print(f"RESULT bench={BENCH} metric=events_per_s{suffix} value={p:.0f} events={events} groups={groups}")
    print(f"RESULT bench={BENCH} metric=raw_events_per_s{suffix} value={r:.0f} events={events} groups={groups}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
