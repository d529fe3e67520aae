"""``accept()``: the single write path of the Group Authority (DESIGN §3).

Every authoritative change is an MWP 0.1 Command (PROTOCOL §15.1) accepted
here. A Command document from a client goes through ``accept_document``:

1. the six verification stages of §6.4 over the received bytes (strict
   parse, schema, signature envelope and protected time, key resolution from
   the signer's Organization's Registry, JCS signing bytes, strict Ed25519);
   the first failing stage decides the wire code, its reason goes only to the
   protected diagnostics;
2. ``accept()``: the payload against the catalogue; the receipt of
   ``(actor, actionId)`` (the same signing hash answers the stored receipt,
   other content is ACTION_ID_COLLISION); freshness of ``issuedAt``; then one
   ``transaction.atomic(durable=True)``: the First-Admission Record, the Group
   row locked, Session and Membership Epochs, roles, ``expectedRevision``,
   the handler, the Events, each signed by the Group Authority service
   Principal (``acceptedBy``) with ``cause``, ``correlationId`` and
   ``commandHash``, appended with the next sequences, and the receipt;
3. after commit, delivery hears that the Group head moved.

In-process callers build a ``Command`` themselves only as the Organization's
control plane (``Auth.SERVICE``: a Command it built and signed itself,
``missions.commands.service_command``). People sign their own Commands in
their browser (DESIGN §4) and send them like any client.

A ``ProtocolError`` anywhere rolls everything back: a refused Command writes
nothing. Lock order is always the Group row first, then the aggregate rows a
handler locks; other Groups are locked in ascending id order after it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils import timezone

from mwportal.protocol import GENESIS_HASH, ErrorCode, ProtocolError, jcs
from mwportal.protocol import catalogue as _catalogue
from mwportal.protocol.command import CommandDoc, format_timestamp
from mwportal.protocol.eventdoc import ORGANIZATION_SCOPED, build_event
from mwportal.protocol.ids import urn

from . import policylog, service_keys
from .access import group_not_found
from .coordinator import fence
from .delivery import CommittedHead, carried_event, notify_commit, prepare_commit
from .intake import Auth as Auth
from .intake import Command as Command
from .intake import admit, check_fresh, verify_command
from .models import ActionReceipt, Agent, Group, GroupEvent, GroupSnapshot, Membership, OrganizationEvent
from .registry import (
    CommandSpec,
    accepted_hooks,
    before_handler_hooks,
    decided_hooks,
    extension_profile_checks,
    spec_for,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AggregateRef:
    kind: str
    id: str
    revision: int

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "revision": self.revision}


@dataclass(frozen=True, slots=True)
class Emit:
    """An Event a handler decided to append: a catalogue Event kind and its payload."""

    kind: str
    aggregate: AggregateRef
    payload: dict[str, Any]
    work_item_id: str | None = None  # bare UUID: the Event's ``workItemId``
    conversation_id: str | None = None  # bare UUID: the Event's ``conversationId``
    # A bare UUID chosen by the handler, so that another Event of the same
    # Command can cite it (``sourceEventId``); minted at append otherwise.
    event_id: str | None = None

    @property
    def type(self) -> str:
        return self.kind


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
    # Channel-layer messages sent after commit: ``(channel group, message)``.
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
    id: str  # bare UUID
    type: str  # the wire actor type: "agent", "human", "service"
    organization_id: str
    kind: str  # the Agent row's kind: "agent", "person", "service"
    org_roles: frozenset[str]
    session_epoch: int
    membership_roles: frozenset[str] | None  # None: no active Membership
    membership_epoch: int | None
    provisional: bool = False  # an active provisional Membership (§8), for ``provisional_gate``
    provisional_expires_at: datetime | None = None

    @property
    def is_service(self) -> bool:
        return self.type == "service"

    @property
    def principal(self) -> dict[str, str]:
        return {"type": self.type, "id": urn(self.id)}


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

    command: CommandDoc
    spec: CommandSpec
    actor: Actor
    group: GroupHead
    now: datetime
    payload: dict[str, Any]
    auth: Auth = Auth.SIGNED
    _locked: dict[str, GroupHead] = field(default_factory=dict)
    # The Cooperation Override Grant the Command cites, once verified (§20;
    # ``registry.before_handler_hooks``), and the Policy Log entries the
    # handler decided on, appended with its Events (``missions.policylog``).
    override: Any = None
    policy_records: list[Any] = field(default_factory=list)
    # Events a policy check adds to the Command's own (a soft threshold's
    # notification of the Coordinator, §20), appended after the handler's.
    notices: list[Emit] = field(default_factory=list)

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
    PostgreSQL the value as given (psycopg sends text untyped and the server
    reads it as ``uuid``). Every caller passes an ID already validated."""
    if _NATIVE_UUID:
        return value
    return (value if isinstance(value, uuid.UUID) else uuid.UUID(value)).hex


