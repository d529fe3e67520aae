"""The Registry's signing keys in the database (PROTOCOL §6.4, DESIGN §4).

Through ``register_key``/``record_validity`` (the kernel's checks, then the
constraints) and behind their back (raw ORM and SQL), which the database
itself must refuse. Runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.django import TestCase

from missions.keyregistry import APPEND_ONLY_TABLES, DjangoRegistry, organization_uri, record_validity, register_key
from missions.models import AdmissionRecord, Organization, SigningKey, SigningKeyValidity
from mwportal.protocol import ed25519
from mwportal.protocol.registry import KeyResolutionError, Principal, RegistrationError
from mwportal.protocol.values import b64url_encode, parse_timestamp

NOW = datetime(2026, 7, 1, tzinfo=UTC)
ALICE = Principal("agent", "urn:uuid:00000000-0000-4000-8000-00000000a11c")
BOB = Principal("human", "urn:uuid:00000000-0000-4000-8000-000000000b0b")
SERVICE = Principal("service", "urn:uuid:00000000-0000-4000-8000-0000000005e1")
START = "2026-07-01T00:00:00Z"

_orgs = itertools.count()


def make_org(slug: str | None = None) -> Organization:
    return Organization.objects.create(slug=slug or f"org-{next(_orgs)}", name="Org", created_at=NOW)


def key(n: int) -> bytes:
    return ed25519.public_key(bytes([n]) * 32)


def register(org: Organization, key_id: str, principal: Principal, public_key: bytes, **kw: Any) -> SigningKey:
    return register_key(
        org,
        key_id=key_id,
        principal=principal,
        public_key=public_key,
        valid_from=str(kw.pop("valid_from", START)),
        **kw,
    )


@pytest.fixture
def org(db: None) -> Organization:
    return make_org("acme")


# -- registration -------------------------------------------------------------------


def test_it_registers_a_binding_that_resolves_with_its_interval(org: Organization) -> None:
    register(org, "urn:k:1", ALICE, key(1), valid_until="2026-08-01T00:00:00Z")
    binding = DjangoRegistry(org).resolve("urn:k:1")
    assert DjangoRegistry(org).organization_id == organization_uri(org) == f"urn:uuid:{org.pk}"
    assert (binding.key_id, binding.principal, binding.algorithm, binding.public_key) == (
        "urn:k:1",
        ALICE,
        "Ed25519",
        key(1),
    )
    assert binding.valid_from.text == START
    assert binding.valid_until is not None and binding.valid_until.text == "2026-08-01T00:00:00Z"
    assert binding.revoked_at is None


def test_identical_redeclaration_is_the_same_logical_binding_PROTOCOL_6_4(org: Organization) -> None:
    first = register(org, "urn:k:1", ALICE, key(1), valid_from="2026-07-15T08:00:00+08:00")
    again = register(org, "urn:k:1", ALICE, key(1), valid_from="2026-07-15T00:00:00Z")  # the same instant
    assert again.pk == first.pk
    assert SigningKey.objects.filter(organization=org).count() == 1
    # validFrom keeps the first registered spelling.
    assert DjangoRegistry(org).resolve("urn:k:1").valid_from.text == "2026-07-15T08:00:00+08:00"


@pytest.mark.parametrize(
    ("principal", "public_key", "valid_from"),
    [
        (ALICE, 2, START),  # another key under the key ID
        (BOB, 1, START),  # another Principal under the key ID
        (ALICE, 1, "2026-07-02T00:00:00Z"),  # validFrom is immutable
    ],
)
def test_key_id_is_never_reused_PROTOCOL_6_4(
    org: Organization, principal: Principal, public_key: int, valid_from: str
) -> None:
    register(org, "urn:k:1", ALICE, key(1))
    with pytest.raises(RegistrationError) as info:
        register(org, "urn:k:1", principal, key(public_key), valid_from=valid_from)
    assert info.value.reason == "key-id-rebinding"
    assert SigningKey.objects.filter(organization=org).count() == 1


def test_same_principal_and_key_under_another_key_id_is_an_alias_PROTOCOL_6_4(org: Organization) -> None:
    register(org, "urn:k:1", ALICE, key(1))
    with pytest.raises(RegistrationError) as info:
        register(org, "urn:k:2", ALICE, key(1))
    assert info.value.reason == "key-id-alias"


def test_same_key_under_another_principal_is_reuse_PROTOCOL_6_4(org: Organization) -> None:
    register(org, "urn:k:1", ALICE, key(1))
    with pytest.raises(RegistrationError) as info:
        register(org, "urn:k:2", BOB, key(1))
    assert info.value.reason == "public-key-reuse"
    assert SigningKey.objects.filter(organization=org).count() == 1


def test_invariants_are_per_organization(org: Organization) -> None:
    other = make_org()
    register(org, "urn:k:1", ALICE, key(1))
    register(other, "urn:k:1", ALICE, key(1))
    assert DjangoRegistry(other).resolve("urn:k:1").public_key == key(1)
    with pytest.raises(KeyResolutionError):
        DjangoRegistry(make_org()).resolve("urn:k:1")


# Rows of §6.4: what must be refused before any uniqueness check, and so before any row exists.
SMALL_ORDER = bytes.fromhex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa")  # order 8
IDENTITY = (1).to_bytes(32, "little")
NONCANONICAL_Y = (2**255 - 19 + 1).to_bytes(32, "little")  # y = p + 1, i.e. y = 1 spelled non-canonically


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"public_key": IDENTITY}, "public-key"),
        ({"public_key": SMALL_ORDER}, "public-key"),
        ({"public_key": NONCANONICAL_Y}, "public-key"),
        ({"public_key": key(1)[:31]}, "public-key-wrong-length"),
        ({"key_id": "k-1"}, "key-id-not-absolute-uri"),
        ({"principal": Principal("robot", "urn:r:1")}, "principal-type-unknown"),
        ({"principal": Principal("agent", "alice")}, "principal-id-not-absolute-uri"),
        ({"algorithm": "Ed448"}, "algorithm-unsupported"),
        ({"valid_from": "2026-07-01 00:00:00"}, "valid-from-malformed"),
    ],
)
def test_kernel_checks_run_before_insert_PROTOCOL_6_4(org: Organization, kw: dict[str, Any], reason: str) -> None:
    args: dict[str, Any] = {
        "key_id": "urn:k:1",
        "principal": ALICE,
        "public_key": key(1),
        "valid_from": START,
    } | kw
    with pytest.raises(RegistrationError) as info:
        register_key(org, **args)
    assert info.value.reason.startswith(reason)
    assert not SigningKey.objects.exists()


# -- validity history -----------------------------------------------------------------


def effective(org: Organization, key_id: str = "urn:k:1") -> tuple[str | None, str | None]:
    b = DjangoRegistry(org).resolve(key_id)
    return (
        None if b.valid_until is None else b.valid_until.text,
        None if b.revoked_at is None else b.revoked_at.text,
    )


def test_boundaries_may_be_added_and_moved_earlier_PROTOCOL_6_4(org: Organization) -> None:
    k = register(org, "urn:k:1", ALICE, key(1))
    record_validity(k, valid_until="2026-09-01T00:00:00Z")
    record_validity(k, valid_until="2026-08-01T00:00:00Z")
    record_validity(k, revoked_at="2026-07-20T00:00:00Z")
    record_validity(k, revoked_at="2026-07-10T00:00:00+02:00")
    assert effective(org) == ("2026-08-01T00:00:00Z", "2026-07-10T00:00:00+02:00")
    assert list(SigningKeyValidity.objects.filter(key=k).order_by("sequence").values_list("sequence", flat=True)) == [
        1,
        2,
        3,
        4,
    ]


@pytest.mark.parametrize(
    ("field", "earlier", "later", "reason"),
    [
        ("valid_until", "2026-08-01T00:00:00Z", "2026-08-01T00:00:00.000001Z", "valid-until-moved-later"),
        # Compared as instants: 02:00+02:00 is 00:00Z, so 00:30Z is later.
        ("revoked_at", "2026-08-01T02:00:00+02:00", "2026-08-01T00:30:00Z", "revoked-at-moved-later"),
    ],
)
def test_a_boundary_is_never_moved_later_PROTOCOL_6_4(
    org: Organization, field: str, earlier: str, later: str, reason: str
) -> None:
    k = register(org, "urn:k:1", ALICE, key(1))
    record_validity(k, **dict[str, Any]({field: earlier}))
    with pytest.raises(RegistrationError) as info:
        record_validity(k, **dict[str, Any]({field: later}))
    assert info.value.reason == reason
    assert SigningKeyValidity.objects.filter(key=k).count() == 1


def test_a_status_record_must_set_a_boundary(org: Organization) -> None:
    k = register(org, "urn:k:1", ALICE, key(1))
    with pytest.raises(RegistrationError):
        record_validity(k)
    with pytest.raises(RegistrationError) as info:
        record_validity(k, valid_until="tomorrow")
    assert info.value.reason == "valid-until-malformed"


def test_a_later_boundary_inserted_behind_the_back_cannot_extend_validity(org: Organization) -> None:
    """The effective value is the earliest in history (§6.4), so even a raw row only shortens."""
    k = register(org, "urn:k:1", ALICE, key(1), valid_until="2026-08-01T00:00:00Z")
    SigningKeyValidity.objects.create(key=k, sequence=2, valid_until="2027-01-01T00:00:00Z", recorded_at=NOW)
    assert effective(org) == ("2026-08-01T00:00:00Z", None)


# -- resolution ------------------------------------------------------------------------


def test_unknown_key_is_unknown(org: Organization) -> None:
    with pytest.raises(KeyResolutionError) as info:
        DjangoRegistry(org).resolve("urn:k:nope")
    assert info.value.reason == "unknown-key"


@pytest.mark.parametrize(
    ("column", "value"),
    [("valid_from", "yesterday"), ("public_key", "A" * 42 + "B")],  # noncanonical base64url: nonzero pad bits
)
def test_a_row_written_behind_the_back_fails_closed(org: Organization, column: str, value: str) -> None:
    row = {"public_key": b64url_encode(key(1)), "valid_from": START} | {column: value}
    SigningKey.objects.create(
        organization=org,
        key_id="urn:k:1",
        principal_type="agent",
        principal_id=ALICE.id,
        algorithm="Ed25519",
        registered_at=NOW,
        **row,
    )
    with pytest.raises(KeyResolutionError) as info:
        DjangoRegistry(org).resolve("urn:k:1")
    assert info.value.reason == "evidence-invalid"


def test_a_malformed_history_record_fails_closed(org: Organization) -> None:
    k = register(org, "urn:k:1", ALICE, key(1))
    SigningKeyValidity.objects.create(key=k, sequence=1, revoked_at="2026-13-01T00:00:00Z", recorded_at=NOW)
    with pytest.raises(KeyResolutionError) as info:
        DjangoRegistry(org).resolve("urn:k:1")
    assert info.value.reason == "evidence-invalid"


@pytest.mark.parametrize("size", [1, 60])
def test_resolution_reads_one_key_and_its_history_whatever_the_registry_size(
    org: Organization, size: int, django_assert_num_queries: object
) -> None:
    for n in range(size):
        k = register(org, f"urn:k:{n}", Principal("agent", f"urn:a:{n}"), key(n + 1))
        record_validity(k, valid_until="2026-09-01T00:00:00Z")
    registry = DjangoRegistry(org)
    with django_assert_num_queries(2):  # type: ignore[operator]
        binding = registry.resolve(f"urn:k:{size - 1}")
    assert binding.valid_until == parse_timestamp("2026-09-01T00:00:00Z")


# -- the database refuses what the functions would refuse --------------------------------


def test_database_refuses_a_reused_key_id_an_alias_and_a_tuple_alias(org: Organization) -> None:
    register(org, "urn:k:1", ALICE, key(1))
    base = {
        "organization": org,
        "principal_type": "agent",
        "principal_id": ALICE.id,
        "algorithm": "Ed25519",
        "valid_from": START,
        "registered_at": NOW,
    }
    for row in (
        {"key_id": "urn:k:1", "public_key": b64url_encode(key(2))},  # key ID reuse
        {"key_id": "urn:k:2", "public_key": b64url_encode(key(1))},  # same Principal, key: alias
        {"key_id": "urn:k:3", "public_key": b64url_encode(key(1)), "principal_id": BOB.id},  # reuse
    ):
        with pytest.raises(IntegrityError), transaction.atomic():
            SigningKey.objects.create(**(base | row))
    assert SigningKey.objects.count() == 1


@pytest.mark.parametrize(
    "row",
    [
        {"algorithm": "RSA"},
        {"principal_type": "robot"},
        {"public_key": b64url_encode(key(2))[:42]},
    ],
)
def test_database_refuses_an_impossible_binding(org: Organization, row: dict[str, str]) -> None:
    values = {
        "organization": org,
        "key_id": "urn:k:9",
        "principal_type": "agent",
        "principal_id": ALICE.id,
        "algorithm": "Ed25519",
        "public_key": b64url_encode(key(2)),
        "valid_from": START,
        "registered_at": NOW,
    } | row
    with pytest.raises(IntegrityError), transaction.atomic():
        SigningKey.objects.create(**values)


def test_database_refuses_an_empty_or_duplicate_status_record(org: Organization) -> None:
    k = register(org, "urn:k:1", ALICE, key(1), valid_until="2026-08-01T00:00:00Z")
    for row in (
        {"sequence": 2},  # neither boundary
        {"sequence": 1, "revoked_at": "2026-07-02T00:00:00Z"},  # sequence taken
        {"sequence": 0, "revoked_at": "2026-07-02T00:00:00Z"},
    ):
        with pytest.raises(IntegrityError), transaction.atomic():
            SigningKeyValidity.objects.create(key=k, recorded_at=NOW, **row)


def _admission_row(org: Organization) -> AdmissionRecord:
    return AdmissionRecord.objects.create(
        organization=org,
        signing_hash="sha256:" + "0" * 64,
        admission_record_id="urn:r:1",
        document_kind="command",
        key_id="urn:k:1",
        principal_type="agent",
        principal_id=ALICE.id,
        record=b"{}",
        service_type="service",
        service_id=SERVICE.id,
        created_at=NOW,
    )


def test_database_refuses_update_and_delete_of_keys_history_and_admissions_PROTOCOL_6_4(org: Organization) -> None:
    k = register(org, "urn:k:1", ALICE, key(1), valid_until="2026-08-01T00:00:00Z")
    bare = register(org, "urn:k:2", BOB, key(2))  # no history, so no PROTECT stands in the trigger's way
    admission = _admission_row(org)
    attempts: list[Callable[[], object]] = [
        lambda: SigningKey.objects.filter(pk=k.pk).update(valid_from="2020-01-01T00:00:00Z"),
        lambda: SigningKey.objects.filter(pk=k.pk).update(principal_id=BOB.id),
        lambda: SigningKey.objects.filter(pk=bare.pk).delete(),
        lambda: SigningKeyValidity.objects.filter(key=k).update(valid_until=None),
        lambda: SigningKeyValidity.objects.filter(key=k).update(valid_until="2030-01-01T00:00:00Z"),
        lambda: SigningKeyValidity.objects.filter(key=k).delete(),
        lambda: AdmissionRecord.objects.filter(pk=admission.pk).update(record=b'{"x": 1}'),
        lambda: AdmissionRecord.objects.filter(pk=admission.pk).delete(),
    ]
    for attempt in attempts:
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            attempt()
    for table in APPEND_ONLY_TABLES:
        for sql in (f"UPDATE {table} SET id = id", f"DELETE FROM {table}"):
            with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cur:
                cur.execute(sql)
    assert effective(org) == ("2026-08-01T00:00:00Z", None)
    assert AdmissionRecord.objects.get(pk=admission.pk).record == b"{}"


# -- the history as a state machine against an integer oracle ----------------------------

_keys = itertools.count(100)


class ValidityHistoryProperties(TestCase):
    """Any sequence of status records: each is accepted iff it does not move its
    boundary later, and the effective boundaries are the earliest accepted."""

    @settings(max_examples=25, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from(["valid_until", "revoked_at"]), st.integers(0, 50)), max_size=8))
    def test_history_is_append_only_and_earliest_wins_PROTOCOL_6_4(self, ops: list[tuple[str, int]]) -> None:
        org = make_org()
        n = next(_keys)
        k = register(org, f"urn:k:{n}", ALICE, key(n % 250 + 1))
        oracle: dict[str, int | None] = {"valid_until": None, "revoked_at": None}
        for field, hour in ops:
            text = f"2026-08-{1 + hour // 24:02d}T{hour % 24:02d}:00:00Z"
            later = oracle[field] is not None and hour > oracle[field]  # type: ignore[operator]
            if later:
                with pytest.raises(RegistrationError):
                    record_validity(k, **dict[str, Any]({field: text}))
            else:
                record_validity(k, **dict[str, Any]({field: text}))
                oracle[field] = hour
        binding = DjangoRegistry(org).resolve(f"urn:k:{n}")
        for field, value in (("valid_until", binding.valid_until), ("revoked_at", binding.revoked_at)):
            want = oracle[field]
            got = None if value is None else value.epoch_seconds
            assert got == (
                None if want is None else parse_timestamp("2026-08-01T00:00:00Z").epoch_seconds + 3600 * want
            )


@pytest.mark.django_db(transaction=True)
def test_a_transactional_test_with_registry_rows_flushes_cleanly() -> None:
    # SQLite's flush DELETEs rows, which the append-only triggers refuse; the
    # suite's purge_events_after fixture lifts them for that moment. Without
    # it this test errors in teardown (PostgreSQL's TRUNCATE fires no row
    # trigger, so there it always passes).
    org = make_org()
    register(org, "urn:k:flush", ALICE, key(7), valid_until="2026-08-01T00:00:00Z")
    assert SigningKey.objects.count() == 1
    assert SigningKeyValidity.objects.count() == 1


# -- the Organization's own Principals (DESIGN §4) ----------------------------------


def test_an_organization_comes_with_its_service_principals_keys_bound_DESIGN_4(db: None) -> None:
    """``ext.mwportal.admin.organization_create`` binds the Group Authority's and the control
    plane's keys (the key files under ``MWP_SERVICE_KEY_DIR``), so its first Event already verifies."""
    from missions import service_keys
    from missions.commands import create_organization
    from missions.models import Agent, GroupEvent
    from mwportal.protocol.eventdoc import verify_event

    org_id, admin_group = create_organization("bootstrap", "Bootstrap")
    organization = Organization.objects.get(id=org_id)
    registry = DjangoRegistry(organization)
    for role in (service_keys.GROUP_AUTHORITY, service_keys.CONTROL_PLANE):
        key = service_keys.service_key(org_id, role)
        principal = f"urn:uuid:{service_keys.principal_id(org_id, role)}"
        binding = registry.resolve(key.key_id)
        assert (binding.principal, binding.public_key) == (
            Principal("service", principal),
            ed25519.public_key(key.seed),
        )
        assert Agent.objects.get(id=service_keys.principal_id(org_id, role)).kind == "service"
    # Its context packager (§7.2: it signs a replacement Coordinator's Context Package) is an Agent Principal.
    packager = service_keys.principal_id(org_id, service_keys.CONTEXT_PACKAGER)
    key = service_keys.service_key(org_id, service_keys.CONTEXT_PACKAGER)
    binding = registry.resolve(key.key_id)
    assert (binding.principal, binding.public_key) == (Principal("agent", f"urn:uuid:{packager}"),
                                                       ed25519.public_key(key.seed))  # fmt: skip
    assert Agent.objects.get(id=packager).kind == "agent"
    first = GroupEvent.objects.get(group_id=admin_group, sequence=1)
    assert first.type == "ext.mwportal.admin.organization_created"
    verified = verify_event(first.document.encode(), registry)
    assert verified.principal.id == f"urn:uuid:{service_keys.principal_id(org_id, service_keys.GROUP_AUTHORITY)}"
    # Created once: the same slug answers the existing Organization, and nothing is bound twice.
    assert create_organization("bootstrap", "Bootstrap") == (org_id, admin_group)
    assert SigningKey.objects.filter(organization=organization).count() == 3
