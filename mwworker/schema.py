"""The Worker store's tables: their DDL, the SQL the apply cycle runs, and rows to dataclasses.

The projection's columns are the fields of ``projection``'s row dataclasses,
so a field added there is a column here; ``SCHEMA_VERSION`` is recorded in
``store_meta`` and checked when a store is opened.
"""

from __future__ import annotations

import operator
from dataclasses import fields
from typing import Any

from .projection import CheckpointRow, GroupMeta, OutboxRow, WorkRow

SCHEMA_VERSION = "3"  # 2: MWP 0.1 Event documents, Cursors by Event ID; 3: pinned card versions


def _columns(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


META_COLS = _columns(GroupMeta)
ROW_COLS = _columns(WorkRow)
CHECKPOINT_COLS = _columns(CheckpointRow)
OUTBOX_COLS = _columns(OutboxRow)
META_BOOLS = frozenset({"my_active"})
ROW_BOOLS = frozenset({"requires_approval", "execution_approved", "needs_new_attempt"})


def _insert(table: str, cols: tuple[str, ...]) -> str:
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"


def _replace(table: str, cols: tuple[str, ...]) -> str:
    return f"INSERT OR REPLACE INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"


SQL_META = _replace("group_meta", META_COLS)
SQL_ROW = _replace("group_queue", ROW_COLS)
SQL_CHECKPOINT = _insert("checkpoint", CHECKPOINT_COLS)
SQL_OUTBOX = _insert("outbox", OUTBOX_COLS)
SQL_SELECT_META = f"SELECT {', '.join(META_COLS)} FROM group_meta WHERE group_id = ?"
SQL_SELECT_ROW = f"SELECT {', '.join(ROW_COLS)} FROM group_queue WHERE group_id = ? AND workitem = ?"
SQL_CURSOR = (
    "INSERT INTO cursor (group_id, sequence, last_event_id) VALUES (?, ?, ?)"
    " ON CONFLICT (group_id) DO UPDATE SET sequence = excluded.sequence, last_event_id = excluded.last_event_id"
)
SQL_AUDIT = (
    "INSERT INTO apply_audit (event_id, group_id, sequence, applied) VALUES (?, ?, ?, 1)"
    " ON CONFLICT (event_id) DO UPDATE SET applied = applied + 1"
)


def _sql_type(annotation: Any) -> str:
    name = str(annotation)
    if name.startswith("int") or name.startswith("bool"):
        return "INTEGER"
    return "TEXT"


def _ddl(table: str, cls: type, key: tuple[str, ...]) -> str:
    cols = [f"{f.name} {_sql_type(f.type)}" for f in fields(cls)]
    return f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(cols)}, PRIMARY KEY ({', '.join(key)})) WITHOUT ROWID"


# The projection: dropped and recreated by rebuild().
PROJECTION_DDL = {
    "cursor": "CREATE TABLE IF NOT EXISTS cursor (group_id TEXT PRIMARY KEY, sequence INTEGER NOT NULL,"
    " last_event_id TEXT NOT NULL) WITHOUT ROWID",
    "processed_event": "CREATE TABLE IF NOT EXISTS processed_event (event_id TEXT PRIMARY KEY,"
    " group_id TEXT NOT NULL, sequence INTEGER NOT NULL) WITHOUT ROWID",
    "group_meta": _ddl("group_meta", GroupMeta, ("group_id",)),
    "group_queue": _ddl("group_queue", WorkRow, ("group_id", "workitem")),
    "checkpoint": _ddl("checkpoint", CheckpointRow, ("group_id", "workitem", "number")),
    "outbox": _ddl("outbox", OutboxRow, ("intent_id",)),
}
# Redaction finds a Group's checkpoints by the sequence of the Event that recorded them.
PROJECTION_INDEXES = ("CREATE INDEX IF NOT EXISTS checkpoint_by_sequence ON checkpoint (group_id, sequence)",)
DURABLE_DDL = (
    "CREATE TABLE IF NOT EXISTS store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    # The signed Event document as its JCS text: what was verified, byte for byte.
    "CREATE TABLE IF NOT EXISTS inbox (group_id TEXT NOT NULL, sequence INTEGER NOT NULL,"
    " event_id TEXT NOT NULL UNIQUE, event TEXT NOT NULL, PRIMARY KEY (group_id, sequence)) WITHOUT ROWID",
    # The signed Group Snapshot and its verified state artifact.
    "CREATE TABLE IF NOT EXISTS snapshot (group_id TEXT PRIMARY KEY, sequence INTEGER NOT NULL,"
    " last_event_id TEXT NOT NULL, document TEXT NOT NULL, state TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS outbox_done (intent_id TEXT PRIMARY KEY, result TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS buffered_command (id INTEGER PRIMARY KEY AUTOINCREMENT, group_id TEXT NOT NULL,"
    " workitem TEXT, action_id TEXT NOT NULL UNIQUE, envelope TEXT NOT NULL, binding TEXT NOT NULL)",
    # One row per external operation, keyed by its idempotency key: written
    # ("intent") before dispatch, then "done" with the receipt, or "uncertain"
    # when the dispatch raised or the process died in between.
    "CREATE TABLE IF NOT EXISTS side_effect (key TEXT PRIMARY KEY, group_id TEXT NOT NULL, workitem TEXT NOT NULL,"
    " ownership_epoch INTEGER NOT NULL, name TEXT NOT NULL, status TEXT NOT NULL, receipt TEXT,"
    " attempts INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS apply_audit (event_id TEXT PRIMARY KEY, group_id TEXT NOT NULL,"
    " sequence INTEGER NOT NULL, applied INTEGER NOT NULL) WITHOUT ROWID",
)
PROJECTION_TABLES = tuple(PROJECTION_DDL)
# Sort orders of projection_dump(): every primary key, so the dump is deterministic.
DUMP_ORDER = {
    "cursor": "group_id",
    "processed_event": "event_id",
    "group_meta": "group_id",
    "group_queue": "group_id, workitem",
    "checkpoint": "group_id, workitem, number",
    "outbox": "intent_id",
}


def meta_from(row: tuple[Any, ...]) -> GroupMeta:
    values: dict[str, Any] = {c: (bool(v) if c in META_BOOLS else v) for c, v in zip(META_COLS, row, strict=True)}
    return GroupMeta(**values)


def row_from(row: tuple[Any, ...]) -> WorkRow:
    values: dict[str, Any] = {
        c: (v if v is None or c not in ROW_BOOLS else bool(v)) for c, v in zip(ROW_COLS, row, strict=True)
    }
    return WorkRow(**values)


def checkpoint_from(row: tuple[Any, ...]) -> CheckpointRow:
    values: dict[str, Any] = {c: (bool(v) if c == "redacted" else v) for c, v in zip(CHECKPOINT_COLS, row, strict=True)}
    return CheckpointRow(**values)


def column_values(obj: Any, cols: tuple[str, ...]) -> tuple[Any, ...]:
    return GETTERS[cols](obj)


GETTERS = {cols: operator.attrgetter(*cols) for cols in (META_COLS, ROW_COLS, CHECKPOINT_COLS, OUTBOX_COLS)}
