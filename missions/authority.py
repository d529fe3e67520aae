"""``accept()``: the single write path of the Group Authority (DESIGN §3).

Every authoritative change in MissionWeave is a Command accepted here, in one
``transaction.atomic(durable=True)``:

1. idempotency: the receipt of ``(actor, action_id)``; same canonical content
   returns it (``replayed: true``), different content is ACTION_ID_COLLISION
   (MWP-EVT-003);
2. authentication: signature or portal session, current Session Epoch,
   Membership and role;
3. the Group row is locked (it holds ``last_sequence``);
4. the aggregate is loaded and its revision compared (MWP-EVT-007);
5. the handler decides, raising ``ProtocolError`` to refuse;
6. Events are appended with the next sequences and the hash chain, the Group
   head and revision move, and the receipt is written;
7. after commit the channel layer hears that the Group head moved.

A ``ProtocolError`` anywhere rolls everything back: a refused Command writes
nothing. Lock order is always the Group row first, then the aggregate rows a
handler locks; Groups never lock one another, so appends cannot deadlock.

The hot path speaks SQL to the models' own tables through Django's
connection: the Group lock, the head advance, the Event and the receipt are
one statement each, so few round trips happen while the Group row is locked
(issue 2 benchmark). The models stay the schema and the read API.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils import timezone

from mwportal.protocol import (
    GENESIS_HASH,
    SYSTEM_ACTOR,
    Envelope,
    ErrorCode,
    ProtocolError,
    event_hash,
    format_time,
)
from mwportal.protocol.signing import verify_bytes

from .access import group_not_found
from .delivery import CommitNotices, CommittedHead, notify_commit, prepare_commit
from .models import ActionReceipt, Agent, Group, GroupEvent, Membership
from .registry import CommandSpec, spec_for

log = logging.getLogger(__name__)


class Auth(Enum):
    """How the Command's actor was authenticated."""

    SIGNED = "signed"  # agent transport: Ed25519 signature + current Session Epoch
    PORTAL = "portal"  # a Django session; the view resolved the actor from request.user
    SYSTEM = "system"  # the system actor (expiry, management commands)
    SELF = "self"  # the body carries its own proof (agent.open_session)


@dataclass(frozen=True, slots=True)
class Command:
    envelope: Envelope
    auth: Auth = Auth.SIGNED


@dataclass(frozen=True, slots=True)
class AggregateRef:
    kind: str
    id: str
    revision: int

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "revision": self.revision}


@dataclass(frozen=True, slots=True)
class Emit:
    """An Event a handler decided to append."""

    type: str
    aggregate: AggregateRef
    body: dict[str, Any]


@dataclass(slots=True)
class Decision:
    events: list[Emit]
    aggregate: AggregateRef
    # Returned in the receipt only, never in an Event nor the stored receipt
    # (session tokens, capability tokens).
    grants: dict[str, Any] = field(default_factory=dict)
    # Consequences in other Groups, appended in the same transaction (a
    # session replacement revoking leases everywhere, MWP-WRK-014). Each
    # Group was locked through ``HandlerContext.lock_other_group``.
    also: list[tuple[GroupHead, list[Emit]]] = field(default_factory=list)
    # Commands accepted right after this one commits (a final snapshot after
    # archival); each is idempotent through its deterministic action ID.
    followups: list[Command] = field(default_factory=list)
    # Channel-layer messages sent after commit: ``(channel group, message)``
    # (membership changes and session replacement reach connected agents).
    notices: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class RefusedWithRecord(ProtocolError):
    """A refusal that still leaves an audit record: after the refused
    transaction rolls back, ``record`` is accepted on its own (a late result
    from a fenced owner is kept as non-authoritative Evidence, MWP-WRK-019)."""

    def __init__(self, error: ProtocolError, record: Command):
        super().__init__(error.code, error.message, details=error.details)
        self.error, self.record = error, record


@dataclass(slots=True)
class Actor:
    id: str
    organization_id: str | None
    kind: str  # "agent", "person" or "system"
    org_roles: frozenset[str]
    public_key: str
    session_epoch: int
    membership_roles: frozenset[str] | None  # None: no active Membership
    membership_epoch: int | None

    @property
    def is_system(self) -> bool:
        return self.kind == "system"


@dataclass(slots=True)
class GroupHead:
    id: str
    organization_id: str
    kind: str
    last_sequence: int
    head_hash: str
    revision: int
    exists: bool = True

    @property
    def ref(self) -> AggregateRef:
        return AggregateRef("group", self.id, self.revision)