# The backend is fixed for the life of the process (settings are read once).
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
_T_ORG_EVENT = OrganizationEvent._meta.db_table
_T_RECEIPT = ActionReceipt._meta.db_table
_T_SNAPSHOT = GroupSnapshot._meta.db_table


# --- step 1: the six stages -----------------------------------------------------------------


def accept_document(data: bytes, *, now: datetime | None = None) -> Receipt:
    """Verify a Command document's bytes in the six stages, then ``accept()`` it."""
    return accept(verify_command(data), now=now)


# --- step 2: accept ----------------------------------------------------------------------------


def accept(command: Command, *, now: datetime | None = None) -> Receipt:
    """Accept ``command`` or raise ``ProtocolError``; return its receipt.

    Nothing is written for a refused Command, and nothing outside this
    function writes authoritative models. A concurrent identical Command that
    won the race answers with its receipt; a deadlock or serialisation failure
    is retried.
    """
    doc = command.doc
    spec = spec_for(doc.kind)
    if spec is None:
        raise ProtocolError(
            ErrorCode.INVALID_COMMAND,
            f"kind: this Group Authority does not accept {doc.kind!r}",
            details={"field": "kind", "reason": "unsupported-kind"},
        )
    try:
        _catalogue.validate_payload(doc.kind, doc.payload)
    except _catalogue.PayloadError as exc:
        raise _payload_refusal(exc) from None
    if spec.internal and command.auth is not Auth.SERVICE:
        # Issue 16: an internal kind ("this Group holds these bytes") is the
        # server's own record of something it did; a client proves it holds
        # bytes only by sending them.
        raise ProtocolError(
            ErrorCode.AUTH_FORBIDDEN, f"{doc.kind} is recorded by the server itself, never sent by a client"
        )
    now = now or timezone.now()
    for attempt in range(_MAX_ATTEMPTS):
        try:
            return _accept_once(command, spec, now)
        except IntegrityError:
            # The receipt (actor, actionId) or a unique key the handler relies
            # on was taken by a concurrent transaction that committed first.
            if attempt == _MAX_ATTEMPTS - 1:
                raise
        except OperationalError as exc:
            if _sqlstate(exc) not in _RETRYABLE_SQLSTATES or attempt == _MAX_ATTEMPTS - 1:
                raise
        except RefusedWithRecord as refusal:
            accept(refusal.record, now=now)
            raise refusal.error from None
        except ProtocolError as exc:
            # The same Command may have been accepted by a concurrent retry
            # that committed while this one waited for the Group lock.
            stored = _stored_receipt(doc)
            if stored is None:
                # A limit the Command hit is a policy decision the Policy Log keeps (§20).
                policylog.record_after_refusal(exc, now=now)
                raise
            return stored
    raise AssertionError("unreachable")


_MAX_ATTEMPTS = 3

_REQUIRED = re.compile(r'^"(?P<name>[^"]+)" is a required property$')


