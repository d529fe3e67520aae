"""The handler registry: one ``CommandSpec`` per command type.

Each app registers its handlers with ``@command(...)`` in its ``handlers.py``;
``accept()`` looks the spec up, performs the generic checks it declares
(scope, roles, target kind, compare-and-set) and then calls the handler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

# The registry sits below ``authority`` (which looks specs up here), so it
# names no type of authority's: a handler is any ``(HandlerContext) ->
# Decision``, checked where it is written and where ``accept()`` calls it.
Handler = Callable[[Any], Any]
H = TypeVar("H", bound=Handler)

Scope = Literal["mission", "admin", "any", "organization"]


@dataclass(frozen=True, slots=True)
class CommandSpec:
    # The catalogue's Command kind (``mwportal.protocol.catalogue``); the
    # payload's shape, compare-and-set and the Event kinds it yields are the
    # catalogue's, not repeated here.
    kind: str
    handler: Handler
    # "mission": the Command's Group is a Mission Group and the actor needs
    # an active Membership; "admin": the Organization's administrative Group,
    # where every Principal of the Organization is a member (Membership
    # Epoch 1); "any": either; "organization": no Group at all (§15.1's
    # Organization-scoped bootstrap Commands).
    scope: Scope = "mission"
    # Membership roles (any of) the actor needs in a Mission Group.
    group_roles: frozenset[str] = frozenset()
    # Organization roles (any of) the actor needs; empty means none.
    org_roles: frozenset[str] = frozenset()
    # Compare-and-set: ``expectedRevision`` is required (the catalogue's
    # ``compare_and_set``, or the handler's own fence, MWP-EVT-007).
    cas: bool = False
    # The command creates the Group named by ``groupId``.
    creates_group: bool = False
    # Who may send it, by actor type: "agent", "human", "service".
    actors: frozenset[str] = frozenset({"agent", "human"})
    # The handler creates the actor itself (the Organization's bootstrap:
    # its control plane does not exist before the Organization does).
    bootstrap: bool = False
    # Envelope extensions (URNs) the handler understands; any other extension
    # marked critical refuses the Command.
    extensions: frozenset[str] = frozenset()
    # Issued only by the server's own code paths (a view after it stored and
    # hashed the bytes, say), never accepted from a client: holding bytes is
    # proven only by sending them (issue 16). ``accept()`` refuses an
    # internal kind that does not come from the control plane in-process.
    internal: bool = False

    @property
    def type(self) -> str:
        return self.kind


_REGISTRY: dict[str, CommandSpec] = {}


def command(
    kind: str,
    *,
    scope: Scope = "mission",
    group_roles: tuple[str, ...] = (),
    org_roles: tuple[str, ...] = (),
    cas: bool = False,
    creates_group: bool = False,
    actors: tuple[str, ...] = ("agent", "human"),
    bootstrap: bool = False,
    extensions: tuple[str, ...] = (),
    internal: bool = False,
) -> Callable[[H], H]:
    """Register the decorated function as the handler of the catalogue's ``kind``."""
    from mwportal.protocol import catalogue

    definition = catalogue.command(kind)  # UnknownKind: only the catalogue's kinds are spoken
    unknown = set(actors) - {"agent", "human", "service"}
    if unknown:
        raise ValueError(f"{kind}: unknown actor types {sorted(unknown)}")

    def register(func: H) -> H:
        if kind in _REGISTRY:
            raise RuntimeError(f"command {kind} is registered twice")
        _REGISTRY[kind] = CommandSpec(
            kind=kind,
            handler=func,
            scope="organization" if definition.scope == "organization" else scope,
            group_roles=frozenset(group_roles),
            org_roles=frozenset(org_roles),
            cas=cas or definition.compare_and_set,
            creates_group=creates_group,
            actors=frozenset(actors),
            bootstrap=bootstrap,
            extensions=frozenset(extensions),
            internal=internal,
        )
        return func

    return register


def spec_for(type_: str) -> CommandSpec | None:
    return _REGISTRY.get(type_)


def command_types() -> list[str]:
    return sorted(_REGISTRY)


# Called by ``ext.missionweaveprotocol.identity.session_open`` inside its transaction with the handler
# context, the Agent's id and its new Session Epoch; each returns the consequences in other Groups (MWP-WRK-014: a
# replacement session revokes the Agent's leases everywhere).
SessionReplacedHook = Callable[[Any, str, int], list[tuple[Any, list[Any]]]]
session_replaced_hooks: list[SessionReplacedHook] = []


# Called by ``ext.missionweaveprotocol.registry.agent_card_register`` inside its transaction with the handler
# context, the Agent's id, its new card version and that card's capabilities; each returns the consequences in
# other Groups (§6.1: an incompatible upgrade checkpoints the Agent's active work and needs renewed acceptance).
CardRegisteredHook = Callable[[Any, str, int, list[dict[str, Any]]], list[tuple[Any, list[Any]]]]
card_registered_hooks: list[CardRegisteredHook] = []


# Called by ``membership.end`` inside its transaction with the handler
# context and the removed Agent's id; each returns Events for the same Group
# (the workitems app revokes the removed member's leases and ownership).
MembershipRemovedHook = Callable[[Any, str], list[Any]]
membership_removed_hooks: list[MembershipRemovedHook] = []


# Contributors to a Group snapshot's state: each returns ``(key, value)`` for
# the Group (the workitems app adds its WorkItems).
SnapshotContributor = Callable[[str], tuple[str, Any]]
snapshot_contributors: list[SnapshotContributor] = []


# Called by ``accept()`` inside the transaction, after the generic checks and
# before the handler, with the ``HandlerContext``; each raises ``ProtocolError``
# to refuse (governance verifies a cited Cooperation Override Grant, §20, and
# sets ``ctx.override``).
CommandCheck = Callable[[Any], None]
before_handler_hooks: list[CommandCheck] = []


# Called by ``accept()`` inside the transaction once the Command's Events are
# appended, with the context and the receipt (its Events' IDs): governance
# consumes the cited Cooperation Override Grant, linked to the accepted Event.
AcceptedHook = Callable[[Any, dict[str, Any]], None]
accepted_hooks: list[AcceptedHook] = []


# Called after ``ext.missionweaveprotocol.core.group_archive`` commits, with the
# archived Group's id (the artifacts app seals its encrypted audit archive, §7.4).
GroupArchivedHook = Callable[[str], None]
group_archived_hooks: list[GroupArchivedHook] = []


# Asked by ``accept()`` for each critical extension a Command carries that its handler does not declare,
# with the context, the extension's name (the profile URI) and its value; True when a profile the
# Organization registered and the Group pinned covers it (governance, §18). None: UNKNOWN_CRITICAL_EXTENSION.
ExtensionProfileCheck = Callable[[Any, str, dict[str, Any]], bool]
extension_profile_checks: list[ExtensionProfileCheck] = []


# Called by ``accept()`` inside the transaction once the handler decided, with the context and the
# ``Decision``; each may add Events and notices to it (a just-in-time Membership whose member has no
# obligation left ends with the Command that released it, §8 step 4).
DecidedHook = Callable[[Any, Any], None]
decided_hooks: list[DecidedHook] = []

# Asked whether an Agent still has obligations in a Group (a WorkItem it owns that is not finished, an
# open offer to it), with the Agent's and the Group's bare IDs; the work app answers (§8 step 4).
ObligationCheck = Callable[[str, str], bool]
obligation_checks: list[ObligationCheck] = []
