"""The admin: authoritative models are read-only; actions issue Commands and
report the receipt or the refusal in plain words; rows are scoped to the
user's Groups."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import RequestFactory

from missions.models import Mission
from tests.conftest import nothing_written
from tests.portal.conftest import Person, approval_contract, documents_of
from tests.workitems.flow import Flow
from workitems.models import WorkItem

AUTHORITATIVE = [
    *(f"missions.{m}" for m in ("organization", "agent", "agentcard", "group", "mission", "membership", "groupevent",
                                "actionreceipt", "approval", "groupsnapshot")),
    *(f"workitems.{m}" for m in ("workitem", "workproposal", "workdependency", "offer", "executionlease",
                                 "checkpoint", "submission")),
]  # fmt: skip


def registered(name: str) -> admin.ModelAdmin:  # type: ignore[type-arg]
    for model, model_admin in admin.site._registry.items():
        if model._meta.label_lower == name:
            return model_admin
    raise AssertionError(f"{name} is not registered")


@pytest.mark.parametrize("name", AUTHORITATIVE)
def test_authoritative_models_have_no_add_change_or_delete(name: str, pat: Person) -> None:
    model_admin = registered(name)
    request = RequestFactory().get("/admin/")
    request.user = get_user_model().objects.get(username="pat")
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)
    assert model_admin.has_view_permission(request)


def test_admin_forms_refuse_writes(flow: Flow, pat: Person) -> None:
    item = flow.drive_to("queued")
    assert pat.client.get("/admin/workitems/workitem/add/").status_code == 403
    assert pat.client.get(f"/admin/workitems/workitem/{item}/delete/").status_code == 403
    with nothing_written():
        assert pat.client.post(f"/admin/workitems/workitem/{item}/change/", {"state": "verified"}).status_code == 403
    assert flow.item(item).state == "queued"
    view = pat.client.get(f"/admin/workitems/workitem/{item}/change/")
    assert view.status_code == 200 and flow.item(item).contract["goal"] in view.content.decode()


def action(person: Person, url: str, name: str, ids: list[str]) -> str:
    response = person.client.post(url, {"action": name, "_selected_action": ids, "index": 0}, follow=True)
    assert response.status_code == 200
    return response.content.decode()


def test_grant_action_issues_the_command_and_reports_the_receipt_spec_12(flow: Flow, pat: Person) -> None:
    item = flow.authorize(approval_contract())
    flow.offer(item)
    flow.accept(item)
    html = action(pat, "/admin/workitems/workitem/", "grant_execution_approval", [item])
    assert "Accepted: approval.execution.granted" in html
    (event,) = documents_of(flow.group, "approval.execution.granted")
    assert event["actor"] == pat.actor


def test_a_refused_action_is_reported_in_plain_words(flow: Flow, pat: Person) -> None:
    item = flow.drive_to("queued")  # its contract needs no Approval
    with nothing_written():
        html = action(pat, "/admin/workitems/workitem/", "grant_execution_approval", [item])
    assert "INVALID_STATE_TRANSITION: this is not possible in the item&#x27;s current state" in html


def test_cancel_actions_issue_work_cancel_and_mission_cancel_spec_10_2(flow: Flow, pat: Person, obi: Person) -> None:
    queued = flow.drive_to("queued")
    with nothing_written():
        assert "AUTH_FORBIDDEN" in action(obi, "/admin/workitems/workitem/", "cancel_workitem", [queued])
    assert "Accepted: work.cancelled" in action(pat, "/admin/workitems/workitem/", "cancel_workitem", [queued])
    assert WorkItem.objects.get(id=queued).state == "cancelled"
    mission = Mission.objects.get(group_id=flow.group)
    assert "Accepted: mission.cancelled" in action(pat, "/admin/missions/mission/", "cancel_mission",
                                                   [str(mission.id)])  # fmt: skip
    (event,) = documents_of(flow.group, "mission.cancelled")
    assert event["payload"]["reason"] == "cancelled in the admin"


def test_admin_lists_never_show_another_groups_rows(
    flow: Flow, pat: Person, nick: Person, other_mission: dict[str, str]
) -> None:
    item = flow.drive_to("queued")
    goal = flow.item(item).contract["goal"]
    for url in ("/admin/workitems/workitem/", "/admin/missions/groupevent/", "/admin/missions/mission/"):
        html = nick.client.get(url).content.decode()
        assert goal not in html and "Survey" not in html, url
    assert "Nick&#x27;s secret" not in pat.client.get("/admin/missions/mission/").content.decode()


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("/admin/workitems/workitem/", "grant_execution_approval"),
        ("/admin/workitems/workitem/", "cancel_workitem"),
        ("/admin/missions/mission/", "cancel_mission"),
    ],
)
def test_no_action_reaches_another_groups_row(flow: Flow, nick: Person, url: str, name: str) -> None:
    item = flow.drive_to("submitted")
    target = str(Mission.objects.get(group_id=flow.group).id) if "mission" in url else item
    with nothing_written():
        html = action(nick, url, name, [target])
    assert "Accepted" not in html and flow.item(item).contract["goal"] not in html
    assert flow.item(item).state == "submitted"
