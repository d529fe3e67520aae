"""Artifacts, Evidence, review results and Context Packages (PROTOCOL §13).

- ``Blob``/``BlobGroup``: the content-addressed byte index. Blobs live outside
  the Group Event log, behind Django's storage API; identity is the SHA-256 of
  the content, never a URI. These rows are content bookkeeping (which bytes
  exist, which Group's members uploaded them), like the bytes themselves: the
  store writes them; ``BlobGroup`` rows are written by the control plane's
  ``ext.mwportal.artifact.content_store`` handler. Hashes are kept as their
  64 hex digits (the wire writes ``sha256:<hex>``). ``Blob.integrity`` records
  the last check of the stored bytes, so the portal can show a blob that no
  longer matches its hash.
- ``Artifact``, ``ArtifactSource``, ``Evidence``, ``ReviewRequest``,
  ``ContextPackage``, ``ContextForward``: authoritative, written only by the
  handlers (``handlers``, ``review_handlers``, ``context``) inside ``accept()``.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from missions.models import Agent, Group, Mission
from workitems.models import Submission, WorkItem

INTEGRITY = ("unchecked", "verified", "mismatch", "missing")
EVIDENCE_RESULTS = ("passed", "failed", "inconclusive")
CLASSIFICATIONS = ("public", "internal", "confidential", "restricted")


class Blob(models.Model):
    sha256 = models.CharField(max_length=64, primary_key=True)
    size = models.BigIntegerField()
    media_type = models.CharField(max_length=200)
    created_at = models.DateTimeField()
    # The last integrity check of the stored bytes (every read checks them):
    # "mismatch" means they no longer hash to ``sha256`` and are never served
    # (INTERNAL_ERROR, reason artifact_hash_mismatch).
    integrity = models.CharField(max_length=10, default="unchecked")
    integrity_checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(integrity__in=list(INTEGRITY)), name="blob_integrity_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.sha256[:12]}… ({self.size} bytes)"


class BlobGroup(models.Model):
    """Which Group a blob was uploaded to: members of that Group may read it.
    ``uploaded_by`` is the Principal of the Command that recorded it (the control plane)."""

    blob = models.ForeignKey(Blob, on_delete=models.PROTECT, related_name="groups")
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="+")
    uploaded_by = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["blob", "group"], name="blobgroup_unique")]

    def __str__(self) -> str:
        return f"{self.blob_id[:12]}… in {self.group_id}"


class Artifact(models.Model):
    """A published Artifact: the producer's signed manifest (spec 13.1, ``artifact.schema.json``).

    ``manifest`` is the normative document exactly as signed; the other
    columns repeat its members for queries, in the database's forms (bare
    UUIDs, hashes as 64 hex digits): ``artifact_id`` is ``artifactId``,
    ``content_schema`` ``schemaUri``, ``retrieval_uri`` ``uri``, ``versions``
    ``{"toolVersions", "modelVersions", "capabilities"}``, ``lease_id`` the
    Execution Lease it was published under. One manifest per content hash and
    WorkItem.
    """

    id = models.BigAutoField(primary_key=True)
    artifact_id = models.UUIDField(unique=True)
    sha256 = models.CharField(max_length=64)
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="artifacts")
    mission = models.ForeignKey(Mission, on_delete=models.PROTECT, related_name="artifacts")
    workitem = models.ForeignKey(WorkItem, on_delete=models.PROTECT, related_name="artifacts")
    producer = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    agent_card_version = models.PositiveIntegerField()
    media_type = models.CharField(max_length=200)
    content_schema = models.CharField(max_length=2000, blank=True)
    size = models.BigIntegerField()
    sources = models.JSONField(default=list)
    versions = models.JSONField(default=dict)
    classification = models.CharField(max_length=12)
    retrieval_uri = models.CharField(max_length=2000)
    manifest = models.JSONField()
    manifest_hash = models.CharField(max_length=64, unique=True)
    lease_id = models.UUIDField()
    created_at = models.DateTimeField()  # the manifest's creation time
    published_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["sha256", "workitem"], name="artifact_once_per_workitem"),
            models.CheckConstraint(
                condition=Q(classification__in=list(CLASSIFICATIONS)), name="artifact_classification_valid"
            ),
        ]
        # "Which manifests name this content in this Group": provenance and review.
        indexes = [models.Index(fields=["sha256", "group"], name="artifact_sha_group_idx")]

    def __str__(self) -> str:
        return f"Artifact {self.sha256[:12]}… of {self.workitem_id}"


class ArtifactSource(models.Model):
    """An edge of the provenance graph: ``artifact`` was derived from ``source_sha256``."""

    artifact = models.ForeignKey(Artifact, on_delete=models.PROTECT, related_name="source_edges")
    source_sha256 = models.CharField(max_length=64)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["artifact", "source_sha256"], name="artifactsource_unique")]
        # "What was derived from X": the downward walk of the graph.
        indexes = [models.Index(fields=["source_sha256"], name="artifactsource_source_idx")]

    def __str__(self) -> str:
        return f"{self.artifact_id} <- {self.source_sha256[:12]}…"


class Evidence(models.Model):
    """One Evidence record (spec 13.2, ``evidence.schema.json``) and where it came from.

    ``record`` is the normative signed document; the columns repeat its
    members for queries: ``evidence_id`` (``evidenceId``), ``type``,
    ``subject`` (``subject.id``), ``criteria`` (``criterionIds``), ``method``,
    ``result`` (passed, failed, inconclusive), ``producer`` (``generatedBy.id``),
    ``timestamp`` (``createdAt``), ``artifacts`` (``artifactHashes``).

    ``origin``: ``submission`` (the Worker's), ``review`` (the pipeline's
    integrity, schema and deterministic checks, and the combined
    evaluation), ``reviewer`` (a reviewer Agent's, through its review
    WorkItem), ``coordinator`` (accept_result), ``failure``. ``details``
    holds structured check results (kind, expected, actual), never prose
    reasoning.
    """

    ORIGINS = ("submission", "review", "reviewer", "coordinator", "failure")
    STAGES = ("", "integrity", "schema", "deterministic", "reviewer", "combined")

    id = models.BigAutoField(primary_key=True)
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="+")
    workitem = models.ForeignKey(WorkItem, on_delete=models.PROTECT, related_name="evidence_records")
    submission = models.ForeignKey(Submission, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    origin = models.CharField(max_length=12)
    stage = models.CharField(max_length=14, blank=True)
    evidence_id = models.CharField(max_length=512, blank=True)
    type = models.CharField(max_length=30, blank=True)
    subject = models.CharField(max_length=600)
    criteria = models.JSONField(default=list)
    method = models.TextField()
    result = models.CharField(max_length=12)
    producer = models.CharField(max_length=600)
    timestamp = models.DateTimeField()
    artifacts = models.JSONField(default=list)
    summary = models.TextField(blank=True)
    details = models.JSONField(default=dict)
    # The normative record exactly as the Event carried it.
    record = models.JSONField(default=dict)
    # The Event that carried this record (its Group sequence).
    sequence = models.BigIntegerField()

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(result__in=list(EVIDENCE_RESULTS)), name="evidence_result_valid"),
            models.CheckConstraint(
                condition=Q(origin__in=["submission", "review", "reviewer", "coordinator", "failure"]),
                name="evidence_origin_valid",
            ),
        ]
        indexes = [models.Index(fields=["workitem", "origin"], name="evidence_workitem_idx")]

    def __str__(self) -> str:
        return f"{self.method} {self.result} for {self.workitem_id}"

    def as_record(self) -> dict[str, object]:
        """The normative Evidence document, exactly as its Event carried it."""
        return dict(self.record)


class ReviewRequest(models.Model):
    """A review WorkItem the pipeline opened for qualitative criteria of a submission."""

    review_workitem = models.OneToOneField(WorkItem, on_delete=models.PROTECT, related_name="review_of")
    subject = models.ForeignKey(WorkItem, on_delete=models.PROTECT, related_name="review_requests")
    submission = models.ForeignKey(Submission, on_delete=models.PROTECT, related_name="+")
    criteria = models.JSONField(default=list)
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"review {self.review_workitem_id} of {self.subject_id}"


class ContextPackage(models.Model):
    """One version of a signed Context Package (spec 13.3, ``context-package.schema.json``).

    Each version is its own document with its own ``contextPackageId``
    (``package``); version n+1 names version n in ``previousContextPackageId``
    (``previous_package``), so every version keeps its provenance. ``lineage``
    is the first version's ID: one chain of versions, numbered 1, 2, 3...
    """

    id = models.BigAutoField(primary_key=True)
    package = models.UUIDField(unique=True)
    lineage = models.UUIDField()
    previous_package = models.UUIDField(null=True, blank=True)
    version = models.PositiveIntegerField()
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="context_packages")
    mission = models.ForeignKey(Mission, on_delete=models.PROTECT, related_name="+")
    workitem = models.ForeignKey(WorkItem, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    generator = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    from_sequence = models.BigIntegerField()
    to_sequence = models.BigIntegerField()
    document = models.JSONField()
    document_hash = models.CharField(max_length=64, unique=True)
    published_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["lineage", "version"], name="contextpackage_lineage_version")]

    def __str__(self) -> str:
        return f"context package {self.package} v{self.version}"


class ContextForward(models.Model):
    """A Context Package version forwarded to another Group (spec 13.3: never by default)."""

    package = models.ForeignKey(ContextPackage, on_delete=models.PROTECT, related_name="forwards")
    to_group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="+")
    forwarded_by = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    forwarded_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["package", "to_group"], name="contextforward_unique")]

    def __str__(self) -> str:
        return f"{self.package_id} -> {self.to_group_id}"
