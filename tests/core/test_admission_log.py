"""The Admission Log in the database and first admission end to end (PROTOCOL §6.4).

``DjangoAdmissionLog``'s one-statement append-or-return-existing, its typed
refusals, and ``admit_first``/``replay_historical`` over the Django Registry
and log on a Command signed here with the kernel's signer. The race runs real
threads on PostgreSQL.
"""

from __future__ import annotations

import itertools
import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import transaction

from missions.admission_log import DjangoAdmissionLog
from missions.keyregistry import DjangoRegistry, organization_uri, record_validity, register_key
from missions.models import AdmissionRecord, Organization, SigningKey
from mwportal.protocol import ed25519
from mwportal.protocol.admission import (
    Absent,
    AdmissionFailed,
    Appended,
    AppendFailed,
    AppendFault,
    Existing,
    FirstAdmissionRecord,
    Found,
    LookupFailed,
    LookupFault,
    Outcome,
    Reason,
    TrustedContext,
    admit_first,
    replay_historical,
)
from mwportal.protocol.registry import Principal
from mwportal.protocol.values import parse_timestamp
from mwportal.protocol.verification import Verified, sign_document, verify_document
from tests.conftest import ON_POSTGRES
from tests.core.test_races import run_threads

NOW = datetime(2026, 7, 15, tzinfo=UTC)
AGENT = Principal("agent", "urn:uuid:0a000000-0000-4000-8000-000000000001")
AUTHORITY = Principal("service", "urn:uuid:05000000-0000-4000-8000-000000000001")
INTRUDER = Principal("service", "urn:uuid:05000000-0000-4000-8000-0000000000ee")
AGENT_SEED, AUTHORITY_SEED = bytes([3]) * 32, bytes([5]) * 32
AGENT_KEY = "urn:uuid:0c000000-0000-4000-8000-00000000000a"
VALID_FROM = "2026-07-15T00:00:00Z"

_orgs = itertools.count()


def make_org() -> Organization:
    org = Organization.objects.create(slug=f"adm-{next(_orgs)}", name="Org", created_at=NOW)
    register_key(
        org, key_id=AGENT_KEY, principal=AGENT, public_key=ed25519.public_key(AGENT_SEED), valid_from=VALID_FROM
    )
    register_key(
        org,
        key_id="urn:uuid:0c000000-0000-4000-8000-00000000000b",
        principal=AUTHORITY,
        public_key=ed25519.public_key(AUTHORITY_SEED),
        valid_from=VALID_FROM,
    )
    return org


@pytest.fixture
def org(db: None) -> Organization:
    return make_org()


def command(text: str = "hello") -> bytes:
    doc = {
        "protocolVersion": "0.1",
        "actionId": f"urn:uuid:{uuid.uuid4()}",
        "actor": AGENT.as_json(),
        "sessionEpoch": 1,
        "membershipEpoch": 1,
        "groupId": "urn:uuid:06000000-0000-4000-8000-000000000001",
        "kind": "message.post",
        "correlationId": "urn:uuid:cc000000-0000-4000-8000-000000000001",
        "issuedAt": "2026-07-15T00:00:00Z",
        "payload": {"text": text},
    }
    return json.dumps(sign_document(doc, key_id=AGENT_KEY, seed=AGENT_SEED, profile="command")).encode()


def verified(org: Organization, data: bytes) -> Verified:
    return verify_document(data, "command", DjangoRegistry(org))


def context(at: str = "2026-07-15T00:05:00Z", record_id: str | None = None) -> TrustedContext:
    return TrustedContext(record_id or f"urn:uuid:{uuid.uuid4()}", at, AUTHORITY)


def candidate(v: Verified, **changes: Any) -> FirstAdmissionRecord:
    record = FirstAdmissionRecord(
        protocol_version="0.1",
        admission_record_id=f"urn:uuid:{uuid.uuid4()}",
        organization_id=v.organization_id,
        document_kind=v.profile,
        signing_hash=v.signing_hash,
        key_id=v.key_id,
        principal=v.principal,
        trusted_accepted_at=parse_timestamp("2026-07-15T00:05:00Z"),
        accepted_by=AUTHORITY,
    )
    return replace(record, **changes)


# -- append-or-return-existing ---------------------------------------------------------


