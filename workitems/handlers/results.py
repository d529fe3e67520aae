"""Results and their review (PROTOCOL §10.2, §11.4, §11.5, §13.2): submission, late
results, acceptance, failure (a retryable one schedules the retry policy's re-offer), cancellation."""

from __future__ import annotations

from typing import Any

from missions.authority import Decision, Emit, HandlerContext, RefusedWithRecord, system_action_id
from missions.commands import group_service_command
from missions.registry import command
from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.ids import bare, is_portal_id, urn

from .. import state_machine as sm
from ..content import content
from ..evidence import check_evidence
from ..models import ExecutionLease, Submission, WorkItem
from ..wire import refuse
from .common import (
    AUTHORS_OF_RESULTS,
    COORDINATING,
    EXECUTING,
    charge_usage,
    check_lease,
    emit,
    end_item,
    end_lease,
    item_ref,
    load_item,
    save,
    schedule_retry,
    usage_recorded,
    work_item_id,
)

LATE_RESULT = "ext.mwportal.work.late_result_record"


def _late_result_record(ctx: HandlerContext, item: WorkItem, error: ProtocolError) -> RefusedWithRecord | None:
    """A fenced former owner's submission is refused, but kept as
    non-authoritative Evidence (§11.5: stored for audit, never completing the WorkItem)."""
    lease_id = ctx.payload.get("executionLeaseId")
    if not is_portal_id(lease_id):
        return None
    lease = ExecutionLease.objects.filter(
        id=bare(lease_id, "/payload/executionLeaseId"), workitem=item, agent_id=ctx.actor.id
    ).first()
    if lease is None:
        return None
    record = group_service_command(
        LATE_RESULT,
        ctx.group.id,
        {
            "workItemId": urn(item.id),
            "ownershipEpoch": lease.ownership_epoch,
            "artifactIds": list(ctx.payload.get("artifactIds") or []),
            "evidence": [e["evidenceId"] for e in ctx.payload.get("evidence") or []],
        },
        action_id=system_action_id("late-result", ctx.command.actor, ctx.command.action_id),
        issued_at=ctx.command.issued_at,
        work_item_id=str(item.id),
    )
    return RefusedWithRecord(error, record)


@command("work.submit", group_roles=EXECUTING)
def submit(ctx: HandlerContext) -> Decision:
    """Artifacts and Evidence mapped to every acceptance criterion (§10.2, §13.2); the lease is released."""
    item = load_item(ctx)
    try:
        sm.check_transition(item.state, "work.submit")
        lease = check_lease(ctx, item)
    except ProtocolError as error:
        late = _late_result_record(ctx, item, error)
        if late is not None:
            raise late from None
        raise
    artifacts = list(ctx.payload["artifactIds"])
    absent = content().absent_from_group(str(item.group_id), artifacts)
    if absent:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"/payload/artifactIds: no Artifacts {', '.join(absent)} in this Group",
            field="/payload/artifactIds",
            artifactIds=absent,
            reason="not_found",
        )
    evidence = check_evidence(ctx, item, ctx.payload["evidence"], cover_all=True, generated_by_actor=True)
    delta = ctx.payload.get("usageDelta") or {}
    charged = charge_usage(ctx, item, delta)
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
    events: list[Emit] = [usage_recorded(item, str(lease.id), delta, charged)] if charged is not None else []
    content().record_evidence(ctx, item, evidence, "submission", submission=submission, position=len(events))
    # The review pipeline (§13.2) reads the Artifacts' bytes: slow I/O, so it
    # runs after commit and records its results through accept().
    content().review_after_commit(str(item.id))
    submitted = {"workItemId": urn(item.id), "artifactIds": artifacts, "evidence": evidence}
    return Decision([*events, emit("work.submitted", item, submitted)], item_ref(item))


@command(LATE_RESULT, actors=("service",))
def record_late_result(ctx: HandlerContext) -> Decision:
    """Keep a fenced owner's late result for audit; it never completes the WorkItem (§11.5)."""
    item = WorkItem.objects.select_for_update().get(id=work_item_id(ctx), group_id=ctx.group.id)
    artifacts, evidence = list(ctx.payload["artifactIds"]), list(ctx.payload["evidence"])
    lease = (
        ExecutionLease.objects.filter(workitem=item, ownership_epoch=ctx.payload["ownershipEpoch"])
        .order_by("-started_at")
        .first()
    )
    if lease is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/ownershipEpoch: no Execution Lease was held under this Ownership Epoch",
            field="/payload/ownershipEpoch",
        )
    Submission.objects.create(
        workitem=item,
        agent_id=lease.agent_id,
        ownership_epoch=ctx.payload["ownershipEpoch"],
        lease_id=lease.id,
        artifacts=artifacts,
        evidence=evidence,
        authoritative=False,
        created_at=ctx.now,
    )
    payload = {
        "workItemId": urn(item.id),
        "ownershipEpoch": ctx.payload["ownershipEpoch"],
        "artifactIds": artifacts,
        "evidence": evidence,
    }
    return Decision([emit("ext.mwportal.work.late_result_recorded", item, payload)], item_ref(item))


