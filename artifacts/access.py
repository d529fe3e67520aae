"""``access_*`` gates of the artifacts app: the only way views fetch what an
Agent may read. Each raises NOT_FOUND for what does not exist (or does not
exist where it was asked for) and NOT_A_MEMBER for what the Agent's
Memberships do not reach."""

from __future__ import annotations

from missions.access import access_group
from missions.models import Agent, Group, Membership
from mwportal.protocol import ErrorCode, ProtocolError
from workitems.models import WorkItem

from .models import Artifact, Blob, BlobGroup, ContextPackage


def member_groups(agent: Agent) -> set[str]:
    """The Groups the Agent is an active member of."""
    return {str(g) for g in Membership.objects.filter(agent=agent, active=True).values_list("group_id", flat=True)}


def access_blob(agent: Agent, sha256: str) -> Blob:
    """The blob, if the Agent is a member of a Group that holds it (uploaded or published there)."""
    blob = Blob.objects.filter(sha256=sha256).first()
    if blob is None:
        raise ProtocolError(ErrorCode.NOT_FOUND, f"no Artifact {sha256}", {"sha256": sha256})
    groups = {str(g) for g in BlobGroup.objects.filter(blob=blob).values_list("group_id", flat=True)}
    groups |= {str(g) for g in Artifact.objects.filter(sha256=sha256).values_list("group_id", flat=True)}
    if not groups & member_groups(agent):
        raise ProtocolError(ErrorCode.NOT_A_MEMBER, "not a member of a Group this Artifact belongs to")
    return blob


def access_workitem(agent: Agent, workitem_id: str) -> WorkItem:
    """The WorkItem, if the Agent may read its Group."""
    item = WorkItem.objects.filter(id=workitem_id).first()
    if item is None:
        raise ProtocolError(ErrorCode.NOT_FOUND, f"no WorkItem {workitem_id}", {"workitem": workitem_id})
    access_group(agent, str(item.group_id))
    return item


def access_context_package(group: Group, package_id: str, version: int | None) -> tuple[ContextPackage, bool]:
    """The package version readable through ``group`` (already gated by
    ``access_group``): its own, or one forwarded to it (spec 13.3);
    ``(package, forwarded)``. A package of another Group that was not
    forwarded here is NOT_FOUND, whatever the Agent's other Memberships."""
    rows = ContextPackage.objects.filter(package=package_id)
    own = rows.filter(group=group)
    forwarded = rows.filter(forwards__to_group=group)
    for query, is_forwarded in ((own, False), (forwarded, True)):
        chosen = query.filter(version=version) if version is not None else query
        found = chosen.order_by("-version").first()
        if found is not None:
            return found, is_forwarded
    raise ProtocolError(ErrorCode.NOT_FOUND, f"no Context Package {package_id} readable in this Group")
