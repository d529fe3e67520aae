"""The one catalogue of the MWP 0.1 Command and Event kinds the project speaks (DESIGN §2).

One definition per kind: the core Command kinds of PROTOCOL §15.1 and Event
kinds of §15.2, the reference core's ``ext.missionweaveprotocol.*`` kinds, and
the project's own ``ext.mwportal.*`` kinds for what MWP 0.1 leaves to an
Extension Profile.  A Command definition says who may issue it, which epochs
and lease it carries, the aggregate it changes, whether it is compare-and-set
(``expectedRevision`` required) and which Event kinds it yields; every
definition carries its payload's JSON Schema 2020-12, compiled here with
jsonschema-rs against the kernel's object schemas.

``as_data()`` is what ``GET /api/v0.1/catalogue`` serves and OpenAPI embeds;
handlers, the Worker's fold and the tests read payload shapes from here.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import jsonschema_rs

from .. import schemas
from ..schemas import FORMATS, MAX_ERRORS, SchemaError
from . import commands_group, commands_work, events
from .commands_group import PROJECT
from .model import AGGREGATES, EPOCHS, ROLES, SCOPES, CommandDefinition, EventDefinition

__all__ = [
    "AGGREGATES",
    "COMMAND_KINDS",
    "EPOCHS",
    "EVENT_KINDS",
    "PROJECT",
    "ROLES",
    "CommandDefinition",
    "EventDefinition",
    "PayloadError",
    "UnknownKind",
    "as_data",
    "command",
    "command_kinds",
    "commands_yielding",
    "compile_all",
    "event",
    "event_kinds",
    "is_command",
    "is_event",
    "is_valid_payload",
    "validate_payload",
]


def _index(definitions: tuple[Any, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for definition in definitions:
        if definition.kind in out:
            raise RuntimeError(f"kind {definition.kind} is defined twice")
        out[definition.kind] = definition
    return out


_COMMANDS: dict[str, CommandDefinition] = _index((*commands_group.DEFINITIONS, *commands_work.DEFINITIONS))
_EVENTS: dict[str, EventDefinition] = _index(events.DEFINITIONS)

COMMAND_KINDS: tuple[str, ...] = tuple(sorted(_COMMANDS))
EVENT_KINDS: tuple[str, ...] = tuple(sorted(_EVENTS))


def _check_definitions() -> None:
    """The catalogue's own consistency: a broken entry is a programming error at import."""
    for cmd in _COMMANDS.values():
        missing = [kind for kind in cmd.events if kind not in _EVENTS]
        if missing:
            raise RuntimeError(f"{cmd.kind} yields unknown Event kinds {missing}")
        unknown = set(cmd.issuers) - set(ROLES)
        if unknown or set(cmd.epochs) != set(cmd.issuers):
            raise RuntimeError(f"{cmd.kind}: issuers and epochs disagree ({sorted(unknown)})")
        if any(name not in EPOCHS for names in cmd.epochs.values() for name in names):
            raise RuntimeError(f"{cmd.kind}: unknown epoch name")
    everything: list[CommandDefinition | EventDefinition] = [*_COMMANDS.values(), *_EVENTS.values()]
    for d in everything:
        if d.aggregate not in AGGREGATES or d.scope not in SCOPES:
            raise RuntimeError(f"{d.kind}: unknown aggregate {d.aggregate!r} or scope {d.scope!r}")


_check_definitions()


class UnknownKind(KeyError):
    """A kind the catalogue does not define."""


class PayloadError(SchemaError):
    """A payload its kind's schema refuses; ``errors`` name the member (``/payload/...``) and the rule."""


def command(kind: str) -> CommandDefinition:
    try:
        return _COMMANDS[kind]
    except KeyError:
        raise UnknownKind(f"no Command kind {kind!r} in the catalogue") from None


def event(kind: str) -> EventDefinition:
    try:
        return _EVENTS[kind]
    except KeyError:
        raise UnknownKind(f"no Event kind {kind!r} in the catalogue") from None