def test_it_appends_once_and_then_returns_the_existing_record_PROTOCOL_6_4(org: Organization) -> None:
    v, log = verified(org, command()), DjangoAdmissionLog(org, AUTHORITY)
    assert log.lookup(v.organization_id, v.signing_hash) == Absent()
    first = candidate(v)
    appended = log.append_or_return_existing(first)
    assert appended == Appended(first.canonical_bytes(), AUTHORITY)
    second = log.append_or_return_existing(candidate(v))  # another record ID, the same logical key
    assert second == Existing(first.canonical_bytes(), AUTHORITY)
    assert log.lookup(v.organization_id, v.signing_hash) == Found(first.canonical_bytes(), AUTHORITY)
    row = AdmissionRecord.objects.get(organization=org)
    assert (bytes(row.record), row.admission_record_id) == (first.canonical_bytes(), first.admission_record_id)


@pytest.mark.parametrize(
    "changes",
    [
        {"document_kind": "approval"},
        {"key_id": "urn:uuid:0c000000-0000-4000-8000-00000000000b"},
        {"principal": AUTHORITY},
    ],
)
def test_a_record_under_the_same_key_with_other_bindings_is_a_conflict_PROTOCOL_6_4(
    org: Organization, changes: dict[str, Any]
) -> None:
    v, log = verified(org, command()), DjangoAdmissionLog(org, AUTHORITY)
    log.append_or_return_existing(candidate(v))
    assert log.append_or_return_existing(candidate(v, **changes)) == AppendFailed(AppendFault.CONFLICT)
    assert AdmissionRecord.objects.filter(organization=org).count() == 1


def test_one_record_id_never_names_two_logical_keys_PROTOCOL_6_4(org: Organization) -> None:
    log = DjangoAdmissionLog(org, AUTHORITY)
    a, b = verified(org, command("a")), verified(org, command("b"))
    taken = candidate(a)
    log.append_or_return_existing(taken)
    reused = candidate(b, admission_record_id=taken.admission_record_id)
    assert log.append_or_return_existing(reused) == AppendFailed(AppendFault.CONFLICT)
    assert log.lookup(b.organization_id, b.signing_hash) == Absent()


def test_only_the_authenticated_registered_service_writes_its_own_organization(org: Organization) -> None:
    v = verified(org, command())
    log = DjangoAdmissionLog(org, AUTHORITY)
    refusals = [
        log.append_or_return_existing(candidate(v, accepted_by=INTRUDER)),  # not the log's service
        DjangoAdmissionLog(org, INTRUDER).append_or_return_existing(candidate(v, accepted_by=INTRUDER)),  # no key
        DjangoAdmissionLog(org, AGENT).append_or_return_existing(candidate(v, accepted_by=AGENT)),  # not a service
        log.append_or_return_existing(candidate(v, organization_id="urn:uuid:0f000000-0000-4000-8000-0000000000ff")),
    ]
    assert refusals == [AppendFailed(AppendFault.UNAUTHENTICATED)] * 4
    assert not AdmissionRecord.objects.exists()
    assert log.lookup("urn:uuid:0f000000-0000-4000-8000-0000000000ff", v.signing_hash) == LookupFailed(
        LookupFault.INDETERMINATE
    )


def test_a_conflict_leaves_the_callers_transaction_usable(org: Organization) -> None:
    v, log = verified(org, command()), DjangoAdmissionLog(org, AUTHORITY)
    with transaction.atomic():
        log.append_or_return_existing(candidate(v))
        assert log.append_or_return_existing(candidate(v, document_kind="approval")) == AppendFailed(
            AppendFault.CONFLICT
        )
        assert AdmissionRecord.objects.filter(organization=org).count() == 1


def test_the_log_is_scoped_to_its_organization(org: Organization) -> None:
    other = make_org()
    data = command()
    mine, theirs = verified(org, data), verified(other, data)
    assert mine.signing_hash == theirs.signing_hash and mine.organization_id != theirs.organization_id
    DjangoAdmissionLog(org, AUTHORITY).append_or_return_existing(candidate(mine))
    assert isinstance(DjangoAdmissionLog(other, AUTHORITY).append_or_return_existing(candidate(theirs)), Appended)


# -- first admission and replay end to end -------------------------------------------------


def test_first_admission_end_to_end_then_idempotent_retry_PROTOCOL_6_4(org: Organization) -> None:
    data = command()
    log = DjangoAdmissionLog(org, AUTHORITY)
    admitted = admit_first(verified(org, data), log, context)
    assert admitted.outcome == Outcome.COMMITTED
    assert admitted.record.organization_id == organization_uri(org)
    assert admitted.record.principal == AGENT and admitted.service == AUTHORITY

    def no_context() -> TrustedContext:
        raise AssertionError("a found record must not ask for trusted context")

    again = admit_first(verified(org, data), log, no_context)
    assert (again.outcome, again.record) == (Outcome.FOUND, admitted.record)
    assert AdmissionRecord.objects.filter(organization=org).count() == 1