def _payload_refusal(exc: _catalogue.PayloadError) -> ProtocolError:
    """SCHEMA_VALIDATION_FAILED naming the first refused member; a Work Contract that
    lacks a required member is WORK_CONTRACT_INCOMPLETE naming it (§10.1)."""
    for error in exc.errors:
        pointer, _, message = error.partition(": ")
        missing = _REQUIRED.match(message)
        if missing and (pointer == "/payload/contract" or pointer.startswith("/payload/contract/")):
            field = f"{pointer}/{missing['name']}"
            return ProtocolError(
                ErrorCode.WORK_CONTRACT_INCOMPLETE,
                f"{field}: the Work Contract needs it",
                details={"field": field, "reason": "contract_invalid"},
            )
    first = exc.errors[0] if exc.errors else "/payload"
    return ProtocolError(
        ErrorCode.SCHEMA_VALIDATION_FAILED, "; ".join(exc.errors[:3]), details={"field": first.split(":", 1)[0]}
    )


def check_extensions(ctx: HandlerContext) -> None:
    """A critical extension that neither the kind's handler nor a profile the Organization registered and the
    Group pinned (``registry.extension_profile_checks``, §18) understands refuses the Command. A noncritical
    unknown one is retained and relayed on the Command's Events without interpretation (§21)."""
    doc, spec = ctx.command, ctx.spec
    for name, value in doc.extensions.items():
        if name in spec.extensions or not (isinstance(value, dict) and value.get("critical") is True):
            continue
        if any(understands(ctx, name, value) for understands in extension_profile_checks):
            continue
        raise ProtocolError(
            ErrorCode.UNKNOWN_CRITICAL_EXTENSION,
            f"extensions.{name}: {doc.kind} does not support this critical extension",
            details={"field": f"extensions.{name}"},
        )


_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock_detected


def _sqlstate(exc: BaseException) -> str | None:
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)


def _stored_receipt(doc: CommandDoc) -> Receipt | None:
    row = (
        ActionReceipt.objects.filter(actor=doc.actor, action_id=doc.action_id)
        .values_list("content_hash", "receipt")
        .first()
    )
    if row is None or row[0] != doc.signing_hash:
        return None
    return {**_json(row[1]), "replayed": True}


def _replayed(doc: CommandDoc, stored_hash: str, stored: Any) -> Receipt:
    """The answer for a known (actor, actionId) (§15.1)."""
    if stored_hash != doc.signing_hash:
        raise ProtocolError(
            ErrorCode.ACTION_ID_COLLISION,
            "this actionId was already accepted with different content",
            related_action_id=doc.action_urn,
        )
    return {**_json(stored), "replayed": True}


# --- step 3: the transaction -------------------------------------------------------------------


def _accept_once(command: Command, spec: CommandSpec, now: datetime) -> Receipt:
    doc = command.doc
    with transaction.atomic(durable=True), connection.cursor() as cur:
        cur.execute(
            f"SELECT content_hash, receipt FROM {_T_RECEIPT} WHERE actor = %s AND action_id = %s",
            [doc.actor, db_uuid(doc.action_id)],
        )
        row = cur.fetchone()
        if row is not None:
            return _replayed(doc, row[0], row[1])
        if command.auth is Auth.SIGNED:
            check_fresh(doc, now)
        if spec.scope == "organization":
            group = _organization_head(spec)
        else:
            if doc.group is None:
                raise ProtocolError(
                    ErrorCode.SCHEMA_VALIDATION_FAILED,
                    f"groupId: {doc.kind} is a Group-scoped Command",
                    details={"field": "groupId"},
                )
            group = _lock_group(cur, doc.group, spec)
        actor = _load_actor(cur, command, spec, group)
        if group.exists and group.kind == Group.KIND_MISSION and actor.session_epoch == doc.session_epoch:
            fence(doc, actor.id, actor.type, actor.membership_roles, group.id, now)  # §7.2, before roles
        _check_actor(command, spec, actor, group)
        _check_scope(spec, group)
        _check_not_archived(cur, group)
        organization_id = group.organization_id or actor.organization_id
        if command.auth is Auth.SIGNED:
            admit(command, organization_id, now)

        ctx = HandlerContext(
            command=doc, spec=spec, actor=actor, group=group, now=now, payload=doc.payload, auth=command.auth
        )
        check_extensions(ctx)
        for check in before_handler_hooks:
            check(ctx)
        decision: Decision = spec.handler(ctx)
        decision.events.extend(ctx.notices)
        for decided in decided_hooks:
            decided(ctx, decision)
        if not decision.events:
            raise RuntimeError(f"handler of {doc.kind} decided on no Event")
        if not group.organization_id:
            group.organization_id = organization_id or actor.organization_id

        heads: list[CommittedHead] = []
        for other, emits in decision.also:
            if emits:
                events: list[dict[str, Any]] = []
                _append(cur, doc, other, emits, now, carried=events)
                heads.append((other.id, other.last_sequence, events))
        receipt, events = _append_with_receipt(cur, doc, group, decision, now)
        for hook in accepted_hooks:
            hook(ctx, receipt)
        _record_policy(ctx, receipt)
        if group.exists or group.last_sequence:
            heads.insert(0, (group.id, group.last_sequence, events))
        prepared = prepare_commit([h for h in heads if h[2]], decision.notices)
        transaction.on_commit(lambda: notify_commit(prepared))
    for followup in decision.followups:
        accept(followup, now=now)
    if decision.grants:
        return {**receipt, "grants": decision.grants}
    return receipt


