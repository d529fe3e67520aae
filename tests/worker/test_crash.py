"""Crash safety of the apply cycle (DESIGN §6; PROTOCOL §16; MWP-WRK-029/030).

A Worker process replaying 10,000 Events over 20 Groups is SIGKILLed at random
points at least 100 times. Every restart opens the store from disk and is
delivered what the server would replay after its durable Cursors: some Events
again around the Cursor, Groups interleaved at random, frames duplicated and
reordered. After each kill:

- no Cursor skipped a gap: each Group's inbox holds exactly sequences
  1..Cursor, the stream's own signed Events, and the Cursor names the last one;
- no Event was applied twice: the ``apply_audit`` counter, written in the
  apply transaction, is 1 for every applied Event, and ``processed_event``
  matches the inbox;
- Cursors never go back (what was committed survived the kill);
- the projection equals a clean rebuild of the same file (``rebuild()`` on a
  copy; compared in a background thread while the next Worker runs).

Finally the Worker runs to the end, and its projection equals both a clean
rebuild and the projection of an in-order, duplicate-free delivery.
"""

from __future__ import annotations

import marshal
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from mwworker import Store
from tests.worker.streams import ME, Event, generate, resume_delivery, verifier

CHILD = Path(__file__).with_name("crash_child.py")
SEED = 2026
KILLS = 100
# SIGKILL lands after the Worker has applied a random number of frames (up to
# this many; about 60 Events on average) plus a random moment, often inside
# the next apply transaction.
MAX_FRAMES = 200
MAX_JITTER = 0.002


def delivery_after(
    events: list[Event], cursors: dict[str, int], rng: random.Random, path: Path, limit: int | None = None
) -> None:
    """The server's replay after ``cursors``, as frames; only the first ``limit``
    when the Worker will be killed before that (loading 10,000 frames would
    cost each restart more than the replay it gets through)."""
    frames = resume_delivery(events, cursors, rng, overlap=5, limit=limit, dup_rate=0.1, swap_rate=0.2, window=8)
    path.write_bytes(marshal.dumps(frames))


