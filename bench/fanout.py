"""Event fan-out over WebSockets against a bare ``websockets`` broadcast server.

    python bench/fanout.py [--quick]                      the benchmark (DESIGN §7)
    python bench/fanout.py --rate-one 20 --rate-many 40   other offered loads

Two topologies, each measured on the project and on a bare broadcast server
in the same run:

- **one_group**: one Mission Group with 100 subscribing Agents;
- **many_groups**: 100 Mission Groups with one subscribing Agent each.

**Project side.** A real ``daphne`` subprocess serves
``mwportal.asgi:application`` (the command line of ``tests/delivery``). Each of
the 100 subscribers is its own Agent with its own key bound in the Registry
and an active Membership; it connects to ``/mwp/0.1`` (PROTOCOL §17) with a
``websockets`` client, completes the four-phase HELLO (§6.3; a new session
each time) and sends ``SUBSCRIBE`` with ``afterSequence = head - 1`` (so the
Event at the head arrives at once and proves the subscription live). EVENT
frames carry the stored signed Event documents (§15.2), as delivery serves
them. A committer process sends, at a steady rate, the person Olivia's signed
``membership.change`` documents through ``accept_document`` (she toggles a
non-subscribing member between ``["worker"]`` and ``["reviewer",
"worker"]``, compare-and-set on the Group revision with ``expectedRevision``;
round-robin over the Groups of the topology; each document built and signed
before its paced time, signing being the client's cost). Each such Command
appends two Events (one ``membership.changed`` per role, §8), so every
subscriber of the Group receives two frames per commit. For every Event of the
receipt, keyed by (Group, sequence), the committer records the commit time:
``time.time()`` in ``accept()``'s on_commit step (it wraps
``missions.authority.notify_commit``), after COMMIT and before the delivery
notice. ``time.time()`` right after ``accept_document()`` returns is recorded
too and shown as "after-return"; with Redis it comes after the notice has gone
out, so it understates the latency (it can even go negative).

**Baseline.** A bare ``websockets.asyncio.server`` broadcast server (a
subprocess of this script) with the same 100 subscriber connections in the
same topology (a one-frame hello and subscribe, no authentication); a
publisher process on one connection sends, at the same rate, as many EVENT
frames per commit as the project's Command appends Events, each of the same
size (a real signed ``membership.changed`` EVENT frame of the project as the
template, its ``groupId``, ``sequence`` and ``frameId`` replaced) and records
``time.time()`` right after ``send()`` returns; the server reads the frame's
``event.groupId`` and ``broadcast()``s it unchanged to that Group's
subscribers. No compression on either side (daphne does not negotiate it).

**Cross-machine floor** (``--floor``; PostgreSQL and Redis only). The same
bare server, fed not by a publisher connection but the way the project feeds
a hub on another machine (``missions.delivery``; on the same machine the
local notice, one datagram, comes first): a floor committer INSERTs the
frame into a table of the scratch database (autocommit: that is the commit;
its time is taken when the INSERT returns) and PUBLISHes ``{group,
sequence, frame}`` on a Redis channel from the same thread; the server,
subscribed to it, broadcasts the frame it carries. No Django, no channel
layer, no consumer: only the hop between a commit and a subscriber through
Redis. Its p99 over the bare server's says how much of the 2x budget that
hop alone would take.

**Measured** (subscribers in this process; receive time taken as each frame
comes out of ``recv()``): delivered event frames per second = distinct matched
frames / (last receive - first commit); latency = receive - commit, p50 and
p99 over all delivered frames. Frames not delivered in time, duplicates,
out-of-order frames and connections the server closed are counted and
printed. Each measurement (10 s of commits, then up to 5 s for the last
frames; ``--quick``: 4 s and 2 s) is repeated 3 times (``--quick``: once),
project and baseline interleaved, and medians are reported. The first
``WARMUP_SECONDS`` of commits of every measurement warm up both sides (first
calls, connection buffers, CPU caches): their frames count for delivery but
not for the latency percentiles. The subscribers' process (this one, the
measuring instrument) runs no garbage collection during a measurement: a
full collection of it stops all 100 subscribers for up to 100 ms, whichever
side is being measured. Ratios:
throughput project / bare (target >= 0.5), p99 project / bare (target <= 2).

**Backends.** By default the embedded SQLite in a temporary file and the
in-memory channel layer: then the commit happens in another process than
daphne and reaches subscribers through the committer's local notice
(``missions.local_notices``: a datagram to daphne's hub), with the database
watch and the periodic head check as safety nets. Daphne runs with the
project's default head check (``MWP_HEAD_POLL_SECONDS=1``; ``--head-poll``)
on every backend. With ``MWP_DATABASE_URL=postgres://...`` a
scratch database ``mwp_fanout`` on that server is created, migrated and
dropped at the end; with ``MWP_REDIS_URL`` set, daphne and the committer use
the Redis channel layer, so "head moved" also travels through Redis (the
local notice, one hop, usually comes first). Both daphne
and this process run with ``MWP_DEBUG=0``. The output says which backends
were used.

Exit status 0 even when a target is missed (the numbers are the report); 1
when the benchmark itself failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._fanout_workers import (  # noqa: E402
    FLOOR_TABLE,
    MAX_WS_BYTES,
    PROTOCOL_PREFIX,
    SUBSCRIBERS,
    bare_server_main,
    build_fixtures,
    committer_main,
    conninfo,
    floor_publisher_main,
    heads,
    persona,
    publisher_main,
    setup_django,
)

BENCH = "fanout"
SCRATCH_DB = "mwp_fanout"
HEAD_POLL_SECONDS = 1.0  # default of --head-poll: the project's (settings.MWP_HEAD_POLL_SECONDS)
WARMUP_SECONDS = 1.0
CONNECT_PARALLEL = 10
READY_TIMEOUT = 60.0
DRAIN_SECONDS = 5.0  # how long after the last commit frames may still arrive (quick: 2)
GRACE_SECONDS = 0.3
TARGET_THROUGHPUT_RATIO = 0.5
TARGET_P99_RATIO = 2.0


def log(msg: str) -> None:
    print(msg, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, log_file: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {tail(log_file)}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout:.0f} s: {tail(log_file)}")


def tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile of ``values`` (0 < p <= 100)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


# --------------------------------------------------------------------------
# Database and Django set-up (in this process, before django.setup())
# --------------------------------------------------------------------------


def pg_admin(url: str, statement: str) -> None:
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    maintenance = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(conninfo(maintenance), autocommit=True) as conn:
        conn.execute(sql.SQL(statement).format(sql.Identifier(SCRATCH_DB)))


@dataclass
class Backends:
    database_url: str
    database: str  # for the output
    layer: str
    var_dir: str
    postgres_url: str | None = None  # the server's URL, to drop the scratch database

    def label(self) -> str:
        return f"{'postgres' if self.postgres_url else 'sqlite'}+{'redis' if 'redis' in self.layer else 'memory'}"


def choose_backends(head_poll: float) -> Backends:
    var_dir = tempfile.mkdtemp(prefix="mwp-fanout-")
    url = os.environ.get("MWP_DATABASE_URL", "")
    redis = os.environ.get("MWP_REDIS_URL", "")
    layer = f"redis ({redis})" if redis else f"in-memory (head check every {head_poll:g} s)"
    if url.startswith(("postgres://", "postgresql://", "pgsql://")):
        parts = urlsplit(url)
        scratch = urlunsplit(parts._replace(path="/" + SCRATCH_DB))
        pg_admin(url, "DROP DATABASE IF EXISTS {} WITH (FORCE)")
        pg_admin(url, "CREATE DATABASE {}")
        where = parts.hostname or "localhost"
        return Backends(scratch, f"postgresql, scratch database {SCRATCH_DB} on {where}:{parts.port or 5432}",
                        layer, var_dir, postgres_url=url)  # fmt: skip
    if url and not url.startswith("sqlite"):
        raise SystemExit(f"MWP_DATABASE_URL must be sqlite:///... or postgres://..., not {url.split(':', 1)[0]}")
    path = Path(var_dir) / "fanout.sqlite3"
    return Backends(f"sqlite:///{path}", f"sqlite (embedded, WAL), temporary file {path}", layer, var_dir)


def configure_env(backends: Backends, head_poll: float) -> None:
    """The environment this process, daphne and the worker processes share."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "mwportal.settings"
    os.environ["MWP_DATABASE_URL"] = backends.database_url
    os.environ["MWP_VAR_DIR"] = backends.var_dir
    os.environ["MWP_DEBUG"] = "0"
    os.environ["MWP_HEAD_POLL_SECONDS"] = f"{head_poll:g}"
    os.environ.setdefault("MWP_LOG_LEVEL", "WARNING")
    pythonpath = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = str(ROOT) + (os.pathsep + pythonpath if pythonpath else "")


