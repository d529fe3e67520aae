"""``message.post``, ``message.correct``, ``message.retract``, ``message.redact`` (PROTOCOL §9, §9.1, §7.4).

Any member of the Group posts in its planning Conversation or a WorkItem's.
A Message is context, never authority: its document says ``authority: false``
and nothing reads it as an assignment. An accepted Message is immutable: its
author corrects or retracts it, the MissionOwner or the Coordinator redacts it
with an auditable policy reason, each time by a new Event that references the
original Message ID. After a redaction every read path serves the Message's
Events in their withheld form (``missions.withholding``).

Content is text, Artifact references (by hash) and structured data; large
binary data travels as an Artifact, so a Message's content is bounded
(``MWP_MESSAGE_MAX_BYTES`` of JCS). An essential ambiguity (§10.1) is a
Message in the WorkItem's Conversation whose content carries the structured
item ``{"type": "data_ref", "schema": AMBIGUITY_SCHEMA, "data": {"questions":
[...], "fields": [...]}}``; from then on no candidate accepts the WorkItem
until the Coordinator offers a corrected contract (a higher revision) or
authorizes a replacement.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings

from governance.limits import check_clarification_rounds, check_message_rate
from missions.authority import AggregateRef, Decision, Emit, HandlerContext
from missions.guards import refuse
from missions.handlers.common import principal_in, stamp
from missions.models import Mission
from missions.policylog import Entry
from missions.registry import command
from missions.withholding import MESSAGE_REDACTED
from mwportal.protocol import ErrorCode, jcs
from mwportal.protocol.catalogue.commands_group import ESSENTIAL_AMBIGUITY
from mwportal.protocol.ids import bare, urn
from workitems import hooks
from workitems.models import Offer, WorkItem

from .documents import Where, find
from .models import Ambiguity, Message, MessageAmendment

# The structured content item that marks an essential ambiguity (§10.1).
AMBIGUITY_SCHEMA = ESSENTIAL_AMBIGUITY
MESSAGE_MAX_BYTES = 256 * 1024
# A Message's author amends it; a redaction is a policy act of these roles (the catalogue's issuers).
REDACTORS = ("mission_owner", "coordinator")


def _max_bytes() -> int:
    return int(getattr(settings, "MWP_MESSAGE_MAX_BYTES", MESSAGE_MAX_BYTES))


def _content(value: Any, field: str) -> list[dict[str, Any]]:
    """The content as ``message.schema.json`` has it (a bare string is one text item), within the size bound."""
    items: list[dict[str, Any]] = [{"type": "text", "text": value}] if isinstance(value, str) else list(value)
    size = len(jcs.canonicalize(items))
    if size > _max_bytes():
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"{field}: {size} bytes of content; a Message holds at most {_max_bytes()}, larger data travels"
            " as an Artifact reference (§9)",
            field=field,
            reason="too_large",
        )
    return items


def _message_doc(ctx: HandlerContext, where: Where, message_id: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    mission_id = Mission.objects.values_list("id", flat=True).get(group_id=ctx.group.id)
    doc: dict[str, Any] = {
        "messageId": urn(message_id),
        "missionId": urn(mission_id),
        "groupId": urn(ctx.group.id),
        "conversationId": urn(where.conversation_id),
        "author": ctx.actor.principal,
        "kind": "message",
        "authority": False,
        "content": content,
        "committedAt": stamp(ctx.now),
    }
    for name in ("mentions", "references"):
        if ctx.payload.get(name):
            doc[name] = ctx.payload[name]
    return doc


def _ambiguity(content: list[dict[str, Any]]) -> dict[str, Any] | None:
    marks = [i for i in content if i.get("type") == "data_ref" and i.get("schema") == AMBIGUITY_SCHEMA]
    return marks[0] if marks else None


def _check_ambiguity(ctx: HandlerContext, where: Where, mark: dict[str, Any], index: int) -> WorkItem:
    """An essential ambiguity names the WorkItem's contract members and comes from a candidate before acceptance."""
    field = f"/payload/content/{index}/data"
    data = mark["data"]
    questions = data.get("questions") if isinstance(data, dict) else None
    if not isinstance(questions, list) or not questions or not all(isinstance(q, str) and q for q in questions):
        raise refuse(ErrorCode.INVALID_COMMAND, f"{field}/questions: one or more questions", field=f"{field}/questions")
    item = where.item
    if item is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/conversationId: an essential ambiguity is raised in the WorkItem's Conversation (§10.1)",
            field="/payload/conversationId",
        )
    item = WorkItem.objects.select_for_update().get(id=item.id)
    for i, name in enumerate(data.get("fields") or []):
        if not isinstance(name, str) or name.split("/", 1)[0] not in item.contract:
            raise refuse(
                ErrorCode.INVALID_COMMAND,
                f"{field}/fields/{i}: {name!r} is not a member of the Work Contract",
                field=f"{field}/fields/{i}",
            )
    offered = Offer.objects.filter(workitem=item, agent_id=ctx.actor.id, status="open").exists()
    if item.state != "offered" or not offered:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            "an essential ambiguity is raised by a candidate holding an open offer, before acceptance (§10.1)",
        )
    return item


