"""Organization-scoped Events are immutable, like Group Events (PROTOCOL §15.2)."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from missions import immutability


def forwards(apps: Any, schema_editor: Any) -> None:
    immutability.install_organization(schema_editor)


def backwards(apps: Any, schema_editor: Any) -> None:
    immutability.drop_organization(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("missions", "0008_snapshot_state_receipt_hash")]

    operations = [migrations.RunPython(forwards, backwards)]