def daphne_argv(port: int) -> list[str]:
    """The daphne command line of ``tests/delivery/conftest.py``."""
    return [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
            "--websocket-max-message-size", str(MAX_WS_BYTES), "--websocket-max-frame-size", str(MAX_WS_BYTES),
            "mwportal.asgi:application"]  # fmt: skip


class Worker:
    """A worker process of this script, spoken to in JSON lines."""

    def __init__(self, name: str, argv: list[str], log_file: Path):
        self.name, self.log_file = name, log_file
        self.stderr = open(log_file, "ab")  # noqa: SIM115  (closed in stop())
        self.proc = subprocess.Popen(  # noqa: S603  (this script, this interpreter)
            [sys.executable, str(Path(__file__).resolve()), *argv],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, bufsize=1,
        )  # fmt: skip
        self.lock = threading.Lock()
        self.read()  # {"ready": true}

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(PROTOCOL_PREFIX):
                return dict(json.loads(line[len(PROTOCOL_PREFIX) :]))
        raise RuntimeError(f"the {self.name} process exited ({self.proc.poll()}): {tail(self.log_file)}")

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        with self.lock:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            return self.read()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.stderr.close()


class Server:
    """daphne or the bare server as a subprocess on a free port."""

    def __init__(self, name: str, argv: list[str], log_file: Path, port: int):
        self.name, self.log_file, self.port = name, log_file, port
        with open(log_file, "ab") as out:
            self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)  # noqa: S603
        wait_port(port, self.proc, name, log_file)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


