"""MWP 0.1 documents (issue 18): Artifacts gain their ``artifactId``, Evidence
rows the normative members (``evidenceId``, ``type``, free-text ``method``,
results ``passed``/``failed``), and each Context Package version its own ID
with the one before it (``previousContextPackageId``) and its lineage."""

import uuid

from django.db import migrations, models
from django.db.models import Q

RESULTS = {"pass": "passed", "fail": "failed"}


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    Artifact = apps.get_model("artifacts", "Artifact")
    for row in Artifact.objects.filter(artifact_id__isnull=True):
        row.artifact_id = uuid.uuid4()
        row.save(update_fields=["artifact_id"])
    Evidence = apps.get_model("artifacts", "Evidence")
    for old, new in RESULTS.items():
        Evidence.objects.filter(result=old).update(result=new)
    ContextPackage = apps.get_model("artifacts", "ContextPackage")
    previous: dict[object, uuid.UUID] = {}
    for row in ContextPackage.objects.order_by("package", "version"):
        row.lineage = row.package
        if row.version > 1:
            row.previous_package = previous.get(row.package)
            row.package = uuid.uuid5(uuid.NAMESPACE_URL, f"mwp:context-package:{row.lineage}:{row.version}")
        previous[row.lineage] = row.package
        row.save(update_fields=["lineage", "package", "previous_package"])


class Migration(migrations.Migration):
    dependencies = [("artifacts", "0002_evidence_manifests_context")]

    operations = [
        migrations.AddField("artifact", "artifact_id", models.UUIDField(null=True, unique=True)),
        migrations.RemoveConstraint("evidence", "evidence_result_valid"),
        migrations.AddField("evidence", "evidence_id", models.CharField(blank=True, max_length=512, default="")),
        migrations.AddField("evidence", "type", models.CharField(blank=True, max_length=30, default="")),
        migrations.AlterField("evidence", "subject", models.CharField(max_length=600)),
        migrations.AlterField("evidence", "method", models.TextField()),
        migrations.AlterField("evidence", "producer", models.CharField(max_length=600)),
        migrations.RemoveConstraint("contextpackage", "contextpackage_version_unique"),
        migrations.AddField("contextpackage", "lineage", models.UUIDField(null=True)),
        migrations.AddField("contextpackage", "previous_package", models.UUIDField(blank=True, null=True)),
        migrations.RunPython(forwards, migrations.RunPython.noop),
        migrations.AlterField("evidence", "evidence_id", models.CharField(blank=True, max_length=512)),
        migrations.AlterField("evidence", "type", models.CharField(blank=True, max_length=30)),
        migrations.AlterField("artifact", "artifact_id", models.UUIDField(unique=True)),
        migrations.AlterField("contextpackage", "lineage", models.UUIDField()),
        migrations.AlterField("contextpackage", "package", models.UUIDField(unique=True)),
        migrations.RemoveField("contextpackage", "previous_hash"),
        migrations.AddConstraint(
            "evidence",
            models.CheckConstraint(
                condition=Q(result__in=["passed", "failed", "inconclusive"]), name="evidence_result_valid"
            ),
        ),
        migrations.AddConstraint(
            "contextpackage",
            models.UniqueConstraint(fields=["lineage", "version"], name="contextpackage_lineage_version"),
        ),
    ]
