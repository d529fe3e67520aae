"""Accepted Commands per second through ``missions.authority.accept()``.

    python bench/commands.py [--quick]          the benchmark (DESIGN §7)
    python bench/commands.py --profile          where accept() spends its time (1 thread):
                                                a per-step wall-clock breakdown, then cProfile

What it measures, on PostgreSQL (``MWP_DATABASE_URL=postgres://...``):

- **mix**: 1,000 Mission Groups; each thread owns a disjoint subset of them and
  sends ``membership.set_roles`` (compare-and-set on the Group revision),
  alternating one member's roles between ``["worker"]`` and
  ``["worker", "reviewer"]``;
- **hot**: one Group (the Organization's administrative Group); one Agent per
  thread sends ``agent_card.publish`` with ``target {"kind": "agent_card",
  "id": agent, "revision": current_version}``;

each at concurrency 1, 4 and 8, against a **raw baseline** measured in the
same run, from the same number of threads, on the same layout (1,000 Groups,
one hot Group): the minimal acceptance transaction issued through psycopg 3
directly (one connection per thread)::

    BEGIN
    SELECT last_sequence, head_hash FROM raw_group WHERE id = $g FOR UPDATE
    UPDATE raw_aggregate SET revision = revision + 1 WHERE id = $a AND revision = $r   -- rowcount 1
    -- sha256 hash chain in Python
    UPDATE raw_group SET last_sequence = ..., head_hash = ... WHERE id = $g
    INSERT INTO raw_event ...      -- LIKE missions_groupevent INCLUDING ALL (same columns, indexes)
    INSERT INTO raw_receipt ...    -- LIKE missions_actionreceipt INCLUDING ALL
    COMMIT

The project side builds its fixtures through ``accept()`` (Organization,
Agents, sessions, ``mission.create``, ``membership.add``), pre-builds,
pre-signs and pre-parses every envelope before a measurement (signing is the
client's cost), and times only ``accept(Command(envelope, Auth.SIGNED))``:
what the REST view does minus HTTP and JSON parsing. Each measurement runs
for a fixed duration (``--quick``: short; otherwise 10 s) from a barrier, is
repeated 3 times interleaved with the raw baseline, and the median
Commands/s is reported; the ratio is median(project) / median(raw).
``--quick`` measures 1 s per run on PostgreSQL and 0.6 s on SQLite, and
0.8 s / 0.5 s per lifecycle run (under two minutes in all, setup included).

**lifecycle** (the issue's "full lifecycle mix"): each thread drives
WorkItems through ``work.authorize``, ``work.offer``, ``work.accept_offer``,
``work.start``, then 5 x (``work.checkpoint``, ``work.start``) (a checkpoint
returns the WorkItem to ``queued``, so every checkpoint needs a new start and
its new Lease ID), ``work.submit`` (Evidence for both acceptance criteria, no
Artifacts) and ``work.accept_result``: 16 Commands per lifecycle. Two
layouts: **spread**, each thread its own Mission Group with its own
coordinator and worker Agents (no Group lock shared between threads), and
**shared**, all threads in one Mission Group (each thread still its own
coordinator/worker pair), at concurrency 1 and 8 (shared: 8 only, and on
PostgreSQL only: SQLite serialises every writer anyway). Only
``work.authorize`` and ``work.offer`` are pre-signed (the offer's expected
revision is 1, every new WorkItem's first); the other 14 Commands depend on
the previous receipt (``aggregate.revision`` for compare-and-set, ``lease_id``
from ``work.start``'s ``grants``) and are built, signed and parsed inside the
timed loop, as a client would; that client cost is measured and shown. The
raw baseline issues the same 16 minimal acceptance transactions per lifecycle
(the first one INSERTs the aggregate row at revision 1 instead of the
compare-and-set UPDATE) with Event bodies of similar size, from the same
number of threads on the same layout. Lifecycles/s = accepted Commands / 16 /
window (a window may end inside a lifecycle; complete lifecycles are counted
too); the target is median(project) / median(raw) >= 0.5 at concurrency 8,
spread layout.

    python bench/commands.py --part lifecycle [--quick]   only the lifecycle mix
    python bench/commands.py --profile --part lifecycle   where a lifecycle's time goes
                                                          (per Command type, per handler
                                                          call site, cProfile)

The same script runs the embedded SQLite default (WAL, IMMEDIATE
transactions) with the same workloads and prints its Commands/s (no raw
baseline there).

Settings are read once per process, so the parent process runs the SQLite
part and the PostgreSQL part in child processes of this same script
(``--backend sqlite|postgres``) and prints one table and the RESULT lines.
The PostgreSQL part works in a scratch database (``<db>_bench``) that it
creates and drops; the SQLite part in a temporary directory. Both force
``MWP_DEBUG=0`` (Django's DEBUG records every query) and ignore
``MWP_REDIS_URL`` (in-memory channel layer), so the numbers are about the
acceptance transaction.

Exit status 0 even when a target is missed (the numbers are the report); 1
when a part crashed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
BENCH = "commands"
CONCURRENCY = (1, 4, 8)
WORKLOADS = ("mix", "hot")
N_GROUPS = 1000
TARGET = 0.5  # project / raw at concurrency 8, both workloads
TARGET_CONCURRENCY = 8
REPEATS = 3
# Seconds per measurement. --quick keeps the whole run under two minutes:
# 36 PostgreSQL measurements and 18 SQLite ones, plus setup.
DURATION_FULL = {"postgres": 10.0, "sqlite": 10.0}
DURATION_QUICK = {"postgres": 1.0, "sqlite": 0.6}
# The lifecycle runs in --quick: 18 on PostgreSQL, 6 on SQLite (+ warm-ups).
LIFECYCLE_DURATION_QUICK = {"postgres": 0.8, "sqlite": 0.5}
WARMUP_SECONDS = 0.3
PARTS = ("commands", "lifecycle")
# The lifecycle mix: (layout, threads) cells; the target is spread at 8 threads.
# SQLite serialises every writer of the database (IMMEDIATE transactions), so
# one shared Group is no different there and is not measured.
LIFECYCLE_CELLS = (("spread", 1), ("spread", 8), ("shared", 8))
SQLITE_LIFECYCLE_CELLS = (("spread", 1), ("spread", 8))
LIFECYCLE_CHECKPOINTS = 5


def log(msg: str) -> None:
    """Progress goes to stderr so stdout carries only the table and RESULT lines."""
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Parent: run the parts, print the table and the RESULT lines
# --------------------------------------------------------------------------


def postgres_url() -> tuple[str | None, str]:
    """The PostgreSQL URL from MWP_DATABASE_URL, or None and why not."""
    url = os.environ.get("MWP_DATABASE_URL", "")
    if not url:
        return None, "MWP_DATABASE_URL is not set"
    if not url.startswith(("postgres://", "postgresql://", "pgsql://")):
        return None, f"MWP_DATABASE_URL is not PostgreSQL ({url.split(':', 1)[0]}://...)"
    return url, ""


def run_child(backend: str, args: argparse.Namespace, extra: list[str]) -> tuple[dict[str, Any] | None, str]:
    with tempfile.TemporaryDirectory(prefix="mwp-bench-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--backend", backend, "--out", str(out), *extra]
        if args.quick:
            cmd.append("--quick")
        proc = subprocess.run(cmd, check=False)  # noqa: S603 (this very script)
        if proc.returncode != 0 or not out.exists():
            return None, f"the {backend} part exited with status {proc.returncode}"
        return json.loads(out.read_text()), ""


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}"


def result_line(metric: str, value: float | None, digits: int, target: float | None = None, note: str = "") -> str:
    shown = "nan" if value is None else f"{value:.{digits}f}"
    line = f"RESULT bench={BENCH} metric={metric} value={shown}"
    if target is not None:
        met = value is not None and value >= target
        ok = "skipped" if note else ("true" if met else "false")
        line += f" target>={target} ok={ok}"
    if note:
        line += f" note={note}"
    return line


def parent(args: argparse.Namespace, extra: list[str]) -> int:
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    crashed: list[str] = []
    pg_url, pg_why = postgres_url()

    if args.profile:
        backend = "postgres" if pg_url else "sqlite"
        if not pg_url:
            log(f"PostgreSQL part skipped: {pg_why}; profiling SQLite instead")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--backend", backend, "--profile", *extra]
        return subprocess.run(cmd, check=False).returncode  # noqa: S603

    log("== SQLite (embedded default)")
    sqlite, err = run_child("sqlite", args, extra)
    if sqlite is None:
        crashed.append(err)
    postgres: dict[str, Any] | None = None
    if pg_url:
        log("== PostgreSQL")
        postgres, err = run_child("postgres", args, extra)
        if postgres is None:
            crashed.append(err)
    else:
        log(
            f"== PostgreSQL part SKIPPED: {pg_why}. Set MWP_DATABASE_URL=postgres://user@host:port/db "
            f"(a scratch database <db>_bench is created and dropped there)."
        )

    parts = [args.part] if args.part else list(PARTS)
    cpus, load_after = os.cpu_count() or 1, os.getloadavg()[0]
    busy = "  (other processes were busy before the run: expect noise)" if load_before > 0.5 * cpus else ""
    print()
    print(f"machine: {cpus} CPUs, 1-min load average {load_before:.1f} before, {load_after:.1f} after{busy}")
    for part in (postgres, sqlite):
        if part is not None:
            print(
                f"  {part['backend']}: {part['server']}; {part['repeats']} run(s) x {part['duration']:.1f} s "
                f"per cell ({part['lifecycle_duration'] or part['duration']:.1f} s per lifecycle cell); "
                f"setup {part['setup_seconds']:.1f} s"
            )
    if "commands" in parts:
        print_commands_table(postgres, sqlite, pg_url, pg_why)
    if "lifecycle" in parts:
        print_lifecycle_table(postgres, sqlite, pg_url, pg_why)
    for part in (postgres, sqlite):
        if part and part.get("errors"):
            print(f"  {part['backend']}: {part['errors']} refused or failed Commands during measurements (see stderr)")
    print(f"  total {time.monotonic() - started:.0f} s")
    print()

    # RESULT lines: the targets first, then the informational ones.
    skip_note = "" if postgres is not None else ("no_postgresql" if pg_url is None else "postgres_part_failed")
    if "commands" in parts:
        for wl in WORKLOADS:
            cell = postgres["cells"][f"{wl}_c{TARGET_CONCURRENCY}"] if postgres else {}
            print(result_line(f"ratio_vs_raw_c{TARGET_CONCURRENCY}_{wl}", cell.get("ratio"), 2, TARGET, skip_note))
    if "lifecycle" in parts:
        cell = postgres["lifecycle"][f"spread_c{TARGET_CONCURRENCY}"] if postgres else {}
        # Issue 3 asks for the ratio, with no target: informational.
        print(result_line(f"lifecycle_ratio_vs_raw_c{TARGET_CONCURRENCY}", cell.get("ratio"), 2, None, skip_note))
    if postgres and "commands" in parts:
        for wl in WORKLOADS:
            for c in CONCURRENCY:
                cell = postgres["cells"][f"{wl}_c{c}"]
                if c != TARGET_CONCURRENCY:
                    print(result_line(f"ratio_vs_raw_c{c}_{wl}", cell["ratio"], 2))
                print(result_line(f"pg_cps_c{c}_{wl}", cell["project"], 0))
                print(result_line(f"raw_cps_c{c}_{wl}", cell["raw"], 0))
    if postgres and "lifecycle" in parts:
        for lay, c in LIFECYCLE_CELLS:
            cell = postgres["lifecycle"][f"{lay}_c{c}"]
            suffix = f"_c{c}" + ("" if lay == "spread" else "_shared")
            if (lay, c) != ("spread", TARGET_CONCURRENCY):
                print(result_line(f"lifecycle_ratio_vs_raw{suffix}", cell["ratio"], 2))
            print(result_line(f"lifecycles_per_s{suffix}", cell["project"], 1))
            print(result_line(f"raw_lifecycles_per_s{suffix}", cell["raw"], 1))
    if sqlite:
        if "commands" in parts:
            for wl in WORKLOADS:
                for c in CONCURRENCY:
                    print(result_line(f"sqlite_cps_c{c}_{wl}", sqlite["cells"][f"{wl}_c{c}"]["project"], 0))
        if "lifecycle" in parts:
            for lay, c in SQLITE_LIFECYCLE_CELLS:
                suffix = f"_c{c}" + ("" if lay == "spread" else "_shared")
                print(result_line(f"sqlite_lifecycles_per_s{suffix}", sqlite["lifecycle"][f"{lay}_c{c}"]["project"], 1))
    else:
        print(result_line("sqlite_cps_c1_mix", None, 0, note="sqlite_part_failed"))
    for msg in crashed:
        log(f"ERROR: {msg}")
    return 1 if crashed else 0


def print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def print_commands_table(
    postgres: dict[str, Any] | None, sqlite: dict[str, Any] | None, pg_url: str | None, pg_why: str
) -> None:
    print()
    print("Accepted Commands per second (median of runs; ratio = median project / median raw)")
    header = ("backend", "workload", "threads", "project cmd/s", "raw cmd/s", "ratio", "project runs")
    rows: list[tuple[str, ...]] = []
    for part in (postgres, sqlite):
        if part is None:
            continue
        for wl in WORKLOADS:
            for c in CONCURRENCY:
                cell = part["cells"][f"{wl}_c{c}"]
                rows.append(
                    (
                        part["backend"],
                        "1000 Groups" if wl == "mix" else "hot Group",
                        str(c),
                        fmt(cell["project"]),
                        fmt(cell.get("raw")),
                        fmt(cell.get("ratio"), 2),
                        " ".join(fmt(x) for x in cell["project_runs"]),
                    )
                )
    if pg_url is None:
        print(f"  PostgreSQL part SKIPPED: {pg_why}; set MWP_DATABASE_URL=postgres://... to measure it")
        rows.append(("postgresql", "(skipped)", "", "", "", "", pg_why))
    print_table(header, rows)


def print_lifecycle_table(
    postgres: dict[str, Any] | None, sqlite: dict[str, Any] | None, pg_url: str | None, pg_why: str
) -> None:
    print()
    print(
        f"WorkItem lifecycles per second ({COMMANDS_PER_LIFECYCLE} Commands each: authorize, offer, accept_offer, "
        f"start, {LIFECYCLE_CHECKPOINTS} x (checkpoint, start), submit, accept_result)"
    )
    print("  median of runs; ratio = median project / median raw; lifecycles/s = accepted Commands / 16 / window")
    print(
        "  spread = one Mission Group (own coordinator + worker) per thread; shared = one Mission Group for all threads"
    )
    print(
        f"  project: only {' and '.join(PRESIGNED_STEPS)} are pre-signed; the other "
        f"{COMMANDS_PER_LIFECYCLE - len(PRESIGNED_STEPS)} Commands depend on the previous receipt (revision for"
    )
    print(
        "  compare-and-set, lease_id from work.start) and are built, signed and parsed INSIDE the timed loop;"
        " that client cost"
    )
    print("  is included in the project's rate and shown as 'client ms/lc'")
    print("  CPU = CPU-seconds of the benchmark process (all its threads) per second of window: the threads share one")
    print("  interpreter, so near 1.0 the GIL, not PostgreSQL, is the ceiling")
    header = (
        "backend", "layout", "threads", "project lc/s", "raw lc/s", "ratio", "project cmd/s", "raw cmd/s",
        "client ms/lc", "CPU project/raw", "project runs",
    )  # fmt: skip
    rows: list[tuple[str, ...]] = []
    for part in (postgres, sqlite):
        if part is None:
            continue
        for lay, c in LIFECYCLE_CELLS:
            if f"{lay}_c{c}" not in part["lifecycle"]:
                continue
            cell = part["lifecycle"][f"{lay}_c{c}"]
            rows.append(
                (
                    part["backend"],
                    lay,
                    str(c),
                    fmt(cell["project"], 1),
                    fmt(cell.get("raw"), 1),
                    fmt(cell.get("ratio"), 2),
                    fmt(cell["project_cps"]),
                    fmt(cell.get("raw_cps")),
                    f"{cell['build_ms']:.1f}",
                    f"{cell['project_cpu']:.2f}/{fmt(cell.get('raw_cpu'), 2)}",
                    " ".join(fmt(x, 1) for x in cell["project_runs"]),
                )
            )
    if pg_url is None:
        print(f"  PostgreSQL part SKIPPED: {pg_why}; set MWP_DATABASE_URL=postgres://... to measure it")
        rows.append(("postgresql", "(skipped)", "", "", "", "", "", "", "", "", pg_why))
    print_table(header, rows)


# --------------------------------------------------------------------------
# Child: one backend, in a fresh database
# --------------------------------------------------------------------------


def scratch_url(url: str) -> tuple[str, str, str]:
    """``(scratch_url, scratch_db, maintenance_url)`` for a PostgreSQL URL."""
    parts = urlsplit(url)
    base = parts.path.lstrip("/") or "postgres"
    name = f"{base}_bench"
    return urlunsplit(parts._replace(path="/" + name)), name, urlunsplit(parts._replace(path="/" + base))


def conninfo(url: str) -> str:
    """psycopg wants ``postgresql://``; dj-database-url also takes ``postgres://``."""
    scheme, rest = url.split("://", 1)
    return "postgresql://" + rest if scheme in ("postgres", "pgsql", "postgresql") else url


