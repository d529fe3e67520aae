"""The admin: authoritative models are read-only, it issues no Command (people sign theirs in
the browser, issue 19); rows are scoped to the user's Groups."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import RequestFactory

from tests.conftest import nothing_written
from tests.portal.conftest import Person
from tests.workitems.flow import Flow

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


def test_the_admin_offers_no_action_a_person_would_issue_unsigned_design_4(flow: Flow, pat: Person) -> None:
    """Issue 19: a person's Command is built and signed in their browser on the portal's pages; the
    admin's forms cannot sign, so no admin action issues one (only Django's own, none here)."""
    request = RequestFactory().get("/admin/")
    request.user = get_user_model().objects.get(username="pat")
    for name in AUTHORITATIVE:
        offered = registered(name).get_actions(request)
        assert set(offered) <= {"delete_selected"} and not registered(name).has_delete_permission(request), name
    item = flow.drive_to("queued")
    with nothing_written():
        response = pat.client.post("/admin/workitems/workitem/", {"action": "cancel_workitem",
                                                                   "_selected_action": [item], "index": 0})  # fmt: skip
    assert response.status_code in (200, 302) and flow.item(item).state == "queued"


def test_admin_lists_never_show_another_groups_rows(
    flow: Flow, pat: Person, nick: Person, other_mission: dict[str, str]
) -> None:
    item = flow.drive_to("queued")
    goal = flow.item(item).contract["goal"]
    for url in ("/admin/workitems/workitem/", "/admin/missions/groupevent/", "/admin/missions/mission/"):
        html = nick.client.get(url).content.decode()
        assert goal not in html and "Survey" not in html, url
    assert "Nick&#x27;s secret" not in pat.client.get("/admin/missions/mission/").content.decode()