def _record_policy(ctx: HandlerContext, receipt: Receipt) -> None:
    """The handler's Policy Log entries, linked to the Command's first accepted Event unless they name one."""
    first = receipt["events"][0]["eventId"] if receipt["events"] else None
    for entry in ctx.policy_records:
        if entry.event_id is None and first is not None:
            entry = replace(entry, event_id=first.removeprefix("urn:uuid:"))
        policylog.record(entry, now=ctx.now)


def _organization_head(spec: CommandSpec) -> GroupHead:
    """An Organization-scoped Command has no Group: a placeholder head that no Event joins."""
    return GroupHead("", "", "organization", 0, GENESIS_HASH, 0, exists=False)


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
            ErrorCode.REVISION_CONFLICT, f"group {urn(group_id)} already exists", group_id=urn(group_id)
        )
    return _head(group_id, row)


def _check_not_archived(cur: Any, group: GroupHead) -> None:
    """An archived Group accepts no further Command of any kind, archival included (§7.4). Checked after
    the actor, so only someone who may see the Group learns that it is archived."""
    if not (group.exists and group.id):
        return
    cur.execute(f"SELECT 1 FROM {_T_SNAPSHOT} WHERE group_id = %s AND final LIMIT 1", [db_uuid(group.id)])
    if cur.fetchone() is not None:
        raise ProtocolError(
            ErrorCode.INVALID_STATE_TRANSITION,
            "the Group is archived (§7.4): it accepts no further Command",
            details={"reason": "group_archived"},
        )


def _check_scope(spec: CommandSpec, group: GroupHead) -> None:
    """The Command is issued in the kind of Group it belongs to. Checked after
    the actor: the kind of a Group is not told to someone who may not see it."""
    if spec.creates_group or spec.scope in ("any", "organization") or group.kind == spec.scope:
        return
    where = "an Organization's administrative Group" if spec.scope == "admin" else "a Mission Group"
    raise ProtocolError(ErrorCode.INVALID_STATE_TRANSITION, f"{spec.kind} is issued in {where}")


