"""The live path's readers: the database reads that feed the hub (``missions.hub``).

Every local subscriber of a Group shares one read per commit (``LiveReader.read``),
and the periodic checks read the heads of all local Groups and the current
Session Epochs and Memberships of all connected Agents in one or two queries
(DESIGN §5: delivery reads the database after each subscriber's position;
notices only say that the head moved). Each Event is its stored signed
document (``GroupEvent.document``, PROTOCOL §15.2), put once into its EVENT
frame (``WireEvent``): the socket carries exactly what was stored and signed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import sqlite3
import uuid
from typing import Any
from urllib.request import pathname2url

from channels.db import database_sync_to_async
from django.db import connection, connections

from mwportal.protocol import canonicalize, frames

from .feed import Event, WireEvent
from .local_notices import database_file
from .models import Agent, Group, GroupEvent, Membership
from .withholding import CONTENT, served

log = logging.getLogger(__name__)


def wire(document: Any, prev_hash: str | None = None, hash_: str | None = None) -> WireEvent:
    """A stored Event for the live path: its signed document (the JCS text as
    stored, or the document itself), its row's chain links, and its EVENT
    frame (PROTOCOL §17.1, ``websocket-frame.schema.json#/$defs/event``)
    encoded once around the stored text, so the socket carries exactly the
    bytes that were signed."""
    if isinstance(document, bytes | bytearray | memoryview):
        document = bytes(document).decode("utf-8")
    if isinstance(document, str):
        text, value = document, json.loads(document)
    else:
        value = document
        text = canonicalize(document).decode("utf-8")
    event = WireEvent(value)
    event.prev_hash, event.hash = prev_hash, hash_
    event.frame = frames.event_text(text)
    event.prepared = None
    return event


def wire_carried(entry: dict[str, Any]) -> WireEvent:
    """An Event a head notice carried (``missions.delivery.carried_event``)."""
    return wire(entry["document"], entry.get("prev_hash"), entry.get("hash"))


def read_after(group_id: str, after: int, limit: int) -> list[Event]:
    """The Group's Events after ``after`` as every binding serves them: a redacted
    one in its signed withheld form (``missions.withholding``), with its row's chain links."""
    rows = list(
        GroupEvent.objects.filter(group_id=group_id, sequence__gt=after)
        .order_by("sequence")
        .values_list("sequence", "document", "prev_hash", "hash", "type")[:limit]
    )
    texts = [r[1] for r in rows]
    if any(r[4] in CONTENT for r in rows):
        organization_id = str(Group.objects.values_list("organization_id", flat=True).get(id=group_id))
        texts = served(group_id, organization_id, [(r[0], r[1], r[4]) for r in rows])
    return [wire(text, r[2], r[3]) for text, r in zip(texts, rows, strict=True)]


# Off PostgreSQL, the live path's reads run on a small pool of their own
# rather than on the one thread that every synchronous call of this process
# shares (commands, the agent check, replays): a burst of those never delays
# the read that all subscribers of a Group wait for.
_read_in_thread = database_sync_to_async(read_after, thread_sensitive=False)

_LIVE_SQL = (
    f"SELECT document, prev_hash, hash FROM {GroupEvent._meta.db_table}"
    " WHERE group_id = %s AND sequence > %s ORDER BY sequence LIMIT %s"
)


_HEADS_SQL = f"SELECT id, last_sequence FROM {Group._meta.db_table} WHERE id = ANY(%s::uuid[])"
_AGENTS_SQL = f"SELECT id, session_epoch FROM {Agent._meta.db_table} WHERE id = ANY(%s::uuid[])"
_MEMBERSHIPS_SQL = (
    f"SELECT agent_id, group_id, roles, epoch FROM {Membership._meta.db_table}"
    " WHERE agent_id = ANY(%s::uuid[]) AND active"
)


_LIVE_SQL_LITE = _LIVE_SQL.replace("%s", "?")
_HEADS_SQL_LITE = f"SELECT id, last_sequence FROM {Group._meta.db_table} WHERE id IN ({{}})"


@functools.lru_cache(maxsize=65536)
def _lite_id(group_id: str) -> str:
    """A Group ID as Django's SQLite backend stores UUIDs (32 hex digits);
    the head check names every local Group at every check."""
    return uuid.UUID(group_id).hex


def _open_lite() -> sqlite3.Connection | None:
    """The hub's own read-only connection to the embedded database file."""
    path = database_file()
    if path is None:
        return None
    try:
        return sqlite3.connect(f"file:{pathname2url(path)}?mode=ro", uri=True, timeout=0, check_same_thread=False)
    except sqlite3.Error:
        return None


def _wire_row(r: Any) -> WireEvent:
    """An Event from a row of ``_LIVE_SQL``: the stored document and its chain links."""
    return wire(r[0], r[1], r[2])


class LiveReader:
    """The live path's read of a Group's new Events (the one read per commit
    that all local subscribers of the Group share).

    On PostgreSQL it runs on the event loop itself, over one asynchronous
    psycopg connection of this hub: no hop to a thread and back, no ORM
    query compilation; the read is a prepared statement on the Events'
    (group, sequence) index. Any error drops that connection and the read
    falls back to the thread pool (the next read opens a new connection).

    On the embedded SQLite it runs on the event loop too, over a read-only
    connection of its own that never waits for a lock (WAL readers do not
    wait for the writer; should SQLite ever answer "busy", that read goes
    through the thread pool). A read of a few indexed rows takes tens of
    microseconds, less than the hop to a thread would.
    """

    def __init__(self) -> None:
        self.conn: Any = None
        self.lock = asyncio.Lock()
        self.native = connection.vendor == "postgresql"
        self.lite = _open_lite()

    async def read(self, group_id: str, after: int, limit: int) -> list[Event]:
        rows = await self._native("live read", _LIVE_SQL, (group_id, after, limit))
        if rows is None:
            rows = self._lite(_LIVE_SQL_LITE, (_lite_id(group_id), after, limit))
        if rows is not None:
            events: list[Event] = [_wire_row(r) for r in rows]
            if not any(e.get("kind") in CONTENT for e in events):
                return events
            # Message content: the read that withholds what a tombstone withdrew (§7.4).
        read: list[Event] = await _read_in_thread(group_id, after, limit)
        return read

    async def heads(self, group_ids: list[str]) -> dict[str, int]:
        """The heads of ``group_ids`` (the periodic head check), on the same
        connection: the check never holds the interpreter lock in a thread
        while a live notice waits."""
        rows = await self._native("head check", _HEADS_SQL, (group_ids,))
        if rows is not None:
            return {str(g): s for g, s in rows}
        stored = {_lite_id(g): g for g in group_ids}
        rows = self._lite(_HEADS_SQL_LITE.format(",".join("?" * len(stored))), tuple(stored))
        if rows is not None:
            return {stored[g]: s for g, s in rows}
        heads: dict[str, int] = await _heads_in_thread(group_ids)
        return heads

    async def agents(self, agent_ids: list[str]) -> dict[str, tuple[int, dict[str, tuple[list[str], int]]]]:
        """``agents_current(agent_ids)`` (the periodic agent check), on
        PostgreSQL over the same connection, for the reason of ``heads``."""
        agents = await self._native("agent check", _AGENTS_SQL, (agent_ids,))
        memberships = await self._native("agent check", _MEMBERSHIPS_SQL, (agent_ids,)) if agents is not None else None
        if agents is not None and memberships is not None:
            return _agents_from(agents, memberships)
        current: dict[str, tuple[int, dict[str, tuple[list[str], int]]]]
        current = await database_sync_to_async(agents_current)(agent_ids)
        return current

    async def _native(self, what: str, sql: str, params: tuple[Any, ...]) -> list[Any] | None:
        """Rows over the asynchronous PostgreSQL connection; None off
        PostgreSQL or on error (which drops the connection: the caller goes
        through the thread pool, the next call connects again)."""
        if not self.native:
            return None
        try:
            return await self._fetch(sql, params)
        except Exception:
            log.warning("the %s failed; going through the thread pool", what, exc_info=True)
            await self.close()
            return None

    def _lite(self, sql: str, params: tuple[Any, ...]) -> list[Any] | None:
        """Rows over the read-only SQLite connection; None without one, or
        when SQLite answers busy (the caller goes through the thread pool)."""
        if self.lite is None:
            return None
        try:
            return self.lite.execute(sql, params).fetchall()
        except sqlite3.OperationalError:
            return None

    async def _fetch(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        import psycopg

        async with self.lock:
            if self.conn is None or self.conn.closed:
                db = connections["default"].settings_dict
                self.conn = await psycopg.AsyncConnection.connect(
                    dbname=db["NAME"], user=db["USER"] or None, password=db["PASSWORD"] or None,
                    host=db["HOST"] or None, port=db["PORT"] or None, autocommit=True,
                    prepare_threshold=0,
                )  # fmt: skip
            cur = await self.conn.execute(sql, params)
            rows: list[Any] = await cur.fetchall()
        return rows

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()


def read_heads(group_ids: list[str]) -> dict[str, int]:
    return {str(g): s for g, s in Group.objects.filter(id__in=group_ids).values_list("id", "last_sequence")}


def read_head(group_id: str) -> tuple[int, str | None]:
    """A Group's head sequence and the hash of its head Event, as a feed opens
    on it: with the hash the feed can check the first link of the Events the
    next notice carries (``Feed.head_notice``). ``(0, None)`` for no Group."""
    row = Group.objects.filter(id=group_id).values_list("last_sequence", "head_hash").first()
    return (0, None) if row is None else (row[0], row[1])


# Like the live reads, on a pool of its own (see _read_in_thread).
_heads_in_thread = database_sync_to_async(read_heads, thread_sensitive=False)


def agents_current(agent_ids: list[str]) -> dict[str, tuple[int, dict[str, tuple[list[str], int]]]]:
    """Session Epoch and active Memberships of many Agents in two queries."""
    agents = Agent.objects.filter(id__in=agent_ids).values_list("id", "session_epoch")
    rows = Membership.objects.filter(agent_id__in=agent_ids, active=True).values_list(
        "agent_id", "group_id", "roles", "epoch"
    )
    return _agents_from(agents, rows)


def _agents_from(agents: Any, memberships: Any) -> dict[str, tuple[int, dict[str, tuple[list[str], int]]]]:
    out: dict[str, tuple[int, dict[str, tuple[list[str], int]]]] = {str(a): (epoch, {}) for a, epoch in agents}
    for agent_id, group_id, roles, epoch in memberships:
        out[str(agent_id)][1][str(group_id)] = (roles, epoch)
    return out
