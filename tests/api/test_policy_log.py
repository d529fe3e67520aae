"""The Policy Log (PROTOCOL §6.4, §20; DESIGN §1): append-only in the database, read through
``GET /api/v0.1/policy-log`` by the Organization's auditors and nobody else."""

from __future__ import annotations

import json
import uuid

import pytest
from django.db import DatabaseError, connection, transaction

from missions.commands import create_organization
from missions.models import PolicyLogEntry
from mwportal.protocol.ids import urn
from tests.api.support import API, COMMANDS, bearer, error_of, http, post_json, show
from tests.conftest import AgentKey, make_agent

POLICY_LOG = f"{API}/policy-log"
POLICY_SET = "ext.mwportal.governance.cooperation_policy_set"


def decide(owner: AgentKey, org: dict[str, str], hard: int, revision: int) -> None:
    """A policy decision the Policy Log records: the MissionOwner sets the cooperation policy."""
    owner.send(POLICY_SET, org["admin_group"], {"policy": {"queued_work_items": {"hard": hard}}},
               expected_revision=revision)  # fmt: skip


@pytest.fixture
def auditor(org: dict[str, str]) -> AgentKey:
    return make_agent("acme", "Audrey Auditor", ["auditor"])


def test_an_auditor_reads_the_policy_log_in_order(org: dict[str, str], owner: AgentKey, auditor: AgentKey) -> None:
    decide(owner, org, 5, 0)
    decide(owner, org, 7, 1)
    response = http().get(POLICY_LOG, **bearer(auditor.extra["token"]))
    assert response.status_code == 200, show(response)
    entries = response.json()["entries"]
    assert [(e["kind"], e["detail"]["policy"]["queued_work_items"]["hard"]) for e in entries] == [
        ("policy_set", 5), ("policy_set", 7)
    ]  # fmt: skip
    assert entries[0]["actor"] == owner.urn and entries[0]["commandKind"] == POLICY_SET
    later = http().get(f"{POLICY_LOG}?after={entries[0]['position']}", **bearer(auditor.extra["token"])).json()
    assert later["entries"] == entries[1:]


@pytest.mark.parametrize("roles", [["worker"], ["coordinator"], ["admin"], ["mission_owner"]])
def test_everyone_but_an_auditor_is_forbidden(org: dict[str, str], owner: AgentKey, roles: list[str]) -> None:
    decide(owner, org, 5, 0)
    reader = make_agent("acme", "Rita Reader", roles)
    error_of(http().get(POLICY_LOG, **bearer(reader.extra["token"])), 403, "AUTH_FORBIDDEN")


def test_the_policy_log_needs_authentication(org: dict[str, str]) -> None:
    error_of(http().get(POLICY_LOG), 401, "AUTH_REQUIRED")


def test_an_auditor_reads_only_its_own_organization(org: dict[str, str], owner: AgentKey) -> None:
    decide(owner, org, 5, 0)
    create_organization("globex", "Globex")
    stranger = make_agent("globex", "Gus Auditor", ["auditor"])
    assert http().get(POLICY_LOG, **bearer(stranger.extra["token"])).json() == {"entries": []}


def test_a_bad_position_is_refused(org: dict[str, str], auditor: AgentKey) -> None:
    error_of(http().get(f"{POLICY_LOG}?after=-1", **bearer(auditor.extra["token"])), 400, "SCHEMA_VALIDATION_FAILED")


@pytest.mark.parametrize("statement", ["UPDATE {t} SET kind = 'limit_hit'", "DELETE FROM {t}"])
def test_the_database_refuses_to_change_the_policy_log(org: dict[str, str], owner: AgentKey, statement: str) -> None:
    decide(owner, org, 5, 0)
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cur:
        cur.execute(statement.format(t=PolicyLogEntry._meta.db_table))
    assert PolicyLogEntry.objects.get().kind == "policy_set"


def test_a_failed_verification_is_referenceable_by_auditors_only_spec_6_4(
    mission: dict[str, str], worker: AgentKey, auditor: AgentKey
) -> None:
    """§6.4: the first failing stage and its reason are kept for auditors; the caller sees neither."""
    document = worker.command("work.propose", mission["group"], {"proposalId": urn(uuid.uuid4()), "contract": {}})
    document["payload"]["proposalId"] = urn(uuid.uuid4())  # after signing: the signature no longer holds
    error = error_of(post_json(http(), COMMANDS, document), 401, "AUTH_INVALID_SIGNATURE")
    assert "equation" not in json.dumps(error) and "signature-" not in json.dumps(error["details"])
    (entry,) = http().get(POLICY_LOG, **bearer(auditor.extra["token"])).json()["entries"]
    assert (entry["kind"], entry["groupId"], entry["missionId"]) == (
        "protected_diagnostic", urn(mission["group"]), urn(mission["mission"])
    )  # fmt: skip
    assert entry["detail"] == {"profile": "command", "stage": "signature", "reason": "equation-mismatch"}
    assert entry["reference"].startswith("urn:uuid:")
    error_of(http().get(POLICY_LOG, **bearer(worker.extra["token"])), 403, "AUTH_FORBIDDEN")
