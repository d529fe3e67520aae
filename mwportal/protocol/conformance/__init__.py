"""The MWP 0.1 bundle runner behind ``./mw conformance`` (issue 17, item 9).

``run(root)`` checks the bundle's integrity (integrity.py) and runs its
three bundles against the kernel: the 58 structural vectors
(structural.py), the 62 cryptography evaluations (signed_documents.py) and
the 30 admission evaluations (first_admission.py). It returns a ``Report``
whose ``ok`` is the exit decision. ``default_root()`` is where the bundle
is looked for: ``MWP_PROTOCOL_ROOT``, else ``../shared/mwp-0.1`` beside the
checkout. Nothing of the bundle is part of the project; it is read from
there at run time. Django-free, like the rest of ``mwportal.protocol``.
"""

from __future__ import annotations

import os
from pathlib import Path

from .report import Check, Outcome, Report
from .runner import run

__all__ = ["Check", "Outcome", "Report", "default_root", "run"]

CHECKOUT = Path(__file__).resolve().parents[3]


def default_root() -> Path:
    env = os.environ.get("MWP_PROTOCOL_ROOT")
    return Path(env) if env else CHECKOUT.parent / "shared" / "mwp-0.1"