@dataclass(slots=True)
class HandlerContext:
    """What a handler sees: the Command, who sent it, the locked Group, ``now``."""

    envelope: Envelope
    spec: CommandSpec
    actor: Actor
    group: GroupHead
    now: datetime
    body: dict[str, Any]
    _locked: dict[str, GroupHead] = field(default_factory=dict)

    def lock_other_group(self, group_id: str) -> GroupHead:
        """Lock another Group's row for consequences appended by this Command.

        Callers lock other Groups in ascending id order after the Command's own
        Group; a deadlock with another multi-Group Command is still retried by
        ``accept()``.
        """
        if group_id == self.group.id:
            return self.group
        if group_id not in self._locked:
            with connection.cursor() as cur:
                self._locked[group_id] = _lock_existing_group(cur, group_id)
        return self._locked[group_id]


Receipt = dict[str, Any]


def db_uuid(value: str | uuid.UUID) -> Any:
    """A UUID parameter as the backend takes it: hex text on SQLite; on
    PostgreSQL the value as given, since psycopg sends text untyped and the
    server reads it as ``uuid`` (no UUID object built per parameter on the
    write path). Every caller passes an ID that the envelope parser or
    ``check_uuid`` has validated."""
    if _NATIVE_UUID:
        return value
    return (value if isinstance(value, uuid.UUID) else uuid.UUID(value)).hex


# The backend is fixed for the life of the process (settings are read once);
# asking the connection proxy on every call costs a thread-local lookup.
_NATIVE_UUID: bool = connection.features.has_native_uuid_field
_NATIVE_TIME: bool = connection.vendor == "postgresql"  # psycopg adapts aware datetimes itself


def db_time(value: datetime) -> Any:
    return value if _NATIVE_TIME else connection.ops.adapt_datetimefield_value(value)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def _for_update() -> str:
    # SQLite has no row locks; its IMMEDIATE transactions already serialise
    # writers for the whole database (settings.py).
    return " FOR UPDATE" if connection.features.has_select_for_update else ""


_T_GROUP = Group._meta.db_table
_T_AGENT = Agent._meta.db_table
_T_MEMBERSHIP = Membership._meta.db_table
_T_EVENT = GroupEvent._meta.db_table
_T_RECEIPT = ActionReceipt._meta.db_table


def accept(command: Command, *, now: datetime | None = None) -> Receipt:
    """Accept ``command`` or raise ``ProtocolError``; return its receipt.

    The caller renders the receipt (or the error). Nothing is written for a
    refused Command, and nothing outside this function writes authoritative
    models. A concurrent identical Command that won the race answers with
    its receipt; a deadlock or serialisation failure is retried.
    """
    env = command.envelope
    spec = spec_for(env.type)
    if spec is None:
        raise ProtocolError(
            ErrorCode.SCHEMA_VALIDATION_FAILED, f"type: unknown command type {env.type!r}", details={"field": "type"}
        )
    if spec.internal and command.auth in (Auth.SIGNED, Auth.SELF):
        # Issue 16: an internal kind (artifact.upload: "this Group holds these
        # bytes") is the server's own record of something it did; a client
        # proves it holds bytes only by sending them.
        raise ProtocolError(
            ErrorCode.AUTH_FORBIDDEN, f"{env.type} is recorded by the server itself, never sent by a client"
        )
    check_extensions(env, spec)
    now = now or timezone.now()
    for attempt in range(_MAX_ATTEMPTS):
        try:
            return _accept_once(command, spec, now)
        except IntegrityError:
            # Either the receipt (actor, action_id) or a unique key the
            # handler relies on was taken by a concurrent transaction that
            # committed first. Looking again answers with that outcome.
            if attempt == _MAX_ATTEMPTS - 1:
                raise
        except OperationalError as exc:
            # A deadlock between two multi-Group Commands, or a serialisation
            # failure: PostgreSQL rolled one back; it is safe to run again.
            if _sqlstate(exc) not in _RETRYABLE_SQLSTATES or attempt == _MAX_ATTEMPTS - 1:
                raise
        except RefusedWithRecord as refusal:
            accept(refusal.record, now=now)
            raise refusal.error from None
        except ProtocolError:
            # The same Command may have been accepted by a concurrent retry
            # that committed while this one waited for the Group lock; then
            # the state it saw is the winner's, and the answer is the
            # winner's receipt.
            stored = _stored_receipt(command)
            if stored is None:
                raise
            return stored
    raise AssertionError("unreachable")


