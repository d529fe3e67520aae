"""Database triggers that make the Event table append-only (DESIGN §3).

Events are immutable facts (MWP-EVT-005); redaction is a tombstone Event
(MWP-MSN-009). The database itself refuses UPDATE and DELETE on the table, so
no code path, admin screen or hand-typed SQL can rewrite history unnoticed;
``mwp verify-log`` catches a change made by someone who disabled the trigger.
"""

from __future__ import annotations

from typing import Any

TABLE = "missions_groupevent"

_PG_INSTALL = [
    """
    CREATE OR REPLACE FUNCTION mwp_refuse_event_change() RETURNS trigger AS $$
    BEGIN
        RAISE EXCEPTION 'group events are immutable: % refused on %', TG_OP, TG_TABLE_NAME
            USING ERRCODE = 'integrity_constraint_violation';
    END;
    $$ LANGUAGE plpgsql;
    """,
    f"""
    CREATE TRIGGER mwp_groupevent_immutable
    BEFORE UPDATE OR DELETE ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION mwp_refuse_event_change();
    """,
]
_PG_DROP = [
    f"DROP TRIGGER IF EXISTS mwp_groupevent_immutable ON {TABLE};",
    "DROP FUNCTION IF EXISTS mwp_refuse_event_change();",
]

_SQLITE_INSTALL = [
    f"""
    CREATE TRIGGER mwp_groupevent_no_update BEFORE UPDATE ON {TABLE}
    BEGIN SELECT RAISE(ABORT, 'group events are immutable: UPDATE refused'); END;
    """,
    f"""
    CREATE TRIGGER mwp_groupevent_no_delete BEFORE DELETE ON {TABLE}
    BEGIN SELECT RAISE(ABORT, 'group events are immutable: DELETE refused'); END;
    """,
]
_SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS mwp_groupevent_no_update;",
    "DROP TRIGGER IF EXISTS mwp_groupevent_no_delete;",
]


def install_sql(vendor: str) -> list[str]:
    return _PG_INSTALL if vendor == "postgresql" else _SQLITE_INSTALL


def drop_sql(vendor: str) -> list[str]:
    return _PG_DROP if vendor == "postgresql" else _SQLITE_DROP


def install(schema_editor: Any) -> None:
    for sql in install_sql(schema_editor.connection.vendor):
        schema_editor.execute(sql, None)


def drop(schema_editor: Any) -> None:
    for sql in drop_sql(schema_editor.connection.vendor):
        schema_editor.execute(sql, None)


# The Organization-scoped Events (PROTOCOL §15.2: Session activation, Agent Card
# registration) are immutable too (migration 0009).
ORGANIZATION_TABLE = "missions_organizationevent"


def organization_install_sql(vendor: str) -> list[str]:
    if vendor == "postgresql":
        # Its own function, so that lifting the Group Events' trigger (drop_sql) leaves this one in place.
        return [
            """
            CREATE OR REPLACE FUNCTION mwp_refuse_organization_event_change() RETURNS trigger AS $$
            BEGIN
                RAISE EXCEPTION 'organization events are immutable: % refused on %', TG_OP, TG_TABLE_NAME
                    USING ERRCODE = 'integrity_constraint_violation';
            END;
            $$ LANGUAGE plpgsql;
            """,
            f"CREATE TRIGGER mwp_organizationevent_immutable BEFORE UPDATE OR DELETE ON {ORGANIZATION_TABLE} "
            "FOR EACH ROW EXECUTE FUNCTION mwp_refuse_organization_event_change();",
        ]
    return [
        f"CREATE TRIGGER mwp_organizationevent_no_{op.lower()} BEFORE {op} ON {ORGANIZATION_TABLE} "
        f"BEGIN SELECT RAISE(ABORT, 'organization events are immutable: {op} refused'); END;"
        for op in ("UPDATE", "DELETE")
    ]


def organization_drop_sql(vendor: str) -> list[str]:
    if vendor == "postgresql":
        return [
            f"DROP TRIGGER IF EXISTS mwp_organizationevent_immutable ON {ORGANIZATION_TABLE};",
            "DROP FUNCTION IF EXISTS mwp_refuse_organization_event_change();",
        ]
    return [f"DROP TRIGGER IF EXISTS mwp_organizationevent_no_{op};" for op in ("update", "delete")]


def install_organization(schema_editor: Any) -> None:
    for sql in organization_install_sql(schema_editor.connection.vendor):
        schema_editor.execute(sql, None)


def drop_organization(schema_editor: Any) -> None:
    for sql in organization_drop_sql(schema_editor.connection.vendor):
        schema_editor.execute(sql, None)


# -- append-only tables: the Registry's keys and validity, the Admission Log, the Policy Log --------


def append_only_install_sql(vendor: str, tables: tuple[str, ...], function: str) -> list[str]:
    """Triggers refusing UPDATE and DELETE on ``tables``. On PostgreSQL each set has its own ``function``, so
    lifting one set (``append_only_drop_sql``) leaves the others in place."""
    if vendor == "postgresql":
        return [
            f"""
            CREATE OR REPLACE FUNCTION {function}() RETURNS trigger AS $$
            BEGIN
                RAISE EXCEPTION 'append-only: % refused on %', TG_OP, TG_TABLE_NAME
                    USING ERRCODE = 'integrity_constraint_violation';
            END;
            $$ LANGUAGE plpgsql;
            """
        ] + [
            f"CREATE TRIGGER mwp_{t}_append_only BEFORE UPDATE OR DELETE ON {t} "
            f"FOR EACH ROW EXECUTE FUNCTION {function}();"
            for t in tables
        ]
    return [
        f"CREATE TRIGGER mwp_{t}_no_{op.lower()} BEFORE {op} ON {t} "
        f"BEGIN SELECT RAISE(ABORT, 'append-only: {op} refused on {t}'); END;"
        for t in tables
        for op in ("UPDATE", "DELETE")
    ]


def append_only_drop_sql(vendor: str, tables: tuple[str, ...], function: str) -> list[str]:
    if vendor == "postgresql":
        return [f"DROP TRIGGER IF EXISTS mwp_{t}_append_only ON {t};" for t in tables] + [
            f"DROP FUNCTION IF EXISTS {function}();"
        ]
    return [f"DROP TRIGGER IF EXISTS mwp_{t}_no_{op.lower()};" for t in tables for op in ("UPDATE", "DELETE")]
