"""The raw baseline of ``bench/commands.py``: the minimal signed acceptance, psycopg only.

For each Command, from one connection per thread::

    -- the Command's bytes: json.loads, JCS signing bytes, Ed25519 verify (libsodium)
    BEGIN
    SELECT last_sequence, head_hash FROM raw_group WHERE id = $g FOR UPDATE
    UPDATE raw_aggregate SET revision = revision + 1 WHERE id = $a AND revision = $r   -- rowcount 1
    -- per Event: the Event document, its JCS bytes signed with Ed25519, the sha256 chain link
    UPDATE raw_group SET last_sequence = ..., head_hash = ... WHERE id = $g
    INSERT INTO raw_event ... (one statement for the Command's Events)   -- LIKE missions_groupevent
    INSERT INTO raw_receipt ...                                         -- LIKE missions_actionreceipt
    COMMIT

The Command documents are normative ones (``build_command``, signed by a key
of the raw side's own in-memory key table), the Events carry the members the
Group Authority's do (``cause``, ``correlationId``, ``commandHash``,
``acceptedBy``, ``signature``) and payloads copied from the project's own
Events of the same kind, and each Command appends as many Events as the
project's handler does (mix: two ``membership.changed``, one per role; hot:
one usage record). JCS is the project's ``mwportal.protocol.jcs`` and
signing ``mwportal.protocol.ed25519.sign``, the calls the authority makes, so
the baseline pays the same cryptography; what it leaves out is everything
else: the schemas, the Registry lookup, the First-Admission Record, the
epochs, roles and handler logic.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bench._commands_common import CONCURRENCY, LIFECYCLE_CELLS, N_GROUPS, Runner, conninfo, roles_for

RAW_DDL = """
DROP TABLE IF EXISTS raw_receipt, raw_event, raw_aggregate, raw_group;
CREATE TABLE raw_group (id uuid PRIMARY KEY, last_sequence bigint NOT NULL, head_hash varchar(64) NOT NULL,
                        revision integer NOT NULL);
