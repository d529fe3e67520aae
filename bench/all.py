"""Run every ``bench/*.py`` and print one table of their RESULT lines (DESIGN §7).

    python bench/all.py [--quick]        (or: python -m bench [--quick])

Each benchmark runs in its own process (Django settings are read once per
process), its output streams through as it runs, and its ``RESULT`` lines are
collected into the table printed at the end. ``--quick`` goes to every
benchmark; other options after the known ones go only to the benchmarks whose
``--help`` usage lists them (the scripts spell some differently: ``commands.py
--repeats`` but ``fanout.py``/``replay.py`` ``--repeat``), and a dropped
option is reported (``--bench NAME`` runs only ``bench/NAME.py``). The exit
status is non-zero only when a benchmark itself failed (crashed or exited
non-zero), not when a target was missed: the numbers are the report.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
# Files in bench/ that are not benchmarks.
NOT_BENCHMARKS = {"__init__.py", "__main__.py", "all.py"}


def discover() -> list[Path]:
    return sorted(p for p in BENCH_DIR.glob("*.py") if p.name not in NOT_BENCHMARKS and not p.name.startswith("_"))


def parse_result(line: str) -> dict[str, str]:
    """``RESULT k=v k=v ...`` -> dict; ``target>=0.5`` becomes ``target: '>=0.5'``."""
    fields: dict[str, str] = {}
    for token in line.split()[1:]:
        for op in (">=", "<=", "="):
            if op in token:
                key, value = token.split(op, 1)
                fields[key] = value if op == "=" else op + value
                break
    return fields


def known_options(path: Path) -> set[str] | None:
    """The options ``path`` accepts, from the usage block of its ``--help``
    (hidden options are not listed there, and need not be passed through)."""
    try:
        proc = subprocess.run(  # noqa: S603 (our own scripts, run with this interpreter)
            [sys.executable, str(path), "--help"], capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    usage = proc.stdout.split("\n\n", 1)[0]
    return set(re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*)", usage))


def option_groups(extra: list[str]) -> list[list[str]]:
    """``["--repeats", "2", "--keep-db"]`` -> ``[["--repeats", "2"], ["--keep-db"]]``."""
    groups: list[list[str]] = []
    for token in extra:
        if token.startswith("-") or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    return groups


def accepts(option: str, known: set[str]) -> bool:
    """As argparse does: the exact name, or an unambiguous prefix of one."""
    name = option.split("=", 1)[0]
    if name in known:
        return True
    return len([k for k in known if k.startswith(name)]) == 1


def args_for(path: Path, extra: list[str]) -> tuple[list[str], list[str]]:
    """The options of ``extra`` that ``path`` accepts, and the dropped ones."""
    groups = option_groups(extra)
    if all(group == ["--quick"] for group in groups):
        return extra, []
    known = known_options(path)
    kept: list[str] = []
    dropped: list[str] = []
    for group in groups:
        if group == ["--quick"] or (known is not None and accepts(group[0], known)):
            kept += group
        else:
            dropped.append(" ".join(group))
    return kept, dropped


def run_one(path: Path, extra: list[str]) -> tuple[int, list[dict[str, str]], float]:
    started = time.monotonic()
    proc = subprocess.Popen(  # noqa: S603 (our own scripts, run with this interpreter)
        [sys.executable, str(path), *extra],
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    results: list[dict[str, str]] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if line.startswith("RESULT "):
            results.append(parse_result(line))
    rc = proc.wait()
    return rc, results, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the short version of every benchmark")
    parser.add_argument("--bench", action="append", default=[], help="run only bench/BENCH.py (repeatable)")
    args, extra = parser.parse_known_args(argv)
    if args.quick:
        extra = ["--quick", *extra]
    scripts = discover()
    if args.bench:
        scripts = [p for p in scripts if p.stem in set(args.bench)]
    if not scripts:
        print("no benchmarks found in", BENCH_DIR)
        return 1

    rows: list[dict[str, str]] = []
    failed: list[str] = []
    for path in scripts:
        args_here, dropped = args_for(path, extra)
        print(f"=== bench/{path.name} {' '.join(args_here)}".rstrip(), flush=True)
        if dropped:
            print(f"=== (not passed to bench/{path.name}, which does not know them: {', '.join(dropped)})", flush=True)
        rc, results, elapsed = run_one(path, args_here)
        print(f"=== bench/{path.name}: exit {rc} after {elapsed:.0f} s", flush=True)
        if rc != 0:
            failed.append(f"{path.name} (exit {rc})")
        if not results:
            rows.append({"bench": path.stem, "metric": "(no RESULT lines)", "value": "", "ok": "false"})
        rows.extend(results)

    headers = ("bench", "metric", "value", "target", "ok")
    table = [[r.get(h, "") for h in headers] for r in rows]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers)]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    print("  ".join("-" * w for w in widths))
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    targets = [r for r in rows if r.get("target")]
    met = sum(1 for r in targets if r.get("ok") == "true")
    print(f"\n{met} of {len(targets)} targets met", end="")
    print(f"; failed benchmarks: {', '.join(failed)}" if failed else "")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
