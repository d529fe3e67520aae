"""Who may enroll a person (issue 16 item 5).

The review's attack: an Organization admin's signed ``agent.register`` bound
a Django user that had no Agent, one outside the Organization included, to a
public key whose private half the admin held, and then signed Commands as
that person. The rule now: a Django user belongs to an Organization through
its person Agent (``Agent.user``); an admin never links a user who does not
already belong to the admin's Organization and never supplies a person's
key; the person enrolls their own key, signed in (``agent.enroll`` as a
portal Command).

Personas: Olivia's Organization ``acme`` with its admin Ada (a signed Agent);
``initech`` with its admin Ian and its person Ivy (user ``ivy``); Vic, a
Django user with no Agent (in no Organization); Pia, a person of ``acme``
registered by the operator without a key.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from missions.authority import accept
from missions.commands import create_organization, portal_command, register_agent
from missions.models import Agent, GroupEvent
from mwportal.protocol import ErrorCode, generate_keypair
from tests.api.support import COMMANDS, SESSIONS, error_of, http, nothing_written, post_json, session_request
from tests.conftest import AgentKey, make_agent, refused


@pytest.fixture
def ada(org: dict[str, str]) -> AgentKey:
    return make_agent("acme", "Ada Admin", ["admin"])


@pytest.fixture
def initech(db: None) -> dict[str, str]:
    org_id, admin_group = create_organization("initech", "Initech")
    return {"id": org_id, "admin_group": admin_group}


@pytest.fixture
def ian(initech: dict[str, str]) -> AgentKey:
    return make_agent("initech", "Ian Admin", ["admin"])


@pytest.fixture
def ivy(initech: dict[str, str]) -> Agent:
    get_user_model().objects.create_user("ivy", password="pw-ivy")
    return Agent.objects.get(id=register_agent("initech", "Ivy", "person", ["coordinator"], "", user="ivy"))


@pytest.fixture
def vic(db: None) -> Any:
    return get_user_model().objects.create_user("vic", password="pw-vic")


@pytest.fixture
def pia(org: dict[str, str]) -> Agent:
    get_user_model().objects.create_user("pia", password="pw-pia")
    return Agent.objects.get(id=register_agent("acme", "Pia", "person", ["mission_owner"], "", user="pia"))


def register_body(user: str | None = None, public_key: str = "", kind: str = "person") -> dict[str, Any]:
    import uuid

    body: dict[str, Any] = {"agent": str(uuid.uuid4()), "name": "Claimed", "kind": kind, "org_roles": ["admin"]}
    if user is not None:
        body["user"] = user
    if public_key:
        body["public_key"] = public_key
    return body


def test_it_refuses_the_reviewed_attack_an_admin_binding_an_outsider_to_the_admins_key(
    ada: AgentKey, org: dict[str, str], vic: Any
) -> None:
    """The exact Command of the review, over REST: refused, nothing written."""
    _, held_public_key = generate_keypair()
    raw = ada.envelope("agent.register", org["admin_group"], register_body("vic", held_public_key))
    with nothing_written():
        error = error_of(post_json(http(), COMMANDS, raw), 403, "AUTH_FORBIDDEN")
    assert "a person's key comes from the person" in error["message"]
    assert not Agent.objects.filter(user=vic).exists()
    # Dressed up as a machine Agent, the user link is refused all the same.
    raw = ada.envelope("agent.register", org["admin_group"], register_body("vic", held_public_key, "agent"))
    with nothing_written():
        error = error_of(post_json(http(), COMMANDS, raw), 400, "SCHEMA_VALIDATION_FAILED")
    assert error["details"]["field"] == "body.user"


def test_it_refuses_an_admin_linking_a_user_outside_the_organization(
    ada: AgentKey, org: dict[str, str], vic: Any
) -> None:
    """Even without a key: Vic belongs to no Organization, so no admin links him."""
    raw = ada.envelope("agent.register", org["admin_group"], register_body("vic"))
    with nothing_written():
        error = error_of(post_json(http(), COMMANDS, raw), 403, "AUTH_FORBIDDEN")
    assert "does not belong to this Organization" in error["message"]


def test_it_refuses_an_admin_of_another_organization(
    ada: AgentKey, ian: AgentKey, org: dict[str, str], ivy: Agent, pia: Agent
) -> None:
    """Ivy belongs to initech: acme's admin may not claim her, and initech's
    admin may not claim acme's Pia; an unknown user gets the same answer, so
    the refusal tells nothing about who exists elsewhere."""
    answers = [
        refused(ErrorCode.AUTH_FORBIDDEN, ada.send, "agent.register", org["admin_group"], register_body(name)).message
        for name in ("ivy", "nobody-at-all")
    ]
    assert answers[0].replace("'ivy'", "U") == answers[1].replace("'nobody-at-all'", "U")
    initech_admin_group = str(Agent.objects.get(id=ian.id).organization.groups.get(kind="admin").id)
    refused(ErrorCode.AUTH_FORBIDDEN, ian.send, "agent.register", initech_admin_group, register_body("pia"))
    # And an admin of acme sending into initech's administrative Group finds no such Group.
    refused(ErrorCode.GROUP_NOT_FOUND, ada.send, "agent.register", initech_admin_group, register_body("ivy"))
    assert Agent.objects.get(user__username="ivy").id == ivy.id


def test_it_refuses_an_admin_supplying_a_key_for_a_person(ada: AgentKey, org: dict[str, str], pia: Agent) -> None:
    _, held_public_key = generate_keypair()
    error = refused(
        ErrorCode.AUTH_FORBIDDEN, ada.send, "agent.register", org["admin_group"], register_body(None, held_public_key)
    )
    assert error.details["field"] == "body.public_key"
    # A user who does belong to acme already has her Agent: nothing to link.
    refused(ErrorCode.INVALID_STATE_TRANSITION, ada.send, "agent.register", org["admin_group"], register_body("pia"))


def test_it_still_lets_an_admin_register_a_machine_agent_and_a_keyless_person(
    ada: AgentKey, org: dict[str, str]
) -> None:
    _, public_key = generate_keypair()
    machine = register_body(None, public_key, "agent")
    ada.send("agent.register", org["admin_group"], machine)
    assert Agent.objects.get(id=machine["agent"]).public_key == public_key
    invited = register_body()
    ada.send("agent.register", org["admin_group"], invited)
    person = Agent.objects.get(id=invited["agent"])
    assert (person.kind, person.public_key, person.user_id) == ("person", "", None)


def test_it_lets_a_person_enroll_their_own_key_signed_in(org: dict[str, str], pia: Agent) -> None:
    """Self-enrollment: a portal Command of Pia's own session with the public
    key her browser generated; afterwards she signs as herself."""
    private_key, public_key = generate_keypair()
    receipt = accept(portal_command(pia, "agent.enroll", org["admin_group"], {"public_key": public_key}))
    assert [e["type"] for e in receipt["events"]] == ["agent.enrolled"]
    event = GroupEvent.objects.get(group_id=org["admin_group"], type="agent.enrolled")
    assert event.body == {"agent": str(pia.id), "public_key": public_key}
    assert Agent.objects.get(id=pia.id).public_key == public_key
    key = AgentKey(str(pia.id), private_key, public_key, "acme")
    response = post_json(http(), SESSIONS, session_request(key))
    assert response.status_code == 201, response.content
    # A key is enrolled once; replacing it is not this Command.
    pia.refresh_from_db()
    _, other = generate_keypair()
    refused(
        ErrorCode.INVALID_STATE_TRANSITION,
        accept,
        portal_command(pia, "agent.enroll", org["admin_group"], {"public_key": other}),
    )


def test_it_lets_nobody_else_enroll_a_persons_key(
    ada: AgentKey, org: dict[str, str], pia: Agent, worker: AgentKey
) -> None:
    _, public_key = generate_keypair()
    admin_group = org["admin_group"]
    # Signed in Pia's name by someone else: a keyless Agent verifies no signature.
    forged = AgentKey(str(pia.id), generate_keypair()[0], public_key, "acme")
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, forged.send, "agent.enroll", admin_group, {"public_key": public_key})
    # An admin enrolling "for" her enrolls only itself, and it is no person.
    refused(ErrorCode.AUTH_FORBIDDEN, ada.send, "agent.enroll", admin_group, {"public_key": public_key})
    # A key another Agent holds is not Pia's.
    refused(
        ErrorCode.AUTH_FORBIDDEN,
        accept,
        portal_command(pia, "agent.enroll", admin_group, {"public_key": worker.public_key}),
    )
    refused(
        ErrorCode.SCHEMA_VALIDATION_FAILED,
        accept,
        portal_command(pia, "agent.enroll", admin_group, {"public_key": "AAAA"}),
    )
    assert Agent.objects.get(id=pia.id).public_key == ""


def test_it_enrolls_a_person_from_the_cli_without_a_key(org: dict[str, str], tmp_path: Path) -> None:
    """The operator links a person to their user and never holds their key."""
    get_user_model().objects.create_user("pat", password="pw-pat")
    out = io.StringIO()
    call_command(
        "mwp", "create-agent", "--org", "acme", "--name", "Pat", "--roles", "mission_owner", "--kind", "person",
        "--user", "pat", stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    agent = Agent.objects.get(id=out.getvalue().strip())
    assert (agent.kind, agent.public_key, agent.user.username if agent.user else None) == ("person", "", "pat")
    with pytest.raises(CommandError, match="no key file"):
        call_command(
            "mwp", "create-agent", "--org", "acme", "--name", "Pam", "--roles", "worker", "--kind", "person",
            "--user", "pam", "--out", str(tmp_path / "pam.json"),
        )  # fmt: skip
    assert not (tmp_path / "pam.json").exists()
    with pytest.raises(CommandError, match="never an agent's key"):
        call_command(
            "mwp", "create-agent", "--org", "acme", "--name", "Bot", "--roles", "worker", "--user", "pat",
            "--out", str(tmp_path / "bot.json"),
        )  # fmt: skip
