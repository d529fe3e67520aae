"""Signed Events per second through the Worker's apply cycle, against a raw sqlite3 loop that verifies them too.

    python bench/replay.py [--quick]                      the benchmark (DESIGN §8, issue 18 "Speed")
    python bench/replay.py --synchronous NORMAL           the same with SQLite's NORMAL sync
    python bench/replay.py --events 50000 --groups 40     another workload size

**Workload.** MWP 0.1 Group Event documents (PROTOCOL §15.2), each signed
with Ed25519 by one Group Authority key (``verification.sign_document``
through ``eventdoc.build_event``): per Group a ``mission.created``, then
WorkItems driven through the catalogue's lifecycle (``work.authorized``,
``work.offer.created`` and ``work.offer.accepted`` for this Worker,
``work.started``, two ``work.progressed``, ``work.checkpointed``,
``work.submitted``, ``work.result.accepted``) with a ``message.posted``
after every WorkItem. Payloads are the catalogue's own examples
(``catalogue.as_data()``) with fresh identifiers per Group and WorkItem, so
every one is catalogue-valid. 100,000 Events over 100 Groups
(``--quick``: 4,000 over 20, since every commit waits for the disk),
delivered round-robin over the Groups, as a multiplexed connection
interleaves them (§17.2). Generated once per size
and seed and cached as JSON lines in the temporary directory (signing takes
a while).

**Project.** ``mwworker.Store(path, agent=ME, verifier=EventVerifier(keys))
.apply(event)`` for every Event: the whole apply cycle, one transaction per
Event (duplicate and contiguity checks, the six verification stages over
the Event's JCS bytes with the Group Authority's key, the catalogue's
payload check, the fold into ``group_meta``/``group_queue``, checkpoint and
outbox intents, inbox, processed_event, cursor).

**Raw baseline**, measured in the same run: plain ``sqlite3`` on the same
schema (the tables are created by ``Store`` and the connection then closed),
one transaction per Event that verifies the same signature and does the
same durable writes::

    JCS bytes of the Event without "signature"; Ed25519 verify (libsodium)
    BEGIN IMMEDIATE
    INSERT INTO inbox (...)              -- the Event's JCS text
    INSERT INTO processed_event (...)
    INSERT OR REPLACE INTO group_queue    -- the WorkItem's row (group_meta for a Group Event)
    INSERT INTO cursor ... ON CONFLICT DO UPDATE
    COMMIT

with the projection rows kept in a Python dict (no reads), the new state
looked up in a table by kind, no schema and no catalogue check. Both sides
use ``journal_mode=WAL`` and the same ``synchronous`` (``FULL``, the Store's
default, unless ``--synchronous``), each run in a fresh file.

Runs alternate raw/project, ``--repeat`` times (3); the table shows each
side's median Events/s and the RESULT line the ratio of the medians. With
``synchronous=FULL`` both sides wait for an fsync per Event, so on a busy
disk the runs vary widely and the ratio says little about the apply cycle's
own cost; ``--synchronous NORMAL`` (a RESULT line of its own) measures that.

Exit status 0 even when the target is missed (the numbers are the report).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = "replay"
TARGET = 0.5

# The raw loop's "fold": the state a WorkItem Event leaves, by kind (None: unchanged).
KIND_STATE = {
    "work.authorized": "open", "work.offer.created": "offered", "work.offer.accepted": "assigned",
    "work.started": "active", "work.progressed": None, "work.checkpointed": "active",
    "work.submitted": "submitted", "work.result.accepted": "verified",
}  # fmt: skip
WORK_LIFECYCLE = (
    "work.authorized",
    "work.offer.created",
    "work.offer.accepted",
    "work.started",
    "work.progressed",
    "work.progressed",
    "work.checkpointed",
    "work.submitted",
    "work.result.accepted",
)
# The catalogue examples' identifiers (catalogue/examples.py ``uid(n)``) that the stream
# gives a value of its own; every other one becomes fresh per WorkItem.
EXAMPLE_UID = re.compile(r"urn:uuid:00000000-0000-4000-8000-(\d{12})")
EXAMPLE_MISSION, EXAMPLE_GROUP, EXAMPLE_WORKER, EXAMPLE_WORK_ITEM = 2, 3, 7, 9
NAMESPACE = uuid.UUID("6e1f0c1a-3c8e-4d59-9a43-8f3f5c1d2b70")
ORG = "urn:uuid:" + str(uuid.uuid5(NAMESPACE, "organization"))
ME = "urn:uuid:" + str(uuid.uuid5(NAMESPACE, "worker"))
AUTHORITY = "urn:uuid:" + str(uuid.uuid5(NAMESPACE, "group-authority"))
AUTHORITY_KEY_ID = "urn:uuid:" + str(uuid.uuid5(NAMESPACE, "group-authority-key"))
COORDINATOR = "urn:uuid:" + str(uuid.uuid5(NAMESPACE, "coordinator"))
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def log(msg: str) -> None:
    print(msg, flush=True)


def setup_path() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def authority_seed(seed: int) -> bytes:
    return random.Random(f"authority-{seed}").randbytes(32)


def key_binding(seed: int) -> dict[str, Any]:
    """The Group Authority's key as ``GET /api/v0.1/keys/{keyId}`` serves it."""
    from mwportal.protocol import ed25519
    from mwportal.protocol.values import b64url_encode

    return {
        "keyId": AUTHORITY_KEY_ID,
        "principal": {"type": "service", "id": AUTHORITY},
        "algorithm": "Ed25519",
        "publicKey": b64url_encode(ed25519.public_key(authority_seed(seed))),
        "validFrom": "2026-01-01T00:00:00Z",
    }