def _load_actor(cur: Any, command: Command, spec: CommandSpec, group: GroupHead) -> Actor:
    doc = command.doc
    cur.execute(
        f"SELECT a.id, a.organization_id, a.kind, a.org_roles, a.session_epoch, m.roles, m.epoch, m.active,"
        f" m.provisional, m.provisional_expires_at"
        f" FROM {_T_AGENT} a LEFT JOIN {_T_MEMBERSHIP} m ON m.agent_id = a.id AND m.group_id = %s"
        f" WHERE a.id = %s",
        [db_uuid(group.id) if group.id else None, db_uuid(doc.actor)],
    )
    row = cur.fetchone()
    if row is None:
        if spec.bootstrap and command.auth is Auth.SERVICE and doc.actor_type == "service":
            # The Organization's bootstrap: its control plane is created by the handler.
            return Actor(doc.actor, "service", "", Agent.KIND_SERVICE, frozenset(), 0, None, None)
        # An unknown actor cannot have signed anything we can check.
        raise ProtocolError(ErrorCode.AUTH_INVALID_SIGNATURE, "the actor is not a Principal of this Organization")
    kind = row[2]
    if Agent.ACTOR_TYPES.get(kind) != doc.actor_type:
        raise ProtocolError(ErrorCode.AUTH_INVALID_SIGNATURE, "the actor's type is not the Principal's")
    active = bool(row[7])
    return Actor(
        id=doc.actor,
        type=doc.actor_type,
        organization_id=str(uuid.UUID(str(row[1]))),
        kind=kind,
        org_roles=frozenset(_json(row[3])),
        session_epoch=row[4],
        membership_roles=frozenset(_json(row[5])) if active else None,
        membership_epoch=row[6] if active else None,
        provisional=active and bool(row[8]),
        provisional_expires_at=_from_db_time(row[9]) if active and row[8] else None,
    )


def _from_db_time(value: Any) -> datetime | None:
    """A datetime read through the raw cursor, aware as the ORM gives it (Django's SQLite converter gives it naive)."""
    return timezone.make_aware(value, connection.timezone) if value and timezone.is_naive(value) else value


# The administrative Group's implicit Membership: every Principal of the
# Organization reads it, at Membership Epoch 1.
ADMIN_MEMBERSHIP_EPOCH = 1


def _check_actor(command: Command, spec: CommandSpec, actor: Actor, group: GroupHead) -> None:
    """Who is speaking, with which session, in which role (§15.1)."""
    doc = command.doc
    if command.auth is Auth.SERVICE and not actor.is_service:
        raise ProtocolError(ErrorCode.AUTH_FORBIDDEN, "only the Organization's services issue service Commands")
    if actor.type not in spec.actors:
        raise ProtocolError(ErrorCode.AUTH_FORBIDDEN, f"{spec.kind} is not issued by a {actor.type} Principal")
    if actor.type == "agent" and doc.session_epoch != actor.session_epoch:
        # §6.3: a replaced session's Commands are fenced out.
        raise ProtocolError(
            ErrorCode.AUTH_STALE_SESSION,
            f"sessionEpoch {doc.session_epoch} is not the current session ({actor.session_epoch})",
            details={"current": actor.session_epoch},
        )
    if spec.scope == "organization" or spec.creates_group:
        pass  # no Group (yet): only Organization roles apply
    elif group.organization_id != actor.organization_id and not spec.bootstrap:
        # Issue 16 item 8: a Group the actor may not see answers as an absent one.
        raise group_not_found()
    elif group.kind == Group.KIND_ADMIN:
        _check_membership_epoch(doc, ADMIN_MEMBERSHIP_EPOCH)
    elif not actor.is_service:
        if actor.membership_roles is None or actor.membership_epoch is None:
            raise group_not_found()
        _check_membership_epoch(doc, actor.membership_epoch)
        if spec.group_roles and not (spec.group_roles & actor.membership_roles):
            raise ProtocolError(
                ErrorCode.AUTH_FORBIDDEN,
                f"{spec.kind} needs the Group role {' or '.join(sorted(spec.group_roles))}",
            )
    if spec.org_roles and not actor.is_service and not (spec.org_roles & actor.org_roles):
        raise ProtocolError(
            ErrorCode.AUTH_FORBIDDEN,
            f"{spec.kind} needs the Organization role {' or '.join(sorted(spec.org_roles))}",
        )


def _check_membership_epoch(doc: CommandDoc, current: int) -> None:
    if doc.membership_epoch is not None and doc.membership_epoch != current:
        raise ProtocolError(
            ErrorCode.MEMBERSHIP_STALE,
            f"membershipEpoch {doc.membership_epoch} is not current ({current})",
            details={"current": current},
        )


