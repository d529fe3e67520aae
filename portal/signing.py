"""People sign their own Commands, in their browser (DESIGN §4, issue 19 item 2).

The server never holds a person's private key and builds no Command for a
person. What it does:

- ``enrol``: on a person's first sign-in in a browser, the page
  (``static/portal/sign.js``) makes a non-extractable WebCrypto Ed25519 key,
  keeps it in IndexedDB and sends only its public half here. The Django
  sign-in authenticates the person; the control plane binds the key to them
  in the Registry (``ext.mwportal.registry.principal_key_enroll`` naming the
  ``principal``) under a new ``urn:uuid:`` key ID. A new device is a new key
  ID.
- ``command_context``: what a page renders beside each form that issues a
  Command: its kind, the person as actor, the Group, the person's current
  Membership Epoch (a human carries no Session Epoch, §15.1; ``mission.create``
  no epoch at all), the ``expectedRevision`` the page showed, and the payload
  members the server knows (from ``portal.actions``' builders). The page adds
  what the person typed, builds the Command document, signs it and POSTs it
  to ``/api/v0.1/commands``, where it is verified in the six stages like any
  other (§6.4).
- ``signer``: the page's view of the person's keys (enrolled, revoked) and the
  plain words for each error code (``portal.errors``), so a refusal reads the
  same as anywhere in the portal.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, JsonResponse
from django.middleware.csrf import get_token
from django.urls import reverse
from django.views.decorators.http import require_POST

from missions.authority import accept
from missions.commands import membership_epoch, service_command
from missions.models import Agent, AgentCard, Group, SigningKey, SigningKeyValidity
from mwportal.protocol import ErrorCode, ProtocolError, malformed
from mwportal.protocol.command import format_timestamp
from mwportal.protocol.ids import new_urn, urn

from .access import person_agent
from .errors import PLAIN_WORDS, REASON_WORDS

ENROLL = "ext.mwportal.registry.principal_key_enroll"
REVOKE = "ext.mwportal.registry.principal_key_revoke"
COMMANDS_URL = "/api/v0.1/commands"


def actor_of(agent: Agent) -> dict[str, str]:
    return {"type": Agent.ACTOR_TYPES[agent.kind], "id": urn(agent.pk)}


def admin_group_id(agent: Agent) -> str:
    return str(Group.objects.values_list("id", flat=True).get(organization_id=agent.organization_id, kind="admin"))


def command_context(
    agent: Agent,
    kind: str,
    group: str | None,
    payload: dict[str, Any],
    *,
    fields: dict[str, str] | None = None,
    numbers: tuple[str, ...] = (),
    fresh: tuple[str, ...] = (),
    expected_revision: int | None = None,
    work_item_id: str | None = None,
    creates_group: bool = False,
    builder: str = "",
    then: str = "",
) -> dict[str, Any]:
    """The Command a form issues, as the page needs it to build and sign the document.

    ``fields``: form input name -> payload member (left out when empty;
    ``numbers`` are sent as JSON numbers); ``fresh``: payload members the page
    fills with a new ``urn:uuid:`` (an Approval ID, say); ``builder``: a
    kind-specific assembly in the page (``mission``, ``policy``); ``then``: where
    the page goes after the Command is accepted (default: reload).
    """
    spec: dict[str, Any] = {
        "kind": kind,
        "actor": actor_of(agent),
        "groupId": urn(group) if group else None,  # None: the page names the Group it creates
        "payload": payload,
        "fields": fields or {},
        "numbers": list(numbers),
        "fresh": list(fresh),
        "builder": builder,
        "then": then,
    }
    if group and not creates_group:
        spec["membershipEpoch"] = membership_epoch(agent, group)
    if expected_revision is not None:
        spec["expectedRevision"] = expected_revision
    if work_item_id is not None:
        spec["workItemId"] = urn(work_item_id)
    return spec


def coordinators(agent: Agent) -> list[Agent]:
    """The Organization's Agents with an Agent Card: who can hold a Coordinator lease (§6.1, §7.2)."""
    with_card = AgentCard.objects.values_list("agent_id", flat=True)
    return list(
        Agent.objects.filter(organization_id=agent.organization_id, kind=Agent.KIND_AGENT, id__in=with_card).order_by(
            "name"
        )
    )


def keys_of(agent: Agent) -> tuple[list[str], list[str]]:
    """The person's enrolled key IDs: ``(valid, revoked)``."""
    mine = SigningKey.objects.filter(principal_type="human", principal_id=urn(agent.pk))
    rows = list(mine.values_list("pk", "key_id"))
    revoked_pks = set(
        SigningKeyValidity.objects.filter(key_id__in=[pk for pk, _ in rows], revoked_at__isnull=False).values_list(
            "key_id", flat=True
        )
    )
    return [k for pk, k in rows if pk not in revoked_pks], [k for pk, k in rows if pk in revoked_pks]


def signer(request: HttpRequest, agent: Agent) -> dict[str, Any]:
    """The page's signer context (``json_script`` ``mwp-signer``)."""
    valid, revoked = keys_of(agent)
    return {
        "actor": actor_of(agent),
        "keys": valid,
        "revoked": revoked,
        "enrolUrl": reverse("portal:enrol"),
        "commandsUrl": COMMANDS_URL,
        "csrf": get_token(request),
        "words": {str(code): words for code, words in PLAIN_WORDS.items()},
        "reasons": REASON_WORDS,
    }


def _error(error: ProtocolError) -> JsonResponse:
    return JsonResponse(error.as_dict(), status=error.http_status)


@login_required
@require_POST
def enrol(request: HttpRequest) -> JsonResponse:
    """Bind the public half of the key this browser just made to the signed-in person; ``{keyId}``.

    Only ``{"publicKey": <base64url>}`` is read: the key ID and ``validFrom``
    are the Registry's. A body with any other member (a private key, say) is
    refused, so nothing but the public key is ever taken.
    """
    agent = person_agent(request.user)
    try:
        body = json.loads(request.body or b"null")
        if not isinstance(body, dict) or set(body) != {"publicKey"} or not isinstance(body["publicKey"], str):
            raise malformed("/publicKey", 'send exactly {"publicKey": <base64url Ed25519 public key>}')
        if agent.kind != Agent.KIND_PERSON:
            raise ProtocolError(ErrorCode.AUTH_FORBIDDEN, "only a person enrolls a browser key")
        key_id = new_urn()
        public_key = {
            "keyId": key_id,
            "algorithm": "Ed25519",
            "publicKey": body["publicKey"],
            "validFrom": format_timestamp(datetime.now(UTC)),
        }
        accept(
            service_command(
                ENROLL,
                admin_group_id(agent),
                {"principal": actor_of(agent), "publicKey": public_key},
                organization_id=str(agent.organization_id),
            )
        )
    except ProtocolError as error:
        return _error(error)
    except ValueError:
        return _error(malformed("/", "not JSON"))
    return JsonResponse({"keyId": key_id, "principal": actor_of(agent)}, status=201)