class Ids:
    """Deterministic ``urn:uuid:`` identifiers (the same stream for the same seed)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __call__(self, *parts: object) -> str:
        return "urn:uuid:" + str(uuid.uuid5(NAMESPACE, "/".join(map(str, (self.seed, *parts)))))


def _templates() -> dict[str, str]:
    from mwportal.protocol import catalogue

    events = catalogue.as_data()["events"]
    kinds = {"mission.created", "message.posted", *WORK_LIFECYCLE}
    return {kind: json.dumps(events[kind]["payloadSchema"]["examples"][0]) for kind in kinds}


def _payload(template: str, fixed: dict[int, str], fresh: Any) -> dict[str, Any]:
    def substitute(match: re.Match[str]) -> str:
        n = int(match.group(1))
        return fixed.get(n) or fresh(n)

    payload: dict[str, Any] = json.loads(EXAMPLE_UID.sub(substitute, template))
    return payload


def _group_kinds(items: int) -> Iterator[tuple[str, int | None]]:
    """A Group's Event kinds in order, with the WorkItem each one is about."""
    yield "mission.created", None
    for item in range(items):
        for kind in WORK_LIFECYCLE:
            yield kind, item
        yield "message.posted", item


def generate(seed: int, events: int, groups: int) -> list[dict[str, Any]]:
    """``events`` signed Event documents over ``groups`` Groups, interleaved round-robin."""
    from mwportal.protocol.command import Key
    from mwportal.protocol.eventdoc import build_event

    key = Key(AUTHORITY_KEY_ID, authority_seed(seed))
    templates = _templates()
    ids = Ids(seed)
    per_group = [events // groups + (1 if g < events % groups else 0) for g in range(groups)]
    lanes: list[list[dict[str, Any]]] = []
    for g, count in enumerate(per_group):
        group, mission = ids("group", g), ids("mission", g)
        lane: list[dict[str, Any]] = []
        revisions: dict[int | None, int] = {}
        items = count // (len(WORK_LIFECYCLE) + 1) + 1
        for sequence, (kind, item) in enumerate(_group_kinds(items), start=1):
            if sequence > count:
                break
            work_item = ids("item", g, item) if item is not None else None
            fixed = {EXAMPLE_MISSION: mission, EXAMPLE_GROUP: group, EXAMPLE_WORKER: ME}
            if work_item is not None:
                fixed[EXAMPLE_WORK_ITEM] = work_item
            payload = _payload(templates[kind], fixed, lambda n, g=g, item=item: ids("uid", g, item, n))
            aggregate = item if kind.startswith("work.") else None
            revisions[aggregate] = revisions.get(aggregate, 0) + 1
            lane.append(
                build_event(
                    event_id=ids("event", g, sequence),
                    kind=kind,
                    actor={"type": "agent", "id": ME if kind.startswith("work.") else COORDINATOR},
                    cause={"type": "command", "id": ids("action", g, sequence)},
                    correlation_id=ids("correlation", g, item),
                    occurred_at=T0 + timedelta(seconds=sequence),
                    payload=payload,
                    accepted_by={"type": "service", "id": AUTHORITY},
                    key=key,
                    group_id=group,
                    sequence=sequence,
                    aggregate_revision=revisions[aggregate],
                    command_hash="sha256:" + uuid.uuid5(NAMESPACE, f"{g}/{sequence}").hex * 2,
                    work_item_id=work_item if kind.startswith("work.") else None,
                )
            )
        lanes.append(lane)
    stream: list[dict[str, Any]] = []
    for position in range(max(per_group)):
        stream.extend(lane[position] for lane in lanes if position < len(lane))
    return stream


def load_stream(events: int, groups: int, seed: int) -> list[dict[str, Any]]:
    """The Event stream, generated once and cached as JSON lines."""
    cache = Path(tempfile.gettempdir()) / f"mwp-bench-replay-v01-{seed}-{events}-{groups}.jsonl"
    if cache.exists():
        with cache.open() as fh:
            return [json.loads(line) for line in fh]
    started = time.perf_counter()
    log(f"  signing {events:,} Events over {groups} Groups (seed {seed}) ...")
    stream = generate(seed, events, groups)
    log(f"  signed in {time.perf_counter() - started:.1f} s; cached at {cache}")
    partial = cache.with_suffix(".tmp")
    with partial.open("w") as fh:
        for event in stream:
            fh.write(json.dumps(event, separators=(",", ":")) + "\n")
    partial.replace(cache)
    return stream


def fresh_path(directory: str, name: str) -> str:
    path = os.path.join(directory, name)
    for suffix in ("", "-wal", "-shm", ".lock"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return path


def open_store(path: str, synchronous: str, seed: int) -> Any:
    from mwworker import Store
    from mwworker.events import EventVerifier, KeyCache

    keys = KeyCache(ORG)
    keys.add(key_binding(seed))
    return Store(path, agent=ME, verifier=EventVerifier(keys), synchronous=synchronous)


def run_project(stream: list[dict[str, Any]], path: str, synchronous: str, seed: int) -> float:
    store = open_store(path, synchronous, seed)
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


def run_raw(stream: list[dict[str, Any]], path: str, synchronous: str, seed: int) -> float:
    from nacl.bindings import crypto_sign_open

    from mwportal.protocol import jcs
    from mwportal.protocol.values import b64url_decode
    from mwworker.schema import META_COLS, ROW_COLS

    open_store(path, synchronous, seed).close()  # the same schema
    public_key = b64url_decode(key_binding(seed)["publicKey"])
    i_state, i_rev, i_seq = ROW_COLS.index("state"), ROW_COLS.index("revision"), ROW_COLS.index("updated_sequence")
    m_rev = META_COLS.index("revision")
    sql_meta = f"INSERT OR REPLACE INTO group_meta ({', '.join(META_COLS)}) VALUES ({', '.join('?' * len(META_COLS))})"
    sql_row = f"INSERT OR REPLACE INTO group_queue ({', '.join(ROW_COLS)}) VALUES ({', '.join('?' * len(ROW_COLS))})"
    rows: dict[tuple[str, str], list[Any]] = {}
    metas: dict[str, list[Any]] = {}
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    execute = conn.execute
    started = time.perf_counter()
    for event in stream:
        group, seq, kind, event_id = event["groupId"], event["sequence"], event["kind"], event["eventId"]
        body = {name: value for name, value in event.items() if name != "signature"}
        signature = b64url_decode(event["signature"]["value"])
        crypto_sign_open(signature + jcs.canonicalize(body), public_key)  # raises on a bad signature
        execute("BEGIN IMMEDIATE")
        execute(
            "INSERT INTO inbox (group_id, sequence, event_id, event) VALUES (?, ?, ?, ?)",
            (group, seq, event_id, jcs.canonicalize(event).decode()),
        )
        execute("INSERT INTO processed_event (event_id, group_id, sequence) VALUES (?, ?, ?)", (event_id, group, seq))
        work_item = event.get("workItemId")
        if work_item is not None:
            key = (group, work_item)
            row = rows.get(key)
            if row is None:
                row = [None] * len(ROW_COLS)
                row[0], row[1] = group, work_item
                row[ROW_COLS.index("contract")] = json.dumps(
                    event["payload"].get("workItem", {}).get("contract"), separators=(",", ":")
                )
                rows[key] = row
            row[i_state] = KIND_STATE.get(kind) or row[i_state]
            row[i_rev], row[i_seq] = event["aggregateRevision"], seq
            execute(sql_row, row)
        else:
            meta = metas.setdefault(group, [group] + [None] * (len(META_COLS) - 1))
            meta[m_rev] = event["aggregateRevision"]
            execute(sql_meta, meta)
        execute(
            "INSERT INTO cursor (group_id, sequence, last_event_id) VALUES (?, ?, ?) ON CONFLICT (group_id)"
            " DO UPDATE SET sequence = excluded.sequence, last_event_id = excluded.last_event_id",
            (group, seq, event_id),
        )
        execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return len(stream) / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4,000 Events over 20 Groups (under two minutes)")
    parser.add_argument("--events", type=int, help="Events in the stream (100,000; quick 4,000)")
    parser.add_argument("--groups", type=int, help="Groups in the stream (100; quick 20)")
    parser.add_argument("--repeat", type=int, default=3, help="alternating raw/project runs (3)")
    parser.add_argument("--synchronous", choices=("FULL", "NORMAL"), default="FULL", help="SQLite synchronous")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    events = args.events or (4_000 if args.quick else 100_000)
    groups = args.groups or (20 if args.quick else 100)
    setup_path()
    log(f"replay: {events:,} signed Events over {groups} Groups, WAL, synchronous={args.synchronous}, "
        f"{args.repeat} alternating run(s) per side")  # fmt: skip
    stream = load_stream(events, groups, args.seed)
    workdir = tempfile.mkdtemp(prefix="mwp-bench-replay-")
    project: list[float] = []
    raw: list[float] = []
    try:
        for i in range(args.repeat):
            raw.append(run_raw(stream, fresh_path(workdir, f"raw-{i}.sqlite3"), args.synchronous, args.seed))
            log(f"  run {i + 1}: raw     {raw[-1]:9,.0f} Events/s")
            path = fresh_path(workdir, f"project-{i}.sqlite3")
            project.append(run_project(stream, path, args.synchronous, args.seed))
            log(f"  run {i + 1}: project {project[-1]:9,.0f} Events/s")
    finally:
        for name in os.listdir(workdir):
            os.remove(os.path.join(workdir, name))
        os.rmdir(workdir)
    p, r = statistics.median(project), statistics.median(raw)
    ratio = p / r
    log("")
    log(f"{'side':<10}{'median Events/s':>18}{'us/Event':>12}{'runs':>40}")
    for side, measured, med in (("raw", raw, r), ("project", project, p)):
        runs = ", ".join(f"{v:,.0f}" for v in measured)
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