_MAX_ATTEMPTS = 3


def check_extensions(env: Envelope, spec: CommandSpec) -> None:
    """An extension marked critical that this command type does not
    understand refuses the Command: acting while ignoring it could break the
    sender's intent. Non-critical ones are kept in the signed envelope."""
    for name, value in env.extensions.items():
        if name in spec.extensions:
            continue
        if isinstance(value, dict) and value.get("critical") is True:
            raise ProtocolError(
                ErrorCode.UNKNOWN_CRITICAL_EXTENSION,
                f"extensions.{name}: {env.type} does not support this critical extension",
                details={"field": f"extensions.{name}"},
            )


_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock_detected


def _sqlstate(exc: BaseException) -> str | None:
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)


def _stored_receipt(command: Command) -> Receipt | None:
    env = command.envelope
    row = (
        ActionReceipt.objects.filter(actor=env.actor, action_id=env.action_id)
        .values_list("content_hash", "receipt")
        .first()
    )
    if row is None or row[0] != env.content_hash():
        return None
    if command.auth is Auth.SIGNED:
        with connection.cursor() as cur:
            _verify_replay(command, _actor_key(cur, env))
    return {**row[1], "replayed": True}


def _verify_replay(command: Command, public_key: str | None) -> None:
    """A signed Command answered from its stored receipt is verified first: a
    forged copy of a known envelope (same content, someone else's signature)
    gets AUTH_INVALID_SIGNATURE, never the receipt (issue 16; spec §8: signature
    verification precedes every other use of a signed document).
    ``public_key``: the actor's, as the caller read it (None: no such Agent)."""
    if command.auth is Auth.SIGNED:
        check_signature(command.envelope, public_key)


def _actor_key(cur: Any, env: Envelope) -> str | None:
    """The actor's public key, or None for the system actor or an unknown Agent."""
    if env.actor == SYSTEM_ACTOR:
        return None
    cur.execute(f"SELECT public_key FROM {_T_AGENT} WHERE id = %s", [db_uuid(env.actor)])
    row = cur.fetchone()
    return row[0] if row is not None else None


def check_signature(env: Envelope, public_key: str | None) -> None:
    """The envelope's Ed25519 signature verifies with ``public_key``."""
    if public_key is None or not env.signature or not verify_bytes(public_key, env.signing_bytes, env.signature):
        raise ProtocolError(ErrorCode.AUTH_INVALID_SIGNATURE, "the signature does not verify with the actor's key")


def check_fresh(env: Envelope, now: datetime) -> None:
    """A newly presented signed Command's ``issued_at`` lies within the
    Organization's bounded freshness and clock-skew window (spec §8): at most
    ``MWP_COMMAND_FRESHNESS_SECONDS`` old and ``MWP_COMMAND_MAX_SKEW_SECONDS``
    ahead of the server's clock. A retry of an accepted Command is answered
    from its receipt before this check (spec §19: an unchanged retry keeps
    its signed content)."""
    age = (now - env.issued_at).total_seconds()
    if age > _MAX_AGE_SECONDS:
        raise ProtocolError(
            ErrorCode.AUTH_INVALID_SIGNATURE,
            f"issued_at is {int(age)} s old; a new Command must be at most {_MAX_AGE_SECONDS} s old"
            " (sign it again with a new action_id)",
            details={"field": "issued_at"},
        )
    if -age > _MAX_SKEW_SECONDS:
        raise ProtocolError(
            ErrorCode.AUTH_INVALID_SIGNATURE,
            f"issued_at is {int(-age)} s ahead of the server's clock (at most {_MAX_SKEW_SECONDS} s)",
            details={"field": "issued_at"},
        )


_MAX_AGE_SECONDS: int = settings.MWP_COMMAND_FRESHNESS_SECONDS
_MAX_SKEW_SECONDS: int = settings.MWP_COMMAND_MAX_SKEW_SECONDS


def _replayed(env: Envelope, content_hash: str, stored_hash: str, stored: Any) -> Receipt:
    """Step 1's answer for a known (actor, action_id) (MWP-EVT-003)."""
    if stored_hash != content_hash:
        raise ProtocolError(
            ErrorCode.ACTION_ID_COLLISION,
            "this action_id was already accepted with different content",
            details={"action_id": env.action_id},
        )
    return {**_json(stored), "replayed": True}