@command("message.post")
def post(ctx: HandlerContext) -> Decision:
    """A completed Message in one of the Group's Conversations (§9): any member, never authority."""
    p = ctx.payload
    message_id = bare(p["messageId"], "/payload/messageId")
    if Message.objects.filter(id=message_id).exists():
        raise refuse(
            ErrorCode.INVALID_COMMAND, "/payload/messageId: this Message ID is taken", field="/payload/messageId"
        )
    where = find(ctx.group.id, bare(p["conversationId"], "/payload/conversationId"))
    if where is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/conversationId: no such Conversation in this Group",
            field="/payload/conversationId",
            reason="not_found",
        )
    content = _content(p["content"], "/payload/content")
    mentions = p.get("mentions") or []
    mentioned = [principal_in(ctx.group.organization_id, m, f"/payload/mentions/{i}") for i, m in enumerate(mentions)]
    check_message_rate(ctx)
    mark = _ambiguity(content)
    item = _check_ambiguity(ctx, where, mark, content.index(mark)) if mark is not None else where.item
    message = Message.objects.create(
        id=message_id, group_id=ctx.group.id, conversation_id=where.conversation_id, work_item=item,
        author_id=ctx.actor.id, mentions=[str(a.id) for a in mentioned], created_at=ctx.now,
    )  # fmt: skip
    if mark is not None and item is not None:
        check_clarification_rounds(ctx, Ambiguity.objects.filter(work_item=item).count() + 1)
        Ambiguity.objects.create(message=message, work_item=item, contract_revision=item.contract_revision)
    doc = _message_doc(ctx, where, message_id, content)
    payload = {"messageId": doc["messageId"], "authority": False, "conversationId": doc["conversationId"]}
    payload["message"] = doc
    ref = AggregateRef("message", message_id, 1)
    work_item = str(item.id) if item is not None else None
    emitted = Emit("message.posted", ref, payload, work_item_id=work_item, conversation_id=where.conversation_id)
    return Decision([emitted], ref)


def _amend(ctx: HandlerContext, kind: str) -> tuple[Message, MessageAmendment]:
    """The checks every amendment shares; the amendment row, written."""
    p = ctx.payload
    amendment_id = bare(p["amendmentId"], "/payload/amendmentId")
    if MessageAmendment.objects.filter(id=amendment_id).exists():
        raise refuse(
            ErrorCode.INVALID_COMMAND, "/payload/amendmentId: this amendment ID is taken", field="/payload/amendmentId"
        )
    message_id = bare(p["messageId"], "/payload/messageId")
    message = Message.objects.select_for_update().filter(id=message_id, group_id=ctx.group.id).first()
    if message is None:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            "/payload/messageId: no such Message in this Group",
            field="/payload/messageId",
            reason="not_found",
        )
    if message.state == "redacted":
        raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "the Message is redacted")
    if kind != "redaction":
        if str(message.author_id) != ctx.actor.id:
            raise refuse(ErrorCode.AUTH_FORBIDDEN, f"only the Message's author makes a {kind} of it (§9.1)")
        if message.state == "retracted":
            raise refuse(ErrorCode.INVALID_STATE_TRANSITION, "the Message is retracted")
    amendment = MessageAmendment.objects.create(
        id=amendment_id, message=message, kind=kind, actor_id=ctx.actor.id, reason=p["reason"], created_at=ctx.now
    )
    return message, amendment


