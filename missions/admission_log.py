"""The Organization's Admission Log in the database (PROTOCOL §6.4, DESIGN §4).

``DjangoAdmissionLog`` implements ``mwportal.protocol.admission.AdmissionLog``
over ``AdmissionRecord``: a unique ``(organization, signing_hash)``, a unique
``admission_record_id``, the record's canonical bytes, and triggers that
refuse UPDATE and DELETE. Append-or-return-existing is one
``INSERT ... ON CONFLICT DO NOTHING`` followed by a read of the logical key,
on PostgreSQL and SQLite alike: whichever writer the unique index lets in
wins, every other writer reads the winner's row back, and no row is ever
replaced.

The log is built for the accepting service it has authenticated (the
deployment's job: in this portal the Group Authority's own service
Principal). It writes only records whose ``acceptedBy`` is that service and
only for services the Organization has registered a key for, and stores that
service beside each row so a later lookup reports who wrote it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from django.db import DatabaseError, IntegrityError, connection
from django.db.models import Field

from mwportal.protocol.admission import (
    Absent,
    Appended,
    AppendFailed,
    AppendFault,
    AppendResult,
    Existing,
    FirstAdmissionRecord,
    Found,
    LookupFailed,
    LookupFault,
    LookupResult,
)
from mwportal.protocol.registry import Principal

from .keyregistry import organization_uri
from .models import AdmissionRecord, Organization, SigningKey

_COLUMNS = (
    "organization",
    "signing_hash",
    "admission_record_id",
    "document_kind",
    "key_id",
    "principal_type",
    "principal_id",
    "record",
    "service_type",
    "service_id",
    "created_at",
)


def _field(name: str) -> Field[Any, Any]:
    return cast("Field[Any, Any]", AdmissionRecord._meta.get_field(name))


def _insert_sql() -> str:
    fields = [_field(name) for name in _COLUMNS]
    columns = ", ".join(connection.ops.quote_name(f.attname) for f in fields)  # no db_column is set
    placeholders = ", ".join(["%s"] * len(fields))
    # No conflict target: a clash on either unique index (the logical key or
    # the record ID) inserts nothing, and the read that follows tells which.
    keys = connection.ops.quote_name(SigningKey._meta.db_table)
    return (
        f"INSERT INTO {connection.ops.quote_name(AdmissionRecord._meta.db_table)} ({columns}) "
        f"SELECT {placeholders} WHERE EXISTS (SELECT 1 FROM {keys} WHERE organization_id = %s"
        " AND principal_type = 'service' AND principal_id = %s) ON CONFLICT DO NOTHING RETURNING 1"
    )


_LOOKUP_SQL = (
    f"SELECT record, service_type, service_id FROM {AdmissionRecord._meta.db_table}"
    " WHERE organization_id = %s AND signing_hash = %s"
)


def _org_param(organization: Organization) -> Any:
    return _field("organization").get_db_prep_save(organization.pk, connection)


def _params(values: dict[str, Any]) -> list[Any]:
    return [_field(name).get_db_prep_save(values[name], connection) for name in _COLUMNS]


class DjangoAdmissionLog:
    """The Admission Log of one Organization, writing as one authenticated service."""

    def __init__(self, organization: Organization, service: Principal) -> None:
        self.organization = organization
        self.organization_id = organization_uri(organization)
        self.service = service

    def _rows(self, signing_hash: str) -> Any:
        return AdmissionRecord.objects.filter(organization=self.organization, signing_hash=signing_hash)

    def lookup(self, organization_id: str, signing_hash: str) -> LookupResult:
        """Authoritative for this Organization only; another's key is indeterminate here."""
        if organization_id != self.organization_id:
            return LookupFailed(LookupFault.INDETERMINATE)
        try:
            with connection.cursor() as cursor:
                cursor.execute(_LOOKUP_SQL, [_org_param(self.organization), signing_hash])
                row = cursor.fetchone()
        except DatabaseError:
            return LookupFailed(LookupFault.UNAVAILABLE)
        if row is None:
            return Absent()
        record, service_type, service_id = row
        return Found(bytes(record), Principal(type=service_type, id=service_id))

    def _authorized(self, candidate: FirstAdmissionRecord) -> bool:
        """Only this log's own service writes, only into this Organization, and
        only if the Organization registered a key for that service."""
        if candidate.organization_id != self.organization_id or candidate.accepted_by != self.service:
            return False
        return (
            self.service.type == "service"
            and SigningKey.objects.filter(
                organization=self.organization, principal_type="service", principal_id=self.service.id
            ).exists()
        )

    def append_or_return_existing(
        self, candidate: FirstAdmissionRecord, *, now: datetime | None = None
    ) -> AppendResult:
        """§6.4's one atomic operation on ``(organizationId, signingHash)``.

        ``Appended`` when this call's row went in; ``Existing`` with the stored
        row when one was already there under the same logical key and agrees
        on document kind, key ID and Principal; ``CONFLICT`` when it does not,
        or when the candidate's record ID is taken under another logical key.
        ``ON CONFLICT DO NOTHING`` never aborts, so a conflict leaves the
        caller's transaction usable.
        """
        if candidate.organization_id != self.organization_id or candidate.accepted_by != self.service:
            return AppendFailed(AppendFault.UNAUTHENTICATED)
        record_bytes = candidate.canonical_bytes()
        try:
            values = {
                "organization": self.organization.pk,
                "signing_hash": candidate.signing_hash,
                "admission_record_id": candidate.admission_record_id,
                "document_kind": candidate.document_kind,
                "key_id": candidate.key_id,
                "principal_type": candidate.principal.type,
                "principal_id": candidate.principal.id,
                "record": record_bytes,
                "service_type": self.service.type,
                "service_id": self.service.id,
                "created_at": now or datetime.now(UTC),
            }
            with connection.cursor() as cursor:
                # One statement on the usual path: the row goes in only if the
                # Organization registered a key for this service (no savepoint
                # needed: ON CONFLICT DO NOTHING never aborts the transaction).
                cursor.execute(_insert_sql(), [*_params(values), _org_param(self.organization), self.service.id])
                if cursor.fetchone() is not None:
                    return Appended(record_bytes, self.service)
            if not self._authorized(candidate):
                return AppendFailed(AppendFault.UNAUTHENTICATED)
            # Someone else's row is there (or the record ID is taken): read the logical key.
            row = (
                self._rows(candidate.signing_hash)
                .values_list(
                    "record",
                    "document_kind",
                    "key_id",
                    "principal_type",
                    "principal_id",
                    "service_type",
                    "service_id",
                )
                .first()
            )
        except IntegrityError:
            return AppendFailed(AppendFault.COMMIT_FAILED)
        except DatabaseError:
            return AppendFailed(AppendFault.INDETERMINATE)
        if row is None:
            return AppendFailed(AppendFault.CONFLICT)
        record, kind, key_id, principal_type, principal_id, service_type, service_id = row
        if (kind, key_id, Principal(type=principal_type, id=principal_id)) != (
            candidate.document_kind,
            candidate.key_id,
            candidate.principal,
        ):
            return AppendFailed(AppendFault.CONFLICT)
        writer = Principal(type=service_type, id=service_id)
        return Existing(bytes(record), writer)