def _accept_once(command: Command, spec: CommandSpec, now: datetime) -> Receipt:
    env = command.envelope
    content_hash = env.content_hash()
    with transaction.atomic(durable=True), connection.cursor() as cur:
        # Steps 1-3 in one round trip where the backend allows: the receipt of
        # (actor, action_id), the Group row locked (it serialises appends to
        # this Group; always the first lock taken), and the actor with its
        # Membership read under that lock, so a concurrent Membership change
        # is either fully before or fully after this Command. A replay takes
        # the lock too; replays are rare and short.
        combined = _read_locked(cur, command, spec) if COMBINED_STATEMENTS and not spec.creates_group else None
        if combined is not None:
            stored, group, maybe_actor = combined
            if stored is not None or maybe_actor is None:
                stored_hash, stored_receipt, actor_key = stored
                _verify_replay(command, actor_key)  # the key the same statement read
                return _replayed(env, content_hash, stored_hash, stored_receipt)
            actor = maybe_actor
        else:
            cur.execute(
                f"SELECT content_hash, receipt FROM {_T_RECEIPT} WHERE actor = %s AND action_id = %s",
                [env.actor, db_uuid(env.action_id)],
            )
            row = cur.fetchone()
            if row is not None:
                if command.auth is Auth.SIGNED:
                    _verify_replay(command, _actor_key(cur, env))
                return _replayed(env, content_hash, row[0], row[1])
            group = _lock_group(cur, env.group, spec)
            actor = _load_actor(cur, command, group)
        _check_actor(command, spec, actor, group)
        _check_scope(spec, group)
        if command.auth is Auth.SIGNED:
            check_fresh(env, now)

        # Step 4: the Group aggregate's revision; handlers compare their own
        # aggregates through check_revision().
        if spec.target == "group":
            check_target_kind(env, "group", group.id)
            check_revision(env, group.revision)

        # Step 5: the handler decides (and writes its aggregate's rows).
        ctx = HandlerContext(envelope=env, spec=spec, actor=actor, group=group, now=now, body=env.body)
        decision: Decision = spec.handler(ctx)

        # Step 6: append, advance the head(s), write the receipt.
        if not decision.events:
            raise RuntimeError(f"handler of {env.type} decided on no Event")
        heads: list[CommittedHead] = []
        for other, emits in decision.also:
            if emits:
                sql, params, events = _append_sql(env, other, emits, now)
                for statement, values in zip(sql, params, strict=True):
                    cur.execute(statement, values)
                heads.append((other.id, other.last_sequence, events))
        receipt, events = _append_with_receipt(cur, env, group, decision, now, content_hash)
        heads.insert(0, (group.id, group.last_sequence, events))

        # Step 7: runs after commit only, so no one hears of an Event that
        # rolled back. Each head carries the Events just committed, as the
        # rows were written (missions.delivery says how the hub uses them).
        prepared = prepare_commit(heads, decision.notices)
        transaction.on_commit(lambda: _notify(prepared))
    for followup in decision.followups:
        accept(followup, now=now)
    if decision.grants:
        return {**receipt, "grants": decision.grants}
    return receipt


# PostgreSQL can lock the Group row and read the receipt, the actor and its
# Membership in one statement, and write the Events, the head and the receipt
# in one statement with data-modifying CTEs. SQLite takes the same steps one
# statement at a time (it has no row locks; IMMEDIATE transactions serialise
# its writers anyway).
COMBINED_STATEMENTS = connection.vendor == "postgresql"


def _read_locked(cur: Any, command: Command, spec: CommandSpec) -> tuple[Any, GroupHead, Actor | None] | None:
    """Steps 1-3 in one statement; None when the Group does not exist (the caller
    then takes the step-by-step path, which answers GROUP_NOT_FOUND or creates it)."""
    env = command.envelope
    agent_id = None if env.actor == SYSTEM_ACTOR else db_uuid(env.actor)
    cur.execute(
        f"SELECT g.organization_id, g.kind, g.last_sequence, g.head_hash, g.revision,"
        f" r.content_hash, r.receipt,"
        f" a.id, a.organization_id, a.kind, a.org_roles, a.public_key, a.session_epoch, m.roles, m.epoch, m.active"
        f" FROM {_T_GROUP} g"
        f" LEFT JOIN {_T_RECEIPT} r ON r.actor = %s AND r.action_id = %s"
        f" LEFT JOIN {_T_AGENT} a ON a.id = %s"
        f" LEFT JOIN {_T_MEMBERSHIP} m ON m.agent_id = a.id AND m.group_id = g.id"
        f" WHERE g.id = %s FOR UPDATE OF g",
        [env.actor, db_uuid(env.action_id), agent_id, db_uuid(env.group)],
    )
    row = cur.fetchone()
    if row is None:
        return None
    if row[5] is not None:
        # A replay: only the actor's key is looked at (to verify the signature
        # before the stored receipt is returned), from this same row.
        return (row[5], row[6], row[11]), _head(env.group, row[:5]), None
    group = _head(env.group, row[:5])
    actor = _actor_from(command, row[7:] if row[7] is not None else None)
    return None, group, actor


