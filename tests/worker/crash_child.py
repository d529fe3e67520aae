"""The Worker process that ``test_crash.py`` kills with SIGKILL.

    python tests/worker/crash_child.py STORE AGENT DELIVERY SEED

Opens the Worker's store (as a restarted Worker does: the Cursors come from
disk, nothing waits in memory), writes ``r``, then applies the frames of
DELIVERY (a marshal file the test wrote: the server's replay after the
durable Cursors, with duplicates and reordering) one by one, writing ``.``
after each, until it is killed or runs out; then it writes ``d``. The dots
let the test kill it at a chosen point of the replay, whatever the machine's
speed.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(store_path: str, agent: str, delivery_path: str, seed: str) -> int:
    sys.path.insert(0, str(ROOT))
    # ``import mwportal.protocol`` runs mwportal/__init__.py, which imports the
    # Celery app (and with it part of Django): a quarter of a second per
    # restart, a hundred restarts here. A Worker needs only the kernel, so the
    # package is entered without its __init__ (reported: the kernel should not
    # depend on the portal package's side effects).
    spec = importlib.util.find_spec("mwportal")
    assert spec is not None and spec.submodule_search_locations is not None
    package = types.ModuleType("mwportal")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["mwportal"] = package

    from mwworker import Store
    from tests.worker.streams import verifier

    frames = marshal.loads(Path(delivery_path).read_bytes())  # noqa: S302 (the test's own file)
    # The stream's Group Authority key, as a Worker learns it from GET /api/v0.1/keys/{keyId}.
    store = Store(store_path, agent=agent, audit=True, verifier=verifier(int(seed)))
    os.write(1, b"r")
    for frame in frames:
        store.apply(frame)
        os.write(1, b".")
    store.close()
    os.write(1, b"d")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:5]))