def create_database(maintenance: str, name: str) -> None:
    """Create the scratch database afresh; a stale one left by a crashed run is
    dropped, one that another run is using right now is not."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(conninfo(maintenance), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)).fetchone()
        if row and row[0]:
            raise RuntimeError(
                f"scratch database {name} has {row[0]} open connection(s): is another bench run using it? "
                f"(if it is stale: DROP DATABASE {name} WITH (FORCE))"
            )
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def drop_database(maintenance: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(conninfo(maintenance), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def setup_django(database_url: str, var_dir: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "mwportal.settings"
    os.environ["MWP_DATABASE_URL"] = database_url
    os.environ["MWP_VAR_DIR"] = var_dir
    os.environ["MWP_DEBUG"] = "0"
    os.environ.pop("MWP_REDIS_URL", None)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


def child(args: argparse.Namespace) -> int:
    backend = args.backend
    var_dir = tempfile.mkdtemp(prefix=f"mwp-bench-{backend}-")
    maintenance = scratch = name = ""
    try:
        if backend == "postgres":
            url, why = postgres_url()
            if url is None:
                raise SystemExit(f"PostgreSQL part needs MWP_DATABASE_URL: {why}")
            scratch, name, maintenance = scratch_url(url)
            log(f"  creating scratch database {name}")
            create_database(maintenance, name)
            database_url = scratch
        else:
            database_url = f"sqlite:///{Path(var_dir) / 'bench.sqlite3'}"
        t0 = time.monotonic()
        setup_django(database_url, var_dir)
        log(f"  migrated in {time.monotonic() - t0:.1f} s")
        if args.profile:
            return run_profile(backend, args)
        result = run_backend(backend, args, database_url)
        if args.out:
            Path(args.out).write_text(json.dumps(result))
        return 0
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # noqa: S110 (Django may not be set up yet)
            pass
        if backend == "postgres" and name and not args.keep_db:
            try:
                drop_database(maintenance, name)
                log(f"  dropped scratch database {name}")
            except Exception as exc:
                log(f"  could not drop scratch database {name}: {exc}")
        import shutil

        shutil.rmtree(var_dir, ignore_errors=True)


# --------------------------------------------------------------------------
# Project fixtures, built through accept() as a client would
# --------------------------------------------------------------------------


@dataclass
class BenchAgent:
    id: str
    private_key: str
    public_key: str
    org_slug: str
    session_epoch: int = 0

    def command(self, type_: str, group: str, body: dict[str, Any], **kw: Any) -> Any:
        """A pre-signed, pre-parsed Command, as the REST view hands it to accept()."""
        from missions.authority import Auth, Command
        from mwportal.protocol import make_envelope, parse_envelope

        raw = make_envelope(
            type=type_,
            actor=self.id,
            group=group,
            body=body,
            private_key=self.private_key,
            session_epoch=self.session_epoch,
            **kw,
        )
        return Command(parse_envelope(raw), Auth.SIGNED)

    def open_session(self, admin_group: str) -> None:
        """Through agent.open_session, the handler the sessions view uses."""
        from missions.authority import Auth, Command, accept
        from mwportal.protocol import format_time, make_envelope, parse_envelope, signed

        request = signed(
            self.private_key, {"agent": self.id, "issued_at": format_time(datetime.now(UTC)), "nonce": uuid.uuid4().hex}
        )
        raw = make_envelope(
            type="agent.open_session",
            actor=self.id,
            group=admin_group,
            body={"request": request},
            session_epoch=self.session_epoch,
        )
        receipt = accept(Command(parse_envelope(raw, require_signature=False), Auth.SELF))
        self.session_epoch = receipt["grants"]["session_epoch"]


def make_agent(org_slug: str, admin_group: str, name: str, roles: list[str]) -> BenchAgent:
    from missions.commands import register_agent
    from mwportal.protocol import generate_keypair

    private_key, public_key = generate_keypair()
    agent_id = register_agent(org_slug, name, "agent", roles, public_key)
    agent = BenchAgent(agent_id, private_key, public_key, org_slug)
    agent.open_session(admin_group)
    return agent


@dataclass
class Fixtures:
    admin_group: str
    owner: BenchAgent
    member: str
    groups: list[str]
    hot_agents: list[BenchAgent]


def build_fixtures(backend: str, n_groups: int = N_GROUPS) -> Fixtures:
    from django.db import connection

    from missions.authority import accept
    from missions.commands import create_organization

    _, admin_group = create_organization("bench", "Bench Org")
    owner = make_agent("bench", admin_group, "Olivia Owner", ["mission_owner"])
    member = make_agent("bench", admin_group, "Wanda Worker", ["worker"])
    hot_agents = [make_agent("bench", admin_group, f"Hot Agent {i}", ["worker"]) for i in range(max(CONCURRENCY))]

    groups = [str(uuid.uuid4()) for _ in range(n_groups)]

    def create(chunk: list[str]) -> None:
        try:
            for gid in chunk:
                accept(
                    owner.command(
                        "mission.create",
                        gid,
                        {"mission": str(uuid.uuid4()), "title": "Bench mission", "objective": "Measure"},
                    )
                )
                accept(
                    owner.command(
                        "membership.add",
                        gid,
                        {"agent": member.id, "roles": ["worker"]},
                        target={"kind": "group", "id": gid, "revision": 1},
                    )
                )
        finally:
            connection.close()

    # PostgreSQL commits in parallel; SQLite serialises writers anyway.
    n_threads = 4 if backend == "postgres" else 1
    if n_threads == 1:
        create(groups)
    else:
        threads = [threading.Thread(target=create, args=(groups[i::n_threads],)) for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    from missions.models import Group

    made = Group.objects.filter(id__in=groups).count()
    if made != n_groups:
        raise RuntimeError(f"fixture setup created {made} of {n_groups} Groups")
    return Fixtures(admin_group, owner, member.id, groups, hot_agents)


# --------------------------------------------------------------------------
# Pools: what each thread sends, built before the clock starts
# --------------------------------------------------------------------------


def roles_for(revision: int) -> list[str]:
    """Alternate the member's roles: each accepted set_roles moves the revision by one."""
    return ["worker", "reviewer"] if revision % 2 else ["worker"]