def check_revision(doc: CommandDoc, current: int) -> None:
    """Compare-and-set on the aggregate revision (§15.3).

    A compare-and-set kind demands ``expectedRevision``; any other kind's
    given ``expectedRevision`` is still compared.
    """
    expected = doc.expected_revision
    if expected is None:
        spec = spec_for(doc.kind)
        if spec is not None and spec.cas:
            raise ProtocolError(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                f"expectedRevision: {doc.kind} is compare-and-set and needs the expected revision",
                details={"field": "expectedRevision"},
            )
        return
    if expected != current:
        raise ProtocolError(
            ErrorCode.REVISION_CONFLICT,
            f"expected revision {expected}, the aggregate is at {current}",
            expected_revision=expected,
            current_revision=current,
            related_action_id=doc.action_urn,
        )


# --- appending ---------------------------------------------------------------------------------


def _check_emit(command_kind: str, emit: Emit) -> None:
    """Every Event the Group Authority writes is one its catalogue admits (DESIGN §2): a kind the Command's
    definition says it yields (what the Worker's fold and OpenAPI readers trust), with a payload its schema
    admits."""
    try:
        _catalogue.validate_payload(emit.kind, emit.payload)
    except (_catalogue.PayloadError, _catalogue.UnknownKind) as exc:
        raise RuntimeError(f"a handler emitted a {emit.kind} payload the catalogue refuses: {exc}") from None
    if emit.kind not in _catalogue.command(command_kind).events:
        raise RuntimeError(f"{command_kind} appended {emit.kind}, which its catalogue definition does not yield")


def _event_document(
    doc: CommandDoc, emit: Emit, organization_id: str, now_text: str, position: tuple[str, int, int] | None
) -> tuple[str, dict[str, Any]]:
    """``(event_id, signed document)`` of one Emit; ``position`` is (group, sequence, revision)."""
    _check_emit(doc.kind, emit)
    event_id = emit.event_id or str(uuid.uuid4())
    authority = service_keys.group_authority(organization_id)
    spec = spec_for(doc.kind)
    consumed = spec.extensions if spec is not None else frozenset()
    document = build_event(
        event_id=urn(event_id),
        kind=emit.kind,
        actor={"type": doc.actor_type, "id": urn(doc.actor)},
        cause={"type": "command", "id": urn(doc.action_id)},
        correlation_id=doc.correlation_id,
        occurred_at=now_text,
        payload=emit.payload,
        accepted_by={"type": "service", "id": urn(service_keys.principal_id(organization_id, "group-authority"))},
        key=authority,
        group_id=urn(position[0]) if position else None,
        sequence=position[1] if position else None,
        aggregate_revision=position[2] if position else None,
        command_hash=doc.signing_hash,
        work_item_id=urn(emit.work_item_id) if emit.work_item_id else None,
        conversation_id=urn(emit.conversation_id) if emit.conversation_id else None,
        # The Command's extensions travel on its Events unchanged, for every reader to relay (§18, §21),
        # except those its handler consumed (the offline binding of work.checkpoint).
        extensions={k: v for k, v in doc.extensions.items() if k not in consumed} or None,
    )
    return event_id, document