def _amended(
    ctx: HandlerContext, kind: str, message: Message, payload: dict[str, Any], event_id: str | None = None
) -> Decision:
    revision = message.amendments.count() + 1
    ref = AggregateRef("message", str(message.id), revision)
    work_item = str(message.work_item_id) if message.work_item_id else None
    event = Emit(
        kind, ref, payload, work_item_id=work_item, conversation_id=str(message.conversation_id), event_id=event_id
    )
    return Decision([event], ref)


def _standing(ctx: HandlerContext) -> dict[str, Any]:
    p = ctx.payload
    return {"amendmentId": p["amendmentId"], "messageId": p["messageId"], "reason": p["reason"]}


@command("message.correct")
def correct(ctx: HandlerContext) -> Decision:
    """The author appends a correction; the original stays in history (§9.1)."""
    message, _ = _amend(ctx, "correction")
    content = _content(ctx.payload["replacementContent"], "/payload/replacementContent")
    message.state = "corrected"
    message.save(update_fields=["state"])
    payload = {**_standing(ctx), "replacementContent": content}
    return _amended(ctx, "message.corrected", message, payload)


@command("message.retract")
def retract(ctx: HandlerContext) -> Decision:
    """The author retracts a Message; the original stays in history (§9.1)."""
    message, _ = _amend(ctx, "retraction")
    message.state = "retracted"
    message.save(update_fields=["state"])
    return _amended(ctx, "message.retracted", message, _standing(ctx))


@command("message.redact", group_roles=REDACTORS)
def redact(ctx: HandlerContext) -> Decision:
    """A policy redaction with an auditable reason (§7.4, §9.1): a tombstone Event naming the
    Message; its content is withheld on every read path from then on, and the log keeps
    every Event, signature and chain link."""
    message, amendment = _amend(ctx, "redaction")
    message.state = "redacted"
    message.save(update_fields=["state"])
    tombstone = str(uuid.uuid4())
    # A redaction is a policy decision: the Policy Log keeps it, linked to its tombstone (§7.4, §20).
    ctx.policy_records.append(
        Entry(
            organization_id=ctx.group.organization_id, kind="redaction", group_id=ctx.group.id,
            mission_id=str(Mission.objects.values_list("id", flat=True).get(group_id=ctx.group.id)),
            policy_name="message.redact", actor=ctx.actor.id, action_id=ctx.command.action_id,
            command_kind=ctx.command.kind, event_id=tombstone, reference=urn(message.id),
            detail={"messageId": urn(message.id), "amendmentId": urn(amendment.id), "reason": amendment.reason},
        )
    )  # fmt: skip
    return _amended(ctx, MESSAGE_REDACTED, message, _standing(ctx), tombstone)


def refuse_ambiguous(ctx: HandlerContext, item: WorkItem) -> None:
    """``work.accept_offer``: no candidate accepts a contract an essential ambiguity names (§10.1)."""
    open_ = Ambiguity.objects.filter(work_item=item, contract_revision=item.contract_revision)
    raised = open_.exclude(message__state="retracted").first()
    if raised is not None:
        raise refuse(
            ErrorCode.INVALID_STATE_TRANSITION,
            f"an essential ambiguity (Message {urn(raised.message_id)}) names contract version"
            f" {item.contract_revision}; the Coordinator offers a corrected contract or a replacement WorkItem (§10.1)",
            messageId=urn(raised.message_id),
        )


hooks.acceptance_checks.append(refuse_ambiguous)

__all__ = ["AMBIGUITY_SCHEMA", "correct", "post", "redact", "refuse_ambiguous", "retract"]
