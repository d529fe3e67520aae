"""The Worker's local SQLite store: per-Group inbox, Cursor and Work queue (PROTOCOL §11.1, §16; DESIGN §6).

One SQLite file per Worker, in WAL mode, written through explicit
transactions (the connection is in autocommit mode; every write is a visible
``BEGIN IMMEDIATE ... COMMIT``). The apply cycle of the persistence guide
("Implementation note"), one local transaction per Event::

    skip a known Event (ID, or a sequence at or below the Cursor)
    require the next contiguous sequence (later ones wait in memory)
    verify the Group Authority's signature (six stages, §6.4) and the
    payload against the catalogue (``events.EventVerifier``)
    BEGIN IMMEDIATE
      inbox + processed_event            the durable Event and its dedup row
      group_meta / group_queue           projection.fold()
      checkpoint / outbox                intents the Event implies
      cursor                             the highest contiguous durable sequence
    COMMIT

so a crash leaves either all of one Event's effects or none, and the Cursor
never passes a gap (MWP-WRK-029). Out-of-order Events wait in memory only:
after a crash the server replays from the durable Cursor anyway (MWP-WRK-030).

Tables, and who owns them:

=================  ==========================================================
projection         ``cursor``, ``processed_event``, ``group_meta``,
                   ``group_queue``, ``checkpoint``, ``outbox``: rebuildable;
                   ``rebuild()`` drops and recreates them from ``snapshot`` +
                   ``inbox`` and gets the same rows byte for byte
durable input      ``inbox`` (every applied Event document, its JCS text),
                   ``snapshot`` (the latest verified Group Snapshot and its
                   state per Group)
runtime            ``outbox_done`` (intents dispatched), ``buffered_command``
                   (signed Commands held while offline, spec 11.5),
                   ``side_effect`` (external operations: intent before
                   dispatch, then the receipt; MWP-WRK-031): never derived
                   from Events, so a rebuild keeps them
audit (opt-in)     ``apply_audit``: how many times each Event was applied,
                   written in the apply transaction (``Store(audit=True)``)
=================  ==========================================================

Their DDL, and the SQL the apply cycle runs, are in ``schema``.

A ``Store`` is used from one thread at a time (the runtime calls it through
``asyncio.to_thread``); an internal lock makes concurrent calls wait. One
process writes a file: ``Store`` holds ``<file>.lock`` (``flock``) while open,
and a second ``Store`` on the same file raises ``StoreLocked``. That is what
lets the Cursors and the rows the apply cycle reads live in memory. Other
processes may still read the SQLite file (WAL readers never block).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

try:
    import fcntl
except ImportError:  # not POSIX: no cross-process lock (the Worker targets Linux)
    fcntl = None  # type: ignore[assignment]

from mwportal.protocol import jcs
from mwportal.protocol.verification import VerificationFailed, verify_document

from . import projection
from .errors import (
    ChainBroken,
    MalformedEvent,
    ProjectionError,
    SignatureRefused,
    SnapshotRefused,
    StoreLocked,
    StoreMismatch,
    WorkerError,
)
from .events import Event, EventVerifier, check_event, event_bytes, text
from .projection import CheckpointRow, GroupMeta, OutboxRow, WorkRow
from .schema import (
    CHECKPOINT_COLS,
    DUMP_ORDER,
    DURABLE_DDL,
    META_COLS,
    OUTBOX_COLS,
    PROJECTION_DDL,
    PROJECTION_INDEXES,
    PROJECTION_TABLES,
    ROW_COLS,
    SCHEMA_VERSION,
    SQL_AUDIT,
    SQL_CHECKPOINT,
    SQL_CURSOR,
    SQL_META,
    SQL_OUTBOX,
    SQL_ROW,
    SQL_SELECT_META,
    SQL_SELECT_ROW,
    checkpoint_from,
    column_values,
    meta_from,
    row_from,
)

SYNCHRONOUS = ("FULL", "NORMAL", "EXTRA")


@dataclass(frozen=True, slots=True)
class Cursor:
    """The highest contiguous durably processed sequence of a Group and the ID of its Event."""

    sequence: int
    last_event_id: str


_ORIGIN = Cursor(0, "")


def _exclusive(path: str) -> IO[bytes] | None:
    """Hold ``<path>.lock`` with ``flock`` for the Store's lifetime: one
    writing process per file, so the Cursors and rows in memory are the
    durable ones. The OS drops the lock when the process dies (even by
    SIGKILL), so a crashed Worker never leaves it behind."""
    if path == ":memory:" or fcntl is None:
        return None
    handle = open(path + ".lock", "ab")  # noqa: SIM115 (held open until close())
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise StoreLocked(f"{path} is open in another process") from None
    return handle


class Store:
    """A Worker's durable per-Group inbox, Cursor and Work queue.

    ``Store(path, agent=...)`` opens (or creates) the file; ``agent`` is the
    Worker's own Agent ID, recorded on first use and checked afterwards.
    ``synchronous`` is SQLite's: ``FULL`` (default) makes every commit
    durable across power loss; ``NORMAL`` only across a process crash (the
    server replays what a power loss takes back, at the cost of re-doing it).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        agent: str,
        verifier: EventVerifier | None = None,
        synchronous: str = "FULL",
        audit: bool = False,
        max_buffered: int = 10_000,
        max_cached_rows: int = 100_000,
    ):
        if synchronous not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS}")
        self.path = str(path)
        self.agent = agent
        self.verifier = verifier
        self.audit = audit
        self.max_buffered = max_buffered
        self.max_cached_rows = max_cached_rows
        self._lock = threading.RLock()
        self._lockfile = _exclusive(self.path)
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            self._conn.execute("PRAGMA busy_timeout = 10000")
            if self.path != ":memory:":
                mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StoreMismatch(f"{self.path}: could not switch to WAL mode (got {mode})")
            self._conn.execute(f"PRAGMA synchronous = {synchronous}")
            self._create_schema()
        except BaseException:
            self.close()
            raise
        self._cursors: dict[str, Cursor] = {}
        # Later Events waiting for a gap to fill: group -> sequence -> event_id -> Event.
        self._pending: dict[str, dict[int, dict[str, Event]]] = {}
        # Committed rows by key (None: known absent), so the apply cycle reads
        # a row once, not once per Event.
        self._metas: dict[str, GroupMeta | None] = {}
        self._rows: dict[tuple[str, str], WorkRow | None] = {}
        self._load_cursors()

    # --- lifecycle -------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            if self._lockfile is not None:
                self._lockfile.close()  # releases the flock
                self._lockfile = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE``: take the write lock up front, so a second
        writer waits (busy_timeout) instead of failing halfway through."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _create_schema(self) -> None:
        with self._transaction() as conn:
            for ddl in DURABLE_DDL:
                conn.execute(ddl)
            for ddl in PROJECTION_DDL.values():
                conn.execute(ddl)
            for ddl in PROJECTION_INDEXES:
                conn.execute(ddl)
            stored = dict(conn.execute("SELECT key, value FROM store_meta").fetchall())
            if not stored:
                conn.executemany(
                    "INSERT INTO store_meta (key, value) VALUES (?, ?)",
                    [("agent", self.agent), ("schema", SCHEMA_VERSION)],
                )
            elif stored.get("agent") != self.agent or stored.get("schema") != SCHEMA_VERSION:
                raise StoreMismatch(
                    f"{self.path} belongs to agent {stored.get('agent')} (schema {stored.get('schema')}),"
                    f" not {self.agent} (schema {SCHEMA_VERSION})"
                )

    def _load_cursors(self) -> None:
        self._cursors = {
            g: Cursor(s, e) for g, s, e in self._conn.execute("SELECT group_id, sequence, last_event_id FROM cursor")
        }

    # --- reading -----------------------------------------------------------------

    def cursor(self, group: str) -> Cursor:
        """The Group's durable Cursor (``Cursor(0, "")`` for a Group never seen)."""
        with self._lock:
            return self._cursors.get(group, _ORIGIN)

    def ack_positions(self) -> dict[str, int]:
        """The highest contiguous durable sequence per Group: what an ACK frame may report (MWP-WRK-030)."""
        with self._lock:
            return {g: c.sequence for g, c in sorted(self._cursors.items()) if c.sequence > 0}

    def buffered(self, group: str) -> list[int]:
        """Sequences waiting in memory for a gap before them to fill."""
        with self._lock:
            return sorted(self._pending.get(group, {}))

    def groups(self) -> list[str]:
        with self._lock:
            return [g for (g,) in self._conn.execute("SELECT group_id FROM group_meta ORDER BY group_id")]

    def meta(self, group: str) -> GroupMeta | None:
        with self._lock:
            row = self._conn.execute(SQL_SELECT_META, (group,)).fetchone()
            return meta_from(row) if row else None

    def queue(self, group: str) -> list[WorkRow]:
        """The Group's Work queue projection, one row per WorkItem, by WorkItem ID."""
        with self._lock:
            sql = f"SELECT {', '.join(ROW_COLS)} FROM group_queue WHERE group_id = ? ORDER BY workitem"
            return [row_from(r) for r in self._conn.execute(sql, (group,))]

    def row(self, group: str, workitem: str) -> WorkRow | None:
        """One WorkItem's row of the Group's Work queue, or None."""
        with self._lock:
            found = self._conn.execute(SQL_SELECT_ROW, (group, workitem)).fetchone()
            return row_from(found) if found else None

    def checkpoints(self, group: str, workitem: str) -> list[CheckpointRow]:
        """Accepted checkpoints of a WorkItem, oldest first; the last is where a new owner resumes."""
        with self._lock:
            sql = (
                f"SELECT {', '.join(CHECKPOINT_COLS)} FROM checkpoint WHERE group_id = ? AND workitem = ?"
                " ORDER BY number"
            )
            rows = self._conn.execute(sql, (group, workitem)).fetchall()
            return [checkpoint_from(r) for r in rows]

    def pending_outbox(self) -> list[OutboxRow]:
        """Intents not yet marked done, in the order their Events were applied per Group."""
        with self._lock:
            sql = (
                f"SELECT {', '.join('o.' + c for c in OUTBOX_COLS)} FROM outbox o"
                " LEFT JOIN outbox_done d ON d.intent_id = o.intent_id WHERE d.intent_id IS NULL"
                " ORDER BY o.group_id, o.sequence, o.kind"
            )
            return [OutboxRow(*r) for r in self._conn.execute(sql)]

    def complete_outbox(self, intent_id: str, result: dict[str, Any]) -> None:
        """Record that an intent was dispatched (its receipt, or why it was dropped)."""
        with self._lock, self._transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO outbox_done (intent_id, result) VALUES (?, ?)", (intent_id, text(result))
            )

    def buffer_command(
        self, group: str, workitem: str | None, document: dict[str, Any], binding: dict[str, Any]
    ) -> int:
        """Hold a signed Command made while the Group service is unreachable (spec 11.5; MWP-WRK-021)."""
        with self._lock, self._transaction() as conn:
            cur = conn.execute(
                "INSERT INTO buffered_command (group_id, workitem, action_id, envelope, binding)"
                " VALUES (?, ?, ?, ?, ?)",
                (group, workitem, document["actionId"], text(document), text(binding)),
            )
            return int(cur.lastrowid or 0)

    def buffered_commands(self, group: str | None = None) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
        """``(id, Command document, binding)`` in the order they were buffered."""
        with self._lock:
            sql = "SELECT id, envelope, binding FROM buffered_command"
            args: tuple[Any, ...] = ()
            if group is not None:
                sql += " WHERE group_id = ?"
                args = (group,)
            return [(i, json.loads(e), json.loads(b)) for i, e, b in self._conn.execute(sql + " ORDER BY id", args)]

    def drop_buffered_command(self, command_id: int) -> None:
        with self._lock, self._transaction() as conn:
            conn.execute("DELETE FROM buffered_command WHERE id = ?", (command_id,))

    # --- external side effects (MWP-WRK-031) -----------------------------------------

    def side_effect(self, key: str) -> tuple[str, Any, int] | None:
        """``(status, receipt, attempts)`` of the operation with this idempotency key, or None."""
        with self._lock:
            row = self._conn.execute(
                "SELECT status, receipt, attempts FROM side_effect WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                return None
            return str(row[0]), (json.loads(row[1]) if row[1] is not None else None), int(row[2])

    def side_effect_intent(self, key: str, *, group: str, workitem: str, ownership_epoch: int, name: str) -> int:
        """Persist the intent before dispatch (committed when this returns); the attempt number."""
        with self._lock, self._transaction() as conn:
            conn.execute(
                "INSERT INTO side_effect (key, group_id, workitem, ownership_epoch, name, status, receipt, attempts)"
                " VALUES (?, ?, ?, ?, ?, 'intent', NULL, 1)"
                " ON CONFLICT (key) DO UPDATE SET status = 'intent', attempts = attempts + 1",
                (key, group, workitem, ownership_epoch, name),
            )
            return int(conn.execute("SELECT attempts FROM side_effect WHERE key = ?", (key,)).fetchone()[0])

    def side_effect_settle(self, key: str, status: str, receipt: Any) -> None:
        """Record the outcome: ``done`` with the external receipt, or ``uncertain``."""
        if status not in ("done", "uncertain"):
            raise ValueError("status must be done or uncertain")
        with self._lock, self._transaction() as conn:
            conn.execute(
                "UPDATE side_effect SET status = ?, receipt = ? WHERE key = ?",
                (status, text(receipt) if receipt is not None else None, key),
            )

    def inbox(self, group: str, after: int = 0) -> Iterator[Event]:
        """The Group's applied Event documents after ``after``, in sequence order (their JCS form)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT event FROM inbox WHERE group_id = ? AND sequence > ? ORDER BY sequence", (group, after)
            ).fetchall()
        for (content,) in rows:
            yield json.loads(content)

    def projection_dump(self) -> str:
        """Canonical JSON of every projection table, rows in primary-key order:
        equal strings mean byte-for-byte equal projections."""
        with self._lock:
            out: dict[str, Any] = {}
            for table in PROJECTION_TABLES:
                cur = self._conn.execute(f"SELECT * FROM {table} ORDER BY {DUMP_ORDER[table]}")
                names = [d[0] for d in cur.description]
                out[table] = {"columns": names, "rows": [list(r) for r in cur]}
            return text(out)

    # --- the apply cycle -----------------------------------------------------------

    def apply(self, event: Any) -> list[int]:
        """Apply one delivered Event document; return the sequences applied (in order).

        A duplicate (known Event ID or a sequence at or below the Cursor)
        changes nothing and returns ``[]``; an Event beyond the next sequence
        waits in memory and returns ``[]``; the next one is verified and
        applied, followed by every waiting Event it makes contiguous. Raises
        ``MalformedEvent``, ``SignatureRefused``, ``ChainBroken`` (nothing of
        that Event written) or ``ProjectionError``. The caller may ACK
        ``ack_positions()`` once this returns.
        """
        if self.verifier is None:
            raise RuntimeError("this Store was opened without an EventVerifier: it cannot apply Events")
        event = check_event(event)
        with self._lock:
            group = event["groupId"]
            cur = self._cursors.get(group, _ORIGIN)
            seq = event["sequence"]
            if seq <= cur.sequence:
                self._check_duplicate(event)
                return []
            if seq > cur.sequence + 1:
                self._buffer(event)
                return []
            return self._drain(group, [event])

    def _drain(self, group: str, candidates: list[Event]) -> list[int]:
        """Apply ``candidates`` (Events claiming the next sequence), then every
        waiting Event that becomes contiguous. A candidate whose signature or
        payload is refused is dropped; another candidate for the same
        sequence may still win. If none does, the error names what was
        applied before (``ChainBroken.applied``)."""
        applied: list[int] = []
        while candidates:
            error: WorkerError | None = None
            for candidate in candidates:
                try:
                    self._apply_next(candidate)
                except (ChainBroken, SignatureRefused, MalformedEvent) as exc:
                    error = exc
                    continue
                error = None
                applied.append(candidate["sequence"])
                break
            if error is not None:
                if isinstance(error, ChainBroken):
                    raise ChainBroken(error.group, error.sequence, error.reason, applied) from error
                if applied:
                    raise ChainBroken(group, applied[-1] + 1, str(error), applied) from error
                raise error
            candidates = self._next_waiting(group)
        return applied

    def _check_duplicate(self, event: Event) -> None:
        """An Event at an applied position must be the one applied there."""
        row = self._conn.execute(
            "SELECT event_id FROM inbox WHERE group_id = ? AND sequence = ?", (event["groupId"], event["sequence"])
        ).fetchone()
        if row is not None and row[0] != event["eventId"]:
            raise ChainBroken(
                event["groupId"], event["sequence"], f"Event {event['eventId']} claims the position of {row[0]}"
            )
        # No row: the position is covered by a restored snapshot; nothing to compare.

    def _buffer(self, event: Event) -> None:
        waiting = self._pending.setdefault(event["groupId"], {})
        waiting.setdefault(event["sequence"], {}).setdefault(event["eventId"], event)
        if sum(len(v) for v in waiting.values()) > self.max_buffered:
            # Memory is bounded: the farthest Event goes; the server delivers it again.
            far = max(waiting)
            waiting[far].popitem()
            if not waiting[far]:
                del waiting[far]

    def _next_waiting(self, group: str) -> list[Event]:
        waiting = self._pending.get(group)
        if not waiting:
            return []
        cur = self._cursors.get(group, _ORIGIN)
        for stale in [s for s in waiting if s <= cur.sequence]:
            del waiting[stale]
        found = waiting.pop(cur.sequence + 1, None)
        if not waiting:
            self._pending.pop(group, None)
        return list(found.values()) if found else []

    def _apply_next(self, event: Event) -> None:
        """Apply the Event whose sequence is the Cursor's plus one: one transaction."""
        group, seq = event["groupId"], event["sequence"]
        assert self.verifier is not None
        # The signature covers the content only, so it is checked before
        # taking the write lock (§6.4); the position inside the transaction.
        content = event_bytes(event)
        self.verifier.verify(event)
        # Fold what the inbox keeps (the JCS form, a number spelled once), so
        # that rebuild() folds the same values.
        event = json.loads(content)
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT INTO inbox (group_id, sequence, event_id, event) VALUES (?, ?, ?, ?)",
                (group, seq, event["eventId"], content.decode("utf-8")),
            )
            conn.execute(
                "INSERT INTO processed_event (event_id, group_id, sequence) VALUES (?, ?, ?)",
                (event["eventId"], group, seq),
            )
            change = self._fold_into(conn, event, self._metas, self._rows)
            conn.execute(SQL_CURSOR, (group, seq, event["eventId"]))
            if self.audit:
                conn.execute(SQL_AUDIT, (event["eventId"], group, seq))
        except sqlite3.IntegrityError as exc:
            conn.execute("ROLLBACK")
            raise ChainBroken(group, seq, f"Event {event['eventId']} is already applied elsewhere ({exc})") from None
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        # Memory follows the database only once the transaction is durable.
        self._cursors[group] = Cursor(seq, event["eventId"])
        _remember(change, self._metas, self._rows)
        if len(self._rows) > self.max_cached_rows:
            self._rows.clear()

    def _fold_into(
        self,
        conn: sqlite3.Connection,
        event: Event,
        metas: dict[str, GroupMeta | None],
        rows: dict[tuple[str, str], WorkRow | None],
    ) -> projection.Change:
        """Steps "update Group projection and per-Group queue" and "persist
        checkpoint or outbox intent", inside the caller's transaction.

        ``metas``/``rows`` cache committed rows (this process is the only
        writer); a miss reads the table. The caller records the Change in them
        once it is committed (``_remember``).
        """
        group = event["groupId"]
        needs_meta, item = projection.reads(event)
        meta = None
        if needs_meta:
            if group in metas:
                meta = metas[group]
            else:
                found = conn.execute(SQL_SELECT_META, (group,)).fetchone()
                meta = metas[group] = meta_from(found) if found else None
        row = None
        if item is not None:
            key = (group, item)
            if key in rows:
                row = rows[key]
            else:
                found = conn.execute(SQL_SELECT_ROW, key).fetchone()
                # Flags stay 0/1 here: they go back to SQLite unchanged, and True == 1.
                row = rows[key] = WorkRow(*found) if found else None
        change = projection.fold(event, me=self.agent, meta=meta, row=row)
        if change.meta is not None:
            conn.execute(SQL_META, column_values(change.meta, META_COLS))
        if change.row is not None:
            conn.execute(SQL_ROW, column_values(change.row, ROW_COLS))
        for checkpoint in change.checkpoints:
            conn.execute(SQL_CHECKPOINT, column_values(checkpoint, CHECKPOINT_COLS))
        for intent in change.outbox:
            conn.execute(SQL_OUTBOX, column_values(intent, OUTBOX_COLS))
        for sequence in change.redact_sequences:
            # A tombstone withdraws the content of the Event it names (MWP-MSN-009).
            conn.execute(
                "UPDATE checkpoint SET state = NULL, progress = NULL, redacted = 1 WHERE group_id = ? AND sequence = ?",
                (group, sequence),
            )
        return change

    # --- snapshots and rebuild ------------------------------------------------------

    def restore_snapshot(self, document: Any, state_bytes: bytes, group: str) -> list[int]:
        """Restore a Group from a signed Group Snapshot after CURSOR_TOO_OLD (§16).

        ``document`` is the Group Snapshot (``group-snapshot.schema.json``),
        ``state_bytes`` its state artifact. Verifies the snapshot's signature
        in the six stages (profile ``group-snapshot``, signed by a service
        Principal of the Registry), its Group, that ``stateHash`` is the
        SHA-256 of the state's JCS bytes and that it is not behind the Cursor
        (``SnapshotRefused`` otherwise), then, in one transaction, replaces
        the Group's projection by the snapshot's state and sets the Cursor to
        ``throughSequence``. Replay continues strictly after it: the caller
        subscribes with ``afterSequence=cursor(group).sequence``. Returns the
        sequences of waiting Events that became contiguous and were applied.
        """
        if self.verifier is None:
            raise RuntimeError("this Store was opened without an EventVerifier: it cannot verify a snapshot")
        with self._lock:
            cur = self._cursors.get(group, _ORIGIN)
            document, state = _verified_snapshot(document, state_bytes, self.verifier, group)
            seq = document["throughSequence"]
            if seq < cur.sequence:
                raise SnapshotRefused("sequence", f"the snapshot at {seq} is behind the Cursor at {cur.sequence}")
            event_ids = document["eventIds"]
            last = str(event_ids[-1]) if event_ids else ""
            if seq == cur.sequence:
                if last and cur.last_event_id and last != cur.last_event_id:
                    raise SnapshotRefused("eventIds", f"the snapshot's Event at {seq} is not this Worker's")
                return []  # already there, with more than the snapshot tells (Lease IDs, offers)
            meta, rows, checkpoints = projection.restore(document, state, me=self.agent)
            self._forget()
            with self._transaction() as conn:
                self._write_restored(conn, group, meta, rows, checkpoints)
                conn.execute(
                    "INSERT OR REPLACE INTO snapshot (group_id, sequence, last_event_id, document, state)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (group, seq, last, text(document), text(state)),
                )
                conn.execute(SQL_CURSOR, (group, seq, last))
            self._cursors[group] = Cursor(seq, last)
            return self._drain(group, self._next_waiting(group))

    @staticmethod
    def _write_restored(
        conn: sqlite3.Connection,
        group: str,
        meta: GroupMeta,
        rows: Iterable[WorkRow],
        checkpoints: Iterable[CheckpointRow],
    ) -> None:
        for table in ("group_meta", "group_queue", "checkpoint", "outbox"):
            conn.execute(f"DELETE FROM {table} WHERE group_id = ?", (group,))
        conn.execute(SQL_META, column_values(meta, META_COLS))
        conn.executemany(SQL_ROW, [column_values(r, ROW_COLS) for r in rows])
        conn.executemany(SQL_CHECKPOINT, [column_values(c, CHECKPOINT_COLS) for c in checkpoints])

    def rebuild(self) -> None:
        """Drop every projection table and rebuild it from the latest restored
        snapshot of each Group plus the inbox (DESIGN §5: ``mwworker rebuild``).

        One transaction: on a gap or a mislabelled row in the inbox
        (``ChainBroken``) the old projection stays. With a verifier, every
        inbox Event's signature is verified again, so an inbox changed behind
        the Worker's back is refused too. The same ``projection.fold`` runs over the same
        Events; only the writing differs (the tables are built in memory and
        written once, not row by row per Event), so the result equals the
        incremental projection byte for byte (``projection_dump()``).
        """
        built = _Projection(self.agent)
        with self._lock, self._transaction() as conn:
            self._forget()
            snapshots = {
                g: (s, e, d, st)
                for g, s, e, d, st in conn.execute(
                    "SELECT group_id, sequence, last_event_id, document, state FROM snapshot"
                )
            }
            groups = sorted({g for (g,) in conn.execute("SELECT DISTINCT group_id FROM inbox")} | set(snapshots))
            for group in groups:
                cur = _ORIGIN
                if group in snapshots:
                    seq, last, raw, raw_state = snapshots[group]
                    document, state = json.loads(raw), json.loads(raw_state)
                    if jcs.sha256_hash(jcs.canonicalize(state)) != document.get("stateHash"):
                        raise SnapshotRefused("stateHash", f"the stored snapshot of {group} does not match its state")
                    built.restore(*projection.restore(document, state, me=self.agent))
                    cur = Cursor(seq, last)
                events = conn.execute(
                    "SELECT sequence, event_id, event FROM inbox WHERE group_id = ? ORDER BY sequence", (group,)
                ).fetchall()
                for seq, event_id, content in events:
                    built.processed.append((event_id, group, seq))
                    if seq <= cur.sequence:
                        continue  # before the restored snapshot: already in its state
                    if seq != cur.sequence + 1:
                        raise ChainBroken(group, seq, f"the inbox has a gap after {cur.sequence}")
                    event = json.loads(content)
                    if event.get("eventId") != event_id or event.get("sequence") != seq:
                        raise ChainBroken(group, seq, "the inbox row does not hold the Event it names")
                    if self.verifier is not None:
                        try:
                            self.verifier.verify(event)  # what was verified once still must be
                        except (SignatureRefused, MalformedEvent) as exc:
                            raise ChainBroken(group, seq, f"the inbox Event does not verify ({exc})") from None
                    built.fold(event)
                    cur = Cursor(seq, event_id)
                if cur.sequence:
                    built.cursors[group] = cur
            for table in PROJECTION_TABLES:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
            for ddl in PROJECTION_DDL.values():
                conn.execute(ddl)
            for ddl in PROJECTION_INDEXES:
                conn.execute(ddl)
            built.write(conn)
        with self._lock:
            self._load_cursors()

    def _forget(self) -> None:
        self._metas.clear()
        self._rows.clear()


