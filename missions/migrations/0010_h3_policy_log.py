"""The Policy Log (PROTOCOL §6.4, §20): an append-only table; triggers refuse UPDATE and DELETE."""

import uuid

import django.db.models.deletion
from django.db import migrations, models


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    from missions.policylog import install

    install(schema_editor)


def backwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    from missions.policylog import drop

    drop(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("missions", "0009_organization_event_immutability")]

    operations = [
        migrations.CreateModel(
            name="PolicyLogEntry",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("entry_id", models.UUIDField(default=uuid.uuid4, editable=False, unique=True)),
                ("group_id", models.UUIDField(blank=True, db_index=True, null=True)),
                ("mission_id", models.UUIDField(blank=True, null=True)),
                ("kind", models.CharField(max_length=40)),
                ("policy_name", models.CharField(blank=True, default="", max_length=80)),
                ("actor", models.CharField(blank=True, default="", max_length=64)),
                ("action_id", models.UUIDField(blank=True, null=True)),
                ("command_kind", models.CharField(blank=True, default="", max_length=200)),
                ("event_id", models.UUIDField(blank=True, null=True)),
                ("reference", models.CharField(blank=True, default="", max_length=512)),
                ("detail", models.JSONField(default=dict)),
                ("recorded_at", models.DateTimeField()),
                (
                    "organization",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="policy_log",
                        to="missions.organization",
                    ),
                ),
            ],
            options={"indexes": [models.Index(fields=["organization", "id"], name="policylog_org_order")]},
        ),
        migrations.RunPython(forwards, backwards),
    ]
