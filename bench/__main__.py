"""``python -m bench [--quick]``: run every benchmark and print one table."""

from __future__ import annotations

from bench.all import main

raise SystemExit(main())