def project_pools(fx: Fixtures, workload: str, threads: int, per_thread: int) -> list[list[Any]]:
    from missions.models import AgentCard, Group

    pools: list[list[Any]] = []
    if workload == "mix":
        revisions = dict(Group.objects.filter(id__in=fx.groups).values_list("id", "revision"))
        revs = {str(k): v for k, v in revisions.items()}
        for t in range(threads):
            mine = fx.groups[t::threads]
            pool = []
            for i in range(per_thread):
                gid = mine[i % len(mine)]
                rev = revs[gid]
                revs[gid] = rev + 1
                pool.append(
                    fx.owner.command(
                        "membership.set_roles",
                        gid,
                        {"agent": fx.member, "roles": roles_for(rev)},
                        target={"kind": "group", "id": gid, "revision": rev},
                    )
                )
            pools.append(pool)
    else:
        for t in range(threads):
            agent = fx.hot_agents[t]
            version = (
                AgentCard.objects.filter(agent_id=agent.id)
                .order_by("-version")
                .values_list("version", flat=True)
                .first()
                or 0
            )
            pool = []
            for i in range(per_thread):
                pool.append(
                    agent.command(
                        "agent_card.publish",
                        fx.admin_group,
                        {"capabilities": [{"id": "summarize", "version": "1.0"}], "max_concurrency": 1 + i % 8},
                        target={"kind": "agent_card", "id": agent.id, "revision": version + i},
                    )
                )
            pools.append(pool)
    return pools


# --------------------------------------------------------------------------
# The raw baseline: psycopg only
# --------------------------------------------------------------------------

RAW_DDL = """
DROP TABLE IF EXISTS raw_receipt, raw_event, raw_aggregate, raw_group;
CREATE TABLE raw_group (id uuid PRIMARY KEY, last_sequence bigint NOT NULL, head_hash varchar(64) NOT NULL,
                        revision integer NOT NULL);
CREATE TABLE raw_aggregate (id uuid PRIMARY KEY, revision integer NOT NULL);
-- Same columns, check constraints and indexes as the project's tables (not the FKs nor the trigger).
CREATE TABLE raw_event (LIKE missions_groupevent INCLUDING ALL);
CREATE TABLE raw_receipt (LIKE missions_actionreceipt INCLUDING ALL);
"""

GENESIS = "0" * 64


@dataclass
class RawLayout:
    url: str
    groups: list[uuid.UUID]  # the 1,000 Groups; each is its own aggregate in "mix"
    hot_group: uuid.UUID
    hot_aggregates: list[uuid.UUID]  # one per thread (the Agent Card stand-in)
    actor: str
    lifecycle_groups: list[uuid.UUID]  # "spread": one per thread
    lifecycle_shared: uuid.UUID  # "shared": every thread


def raw_setup(url: str) -> RawLayout:
    import psycopg

    layout = RawLayout(
        url,
        [uuid.uuid4() for _ in range(N_GROUPS)],
        uuid.uuid4(),
        [uuid.uuid4() for _ in range(max(CONCURRENCY))],
        str(uuid.uuid4()),
        [uuid.uuid4() for _ in range(max(c for _, c in LIFECYCLE_CELLS))],
        uuid.uuid4(),
    )
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute(RAW_DDL)
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO raw_group VALUES (%s, 0, %s, 1)",
                [
                    (g, GENESIS)
                    for g in [*layout.groups, layout.hot_group, *layout.lifecycle_groups, layout.lifecycle_shared]
                ],
            )
            cur.executemany(
                "INSERT INTO raw_aggregate VALUES (%s, 1)", [(a,) for a in [*layout.groups, *layout.hot_aggregates]]
            )
    return layout


@dataclass(slots=True)
class RawCommand:
    group: uuid.UUID
    aggregate: uuid.UUID
    kind: str
    expected: int
    type: str
    action_id: uuid.UUID
    body: dict[str, Any]


def raw_pools(layout: RawLayout, workload: str, threads: int, per_thread: int) -> list[list[RawCommand]]:
    import psycopg

    with psycopg.connect(conninfo(layout.url), autocommit=True) as conn:
        revs = {row[0]: row[1] for row in conn.execute("SELECT id, revision FROM raw_aggregate")}
    pools: list[list[RawCommand]] = []
    for t in range(threads):
        pool = []
        if workload == "mix":
            mine = layout.groups[t::threads]
            for i in range(per_thread):
                g = mine[i % len(mine)]
                rev = revs[g]
                revs[g] = rev + 1
                pool.append(
                    RawCommand(
                        g,
                        g,
                        "group",
                        rev,
                        "membership.roles_set",
                        uuid.uuid4(),
                        {"agent": layout.actor, "roles": roles_for(rev), "membership_epoch": rev},
                    )
                )
        else:
            a = layout.hot_aggregates[t]
            pool = [
                RawCommand(
                    layout.hot_group,
                    a,
                    "agent_card",
                    revs[a] + i,
                    "agent_card.published",
                    uuid.uuid4(),
                    {
                        "agent": str(a),
                        "version": revs[a] + i + 1,
                        "capabilities": [{"id": "summarize", "version": "1.0"}],
                        "max_concurrency": 1 + i % 8,
                    },
                )
                for i in range(per_thread)
            ]
        pools.append(pool)
    return pools


class RawConflict(Exception):
    pass


