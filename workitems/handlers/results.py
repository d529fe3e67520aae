"""Results and their review (spec 11.4, 13.2): submission, late results, acceptance, failure, retry, cancellation."""

from __future__ import annotations

from typing import Any

from missions.authority import (
    Decision,
    Emit,
    HandlerContext,
    RefusedWithRecord,
    system_action_id,
)
from missions.guards import check_members, check_text, refuse
from missions.registry import command
from mwportal.protocol import ErrorCode, ProtocolError, format_time, malformed

from .. import state_machine as sm
from ..content import content
from ..contract import criteria_ids
from ..guards import (
    check_evidence_list,
    check_sha256,
    check_usage,
)
from ..models import ExecutionLease, Submission, WorkItem
from .common import (
    COORDINATING,
    EXECUTING,
    active_lease,
    backoff,
    charge_usage,
    check_lease,
    check_retry_allowed,
    check_role,
    end_item,
    end_lease,
    item_ref,
    load_item,
    save,
    seconds,
)


def _late_result_record(ctx: HandlerContext, item: WorkItem, error: ProtocolError) -> RefusedWithRecord | None:
    """A fenced former owner's submission is refused, but kept as
    non-authoritative Evidence (spec 11.5; MWP-WRK-019)."""
    env = ctx.envelope
    if (
        env.lease_id is None
        or not ExecutionLease.objects.filter(id=env.lease_id, workitem=item, agent_id=ctx.actor.id).exists()
    ):
        return None
    from missions.commands import system_command

    record = system_command(
        "work.record_late_result", ctx.group.id,
        {"workitem": str(item.id), "agent": ctx.actor.id, "lease_id": env.lease_id,
         "ownership_epoch": env.ownership_epoch, "artifacts": env.body.get("artifacts", []),
         "evidence": env.body.get("evidence", []), "refused": str(error.code)},
        action_id=system_action_id("late-result", env.actor, env.action_id), issued_at=env.issued_at,
    )  # fmt: skip
    return RefusedWithRecord(error, record)


@command("work.submit", group_roles=EXECUTING)
def submit(ctx: HandlerContext) -> Decision:
    """Artifacts and Evidence mapped to every acceptance criterion (spec 13.2)."""
    item = load_item(ctx)
    try:
        sm.check_transition(item.state, "work.submit")
        lease = check_lease(ctx, item)
    except ProtocolError as error:
        late = _late_result_record(ctx, item, error)
        if late is not None:
            raise late from None
        raise
    check_members(ctx.body, ["artifacts", "evidence"], ["usage"])
    artifacts, evidence = check_submission(ctx.body, item)
    usage = charge_usage(ctx, item, check_usage(ctx.body.get("usage")))
    end_lease(lease, "released", "submitted", ctx.now)
    submission = Submission.objects.create(
        workitem=item,
        agent_id=ctx.actor.id,
        ownership_epoch=item.ownership_epoch,
        lease_id=lease.id,
        artifacts=artifacts,
        evidence=evidence,
        authoritative=True,
        created_at=ctx.now,
    )
    item.state = sm.SUBMITTED
    item.owner_expires_at = None
    save(item, ctx.now)
    content().record_evidence(ctx, item, evidence, "submission", submission=submission)
    # The review pipeline (spec 13.2) reads the Artifacts' bytes: slow I/O,
    # so it runs after commit and records its results through accept().
    content().review_after_commit(str(item.id))
    body = {"lease_id": str(lease.id), "artifacts": artifacts, "evidence": evidence, "usage": usage}
    return Decision([Emit("work.submitted", item_ref(item), body)], item_ref(item))


def check_submission(body: dict[str, Any], item: WorkItem) -> tuple[list[str], list[dict[str, Any]]]:
    artifacts = body["artifacts"]
    if not isinstance(artifacts, list):
        raise malformed("body.artifacts", "must be a list of SHA-256 hashes")
    for i, sha in enumerate(artifacts):
        check_sha256(sha, f"body.artifacts.{i}")
    evidence = check_evidence_list(body["evidence"], "body.evidence", required=True)
    known = criteria_ids(item.contract)
    for i, record in enumerate(evidence):
        for c in record["criteria"]:
            if c not in known:
                raise malformed(f"body.evidence.{i}.criteria", f"{c!r} is not an acceptance criterion of the contract")
    covered = {c for record in evidence for c in record["criteria"]}
    missing = [c for c in known if c not in covered]
    if missing:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            f"no Evidence for acceptance criteria {', '.join(missing)}",
            criteria=missing,
            reason="evidence_required",
        )
    cited = sorted({sha for record in evidence for sha in record["artifacts"]} | set(artifacts))
    # In the store, and held by this Group: another Mission's content never
    # enters this one by default (spec 13.3).
    absent = content().absent_from_group(str(item.group_id), cited) if cited else []
    if absent:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"Artifacts not held by this Group: {', '.join(absent)}",
            artifacts=absent,
            reason="not_found",
        )
    return artifacts, evidence