def _notify(prepared: CommitNotices) -> None:
    notify_commit(prepared)


def _select_group(cur: Any, group_id: str) -> Any:
    cur.execute(
        f"SELECT organization_id, kind, last_sequence, head_hash, revision FROM {_T_GROUP} WHERE id = %s"
        + _for_update(),
        [db_uuid(group_id)],
    )
    return cur.fetchone()


def _head(group_id: str, row: Any) -> GroupHead:
    return GroupHead(
        id=group_id,
        organization_id=str(uuid.UUID(str(row[0]))),
        kind=row[1],
        last_sequence=row[2],
        head_hash=row[3],
        revision=row[4],
    )


def _lock_existing_group(cur: Any, group_id: str) -> GroupHead:
    row = _select_group(cur, group_id)
    if row is None:
        raise group_not_found()
    return _head(group_id, row)


def _lock_group(cur: Any, group_id: str, spec: CommandSpec) -> GroupHead:
    row = _select_group(cur, group_id)
    if row is None:
        if spec.creates_group:
            # The handler inserts the row; its primary key serialises two
            # concurrent creations of the same Group.
            return GroupHead(group_id, "", spec.scope, 0, GENESIS_HASH, 0, exists=False)
        raise group_not_found()
    if spec.creates_group:
        raise ProtocolError(
            ErrorCode.REVISION_CONFLICT, f"group {group_id} already exists", details={"group": group_id}
        )
    return _head(group_id, row)


def _check_scope(spec: CommandSpec, group: GroupHead) -> None:
    """The Command is issued in the kind of Group it belongs to. Checked after
    the actor: the kind of a Group is not told to someone who may not see it."""
    if spec.creates_group or spec.scope == "any" or group.kind == spec.scope:
        return
    where = "an Organization's administrative Group" if spec.scope == "admin" else "a Mission Group"
    raise ProtocolError(ErrorCode.INVALID_STATE_TRANSITION, f"{spec.type} is issued in {where}")


def _load_actor(cur: Any, command: Command, group: GroupHead) -> Actor:
    env = command.envelope
    row = None
    if env.actor != SYSTEM_ACTOR:
        cur.execute(
            f"SELECT a.id, a.organization_id, a.kind, a.org_roles, a.public_key, a.session_epoch,"
            f" m.roles, m.epoch, m.active"
            f" FROM {_T_AGENT} a LEFT JOIN {_T_MEMBERSHIP} m ON m.agent_id = a.id AND m.group_id = %s"
            f" WHERE a.id = %s",
            [db_uuid(group.id), db_uuid(env.actor)],
        )
        row = cur.fetchone()
    return _actor_from(command, row)


def _actor_from(command: Command, row: Any) -> Actor:
    """The actor of ``command`` from its Agent row (``id, organization_id, kind,
    org_roles, public_key, session_epoch, roles, epoch, active``), or the
    system actor."""
    env = command.envelope
    if env.actor == SYSTEM_ACTOR:
        if command.auth is not Auth.SYSTEM:
            raise ProtocolError(ErrorCode.AUTH_FORBIDDEN, "only the server acts as the system actor")
        return Actor(SYSTEM_ACTOR, None, "system", frozenset(), "", 0, None, None)
    if command.auth is Auth.SYSTEM:
        raise ProtocolError(ErrorCode.AUTH_FORBIDDEN, "system commands are issued by the system actor")
    if row is None:
        # An unknown actor cannot have signed anything we can check.
        raise ProtocolError(
            ErrorCode.AUTH_INVALID_SIGNATURE, f"unknown agent {env.actor}", details={"actor": env.actor}
        )
    active = bool(row[8])
    return Actor(
        id=env.actor,
        organization_id=str(uuid.UUID(str(row[1]))),
        kind=row[2],
        org_roles=frozenset(_json(row[3])),
        public_key=row[4],
        session_epoch=row[5],
        membership_roles=frozenset(_json(row[6])) if active else None,
        membership_epoch=row[7] if active else None,
    )


