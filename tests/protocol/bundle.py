"""Where the MWP 0.1 bundle lives for the protocol tests.

The bundle (schemas, vectors, manifests) is never copied into the project:
tests read it from ``MWP_PROTOCOL_ROOT`` or from ``../shared/mwp-0.1``
relative to the checkout, and skip with one line when it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def bundle_root() -> Path:
    env = os.environ.get("MWP_PROTOCOL_ROOT")
    root = Path(env) if env else REPO.parent / "shared" / "mwp-0.1"
    if not root.is_dir():
        pytest.skip(f"no MWP 0.1 bundle at {root} (set MWP_PROTOCOL_ROOT)")
    return root