CREATE TABLE raw_aggregate (id uuid PRIMARY KEY, revision integer NOT NULL);
-- Same columns, check constraints and indexes as the project's tables (not the FKs nor the trigger).
CREATE TABLE raw_event (LIKE missions_groupevent INCLUDING ALL);
CREATE TABLE raw_receipt (LIKE missions_actionreceipt INCLUDING ALL);
"""

GENESIS = "0" * 64


@dataclass
class RawKeys:
    """The raw side's keys: the client's (to sign Commands; its public half in a dict,
    the raw side's whole Registry) and the authority's (to sign Events)."""

    client_key: Any  # mwportal.protocol.command.Key
    client_public: dict[str, bytes]
    authority_key: Any
    authority: dict[str, str]  # acceptedBy

    @classmethod
    def generate(cls) -> RawKeys:
        from mwportal.protocol import ed25519
        from mwportal.protocol.command import Key

        client = Key.generate()
        authority = Key.generate()
        return cls(
            client,
            {client.key_id: ed25519.public_key(client.seed)},
            authority,
            {"type": "service", "id": f"urn:uuid:{uuid.uuid4()}"},
        )


@dataclass
class RawLayout:
    url: str
    groups: list[uuid.UUID]  # the mix workload's Groups; each is its own aggregate
    hot_group: uuid.UUID
    hot_aggregates: list[uuid.UUID]  # one per thread (its WorkItem)
    actor: str  # bare UUID
    lifecycle_groups: list[uuid.UUID]  # "spread": one per thread
    lifecycle_shared: uuid.UUID  # "shared": every thread
    keys: RawKeys
    templates: dict[str, dict[str, Any]]  # Event kind -> a payload the project wrote


def raw_setup(url: str, templates: dict[str, dict[str, Any]], n_groups: int = N_GROUPS) -> RawLayout:
    import psycopg

    layout = RawLayout(
        url,
        [uuid.uuid4() for _ in range(n_groups)],
        uuid.uuid4(),
        [uuid.uuid4() for _ in range(max(CONCURRENCY))],
        str(uuid.uuid4()),
        [uuid.uuid4() for _ in range(max(c for _, c in LIFECYCLE_CELLS))],
        uuid.uuid4(),
        RawKeys.generate(),
        templates,
    )
    groups = [*layout.groups, layout.hot_group, *layout.lifecycle_groups, layout.lifecycle_shared]
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute(RAW_DDL)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO raw_group VALUES (%s, 0, %s, 1)", [(g, GENESIS) for g in groups])
            cur.executemany(
                "INSERT INTO raw_aggregate VALUES (%s, 1)", [(a,) for a in [*layout.groups, *layout.hot_aggregates]]
            )
    return layout


def event_templates(kinds: list[str]) -> dict[str, dict[str, Any]]:
    """The payload of the latest project Event of each kind: the raw side's Event payloads."""
    from missions.models import GroupEvent

    found: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        row = GroupEvent.objects.filter(type=kind).order_by("-id").values_list("body", flat=True).first()
        if row is None:
            raise RuntimeError(f"no project Event of kind {kind} to copy a payload from")
        found[kind] = row if isinstance(row, dict) else json.loads(row)
    return found


@dataclass(slots=True)
class RawCommand:
    group: uuid.UUID
    aggregate: uuid.UUID
    kind: str  # the aggregate kind
    expected: int  # 0: the first Command of a new aggregate (INSERT at revision 1)
    data: bytes  # the signed Command document
    events: list[tuple[str, dict[str, Any]]]  # (Event kind, payload)


def raw_document(layout: RawLayout, kind: str, group: uuid.UUID, payload: dict[str, Any], **kw: Any) -> bytes:
    from mwportal.protocol.command import build_command

    keys = layout.keys
    doc = build_command(
        kind, actor=("agent", layout.actor), key=keys.client_key, payload=payload, group=str(group), **kw
    )
    return json.dumps(doc, separators=(",", ":")).encode()


def raw_pools(layout: RawLayout, workload: str, threads: int, per_thread: int) -> list[list[RawCommand]]:
    """The raw side's signed Commands, built before the clock like the project's."""
    import psycopg

    with psycopg.connect(conninfo(layout.url), autocommit=True) as conn:
        revs = {row[0]: row[1] for row in conn.execute("SELECT id, revision FROM raw_aggregate")}
    changed = layout.templates["membership.changed"]
    usage = layout.templates["ext.missionweaveprotocol.core.resource_usage_recorded"]
    member = {"type": "agent", "id": f"urn:uuid:{layout.actor}"}
    pools: list[list[RawCommand]] = []
    for t in range(threads):
        pool = []
        if workload == "mix":
            mine = layout.groups[t::threads]
            for i in range(per_thread):
                g = mine[i % len(mine)]
                rev = revs[g]
                revs[g] = rev + 1
                payload = {"principal": member, "roles": roles_for(rev, 1)}
                data = raw_document(layout, "membership.change", g, payload, expected_revision=rev, session_epoch=1)
                events = [("membership.changed", changed), ("membership.changed", changed)]
                pool.append(RawCommand(g, g, "group", rev, data, events))
        else:
            a = layout.hot_aggregates[t]
            payload = {
                "workItemId": f"urn:uuid:{a}",
                "ownershipEpoch": 1,
                "executionLeaseId": f"urn:uuid:{uuid.uuid4()}",
                "usageDelta": {"toolCalls": 1},
            }
            for i in range(per_thread):
                data = raw_document(
                    layout,
                    "ext.missionweaveprotocol.core.resource_usage_record",
                    layout.hot_group,
                    payload,
                    work_item_id=str(a),
                    session_epoch=1,
                )
                events = [("ext.missionweaveprotocol.core.resource_usage_recorded", usage)]
                pool.append(RawCommand(layout.hot_group, a, "work_item", revs[a] + i, data, events))
        pools.append(pool)
    return pools


class RawConflict(Exception):
    pass


def raw_accept(conn: Any, cur: Any, layout: RawLayout, cmd: RawCommand) -> None:
    """Verify the Command's signature, then the minimal acceptance transaction with signed
    Events. ``expected == 0`` creates the aggregate (at revision 1) instead of the
    compare-and-set UPDATE."""
    from nacl.bindings import crypto_sign_open
    from psycopg.types.json import Jsonb

    from mwportal.protocol import ed25519, jcs
    from mwportal.protocol.values import b64url_decode, b64url_encode

    keys = layout.keys
    doc = json.loads(cmd.data)
    signature = doc.pop("signature")
    signing = jcs.canonicalize(doc)
    crypto_sign_open(b64url_decode(signature["value"]) + signing, keys.client_public[signature["keyId"]])
    command_hash = "sha256:" + hashlib.sha256(signing).hexdigest()
    action_id = uuid.UUID(doc["actionId"][9:])

    now = datetime.now(UTC)
    occurred_at = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cur.execute("SELECT last_sequence, head_hash FROM raw_group WHERE id = %s FOR UPDATE", (cmd.group,))
    sequence, prev = cur.fetchone()
    if cmd.expected == 0:
        cur.execute("INSERT INTO raw_aggregate (id, revision) VALUES (%s, 1)", (cmd.aggregate,))
    else:
        cur.execute(
            "UPDATE raw_aggregate SET revision = revision + 1 WHERE id = %s AND revision = %s",
            (cmd.aggregate, cmd.expected),
        )
    if cur.rowcount != 1:
        conn.rollback()
        raise RawConflict(f"aggregate {cmd.aggregate} is not at revision {cmd.expected}")
    revision = cmd.expected + 1
    group_urn = f"urn:uuid:{cmd.group}"
    rows: list[Any] = []
    refs: list[dict[str, Any]] = []
    for kind, payload in cmd.events:
        sequence += 1
        event_id = uuid.uuid4()
        event: dict[str, Any] = {
            "protocolVersion": "0.1",
            "eventId": f"urn:uuid:{event_id}",
            "kind": kind,
            "actor": doc["actor"],
            "cause": {"type": "command", "id": doc["actionId"]},
            "correlationId": doc["correlationId"],
            "occurredAt": occurred_at,
            "payload": payload,
            "acceptedBy": keys.authority,
            "groupId": group_urn,
            "sequence": sequence,
            "aggregateRevision": revision,
            "commandHash": command_hash,
        }
        value = ed25519.sign(keys.authority_key.seed, jcs.canonicalize(event))
        event["signature"] = {
            "algorithm": "Ed25519",
            "keyId": keys.authority_key.key_id,
            "createdAt": occurred_at,
            "value": b64url_encode(value),
        }
        text = jcs.canonicalize(event)
        head = hashlib.sha256(prev.encode() + text).hexdigest()
        rows += [event_id, cmd.group, sequence, kind, cmd.kind, str(cmd.aggregate), revision, layout.actor,
                 action_id, now, Jsonb(payload), text.decode(), prev, head]  # fmt: skip
        refs.append({"eventId": event["eventId"], "sequence": sequence, "kind": kind})
        prev = head
    cur.execute("UPDATE raw_group SET last_sequence = %s, head_hash = %s WHERE id = %s", (sequence, prev, cmd.group))
    cur.execute(
        "INSERT INTO raw_event (event_id, group_id, sequence, type, aggregate_kind, aggregate_id,"
        " aggregate_revision, actor, action_id, occurred_at, body, document, prev_hash, hash) VALUES "
        + ",".join(["(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"] * len(cmd.events)),
        rows,
    )
    receipt = {"actionId": doc["actionId"], "events": refs, "aggregateRevision": revision, "replayed": False}
    cur.execute(
        "INSERT INTO raw_receipt (actor, action_id, content_hash, group_id, receipt, accepted_at)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (layout.actor, action_id, command_hash, cmd.group, Jsonb(receipt), now),
    )
    conn.commit()


def raw_runner(layout: RawLayout) -> Runner:
    import psycopg

    def open_conn() -> Any:
        conn = psycopg.connect(conninfo(layout.url))
        return conn, conn.cursor()

    def send(state: Any, cmd: RawCommand) -> None:
        raw_accept(state[0], state[1], layout, cmd)

    def close_conn(state: Any) -> None:
        state[0].close()

    return open_conn, send, close_conn


def check_raw_chain(layout: RawLayout) -> None:
    import psycopg

    with psycopg.connect(conninfo(layout.url), autocommit=True) as conn:
        head, count = conn.execute(
            "SELECT (SELECT last_sequence FROM raw_group WHERE id = %s),"
            " (SELECT count(*) FROM raw_event WHERE group_id = %s)",
            (layout.hot_group, layout.hot_group),
        ).fetchone()
    if head != count:
        raise RuntimeError(f"raw hot Group head {head} but {count} events")