def _check_actor(command: Command, spec: CommandSpec, actor: Actor, group: GroupHead) -> None:
    """Step 2: who is speaking, with which session, in which role."""
    env = command.envelope
    if actor.is_system:
        if "system" not in spec.actors:
            raise ProtocolError(ErrorCode.AUTH_FORBIDDEN, f"{spec.type} is not a system command")
        return
    if "agent" not in spec.actors:
        raise ProtocolError(ErrorCode.AUTH_FORBIDDEN, f"{spec.type} is issued by the system only")
    if command.auth is Auth.SIGNED:
        check_signature(env, actor.public_key)
    elif command.auth is Auth.SELF and not spec.self_authenticating:
        raise ProtocolError(ErrorCode.AUTH_INVALID_SIGNATURE, f"{spec.type} needs a signed envelope")
    if command.auth is Auth.SIGNED and env.session_epoch != actor.session_epoch:
        # MWP-WRK-014: a replaced session's Commands are fenced out.
        raise ProtocolError(
            ErrorCode.AUTH_STALE_SESSION,
            f"session_epoch {env.session_epoch} is not the current session ({actor.session_epoch})",
            details={"current": actor.session_epoch},
        )
    if spec.creates_group:
        pass  # no Group yet: only Organization roles apply
    elif group.kind == Group.KIND_ADMIN:
        if actor.organization_id != group.organization_id:
            # Issue 16 item 8: a Group the actor may not see answers as an
            # absent one (status, code, message), never "exists, not yours".
            raise group_not_found()
    else:
        if actor.membership_roles is None:
            raise group_not_found()
        if env.membership_epoch is not None and env.membership_epoch != actor.membership_epoch:
            raise ProtocolError(
                ErrorCode.MEMBERSHIP_STALE,
                f"membership_epoch {env.membership_epoch} is not current ({actor.membership_epoch})",
                details={"current": actor.membership_epoch},
            )
        if spec.group_roles and not (spec.group_roles & actor.membership_roles):
            raise ProtocolError(
                ErrorCode.AUTH_FORBIDDEN,
                f"{spec.type} needs the Group role {' or '.join(sorted(spec.group_roles))}",
            )
    if spec.org_roles and not (spec.org_roles & actor.org_roles):
        raise ProtocolError(
            ErrorCode.AUTH_FORBIDDEN,
            f"{spec.type} needs the Organization role {' or '.join(sorted(spec.org_roles))}",
        )


def check_target_kind(env: Envelope, kind: str, expected_id: str | None = None) -> None:
    """The envelope's ``target`` names an aggregate of ``kind`` (and ``expected_id``)."""
    target = env.target
    if target is None:
        raise ProtocolError(
            ErrorCode.SCHEMA_VALIDATION_FAILED, f"target: {env.type} needs a {kind} target", details={"field": "target"}
        )
    if target.kind != kind:
        raise ProtocolError(
            ErrorCode.SCHEMA_VALIDATION_FAILED, f"target.kind: must be {kind!r}", details={"field": "target.kind"}
        )
    if expected_id is not None and target.id != expected_id:
        raise ProtocolError(
            ErrorCode.SCHEMA_VALIDATION_FAILED, f"target.id: must be {expected_id}", details={"field": "target.id"}
        )


def check_revision(env: Envelope, current: int) -> None:
    """Compare-and-set on the aggregate revision (MWP-EVT-007).

    A spec with ``cas=True`` demands ``target.revision``; otherwise a given
    revision is still compared.
    """
    spec = spec_for(env.type)
    expected = env.target.revision if env.target else None
    if expected is None:
        if spec is not None and spec.cas:
            raise ProtocolError(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                f"target.revision: {env.type} is compare-and-set and needs the expected revision",
                details={"field": "target.revision"},
            )
        return
    if expected != current:
        raise ProtocolError(
            ErrorCode.REVISION_CONFLICT,
            f"expected revision {expected}, the aggregate is at {current}",
            details={"expected": expected, "current": current},
            expected_revision=expected,
            current_revision=current,
        )


