"""Who sees what: every page and every button, for members, a non-member,
an anonymous browser and a user without an Agent. A non-member gets 404 (or
403 where a role is missing), never another Group's data."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from missions.models import GroupEvent
from tests.conftest import nothing_written
from tests.portal.conftest import Person
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


def mission_posts(flow: Flow, item: str) -> list[str]:
    g = flow.group
    return [
        f"/missions/{g}/approve",
        f"/missions/{g}/request-changes",
        f"/missions/{g}/workitems/{item}/grant",
        f"/missions/{g}/workitems/{item}/cancel",
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


def test_a_non_member_gets_404_on_every_button_and_nothing_is_written(
    flow: Flow, submitted: tuple[str, str], nick: Person
) -> None:
    item, _ = submitted
    for url in mission_posts(flow, item):
        with nothing_written():
            response = nick.client.post(url, {"revision": 1, "reason": "x", "note": "x"})
        assert response.status_code == 404, url


def test_a_workitem_of_another_group_is_404_under_this_one(
    flow: Flow, pat: Person, other_mission: dict[str, str]
) -> None:
    other = Flow(other_mission, flow.owner, flow.coordinator, flow.worker, flow.worker2)
    foreign = other.authorize()  # the same Coordinator Agent coordinates Nick's Mission too
    assert pat.client.get(f"/missions/{flow.group}/workitems/{foreign}/").status_code == 404
    with nothing_written():
        response = pat.client.post(f"/missions/{flow.group}/workitems/{foreign}/grant", {"revision": 1})
    assert response.status_code == 404


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
    for url in mission_posts(flow, item):
        with nothing_written():
            assert client.post(url, {"revision": 1}).status_code == 302


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
    with nothing_written():
        response = obi.client.post("/policy/", {"revision": 0, "class_count": 0, "class_name_0": "x",
                                                 "class_weight_0": "1", "default_class": "x"})  # fmt: skip
    assert response.status_code == 403


def test_a_missionowner_sees_the_policy_link(pat: Person) -> None:
    assert 'id="nav-policy"' in pat.client.get("/").content.decode()
    assert pat.client.get("/policy/").status_code == 200


def test_the_sign_in_page_signs_a_person_in(pat: Person) -> None:
    client = Client()
    assert client.get("/login/").status_code == 200
    response = client.post("/login/", {"username": "pat", "password": "pw-pat"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200
