"""Extension Profiles (PROTOCOL §18, §21): registered by the Organization, pinned by Groups, and the
check ``accept()`` runs for a critical extension a Command carries.

- ``ext.mwportal.extension.profile_register`` (administrative Group): a signed
  ``extension-profile`` document. Its signature is an Organization service
  Principal's (the Organization's approval, ``approvedBy``), verified in the
  six stages against the Organization's Registry; its kinds are in the
  ``ext.<organization>.<profile>.<name>`` namespace of this Organization; a
  (profile URI, version) is registered once.
- ``ext.mwportal.extension.profile_pin`` (a Mission Group, by its MissionOwner
  or Coordinator): the Group supports one major version of a registered
  profile.
- ``understands`` (``registry.extension_profile_checks``): a critical
  extension named by a profile URI is understood when the Organization
  registered a version of that profile with the extension's major version and
  the Command's Group pinned that major. Anything else critical is
  ``UNKNOWN_CRITICAL_EXTENSION``; a noncritical extension is never
  interpreted, only kept on the Command's Events and relayed as it came.
"""

from __future__ import annotations

from typing import Any

from missions.authority import AggregateRef, Decision, Emit, HandlerContext
from missions.guards import refuse
from missions.keyregistry import DjangoRegistry
from missions.models import Organization
from missions.registry import command, extension_profile_checks, snapshot_contributors
from mwportal.protocol import ErrorCode, jcs
from mwportal.protocol.values import parse_timestamp
from mwportal.protocol.verification import VerificationFailed, verify_document

from .models import ExtensionProfile, GroupProfilePin

PROFILE_REGISTER = "ext.mwportal.extension.profile_register"
PROFILE_PIN = "ext.mwportal.extension.profile_pin"
# Namespaces an Organization's profile never claims: the protocol's and this implementation's own.
RESERVED = ("ext.missionweaveprotocol.", "ext.mwportal.")


def major_of(version: Any) -> int | None:
    """The major number of a semantic version, None when it is not one."""
    if not isinstance(version, str):
        return None
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _instant(text: str) -> Any:
    from datetime import UTC, datetime

    parse_timestamp(text)
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


@command(PROFILE_REGISTER, scope="admin", org_roles=("admin",), actors=("human", "service"))
def register_profile(ctx: HandlerContext) -> Decision:
    """An Organization-approved Extension Profile version joins the Organization's registry (§18)."""
    profile = ctx.payload["profile"]
    org = Organization.objects.get(id=ctx.group.organization_id)
    try:
        verified = verify_document(jcs.canonicalize(profile), "extension-profile", DjangoRegistry(org))
    except VerificationFailed as exc:
        raise refuse(exc.wire_code, f"/payload/profile: {exc.wire_message}", field="/payload/profile") from None
    if verified.principal.type != "service":
        raise refuse(
            ErrorCode.AUTH_FORBIDDEN,
            "/payload/profile/approvedBy: an Extension Profile is approved by an Organization service Principal",
            field="/payload/profile/approvedBy",
        )
    namespace = f"ext.{org.slug}."
    for kind in (*profile["commandKinds"], *profile["eventKinds"]):
        if not kind.startswith(namespace) or kind.startswith(RESERVED):
            raise refuse(
                ErrorCode.INVALID_COMMAND,
                f"/payload/profile: {kind} is not in this Organization's namespace ext.{org.slug}.<profile>.<name>",
                field="/payload/profile/commandKinds",
            )
    uri, version = profile["profileUri"], profile["version"]
    if ExtensionProfile.objects.filter(organization=org, profile_uri=uri, version=version).exists():
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"{uri} {version} is registered already")
    major = major_of(version)
    assert major is not None  # the schema's semver
    ExtensionProfile.objects.create(
        organization=org, profile_uri=uri, name=profile["name"], version=version, major=major,
        schema_uri=profile["schemaUri"], schema_hash=profile["schemaHash"],
        required_capabilities=profile["requiredCapabilities"], critical=profile["critical"],
        command_kinds=profile["commandKinds"], event_kinds=profile["eventKinds"],
        approved_by=profile["approvedBy"]["id"], approved_at=_instant(profile["approvedAt"]), document=profile,
        registered_at=ctx.now,
    )  # fmt: skip
    ref = AggregateRef("organization", str(org.id), org.policy_revision)
    payload = {"profileUri": uri, "version": version, "schemaHash": profile["schemaHash"]}
    payload["critical"] = profile["critical"]
    return Decision([Emit("ext.mwportal.extension.profile_registered", ref, payload)], ref)


@command(PROFILE_PIN, group_roles=("mission_owner", "coordinator"))
def pin_profile(ctx: HandlerContext) -> Decision:
    """The Group supports one major version of a profile the Organization registered (§18)."""
    uri, major = ctx.payload["profileUri"], ctx.payload["major"]
    registered = ExtensionProfile.objects.filter(organization_id=ctx.group.organization_id, profile_uri=uri)
    if not registered.filter(major=major).exists():
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"/payload/profileUri: no registered version {major}.x of {uri} in this Organization",
            field="/payload/profileUri",
            reason="not_found",
        )
    pin = GroupProfilePin.objects.filter(group_id=ctx.group.id, profile_uri=uri).first()
    if pin is not None and pin.major == major:
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, f"this Group pins {uri} {major}.x already")
    GroupProfilePin.objects.update_or_create(
        group_id=ctx.group.id, profile_uri=uri, defaults={"major": major, "pinned_at": ctx.now}
    )
    ref = AggregateRef("group", ctx.group.id, ctx.group.revision)
    return Decision([Emit("ext.mwportal.extension.profile_pinned", ref, {"profileUri": uri, "major": major})], ref)


def understands(ctx: HandlerContext, name: str, value: dict[str, Any]) -> bool:
    """A critical extension ``name`` (a profile URI) is understood in this Group: registered in its
    Organization with the extension's major version, and that major pinned by the Group."""
    major = major_of(value.get("version"))
    if major is None or not ctx.group.id or not ctx.group.exists:
        return False
    pinned = GroupProfilePin.objects.filter(group_id=ctx.group.id, profile_uri=name, major=major).exists()
    return pinned and (
        ExtensionProfile.objects.filter(
            organization_id=ctx.group.organization_id, profile_uri=name, major=major
        ).exists()
    )


def pinned_profiles(group_id: str) -> tuple[str, Any]:
    """The Group's pinned profile majors for its snapshot state, so a Worker restored from a snapshot knows
    which critical extensions the Group understands (§16, §18)."""
    pins = GroupProfilePin.objects.filter(group_id=group_id).order_by("profile_uri")
    return "extensionProfiles", [{"profileUri": p.profile_uri, "major": p.major} for p in pins]


extension_profile_checks.append(understands)
snapshot_contributors.append(pinned_profiles)