def test_historical_replay_survives_a_later_revocation_end_to_end_PROTOCOL_6_4(org: Organization) -> None:
    data = command()
    log = DjangoAdmissionLog(org, AUTHORITY)
    admit_first(verified(org, data), log, lambda: context("2026-07-15T00:05:00Z"))
    record_validity(SigningKey.objects.get(organization=org, key_id=AGENT_KEY), revoked_at="2026-07-15T01:00:00Z")
    assert replay_historical(verified(org, data), log).outcome == Outcome.FOUND
    # Moved earlier, before trustedAcceptedAt (but after the protected time): no longer anchored.
    record_validity(SigningKey.objects.get(organization=org, key_id=AGENT_KEY), revoked_at="2026-07-15T00:04:00Z")
    with pytest.raises(AdmissionFailed) as info:
        replay_historical(verified(org, data), log)
    assert info.value.reason == Reason.TRUSTED_TIME_OUTSIDE_KEY_INTERVAL


def test_replay_without_a_record_fails_and_appends_nothing_PROTOCOL_6_4(org: Organization) -> None:
    with pytest.raises(AdmissionFailed) as info:
        replay_historical(verified(org, command()), DjangoAdmissionLog(org, AUTHORITY))
    assert info.value.reason == Reason.RECORD_MISSING
    assert not AdmissionRecord.objects.exists()


def test_first_admission_by_an_unregistered_service_fails_closed(org: Organization) -> None:
    with pytest.raises(AdmissionFailed) as info:
        admit_first(
            verified(org, command()),
            DjangoAdmissionLog(org, INTRUDER),
            lambda: TrustedContext(f"urn:uuid:{uuid.uuid4()}", "2026-07-15T00:05:00Z", INTRUDER),
        )
    assert info.value.reason == Reason.LOG_AUTHENTICATION_FAILED
    assert not AdmissionRecord.objects.exists()


# -- the race (run_threads: tests/core/test_races.py) -----------------------------------


@pytest.mark.postgres
@pytest.mark.skipif(
    not ON_POSTGRES, reason="the race needs PostgreSQL's concurrent writers (MWP_DATABASE_URL=postgres://...)"
)
@pytest.mark.django_db(transaction=True)
def test_eight_threads_admitting_one_document_leave_exactly_one_record_PROTOCOL_6_4() -> None:
    org = make_org()
    data = command()

    def work(i: int) -> Any:
        # Each thread verifies and admits on its own connection, with its own record ID.
        return admit_first(
            verified(org, data), DjangoAdmissionLog(org, AUTHORITY), lambda: context(record_id=f"urn:race:{i}")
        )

    results = run_threads(8, work)
    assert not [r for r in results if isinstance(r, BaseException)], results
    outcomes = [r.outcome for r in results]
    # One writer commits; the others either lose the insert (existing) or look up after it committed (found).
    assert outcomes.count(Outcome.COMMITTED) == 1 and set(outcomes) <= {
        Outcome.COMMITTED,
        Outcome.EXISTING,
        Outcome.FOUND,
    }
    assert len({r.record_bytes for r in results}) == 1
    rows = list(AdmissionRecord.objects.filter(organization=org))
    assert len(rows) == 1 and bytes(rows[0].record) == results[0].record_bytes


@pytest.mark.postgres
@pytest.mark.skipif(
    not ON_POSTGRES, reason="the race needs PostgreSQL's concurrent writers (MWP_DATABASE_URL=postgres://...)"
)
@pytest.mark.django_db(transaction=True)
def test_eight_threads_appending_one_logical_key_get_the_same_record_PROTOCOL_6_4() -> None:
    org = make_org()
    v = verified(org, command())
    candidates = [candidate(v, admission_record_id=f"urn:race:{i}") for i in range(8)]

    def work(i: int) -> Any:
        return DjangoAdmissionLog(org, AUTHORITY).append_or_return_existing(candidates[i])

    results = run_threads(8, work)
    appended = [r for r in results if isinstance(r, Appended)]
    assert len(appended) == 1 and all(isinstance(r, (Appended, Existing)) for r in results), results
    assert {r.record for r in results} == {appended[0].record}
    assert AdmissionRecord.objects.filter(organization=org).count() == 1
