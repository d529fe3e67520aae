"""``python manage.py mwp create-org | create-agent | create-human`` (DESIGN §4: bootstrap and key files).

A key file (mode 0600) is ``{"principal": {"type", "id"}, "organizationId",
"keyId", "privateKey", "publicKey"}``, base64url raw 32-byte seed and public
key, ``urn:uuid:`` identifiers; the Registry binds its key ID to the Principal,
so a Command the key signs passes the six verification stages (§6.4).
"""

from __future__ import annotations

import json
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from missions.authority import accept_document
from missions.models import Agent, Group, GroupEvent, Organization, SigningKey
from missions.policy import DEFAULT_POLICY
from mwportal.protocol import b64url_decode
from mwportal.protocol.command import Key, build_command
from mwportal.protocol.ids import bare, urn

KEY_MEMBERS = {"principal", "organizationId", "keyId", "privateKey", "publicKey"}


def last_line(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().out.strip().splitlines()[-1]


@pytest.mark.django_db
def test_create_org_prints_its_urn_last_and_makes_its_admin_group_design_4(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("mwp", "create-org", "initech", "--name", "Initech")
    org_id = last_line(capsys)
    org = Organization.objects.get(id=bare(org_id, "org"))
    assert (org.slug, org.name, org_id) == ("initech", "Initech", urn(org.id))
    admin = Group.objects.get(organization=org, kind=Group.KIND_ADMIN)
    kinds = list(GroupEvent.objects.filter(group=admin).values_list("type", flat=True))
    assert kinds[0] == "ext.mwportal.admin.organization_created"


def _key_file(path: Path) -> dict[str, object]:
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data: dict[str, object] = json.loads(path.read_text())
    assert set(data) == KEY_MEMBERS
    assert len(b64url_decode(str(data["privateKey"]))) == 32 and len(b64url_decode(str(data["publicKey"]))) == 32
    return data


@pytest.mark.django_db
def test_create_agent_writes_a_0600_key_file_the_registry_binds_design_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("mwp", "create-org", "initech")
    org_id = last_line(capsys)
    out = tmp_path / "bot.json"
    call_command("mwp", "create-agent", "--org", "initech", "--name", "Bot", "--out", str(out))
    agent_urn = last_line(capsys)
    data = _key_file(out)
    assert data["principal"] == {"type": "agent", "id": agent_urn}
    assert data["organizationId"] == org_id
    key = Key.from_file(out)
    assert key.public_key == data["publicKey"]
    agent = Agent.objects.get(id=bare(agent_urn, "agent"))
    assert (agent.kind, agent.name, agent.public_key) == ("agent", "Bot", data["publicKey"])
    binding = SigningKey.objects.get(key_id=data["keyId"])
    assert binding.principal_id == agent_urn


@pytest.mark.django_db
def test_create_human_links_the_user_and_its_key_signs_a_command_that_is_accepted_spec_6_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("mwp", "create-org", "initech")
    out = tmp_path / "dana.json"
    call_command(
        "mwp", "create-human", "--org", "initech", "--username", "dana", "--roles", "mission_owner,admin",
        "--out", str(out),
    )  # fmt: skip
    human_urn = last_line(capsys)
    data = _key_file(out)
    assert data["principal"] == {"type": "human", "id": human_urn}
    person = Agent.objects.get(id=bare(human_urn, "human"))
    user = get_user_model().objects.get(username="dana")
    assert (person.kind, person.user_id, sorted(person.org_roles)) == ("person", user.pk, ["admin", "mission_owner"])
    assert not user.has_usable_password()  # an admin sets one before they sign in
    # The key file's key signs a Command the six stages accept (the priority policy: an Organization role's).
    key = Key.from_file(out)
    assert key.principal is not None
    admin = str(Group.objects.get(organization__slug="initech", kind=Group.KIND_ADMIN).id)
    document = build_command(
        "ext.mwportal.scheduling.priority_policy_set", actor=key.principal, key=key, group=admin, membership_epoch=1,
        payload={"policy": DEFAULT_POLICY},
    )  # fmt: skip
    receipt = accept_document(json.dumps(document).encode())
    assert [e["kind"] for e in receipt["events"]] == ["ext.mwportal.scheduling.priority_policy_changed"]


@pytest.mark.django_db
def test_bad_roles_and_an_unknown_org_are_refused_and_write_no_key_file_design_4(tmp_path: Path) -> None:
    call_command("mwp", "create-org", "initech")
    target = tmp_path / "k.json"
    with pytest.raises(CommandError, match="SCHEMA_VALIDATION_FAILED: /payload/organizationRoles"):
        call_command("mwp", "create-agent", "--org", "initech", "--name", "B", "--roles", "king", "--out", str(target))
    assert not target.exists()
    with pytest.raises(CommandError, match="no Organization"):
        call_command("mwp", "create-agent", "--org", "nope", "--name", "B", "--out", str(target))
    with pytest.raises(CommandError, match="does not exist"):
        call_command("mwp", "create-human", "--org", "initech", "--username", "u", "--roles", "admin",
                     "--out", str(tmp_path / "missing" / "k.json"))  # fmt: skip
    assert not target.exists()


@pytest.mark.django_db
def test_verify_log_refuses_a_bad_group_id() -> None:
    with pytest.raises(CommandError, match="GROUP_ID"):
        call_command("mwp", "verify-log", "not-a-uuid")
    with pytest.raises(CommandError, match="GROUP_ID"):
        call_command("mwp", "verify-log", str(uuid.uuid4()))  # a bare UUID: the wire form is urn:uuid:
    with pytest.raises(CommandError, match="no Group"):
        call_command("mwp", "verify-log", f"urn:uuid:{uuid.uuid4()}")


@pytest.mark.django_db
def test_create_human_refuses_a_key_file_in_the_services_directories_design_4(
    tmp_path: Path, settings: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The service's files hold no person's private key (DESIGN §4, issue 19 item 2): ``--out``
    inside the var dir or MWP_SERVICE_KEY_DIR is refused before anyone is registered."""
    var, service_keys = tmp_path / "var", tmp_path / "service-keys"
    for directory in (var / "demo", service_keys):
        directory.mkdir(parents=True)
    settings.VAR_DIR, settings.MWP_SERVICE_KEY_DIR = var, str(service_keys)
    call_command("mwp", "create-org", "initech")
    for name, target in (("var dir", var / "demo" / "dana.json"), ("MWP_SERVICE_KEY_DIR", service_keys / "d.json"),
                         ("var dir", var / "demo" / ".." / "dana.json")):  # fmt: skip
        with pytest.raises(CommandError, match=f"inside the service's {name}"):
            call_command("mwp", "create-human", "--org", "initech", "--username", "dana", "--roles", "mission_owner",
                         "--out", str(target))  # fmt: skip
        assert not target.exists()
    assert not Agent.objects.filter(kind="person").exists()
    assert not get_user_model().objects.filter(username="dana").exists()
    # Beside the service's directories, where the operator keeps it, the same command writes it.
    out = tmp_path / "dana.json"
    call_command("mwp", "create-human", "--org", "initech", "--username", "dana", "--roles", "mission_owner",
                 "--out", str(out))  # fmt: skip
    assert _key_file(out)["principal"] == {"type": "human", "id": last_line(capsys)}
