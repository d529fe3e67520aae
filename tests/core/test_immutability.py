"""Events are append-only in the database itself (MWP-EVT-005, MWP-MSN-009),
and ``mwp verify-log`` catches a row changed behind the trigger's back."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from missions.immutability import TABLE, drop_sql, install_sql
from missions.models import GroupEvent


def test_database_refuses_update_of_an_event(mission: dict[str, str]) -> None:
    event = GroupEvent.objects.filter(group_id=mission["group"]).first()
    assert event is not None
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        GroupEvent.objects.filter(pk=event.pk).update(body={"title": "rewritten"})
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"UPDATE {TABLE} SET type = 'x' WHERE id = %s", [event.pk])


def test_database_refuses_delete_of_an_event(mission: dict[str, str]) -> None:
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        GroupEvent.objects.filter(group_id=mission["group"]).delete()
    assert GroupEvent.objects.filter(group_id=mission["group"]).count() > 0


def test_verify_log_passes_on_an_intact_log(mission: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    call_command("mwp", "verify-log", mission["group"])
    assert "hash chain verified" in capsys.readouterr().out


def _behind_the_triggers_back(sql: str, params: list[object]) -> None:
    vendor = connection.vendor
    with connection.cursor() as cur:
        for statement in drop_sql(vendor):
            cur.execute(statement)
        cur.execute(sql, params)
        for statement in install_sql(vendor):
            cur.execute(statement)


def test_verify_log_names_first_bad_sequence_after_tamper(mission: dict[str, str]) -> None:
    g = mission["group"]
    victim = GroupEvent.objects.get(group_id=g, sequence=3)
    body = '{"agent": "00000000-0000-0000-0000-000000000000", "roles": ["owner"], "membership_epoch": 1}'
    _behind_the_triggers_back(f"UPDATE {TABLE} SET body = %s WHERE id = %s", [body, victim.pk])
    with pytest.raises(CommandError, match="first bad sequence 3"):
        call_command("mwp", "verify-log", g)


def test_verify_log_finds_a_deleted_event(mission: dict[str, str]) -> None:
    g = mission["group"]
    victim = GroupEvent.objects.get(group_id=g, sequence=2)
    _behind_the_triggers_back(f"DELETE FROM {TABLE} WHERE id = %s", [victim.pk])
    with pytest.raises(CommandError, match="first bad sequence 2"):
        call_command("mwp", "verify-log", g)


def test_verify_log_finds_a_deleted_tail(mission: dict[str, str]) -> None:
    g = mission["group"]
    last = GroupEvent.objects.filter(group_id=g).order_by("-sequence").first()
    assert last is not None
    _behind_the_triggers_back(f"DELETE FROM {TABLE} WHERE id = %s", [last.pk])
    with pytest.raises(CommandError, match=f"first bad sequence {last.sequence}"):
        call_command("mwp", "verify-log", g)


def test_verify_log_exits_non_zero_from_the_shell(mission: dict[str, str]) -> None:
    """``CommandError`` from ``manage.py`` exits with status 1."""
    from django.core.management import ManagementUtility

    victim = GroupEvent.objects.get(group_id=mission["group"], sequence=1)
    _behind_the_triggers_back(f"UPDATE {TABLE} SET actor = 'forged' WHERE id = %s", [victim.pk])
    with pytest.raises(SystemExit) as info:
        ManagementUtility(["manage.py", "mwp", "verify-log", mission["group"]]).execute()
    assert info.value.code == 1
