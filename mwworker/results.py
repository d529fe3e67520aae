"""What a slot hands in: signed Evidence (§13.2) and signed Artifact manifests (§13.1).

Both are Signed Documents this Agent signs with its own key (profiles
``evidence``, signer ``generatedBy``; ``artifact``, signer
``producer.agentId``). The handler describes them (``SlotContext.evidence``,
``SlotContext.put_artifact``); the runtime completes the identifiers and
signs them, so the handler never holds the key (MWP-WRK-011).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mwportal.protocol.command import Key, format_timestamp
from mwportal.protocol.ids import new_urn
from mwportal.protocol.verification import sign_document

# Every Work Contract names at least one deliverable with its schema; a
# manifest without one cites this (an opaque byte stream).
OCTET_SCHEMA = "urn:mwportal:schema:octet-stream"


def signed_evidence(
    draft: Mapping[str, Any], *, key: Key, agent: str, mission: str, group: str, workitem: str, now: datetime
) -> dict[str, Any]:
    """Evidence (evidence.schema.json) from a handler's draft, signed as ``agent``."""
    document = {
        "evidenceId": new_urn(),
        "missionId": mission,
        "groupId": group,
        "workItemId": workitem,
        **{
            k: v
            for k, v in draft.items()
            if k in ("type", "subject", "criterionIds", "method", "result", "artifactHashes", "details")
        },  # fmt: skip
        "generatedBy": {"type": "agent", "id": agent},
        "createdAt": format_timestamp(now),
    }
    return sign_document(document, key_id=key.key_id, seed=key.seed, profile="evidence")


def artifact_manifest(
    content_hash: str,
    *,
    size: int,
    media_type: str,
    key: Key,
    agent: str,
    portal: str,
    mission: str,
    group: str,
    workitem: str,
    contract: Mapping[str, Any],
    pins: Mapping[str, Any],
    now: datetime,
) -> dict[str, Any]:
    """The signed Artifact manifest (artifact.schema.json) of content this Agent produced, its producer the
    Agent Card and capability versions its acceptance pinned (``pins``, §6.1)."""
    deliverables = contract.get("requiredDeliverables") or []
    schema = next((d["schema"] for d in deliverables if d.get("mediaType") == media_type), None)
    schema = schema or (deliverables[0]["schema"] if deliverables else OCTET_SCHEMA)
    document = {
        "artifactId": new_urn(),
        "contentHash": content_hash,
        "uri": f"{portal}/api/v0.1/artifacts/{content_hash}",
        "sizeBytes": size,
        "mediaType": media_type,
        "schemaUri": schema,
        "producer": {
            "agentId": agent,
            "agentCardVersion": pins["agentCardVersion"],
            "capabilities": list(pins["capabilities"]),
        },  # fmt: skip
        "missionId": mission,
        "groupId": group,
        "workItemId": workitem,
        "sourceArtifactHashes": list(contract.get("inputArtifacts") or []),
        "toolVersions": [],
        "modelVersions": [],
        "classification": "internal",
        "createdAt": format_timestamp(now),
    }
    return sign_document(document, key_id=key.key_id, seed=key.seed, profile="artifact")
