"""GroupSnapshot.state; ActionReceipt.content_hash holds a signing hash; the Event triggers again.

On SQLite, 0007's AddField of ``GroupEvent.document`` remade the Event table
and with it dropped the append-only triggers of 0002; they are installed
again here (dropped first, so PostgreSQL, which kept them, ends the same).
"""

from django.db import migrations, models


def reinstall_event_triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    from missions.immutability import drop, install

    drop(schema_editor)
    install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("missions", "0007_wire_documents")]

    operations = [
        migrations.AddField(
            model_name="groupsnapshot",
            name="state",
            field=models.JSONField(default=dict),
        ),
        migrations.AlterField(
            model_name="actionreceipt",
            name="content_hash",
            field=models.CharField(max_length=71),
        ),
        migrations.RunPython(reinstall_event_triggers, migrations.RunPython.noop),
    ]