# --------------------------------------------------------------------------
# Subscribers (this process) and one measurement
# --------------------------------------------------------------------------


@dataclass
class Run:
    side: str
    scenario: str
    commits: int = 0
    errors: int = 0
    expected: int = 0
    delivered: int = 0
    throughput: float | None = None
    offered: float | None = None
    p50: float | None = None
    p99: float | None = None
    p50_return: float | None = None  # project: from accept() returning instead of the commit itself
    p99_return: float | None = None
    max_ms: float | None = None
    accept_ms: float | None = None
    extra_frames: int = 0
    duplicates: int = 0
    closed_early: int = 0
    connect_s: float = 0.0
    out_of_order: int = 0
    notes: list[str] = field(default_factory=list)


async def _recv_json(ws: Any) -> dict[str, Any]:
    return dict(json.loads(await asyncio.wait_for(ws.recv(), READY_TIMEOUT)))


async def _connect(url: str, side: str, subscriber: dict[str, Any]) -> Any:
    """A connection that has completed HELLO: on the project, the four phases of
    §6.3 with the subscriber's Registry key (a new session each time); on the
    bare server, one frame each way."""
    from websockets.asyncio.client import connect

    from mwportal.protocol.handshake import ClientHandshake

    ws = await connect(url, max_size=MAX_WS_BYTES, compression=None, open_timeout=30, ping_interval=None)
    if side == "project":
        handshake = ClientHandshake(f"urn:uuid:{subscriber['id']}", persona(subscriber).key)
        await ws.send(json.dumps(handshake.start()))
        await ws.send(json.dumps(handshake.receive_challenge(await _recv_json(ws))))
        handshake.receive_accept(await _recv_json(ws))
        return ws
    await ws.send(json.dumps({"frameType": "HELLO"}))
    welcome = await _recv_json(ws)
    if welcome.get("phase") != "server_accept":
        raise RuntimeError(f"HELLO answered {welcome}")
    return ws


async def _subscribe(ws: Any, side: str, group: str, after: int) -> None:
    """Follow ``group`` (urn); returns once the subscription is live."""
    from mwportal.protocol import frames

    await ws.send(json.dumps(frames.subscribe([(group, after)])))
    if side == "project":
        while True:  # the Event at the head proves the subscription live
            frame = await _recv_json(ws)
            if frame.get("frameType") == "EVENT" and frame["event"]["sequence"] > after:
                return
            if frame.get("frameType") == "ERROR":
                raise RuntimeError(f"SUBSCRIBE answered {frame}")
    else:
        while (await _recv_json(ws)).get("frameType") != "SUBSCRIBED":
            pass


