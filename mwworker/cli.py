"""``mwworker run | rebuild | status | demo`` (``python -m mwworker``).

::

    python -m mwworker run --config worker.toml     connect, answer offers, run capabilities
    python -m mwworker rebuild --config worker.toml drop the projection, rebuild it from snapshot + inbox
    python -m mwworker status --config worker.toml  Groups, Cursors, queue depths, slots and leases
    python -m mwworker demo --portal URL --key K    run the demo capabilities (``mwworker.demo``)
    python -m mwworker explain --config worker.toml why each queued item waits: every factor of its
                                                    order and its projected rank (``mwworker.explain``)

Exit status: 0 done, 1 refused or failed, 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from .config import Identity, WorkerConfig
from .errors import StoreLocked, WorkerError
from .runtime import Worker
from .store import Store

console = Console(stderr=True)


def _worker(config: WorkerConfig) -> Worker:
    identity = Identity.from_key_file(config.key_file)
    worker = Worker(
        portal=config.portal, identity=identity, store=config.store, slots=config.slots,
        queue_limit=config.queue_limit,
    )  # fmt: skip
    module_name = config.capabilities or "mwworker.demo"
    module = importlib.import_module(module_name)
    register = getattr(module, "register", None)
    if not callable(register):
        raise WorkerError(f"{module_name} has no register(worker) function")
    register(worker)
    return worker


async def _run_until_signal(worker: Worker, progress: Progress | None = None, items: int | None = None) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, worker.stop)
    task = asyncio.create_task(worker.run())
    if progress is None:
        await task
        return
    done_task = progress.add_task("submitted", total=items)
    slots_task = progress.add_task("slots in use", total=worker.slots)
    while not task.done():
        submitted = sum(1 for kind, _, _ in worker.log if kind == "submitted")
        progress.update(done_task, completed=submitted)
        progress.update(slots_task, completed=len(worker.running))
        if items is not None and submitted >= items:
            worker.stop()
        await asyncio.wait({task}, timeout=0.25)
    await task


def cmd_run(args: argparse.Namespace) -> int:
    config = WorkerConfig.load(args.config)
    worker = _worker(config)
    console.print(f"worker {worker.me} -> {config.portal} ({config.slots} slots, store {config.store})")
    try:
        asyncio.run(_run_until_signal(worker))
    finally:
        worker.close()
    return 0


def cmd_rebuild(args: argparse.Namespace) -> int:
    config = WorkerConfig.load(args.config)
    identity = Identity.from_key_file(config.key_file)
    with Store(config.store, agent=identity.agent_id) as store:
        before = store.projection_dump()
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as bar:
            bar.add_task("rebuilding the projection from snapshots and the inbox", total=None)
            store.rebuild()
        after = store.projection_dump()
        groups = store.groups()
    same = "identical to" if before == after else "different from"
    console.print(f"rebuilt {len(groups)} Groups; the projection is {same} the incremental one")
    return 0


def _status_rows(path: Path, agent: str) -> list[dict[str, Any]]:
    """Read the store without its write lock (a running Worker holds it): a
    read-only SQLite connection, as WAL readers never block the writer."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        cursors = dict(conn.execute("SELECT group_id, sequence FROM cursor").fetchall())
        out = []
        for group, kind, title in conn.execute(
            "SELECT group_id, kind, mission_title FROM group_meta ORDER BY group_id"
        ):
            depth: dict[str, int] = {}
            leases = []
            for state, owner, lease in conn.execute(
                "SELECT state, owner, lease_id FROM group_queue WHERE group_id = ?", (group,)
            ):
                if owner == agent:
                    depth[state] = depth.get(state, 0) + 1
                    if lease:
                        leases.append(lease)
            offered = conn.execute(
                "SELECT COUNT(*) FROM group_queue WHERE group_id = ? AND state = 'offered' AND offered_to LIKE ?",
                (group, f'%"{agent}"%'),
            ).fetchone()[0]
            out.append({"group": group, "kind": kind, "title": title or "", "cursor": cursors.get(group, 0),
                        "offered": offered, "queued": depth.get("queued", 0), "active": depth.get("active", 0),
                        "blocked": depth.get("blocked", 0), "leases": leases})  # fmt: skip
        return out
    finally:
        conn.close()


def _short(identifier: str) -> str:
    return identifier.removeprefix("urn:uuid:")[:8]


