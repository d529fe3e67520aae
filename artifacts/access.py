"""``access_*`` gates of the artifacts app: the only way views fetch what an
Agent may read. Each raises GROUP_NOT_FOUND (404) for what does not exist
(or does not exist where it was asked for) and for what the Agent's
Memberships do not reach, alike (the rule for absent things in
``mwportal/protocol/errors.py``): a blob the Agent may not read answers
exactly like one that does not exist, so a hash cannot be probed for
existence (issue 16 item 8).

Holding bytes is proven only by sending them (issue 16 item 1): a Group holds
a blob when bytes were uploaded into it (``BlobGroup``, written by
``ext.mwportal.artifact.content_store``, which only the upload views issue, as
the control plane, after storing and hashing the bytes); an Agent reads a blob only through an *active* Membership
of such a Group. A hash learned anywhere else (a forwarded Context Package, an
Event seen before a removal) opens nothing.
"""

from __future__ import annotations

from missions.access import access_group
from missions.models import Agent, Group, Membership
from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.ids import urn
from workitems.models import WorkItem

from .models import Blob, BlobGroup, ContextPackage


def member_groups(agent: Agent) -> set[str]:
    """The Groups the Agent is an active member of."""
    return {str(g) for g in Membership.objects.filter(agent=agent, active=True).values_list("group_id", flat=True)}


def blob_not_found(sha256: str) -> ProtocolError:
    """The one answer for a blob that is absent *or* not readable by the caller."""
    shown = f"sha256:{sha256}"
    return ProtocolError(ErrorCode.GROUP_NOT_FOUND, f"no Artifact {shown}", details={"contentHash": shown})


def access_blob(agent: Agent, sha256: str) -> Blob:
    """The blob, if the Agent is an active member of a Mission Group it was
    uploaded into; GROUP_NOT_FOUND otherwise (whether or not it exists).

    Published manifests add no Group of their own: ``artifact.publish``
    requires the content to be held by its Group already.
    """
    held = (
        BlobGroup.objects.filter(
            blob_id=sha256,
            group__kind=Group.KIND_MISSION,
            group_id__in=Membership.objects.filter(agent=agent, active=True).values("group_id"),
        )
        .select_related("blob")
        .first()
    )
    if held is None:
        raise blob_not_found(sha256)
    return held.blob


def access_upload_group(agent: Agent, group_id: str) -> Group:
    """The Group an upload goes into: a Mission Group the Agent is an active
    member of (``access_group``'s answers otherwise). The Organization's
    administrative Group holds no Artifacts (issue 16 item 1): AUTH_FORBIDDEN,
    before a byte of the body is read."""
    group = access_group(agent, group_id)
    if group.kind != Group.KIND_MISSION:
        raise ProtocolError(
            ErrorCode.AUTH_FORBIDDEN,
            "Artifacts are uploaded into a Mission Group, never the Organization's administrative Group",
            details={"groupId": urn(group.id)},
        )
    return group


def workitem_not_found(workitem_id: str) -> ProtocolError:
    """The one answer for a WorkItem the caller may not read, absent or in a
    Group it is not in (issue 16 item 8: no existence oracle)."""
    shown = urn(workitem_id)
    return ProtocolError(ErrorCode.GROUP_NOT_FOUND, f"no WorkItem {shown}", details={"workItemId": shown})


def access_workitem(agent: Agent, workitem_id: str) -> WorkItem:
    """The WorkItem, if the Agent may read its Group; else the absent answer."""
    item = WorkItem.objects.filter(id=workitem_id).first()
    if item is None:
        raise workitem_not_found(workitem_id)
    try:
        access_group(agent, str(item.group_id))
    except ProtocolError:
        raise workitem_not_found(workitem_id) from None
    return item


def access_context_package(group: Group, package_id: str) -> tuple[ContextPackage, bool]:
    """The package version readable through ``group`` (already gated by
    ``access_group``): its own, or one forwarded to it (§13.3);
    ``(package, forwarded)``. A package of another Group that was not
    forwarded here is GROUP_NOT_FOUND, whatever the Agent's other Memberships."""
    found = ContextPackage.objects.filter(package=package_id).first()
    if found is not None:
        if found.group_id == group.id:
            return found, False
        if found.forwards.filter(to_group=group).exists():
            return found, True
    raise ProtocolError(ErrorCode.GROUP_NOT_FOUND, f"no Context Package {urn(package_id)} readable in this Group")
