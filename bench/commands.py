"""Accepted Commands per second through ``missions.authority.accept_document()`` (MWP 0.1).

    python bench/commands.py [--quick]          the benchmark (DESIGN §8)
    python bench/commands.py --part commands    only the mix and hot workloads
    python bench/commands.py --part lifecycle   only the WorkItem lifecycle mix
    python bench/commands.py --profile          where accept_document() spends its time (1 thread)

What the project side times is ``accept_document(bytes)``: the bytes of a
normative signed Command document (PROTOCOL §15.1) as a binding hands them
over, through the six verification stages of §6.4 (strict parse, schema,
signature envelope, key resolution in the signer's Organization's Registry,
JCS signing bytes, Ed25519), the payload against the catalogue, freshness,
and the DESIGN §3 transaction (First-Admission Record, Group lock, epochs,
roles, ``expectedRevision``, handler, Events signed by the Group Authority,
receipt). Verifying is the server's cost and is timed; signing is the
client's cost: every document is built with
``mwportal.protocol.command.build_command`` and signed before the clock
starts (the lifecycle mix, whose Commands depend on earlier receipts, is
the exception and says so).

Fixtures are built the same way, through ``accept_document``: a person
(Olivia, a software key) creates the Missions (``mission.create`` is a human
Command) with a Coordinator Agent (Carl, with an Agent Card) and grants
Memberships with ``membership.change``; Agents have sessions from
``missions.commands.open_session``.

Workloads, on PostgreSQL (``MWP_DATABASE_URL=postgres://...``):

- **mix**: 1,000 Mission Groups (``--quick``: 100); each thread owns a disjoint subset of them and
  sends Olivia's ``membership.change`` with ``expectedRevision``
  (compare-and-set on the Group revision, §15.3), alternating one member's
  roles between ``["worker"]`` and ``["reviewer", "worker"]``: two
  ``membership.changed`` Events per Command (one per role, §8);
- **hot**: one Mission Group, one Agent per thread, each executing its own
  WorkItem under an Execution Lease and reporting usage
  (``ext.missionweaveprotocol.core.resource_usage_record``, one tool call
  each, §12): one Event per Command, every thread on the same Group lock;

each at concurrency 1, 4 and 8, against the **raw baseline** of
``bench/_commands_raw.py`` measured in the same run, from the same number of
threads, on the same layout (the same number of Groups, one hot Group): psycopg 3 only,
the Command's Ed25519 signature verified over its JCS bytes, the minimal
transaction with each Event signed with Ed25519 (as the authority must), as
many Events per Command as the project appends. Each measurement runs for a
fixed duration (``--quick``: 0.8 s on PostgreSQL, 0.5 s on SQLite, a
lifecycle cell 0.6 s and 0.4 s; otherwise 10 s) from a barrier, is repeated 3 times interleaved with the raw baseline,
and the median Commands/s is reported; the ratio is median(project) /
median(raw). Target: mix and hot at concurrency 8 >= 0.5.

**lifecycle** (``bench/_commands_lifecycle.py``): WorkItems driven from
``work.authorize`` to ``work.accept_result`` by a Coordinator and a Worker
per thread, in a Mission Group per thread ("spread") or one for all
("shared"), against raw transactions of the same count; informational.

The same script runs the embedded SQLite default (WAL, IMMEDIATE
transactions) with the same workloads and prints its Commands/s (no raw
baseline there).

Settings are read once per process, so the parent process runs the SQLite
part and the PostgreSQL part in child processes of this same script
(``--backend sqlite|postgres``) and prints one table and the RESULT lines.
The PostgreSQL part works in a scratch database (``<db>_bench``) that it
creates and drops; the SQLite part in a temporary directory. Both force
``MWP_DEBUG=0`` (Django's DEBUG records every query), ignore
``MWP_REDIS_URL`` (in-memory channel layer: the numbers are about the
acceptance transaction) and set ``MWP_LEASE_SECONDS`` long enough that no
Execution Lease of the hot workload expires during the run.

Exit status 0 even when a target is missed (the numbers are the report); 1
when a part crashed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._commands_common import (  # noqa: E402
    BENCH,
    CONCURRENCY,
    DURATION_FULL,
    DURATION_QUICK,
    LIFECYCLE_CELLS,
    LIFECYCLE_DURATION_QUICK,
    N_GROUPS,
    N_GROUPS_QUICK,
    PARTS,
    REPEATS,
    SQLITE_LIFECYCLE_CELLS,
    TARGET,
    TARGET_CONCURRENCY,
    WARMUP_SECONDS,
    WORKLOADS,
    Measurement,
    PoolSizer,
    conninfo,
    fmt,
    log,
    measure,
)
from bench._commands_project import build_fixtures, check_project_chain, project_pools, project_runner  # noqa: E402
from bench._commands_raw import check_raw_chain, event_templates, raw_pools, raw_runner, raw_setup  # noqa: E402

# Payloads the raw baseline copies from the project's own Events.
TEMPLATE_KINDS = ["membership.changed", "ext.missionweaveprotocol.core.resource_usage_recorded"]

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
        from bench._commands_lifecycle import print_lifecycle_table

        print_lifecycle_table(postgres, sqlite, pg_url, pg_why, print_table)
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
                        f"{part['groups']} Groups" if wl == "mix" else "hot Group",
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


# --------------------------------------------------------------------------
# Child: one backend, in a fresh database
# --------------------------------------------------------------------------


def scratch_url(url: str) -> tuple[str, str, str]:
    """``(scratch_url, scratch_db, maintenance_url)`` for a PostgreSQL URL."""
    parts = urlsplit(url)
    base = parts.path.lstrip("/") or "postgres"
    name = f"{base}_bench"
    return urlunsplit(parts._replace(path="/" + name)), name, urlunsplit(parts._replace(path="/" + base))


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
    os.environ.setdefault("MWP_LOG_LEVEL", "WARNING")
    os.environ.pop("MWP_REDIS_URL", None)
    # The hot workload's Execution Leases outlive a full run (the default is 300 s).
    os.environ["MWP_LEASE_SECONDS"] = "86400"
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
            from bench._commands_profile import run_profile

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


def run_backend(backend: str, args: argparse.Namespace, database_url: str) -> dict[str, Any]:
    from django.db import connection

    duration = args.duration or (DURATION_QUICK if args.quick else DURATION_FULL)[backend]
    repeats = args.repeats or REPEATS
    parts = [args.part] if args.part else list(PARTS)
    t0 = time.monotonic()
    n_groups = (N_GROUPS_QUICK if args.quick else N_GROUPS) if "commands" in parts else 1
    fx = build_fixtures(backend, n_groups)
    layout = raw_setup(database_url, event_templates(TEMPLATE_KINDS), n_groups) if backend == "postgres" else None
    setup_seconds = time.monotonic() - t0
    log(f"  fixtures: {len(fx.groups)} Groups + hot Group with {len(fx.hot)} Agents in {setup_seconds:.1f} s")
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
        from bench._commands_lifecycle import run_lifecycles

        lifecycle, errors = run_lifecycles(backend, fx, layout, lc_duration, repeats)
        total_errors += errors
    return {
        "backend": "postgresql" if backend == "postgres" else "sqlite",
        "groups": n_groups,
        "server": server,
        "duration": duration,
        "lifecycle_duration": lc_duration if "lifecycle" in parts else None,
        "repeats": repeats,
        "setup_seconds": setup_seconds,
        "cells": cells,
        "lifecycle": lifecycle,
        "errors": total_errors,
    }


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