@command("work.record_late_result", actors=("system",))
def record_late_result(ctx: HandlerContext) -> Decision:
    """Keep a fenced owner's late result for audit; it never completes the WorkItem."""
    body = ctx.body
    item = WorkItem.objects.select_for_update().get(id=body["workitem"], group_id=ctx.group.id)
    artifacts = [a for a in body.get("artifacts") or [] if isinstance(a, str)]
    evidence = body.get("evidence") if isinstance(body.get("evidence"), list) else []
    Submission.objects.create(
        workitem=item,
        agent_id=body["agent"],
        ownership_epoch=body.get("ownership_epoch") or 0,
        lease_id=body["lease_id"],
        artifacts=artifacts,
        evidence=evidence,
        authoritative=False,
        created_at=ctx.now,
    )
    event = {
        "agent": body["agent"],
        "lease_id": body["lease_id"],
        "artifacts": artifacts,
        "evidence": evidence,
        "refused": body["refused"],
        "authoritative": False,
    }
    return Decision([Emit("work.late_result_recorded", item_ref(item), event)], item_ref(item))


@command("work.accept_result", group_roles=COORDINATING, cas=True)
def accept_result(ctx: HandlerContext) -> Decision:
    """Coordinator review succeeds: ``verified`` (terminal for this revision)."""
    check_members(ctx.body, ["evidence"])
    item = load_item(ctx)
    sm.check_transition(item.state, "work.accept_result")
    evidence = check_evidence_list(ctx.body["evidence"], "body.evidence", required=True)
    item.state = sm.VERIFIED
    save(item, ctx.now)
    content().record_evidence(ctx, item, evidence, "coordinator")
    return Decision([Emit("work.result_accepted", item_ref(item), {"evidence": evidence})], item_ref(item))


@command("work.fail")
def fail(ctx: HandlerContext) -> Decision:
    """Failure with Evidence: by a Coordinator, or by the lease holder.

    A lease holder may mark the failure ``retryable``; while the contract's
    attempts, deadline and cost allow (spec 11.4), the execution ends and the
    WorkItem waits in its queue for the next attempt after the backoff.
    Exhaustion ends in ``work.failed`` with the Evidence.
    """
    check_members(ctx.body, ["evidence"], ["retryable"])
    item = load_item(ctx)
    worker = ctx.envelope.lease_id is not None
    sm.check_transition(item.state, "work.fail")
    if worker:
        check_lease(ctx, item)
    else:
        check_role(ctx, COORDINATING)
        if ctx.envelope.target is None or ctx.envelope.target.revision is None:
            raise malformed("target.revision", "a Coordinator's work.fail is compare-and-set")
    evidence = check_evidence_list(ctx.body["evidence"], "body.evidence", required=True)
    retryable = ctx.body.get("retryable", False)
    if not isinstance(retryable, bool):
        raise malformed("body.retryable", "must be true or false")
    body: dict[str, Any] = {"evidence": evidence, "attempt": item.attempt}
    if worker and retryable:
        try:
            check_retry_allowed(item, ctx.now)
        except ProtocolError as exhausted:
            body["reason"] = f"retries exhausted: {exhausted.message}"
        else:
            return _schedule_retry(ctx, item, evidence, "failure reported")
    end_item(item, sm.FAILED, ctx.now, "failure")
    save(item, ctx.now)
    content().record_evidence(ctx, item, evidence, "failure")
    return Decision([Emit("work.failed", item_ref(item), body)], item_ref(item))


def _schedule_retry(ctx: HandlerContext, item: WorkItem, evidence: list[Any], reason: str) -> Decision:
    sm.check_transition(item.state, "work.retry")
    end_lease(active_lease(item), "revoked", reason, ctx.now)
    item.state = sm.QUEUED
    item.needs_new_attempt = True
    item.retry_not_before = ctx.now + backoff(item)
    item.start_by = item.retry_not_before + seconds("MWP_START_BY_SECONDS")
    item.owner_expires_at = item.start_by
    save(item, ctx.now)
    body = {
        "evidence": evidence,
        "attempt": item.attempt,
        "retry_not_before": format_time(item.retry_not_before),
        "start_by": format_time(item.start_by),
        "reason": reason,
    }
    content().record_evidence(ctx, item, evidence, "failure")
    return Decision([Emit("work.attempt_failed", item_ref(item), body)], item_ref(item))


@command("work.cancel", group_roles=COORDINATING, cas=True)
def cancel(ctx: HandlerContext) -> Decision:
    check_members(ctx.body, ["reason"])
    reason = check_text(ctx.body, "reason", max_length=2000)
    item = load_item(ctx)
    sm.check_transition(item.state, "work.cancel")
    end_item(item, sm.CANCELLED, ctx.now, "cancelled")
    save(item, ctx.now)
    return Decision([Emit("work.cancelled", item_ref(item), {"reason": reason})], item_ref(item))