class _Projection:
    """The projection tables in memory, for ``rebuild()``: folded Event by
    Event exactly as the apply cycle folds them, written in one go."""

    def __init__(self, agent: str):
        self.agent = agent
        self.metas: dict[str, GroupMeta | None] = {}
        self.rows: dict[tuple[str, str], WorkRow | None] = {}
        self.checkpoints: dict[tuple[str, str, int], CheckpointRow] = {}
        self.outbox: dict[str, OutboxRow] = {}
        self.processed: list[tuple[str, str, int]] = []
        self.cursors: dict[str, Cursor] = {}

    def restore(self, meta: GroupMeta, rows: list[WorkRow], checkpoints: list[CheckpointRow]) -> None:
        self.metas[meta.group_id] = meta
        self.rows.update({(r.group_id, r.workitem): r for r in rows})
        self.checkpoints.update({(c.group_id, c.workitem, c.number): c for c in checkpoints})

    def fold(self, event: Event) -> None:
        group = event["groupId"]
        needs_meta, item = projection.reads(event)
        meta = self.metas.get(group) if needs_meta else None
        row = self.rows.get((group, item)) if item is not None else None
        change = projection.fold(event, me=self.agent, meta=meta, row=row)
        _remember(change, self.metas, self.rows)
        for checkpoint in change.checkpoints:
            key = (checkpoint.group_id, checkpoint.workitem, checkpoint.number)
            if key in self.checkpoints:  # what the table's primary key refuses in the apply cycle
                raise ProjectionError(f"group {group} sequence {event['sequence']}: checkpoint {key} exists")
            self.checkpoints[key] = checkpoint
        for intent in change.outbox:
            if intent.intent_id in self.outbox:
                raise ProjectionError(f"group {group} sequence {event['sequence']}: intent {intent.intent_id} exists")
            self.outbox[intent.intent_id] = intent
        for sequence in change.redact_sequences:
            for key, checkpoint in self.checkpoints.items():
                if checkpoint.group_id == group and checkpoint.sequence == sequence:
                    self.checkpoints[key] = replace(checkpoint, state=None, progress=None, redacted=True)

    def write(self, conn: sqlite3.Connection) -> None:
        conn.executemany("INSERT INTO processed_event (event_id, group_id, sequence) VALUES (?, ?, ?)", self.processed)
        conn.executemany(SQL_CURSOR, [(g, c.sequence, c.last_event_id) for g, c in self.cursors.items()])
        conn.executemany(SQL_META, [column_values(m, META_COLS) for m in self.metas.values() if m is not None])
        conn.executemany(SQL_ROW, [column_values(r, ROW_COLS) for r in self.rows.values() if r is not None])
        conn.executemany(SQL_CHECKPOINT, [column_values(c, CHECKPOINT_COLS) for c in self.checkpoints.values()])
        conn.executemany(SQL_OUTBOX, [column_values(o, OUTBOX_COLS) for o in self.outbox.values()])


