"""``bench/commands.py --profile``: where ``accept_document()`` spends its time, one thread.

A per-step wall-clock breakdown (by wrapping the project's functions in this
process only; no file changes, and a name a refactoring removed is skipped,
not fatal), the SQL statement count, then cProfile's top functions.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from bench._commands_common import N_GROUPS, PARTS, USAGE, WORKLOADS, log
from bench._commands_project import build_fixtures, project_pools


class StepTimers:
    """Wall-clock time per step of ``accept_document``. Indented labels are
    parts of other steps (not added to the total): the catalogue check runs
    before the transaction for the Command and inside step 6 for each Event."""

    # In the order accept_document runs them: (module, attributes (the first
    # found is wrapped), label). "handler" and "commit" are wrapped specially.
    STEPS: tuple[tuple[str, tuple[str, ...], str], ...] = (
        ("missions.authority", ("verify_command",), "1  six stages (parse, schema, Registry, JCS, Ed25519)"),
        ("missions.intake", ("SignerRegistry.resolve",), "     of which the Registry lookup (ORM)"),
        ("mwportal.protocol.ed25519", ("verify",), "     of which Ed25519 verify (libsodium)"),
        ("missions.authority", ("_lock_group",), "3  _lock_group (SELECT ... FOR UPDATE)"),
        ("missions.authority", ("_load_actor",), "3  _load_actor (Agent + Membership SELECT)"),
        ("missions.authority", ("admit",), "4  First-Admission Record (lookup or append)"),
        ("handler", (), "5  handler"),
        ("missions.authority", ("_append_with_receipt",), "6  _append_with_receipt (Events, head, receipt)"),
        ("missions.authority", ("_event_document",), "     of which Event documents (build, check, sign)"),
        ("missions.authority", ("_catalogue.validate_payload",), "   catalogue payload checks (Command's + Events')"),
        ("commit", (), "7  COMMIT (connection.commit)"),
        ("missions.authority", ("notify_commit",), "8  delivery notice (on_commit)"),
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
                for kind in ("membership.change", USAGE):
                    spec = registry._REGISTRY[kind]
                    registry._REGISTRY[kind] = dataclasses.replace(spec, handler=self._wrap(label, spec.handler))
                    self._restore.append(lambda k=kind, s=spec: registry._REGISTRY.__setitem__(k, s))
                continue
            if module_name == "commit":
                wrapper_class = type(connections["default"])  # the backend's DatabaseWrapper
                commit = wrapper_class.commit
                setattr(wrapper_class, "commit", self._wrap(label, commit))  # noqa: B010
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

    from missions.authority import accept_document

    if args.part == "lifecycle":
        log("  --profile covers the mix and hot workloads (accept_document per step); not the lifecycle")
        return 0
    parts = [args.part] if args.part else list(PARTS)
    fx = build_fixtures(backend, N_GROUPS if "commands" in parts else 1)
    n = args.profile_commands
    for workload in WORKLOADS:
        pool = project_pools(fx, workload, 1, 2 * n + 200)[0]
        for data in pool[:200]:  # warm up
            accept_document(data)

        timers = StepTimers()
        timers.install()
        cpu0, t0 = time.thread_time(), time.perf_counter()
        try:
            with connection.execute_wrapper(timers.sql_wrapper):
                for data in pool[200 : 200 + n]:
                    accept_document(data)
        finally:
            timers.uninstall()
        wall, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
        print(f"\n===== {backend} {workload}: {n} Commands through accept_document(), 1 thread, no profiler")
        print(f"  {n / wall:.0f} cmd/s; per Command: {wall / n * 1e6:.0f} us wall, {cpu / n * 1e6:.0f} us CPU")
        print(f"  SQL: {timers.statements / n:.1f} statements per Command (+ BEGIN/COMMIT), ", end="")
        print(f"{timers.sql_seconds / n * 1e6:.0f} us in cursor.execute (client + round trip + server)")
        accounted = 0.0
        for label in timers.order:
            seconds = timers.totals.get(label, 0.0)
            if not label.startswith("   "):
                accounted += seconds
            print(f"  {label:62} {seconds / n * 1e6:7.0f} us  {seconds / wall * 100:5.1f}%")
        rest = wall - accounted
        label = "   rest: receipt lookup, freshness, epochs, atomic(), glue"
        print(f"  {label:62} {rest / n * 1e6:7.0f} us  {rest / wall * 100:5.1f}%")

        prof = cProfile.Profile()
        prof.enable()
        for data in pool[200 + n :]:
            accept_document(data)
        prof.disable()
        for sort, limit in (("tottime", 25), ("cumulative", 40)):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(sort).print_stats(limit)
            print(f"\n----- cProfile, {backend} {workload}, by {sort} (profiler overhead inflates Python-heavy code)")
            print(buf.getvalue().split("\n", 4)[-1].strip("\n"))
    return 0