def _append_sql(
    env: Envelope, group: GroupHead, emits: list[Emit], now: datetime
) -> tuple[list[str], list[list[Any]], list[dict[str, Any]]]:
    """Step 6 for one Group: the Events with the next sequences and the hash
    chain (one INSERT) and the head, with the Group revision when the Group is
    the aggregate that changed (one UPDATE). Returns the statements, their
    parameters and the Events as on the wire (``GroupEvent.as_wire``); moves
    ``group`` to its new head."""
    sequence = group.last_sequence
    prev = group.head_hash
    occurred_at = format_time(now)
    values: list[Any] = []
    events: list[dict[str, Any]] = []
    revision = group.revision
    for emit in emits:
        sequence += 1
        event_id = str(uuid.uuid4())
        event: dict[str, Any] = {
            "event_id": event_id,
            "group": group.id,
            "sequence": sequence,
            "type": emit.type,
            "aggregate": emit.aggregate.as_dict(),
            "actor": env.actor,
            "action_id": env.action_id,
            "occurred_at": occurred_at,
            "body": emit.body,
            "prev_hash": prev,
        }
        row_prev = prev
        prev = event["hash"] = event_hash(prev, event)
        values += [
            db_uuid(event_id), db_uuid(group.id), sequence, emit.type, emit.aggregate.kind, emit.aggregate.id,
            emit.aggregate.revision, env.actor, db_uuid(env.action_id), db_time(now),
            json.dumps(emit.body, separators=(",", ":")), row_prev, prev,
        ]  # fmt: skip
        events.append(event)
        # The Group revision moves only on Group-aggregate Events (Membership,
        # Mission status); the head always moves.
        if emit.aggregate.kind == "group" and emit.aggregate.id == group.id:
            revision = max(revision, emit.aggregate.revision)
    placeholders = ",".join(["(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"] * len(emits))
    insert = (
        f"INSERT INTO {_T_EVENT} (event_id, group_id, sequence, type, aggregate_kind, aggregate_id,"
        f" aggregate_revision, actor, action_id, occurred_at, body, prev_hash, hash) VALUES {placeholders}"
    )
    update = f"UPDATE {_T_GROUP} SET last_sequence = %s, head_hash = %s, revision = %s WHERE id = %s"
    group.last_sequence, group.head_hash, group.revision = sequence, prev, revision
    return [insert, update], [values, [sequence, prev, revision, db_uuid(group.id)]], events


_RECEIPT_INSERT = (
    f"INSERT INTO {_T_RECEIPT} (actor, action_id, content_hash, group_id, receipt, accepted_at)"
    f" VALUES (%s, %s, %s, %s, %s, %s)"
)


def _append_with_receipt(
    cur: Any, env: Envelope, group: GroupHead, decision: Decision, now: datetime, content_hash: str
) -> tuple[Receipt, list[dict[str, Any]]]:
    """Step 6 for the Command's own Group: Events, head and receipt; one
    statement on PostgreSQL (data-modifying CTEs), three on SQLite. Returns
    the receipt and the Events as on the wire."""
    statements, params, events = _append_sql(env, group, decision.events, now)
    refs = [{"event_id": e["event_id"], "sequence": e["sequence"], "type": e["type"]} for e in events]
    receipt: Receipt = {
        "action_id": env.action_id,
        "actor": env.actor,
        "group": group.id,
        "status": "accepted",
        "events": refs,
        "aggregate": decision.aggregate.as_dict(),
        "accepted_at": format_time(now),
        "replayed": False,
    }
    receipt_params = [
        env.actor, db_uuid(env.action_id), content_hash, db_uuid(group.id), json.dumps(receipt), db_time(now),
    ]  # fmt: skip
    if COMBINED_STATEMENTS:
        cur.execute(
            f"WITH ev AS ({statements[0]} RETURNING 1), hd AS ({statements[1]} RETURNING 1) {_RECEIPT_INSERT}",
            params[0] + params[1] + receipt_params,
        )
    else:
        for statement, values in zip(statements, params, strict=True):
            cur.execute(statement, values)
        cur.execute(_RECEIPT_INSERT, receipt_params)
    return receipt, events


def system_action_id(*parts: object) -> str:
    """A deterministic action ID for a system Command, so a repeated system
    action (an expiry seen twice) is idempotent rather than duplicated."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "mwp:system:" + ":".join(str(p) for p in parts)))


AcceptFn = Callable[[Command], Receipt]