def _remember(
    change: projection.Change, metas: dict[str, GroupMeta | None], rows: dict[tuple[str, str], WorkRow | None]
) -> None:
    if change.meta is not None:
        metas[change.meta.group_id] = change.meta
    if change.row is not None:
        rows[(change.row.group_id, change.row.workitem)] = change.row


def _verified_snapshot(
    document: Any, state_bytes: bytes, verifier: EventVerifier, group: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The verified Group Snapshot and its state, or ``SnapshotRefused`` naming the check."""
    if not isinstance(document, dict):
        raise SnapshotRefused("schema", "a Group Snapshot is a JSON object")
    created_by = document.get("createdBy")
    if not isinstance(created_by, dict) or created_by.get("type") != "service":
        raise SnapshotRefused("signer", "a Group Snapshot is created by a service Principal")
    try:
        verified = verify_document(jcs.canonicalize(document), "group-snapshot", verifier.keys.registry)
    except (VerificationFailed, jcs.DataModelError) as exc:
        raise SnapshotRefused("signature", str(exc)) from None
    if document.get("groupId") != group:
        raise SnapshotRefused("group", f"the snapshot is of {document.get('groupId')}, not {group}")
    try:
        state = json.loads(state_bytes)
    except ValueError as exc:
        raise SnapshotRefused("state", f"the state artifact is not JSON: {exc}") from None
    if not isinstance(state, dict) or jcs.sha256_hash(jcs.canonicalize(state)) != document.get("stateHash"):
        raise SnapshotRefused("stateHash", "the state does not match the snapshot's stateHash")
    del verified
    return document, state
