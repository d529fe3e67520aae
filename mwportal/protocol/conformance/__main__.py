"""``python -m mwportal.protocol.conformance [--root DIR] [--json]``.

Exit status: 0 when every evaluation passed and every artifact matched,
1 otherwise, 2 when there is no bundle at the root (or bad arguments).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import default_root, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mw conformance",
        description="Run the MWP 0.1 bundles (structural, cryptography, admission) against the kernel.",
    )
    parser.add_argument(
        "--root",
        type=Path,
        help="the bundle root (default: $MWP_PROTOCOL_ROOT, else ../shared/mwp-0.1 beside the checkout)",
    )
    parser.add_argument("--json", action="store_true", help="print the tallies as one JSON document")
    args = parser.parse_args(argv)
    root: Path = args.root if args.root is not None else default_root()
    if not root.is_dir():
        print(f"mw conformance: no MWP 0.1 bundle at {root} (set MWP_PROTOCOL_ROOT or pass --root)", file=sys.stderr)
        return 2
    report = run(root)
    print(report.render_json() if args.json else report.render_text())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
