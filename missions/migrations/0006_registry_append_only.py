"""Refuse UPDATE and DELETE on signing keys, their validity history and the
Admission Log in the database itself (PROTOCOL §6.4: immutable bindings,
append-only history, append-only Admission Log)."""

from django.db import migrations


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    from missions.keyregistry import install_append_only

    install_append_only(schema_editor)


def backwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    from missions.keyregistry import drop_append_only

    drop_append_only(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("missions", "0005_signing_keys_admission_log")]
    operations = [migrations.RunPython(forwards, backwards)]
