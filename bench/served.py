"""Signed Commands over HTTP through two daphne processes, open-loop, past saturation.

    python bench/served.py [--quick]          the benchmark (issue 16, "Done when"; DESIGN §8)

Needs PostgreSQL and Redis: ``MWP_DATABASE_URL=postgres://...`` and
``MWP_REDIS_URL=redis://...``; without them it says so and prints skipped
RESULT lines. On that server it creates a scratch database ``bench_served``,
migrates it, and drops it at the end (``--keep-db`` keeps it).

**Project side.** Two ``daphne`` processes serve ``mwportal.asgi:application``
on PostgreSQL with the Redis channel layer, ``MWP_DEBUG=0``, with the
project's defaults otherwise (the in-flight bound of
``missions/backpressure.py``, the connection settings of
``mwportal/settings.py``). The fixtures are built through
``accept_document()`` with signed MWP 0.1 Command documents
(``bench/_commands_project.py``): one Organization, a person who owns the
Missions (``mission.create`` is a human Command), and ``GROUPS`` Mission
Groups whose Coordinator is one Agent (with its Agent Card and a session).
Every request is ``POST /api/v0.1/commands`` (DESIGN §5) with the
Coordinator's signed ``work.authorize`` document (PROTOCOL §15.1; a new
WorkItem with a full normative Work Contract, no compare-and-set, so none
waits on an earlier one) into the Groups in turn, alternating between the
two processes as a proxy would; the server verifies it in the six stages of
§6.4 and accepts it. Documents are signed before each step (signing is the
client's cost) and sent by this process over keep-alive HTTP/1.1
connections (a small asyncio client; a new connection whenever none is idle,
so no request waits for another's answer).

**Raw baseline**, in the same run: the same ramp, the same client, the same
two-process daphne, serving instead a minimal ASGI app (``raw_application``
below) that reads the body, parses it as JSON, and INSERTs it under its
``actionId`` into a table of the same database (``action_id uuid PRIMARY
KEY, body jsonb``; no verification: the floor under the project), from
``RAW_POOL`` autocommit connections per process; it answers 201.

**The ramp** (open loop): Poisson arrivals at a rate that starts at
``--start-rate`` and grows by ``--growth`` each step of ``--step-seconds``
(longer at low rates: at least ``--min-samples`` requests, so that the p99
is not just the slowest request);
each request is sent at its arrival time whatever the earlier ones are doing,
and its latency is measured from that time (so a server that falls behind is
charged for the wait). A step is *sustained* when every request was answered
201 and the p99 latency is under 100 ms; the ramp stops at the first step
that is not (each such step is tried once more first: one hiccup of a
shared machine should not end a ramp of short steps). Then the project runs
one step (twice as long) at **twice its highest sustained rate** and one at
four times (``--overload``), and counts the answers there: 201, ``BACKPRESSURE``
(429 with ``retryAfterMs``), ``RATE_LIMITED`` (429 with ``retryAfterMs``),
**server errors** (every 5xx),
other refusals, transport failures and requests with no answer within
``TIMEOUT_S``. Server errors at twice the rate must be 0 (the target). The peak number of PostgreSQL
connections of the side being measured is sampled throughout (the
project's count includes this process's one).

Each side's ramp is repeated ``--repeat`` times (default 3, ``--quick`` 1),
project and raw interleaved; medians are reported. ``--quick`` runs 2 s steps
(under two minutes, set-up included).

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
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The benchmarks' shared pieces: the Command benchmark's signing personas and
# normative Work Contract, and the fan-out benchmark's port, log and percentile helpers.
from bench._commands_project import COORDINATOR_EPOCH, Persona, work_contract  # noqa: E402
from bench.fanout import conninfo, free_port, percentile, tail, wait_port  # noqa: E402

BENCH = "served"
SCRATCH_DB = "bench_served"
RAW_TABLE = "served_raw_command"
RAW_APPLICATION_NAME = "mwp-served-raw"  # how the connection sampler tells the raw side's connections apart
GROUPS = 16
PROCESSES = 2
RAW_POOL = 8  # the project's default in-flight bound per process on PostgreSQL (missions/backpressure.py)
P99_LIMIT_MS = 100.0
TIMEOUT_S = 10.0
MAX_OUTSTANDING = 2000  # requests in flight from this client; past it a request counts as not sent
COMMANDS_PATH = "/api/v0.1/commands"
WARMUP_RATE, WARMUP_SECONDS = 20.0, 1.5


def log(msg: str) -> None:
    """Progress goes to stderr; stdout carries the table and the RESULT lines."""
    print(msg, file=sys.stderr, flush=True)


def fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def scratch_url(url: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + SCRATCH_DB))


def pg_admin(url: str, statement: str) -> None:
    import psycopg
    from psycopg import sql

    maintenance = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(conninfo(maintenance), autocommit=True) as conn:
        conn.execute(sql.SQL(statement).format(sql.Identifier(SCRATCH_DB)))


# --------------------------------------------------------------------------
# The raw baseline: a minimal ASGI app (served by daphne as bench.served:raw_application)
# --------------------------------------------------------------------------

_raw_pool: asyncio.Queue[Any] | None = None
_raw_pool_lock: asyncio.Lock | None = None


async def _raw_connection_pool() -> asyncio.Queue[Any]:
    global _raw_pool, _raw_pool_lock
    if _raw_pool is not None:
        return _raw_pool
    if _raw_pool_lock is None:
        _raw_pool_lock = asyncio.Lock()
    async with _raw_pool_lock:
        if _raw_pool is None:
            import psycopg

            pool: asyncio.Queue[Any] = asyncio.Queue()
            for _ in range(RAW_POOL):
                conn = await psycopg.AsyncConnection.connect(
                    os.environ["MWP_BENCH_RAW_DSN"], autocommit=True, application_name=RAW_APPLICATION_NAME
                )
                pool.put_nowait(conn)
            _raw_pool = pool
    return _raw_pool


async def raw_application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Read the body, parse it, INSERT it, answer 201: the floor under the project."""
    if scope["type"] != "http":
        return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    document = json.loads(body)
    action_id = str(document["actionId"])
    pool = await _raw_connection_pool()
    conn = await pool.get()
    try:
        await conn.execute(
            f"INSERT INTO {RAW_TABLE} (action_id, body) VALUES (%s, %s)",  # noqa: S608  (a constant name)
            (action_id.removeprefix("urn:uuid:"), body.decode()),
        )
    finally:
        pool.put_nowait(conn)
    answer = json.dumps({"actionId": action_id}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
    await send({"type": "http.response.start", "status": 201, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


# --------------------------------------------------------------------------
# Set-up: database, Django, fixtures through accept()
# --------------------------------------------------------------------------


def setup_django() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


def build_fixtures() -> tuple[Persona, list[str]]:
    """The Coordinator that sends every Command, and its Mission Groups."""
    from bench._commands_project import COORDINATE, make_principal, new_mission, with_card
    from missions.commands import create_organization

    create_organization("served", "Served bench")
    owner = make_principal("served", "Olivia Owner", ["mission_owner"], kind="person")
    coordinator = with_card(make_principal("served", "Carl Coordinator", ["coordinator"]), COORDINATE)
    groups = [new_mission(owner, coordinator, [], "Served") for _ in range(GROUPS)]
    return coordinator, groups


def sign_bodies(coordinator: Persona, groups: list[str], count: int, start: int) -> list[bytes]:
    """``count`` signed ``work.authorize`` documents, each a new WorkItem, as request bodies."""
    contract = work_contract()
    bodies = []
    for k in range(count):
        item = str(uuid.uuid4())
        bodies.append(
            coordinator.document(
                "work.authorize",
                groups[(start + k) % len(groups)],
                {"workItemId": f"urn:uuid:{item}", "contract": contract},
                work_item_id=item,
                coordinator_epoch=COORDINATOR_EPOCH,
            )
        )
    return bodies


# --------------------------------------------------------------------------
# Servers
# --------------------------------------------------------------------------


class Server:
    """One daphne process on a free port; its output goes to ``log_file``."""

    def __init__(self, app: str, env: dict[str, str], log_file: Path):
        self.port = free_port()
        self.log_file = log_file
        self.out = open(log_file, "ab")  # noqa: SIM115  (closed in stop())
        self.proc = subprocess.Popen(  # noqa: S603  (daphne, this interpreter)
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), app],
            cwd=ROOT, env=env, stdout=self.out, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def wait_ready(self, timeout: float = 60) -> None:
        wait_port(self.port, self.proc, "daphne", self.log_file, timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.out.close()


def start_servers(app: str, env: dict[str, str], var: Path, name: str) -> list[Server]:
    servers = [Server(app, env, var / f"{name}-{k}.log") for k in range(PROCESSES)]
    for server in servers:
        server.wait_ready()
    return servers


class ConnectionSampler:
    """The peak number of PostgreSQL connections to the scratch database of
    the side being measured (``side``), sampled every 0.25 s: the raw app's
    by their application name, the project's (and this process's) all others."""

    def __init__(self, admin_url: str):
        self.admin_url = admin_url
        self.peak = 0
        self.side = "project"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def reset(self) -> int:
        peak, self.peak = self.peak, 0
        return peak

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(conninfo(self.admin_url), autocommit=True) as conn:
            while not self._stop.wait(0.25):
                row = conn.execute(
                    "SELECT count(*) FILTER (WHERE application_name = %s),"
                    " count(*) FILTER (WHERE application_name <> %s)"
                    " FROM pg_stat_activity WHERE datname = %s",
                    (RAW_APPLICATION_NAME, RAW_APPLICATION_NAME, SCRATCH_DB),
                ).fetchone()
                count = None if row is None else (row[0] if self.side == "raw" else row[1],)
                self.peak = max(self.peak, int(count[0]) if count else 0)


# --------------------------------------------------------------------------
# The client: HTTP/1.1 keep-alive, open loop
# --------------------------------------------------------------------------


class TransportError(Exception):
    """The connection failed before a whole response arrived."""


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter


class HttpClient:
    """POSTs over keep-alive connections; a new one whenever none is idle, so
    no request waits for another's answer."""

    def __init__(self) -> None:
        self.idle: dict[int, list[_Conn]] = {}
        self.opened = 0

    async def _take(self, port: int) -> tuple[_Conn, bool]:
        pool = self.idle.setdefault(port, [])
        if pool:
            return pool.pop(), True
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        self.opened += 1
        return _Conn(reader, writer), False

    @staticmethod
    def _drop(conn: _Conn) -> None:
        with contextlib.suppress(Exception):
            conn.writer.close()

    async def post(self, port: int, path: str, body: bytes) -> tuple[int, bytes]:
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
        for attempt in (0, 1):
            conn, reused = await self._take(port)
            try:
                conn.writer.write(head + body)
                status_and_headers = await conn.reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                self._drop(conn)
                partial = getattr(exc, "partial", b"")
                # An idle connection the server had closed: send again on a new
                # one (a Command is idempotent by its Action ID anyway).
                if reused and attempt == 0 and not partial:
                    continue
                raise TransportError(f"{type(exc).__name__}: {exc}") from None
            except BaseException:
                self._drop(conn)
                raise
            try:
                status, answer, keep = await self._read_rest(conn, status_and_headers)
            except (asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
                self._drop(conn)
                raise TransportError(f"{type(exc).__name__}: {exc}") from None
            except BaseException:
                self._drop(conn)
                raise
            if keep:
                self.idle[port].append(conn)
            else:
                self._drop(conn)
            return status, answer
        raise AssertionError("unreachable")

    @staticmethod
    async def _read_rest(conn: _Conn, raw: bytes) -> tuple[int, bytes, bool]:
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            body = await conn.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int((await conn.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    while (await conn.reader.readuntil(b"\r\n")) != b"\r\n":
                        pass
                    break
                parts.append(await conn.reader.readexactly(size))
                await conn.reader.readexactly(2)
            body = b"".join(parts)
        else:
            body = await conn.reader.read()  # the server closes to end the body
            return status, body, False
        return status, body, headers.get("connection", "").lower() != "close"

    def close(self) -> None:
        for pool in self.idle.values():
            for conn in pool:
                self._drop(conn)
        self.idle.clear()


def classify(status: int, body: bytes) -> str:
    """ok, backpressure, rate_limited, server_error, refused."""
    if 200 <= status < 300:
        return "ok"
    error: dict[str, Any] = {}
    with contextlib.suppress(ValueError):
        document = json.loads(body)  # the bare §19 error document
        error = document if isinstance(document, dict) else {}
    retry = isinstance(error.get("retryAfterMs"), int) and error.get("retryable") is True
    if status == 429 and error.get("code") == "BACKPRESSURE" and retry:
        return "backpressure"
    if status == 429 and error.get("code") == "RATE_LIMITED" and retry:
        return "rate_limited"
    if status >= 500:
        return "server_error"
    return "refused"


@dataclass
class Step:
    rate: float
    seconds: float
    sent: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    ok_ms: list[float] = field(default_factory=list)
    shed_ms: list[float] = field(default_factory=list)
    samples: dict[str, str] = field(default_factory=dict)  # one example answer per failing kind
    peak_connections: int = 0

    @property
    def p50(self) -> float | None:
        return percentile(self.ok_ms, 50)

    @property
    def p99(self) -> float | None:
        return percentile(self.ok_ms, 99)

    @property
    def sustained(self) -> bool:
        p99 = self.p99
        return self.sent > 0 and self.counts["ok"] == self.sent and p99 is not None and p99 < P99_LIMIT_MS

    @property
    def accepted_per_s(self) -> float:
        return self.counts["ok"] / self.seconds

    def line(self) -> str:
        kinds = " ".join(f"{k} {v}" for k, v in sorted(self.counts.items()) if k != "ok")
        return (f"{self.rate:7.1f}/s x {self.seconds:.0f} s: sent {self.sent:5d}  201 {self.counts['ok']:5d}  "
                f"p50 {fmt(self.p50, 1):>6} ms  p99 {fmt(self.p99, 1):>7} ms  {kinds}"
                f"  [PG connections <= {self.peak_connections}]").rstrip()  # fmt: skip


async def run_step(client: HttpClient, ports: list[int], bodies: list[bytes], rate: float, seconds: float,
                   seed: int) -> Step:  # fmt: skip
    """Poisson arrivals at ``rate`` for ``seconds``; each request sent at its
    arrival time, its latency counted from that time."""
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    step = Step(rate, seconds)
    outstanding = 0

    async def one(k: int, due: float) -> None:
        nonlocal outstanding
        outstanding += 1
        try:
            status, answer = await asyncio.wait_for(
                client.post(ports[k % len(ports)], COMMANDS_PATH, bodies[k]), TIMEOUT_S
            )
        except TimeoutError:
            step.counts["timeout"] += 1
            return
        except (TransportError, OSError) as exc:
            step.counts["transport_error"] += 1
            step.samples.setdefault("transport_error", str(exc)[:300])
            return
        finally:
            outstanding -= 1
        elapsed_ms = (loop.time() - due) * 1000
        kind = classify(status, answer)
        step.counts[kind] += 1
        if kind == "ok":
            step.ok_ms.append(elapsed_ms)
        elif kind in ("backpressure", "rate_limited"):
            step.shed_ms.append(elapsed_ms)
        else:
            step.samples.setdefault(kind, f"{status} {answer[:300]!r}")

    tasks = []
    start = loop.time() + 0.05
    due = start
    while True:
        due += rng.expovariate(rate)
        if due >= start + seconds or step.sent >= len(bodies):
            break
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if outstanding >= MAX_OUTSTANDING:
            step.counts["not_sent"] += 1
        else:
            tasks.append(asyncio.create_task(one(step.sent, due)))
        step.sent += 1
    await asyncio.gather(*tasks)
    return step


@dataclass
class Ramp:
    steps: list[Step]
    overloads: dict[float, Step] = field(default_factory=dict)  # factor of the best rate -> step

    @property
    def best(self) -> Step | None:
        sustained = [s for s in self.steps if s.sustained]
        return sustained[-1] if sustained else None


class Side:
    """One side (project or raw) under test: its servers and how to sign its bodies."""

    def __init__(self, name: str, servers: list[Server], signer: Persona, groups: list[str]):
        self.name, self.servers, self.signer, self.groups = name, servers, signer, groups
        self.signed = 0

    def bodies(self, count: int) -> list[bytes]:
        bodies = sign_bodies(self.signer, self.groups, count, self.signed)
        self.signed += count
        return bodies


def measure_step(side: Side, sampler: ConnectionSampler, rate: float, seconds: float, seed: int) -> Step:
    expected = int(rate * seconds * 1.3 + 6 * math.sqrt(rate * seconds) + 20)
    bodies = side.bodies(expected)

    async def go() -> Step:
        client = HttpClient()
        try:
            return await run_step(client, [s.port for s in side.servers], bodies, rate, seconds, seed)
        finally:
            client.close()

    sampler.side = side.name
    sampler.reset()
    # This process is the measuring instrument: no collection of its own
    # during a step, one between steps.
    gc.collect()
    gc.disable()
    try:
        step = asyncio.run(go())
    finally:
        gc.enable()
    step.peak_connections = sampler.reset()
    return step


def ramp(side: Side, sampler: ConnectionSampler, args: argparse.Namespace, rep: int, overloads: list[float]) -> Ramp:
    measure_step(side, sampler, WARMUP_RATE, WARMUP_SECONDS, seed=rep)  # first connections, first calls
    result = Ramp([])
    rate = args.start_rate
    k = 0
    while rate <= args.max_rate:
        # Long enough for a p99 that is not just the slowest request.
        seconds = max(args.step_seconds, args.min_samples / rate)
        step = measure_step(side, sampler, rate, seconds, seed=1000 * rep + k)
        log(f"  {side.name:7} run {rep + 1}  {step.line()}")
        if not step.sustained:
            # One hiccup of a shared machine (another process's burst) ends a
            # ramp of short steps: a step not sustained is tried once more.
            again = measure_step(side, sampler, rate, seconds, seed=1000 * rep + 500 + k)
            log(f"  {side.name:7} run {rep + 1}  {again.line()}  (again)")
            step = again if again.sustained else step
        result.steps.append(step)
        if not step.sustained:
            break
        rate *= args.growth
        k += 1
    best = result.best
    for factor in overloads:
        if best is None:
            break
        time.sleep(0.5)
        step = measure_step(side, sampler, factor * best.rate, 2 * args.step_seconds, seed=1000 * rep + 900 + k)
        result.overloads[factor] = step
        log(f"  {side.name:7} run {rep + 1}  at {factor:g}x {best.rate:.1f}/s: {step.line()}")
        for kind, sample in step.samples.items():
            log(f"    e.g. {kind}: {sample}")
    for step in result.steps:
        for kind, sample in step.samples.items():
            log(f"    {side.name} at {step.rate:.1f}/s e.g. {kind}: {sample}")
    return result


# --------------------------------------------------------------------------


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def skipped(why: str) -> int:
    log(f"served: SKIPPED: {why}. This benchmark needs PostgreSQL and Redis: set "
        f"MWP_DATABASE_URL=postgres://user@host:port/db (a scratch database {SCRATCH_DB} is created there "
        f"and dropped) and MWP_REDIS_URL=redis://host:port/0.")  # fmt: skip
    note = why.replace(" ", "_")
    print(f"RESULT bench={BENCH} metric=server_errors_at_2x value=nan target<=0 ok=skipped note={note}")
    print(f"RESULT bench={BENCH} metric=max_rate_p99_under_{P99_LIMIT_MS:.0f}ms value=nan note={note}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 s steps, one run per side (under two minutes)")
    parser.add_argument("--repeat", type=int, default=0, help="ramps per side (default 3; --quick: 1)")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="seconds per step (default 4; --quick: 2)")
    parser.add_argument(
        "--min-samples", type=int, default=0, help="a step lasts until at least this many requests (100; full: 200)"
    )
    parser.add_argument("--start-rate", type=float, default=20.0, help="the first step's rate (requests/s)")
    parser.add_argument("--growth", type=float, default=1.25, help="each step's rate over the previous one's")
    parser.add_argument("--max-rate", type=float, default=5000.0, help="the ramp stops here in any case")
    parser.add_argument("--keep-db", action="store_true", help=f"keep the scratch database {SCRATCH_DB}")
    parser.add_argument("--keep-logs", action="store_true", help="keep the temporary directory with daphne's logs")
    parser.add_argument(
        "--overload", default="2,4", help="after the ramp, steps at these multiples of the best rate (2: the target)"
    )
    args = parser.parse_args(argv)
    try:
        overloads = sorted({float(x) for x in args.overload.split(",") if x.strip()} | {2.0})
    except ValueError:
        parser.error(f"--overload: comma-separated numbers, not {args.overload!r}")
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.step_seconds = args.step_seconds or (2.0 if args.quick else 4.0)
    args.min_samples = args.min_samples or (100 if args.quick else 200)
    if args.growth <= 1 or args.start_rate <= 0:
        parser.error("--growth must be above 1 and --start-rate above 0")

    url = os.environ.get("MWP_DATABASE_URL", "")
    redis_url = os.environ.get("MWP_REDIS_URL", "")
    if not url.startswith(("postgres://", "postgresql://", "pgsql://")):
        return skipped("MWP_DATABASE_URL is not set" if not url else "MWP_DATABASE_URL is not PostgreSQL")
    if not redis_url:
        return skipped("MWP_REDIS_URL is not set")

    started = time.monotonic()
    load_before = os.getloadavg()[0]
    var = Path(tempfile.mkdtemp(prefix="mwp-served-"))
    db_url = scratch_url(url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    pythonpath = env.get("PYTHONPATH", "")
    env.update({
        "DJANGO_SETTINGS_MODULE": "mwportal.settings",
        "MWP_DATABASE_URL": db_url,
        "MWP_REDIS_URL": redis_url,
        "MWP_VAR_DIR": str(var),
        "MWP_DEBUG": "0",
        "MWP_LOG_LEVEL": os.environ.get("MWP_LOG_LEVEL", "WARNING"),
        "MWP_BENCH_RAW_DSN": conninfo(db_url),
        "PYTHONPATH": str(ROOT) + (os.pathsep + pythonpath if pythonpath else ""),
    })  # fmt: skip
    os.environ.update(env)
    servers: list[Server] = []
    failed = False
    project_ramps: list[Ramp] = []
    raw_ramps: list[Ramp] = []
    bound = "?"
    try:
        pg_admin(url, "DROP DATABASE IF EXISTS {} WITH (FORCE)")
        pg_admin(url, "CREATE DATABASE {}")
        t0 = time.monotonic()
        setup_django()
        from django.db import connection, connections

        from missions.backpressure import process_gate

        bound = str(process_gate().limit)
        with connection.cursor() as cur:
            cur.execute(f"CREATE TABLE {RAW_TABLE} (action_id uuid PRIMARY KEY, body jsonb NOT NULL)")
        coordinator, groups = build_fixtures()
        connections.close_all()
        log(f"served: {PROCESSES} daphne processes per side on PostgreSQL ({SCRATCH_DB}) + Redis; "
            f"set up in {time.monotonic() - t0:.1f} s; in-flight bound {bound} Commands per process; "
            f"{args.step_seconds:g} s steps from {args.start_rate:g}/s x {args.growth:g}; "
            f"{args.repeat} run(s)")  # fmt: skip

        with ConnectionSampler(url) as sampler:
            project = Side("project", start_servers("mwportal.asgi:application", env, var, "project"),
                           coordinator, groups)  # fmt: skip
            servers += project.servers
            raw = Side("raw", start_servers("bench.served:raw_application", env, var, "raw"), coordinator, groups)
            servers += raw.servers
            for rep in range(args.repeat):
                # Alternate which side goes first, so neither always runs on a warmer machine.
                order = [("project", project), ("raw", raw)]
                for name, side in order if rep % 2 == 0 else order[::-1]:
                    result = ramp(side, sampler, args, rep, overloads if name == "project" else [])
                    (project_ramps if name == "project" else raw_ramps).append(result)
                    time.sleep(0.5)
    except Exception:
        failed = True
        traceback.print_exc()
        for server in servers:
            log(f"--- {server.log_file.name}:\n{tail(server.log_file)}")
    finally:
        for server in servers:
            server.stop()
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        if not args.keep_db:
            try:
                pg_admin(url, "DROP DATABASE IF EXISTS {} WITH (FORCE)")
            except Exception as exc:
                log(f"  could not drop the scratch database {SCRATCH_DB}: {exc}")
        if args.keep_logs or failed:
            log(f"  logs kept in {var}")
        else:
            shutil.rmtree(var, ignore_errors=True)

    return report(args, project_ramps, raw_ramps, bound, load_before, started, failed)


def report(args: argparse.Namespace, project_ramps: list[Ramp], raw_ramps: list[Ramp], bound: str,
           load_before: float, started: float, failed: bool) -> int:  # fmt: skip
    def bests(ramps: list[Ramp]) -> list[float]:
        return [r.best.rate if r.best else 0.0 for r in ramps]

    project_best, raw_best = median(bests(project_ramps)), median(bests(raw_ramps))
    cpus = os.cpu_count() or 1
    print()
    busy = "  (the machine was busy before the run: expect noise)" if load_before > 0.5 * cpus else ""
    print(f"machine: {cpus} CPUs, 1-min load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after{busy}")
    print(f"Served Commands: signed work.authorize over HTTP, {PROCESSES} daphne processes per side, PostgreSQL + "
          f"Redis; in-flight bound {bound} per process.\nHighest sustained rate = highest step with every request "
          f"201 and p99 < {P99_LIMIT_MS:.0f} ms (latency from the scheduled send time); medians of "
          f"{len(project_ramps)} run(s).")  # fmt: skip
    header = ("side", "runs: highest sustained rate/s", "median", "p50 ms there", "p99 ms there")
    rows = []
    for name, ramps in (("project", project_ramps), ("raw", raw_ramps)):
        best_steps = [r.best for r in ramps if r.best]
        rows.append((name, " ".join(fmt(v, 1) for v in bests(ramps)), fmt(median(bests(ramps)), 1),
                     fmt(median([s.p50 for s in best_steps if s.p50 is not None]), 1),
                     fmt(median([s.p99 for s in best_steps if s.p99 is not None]), 1)))  # fmt: skip
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    ratio = project_best / raw_best if project_best and raw_best else None
    print(f"ratio project / raw (highest sustained rate): {fmt(ratio, 2)}")
    factors = sorted({f for r in project_ramps for f in r.overloads})
    for factor in factors:
        for k, r in enumerate(project_ramps):
            if factor in r.overloads:
                d = r.overloads[factor]
                print(f"at {factor:g}x the highest sustained rate, run {k + 1}: {d.line()}")
                shed_p50, shed_p99 = percentile(d.shed_ms, 50), percentile(d.shed_ms, 99)
                print(f"    accepted {d.accepted_per_s:.1f}/s; shed answered in p50 {fmt(shed_p50, 1)} ms, "
                      f"p99 {fmt(shed_p99, 1)} ms")  # fmt: skip
    print(f"  total {time.monotonic() - started:.0f} s")
    print()

    doubles = [r.overloads[2.0] for r in project_ramps if 2.0 in r.overloads]
    errors = sum(d.counts["server_error"] for d in doubles)
    ok = "false" if failed or not doubles else str(errors == 0).lower()
    print(f"RESULT bench={BENCH} metric=server_errors_at_2x value={errors if doubles else 'nan'} target<=0 ok={ok}")
    print(f"RESULT bench={BENCH} metric=max_rate_p99_under_{P99_LIMIT_MS:.0f}ms value={fmt(project_best, 1)}")
    print(f"RESULT bench={BENCH} metric=raw_max_rate_p99_under_{P99_LIMIT_MS:.0f}ms value={fmt(raw_best, 1)}")
    print(f"RESULT bench={BENCH} metric=ratio_vs_raw value={fmt(ratio, 2)}")
    for factor in factors:
        steps = [r.overloads[factor] for r in project_ramps if factor in r.overloads]
        total: Counter[str] = Counter()
        for step in steps:
            total.update(step.counts)
        at = f"at_{factor:g}x"
        if factor != 2.0:
            print(f"RESULT bench={BENCH} metric=server_errors_{at} value={total['server_error']}")
        print(
            f"RESULT bench={BENCH} metric=accepted_per_s_{at} value={fmt(median([s.accepted_per_s for s in steps]), 1)}"
        )
        for kind in ("backpressure", "rate_limited", "timeout", "transport_error", "refused", "not_sent"):
            print(f"RESULT bench={BENCH} metric={kind}_{at} value={total[kind]}")
        print(f"RESULT bench={BENCH} metric=peak_pg_connections_{at} value={max(s.peak_connections for s in steps)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
