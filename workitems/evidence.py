"""Evidence in WorkItem Commands and Events (PROTOCOL §13.2, ``evidence.schema.json``).

The catalogue checks each Evidence document's shape; ``check_evidence`` adds
what a schema cannot say: the Evidence is about this WorkItem (its Mission,
Group and WorkItem IDs), cites acceptance criteria of its contract and only
Artifact hashes this Group holds (§13.3), each Evidence ID once, and its
signature is its generator's key in the Organization's Registry (§6.4). A submission's
Evidence covers every acceptance criterion, else INVALID_STATE_TRANSITION
(reason ``evidence_required``: §10.2 "Artifacts and Evidence required").

The Group Authority writes Evidence of its own for what it decides without a
Worker (a lease that ran out of attempts, a Mission's end reaching a WorkItem,
a child Mission's approval): ``authority_evidence`` signs it with the Group
Authority's key.
"""

from __future__ import annotations

import uuid
from typing import Any

from missions.authority import HandlerContext
from missions.keyregistry import DjangoRegistry
from missions.models import Organization
from mwportal.protocol import ErrorCode, ProtocolError, jcs
from mwportal.protocol.ids import urn
from mwportal.protocol.verification import WIRE_MESSAGES, VerificationFailed, verify_document

from .content import content
from .contract import criteria_ids
from .documents import authority_actor, authority_signed
from .models import WorkItem
from .wire import refuse, when


def check_evidence(
    ctx: HandlerContext,
    item: WorkItem,
    records: list[dict[str, Any]],
    *,
    field: str = "/payload/evidence",
    cover_all: bool = False,
    generated_by_actor: bool = False,
) -> list[dict[str, Any]]:
    known = set(criteria_ids(item.contract))
    registry = DjangoRegistry(Organization.objects.get(id=ctx.group.organization_id))
    ids: set[str] = set()
    expected = {"missionId": urn(item.mission_id), "groupId": urn(item.group_id), "workItemId": urn(item.id)}
    for i, record in enumerate(records):
        where = f"{field}/{i}"
        for member, value in expected.items():
            if record[member] != value:
                raise refuse(
                    ErrorCode.INVALID_COMMAND,
                    f"{where}/{member}: the Evidence is about another {member[:-2]}",
                    field=f"{where}/{member}",
                )
        try:
            # Evidence is a Signed Document (§6.4): its generator's key, in the Registry.
            verify_document(jcs.canonicalize(record), "evidence", registry)
        except VerificationFailed as exc:
            code = exc.wire_code
            raise ProtocolError(code, f"{where}: {WIRE_MESSAGES[code]}", details={"field": where}) from None
        if record["evidenceId"] in ids:
            raise refuse(ErrorCode.INVALID_COMMAND, f"{where}/evidenceId: used twice", field=f"{where}/evidenceId")
        ids.add(record["evidenceId"])
        for j, criterion in enumerate(record["criterionIds"]):
            if criterion not in known:
                raise refuse(
                    ErrorCode.INVALID_COMMAND,
                    f"{where}/criterionIds/{j}: {criterion!r} is not a criterion of the contract",
                    field=f"{where}/criterionIds/{j}",
                )
        if generated_by_actor and record["generatedBy"] != ctx.actor.principal:
            raise refuse(
                ErrorCode.INVALID_COMMAND,
                f"{where}/generatedBy: the sender's own Evidence names the sender",
                field=f"{where}/generatedBy",
            )
    if cover_all:
        covered = {c for record in records for c in record["criterionIds"]}
        missing = [c for c in criteria_ids(item.contract) if c not in covered]
        if missing:
            raise refuse(
                ErrorCode.INVALID_STATE_TRANSITION,
                f"no Evidence for acceptance criteria {', '.join(missing)}",
                criteria=missing,
                reason="evidence_required",
            )
    cited = sorted({sha for record in records for sha in record["artifactHashes"]})
    absent = content().absent_from_group(str(item.group_id), cited) if cited else []
    if absent:
        raise refuse(
            ErrorCode.INVALID_COMMAND,
            f"Artifacts not held by this Group: {', '.join(absent)}",
            artifacts=absent,
            reason="not_found",
        )
    return records


def authority_evidence(
    ctx: HandlerContext,
    item: WorkItem,
    method: str,
    *,
    passed: bool,
    type_: str | None = None,
    artifact_hashes: list[str] | None = None,
) -> dict[str, Any]:
    """Evidence the Group Authority signs about ``item`` (every criterion; ``artifact_hashes``:
    the ``sha256:`` Artifacts it covers, a child Mission's approved set, §14)."""
    document = {
        "evidenceId": urn(uuid.uuid4()),
        "missionId": urn(item.mission_id),
        "groupId": urn(item.group_id),
        "workItemId": urn(item.id),
        "type": type_ or ("human_review" if passed else "failure_report"),
        "subject": {"type": "work_item", "id": urn(item.id)},
        "criterionIds": criteria_ids(item.contract),
        "method": method[:4000],
        "result": "passed" if passed else "failed",
        "artifactHashes": list(artifact_hashes or []),
        "generatedBy": authority_actor(ctx),
        "createdAt": when(ctx.now),
    }
    return authority_signed("evidence", document, ctx)