class Subscribers:
    """One side's 100 connections for one measurement."""

    def __init__(self, side: str, url: str, subscribers: list[dict[str, Any]]):
        self.side, self.url, self.subscribers = side, url, subscribers
        self.conns: list[Any] = []
        self.limit = asyncio.Semaphore(CONNECT_PARALLEL)

    async def open(self, plan: list[tuple[str, int]]) -> None:
        """Connect, hello and subscribe; ``plan``: (group, after) per connection.

        The first subscriber of each Group goes before the others:
        Hub.subscribe() adds a Group's feed before it has read the head, and a
        subscriber that arrives in that window waits with head 0 and is not woken
        when the head is set, so it gets nothing until the next commit. That is a
        subscribe-time bug, not fan-out, so the benchmark steps around it.
        """
        conns: dict[int, Any] = {}

        async def one(i: int) -> None:
            async with self.limit:
                group, after = plan[i]
                conns[i] = await _connect(self.url, self.side, self.subscribers[i])
                await _subscribe(conns[i], self.side, group, after)

        firsts: dict[str, int] = {}
        for i, (group, _) in enumerate(plan):
            firsts.setdefault(group, i)
        lead = set(firsts.values())
        try:
            await asyncio.gather(*(one(i) for i in sorted(lead)))
            await asyncio.gather(*(one(i) for i in range(len(plan)) if i not in lead))
        finally:  # in plan order when complete; whatever opened otherwise, so close() closes it
            self.conns = [conns[i] for i in sorted(conns)]

    async def close(self) -> None:
        await asyncio.gather(*(ws.close() for ws in self.conns), return_exceptions=True)
        self.conns = []


async def measure(
    subs: Subscribers, scenario: str, worker: Worker, plan: list[tuple[str, int]], groups: list[str],
    rate: float, duration: float, drain: float,
) -> Run:  # fmt: skip
    """``plan``: (group, after) per subscriber."""
    run = Run(subs.side, scenario)
    connect_started = time.monotonic()
    await subs.open(plan)
    conns = subs.conns
    run.connect_s = time.monotonic() - connect_started
    received: list[tuple[float, int, str | bytes]] = []
    state = {"expected": math.inf}
    done = asyncio.Event()
    closed: list[str] = []

    async def reader(index: int, ws: Any) -> None:
        try:
            while True:
                raw = await ws.recv()
                received.append((time.time(), index, raw))
                if len(received) >= state["expected"]:
                    done.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the server closed it: say so in the report
            closed.append(f"{type(exc).__name__}: {exc}")

    readers = [asyncio.create_task(reader(i, ws)) for i, ws in enumerate(conns)]
    loop = asyncio.get_running_loop()
    try:
        reply = await loop.run_in_executor(None, worker.call, {"groups": groups, "rate": rate, "duration": duration})
        fanout: dict[str, int] = defaultdict(int)  # subscribers per Group (urn)
        for group, _ in plan:
            fanout[group] += 1
        records = reply["records"]
        state["expected"] = sum(fanout.get(r[0], 0) for r in records)
        if len(received) >= state["expected"]:
            done.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), drain)
        await asyncio.sleep(GRACE_SECONDS)  # duplicates make the count arrive early; let stragglers in
    finally:
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)

    # Commits: accepted Commands (project) or publishing ticks (bare); each is one or more Events.
    run.commits, run.errors, run.expected = int(reply["commands"]), reply["errors"], int(state["expected"])
    run.closed_early = len(closed)
    if closed:
        run.notes.append(f"{len(closed)} closed by the server: {closed[0]}")
    committed = {(r[0], r[1]): (r[3], r[2]) for r in records}  # (commit, accept() returned)
    warm_from = min((r[3] for r in records), default=0.0) + WARMUP_SECONDS
    latencies: list[float] = []
    from_return: list[float] = []
    last = 0.0
    seen: set[tuple[int, str, int]] = set()
    position: dict[tuple[int, str], int] = {}
    for t, index, raw in received:
        frame = json.loads(raw)
        event = frame.get("event") if frame.get("frameType") == "EVENT" else None
        at = committed.get((event["groupId"], event["sequence"])) if event else None
        if at is None:
            run.extra_frames += 1
            continue
        assert event is not None
        key = (index, event["groupId"], event["sequence"])
        if key in seen:
            run.duplicates += 1
            continue
        seen.add(key)
        if event["sequence"] < position.get(key[:2], 0):
            run.out_of_order += 1
        position[key[:2]] = event["sequence"]
        run.delivered += 1
        if at[0] >= warm_from:
            latencies.append((t - at[0]) * 1000)
            from_return.append((t - at[1]) * 1000)
        last = max(last, t)
    if records:
        first = min(r[3] for r in records)
        span = max(r[3] for r in records) - first
        if run.delivered and last > first:
            run.throughput = run.delivered / (last - first)
        if span > 0:
            run.offered = run.expected / span
        run.accept_ms = statistics.mean((r[2] - r[4]) * 1000 for r in records)
    run.p50, run.p99 = percentile(latencies, 50), percentile(latencies, 99)
    run.p50_return, run.p99_return = percentile(from_return, 50), percentile(from_return, 99)
    run.max_ms = max(latencies) if latencies else None
    return run


