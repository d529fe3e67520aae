"""Which kernel modules the runner needs, and whether they are there.

The bundle runners import the kernel where they call it and call it through
its module attributes (``verification.verify_document``, never a name bound
at import time), so a test that replaces a kernel function with
``monkeypatch`` is what the runner runs (the mutation guards of issue 17,
item 10). A kernel module that cannot be imported fails every evaluation of
the bundles that need it; it is never a skip.
"""

from __future__ import annotations

import importlib

STRUCTURAL = ("strictjson", "schemas")
CRYPTOGRAPHY = ("strictjson", "jcs", "values", "ed25519", "registry", "verification")
ADMISSION = (*CRYPTOGRAPHY, "admission")


def missing(names: tuple[str, ...]) -> str | None:
    """None when every ``mwportal.protocol.<name>`` imports, else why not."""
    for name in names:
        try:
            importlib.import_module(f"mwportal.protocol.{name}")
        except Exception as exc:  # absent, or failing at import (a half-landed change): unusable either way
            return f"kernel missing: mwportal.protocol.{name} ({type(exc).__name__}: {exc})"
    return None