def raw_accept(conn: Any, cur: Any, actor: str, cmd: RawCommand) -> None:
    """The minimal acceptance transaction. ``expected == 0`` creates the
    aggregate (at revision 1) instead of the compare-and-set UPDATE."""
    from psycopg.types.json import Jsonb

    now = datetime.now(UTC)
    cur.execute("SELECT last_sequence, head_hash FROM raw_group WHERE id = %s FOR UPDATE", (cmd.group,))
    sequence, prev = cur.fetchone()
    if cmd.expected == 0:
        cur.execute("INSERT INTO raw_aggregate (id, revision) VALUES (%s, 1)", (cmd.aggregate,))
    else:
        cur.execute(
            "UPDATE raw_aggregate SET revision = revision + 1 WHERE id = %s AND revision = %s",
            (cmd.aggregate, cmd.expected),
        )
    if cur.rowcount != 1:
        conn.rollback()
        raise RawConflict(f"aggregate {cmd.aggregate} is not at revision {cmd.expected}")
    sequence += 1
    revision = cmd.expected + 1
    event_id = uuid.uuid4()
    occurred_at = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    event = {
        "event_id": str(event_id),
        "group": str(cmd.group),
        "sequence": sequence,
        "type": cmd.type,
        "aggregate": {"kind": cmd.kind, "id": str(cmd.aggregate), "revision": revision},
        "actor": actor,
        "action_id": str(cmd.action_id),
        "occurred_at": occurred_at,
        "body": cmd.body,
        "prev_hash": prev,
    }
    head = hashlib.sha256(prev.encode() + json.dumps(event, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    cur.execute("UPDATE raw_group SET last_sequence = %s, head_hash = %s WHERE id = %s", (sequence, head, cmd.group))
    cur.execute(
        "INSERT INTO raw_event (event_id, group_id, sequence, type, aggregate_kind, aggregate_id,"
        " aggregate_revision, actor, action_id, occurred_at, body, prev_hash, hash)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            event_id,
            cmd.group,
            sequence,
            cmd.type,
            cmd.kind,
            str(cmd.aggregate),
            revision,
            actor,
            cmd.action_id,
            now,
            Jsonb(cmd.body),
            prev,
            head,
        ),
    )
    receipt = {
        "action_id": str(cmd.action_id),
        "actor": actor,
        "group": str(cmd.group),
        "status": "accepted",
        "events": [{"event_id": str(event_id), "sequence": sequence, "type": cmd.type}],
        "aggregate": event["aggregate"],
        "accepted_at": occurred_at,
        "replayed": False,
    }
    cur.execute(
        "INSERT INTO raw_receipt (actor, action_id, content_hash, group_id, receipt, accepted_at)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (
            actor,
            cmd.action_id,
            hashlib.sha256(json.dumps(cmd.body).encode()).hexdigest(),
            cmd.group,
            Jsonb(receipt),
            now,
        ),
    )
    conn.commit()


# --------------------------------------------------------------------------
# One measurement: N threads, a barrier, a fixed duration
# --------------------------------------------------------------------------


@dataclass
class Measurement:
    cps: float
    accepted: int
    seconds: float
    errors: int
    exhausted: bool


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


def project_runner() -> tuple[Callable[[], Any], Callable[[Any, Any], None], Callable[[Any], None]]:
    from django.db import connection

    from missions.authority import accept

    def open_conn() -> Any:
        connection.ensure_connection()
        return connection

    def send(_conn: Any, cmd: Any) -> None:
        accept(cmd)

    def close_conn(conn: Any) -> None:
        conn.close()

    return open_conn, send, close_conn


def raw_runner(layout: RawLayout) -> tuple[Callable[[], Any], Callable[[Any, Any], None], Callable[[Any], None]]:
    import psycopg

    def open_conn() -> Any:
        conn = psycopg.connect(conninfo(layout.url))
        return conn, conn.cursor()

    def send(state: Any, cmd: RawCommand) -> None:
        raw_accept(state[0], state[1], layout.actor, cmd)

    def close_conn(state: Any) -> None:
        state[0].close()

    return open_conn, send, close_conn


class PoolSizer:
    """How many Commands to pre-build per thread: enough for the duration at
    the best rate seen so far, with headroom. Running dry only shortens the
    window (see ``measure``), it does not bias the rate."""

    def __init__(self) -> None:
        self.best: dict[tuple[str, str, int], float] = {}

    def size(self, impl: str, workload: str, threads: int, duration: float) -> int:
        rate = self.best.get((impl, workload, threads)) or max(
            (v for (i, w, _), v in self.best.items() if (i, w) == (impl, workload)), default=3000.0
        )
        return int(rate * 1.5 * duration / threads) + 50

    def seen(self, impl: str, workload: str, threads: int, cps: float) -> None:
        key = (impl, workload, threads)
        self.best[key] = max(self.best.get(key, 0.0), cps)


# --------------------------------------------------------------------------
# The WorkItem lifecycle mix
# --------------------------------------------------------------------------

LIFECYCLE_STEPS = (
    "work.authorize",
    "work.offer",
    "work.accept_offer",
    "work.start",
    *(("work.checkpoint", "work.start") * LIFECYCLE_CHECKPOINTS),
    "work.submit",
    "work.accept_result",
)
COMMANDS_PER_LIFECYCLE = len(LIFECYCLE_STEPS)  # 16
PRESIGNED_STEPS = ("work.authorize", "work.offer")

# A complete, valid Work Contract and the progress/selection basis the tests
# use (tests/workitems/flow.py); copied, so the benchmark does not import the
# test suite.
LIFECYCLE_CONTRACT: dict[str, Any] = {
    "goal": "Summarise the survey responses",
    "deliverables": ["summary.md"],
    "acceptance_criteria": [
        {"id": "complete", "description": "covers every response", "evidence_methods": ["test"]},
        {"id": "accurate", "description": "no invented facts", "evidence_methods": ["reviewer"]},
    ],
    "inputs": [{"kind": "dataset", "ref": "survey-2026"}],
    "dependencies": [],
    "allowed": {"tools": ["search"], "data": ["survey"], "operations": ["read"]},
    "resources": {"memory_mb": 512},
    "capabilities": [{"id": "summarize", "version": "1.0"}],
    "deadline": None,
    "urgency": "normal",
    "business_impact": "medium",
    "budgets": {
        "financial": 100,
        "tokens": 100000,
        "tool_calls": 50,
        "compute_seconds": 3600,
        "wall_clock_seconds": 7200,
        "side_effects": 5,
    },
    "retry": {"max_attempts": 3, "backoff_seconds": 0, "backoff_multiplier": 2, "deadline": None, "max_cost": None},
    "risk": {"class": "low", "requires_execution_approval": False},
}
LIFECYCLE_PROGRESS: dict[str, Any] = {
    "phase": "drafting",
    "milestones": ["read inputs"],
    "next_checkpoint": "outline",
    "blockers": [],
    "estimate": {"remaining_seconds": 600, "confidence": 0.7},
    "evidence": [],
}
LIFECYCLE_BASIS: dict[str, Any] = {
    "capability_matches": ["summarize@1.0"],
    "authorization_eligibility": True,
    "availability_estimate": "now",
    "expected_cost": 3,
    "reliability_evidence": [],
    "policy_rules": ["default"],
}


def lifecycle_evidence(item: str, producer: str) -> list[dict[str, Any]]:
    """One Evidence record covering both acceptance criteria, no Artifacts."""
    from mwportal.protocol import format_time

    return [
        {
            "subject": item,
            "criteria": ["complete", "accurate"],
            "method": "test",
            "result": "pass",
            "producer": producer,
            "timestamp": format_time(datetime.now(UTC)),
            "artifacts": [],
            "summary": "checked",
        }
    ]


@dataclass
class Lane:
    """What one thread drives: a Mission Group and its coordinator/worker pair."""

    group: str
    coordinator: BenchAgent
    worker: BenchAgent


@dataclass
class LifecycleFixtures:
    spread: list[Lane]  # one Mission Group per thread
    shared: list[Lane]  # one Mission Group for every thread

    def lanes(self, layout: str) -> list[Lane]:
        return self.spread if layout == "spread" else self.shared


def new_mission_group(owner: BenchAgent, members: list[tuple[BenchAgent, list[str]]]) -> str:
    from missions.authority import accept
    from missions.models import Group

    gid = str(uuid.uuid4())
    accept(
        owner.command(
            "mission.create", gid, {"mission": str(uuid.uuid4()), "title": "Lifecycle bench", "objective": "Measure"}
        )
    )
    for agent, roles in members:
        revision = Group.objects.values_list("revision", flat=True).get(id=gid)
        accept(
            owner.command(
                "membership.add",
                gid,
                {"agent": agent.id, "roles": roles},
                target={"kind": "group", "id": gid, "revision": revision},
            )
        )
    return gid


def build_lifecycle_fixtures(fx: Fixtures, threads: int | None = None) -> LifecycleFixtures:
    n = threads or max(c for _, c in LIFECYCLE_CELLS)
    coordinators = [make_agent("bench", fx.admin_group, f"Carl Coordinator {i}", ["coordinator"]) for i in range(n)]
    workers = [make_agent("bench", fx.admin_group, f"Wanda Worker {i}", ["worker"]) for i in range(n)]
    pairs = list(zip(coordinators, workers, strict=True))
    spread = [Lane(new_mission_group(fx.owner, [(c, ["coordinator"]), (w, ["worker"])]), c, w) for c, w in pairs]
    shared_group = new_mission_group(fx.owner, [m for c, w in pairs for m in ((c, ["coordinator"]), (w, ["worker"]))])
    return LifecycleFixtures(spread, [Lane(shared_group, c, w) for c, w in pairs])


def lifecycle_pools(lanes: list[Lane], threads: int, per_thread: int) -> list[list[tuple[str, Any, Any]]]:
    """Per thread, ``per_thread`` lifecycles' pre-signed ``work.authorize`` and
    ``work.offer`` (the only two Commands that need no earlier receipt)."""
    from mwportal.protocol import format_time

    expires = format_time(datetime.now(UTC) + timedelta(hours=2))
    pools = []
    for t in range(threads):
        lane = lanes[t]
        pool = []
        for _ in range(per_thread):
            item = str(uuid.uuid4())
            authorize = lane.coordinator.command(
                "work.authorize", lane.group, {"workitem": item, "contract": LIFECYCLE_CONTRACT}
            )
            offer = lane.coordinator.command(
                "work.offer",
                lane.group,
                {"agents": [lane.worker.id], "expires_at": expires, "selection_basis": LIFECYCLE_BASIS},
                target={"kind": "workitem", "id": item, "revision": 1},
            )
            pool.append((item, authorize, offer))
        pools.append(pool)
    return pools


