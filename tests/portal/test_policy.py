"""The Organization priority policy editor (§11.1): validated, issuing
``ext.mwportal.scheduling.priority_policy_set``, with a preview of the shares
per Group (MWP-WRK-009)."""

from __future__ import annotations

from typing import Any

from missions.models import Organization
from portal.policy import GroupRow, shares
from tests.conftest import nothing_written
from tests.portal.conftest import Person, admin_group, documents_of
from tests.workitems.flow import Flow


def form(flow: Flow, revision: int, **extra: Any) -> dict[str, Any]:
    data = {
        "revision": revision,
        "class_count": 3,
        "class_name_0": "gold", "class_weight_0": "6",
        "class_name_1": "silver", "class_weight_1": "3",
        "class_name_2": "bronze", "class_weight_2": "1",
        "class_name_3": "", "class_weight_3": "",
        "default_class": "bronze",
        "aging_seconds": "120",
        f"group_class_{flow.group}": "gold",
        f"group_quota_{flow.group}": "2",
    }  # fmt: skip
    data.update(extra)
    return data


def test_the_editor_shows_classes_groups_and_shares(flow: Flow, pat: Person) -> None:
    html = pat.client.get("/policy/").content.decode()
    assert 'value="critical"' in html and 'value="300"' in html
    assert f'data-group="{flow.group}"' in html and "Survey" in html
    assert "100.0%" in html  # the only listed Group takes every slot


def test_saving_issues_the_priority_policy_command_spec_11_1(flow: Flow, pat: Person, org: dict[str, str]) -> None:
    response = pat.client.post("/policy/", form(flow, 0), follow=True)
    html = response.content.decode()
    assert "Accepted: ext.mwportal.scheduling.priority_policy_changed" in html
    organization = Organization.objects.get(id=org["id"])
    assert organization.policy_revision == 1
    assert organization.priority_policy == {
        "classes": {"gold": 6, "silver": 3, "bronze": 1},
        "default_class": "bronze",
        "groups": {flow.group: {"class": "gold", "quota": 2}},
        "aging_seconds": 120,
    }
    (event,) = documents_of(admin_group(), "ext.mwportal.scheduling.priority_policy_changed")
    assert event["actor"] == pat.actor and event["payload"]["revision"] == 1


def test_an_invalid_policy_is_refused_in_plain_words(flow: Flow, pat: Person) -> None:
    with nothing_written():
        response = pat.client.post("/policy/", form(flow, 0, default_class="platinum"))
    assert response.status_code == 400
    html = response.content.decode()
    assert "SCHEMA_VALIDATION_FAILED: something in the form is not valid (" in html and "default_class" in html
    with nothing_written():
        response = pat.client.post("/policy/", form(flow, 0, class_weight_0="lots"))
    assert response.status_code == 400
    assert "class_weight_0" in response.content.decode()


def test_a_stale_policy_form_shows_the_refusal_and_changes_nothing_spec_15_3(flow: Flow, pat: Person) -> None:
    assert pat.client.post("/policy/", form(flow, 0)).status_code == 302
    with nothing_written():
        response = pat.client.post("/policy/", form(flow, 0, aging_seconds="60"))
    assert response.status_code == 409
    assert "REVISION_CONFLICT: someone changed this item; reload" in response.content.decode()


def test_another_groups_title_never_appears_in_the_editor(
    flow: Flow, pat: Person, nick: Person, other_mission: dict[str, str]
) -> None:
    nick.client.post("/policy/", {**form(flow, 0), f"group_class_{other_mission['group']}": "gold"})
    html = pat.client.get("/policy/").content.decode()
    assert "secret" not in html
    assert f'data-group="{other_mission["group"]}"' in html  # listed by its id, as the policy document names it


def test_shares_follow_the_class_weights() -> None:
    policy = {"classes": {"high": 3, "low": 1}, "default_class": "low"}
    rows = [GroupRow("a", "A", "high", None), GroupRow("b", "B", "", None), GroupRow("c", "C", "low", 2)]
    assert [(s.klass, s.percent) for s in shares(policy, rows)] == [("high", 60.0), ("low", 20.0), ("low", 20.0)]
