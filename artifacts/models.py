"""The content-addressed blob index (spec 13.1).

Blobs live outside the Group Event log, behind Django's storage API; a row
here says which bytes exist and which Groups may read them. Identity is the
SHA-256 of the content, never a URI. The signed Artifact manifest, which is
authoritative, arrives with the ``artifact.publish`` Command.
"""

from __future__ import annotations

from django.db import models

from missions.models import Agent, Group


class Blob(models.Model):
    sha256 = models.CharField(max_length=64, primary_key=True)
    size = models.BigIntegerField()
    media_type = models.CharField(max_length=200)
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.sha256[:12]}… ({self.size} bytes)"


class BlobGroup(models.Model):
    """Which Group a blob was uploaded to: members of that Group may read it."""

    blob = models.ForeignKey(Blob, on_delete=models.PROTECT, related_name="groups")
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="+")
    uploaded_by = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["blob", "group"], name="blobgroup_unique")]

    def __str__(self) -> str:
        return f"{self.blob_id[:12]}… in {self.group_id}"
