"""Runaway controls (PROTOCOL §20): the Organization's cooperation limits, checked
inside the Command's transaction by the handlers that add work or traffic.

Each ``check_*`` takes the handler's context and the count the Command would
reach. Reaching a limit's soft threshold notifies the Coordinator: an
``ext.mwportal.governance.soft_threshold_reached`` Event joins the Command's
Events and the Policy Log records it. Going beyond the hard limit refuses the
Command as ``RATE_LIMITED`` (with ``retryAfterMs`` for a rate) and the Policy
Log keeps the decision, unless the Command cites a Cooperation Override Grant
for exactly that policy (``governance.overrides``), which its acceptance consumes.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from missions.authority import AggregateRef, Emit, HandlerContext
from missions.models import GroupEvent, Mission
from missions.policylog import Entry, PolicyRefusal
from mwportal.protocol import ErrorCode, ProtocolError

from .policy import limits

SOFT_THRESHOLD_REACHED = "ext.mwportal.governance.soft_threshold_reached"


def _mission_id(ctx: HandlerContext) -> str | None:
    found = Mission.objects.filter(group_id=ctx.group.id).values_list("id", flat=True).first()
    return str(found) if found else None


def _entry(ctx: HandlerContext, kind: str, name: str, detail: dict[str, Any]) -> Entry:
    return Entry(
        organization_id=ctx.group.organization_id or ctx.actor.organization_id,
        kind=kind,
        group_id=ctx.group.id or None,
        mission_id=_mission_id(ctx),
        policy_name=name,
        actor=ctx.actor.id,
        action_id=ctx.command.action_id,
        command_kind=ctx.command.kind,
        detail=detail,
    )


def enforce(ctx: HandlerContext, name: str, count: int, *, retry_after_ms: int | None = None) -> None:
    """``count`` is what the Command would make the policy's measure: refuse it beyond
    the hard limit (unless overridden), notify the Coordinator when it reaches the soft one."""
    limit = limits(ctx.group.organization_id or ctx.actor.organization_id)[name]
    hard, soft = limit["hard"], limit.get("soft")
    detail = {"count": count, "hard": hard, **({"soft": soft} if soft is not None else {})}
    if count > hard:
        grant = ctx.override
        if grant is not None and grant.policy_name == name:
            return  # the escalation granted for exactly this Command and policy (§20)
        error = ProtocolError(
            ErrorCode.RATE_LIMITED,
            f"the Organization's {name} limit of {hard} is reached ({count}); a Cooperation Override Grant"
            " for this Command or a later retry may proceed (§20)",
            details={"policyName": name, "limit": hard, "count": count, "reason": "cooperation-limit"},
            retry_after_ms=retry_after_ms,
            related_action_id=ctx.command.action_urn,
        )
        raise PolicyRefusal(error, [_entry(ctx, "limit_hit", name, detail)])
    if soft is not None and count >= soft > count - 1 and ctx.group.id:
        ctx.policy_records.append(_entry(ctx, "soft_threshold", name, detail))
        payload = {"policyName": name, "count": count, "soft": soft, "hard": hard, "actor": ctx.actor.principal}
        ctx.notices.append(
            Emit(SOFT_THRESHOLD_REACHED, AggregateRef("group", ctx.group.id, ctx.group.revision), payload)
        )


def _rate(ctx: HandlerContext, name: str, event_kind: str) -> None:
    window = timedelta(seconds=limits(ctx.group.organization_id)[name]["windowSeconds"])
    since = ctx.now - window
    recent = GroupEvent.objects.filter(
        group_id=ctx.group.id, type=event_kind, actor=ctx.actor.id, occurred_at__gt=since
    ).order_by("occurred_at")
    first = recent.values_list("occurred_at", flat=True).first()
    retry = None
    if first is not None:
        retry = max(1, int((first + window - ctx.now).total_seconds() * 1000))
    enforce(ctx, name, recent.count() + 1, retry_after_ms=retry)


def check_message_rate(ctx: HandlerContext) -> None:
    """``message.post``: the actor's Messages in this Group within the window, this one included."""
    _rate(ctx, "message_rate", "message.posted")


def check_proposal_rate(ctx: HandlerContext) -> None:
    """``work.propose``: the actor's proposals in this Group within the window, this one included."""
    _rate(ctx, "proposal_rate", "work.proposed")


def check_clarification_rounds(ctx: HandlerContext, unresolved: int) -> None:
    """An essential-ambiguity round on a WorkItem: ``unresolved`` rounds with this one."""
    enforce(ctx, "clarification_rounds", unresolved)


def check_queued_work_items(ctx: HandlerContext, queued: int) -> None:
    """The Mission's WorkItems waiting to execute, with the one this Command adds."""
    enforce(ctx, "queued_work_items", queued)


def check_active_work_items(ctx: HandlerContext, active: int) -> None:
    """The Mission's WorkItems executing, with the one this Command may set going."""
    enforce(ctx, "active_work_items", active)


def check_delegation_depth(ctx: HandlerContext, depth: int) -> None:
    """A new WorkItem ``depth`` levels below its Mission (1: no parent WorkItem)."""
    enforce(ctx, "delegation_depth", depth)


def normal_goal(goal: str) -> str:
    """Goals compared for decomposition: case and spacing do not make a goal new."""
    return " ".join(goal.casefold().split())


def check_decomposition(ctx: HandlerContext, goal: str, *, siblings: list[str], ancestors: list[str]) -> None:
    """Duplicate decomposition: a goal already proposed or authorized under the same parent
    (``siblings``); circular: a goal one of its ancestors already has (``ancestors``)."""
    mine = normal_goal(goal)
    enforce(ctx, "duplicate_decomposition", 1 + sum(normal_goal(g) == mine for g in siblings))
    enforce(ctx, "circular_decomposition", sum(normal_goal(g) == mine for g in ancestors))


__all__ = [
    "check_active_work_items",
    "check_clarification_rounds",
    "check_decomposition",
    "check_delegation_depth",
    "check_message_rate",
    "check_proposal_rate",
    "check_queued_work_items",
    "enforce",
]