def is_command(kind: str) -> bool:
    return kind in _COMMANDS


def is_event(kind: str) -> bool:
    return kind in _EVENTS


@functools.cache
def commands_yielding(event_kind: str) -> tuple[str, ...]:
    """The Command kinds whose acceptance may append ``event_kind`` (what a fold can trace back)."""
    event(event_kind)
    return tuple(kind for kind in COMMAND_KINDS if event_kind in _COMMANDS[kind].events)


def command_kinds(*, aggregate: str | None = None, scope: str | None = None) -> tuple[str, ...]:
    """The Command kinds changing ``aggregate`` and/or in ``scope`` (all of them by default)."""
    return _select(_COMMANDS, aggregate, scope)


def event_kinds(*, aggregate: str | None = None, scope: str | None = None) -> tuple[str, ...]:
    """The Event kinds about ``aggregate`` and/or in ``scope``: what a projection of it folds."""
    return _select(_EVENTS, aggregate, scope)


def _select(definitions: dict[str, Any], aggregate: str | None, scope: str | None) -> tuple[str, ...]:
    if aggregate is not None and aggregate not in AGGREGATES:
        raise ValueError(f"no aggregate {aggregate!r} (one of {', '.join(AGGREGATES)})")
    if scope is not None and scope not in SCOPES:
        raise ValueError(f"no scope {scope!r} (one of {', '.join(SCOPES)})")
    return tuple(
        kind
        for kind in sorted(definitions)
        if (aggregate is None or definitions[kind].aggregate == aggregate)
        and (scope is None or definitions[kind].scope == scope)
    )


def _definition(kind: str) -> CommandDefinition | EventDefinition:
    """A kind names a Command or an Event, never both (past-tense facts, §15.2)."""
    found = _COMMANDS.get(kind) or _EVENTS.get(kind)
    if found is None:
        raise UnknownKind(f"no Command or Event kind {kind!r} in the catalogue")
    return found


@functools.cache
def _registry() -> Any:
    resources = [
        (schema["$id"], schema) for schema in (schemas.json_schema(n) for n in (schemas.COMMON, *schemas.NAMES))
    ]
    return jsonschema_rs.Registry(resources)


@functools.cache
def _validator(kind: str) -> Any:
    return jsonschema_rs.Draft202012Validator(
        _definition(kind).payload_schema,
        formats=FORMATS,
        validate_formats=True,
        ignore_unknown_formats=False,
        registry=_registry(),
    )


def _pointer(path: Any) -> str:
    return "".join(f"/{str(part).replace('~', '~0').replace('/', '~1')}" for part in path)


def validate_payload(kind: str, payload: Any) -> None:
    """Raise :class:`PayloadError` unless ``payload`` is a valid payload of ``kind``.

    :class:`UnknownKind` when the catalogue has no such kind.
    """
    validator = _validator(kind)
    try:
        if validator.is_valid(payload):
            return
        errors = []
        for error in validator.iter_errors(payload):
            errors.append(f"/payload{_pointer(error.instance_path)}: {error.message}")
            if len(errors) == MAX_ERRORS:
                break
    except ValueError as exc:
        raise PayloadError(kind, [f"/payload: not JSON data ({exc})"]) from None
    raise PayloadError(kind, errors)


def is_valid_payload(kind: str, payload: Any) -> bool:
    try:
        return bool(_validator(kind).is_valid(payload))
    except ValueError:
        return False


@functools.cache
def _data() -> dict[str, Any]:
    return {
        "commands": {kind: _COMMANDS[kind].as_data() for kind in COMMAND_KINDS},
        "events": {kind: _EVENTS[kind].as_data() for kind in EVENT_KINDS},
    }


def as_data() -> dict[str, Any]:
    """The catalogue as JSON data (DESIGN §5), a fresh copy the caller may change."""
    return copy.deepcopy(_data())


def compile_all() -> None:
    """Compile every payload validator now rather than on first use (a server at start-up)."""
    for kind in (*COMMAND_KINDS, *EVENT_KINDS):
        _validator(kind)
