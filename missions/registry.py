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

Scope = Literal["mission", "admin", "any"]


@dataclass(frozen=True, slots=True)
class CommandSpec:
    type: str
    handler: Handler
    # "mission": the envelope's group is a Mission Group and the actor needs
    # an active Membership; "admin": the Organization's administrative Group,
    # readable by every Agent of the Organization.
    scope: Scope = "mission"
    # Membership roles (any of) the actor needs in a Mission Group.
    group_roles: frozenset[str] = frozenset()
    # Organization roles (any of) the actor needs; empty means none.
    org_roles: frozenset[str] = frozenset()
    # The aggregate kind ``target`` must name; None: the command takes no target.
    target: str | None = None
    # Compare-and-set is mandatory (MWP-EVT-007: Membership change, first
    # ownership, lease renewal, Approval): ``target.revision`` is required.
    cas: bool = False
    # The command creates the Group named by the envelope.
    creates_group: bool = False
    # Who may send it: Agents, the system actor, or both.
    actors: frozenset[str] = frozenset({"agent"})
    # The command authenticates itself (a signed session request in its body).
    self_authenticating: bool = False
    # Envelope extensions (URNs) the handler understands; any other extension
    # marked critical refuses the Command.
    extensions: frozenset[str] = frozenset()
    # Issued only by the server's own code paths (a view after it stored and
    # hashed the bytes, say), never accepted from a signed client: holding
    # bytes is proven only by sending them (issue 16). ``accept()`` refuses
    # an internal kind arriving with ``Auth.SIGNED`` or ``Auth.SELF``.
    internal: bool = False


_REGISTRY: dict[str, CommandSpec] = {}


def command(
    type_: str,
    *,
    scope: Scope = "mission",
    group_roles: tuple[str, ...] = (),
    org_roles: tuple[str, ...] = (),
    target: str | None = None,
    cas: bool = False,
    creates_group: bool = False,
    actors: tuple[str, ...] = ("agent",),
    self_authenticating: bool = False,
    extensions: tuple[str, ...] = (),
    internal: bool = False,
) -> Callable[[H], H]:
    """Register the decorated function as the handler of ``type_``."""

    def register(func: H) -> H:
        if type_ in _REGISTRY:
            raise RuntimeError(f"command {type_} is registered twice")
        _REGISTRY[type_] = CommandSpec(
            type=type_,
            handler=func,
            scope=scope,
            group_roles=frozenset(group_roles),
            org_roles=frozenset(org_roles),
            target=target,
            cas=cas,
            creates_group=creates_group,
            actors=frozenset(actors),
            self_authenticating=self_authenticating,
            extensions=frozenset(extensions),
            internal=internal,
        )
        return func

    return register


def spec_for(type_: str) -> CommandSpec | None:
    return _REGISTRY.get(type_)


def command_types() -> list[str]:
    return sorted(_REGISTRY)


# Called by ``agent.open_session`` inside its transaction with the handler
# context; each returns the consequences in other Groups (MWP-WRK-014: a
# replacement session revokes the Agent's leases everywhere).
SessionReplacedHook = Callable[[Any], list[tuple[Any, list[Any]]]]
session_replaced_hooks: list[SessionReplacedHook] = []


# Called by ``membership.remove`` inside its transaction with the handler
# context and the removed Agent's id; each returns Events for the same Group
# (the workitems app revokes the removed member's leases and ownership).
MembershipRemovedHook = Callable[[Any, str], list[Any]]
membership_removed_hooks: list[MembershipRemovedHook] = []


# Contributors to a Group snapshot's state: each returns ``(key, value)`` for
# the Group (the workitems app adds its WorkItems).
SnapshotContributor = Callable[[str], tuple[str, Any]]
snapshot_contributors: list[SnapshotContributor] = []
