"""Events are append-only in the database itself (PROTOCOL §7.4, §15.2), and ``mwp verify-log``
catches a row changed behind the trigger's back.

Each stored Event is its signed document (the JCS text the Group Authority
signed) chained per Group: ``hash = sha256(prev_hash || document)``. The
columns beside it (kind, payload) index the document and must say what it says.
"""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from missions.immutability import TABLE, drop_sql, install_sql
from missions.models import Group, GroupEvent
from missions.verify import verify_group_log
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey


@pytest.fixture
def log(org: dict[str, str], worker: AgentKey, worker2: AgentKey, outsider: AgentKey) -> str:
    """The administrative Group's log: its creation and three registrations (four Events at least)."""
    assert GroupEvent.objects.filter(group_id=org["admin_group"]).count() >= 4
    return org["admin_group"]


def test_database_refuses_update_of_an_event(log: str) -> None:
    """An Event is an immutable accepted fact (PROTOCOL §15.2)."""
    event = GroupEvent.objects.filter(group_id=log).first()
    assert event is not None
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        GroupEvent.objects.filter(pk=event.pk).update(body={"name": "rewritten"})
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"UPDATE {TABLE} SET document = 'x' WHERE id = %s", [event.pk])


def test_database_refuses_delete_of_an_event(log: str) -> None:
    """Redaction appends a tombstone; it never removes an Event (PROTOCOL §7.4)."""
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        GroupEvent.objects.filter(group_id=log).delete()
    assert GroupEvent.objects.filter(group_id=log).count() > 0


def test_verify_log_passes_on_an_intact_log(log: str, capsys: pytest.CaptureFixture[str]) -> None:
    call_command("mwp", "verify-log", urn(log))
    assert "hash chain verified" in capsys.readouterr().out
    count, broken = verify_group_log(Group.objects.get(id=log))
    assert broken is None and count == Group.objects.get(id=log).last_sequence


def _behind_the_triggers_back(sql: str, params: list[object]) -> None:
    vendor = connection.vendor
    with connection.cursor() as cur:
        for statement in drop_sql(vendor):
            cur.execute(statement)
        cur.execute(sql, params)
        for statement in install_sql(vendor):
            cur.execute(statement)


def test_verify_log_names_the_first_bad_sequence_after_a_signed_document_is_rewritten(log: str) -> None:
    victim = GroupEvent.objects.get(group_id=log, sequence=3)
    document = victim.as_wire()
    document["payload"]["name"] = "Mallory"
    _behind_the_triggers_back(f"UPDATE {TABLE} SET document = %s WHERE id = %s", [json.dumps(document), victim.pk])
    with pytest.raises(CommandError, match="first bad sequence 3"):
        call_command("mwp", "verify-log", urn(log))


def test_verify_log_finds_a_column_that_no_longer_says_what_the_document_says(log: str) -> None:
    """Handlers read the indexed columns (a Mission's terms from its ``mission.created`` payload)."""
    victim = GroupEvent.objects.get(group_id=log, sequence=2)
    _behind_the_triggers_back(f"UPDATE {TABLE} SET body = %s WHERE id = %s", ['{"name": "Mallory"}', victim.pk])
    with pytest.raises(CommandError, match="first bad sequence 2: the row's columns"):
        call_command("mwp", "verify-log", urn(log))


def test_verify_log_finds_a_deleted_event(log: str) -> None:
    victim = GroupEvent.objects.get(group_id=log, sequence=2)
    _behind_the_triggers_back(f"DELETE FROM {TABLE} WHERE id = %s", [victim.pk])
    with pytest.raises(CommandError, match="first bad sequence 2"):
        call_command("mwp", "verify-log", urn(log))


def test_verify_log_finds_a_deleted_tail(log: str) -> None:
    last = GroupEvent.objects.filter(group_id=log).order_by("-sequence").first()
    assert last is not None
    _behind_the_triggers_back(f"DELETE FROM {TABLE} WHERE id = %s", [last.pk])
    with pytest.raises(CommandError, match=f"first bad sequence {last.sequence}"):
        call_command("mwp", "verify-log", urn(log))


def test_verify_log_exits_non_zero_from_the_shell(log: str) -> None:
    """``CommandError`` from ``manage.py`` exits with status 1."""
    from django.core.management import ManagementUtility

    victim = GroupEvent.objects.get(group_id=log, sequence=1)
    _behind_the_triggers_back(f"UPDATE {TABLE} SET prev_hash = %s WHERE id = %s", ["f" * 64, victim.pk])
    with pytest.raises(SystemExit) as info:
        ManagementUtility(["manage.py", "mwp", "verify-log", log]).execute()
    assert info.value.code == 1