def _workitem(item: str, revision: int | None = None) -> dict[str, Any]:
    target: dict[str, Any] = {"kind": "workitem", "id": item}
    if revision is not None:
        target["revision"] = revision
    return target


def project_lifecycle(lane: Lane, pool: list[tuple[str, Any, Any]], build: list[float]) -> Any:
    """A generator that accepts one Command per ``next()``, lifecycle after
    lifecycle from ``pool``. Commands after the offer are built, signed and
    parsed here, from the previous receipt; ``build[0]`` accumulates that
    client-side time."""
    from missions.authority import accept

    group, coordinator, worker = lane.group, lane.coordinator, lane.worker

    def signed(agent: BenchAgent, type_: str, body: dict[str, Any], **kw: Any) -> Any:
        t = time.perf_counter()
        cmd = agent.command(type_, group, body, **kw)
        build[0] += time.perf_counter() - t
        return cmd

    for item, authorize_cmd, offer_cmd in pool:
        accept(authorize_cmd)
        yield
        revision = accept(offer_cmd)["aggregate"]["revision"]
        yield
        receipt = accept(signed(worker, "work.accept_offer", {}, target=_workitem(item, revision)))
        revision = receipt["aggregate"]["revision"]
        # The first acceptance of a new WorkItem gives Ownership Epoch 1 (the
        # worker reads it from the work.offer_accepted Event).
        epoch = 1
        yield
        lease = ""
        for k in range(LIFECYCLE_CHECKPOINTS + 1):
            receipt = accept(signed(worker, "work.start", {}, target=_workitem(item, revision), ownership_epoch=epoch))
            lease, revision = receipt["grants"]["lease_id"], receipt["aggregate"]["revision"]
            yield
            if k == LIFECYCLE_CHECKPOINTS:
                break
            body: dict[str, Any] = {"checkpoint": {"step": k + 1}, "progress": LIFECYCLE_PROGRESS}
            receipt = accept(signed(worker, "work.checkpoint", body, target=_workitem(item), lease_id=lease))
            revision = receipt["aggregate"]["revision"]
            yield
        body = {"artifacts": [], "evidence": lifecycle_evidence(item, worker.id)}
        receipt = accept(signed(worker, "work.submit", body, target=_workitem(item), lease_id=lease))
        revision = receipt["aggregate"]["revision"]
        yield
        body = {"evidence": lifecycle_evidence(item, coordinator.id)}
        accept(signed(coordinator, "work.accept_result", body, target=_workitem(item, revision)))
        yield


def raw_lifecycle_bodies(actor: str) -> list[tuple[str, dict[str, Any]]]:
    """The 16 Event types and bodies of one lifecycle, of about the size the
    project's handlers write (the contract, the progress, the Evidence)."""
    from mwportal.protocol import format_time

    now = format_time(datetime.now(UTC))
    lease = str(uuid.uuid4())
    started: tuple[str, dict[str, Any]] = (
        "work.started",
        {"agent": actor, "lease_id": lease, "ownership_epoch": 1, "session_epoch": 1, "lease_expires_at": now,
         "attempt": 1},
    )  # fmt: skip
    evidence = lifecycle_evidence(actor, actor)
    steps: list[tuple[str, dict[str, Any]]] = [
        ("work.authorized", {"workitem": actor, "contract": {**LIFECYCLE_CONTRACT, "revision": 1}, "proposal": None}),
        (
            "work.offered",
            {"agents": [actor], "expires_at": now, "selection_basis": LIFECYCLE_BASIS, "contract_revision": 1},
        ),
        (
            "work.offer_accepted",
            {
                "agent": actor,
                "ownership_epoch": 1,
                "start_by": now,
                "contract_revision": 1,
                "selection_basis": LIFECYCLE_BASIS,
                "withdrawn": [],
            },
        ),
        started,
    ]
    for k in range(LIFECYCLE_CHECKPOINTS):
        checkpointed: dict[str, Any] = {"lease_id": lease, "checkpoint_number": k + 1, "checkpoint": {"step": k + 1},
                        "progress": LIFECYCLE_PROGRESS, "usage": {}}  # fmt: skip
        steps += [("work.checkpointed", checkpointed), started]
    steps += [
        ("work.submitted", {"lease_id": lease, "artifacts": [], "evidence": evidence, "usage": {}}),
        ("work.result_accepted", {"evidence": evidence}),
    ]
    assert len(steps) == COMMANDS_PER_LIFECYCLE
    return steps


def raw_lifecycle(state: Any, group: uuid.UUID, actor: str, bodies: list[tuple[str, dict[str, Any]]]) -> Any:
    """The raw baseline's lifecycle: 16 minimal acceptance transactions on a
    new aggregate, created by the first; parameters built in the loop too."""
    conn, cur = state
    while True:
        item = uuid.uuid4()
        for expected, (type_, body) in enumerate(bodies):
            raw_accept(conn, cur, actor, RawCommand(group, item, "workitem", expected, type_, uuid.uuid4(), body))
            yield


@dataclass
class LifecycleMeasurement:
    lps: float  # lifecycles per second: accepted Commands / 16 / window
    cps: float
    commands: int
    complete: int  # lifecycles completed inside the window
    seconds: float
    errors: int
    exhausted: bool
    build_seconds: float  # client-side build + sign + parse inside the loop, all threads
    process_cpu: float  # CPU seconds of this whole process (every thread) per second of window

    @property
    def build_ms_per_lifecycle(self) -> float:
        lifecycles = self.commands / COMMANDS_PER_LIFECYCLE
        return self.build_seconds / lifecycles * 1000 if lifecycles else 0.0