# --------------------------------------------------------------------------
# The benchmark
# --------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def summarize(runs: list[Run]) -> dict[str, Any]:
    return {
        "commits": median([r.commits for r in runs]),
        "expected": median([r.expected for r in runs]),
        "delivered": median([r.delivered for r in runs]),
        "throughput": median([r.throughput for r in runs]),
        "offered": median([r.offered for r in runs]),
        "p50": median([r.p50 for r in runs]),
        "p99": median([r.p99 for r in runs]),
        "p50_return": median([r.p50_return for r in runs]),
        "p99_return": median([r.p99_return for r in runs]),
        "max": median([r.max_ms for r in runs]),
        "accept_ms": median([r.accept_ms for r in runs]),
        "missing": sum(r.expected - r.delivered for r in runs),
        "errors": sum(r.errors for r in runs),
        "extra": sum(r.extra_frames for r in runs),
        "duplicates": sum(r.duplicates for r in runs),
        "out_of_order": sum(r.out_of_order for r in runs),
        "closed": sum(r.closed_early for r in runs),
        "notes": sorted({n.split(": ", 1)[-1] for r in runs for n in r.notes if "closed by the server" in n}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one short repetition per measurement (< 2 minutes)")
    parser.add_argument("--rate-one", type=float, default=20.0, help="commits/s in one_group (default 20)")
    parser.add_argument("--rate-many", type=float, default=40.0, help="commits/s over many_groups (default 40)")
    parser.add_argument("--duration", type=float, help="seconds of commits per measurement (10; quick 5)")
    parser.add_argument("--repeat", type=int, help="repetitions per measurement (3; quick 1)")
    parser.add_argument("--head-poll", type=float,
                        help=f"MWP_HEAD_POLL_SECONDS for daphne (default {HEAD_POLL_SECONDS:g})")  # fmt: skip
    parser.add_argument("--topology", choices=("one_group", "many_groups"), help="run one topology only")
    parser.add_argument("--keep-logs", action="store_true", help="keep the temporary directory with the logs")
    parser.add_argument("--floor", action="store_true", help="also measure the cross-machine floor (PostgreSQL, Redis)")
    # Internal: the worker processes.
    parser.add_argument("--role", choices=("committer", "publisher", "bare-server", "floor-publisher"),
                        help=argparse.SUPPRESS)  # fmt: skip
    parser.add_argument("--floor-db", help=argparse.SUPPRESS)
    parser.add_argument("--floor-redis", help=argparse.SUPPRESS)
    parser.add_argument("--fixtures", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.role == "committer":
        return committer_main(args.fixtures)
    if args.role == "publisher":
        return publisher_main(args.url, args.fixtures)
    if args.role == "bare-server":
        return bare_server_main(args.port, args.floor_db, args.floor_redis)
    if args.role == "floor-publisher":
        return floor_publisher_main(args.fixtures, args.floor_db, args.floor_redis)

    duration = args.duration or (4.0 if args.quick else 10.0)
    drain = 2.0 if args.quick else DRAIN_SECONDS
    repeat = args.repeat or (1 if args.quick else 3)
    scenarios = [args.topology] if args.topology else ["one_group", "many_groups"]
    rates = {"one_group": args.rate_one, "many_groups": args.rate_many}
    started = time.monotonic()
    redis_url = os.environ.get("MWP_REDIS_URL", "")
    if args.floor and not (redis_url and os.environ.get("MWP_DATABASE_URL", "").startswith(("postgres", "pgsql"))):
        raise SystemExit("--floor needs MWP_DATABASE_URL=postgres://... and MWP_REDIS_URL")
    sides = ("project", "bare", "floor") if args.floor else ("project", "bare")

    if args.head_poll is None:
        args.head_poll = HEAD_POLL_SECONDS
    backends = choose_backends(args.head_poll)
    configure_env(backends, args.head_poll)
    var = Path(backends.var_dir)
    log(f"fanout: {SUBSCRIBERS} subscribers; one_group = 1 Group x {SUBSCRIBERS}, "
        f"many_groups = {SUBSCRIBERS} Groups x 1")  # fmt: skip
    log(f"  database:      {backends.database}")
    log(f"  channel layer: {backends.layer}")
    log(
        f"  MWP_HEAD_POLL_SECONDS={args.head_poll:g}, MWP_DEBUG=0; {duration:.0f} s of commits per measurement, "
        f"{repeat} repetition(s); rates: one_group {rates['one_group']:g}/s, many_groups {rates['many_groups']:g}/s"
    )
    if not os.environ.get("MWP_REDIS_URL"):
        log("  (MWP_REDIS_URL not set: no Redis; set it to measure delivery through the Redis channel layer)")
    if not backends.postgres_url:
        log("  (MWP_DATABASE_URL not PostgreSQL: embedded SQLite; set it to postgres://... for PostgreSQL)")

    servers: list[Server] = []
    workers: list[Worker] = []
    failed = False
    results: dict[tuple[str, str], list[Run]] = defaultdict(list)
    try:
        t0 = time.monotonic()
        setup_django(migrate=True)
        fx = build_fixtures()
        fixtures_path = var / "fixtures.json"
        fixtures_path.write_text(json.dumps(fx))
        frame_bytes = len(json.dumps(fx["template"], separators=(",", ":")))
        log(f"  set up (migrate + fixtures through accept()) in {time.monotonic() - t0:.1f} s; "
            f"event frame ~{frame_bytes} bytes")  # fmt: skip

        daphne_port, bare_port = free_port(), free_port()
        servers.append(Server("daphne", daphne_argv(daphne_port), var / "daphne.log", daphne_port))
        servers.append(Server("bare server", [sys.executable, str(Path(__file__).resolve()), "--role", "bare-server",
                                              "--port", str(bare_port)], var / "bare.log", bare_port))  # fmt: skip
        committer = Worker("committer", ["--role", "committer", "--fixtures", str(fixtures_path)],
                           var / "committer.log")  # fmt: skip
        workers.append(committer)
        publisher = Worker("publisher", ["--role", "publisher", "--fixtures", str(fixtures_path),
                                         "--url", f"ws://127.0.0.1:{bare_port}"], var / "publisher.log")  # fmt: skip
        workers.append(publisher)
        log(f"  daphne pid {servers[0].proc.pid} on 127.0.0.1:{daphne_port}; bare server pid {servers[1].proc.pid} "
            f"on 127.0.0.1:{bare_port}")  # fmt: skip
        project_url = f"ws://127.0.0.1:{daphne_port}/mwp/0.1"
        bare_url = f"ws://127.0.0.1:{bare_port}"
        floor_url, floor_publisher = "", None
        if args.floor:
            import psycopg

            with psycopg.connect(conninfo(backends.database_url), autocommit=True) as db:
                db.execute(f"CREATE TABLE {FLOOR_TABLE} (group_id text, sequence integer, frame text,"
                           " PRIMARY KEY (group_id, sequence))")  # fmt: skip
            floor_port = free_port()
            floor_args = ["--floor-db", backends.database_url, "--floor-redis", redis_url]
            servers.append(Server("floor server", [sys.executable, str(Path(__file__).resolve()), "--role",
                                                   "bare-server", "--port", str(floor_port), *floor_args],
                                  var / "floor.log", floor_port))  # fmt: skip
            floor_publisher = Worker("floor publisher", ["--role", "floor-publisher", "--fixtures",
                                                         str(fixtures_path), *floor_args],
                                     var / "floor-publisher.log")  # fmt: skip
            workers.append(floor_publisher)
            floor_url = f"ws://127.0.0.1:{floor_port}"

        def plan_of(side: str, scenario: str, h: dict[str, int]) -> tuple[list[tuple[str, int]], list[str]]:
            one = scenario == "one_group"
            groups = [fx["one_group"]] if one else list(fx["many_groups"])
            followed = [fx["one_group"]] * SUBSCRIBERS if one else list(fx["many_groups"])
            return [(f"urn:uuid:{g}", h[g] - 1 if side == "project" else 0) for g in followed], groups

        async def one_run(side: str, scenario: str, h: dict[str, int]) -> Run:
            url, worker = {"project": (project_url, committer), "bare": (bare_url, publisher),
                           "floor": (floor_url, floor_publisher)}[side]  # fmt: skip
            assert worker is not None
            plan, groups = plan_of(side, scenario, h)
            subs = Subscribers(side, url, fx["subscribers"])
            try:
                return await measure(subs, scenario, worker, plan, groups, rates[scenario], duration, drain)
            finally:
                await subs.close()

        all_groups = [fx["one_group"], *fx["many_groups"]]
        for rep in range(repeat):
            for scenario in scenarios:
                # Rotate which side goes first, so none always runs on a warmer machine.
                for side in sides[rep % len(sides) :] + sides[: rep % len(sides)]:
                    # The subscribers' process is the measuring instrument:
                    # its own full collections (100 ms with 20,000 frames
                    # received) would be charged to whichever side was
                    # running. No collection during a measurement, one after.
                    gc.collect()
                    gc.disable()
                    try:
                        run = asyncio.run(one_run(side, scenario, heads(all_groups)))
                    finally:
                        gc.enable()
                    results[(scenario, side)].append(run)
                    log(f"  run {rep + 1}/{repeat} {scenario:<11} {side:<7} subscribed in {run.connect_s:4.1f} s  "
                        f"commits {run.commits:>4}  "
                        f"delivered {run.delivered:>5}/{run.expected:<5}  {fmt(run.throughput, 0):>6} ev/s  "
                        f"p50 {fmt(run.p50):>6} ms  p99 {fmt(run.p99):>6} ms  max {fmt(run.max_ms):>6} ms"
                        + (f"  errors {run.errors}" if run.errors else "")
                        + (f"  duplicates {run.duplicates}" if run.duplicates else "")
                        + (f"  out-of-order {run.out_of_order}" if run.out_of_order else "")
                        + "".join(f"  [{n}]" for n in run.notes))  # fmt: skip
                    time.sleep(0.5)
    except Exception:
        failed = True
        traceback.print_exc()
        for server in servers:
            log(f"--- {server.name} log tail:\n{tail(server.log_file)}")
    finally:
        for worker in workers:
            worker.stop()
        for server in servers:
            server.stop()
        if backends.postgres_url:
            with contextlib.suppress(Exception):
                from django.db import connections

                connections.close_all()
            try:
                pg_admin(backends.postgres_url, "DROP DATABASE IF EXISTS {} WITH (FORCE)")
            except Exception as exc:
                log(f"  could not drop the scratch database {SCRATCH_DB}: {exc}")
        if args.keep_logs or failed:
            log(f"  logs kept in {backends.var_dir}")
        else:
            shutil.rmtree(backends.var_dir, ignore_errors=True)

    # The table.
    label = backends.label()
    print()
    print(f"Fan-out, {label}: medians of {repeat} run(s). Latency = receive - commit: the project's commit is "
          f"time.time() in accept()'s on_commit\nstep (before its channel-layer notice), the bare server's is right "
          f"after the publisher's send() returns;\n'after-return' columns: the project's latency from accept() "
          f"returning instead (it includes the notice, so it is\nsmaller, even negative with Redis).")  # fmt: skip
    headers = ("topology", "side", "commits", "frames exp", "delivered", "offered/s", "events/s", "p50 ms",
               "p99 ms", "max ms", "accept ms", "p50 after-return", "p99 after-return")  # fmt: skip
    rows = []
    summary: dict[tuple[str, str], dict[str, Any]] = {}
    for scenario in scenarios:
        for side in sides:
            runs = results.get((scenario, side), [])
            if not runs:
                continue
            s = summary[(scenario, side)] = summarize(runs)
            rows.append([scenario, side, fmt(s["commits"], 0), fmt(s["expected"], 0), fmt(s["delivered"], 0),
                         fmt(s["offered"], 0), fmt(s["throughput"], 0), fmt(s["p50"]), fmt(s["p99"]),
                         fmt(s["max"]), fmt(s["accept_ms"], 2) if side == "project" else "-",
                         fmt(s["p50_return"]) if side == "project" else "-",
                         fmt(s["p99_return"]) if side == "project" else "-"])  # fmt: skip
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
    for (scenario, side), s in summary.items():
        if s["missing"] or s["errors"] or s["extra"] or s["duplicates"] or s["out_of_order"] or s["closed"]:
            print(f"  {scenario} {side} (over all runs): {s['missing']} frames not delivered within "
                  f"{drain:g} s of the last commit, {s['duplicates']} duplicates, {s['out_of_order']} "
                  f"out of order, {s['errors']} refused commits, {s['extra']} other frames, {s['closed']} "
                  f"subscriber connections closed by the server" + "".join(f" ({n})" for n in s["notes"]))  # fmt: skip
    if os.environ.get("MWP_REDIS_URL") and any(s["closed"] for s in summary.values()):
        print("  note: with redis-py >= 8 the client's socket_timeout defaults to 5 s, the same as channels_redis's "
              "blocking receive,\n  so an idle consumer's receive raises TimeoutError and daphne closes it with 1011; "
              "see daphne.log (--keep-logs)\n  and try MWP_REDIS_URL=redis://...?socket_timeout=30")  # fmt: skip
    print()

    for scenario in scenarios:
        project, bare = summary.get((scenario, "project")), summary.get((scenario, "bare"))
        if project is None or bare is None:
            print(f"RESULT bench={BENCH} metric=throughput_ratio_{scenario} value=nan target>=0.5 ok=false "
                  f"backend={label}")  # fmt: skip
            print(f"RESULT bench={BENCH} metric=p99_ratio_{scenario} value=nan target<=2 ok=false backend={label}")
            continue
        tr = project["throughput"] / bare["throughput"] if project["throughput"] and bare["throughput"] else None
        pr = project["p99"] / bare["p99"] if project["p99"] is not None and bare["p99"] else None
        print(f"RESULT bench={BENCH} metric=throughput_ratio_{scenario} value={fmt(tr, 2)} "
              f"target>={TARGET_THROUGHPUT_RATIO:g} ok={str(tr is not None and tr >= TARGET_THROUGHPUT_RATIO).lower()} "
              f"backend={label}")  # fmt: skip
        print(f"RESULT bench={BENCH} metric=p99_ratio_{scenario} value={fmt(pr, 2)} "
              f"target<={TARGET_P99_RATIO:g} ok={str(pr is not None and pr <= TARGET_P99_RATIO).lower()} "
              f"backend={label}")  # fmt: skip
        for side, s in (("project", project), ("bare", bare)):
            print(f"RESULT bench={BENCH} metric=events_per_s_{scenario}_{side} value={fmt(s['throughput'], 0)} "
                  f"backend={label}")  # fmt: skip
            print(f"RESULT bench={BENCH} metric=p50_ms_{scenario}_{side} value={fmt(s['p50'], 2)} backend={label}")
            print(f"RESULT bench={BENCH} metric=p99_ms_{scenario}_{side} value={fmt(s['p99'], 2)} backend={label}")
        floor = summary.get((scenario, "floor"))
        if floor is not None:
            fr = floor["p99"] / bare["p99"] if floor["p99"] is not None and bare["p99"] else None
            print(f"RESULT bench={BENCH} metric=p99_ratio_floor_{scenario} value={fmt(fr, 2)} backend={label}")
            print(f"RESULT bench={BENCH} metric=p50_ms_{scenario}_floor value={fmt(floor['p50'], 2)} "
                  f"backend={label}")  # fmt: skip
            print(f"RESULT bench={BENCH} metric=p99_ms_{scenario}_floor value={fmt(floor['p99'], 2)} "
                  f"backend={label}")  # fmt: skip
    log(f"fanout: done in {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
