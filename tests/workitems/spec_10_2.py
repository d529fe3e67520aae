"""The WorkItem state machine of PROTOCOL §10.2, written out from the specification.

This module is the oracle of the §10.2 tests: the rows below are the
specification's table, copied row by row (current states, transition, next
states), never read from ``workitems.state_machine``. ``violations()`` checks a
transition table of the code's shape against them; the REST tests check the
running Group Authority against them.
"""

from __future__ import annotations

from collections.abc import Mapping

NONE = "none"
PROPOSAL = "open Work Proposal"
STATES = ("open", "offered", "queued", "active", "blocked", "submitted", "verified", "failed", "cancelled")
UNFINISHED = ("open", "offered", "queued", "active", "blocked", "submitted")
# §10.2: no transition leaves `verified` or `cancelled` within the same WorkItem revision.
TERMINAL = ("verified", "cancelled")

# PROTOCOL §10.2, in the table's order: (current states, transition, next states).
ROWS: tuple[tuple[tuple[str, ...], str, tuple[str, ...]], ...] = (
    ((NONE,), "work.propose", (PROPOSAL,)),
    ((NONE, PROPOSAL), "work.authorize", ("open",)),
    (("open", "offered", "queued", "active", "blocked", "failed"), "work.offer", ("offered",)),  # no live owner
    (("offered",), "work.accept_offer", ("queued",)),
    (("offered",), "offer expiry", ("offered",)),  # no Event, acceptance invalidated
    (("queued",), "approval.grant_execution", ("queued",)),  # when required
    (("queued",), "work.start", ("active",)),
    (("active",), "work.checkpoint", ("queued",)),
    (("active",), "work.block", ("blocked",)),
    (("blocked",), "work.unblock", ("queued", "open")),
    (("active",), "work.submit", ("submitted",)),
    (("submitted",), "work.accept_result", ("verified",)),
    (("open", "offered", "queued", "active", "blocked", "submitted"), "work.fail", ("failed",)),
    (("open", "offered", "queued", "active", "blocked", "submitted"), "work.cancel", ("cancelled",)),
    (("open", "offered", "queued", "active", "blocked"), "mission.create_child", ("blocked",)),
    (("blocked",), "linked child Mission approval", ("verified",)),
    (("blocked",), "linked child Mission failure", ("blocked", "failed")),
    (
        ("open", "offered", "queued", "active", "blocked", "submitted"),
        "parent Mission failure or cancellation",
        ("failed", "cancelled"),
    ),
)
# The rows with a Command of their own (the transition is its kind).
COMMAND_ROWS = {name: (froms, tos) for froms, name, tos in ROWS if "." in name and " " not in name}

# PROTOCOL §11.3: when an Agent opens a replacement Session, its active leases are revoked and the
# WorkItems they covered go back to `queued` (the table's active -> queued edge).
SESSION_REPLACEMENT_11_3: tuple[tuple[str, ...], tuple[str, ...]] = (("active",), ("queued",))

# How the code's table names the rows that have no Command (its internal names; the
# states are the specification's). A parent Mission's end is two names: one per outcome.
CODE_NAMES = {
    "child.approved": ("linked child Mission approval", None),
    "child.failed": ("linked child Mission failure", None),
    "parent.failed": ("parent Mission failure or cancellation", "failed"),
    "parent.cancelled": ("parent Mission failure or cancellation", "cancelled"),
    "lease.revoke": ("§11.3 session replacement", None),
}

Table = Mapping[tuple[str | None, str], frozenset[str]]


def _spec_targets(state: str, name: str) -> frozenset[str] | None:
    """The next states §10.2 (or §11.3) gives for ``name`` from ``state``; None: not a row."""
    row_name, outcome = CODE_NAMES.get(name, (name, None))
    if row_name == "§11.3 session replacement":
        return frozenset(SESSION_REPLACEMENT_11_3[1]) if state in SESSION_REPLACEMENT_11_3[0] else None
    for froms, transition, tos in ROWS:
        if transition == row_name and state in froms:
            return frozenset(tos if outcome is None else (outcome,))
    return None


def violations(table: Table, project_kinds: frozenset[str]) -> list[str]:
    """Every way ``table`` departs from §10.2: a (state, transition) pair the specification
    does not list, a next state it does not give, a row it lacks, a way out of a
    terminal state. ``project_kinds`` are the project's own kinds (§15.1: outside the
    core table), which may only keep a non-terminal state where it is."""
    found: list[str] = []
    core = {name for _, name, _ in ROWS}
    for (state, name), targets in sorted(table.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        where = NONE if state is None else state
        if where in TERMINAL:
            found.append(f"{where} is terminal (§10.2), yet {name} leads out of it to {sorted(targets)}")
            continue
        if name in project_kinds:
            if targets != {where}:
                found.append(f"{name} is no §10.2 row, yet changes {where} to {sorted(targets)}")
            continue
        if name not in core and name not in CODE_NAMES:
            found.append(f"{where} --{name}--> {sorted(targets)}: {name} is no §10.2 transition")
            continue
        spec = _spec_targets(where if state is not None else NONE, name)
        if spec is None:
            found.append(f"{where} --{name}--> {sorted(targets)} is not a §10.2 row")
        elif targets != spec:
            found.append(f"{where} --{name}--> {sorted(targets)}: §10.2 gives {sorted(spec)}")
    for froms, name, tos in ROWS:
        names = [n for n, (row, _) in CODE_NAMES.items() if row == name] or [name]
        for state in froms:
            key = None if state in (NONE, PROPOSAL) else state
            if name in ("work.propose", "offer expiry"):
                continue  # no WorkItem yet / no state change: not entries of a WorkItem table
            if not any((key, n) in table for n in names):
                found.append(f"the §10.2 row {state} --{name}--> {list(tos)} is missing")
    return found