@command("work.accept_result", group_roles=COORDINATING)
def accept_result(ctx: HandlerContext) -> Decision:
    """The Coordinator's review succeeds: ``verified`` (terminal for this revision, §10.2)."""
    item = load_item(ctx)
    sm.check_transition(item.state, "work.accept_result")
    evidence = check_evidence(ctx, item, ctx.payload["evidence"])
    if str(item.owner_id) == ctx.actor.id and all(e["generatedBy"]["id"] == urn(ctx.actor.id) for e in evidence):
        # §7.2: the Coordinator may execute work, but never solely reviews its own output.
        raise refuse(
            ErrorCode.AUTH_FORBIDDEN,
            "/payload/evidence: the Coordinator executed this WorkItem; an independent reviewer's Evidence is"
            " required, the Coordinator is never the sole reviewer of its own output (§7.2)",
            field="/payload/evidence",
            reason="sole-reviewer",
        )
    item.state = sm.VERIFIED
    save(item, ctx.now)
    content().record_evidence(ctx, item, evidence, "coordinator")
    payload = {"workItemId": urn(item.id), "evidence": evidence}
    return Decision([emit("work.result.accepted", item, payload)], item_ref(item))


@command("work.fail", group_roles=AUTHORS_OF_RESULTS)
def fail(ctx: HandlerContext) -> Decision:
    """Failure with Evidence (§10.2): by the Coordinator, or by the lease holder.

    A lease holder's failure cites its Ownership Epoch and Execution Lease
    (§11.3). Every failure is the table's ``work.fail`` row: the WorkItem is
    ``failed`` and control returns to the Coordinator. A lease holder may say
    ``retryable``: while the contract's attempts, deadline and budget allow
    (§11.4) the retry policy then re-offers it after the backoff, with a
    ``work.offer`` from ``failed`` (``schedule_retry``, ``workitems.tasks``).
    The Coordinator's failure is compare-and-set (§15.3).
    """
    item = load_item(ctx)
    worker = ctx.payload.get("executionLeaseId") is not None
    sm.check_transition(item.state, "work.fail")
    if worker:
        check_lease(ctx, item)
    else:
        if "coordinator" not in (ctx.actor.membership_roles or frozenset()):
            raise refuse(ErrorCode.AUTH_FORBIDDEN, "work.fail without a lease is the Coordinator's")
        if ctx.command.expected_revision is None:
            raise refuse(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                "expectedRevision: a Coordinator's work.fail is compare-and-set",
                field="expectedRevision",
            )
    records = ctx.payload.get("evidence")
    if not records:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            "/payload/evidence: failure Evidence is required (§10.2)",
            field="/payload/evidence",
            reason="evidence_required",
        )
    evidence = check_evidence(ctx, item, records, generated_by_actor=worker)
    reason = ctx.payload["reason"]
    retry = worker and bool(ctx.payload.get("retryable"))
    end_item(item, sm.FAILED, ctx.now, "failure")
    if retry:
        exhausted = schedule_retry(item, ctx.now)
        if exhausted is not None:
            reason = f"retries exhausted: {exhausted}"
    save(item, ctx.now)
    content().record_evidence(ctx, item, evidence, "failure")
    payload: dict[str, Any] = {"workItemId": urn(item.id), "reason": reason, "evidence": evidence}
    if item.attempt:
        payload["attempt"] = item.attempt
    return Decision([emit("work.failed", item, payload)], item_ref(item))


@command("work.cancel", group_roles=("mission_owner", "coordinator"))
def cancel(ctx: HandlerContext) -> Decision:
    """Cancellation revokes the lease and withdraws the offers (§10.2, §12)."""
    item = load_item(ctx)
    sm.check_transition(item.state, "work.cancel")
    end_item(item, sm.CANCELLED, ctx.now, "cancelled")
    save(item, ctx.now)
    payload = {"workItemId": urn(item.id), "reason": ctx.payload["reason"]}
    return Decision([emit("work.cancelled", item, payload)], item_ref(item))
