"""The WorkItem transition table of PROTOCOL §10.2, as data.

``TRANSITIONS[(state, transition)]`` is the set of states the transition may
lead to. ``check_transition()`` is the one guard every WorkItem handler calls
first: anything the table does not list is INVALID_STATE_TRANSITION (§10.2
refuses every transition outside the table).

Rows that the table gives as conditions ("with no live owner", "when
required") are checked by the handlers; the table says only which states a
transition may start from and end in. Transitions with no Command of their own
(expiry, child-Mission and parent-Mission propagation) are named here too, so
that every state change of a WorkItem is a row of this table.
"""

from __future__ import annotations

from mwportal.protocol import ErrorCode, ProtocolError

OPEN = "open"
OFFERED = "offered"
QUEUED = "queued"
ACTIVE = "active"
BLOCKED = "blocked"
SUBMITTED = "submitted"
VERIFIED = "verified"
FAILED = "failed"
CANCELLED = "cancelled"

STATES = (OPEN, OFFERED, QUEUED, ACTIVE, BLOCKED, SUBMITTED, VERIFIED, FAILED, CANCELLED)
TERMINAL = frozenset({VERIFIED, CANCELLED})
# Unfinished: what a terminal Mission state propagates to (§10.2, last row).
UNFINISHED = frozenset({OPEN, OFFERED, QUEUED, ACTIVE, BLOCKED, SUBMITTED})

_OFFERABLE = (OPEN, OFFERED, QUEUED, ACTIVE, BLOCKED, FAILED)
_ENDABLE = (OPEN, OFFERED, QUEUED, ACTIVE, BLOCKED, SUBMITTED)
_CHILDABLE = (OPEN, OFFERED, QUEUED, ACTIVE, BLOCKED)

RENEW = "ext.missionweaveprotocol.core.work_execution_lease_renew"
USAGE = "ext.missionweaveprotocol.core.resource_usage_record"
DEPENDENCY_ADD = "ext.missionweaveprotocol.core.work_dependency_add"
DECLINE = "ext.mwportal.work.offer_decline"

_ROWS: list[tuple[tuple[str, ...], str, tuple[str, ...]]] = [
    # (from states, transition, to states); Command rows are named by their catalogue kind.
    ((), "work.authorize", (OPEN,)),  # from none or an open Work Proposal
    (_OFFERABLE, "work.offer", (OFFERED,)),  # only with no live owner
    ((OFFERED,), "work.accept_offer", (QUEUED,)),
    # A decline is not a core transition (§15.1): it closes one offer only.
    ((OFFERED,), DECLINE, (OFFERED,)),
    ((QUEUED,), "approval.grant_execution", (QUEUED,)),  # only when the contract requires it
    ((QUEUED,), "work.start", (ACTIVE,)),
    ((ACTIVE,), RENEW, (ACTIVE,)),
    ((ACTIVE,), USAGE, (ACTIVE,)),
    # A new edge revises the contract (§10.4) before execution begins, in
    # place: an owner must accept the revised contract again (§10.1).
    *(((state,), DEPENDENCY_ADD, (state,)) for state in (OPEN, OFFERED, QUEUED, BLOCKED, FAILED)),
    ((ACTIVE,), "work.checkpoint", (QUEUED,)),
    ((ACTIVE,), "work.block", (BLOCKED,)),
    ((BLOCKED,), "work.unblock", (QUEUED, OPEN)),  # open once ownership expired
    ((ACTIVE,), "work.submit", (SUBMITTED,)),
    ((SUBMITTED,), "work.accept_result", (VERIFIED,)),
    # Every failed attempt, a Worker's retryable one too, is this row; an
    # automatic retry (§11.4) is then a ``work.offer`` from ``failed`` by the
    # Organization's retry policy (docs/protocol-choices.md).
    (_ENDABLE, "work.fail", (FAILED,)),
    (_ENDABLE, "work.cancel", (CANCELLED,)),
    (_CHILDABLE, "mission.create_child", (BLOCKED,)),
    ((BLOCKED,), "child.approved", (VERIFIED,)),
    ((BLOCKED,), "child.failed", (BLOCKED, FAILED)),  # by the declared child-failure policy
    (_ENDABLE, "parent.failed", (FAILED,)),
    (_ENDABLE, "parent.cancelled", (CANCELLED,)),
    # Expiry (§11.3, §11.5) keeps the state where it is, like offer expiry:
    # a timed-out Execution Lease leaves an active WorkItem with no lease (its
    # owner may still reconcile buffered progress within the grace window,
    # then checkpoint); a missed start-by deadline or the end of the bounded
    # blocked lease fences the owner. The work.offer row ("with no live owner")
    # then applies; a spent retry policy ends in the work.fail row.
    ((ACTIVE,), "expire.lease", (ACTIVE,)),
    ((QUEUED,), "expire.start_by", (QUEUED,)),
    ((BLOCKED,), "expire.blocked_lease", (BLOCKED,)),
    # Session replacement revokes the Agent's leases and returns the WorkItems
    # to queued (§11.3 says so in as many words): the active -> queued edge of
    # the table, as work.checkpoint, with the ownership kept.
    ((ACTIVE,), "lease.revoke", (QUEUED,)),
]

TRANSITIONS: dict[tuple[str | None, str], frozenset[str]] = {}
for _froms, _name, _tos in _ROWS:
    for _state in _froms or (None,):
        TRANSITIONS[(_state, _name)] = frozenset(_tos)

TRANSITION_NAMES = frozenset(name for _, name, _ in _ROWS)


def allowed(state: str | None, transition: str) -> frozenset[str]:
    """The states ``transition`` may lead to from ``state`` (empty: not permitted)."""
    return TRANSITIONS.get((state, transition), frozenset())


def check_transition(state: str | None, transition: str, to: str | None = None) -> None:
    """INVALID_STATE_TRANSITION unless the table permits ``transition`` from ``state`` (to ``to``)."""
    targets = allowed(state, transition)
    if not targets or (to is not None and to not in targets):
        where = "a new WorkItem" if state is None else f"a WorkItem in state {state!r}"
        raise ProtocolError(
            ErrorCode.INVALID_STATE_TRANSITION,
            f"{transition} is not permitted for {where}",
            details={"state": state, "transition": transition},
        )
