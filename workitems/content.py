"""What the WorkItem handlers ask of the content layer above them.

Evidence rows, the blob store and the review pipeline belong to the
``artifacts`` app, which sits above ``workitems`` (DESIGN §2). The handlers
call them through this one seam instead of importing upward; ``artifacts``
installs its implementation when its handlers load (``ArtifactsConfig.ready``),
so the dependency points down only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from missions.authority import HandlerContext

    from .models import Submission, WorkItem


class RecordEvidence(Protocol):
    def __call__(
        self,
        ctx: HandlerContext,
        item: WorkItem,
        records: list[dict[str, Any]],
        origin: str,
        *,
        position: int = 0,
        submission: Submission | None = None,
    ) -> None:
        """Keep ``records`` (normative Evidence, already checked) as Evidence rows of ``item``;
        ``position`` is the index, among the Decision's Events, of the Event carrying them."""


class AbsentFromGroup(Protocol):
    def __call__(self, group_id: str, identifiers: list[str]) -> list[str]:
        """Which of ``identifiers`` the Group does not hold, sorted: content hashes
        (``sha256:<hex>``) not stored into it, Artifact IDs of no manifest published in it."""


class ReviewAfterCommit(Protocol):
    def __call__(self, workitem_id: str) -> None:
        """Schedule the review pipeline of the WorkItem's submission for after commit."""


class AdoptArtifacts(Protocol):
    def __call__(self, ctx: HandlerContext, group_id: str, hashes: list[str]) -> None:
        """Make the Group hold the ``sha256:`` Artifacts another Group of the Mission tree approved (§14)."""


class ArtifactHashes(Protocol):
    def __call__(self, group_id: str, artifact_ids: list[str]) -> list[str]:
        """The content hashes (hex) of the Artifacts published in the Group, by their ``urn:uuid:`` IDs."""


def _no_hashes(group_id: str, artifact_ids: list[str]) -> list[str]:
    return []


@dataclass(frozen=True, slots=True)
class Content:
    record_evidence: RecordEvidence
    absent_from_group: AbsentFromGroup
    review_after_commit: ReviewAfterCommit
    adopt_artifacts: AdoptArtifacts
    # For a snapshot's ``submission.artifactHashes``; without it, the hashes the Evidence cites.
    artifact_hashes: ArtifactHashes = _no_hashes


_installed: list[Content] = []


def install(content: Content) -> None:
    """Called once by the content layer; a second install would make the seam ambiguous."""
    if _installed and _installed[0] != content:
        raise RuntimeError("a content layer is installed already")
    _installed[:] = [content]


def content() -> Content:
    if not _installed:
        # A WorkItem cannot record Evidence or check Artifacts without the
        # artifacts app; refusing loudly beats accepting unchecked hashes.
        raise RuntimeError("no content layer installed: is the artifacts app in INSTALLED_APPS?")
    return _installed[0]
