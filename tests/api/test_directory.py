"""What a client reads to build and check documents (DESIGN §5): ``GET /api/v0.1/keys/{keyId}`` (the
Registry's key bindings, §6.4), ``GET /api/v0.1/memberships`` (the caller's Membership documents, §8) and
``GET /api/v0.1/catalogue`` (every Command and Event kind with its payload schema)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from missions.keyregistry import record_validity
from missions.models import SigningKey
from mwportal.protocol import catalogue
from mwportal.protocol.command import Key, format_timestamp
from mwportal.protocol.values import b64url_decode
from tests.api.support import CATALOGUE, MEMBERSHIPS, bearer, error_of, http, key_url, normative, show, wire
from tests.conftest import AgentKey

BINDING_MEMBERS = {"keyId", "principal", "algorithm", "publicKey", "validFrom"}


def binding(key_id: str) -> dict[str, Any]:
    response = http().get(key_url(key_id))
    assert response.status_code == 200, show(response)
    return response.json()  # type: ignore[no-any-return]


def test_a_key_is_served_with_its_principal_to_anyone_spec_6_4(worker: AgentKey) -> None:
    served = binding(worker.key.key_id)
    assert set(served) == BINDING_MEMBERS
    assert served["keyId"] == worker.key.key_id and served["algorithm"] == "Ed25519"
    assert served["principal"] == {"type": "agent", "id": worker.urn}
    assert served["publicKey"] == worker.key.public_key


def test_a_persons_key_names_a_human_principal(owner: AgentKey) -> None:
    assert binding(owner.key.key_id)["principal"] == {"type": "human", "id": owner.urn}


def test_the_effective_validity_is_the_earliest_recorded_boundary_spec_6_4(worker: AgentKey) -> None:
    row = SigningKey.objects.get(key_id=worker.key.key_id)
    later = format_timestamp(datetime.now(UTC) + timedelta(days=30))
    earlier = format_timestamp(datetime.now(UTC) + timedelta(days=10))
    record_validity(row, valid_until=later)
    record_validity(row, valid_until=earlier, revoked_at=later)
    served = binding(worker.key.key_id)
    assert served["validUntil"] == earlier and served["revokedAt"] == later


def test_a_key_id_bound_in_two_organizations_is_not_served_spec_6_4(worker: AgentKey) -> None:
    # No verification trusts such evidence (it fails closed), so no binding is handed out for it.
    from missions.commands import create_organization
    from missions.keyregistry import register_key
    from missions.models import Organization
    from mwportal.protocol.registry import Principal

    create_organization("globex", "Globex")
    register_key(
        Organization.objects.get(slug="globex"),
        key_id=worker.key.key_id,
        principal=Principal("agent", "urn:uuid:" + str(uuid.uuid4())),
        public_key=b64url_decode(Key.generate().public_key),
        valid_from=format_timestamp(datetime.now(UTC)),
    )
    error_of(http().get(key_url(worker.key.key_id)), 404, "GROUP_NOT_FOUND")


@pytest.mark.parametrize("key_id", ["urn:uuid:" + str(uuid.uuid4()), "nonsense", "urn:example:k"])
def test_an_unknown_key_is_404(org: dict[str, str], key_id: str) -> None:
    error_of(http().get(key_url(key_id)), 404, "GROUP_NOT_FOUND")


def test_memberships_are_membership_documents_one_per_role_spec_8(mission: dict[str, str], worker: AgentKey) -> None:
    response = http().get(MEMBERSHIPS, **bearer(worker.extra["token"]))
    assert response.status_code == 200, show(response)
    body = response.json()
    assert set(body) <= {"memberships", "administrativeGroupId"}
    (membership,) = body["memberships"]
    normative("membership", membership)
    assert membership["groupId"] == wire(mission["group"]) and membership["missionId"] == wire(mission["mission"])
    assert membership["member"] == {"type": "agent", "id": worker.urn}
    assert membership["role"] == "worker" and membership["state"] == "active"


def test_an_agent_without_memberships_reads_an_empty_list(org: dict[str, str], outsider: AgentKey) -> None:
    body = http().get(MEMBERSHIPS, **bearer(outsider.extra["token"])).json()
    assert body["memberships"] == [] and body["administrativeGroupId"] == wire(org["admin_group"])


def test_memberships_need_authentication_spec_19(org: dict[str, str]) -> None:
    error_of(http().get(MEMBERSHIPS), 401, "AUTH_REQUIRED")


def test_the_catalogue_is_served_as_data(db: None) -> None:
    response = http().get(CATALOGUE)
    assert response.status_code == 200, show(response)
    assert response.json() == catalogue.as_data()
    assert set(response.json()["commands"]) == set(catalogue.COMMAND_KINDS)


@pytest.mark.parametrize("url", [CATALOGUE, MEMBERSHIPS, key_url("urn:uuid:" + str(uuid.uuid4()))])
def test_the_directory_reads_refuse_other_methods_with_405(db: None, url: str) -> None:
    error_of(http().post(url, "{}", content_type="application/json"), 405, "PROTOCOL_VIOLATION")
