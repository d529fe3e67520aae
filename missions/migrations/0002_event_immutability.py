"""Refuse UPDATE and DELETE on Group Events in the database itself."""

from django.db import migrations


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    from missions.immutability import install

    install(schema_editor)


def backwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    from missions.immutability import drop

    drop(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("missions", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