def _append(
    cur: Any,
    doc: CommandDoc,
    group: GroupHead,
    emits: list[Emit],
    now: datetime,
    org_documents: list[Any] | None = None,
    carried: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Append ``emits`` to ``group``: Group Events with the next sequences and the hash
    chain, Organization-scoped ones outside every sequence (collected in
    ``org_documents``); move the head. Returns the Group Events' documents."""
    sequence, prev, revision = group.last_sequence, group.head_hash, group.revision
    now_text = format_timestamp(now)
    organization_id = group.organization_id
    values: list[Any] = []
    documents: list[dict[str, Any]] = []
    org_values: list[Any] = []
    for emit in emits:
        if emit.kind in ORGANIZATION_SCOPED:
            event_id, document = _event_document(doc, emit, organization_id, now_text, None)
            if org_documents is not None:
                org_documents.append(document)
            org_values += [
                db_uuid(event_id), db_uuid(organization_id), emit.kind, doc.actor, db_uuid(doc.action_id),
                db_time(now), json.dumps(emit.payload, separators=(",", ":")), jcs.canonicalize(document).decode(),
            ]  # fmt: skip
            continue
        if not group.id:
            raise RuntimeError(f"{emit.kind} is a Group Event; {doc.kind} has no Group")
        sequence += 1
        position = (group.id, sequence, emit.aggregate.revision)
        event_id, document = _event_document(doc, emit, organization_id, now_text, position)
        row_prev = prev
        text = jcs.canonicalize(document)
        # The chain link: sha256(prev_hash || JCS(document)), as ``chain.event_hash`` computes it.
        prev = hashlib.sha256(prev.encode("ascii") + text).hexdigest()
        values += [
            db_uuid(event_id), db_uuid(group.id), sequence, emit.kind, emit.aggregate.kind, emit.aggregate.id,
            emit.aggregate.revision, doc.actor, db_uuid(doc.action_id), db_time(now),
            json.dumps(emit.payload, separators=(",", ":")), text.decode(), row_prev, prev,
        ]  # fmt: skip
        documents.append(document)
        if carried is not None:  # what the head notice carries: the stored text and its chain links
            carried.append(carried_event(sequence, text.decode(), row_prev, prev))
        # The Group revision moves only on Group-aggregate Events (Membership,
        # Mission status); the head always moves.
        if emit.aggregate.kind == "group" and emit.aggregate.id == group.id:
            revision = max(revision, emit.aggregate.revision)
    if org_values:
        count = len(org_values) // 8
        cur.execute(
            f"INSERT INTO {_T_ORG_EVENT} (event_id, organization_id, type, actor, action_id, occurred_at, body,"
            f" document) VALUES " + ",".join(["(%s,%s,%s,%s,%s,%s,%s,%s)"] * count),
            org_values,
        )
    if documents:
        cur.execute(
            f"INSERT INTO {_T_EVENT} (event_id, group_id, sequence, type, aggregate_kind, aggregate_id,"
            f" aggregate_revision, actor, action_id, occurred_at, body, document, prev_hash, hash) VALUES "
            + ",".join(["(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"] * len(documents)),
            values,
        )
        cur.execute(
            f"UPDATE {_T_GROUP} SET last_sequence = %s, head_hash = %s, revision = %s WHERE id = %s",
            [sequence, prev, revision, db_uuid(group.id)],
        )
        group.last_sequence, group.head_hash, group.revision = sequence, prev, revision
    return documents


_RECEIPT_INSERT = (
    f"INSERT INTO {_T_RECEIPT} (actor, action_id, content_hash, group_id, receipt, accepted_at)"
    f" VALUES (%s, %s, %s, %s, %s, %s)"
)


def _append_with_receipt(
    cur: Any, doc: CommandDoc, group: GroupHead, decision: Decision, now: datetime
) -> tuple[Receipt, list[dict[str, Any]]]:
    """The Command's own Events, the head and the receipt; the receipt and the
    Events as the head notice carries them (``delivery.carried_event``)."""
    org_documents: list[dict[str, Any]] = []
    carried: list[dict[str, Any]] = []
    documents = _append(cur, doc, group, decision.events, now, org_documents, carried)
    # Organization-scoped Events have no sequence (§15.2).
    refs: list[dict[str, Any]] = [{"eventId": d["eventId"], "kind": d["kind"]} for d in org_documents]
    refs += [{"eventId": d["eventId"], "sequence": d["sequence"], "kind": d["kind"]} for d in documents]
    receipt: Receipt = {
        "actionId": urn(doc.action_id),
        "events": refs,
        "aggregateRevision": decision.aggregate.revision,
        "replayed": False,
    }
    cur.execute(
        _RECEIPT_INSERT,
        [
            doc.actor, db_uuid(doc.action_id), doc.signing_hash, db_uuid(group.id) if group.id else None,
            json.dumps(receipt), db_time(now),
        ],
    )  # fmt: skip
    return receipt, carried


def system_action_id(*parts: object) -> str:
    """A deterministic action ID for a service Command, so a repeated service
    action (an expiry seen twice) is idempotent rather than duplicated."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "mwp:system:" + ":".join(str(p) for p in parts)))


AcceptFn = Callable[[Command], Receipt]