def measure_lifecycles(
    threads: int,
    duration: float,
    open_conn: Callable[[], Any],
    steps: Callable[[int, Any, list[float]], Any],
    close_conn: Callable[[Any], None],
) -> LifecycleMeasurement:
    """Like ``measure``: ``threads`` threads from a barrier for ``duration``
    seconds, each advancing its own generator one Command at a time; the
    window ends when the last in-flight Command finishes."""
    barrier = threading.Barrier(threads + 1)
    stop = threading.Event()
    exhausted = threading.Event()
    counts = [0] * threads
    ends = [0.0] * threads
    builds = [0.0] * threads
    errors: list[str] = []

    def worker(i: int) -> None:
        state = gen = None
        build = [0.0]
        try:
            state = open_conn()
            gen = steps(i, state, build)
        except Exception as exc:
            errors.append(f"connect: {exc!r}")
        barrier.wait()
        done = 0
        try:
            while gen is not None and not stop.is_set():
                try:
                    next(gen)
                except StopIteration:
                    exhausted.set()
                    stop.set()
                    break
                done += 1
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            stop.set()
        finally:
            ends[i] = time.perf_counter()
            counts[i] = done
            builds[i] = build[0]
            if gen is not None:
                gen.close()
            if state is not None:
                close_conn(state)

    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in workers:
        t.start()
    barrier.wait()
    start, cpu0 = time.perf_counter(), time.process_time()
    stop.wait(duration)
    stop.set()
    for t in workers:
        t.join()
    seconds = max(ends) - start
    cpu = time.process_time() - cpu0
    for e in errors[:3]:
        log(f"    error: {e}")
    commands = sum(counts)
    return LifecycleMeasurement(
        process_cpu=cpu / seconds if seconds > 0 else 0.0,
        lps=commands / COMMANDS_PER_LIFECYCLE / seconds if seconds > 0 else 0.0,
        cps=commands / seconds if seconds > 0 else 0.0,
        commands=commands,
        complete=sum(c // COMMANDS_PER_LIFECYCLE for c in counts),
        seconds=seconds,
        errors=len(errors),
        exhausted=exhausted.is_set(),
        build_seconds=sum(builds),
    )


def run_lifecycles(
    backend: str, fx: Fixtures, layout: RawLayout | None, duration: float, repeats: int
) -> tuple[dict[str, Any], int]:
    """Every lifecycle cell, project and raw interleaved; the cells and the error count."""
    from django.db import connection

    t0 = time.monotonic()
    lfx = build_lifecycle_fixtures(fx)
    log(f"  lifecycle fixtures: {len(lfx.spread)} Mission Groups + 1 shared, {2 * len(lfx.spread)} Agents "
        f"in {time.monotonic() - t0:.1f} s")  # fmt: skip
    impls = ["raw", "project"] if layout is not None else ["project"]
    open_project, _, close_project = project_runner()
    best: dict[tuple[str, str, int], float] = {}
    raw_bodies = raw_lifecycle_bodies(layout.actor) if layout is not None else []

    def one(impl: str, lay: str, c: int, seconds: float) -> LifecycleMeasurement:
        if impl == "project":
            rate = best.get((impl, lay, c)) or max((v for (i, _, _), v in best.items() if i == impl), default=60.0)
            # Generous: one thread may outpace the others (up to 4x its share);
            # only authorize and offer are pre-signed, so a pool is cheap.
            per_thread = int(rate * 1.5 * seconds * min(c, 4) / c) + 5
            pools = lifecycle_pools(lfx.lanes(lay), c, per_thread)
            lanes = lfx.lanes(lay)
            connection.close()

            def project_steps(i: int, _state: Any, build: list[float]) -> Any:
                return project_lifecycle(lanes[i], pools[i], build)

            m = measure_lifecycles(c, seconds, open_project, project_steps, close_project)
        else:
            assert layout is not None
            open_raw, _, close_raw = raw_runner(layout)
            groups = layout.lifecycle_groups if lay == "spread" else [layout.lifecycle_shared] * c

            def raw_steps(i: int, state: Any, _build: list[float]) -> Any:
                assert layout is not None
                return raw_lifecycle(state, groups[i], layout.actor, raw_bodies)

            m = measure_lifecycles(c, seconds, open_raw, raw_steps, close_raw)
        best[(impl, lay, c)] = max(best.get((impl, lay, c), 0.0), m.lps)
        return m

    cells: dict[str, Any] = {}
    errors = 0
    for impl in impls:  # warm up and calibrate the pool size
        one(impl, "spread", max(c for _, c in LIFECYCLE_CELLS), WARMUP_SECONDS)
    for lay, c in lifecycle_cells(backend):
        runs: dict[str, list[LifecycleMeasurement]] = {impl: [] for impl in impls}
        for rep in range(repeats):
            order = impls if rep % 2 == 0 else impls[::-1]
            for impl in order:
                m = one(impl, lay, c, duration)
                errors += m.errors
                runs[impl].append(m)
                note = " (pool ran dry: shorter window)" if m.exhausted else ""
                build = f"; client build+sign {m.build_ms_per_lifecycle:.1f} ms/lifecycle" if impl == "project" else ""
                build += f"; process CPU {m.process_cpu:.2f} cores"
                log(
                    f"  {backend:8} lifecycle {lay} c{c} {impl:7} run {rep + 1}: {m.lps:7.1f} lifecycles/s "
                    f"({m.cps:.0f} cmd/s; {m.commands} Commands, {m.complete} complete lifecycles in "
                    f"{m.seconds:.2f} s{build}){note}"
                )
        project = runs["project"]
        cell: dict[str, Any] = {
            "project": statistics.median(m.lps for m in project),
            "project_runs": [m.lps for m in project],
            "project_cps": statistics.median(m.cps for m in project),
            "project_complete": sum(m.complete for m in project),
            "build_ms": statistics.median(m.build_ms_per_lifecycle for m in project),
            # Client build+sign seconds (all threads) per second of window.
            "build_share": statistics.median(m.build_seconds / m.seconds if m.seconds else 0.0 for m in project),
            # CPU-seconds of the benchmark process per second of window: near
            # 1.0 with Python threads means the GIL is the ceiling.
            "project_cpu": statistics.median(m.process_cpu for m in project),
        }
        if "raw" in runs:
            cell["raw"] = statistics.median(m.lps for m in runs["raw"])
            cell["raw_runs"] = [m.lps for m in runs["raw"]]
            cell["raw_cps"] = statistics.median(m.cps for m in runs["raw"])
            cell["raw_cpu"] = statistics.median(m.process_cpu for m in runs["raw"])
            cell["ratio"] = cell["project"] / cell["raw"] if cell["raw"] else None
            log(
                f"  {backend:8} lifecycle {lay} c{c} median project {cell['project']:.1f} / raw {cell['raw']:.1f}"
                f" lifecycles/s = {cell['ratio']:.2f}"
            )
        cells[f"{lay}_c{c}"] = cell
    check_lifecycle_state(lfx)
    return cells, errors


def lifecycle_cells(backend: str) -> tuple[tuple[str, int], ...]:
    return SQLITE_LIFECYCLE_CELLS if backend == "sqlite" else LIFECYCLE_CELLS


def check_lifecycle_state(lfx: LifecycleFixtures) -> None:
    """Sanity: lifecycles reached ``verified``, and the shared Group's chain is gap-free."""
    from missions.models import Group, GroupEvent
    from workitems.models import WorkItem

    verified = WorkItem.objects.filter(group_id__in=[lfx.spread[0].group, lfx.shared[0].group], state="verified")
    if not verified.exists():
        raise RuntimeError("no WorkItem reached verified during the lifecycle measurements")
    shared = lfx.shared[0].group
    head = Group.objects.values_list("last_sequence", flat=True).get(id=shared)
    count = GroupEvent.objects.filter(group_id=shared).count()
    if head != count:
        raise RuntimeError(f"shared lifecycle Group head {head} but {count} Events")


def run_backend(backend: str, args: argparse.Namespace, database_url: str) -> dict[str, Any]:
    from django.db import connection

    duration = args.duration or (DURATION_QUICK if args.quick else DURATION_FULL)[backend]
    repeats = args.repeats or REPEATS
    parts = [args.part] if args.part else list(PARTS)
    t0 = time.monotonic()
    fx = build_fixtures(backend, N_GROUPS if "commands" in parts else 0)
    layout = raw_setup(database_url) if backend == "postgres" else None
    setup_seconds = time.monotonic() - t0
    log(f"  fixtures: {len(fx.groups)} Groups + hot Group with {len(fx.hot_agents)} Agents in {setup_seconds:.1f} s")
    if backend == "postgres":
        with connection.cursor() as cur:
            cur.execute("SELECT version()")
            server = cur.fetchone()[0].split(" on ")[0]
    else:
        import sqlite3

        server = f"SQLite {sqlite3.sqlite_version} (WAL, IMMEDIATE, synchronous=NORMAL)"

    impls = ["raw", "project"] if layout is not None else ["project"]
    sizer = PoolSizer()
    runners = {"project": project_runner()}
    if layout is not None:
        runners["raw"] = raw_runner(layout)

    def one(impl: str, workload: str, c: int, seconds: float) -> Measurement:
        per_thread = sizer.size(impl, workload, c, seconds)
        if impl == "project":
            pools = project_pools(fx, workload, c, per_thread)
        else:
            assert layout is not None
            pools = raw_pools(layout, workload, c, per_thread)
        connection.close()  # the main thread holds nothing while the workers run
        m = measure(pools, seconds, *runners[impl])
        sizer.seen(impl, workload, c, m.cps)
        return m

    cells: dict[str, Any] = {}
    total_errors = 0
    for workload in WORKLOADS if "commands" in parts else ():
        for impl in impls:  # warm up caches and calibrate the pool size
            one(impl, workload, max(CONCURRENCY), WARMUP_SECONDS)
        for c in CONCURRENCY:
            runs: dict[str, list[float]] = {impl: [] for impl in impls}
            for rep in range(repeats):
                # Interleaved, so drift (table growth, checkpoints) hits both sides alike.
                order = impls if rep % 2 == 0 else impls[::-1]
                for impl in order:
                    m = one(impl, workload, c, duration)
                    total_errors += m.errors
                    runs[impl].append(m.cps)
                    note = " (pool ran dry: shorter window)" if m.exhausted else ""
                    log(
                        f"  {backend:8} {workload} c{c} {impl:7} run {rep + 1}: {m.cps:8.0f} cmd/s "
                        f"({m.accepted} in {m.seconds:.2f} s){note}"
                    )
            cell: dict[str, Any] = {
                "project": statistics.median(runs["project"]),
                "project_runs": runs["project"],
            }
            if "raw" in runs:
                cell["raw"] = statistics.median(runs["raw"])
                cell["raw_runs"] = runs["raw"]
                cell["ratio"] = cell["project"] / cell["raw"] if cell["raw"] else None
                log(
                    f"  {backend:8} {workload} c{c} median project {cell['project']:.0f} / raw {cell['raw']:.0f}"
                    f" = {cell['ratio']:.2f}"
                )
            cells[f"{workload}_c{c}"] = cell
    if "commands" in parts:
        if layout is not None:
            check_raw_chain(layout)
        check_project_chain(fx)
    lifecycle: dict[str, Any] = {}
    lc_duration = 0.0
    if "lifecycle" in parts:
        lc_duration = args.duration or (LIFECYCLE_DURATION_QUICK if args.quick else DURATION_FULL)[backend]
        lifecycle, errors = run_lifecycles(backend, fx, layout, lc_duration, repeats)
        total_errors += errors
    return {
        "backend": "postgresql" if backend == "postgres" else "sqlite",
        "server": server,
        "duration": duration,
        "lifecycle_duration": lc_duration if "lifecycle" in parts else None,
        "repeats": repeats,
        "setup_seconds": setup_seconds,
        "cells": cells,
        "lifecycle": lifecycle,
        "errors": total_errors,
    }


def check_project_chain(fx: Fixtures) -> None:
    """Sanity: sequences of the hot Group are gap-free after all that concurrency."""
    from missions.models import Group, GroupEvent

    head = Group.objects.values_list("last_sequence", flat=True).get(id=fx.admin_group)
    count = GroupEvent.objects.filter(group_id=fx.admin_group).count()
    if head != count:
        raise RuntimeError(f"hot Group head {head} but {count} Events")


def check_raw_chain(layout: RawLayout) -> None:
    import psycopg

    with psycopg.connect(conninfo(layout.url), autocommit=True) as conn:
        head, count = conn.execute(
            "SELECT (SELECT last_sequence FROM raw_group WHERE id = %s),"
            " (SELECT count(*) FROM raw_event WHERE group_id = %s)",
            (layout.hot_group, layout.hot_group),
        ).fetchone()
    if head != count:
        raise RuntimeError(f"raw hot Group head {head} but {count} events")


# --------------------------------------------------------------------------
# --profile: where the time goes in accept(), single thread
# --------------------------------------------------------------------------


class StepTimers:
    """Wall-clock time per accept() step, by wrapping the project's functions
    in this process only (no file is changed). Names that a refactoring of
    missions/authority.py removes are skipped, not fatal."""

    # In the order accept() runs them: (module, attributes (the first found is
    # wrapped), label). "handler" and "commit" are wrapped specially. Labels
    # indented with "of which" are parts of the step above them.
    STEPS: tuple[tuple[str, tuple[str, ...], str], ...] = (
        ("mwportal.protocol.envelope", ("Envelope.content_hash",), "1  content_hash (canonical JSON + sha256)"),
        ("missions.authority", ("_lock_group",), "3  _lock_group (SELECT ... FOR UPDATE)"),
        ("missions.authority", ("_load_actor",), "2  _load_actor (Agent + Membership SELECT)"),
        ("missions.authority", ("_check_actor",), "2  _check_actor (signature, epochs, roles)"),
        ("missions.authority", ("verify",), "     of which verify (canonical JSON + Ed25519)"),
        ("handler", (), "5  handler"),
        ("missions.authority", ("_append",), "6  _append (Event INSERT, head UPDATE)"),
        ("missions.authority", ("event_hash",), "     of which event_hash (canonical JSON + sha256)"),
        ("missions.authority", ("_write_receipt",), "6  _write_receipt (receipt INSERT)"),
        ("commit", (), "6b COMMIT (connection.commit)"),
        (
            "missions.delivery",
            ("notify_commit",),
            "7  channel-layer notices (on_commit)",
        ),
    )

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.statements = 0
        self.sql_seconds = 0.0
        self._restore: list[Callable[[], None]] = []
        self.order = [label for _, _, label in self.STEPS]

    def _wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        totals = self.totals

        def timed(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                totals[label] = totals.get(label, 0.0) + time.perf_counter() - t

        return timed

    def install(self) -> None:
        import dataclasses
        import importlib

        from django.db import connections

        from missions import registry

        for module_name, attrs, label in self.STEPS:
            if module_name == "handler":
                for type_ in ("membership.set_roles", "agent_card.publish"):
                    spec = registry._REGISTRY[type_]
                    registry._REGISTRY[type_] = dataclasses.replace(spec, handler=self._wrap(label, spec.handler))
                    self._restore.append(lambda t=type_, s=spec: registry._REGISTRY.__setitem__(t, s))
                continue
            if module_name == "commit":
                wrapper_class = type(connections["default"])  # the backend's DatabaseWrapper
                commit = wrapper_class.commit
                wrapper_class.commit = self._wrap(label, commit)
                self._restore.append(lambda c=wrapper_class, f=commit: setattr(c, "commit", f))
                continue
            for attr in attrs:
                obj: Any = importlib.import_module(module_name)
                *path, name = attr.split(".")
                for part in path:
                    obj = getattr(obj, part, None)
                original = getattr(obj, name, None) if obj is not None else None
                if original is not None:
                    setattr(obj, name, self._wrap(label, original))
                    self._restore.append(lambda o=obj, n=name, f=original: setattr(o, n, f))
                    break
            else:
                self.order.remove(label)
                log(f"  (profile: {module_name}.{' / '.join(attrs)} not found; step not timed)")

    def sql_wrapper(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        t = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.sql_seconds += time.perf_counter() - t
            self.statements += 1

    def uninstall(self) -> None:
        for undo in reversed(self._restore):
            undo()
        self._restore.clear()


def run_profile(backend: str, args: argparse.Namespace) -> int:
    """Single thread: a per-step wall-clock breakdown, then cProfile's top functions."""
    import cProfile
    import io
    import pstats

    from django.db import connection

    from missions.authority import accept

    parts = [args.part] if args.part else list(PARTS)
    fx = build_fixtures(backend, N_GROUPS if "commands" in parts else 0)
    n = args.profile_commands
    for workload in WORKLOADS if "commands" in parts else ():
        pools = project_pools(fx, workload, 1, 2 * n + 200)[0]
        for cmd in pools[:200]:  # warm up
            accept(cmd)

        timers = StepTimers()
        timers.install()
        cpu0, t0 = time.thread_time(), time.perf_counter()
        try:
            with connection.execute_wrapper(timers.sql_wrapper):
                for cmd in pools[200 : 200 + n]:
                    accept(cmd)
        finally:
            timers.uninstall()
        wall, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
        print(f"\n===== {backend} {workload}: {n} Commands through accept(), 1 thread, no profiler")
        print(f"  {n / wall:.0f} cmd/s; per accept(): {wall / n * 1e6:.0f} us wall, {cpu / n * 1e6:.0f} us CPU in")
        print("  the calling thread (async_to_sync's helper threads not included)")
        print(f"  SQL: {timers.statements / n:.1f} statements per accept() (+ BEGIN/COMMIT), ", end="")
        print(f"{timers.sql_seconds / n * 1e6:.0f} us in cursor.execute (client + round trip + server)")
        accounted = 0.0
        for label in timers.order:
            seconds = timers.totals.get(label, 0.0)
            if not label.startswith("     "):
                accounted += seconds
            print(f"  {label:58} {seconds / n * 1e6:7.0f} us  {seconds / wall * 100:5.1f}%")
        rest = wall - accounted
        label = "   rest: receipt lookup + BEGIN, atomic(), glue, handler ctx"
        print(f"  {label:58} {rest / n * 1e6:7.0f} us  {rest / wall * 100:5.1f}%")

        prof = cProfile.Profile()
        prof.enable()
        for cmd in pools[200 + n :]:
            accept(cmd)
        prof.disable()
        for sort, limit in (("tottime", 25), ("cumulative", 40)):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(sort).print_stats(limit)
            print(f"\n----- cProfile, {backend} {workload}, by {sort} (profiler overhead inflates Python-heavy code)")
            print(buf.getvalue().split("\n", 4)[-1].strip("\n"))
    if "lifecycle" in parts:
        run_lifecycle_profile(backend, fx, args.profile_lifecycles)
    return 0


class LifecycleProfiler:
    """Per Command type of the lifecycle: wall time in ``accept()``, in the
    handler, in COMMIT and in the after-commit notify, and every SQL
    statement, attributed to its phase (before, inside or after the handler)
    and, inside the handler, to the line of ``workitems/handlers/`` (or
    ``missions/``) that issued it. Wraps the project's functions in this
    process only; no file is changed."""

    PHASES = ("pre", "handler", "post", "commit")

    def __init__(self) -> None:
        self.current = ""
        self.phase = "pre"
        self.accept_s: dict[str, float] = {}
        self.accept_cpu: dict[str, float] = {}
        self.count: dict[str, int] = {}
        self.handler_s: dict[str, float] = {}
        self.handler_cpu: dict[str, float] = {}
        self.commit_s: dict[str, float] = {}
        self.notify_s: dict[str, float] = {}
        # (type, phase) -> [statements, seconds]
        self.sql: dict[tuple[str, str], list[float]] = {}
        # (call site, statement shape) -> [statements, seconds, CPU seconds in execute]
        self.sites: dict[tuple[str, str], list[float]] = {}
        self._restore: list[Callable[[], None]] = []

    def install(self) -> None:
        import dataclasses
        import functools

        from django.db import connections

        import missions.authority as authority
        from missions import registry

        prof = self
        accept = authority.accept
        depth = [0]

        def timed_accept(command: Any, **kw: Any) -> Any:
            depth[0] += 1
            outer = depth[0] == 1
            if outer:
                prof.current, prof.phase = command.envelope.type, "pre"
            t, c = time.perf_counter(), time.thread_time()
            try:
                return accept(command, **kw)
            finally:
                depth[0] -= 1
                if outer:
                    typ = command.envelope.type
                    prof.accept_s[typ] = prof.accept_s.get(typ, 0.0) + time.perf_counter() - t
                    prof.accept_cpu[typ] = prof.accept_cpu.get(typ, 0.0) + time.thread_time() - c
                    prof.count[typ] = prof.count.get(typ, 0) + 1

        setattr(authority, "accept", timed_accept)  # noqa: B010
        self._restore.append(lambda: setattr(authority, "accept", accept))

        for type_ in set(LIFECYCLE_STEPS):
            spec = registry._REGISTRY[type_]

            def handler(ctx: Any, _h: Any = spec.handler, _t: str = type_) -> Any:
                prof.phase = "handler"
                t, c = time.perf_counter(), time.thread_time()
                try:
                    return _h(ctx)
                finally:
                    prof.handler_s[_t] = prof.handler_s.get(_t, 0.0) + time.perf_counter() - t
                    prof.handler_cpu[_t] = prof.handler_cpu.get(_t, 0.0) + time.thread_time() - c
                    prof.phase = "post"

            registry._REGISTRY[type_] = dataclasses.replace(spec, handler=handler)
            self._restore.append(functools.partial(registry._REGISTRY.__setitem__, type_, spec))

        wrapper_class = type(connections["default"])
        commit = wrapper_class.commit

        def timed_commit(conn: Any) -> Any:
            prof.phase = "commit"
            t = time.perf_counter()
            try:
                return commit(conn)
            finally:
                typ = prof.current
                prof.commit_s[typ] = prof.commit_s.get(typ, 0.0) + time.perf_counter() - t

        setattr(wrapper_class, "commit", timed_commit)  # noqa: B010 (mypy: no method assignment)
        self._restore.append(lambda: setattr(wrapper_class, "commit", commit))

        notify = authority._notify

        def timed_notify(*a: Any) -> Any:
            t = time.perf_counter()
            try:
                return notify(*a)
            finally:
                typ = prof.current
                prof.notify_s[typ] = prof.notify_s.get(typ, 0.0) + time.perf_counter() - t

        setattr(authority, "_notify", timed_notify)  # noqa: B010
        self._restore.append(lambda: setattr(authority, "_notify", notify))

    def uninstall(self) -> None:
        for undo in reversed(self._restore):
            undo()
        self._restore.clear()

    @staticmethod
    def call_site() -> str:
        """The innermost frame in the project's handlers that led to this SQL."""
        import linecache

        frame: Any = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if (
                "/workitems/handlers/" in name
                or name.endswith(("workitems/guards.py", "artifacts/store.py"))
                or ("/missions/" in name and not name.endswith("missions/authority.py"))
            ):
                short = "/".join(Path(name).parts[-2:])
                line = linecache.getline(name, frame.f_lineno).strip()
                return f"{short}:{frame.f_lineno} {frame.f_code.co_name}: {line[:70]}"
            frame = frame.f_back
        return "(missions/authority.py)"

    def sql_wrapper(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        t, c = time.perf_counter(), time.thread_time()
        try:
            return execute(sql, params, many, context)
        finally:
            dt, dc = time.perf_counter() - t, time.thread_time() - c
            key = (self.current, self.phase)
            cell = self.sql.setdefault(key, [0, 0.0])
            cell[0] += 1
            cell[1] += dt
            site = self.call_site() if self.phase == "handler" else f"accept() {self.phase}-handler"
            s = self.sites.setdefault((site, sql_shape(sql)), [0, 0.0, 0.0])
            s[0] += 1
            s[1] += dt
            s[2] += dc


def sql_shape(sql: str) -> str:
    """``SELECT workitems_workitem [id, group_id] FOR UPDATE`` and the like."""
    import re

    s = " ".join(sql.split())
    lock = " FOR UPDATE" if "FOR UPDATE" in s else ""
    if s.startswith("WITH ev AS"):
        return "WITH (INSERT Event, UPDATE Group head) INSERT receipt"
    verb = s.split(" ", 1)[0]
    pattern = r'FROM "?(\w+)"?' if verb == "SELECT" else r'^(?:UPDATE|INSERT INTO|DELETE FROM) "?(\w+)"?'
    found = re.search(pattern, s)
    table = found.group(1) if found else ""
    where = s.split(" WHERE ", 1)[1] if " WHERE " in s else ""
    cols = sorted(set(re.findall(r'"\w+"\."(\w+)" (?:=|IN|<|>)', where)))
    return f"{verb} {table}" + (f" [{', '.join(cols)}]" if cols else "") + lock


def run_lifecycle_profile(backend: str, fx: Fixtures, n: int) -> None:
    """Single thread: ``n`` lifecycles measured without a profiler, then
    ``n`` more under cProfile. On PostgreSQL the raw baseline's 16
    transactions are timed the same way for comparison."""
    import cProfile
    import io
    import pstats

    from django.db import connection

    lfx = build_lifecycle_fixtures(fx, threads=1)
    lane = lfx.spread[0]
    build = [0.0]

    def drive(count: int) -> None:
        for _ in project_lifecycle(lane, lifecycle_pools([lane], 1, count)[0], build):
            pass

    drive(5)  # warm up
    prof = LifecycleProfiler()
    prof.install()
    build[0] = 0.0
    cpu0, t0 = time.thread_time(), time.perf_counter()
    try:
        with connection.execute_wrapper(prof.sql_wrapper):
            drive(n)
    finally:
        prof.uninstall()
    wall, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
    per_lc = wall / n * 1000
    print(f"\n===== {backend} lifecycle: {n} lifecycles x {COMMANDS_PER_LIFECYCLE} Commands, 1 thread, no profiler")
    print(
        f"  {n / wall:.1f} lifecycles/s, {n * COMMANDS_PER_LIFECYCLE / wall:.0f} cmd/s; per lifecycle {per_lc:.1f} ms"
        f" wall, {cpu / n * 1000:.1f} ms CPU in the calling thread; client build+sign {build[0] / n * 1000:.1f} ms"
    )
    hdr = (
        f"  {'command':20} {'n/lc':>4} {'accept':>7} {'CPU':>6} {'handler':>7} {'CPU':>6} {'h.SQL#':>6} "
        f"{'h.SQL':>6} {'h.rest':>6} {'pre SQL':>7} {'post SQL':>8} {'COMMIT':>6} {'notify':>6} {'ms/lc':>6}"
    )
    print(
        "  per Command, microseconds (CPU = this thread's CPU time; h. = inside the handler; h.rest = handler"
        " minus its SQL;\n  pre/post SQL = accept()'s combined read and combined append statements)"
    )
    print(hdr)
    keys = ("accept", "acpu", "handler", "hcpu", "hsql", "hn", "pre", "post", "commit", "notify", "stmts")
    tot = dict.fromkeys(keys, 0.0)
    for typ in dict.fromkeys(LIFECYCLE_STEPS):
        k = prof.count.get(typ, 0)
        if not k:
            continue
        hn, hsql = prof.sql.get((typ, "handler"), [0, 0.0])
        row = {
            "accept": prof.accept_s.get(typ, 0.0),
            "acpu": prof.accept_cpu.get(typ, 0.0),
            "handler": prof.handler_s.get(typ, 0.0),
            "hcpu": prof.handler_cpu.get(typ, 0.0),
            "hsql": hsql,
            "hn": hn,
            "pre": prof.sql.get((typ, "pre"), [0, 0.0])[1],
            "post": prof.sql.get((typ, "post"), [0, 0.0])[1],
            "commit": prof.commit_s.get(typ, 0.0),
            "notify": prof.notify_s.get(typ, 0.0),
            "stmts": sum(prof.sql.get((typ, ph), [0, 0.0])[0] for ph in ("pre", "handler", "post")),
        }
        for key in keys:
            tot[key] += row[key]
        us = {key: row[key] / k * 1e6 for key in keys}
        print(
            f"  {typ:20} {k / n:4.0f} {us['accept']:7.0f} {us['acpu']:6.0f} {us['handler']:7.0f} {us['hcpu']:6.0f} "
            f"{hn / k:6.1f} {us['hsql']:6.0f} {us['handler'] - us['hsql']:6.0f} {us['pre']:7.0f} {us['post']:8.0f} "
            f"{us['commit']:6.0f} {us['notify']:6.0f} {row['accept'] / n * 1000:6.2f}"
        )
    ms = {key: val / n * 1000 for key, val in tot.items()}
    rest = ms["accept"] - ms["handler"] - ms["pre"] - ms["post"] - ms["commit"] - ms["notify"]
    print(
        f"  per lifecycle (ms): accept {ms['accept']:.1f} (CPU {ms['acpu']:.1f}) = handlers {ms['handler']:.1f} "
        f"(CPU {ms['hcpu']:.1f}; their {tot['hn'] / n:.0f} SQL statements {ms['hsql']:.1f}, the rest "
        f"{ms['handler'] - ms['hsql']:.1f}) + accept()'s own SQL {ms['pre'] + ms['post']:.1f} + COMMIT "
        f"{ms['commit']:.1f} + notify {ms['notify']:.1f} + rest (BEGIN, glue) {rest:.1f}"
    )
    print(
        f"  round trips per lifecycle: {tot['stmts'] / n:.0f} statements + {COMMANDS_PER_LIFECYCLE} BEGIN + "
        f"{COMMANDS_PER_LIFECYCLE} COMMIT (raw baseline: {5 * COMMANDS_PER_LIFECYCLE} + {COMMANDS_PER_LIFECYCLE}"
        f" + {COMMANDS_PER_LIFECYCLE})"
    )
    print("\n  SQL by call site, most expensive first (per lifecycle)")
    print("  (us/call = wall time in cursor.execute; CPU/call = this thread's CPU in it: psycopg, adaptation;")
    print("   the difference is the round trip: network, PostgreSQL, scheduling. Not counted: the ORM's query")
    print("   building and model instantiation before and after cursor.execute, which is in 'h.rest' above)")
    print(f"  {'calls':>5} {'us':>7} {'us/call':>7} {'CPU/call':>8}  call site  ->  statement shape")
    for (site, shape), (calls, seconds, cpu_s) in sorted(prof.sites.items(), key=lambda kv: -kv[1][1])[:30]:
        print(
            f"  {calls / n:5.1f} {seconds / n * 1e6:7.0f} {seconds / calls * 1e6:7.0f} {cpu_s / calls * 1e6:8.0f}"
            f"  {site}  ->  {shape}"
        )

    if backend == "postgres":
        raw_profile(n)

    cp = cProfile.Profile()
    cp.enable()
    drive(n)
    cp.disable()
    for sort, limit in (("tottime", 30), ("cumulative", 60)):
        buf = io.StringIO()
        pstats.Stats(cp, stream=buf).strip_dirs().sort_stats(sort).print_stats(limit)
        print(f"\n----- cProfile, {backend} lifecycle, by {sort} (profiler overhead inflates Python-heavy code)")
        print(buf.getvalue().split("\n", 4)[-1].strip("\n"))


def raw_profile(n: int) -> None:
    """The raw baseline's lifecycle, single thread, for comparison."""
    from django.db import connection

    url = connection.settings_dict
    dsn = f"postgresql://{url['USER']}@{url['HOST']}:{url['PORT']}/{url['NAME']}"
    layout = raw_setup(dsn)
    open_raw, _, close_raw = raw_runner(layout)
    state = open_raw()
    gen = raw_lifecycle(state, layout.lifecycle_groups[0], layout.actor, raw_lifecycle_bodies(layout.actor))
    for _ in range(5 * COMMANDS_PER_LIFECYCLE):
        next(gen)
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(n * COMMANDS_PER_LIFECYCLE):
        next(gen)
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    gen.close()
    close_raw(state)
    print(
        f"\n  raw baseline, same machine, 1 thread: {n / wall:.1f} lifecycles/s, {wall / n * 1000:.1f} ms per"
        f" lifecycle ({cpu / n * 1000:.1f} ms CPU), {wall / n / COMMANDS_PER_LIFECYCLE * 1e6:.0f} us per Command"
        f" (BEGIN, 5 statements, COMMIT each)"
    )


# --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short measurements (whole run under two minutes)")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds per measurement (overrides)")
    parser.add_argument("--repeats", type=int, default=0, help=f"runs per cell (default {REPEATS})")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of the benchmark: per-step timing and cProfile of single-threaded accept() (PostgreSQL if set)",
    )
    parser.add_argument("--profile-commands", type=int, default=3000, help=argparse.SUPPRESS)
    parser.add_argument("--profile-lifecycles", type=int, default=60, help=argparse.SUPPRESS)
    parser.add_argument(
        "--part",
        choices=PARTS,
        help="run one part only: commands (mix and hot workloads) or lifecycle (the WorkItem lifecycle mix)",
    )
    parser.add_argument("--keep-db", action="store_true", help="keep the PostgreSQL scratch database")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.backend:
        return child(args)
    extra: list[str] = []
    if args.duration:
        extra += ["--duration", str(args.duration)]
    if args.repeats:
        extra += ["--repeats", str(args.repeats)]
    if args.keep_db:
        extra.append("--keep-db")
    if args.part:
        extra += ["--part", args.part]
    if args.profile:
        extra += ["--profile-commands", str(args.profile_commands)]
        extra += ["--profile-lifecycles", str(args.profile_lifecycles)]
    return parent(args, extra)


if __name__ == "__main__":
    raise SystemExit(main())
