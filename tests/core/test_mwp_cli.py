"""``python manage.py mwp create-org | create-agent`` (DESIGN §4: key files)."""

from __future__ import annotations

import json
import stat
import uuid
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from missions.models import Agent, Group, GroupEvent, Organization
from mwportal.protocol import signed, verify
from mwportal.protocol.signing import public_key_of


@pytest.mark.django_db
def test_create_org_prints_its_id_and_makes_admin_group(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("mwp", "create-org", "initech", "--name", "Initech")
    org_id = capsys.readouterr().out.strip()
    org = Organization.objects.get(id=org_id)
    assert (org.slug, org.name) == ("initech", "Initech")
    admin = Group.objects.get(organization=org, kind=Group.KIND_ADMIN)
    assert list(GroupEvent.objects.filter(group=admin).values_list("type", flat=True)) == ["org.created"]


@pytest.mark.django_db
def test_create_agent_writes_a_0600_key_file_that_signs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    call_command("mwp", "create-org", "initech")
    out = tmp_path / "key.json"
    call_command(
        "mwp", "create-agent", "--org", "initech", "--name", "Bot", "--roles", "worker,coordinator", "--out", str(out)
    )
    agent_id = capsys.readouterr().out.strip().splitlines()[-1]
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    key = json.loads(out.read_text())
    assert set(key) == {"agent_id", "organization", "private_key", "public_key"}
    assert key["agent_id"] == agent_id
    assert public_key_of(key["private_key"]) == key["public_key"]
    agent = Agent.objects.get(id=agent_id)
    assert (agent.public_key, agent.org_roles, agent.kind) == (key["public_key"], ["coordinator", "worker"], "agent")
    assert str(agent.organization_id) == key["organization"]
    message = {"hello": "world"}
    assert verify(agent.public_key, message, signed(key["private_key"], message)["signature"])


@pytest.mark.django_db
def test_create_agent_refuses_bad_roles_and_unknown_org(tmp_path: Path) -> None:
    call_command("mwp", "create-org", "initech")
    with pytest.raises(CommandError, match="SCHEMA_VALIDATION_FAILED: body.org_roles"):
        call_command(
            "mwp",
            "create-agent",
            "--org",
            "initech",
            "--name",
            "B",
            "--roles",
            "king",
            "--out",
            str(tmp_path / "k.json"),
        )
    assert not (tmp_path / "k.json").exists()
    with pytest.raises(CommandError, match="no Organization"):
        call_command(
            "mwp",
            "create-agent",
            "--org",
            "nope",
            "--name",
            "B",
            "--roles",
            "worker",
            "--out",
            str(tmp_path / "k.json"),
        )


@pytest.mark.django_db
def test_verify_log_refuses_a_bad_group_id() -> None:
    with pytest.raises(CommandError, match="GROUP_ID"):
        call_command("mwp", "verify-log", "not-a-uuid")
    with pytest.raises(CommandError, match="no Group"):
        call_command("mwp", "verify-log", str(uuid.uuid4()))
