"""Who sees what: every page and every button, for members, a non-member,
an anonymous browser and a user without an Agent. A non-member gets 404 (or
403 where a role is missing), never another Group's data."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from missions.models import GroupEvent
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import urn
from tests.conftest import nothing_written, refused
from tests.portal.conftest import Person, admin_group, from_page, post_command
from tests.workitems.flow import Flow


def mission_urls(flow: Flow, item: str, sha: str) -> list[str]:
    g = flow.group
    return [
        f"/missions/{g}/",
        f"/missions/{g}/live",
        f"/missions/{g}/final/",
        f"/missions/{g}/workitems/{item}/",
        f"/missions/{g}/artifacts/{sha}",
    ]


@pytest.fixture
def submitted(flow: Flow) -> tuple[str, str]:
    item = flow.drive_to("submitted")
    (event,) = GroupEvent.objects.filter(group_id=flow.group, type="work.submitted")
    sha = event.as_wire()["payload"]["evidence"][0]["artifactHashes"][0].removeprefix("sha256:")
    return item, sha


def test_a_non_member_gets_404_on_every_mission_page(flow: Flow, submitted: tuple[str, str], nick: Person) -> None:
    item, sha = submitted
    for url in mission_urls(flow, item, sha):
        response = nick.client.get(url)
        assert response.status_code == 404, url
        assert b"Survey" not in response.content and flow.item(item).contract["goal"].encode() not in response.content


def test_a_non_members_signed_command_for_the_mission_is_group_not_found_and_nothing_is_written(
    flow: Flow, pat: Person, nick: Person
) -> None:
    """Issue 16 item 8: the owner's ``mission.cancel``, signed by a person of the same Organization who
    is no member, answers as for an absent Group."""
    item = flow.drive_to("submitted")
    html = pat.page(f"/missions/{flow.group}/").replace(urn(pat.agent.id), urn(nick.agent.id))
    with nothing_written():
        response = post_command(from_page(nick.key, html, "cmd-cancel-mission", {"reason": "x"}))
    assert response.status_code == 404 and response.json()["code"] == "GROUP_NOT_FOUND"
    assert flow.item(item).state == "submitted"


def test_a_workitem_of_another_group_is_404_under_this_one(
    flow: Flow, pat: Person, other_mission: dict[str, str]
) -> None:
    other = Flow(other_mission, flow.owner, flow.coordinator, flow.worker, flow.worker2)
    foreign = other.authorize()  # the same Coordinator Agent coordinates Nick's Mission too
    assert pat.client.get(f"/missions/{flow.group}/workitems/{foreign}/").status_code == 404


def test_the_dashboard_lists_only_ones_own_missions(
    flow: Flow, pat: Person, nick: Person, other_mission: dict[str, str]
) -> None:
    assert "Nick&#x27;s secret Mission" not in pat.client.get("/").content.decode()
    home = nick.client.get("/").content.decode()
    assert "Nick&#x27;s secret Mission" in home and "Survey" not in home
    item = flow.drive_to("queued")
    assert flow.item(item).contract["goal"] not in nick.client.get("/approvals/").content.decode()


def test_anonymous_browsers_are_sent_to_sign_in(flow: Flow, submitted: tuple[str, str]) -> None:
    item, sha = submitted
    client = Client()
    for url in ["/", "/approvals/", "/policy/", *mission_urls(flow, item, sha)]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/login/"), url
    with nothing_written():  # no session, no enrolment
        assert client.post("/keys/enrol", {"publicKey": "A" * 43}).status_code == 302


def test_a_user_without_an_agent_is_forbidden(flow: Flow) -> None:
    get_user_model().objects.create_user("ghost", password="pw-ghost")
    client = Client()
    client.login(username="ghost", password="pw-ghost")
    assert client.get("/").status_code == 403
    assert client.get(f"/missions/{flow.group}/").status_code == 403


def test_an_observer_gets_403_on_the_policy_editor_and_no_link_MWP_WRK_009(flow: Flow, obi: Person) -> None:
    home = obi.client.get("/").content.decode()
    assert 'id="nav-policy"' not in home and "/policy/" not in home
    assert obi.client.get("/policy/").status_code == 403
    policy = {"classes": {"x": 1}, "default_class": "x"}
    with nothing_written():
        refused(ErrorCode.AUTH_FORBIDDEN, obi.key.send, "ext.mwportal.scheduling.priority_policy_set", admin_group(),
                {"policy": policy})  # fmt: skip


def test_a_missionowner_sees_the_policy_link(pat: Person) -> None:
    assert 'id="nav-policy"' in pat.client.get("/").content.decode()
    assert pat.client.get("/policy/").status_code == 200


def test_the_sign_in_page_signs_a_person_in(pat: Person) -> None:
    client = Client()
    assert client.get("/login/").status_code == 200
    response = client.post("/login/", {"username": "pat", "password": "pw-pat"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200