def cmd_status(args: argparse.Namespace) -> int:
    config = WorkerConfig.load(args.config)
    identity = Identity.from_key_file(config.key_file)
    if not config.store.exists():
        console.print(f"no store at {config.store} yet: the Worker has not run")
        return 1
    rows = _status_rows(config.store, identity.agent_id)
    if args.json:
        print(json.dumps(rows, indent=2))  # noqa: T201 (the command's output)
        return 0
    table = Table(title=f"worker {identity.agent_id}")
    table.add_column("Group", no_wrap=True, min_width=8)
    table.add_column("kind", no_wrap=True)
    table.add_column("Mission", overflow="ellipsis", max_width=24)
    for column in ("cursor", "offered", "queued", "active", "blocked"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("leases", no_wrap=True, min_width=8)
    for r in rows:
        table.add_row(
            _short(r["group"]), r["kind"] or "?", r["title"][:30], str(r["cursor"]), str(r["offered"]),
            str(r["queued"]), str(r["active"]), str(r["blocked"]), "\n".join(map(_short, r["leases"])) or "-",
        )  # fmt: skip
    active = sum(r["active"] for r in rows)
    Console().print(table)
    Console().print(f"slots: {active} of {config.slots} in use")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    identity = Identity.from_key_file(args.key)
    store = Path(args.store or f"mwworker-demo-{identity.agent_id.removeprefix('urn:uuid:')[:8]}.sqlite3")
    worker = Worker(portal=args.portal, identity=identity, store=store, slots=args.slots)
    demo.register(worker)
    console.print(f"demo worker {worker.me} -> {args.portal}: capabilities {sorted(worker.capabilities)}")
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}"), TimeElapsedColumn())
    try:
        with Progress(SpinnerColumn(), *columns, console=console) as progress:
            asyncio.run(_run_until_signal(worker, progress, args.items))
    finally:
        worker.close()
    for kind, item, detail in worker.log:
        console.print(f"  {kind:16} {_short(item)} {detail}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from . import explain

    config = WorkerConfig.load(args.config)
    identity = Identity.from_key_file(config.key_file)
    argv = ["--store", str(config.store), "--agent", identity.agent_id]
    argv += ["--json"] if args.json else []
    argv += ["--limit", str(args.limit)] if args.limit else []
    argv += [arg for cap in args.capability for arg in ("--capability", cap)]
    argv += ["--now", args.now] if args.now else []
    return explain.main(argv)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mwworker", description="The MissionWeave Worker runtime")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, helptext in (
        ("run", "connect and work"),
        ("rebuild", "rebuild the projection from snapshots and the inbox"),
        ("status", "Groups, cursors, queue depths, slots and leases"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--config", required=True, type=Path)
        if name == "status":
            p.add_argument("--json", action="store_true", help="print the rows as JSON")
    explain = sub.add_parser("explain", help="why each queued item waits (its factors and rank)")
    explain.add_argument("--config", required=True, type=Path)
    explain.add_argument("--json", action="store_true", help="print the rows as JSON lines")
    explain.add_argument("--limit", type=int, help="show the first N rows")
    explain.add_argument("--capability", action="append", default=[], help="ID@VERSION this Worker has (repeat)")
    explain.add_argument("--now", help="RFC 3339 time to explain at (default: the clock)")
    demo = sub.add_parser("demo", help="run the demo capabilities against a portal")
    demo.add_argument("--portal", required=True, help="e.g. http://127.0.0.1:8000")
    demo.add_argument("--key", required=True, type=Path, help="the DESIGN §4 key file of mwp create-agent / mwp demo")
    demo.add_argument("--store", default=None)
    demo.add_argument("--slots", type=int, default=2)
    demo.add_argument("--items", type=int, default=None, help="stop after this many submissions")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        handlers=[RichHandler(console=console, show_path=False)],
        format="%(message)s",
    )
    handlers = {"run": cmd_run, "rebuild": cmd_rebuild, "status": cmd_status, "demo": cmd_demo,
                "explain": cmd_explain}  # fmt: skip
    try:
        return handlers[args.command](args)
    except StoreLocked as exc:
        console.print(f"[red]the store is in use by a running Worker: {exc}[/red]")
        return 1
    except WorkerError as exc:
        console.print(f"[red]{exc}[/red]")
        return 1


if __name__ == "__main__":
    sys.exit(main())
