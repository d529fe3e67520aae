"""The Organization's authoritative Policy Log (PROTOCOL §6.4, §20; DESIGN §1, §3).

Every policy decision goes here: a cooperation limit hit (``limit_hit``), a soft
threshold that notified the Coordinator (``soft_threshold``), a Cooperation
Override Grant's issuance and its consumption (the latter linked to the accepted
Event), a redaction, a reference to a protected diagnostic, the final snapshot
of an archived Group. Entries are appended, never changed: a database trigger
refuses UPDATE and DELETE. Only the Organization's auditors read it
(``readable_by``); everyone else gets ``AUTH_FORBIDDEN``.

Other apps call ``record(...)`` inside the Command's transaction (the entry
commits or rolls back with it), or ``record_after_refusal`` through
``accept()`` for a refused Command's decision (a ``ProtocolError`` carrying
``policy_records``), which must outlive the rollback.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mwportal.protocol import ProtocolError
from mwportal.protocol.command import format_timestamp
from mwportal.protocol.ids import urn

from .immutability import append_only_drop_sql, append_only_install_sql
from .models import Agent, PolicyLogEntry

KINDS = frozenset(
    {
        "limit_hit",
        "soft_threshold",
        "override_issued",
        "override_consumed",
        "redaction",
        "protected_diagnostic",
        "final_snapshot",
        "policy_set",
    }
)

TABLE = "missions_policylogentry"


@dataclass(frozen=True, slots=True)
class Entry:
    """An entry to append: what ``record`` takes, kept by a refusal until after its rollback."""

    organization_id: str
    kind: str
    group_id: str | None = None
    mission_id: str | None = None
    policy_name: str = ""
    actor: str = ""
    action_id: str | None = None
    command_kind: str = ""
    event_id: str | None = None
    reference: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


class PolicyRefusal(ProtocolError):
    """A refusal that is a policy decision: ``accept()`` appends its Policy Log
    entries after the refused transaction rolled back (``record_after_refusal``)."""

    def __init__(self, error: ProtocolError, records: list[Entry]):
        super().__init__(
            error.code,
            error.message,
            details=error.details,
            retry_after_ms=error.retry_after_ms,
            related_action_id=error.related_action_id,
        )
        self.policy_records = list(records)


def record(entry: Entry, *, now: datetime) -> PolicyLogEntry:
    """Append ``entry`` to the Policy Log in the current transaction; the stored row."""
    if entry.kind not in KINDS:
        raise ValueError(f"unknown Policy Log kind {entry.kind!r}")
    return PolicyLogEntry.objects.create(
        organization_id=entry.organization_id,
        kind=entry.kind,
        group_id=entry.group_id,
        mission_id=entry.mission_id,
        policy_name=entry.policy_name,
        actor=entry.actor,
        action_id=entry.action_id,
        command_kind=entry.command_kind,
        event_id=entry.event_id,
        reference=entry.reference,
        detail=entry.detail,
        recorded_at=now,
    )


def record_after_refusal(error: BaseException, *, now: datetime) -> None:
    """Append the Policy Log entries a refused Command's error carries (its own transaction)."""
    from django.db import transaction

    entries: list[Entry] = list(getattr(error, "policy_records", ()) or ())
    if not entries:
        return
    with transaction.atomic():
        for entry in entries:
            record(entry, now=now)


def record_diagnostic(
    organization: str | None, data: bytes, *, profile: str, stage: str, reason: str, now: datetime
) -> None:
    """§6.4: a Group-scoped Command that failed verification is referenceable from the Policy
    Log by auditors, with its first failing stage and reason, which the caller never sees.

    ``organization`` is the Organization whose Registry resolved the key (None: no
    Organization's, so nothing to file it under); the Group is the one the document
    names, if it is that Organization's."""
    if organization is None:
        return
    group_id = _named_group(data, organization)
    if group_id is None:
        return
    from django.db import transaction

    from .models import Group

    detail = {"profile": profile, "stage": stage, "reason": reason}
    with transaction.atomic():
        mission_id = Group.objects.filter(id=group_id).values_list("mission__id", flat=True).first()
        record(
            Entry(
                organization_id=organization, kind="protected_diagnostic", group_id=group_id,
                mission_id=str(mission_id) if mission_id else None, reference=urn(str(uuid.uuid4())), detail=detail,
            ),
            now=now,
        )  # fmt: skip


def _named_group(data: bytes, organization: str) -> str | None:
    """The Group a (possibly malformed) Command document names, if it is ``organization``'s."""
    import json

    from .models import Group

    try:
        named = json.loads(data).get("groupId")
        group_id = str(uuid.UUID(named.removeprefix("urn:uuid:")))
    except (ValueError, AttributeError, TypeError):
        return None
    return group_id if Group.objects.filter(id=group_id, organization_id=organization).exists() else None


def readable_by(principal: Agent) -> bool:
    """Only an Organization auditor reads the Policy Log (DESIGN §1)."""
    return "auditor" in (principal.org_roles or [])


def document(row: PolicyLogEntry) -> dict[str, Any]:
    """An entry as the REST binding serves it."""
    body: dict[str, Any] = {
        "entryId": urn(str(row.entry_id)),
        "position": row.pk,
        "kind": row.kind,
        "recordedAt": format_timestamp(row.recorded_at),
        "detail": row.detail,
    }
    optional = {
        "groupId": urn(str(row.group_id)) if row.group_id else None,
        "missionId": urn(str(row.mission_id)) if row.mission_id else None,
        "policyName": row.policy_name or None,
        "actor": urn(row.actor) if row.actor else None,
        "actionId": urn(str(row.action_id)) if row.action_id else None,
        "commandKind": row.command_kind or None,
        "eventId": urn(str(row.event_id)) if row.event_id else None,
        "reference": row.reference or None,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


def entries(organization_id: str | uuid.UUID, *, after: int = 0, limit: int = 200) -> list[dict[str, Any]]:
    rows = PolicyLogEntry.objects.filter(organization_id=organization_id, pk__gt=after).order_by("pk")[:limit]
    return [document(row) for row in rows]


# -- append-only ------------------------------------------------------------------------------

_FUNCTION = "mwp_refuse_policy_log_change"


def install_sql(vendor: str) -> list[str]:
    """Triggers refusing UPDATE and DELETE on the Policy Log."""
    return append_only_install_sql(vendor, (TABLE,), _FUNCTION)


def drop_sql(vendor: str) -> list[str]:
    return append_only_drop_sql(vendor, (TABLE,), _FUNCTION)


def install(schema_editor: Any) -> None:
    for sql in install_sql(schema_editor.connection.vendor):
        schema_editor.execute(sql, None)


def drop(schema_editor: Any) -> None:
    for sql in drop_sql(schema_editor.connection.vendor):
        schema_editor.execute(sql, None)