def cursors_of(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return dict(conn.execute("SELECT group_id, sequence FROM cursor").fetchall())
    finally:
        conn.close()


def check_invariants(db: Path, stream_ids: dict[tuple[str, int], str], previous: dict[str, int]) -> dict[str, int]:
    """The durable state after a kill: contiguous, exactly-once, monotonic. Returns the Cursors."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        cursors = {g: (s, e) for g, s, e in conn.execute("SELECT group_id, sequence, last_event_id FROM cursor")}
        inbox: dict[str, list[tuple[int, str]]] = {}
        for g, seq, event_id in conn.execute(
            "SELECT group_id, sequence, event_id FROM inbox ORDER BY group_id, sequence"
        ):
            inbox.setdefault(g, []).append((seq, event_id))
        assert set(inbox) <= set(cursors)
        total = 0
        for group, (cursor, last_event_id) in cursors.items():
            rows = inbox.get(group, [])
            assert [seq for seq, _ in rows] == list(range(1, cursor + 1)), f"a gap in {group}"
            assert all(stream_ids[(group, seq)] == event_id for seq, event_id in rows)
            assert not rows or rows[-1][1] == last_event_id
            assert cursor >= previous.get(group, 0), f"the Cursor of {group} went back"
            total += cursor
        assert conn.execute("SELECT count(*) FROM processed_event").fetchone() == (total,)
        assert conn.execute(
            "SELECT count(*) FROM processed_event p LEFT JOIN inbox i ON i.event_id = p.event_id"
            " WHERE i.event_id IS NULL"
        ).fetchone() == (0,)
        applied = conn.execute("SELECT coalesce(max(applied), 1), count(*) FROM apply_audit").fetchone()
        assert applied == (1, total), f"an Event was applied twice or not recorded: {applied}"
        return {g: s for g, (s, _) in cursors.items()}
    finally:
        conn.close()


def copy_of(db: Path, target: Path) -> Path:
    source = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    dest = sqlite3.connect(target)
    try:
        source.backup(dest)
    finally:
        source.close()
        dest.close()
    return target


def rebuild_matches(path: Path) -> str | None:
    """None when rebuild() on this copy reproduces its projection, else what differs."""
    # No verifier: the comparison is of the fold, not of the signatures again (the child verified them).
    store = Store(path, agent=ME, synchronous="NORMAL")
    try:
        before = store.projection_dump()
        store.rebuild()
        after = store.projection_dump()
    finally:
        store.close()
    for suffix in ("", "-wal", "-shm", ".lock"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    return None if before == after else f"{path.name}: the projection differs from a clean rebuild"


def run_child(db: Path, delivery: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # noqa: S603 (our own script, this interpreter)
        [sys.executable, str(CHILD), str(db), ME, str(delivery), str(SEED)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def wait_for_frames(child: subprocess.Popen[bytes], frames: int) -> bool:
    """Read the child's progress until it has applied ``frames`` frames; False if it ended first."""
    assert child.stdout is not None
    fd = child.stdout.fileno()
    seen = b""
    while seen.count(b".") < frames:
        chunk = os.read(fd, 4096)
        if not chunk:
            return False
        seen += chunk
    return True


def test_a_worker_killed_100_times_never_skips_a_gap_nor_applies_twice(tmp_path: Path) -> None:
    started = time.monotonic()
    _, events = generate(SEED, 10_000, groups=20)
    assert len({e["groupId"] for e in events}) == 20
    stream_ids = {(e["groupId"], e["sequence"]): e["eventId"] for e in events}
    rng = random.Random(77)
    db = tmp_path / "worker.sqlite3"
    delivery = tmp_path / "delivery.marshal"
    cursors: dict[str, int] = {}
    comparisons: list[Future[str | None]] = []
    kills = 0
    with ThreadPoolExecutor(max_workers=1) as background:
        while kills < KILLS:
            assert sum(cursors.values()) < len(events), "the replay ended before 100 kills"
            target = rng.randint(0, MAX_FRAMES)
            delivery_after(events, cursors, rng, delivery, limit=target + 50)
            child = run_child(db, delivery)
            reached = wait_for_frames(child, target)
            time.sleep(rng.uniform(0, MAX_JITTER))
            child.send_signal(signal.SIGKILL)
            _, err = child.communicate()
            assert child.returncode in (-signal.SIGKILL, 0), err.decode()
            cursors = check_invariants(db, stream_ids, cursors)
            if child.returncode == 0 or not reached:
                continue  # it ran out of frames before the chosen point: not a kill
            kills += 1
            comparisons.append(background.submit(rebuild_matches, copy_of(db, tmp_path / f"copy-{kills}.sqlite3")))
        progress_at_last_kill = sum(cursors.values())

        # The last restart runs to the end.
        delivery_after(events, cursors, rng, delivery)
        child = run_child(db, delivery)
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0 and out.startswith(b"r") and out.endswith(b"d"), err.decode()
        cursors = check_invariants(db, stream_ids, cursors)
        assert sum(cursors.values()) == len(events)
        differences = [f.result() for f in comparisons]
        assert [d for d in differences if d] == []

    worker = Store(db, agent=ME, verifier=verifier(SEED))
    final = worker.projection_dump()
    worker.rebuild()
    assert worker.projection_dump() == final
    worker.close()
    in_order = Store(":memory:", agent=ME, verifier=verifier(SEED))
    for e in events:
        in_order.apply(e)
    assert in_order.projection_dump() == final
    in_order.close()
    assert 0 < progress_at_last_kill < len(events)  # the kills landed while replaying
    print(
        f"\n{kills} kills, {progress_at_last_kill} Events durable at the last one, {time.monotonic() - started:.1f} s"
    )
