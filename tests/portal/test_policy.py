"""The Organization priority policy editor (§11.1): validated, issuing
``ext.mwportal.scheduling.priority_policy_set``, with a preview of the shares
per Group (MWP-WRK-009)."""

from __future__ import annotations

from typing import Any

from missions.models import Organization
from mwportal.protocol.ids import urn
from portal.policy import GroupRow, shares
from tests.conftest import nothing_written
from tests.portal.conftest import Person, admin_group, documents_of, from_page, page_spec, post_command
from tests.workitems.flow import Flow


def document(flow: Flow, **extra: Any) -> dict[str, Any]:
    """The policy document the editor's page builds from its form (``sign.js``' ``policy`` builder)."""
    data: dict[str, Any] = {
        "classes": {"gold": 6, "silver": 3, "bronze": 1},
        "default_class": "bronze",
        "groups": {flow.group: {"class": "gold", "quota": 2}},
        "aging_seconds": 120,
    }
    data.update(extra)
    return data


def save(pat: Person, policy: dict[str, Any], html: str | None = None) -> Any:
    """What the Save button does: the page's Command context, the document, signed with her key."""
    html = html or pat.page("/policy/")
    spec = page_spec(html, "cmd-policy")
    assert spec["kind"] == "ext.mwportal.scheduling.priority_policy_set" and spec["builder"] == "policy"
    return post_command(from_page(pat.key, html, "cmd-policy", {}, {"policy": policy}))


def test_the_editor_shows_classes_groups_and_shares(flow: Flow, pat: Person) -> None:
    html = pat.page("/policy/")
    assert 'value="critical"' in html and 'value="300"' in html
    assert f'data-group="{flow.group}"' in html and "Survey" in html
    assert "100.0%" in html  # the only listed Group takes every slot
    spec = page_spec(html, "cmd-policy")
    assert spec["groupId"] == urn(admin_group()) and spec["membershipEpoch"] == 1 and spec["expectedRevision"] == 0


def test_saving_issues_the_priority_policy_command_spec_11_1(flow: Flow, pat: Person, org: dict[str, str]) -> None:
    response = save(pat, document(flow))
    assert response.status_code == 201, response.json()
    organization = Organization.objects.get(id=org["id"])
    assert organization.policy_revision == 1
    assert organization.priority_policy == document(flow)
    (event,) = documents_of(admin_group(), "ext.mwportal.scheduling.priority_policy_changed")
    assert event["actor"] == pat.actor and event["payload"]["revision"] == 1


def test_an_invalid_policy_is_refused_with_the_field_named(flow: Flow, pat: Person) -> None:
    with nothing_written():
        response = save(pat, document(flow, default_class="platinum"))
    assert response.status_code == 400
    assert response.json()["code"] == "SCHEMA_VALIDATION_FAILED" and "default_class" in response.json()["message"]


def test_a_stale_policy_form_is_refused_and_changes_nothing_spec_15_3(flow: Flow, pat: Person) -> None:
    html = pat.page("/policy/")
    assert save(pat, document(flow), html).status_code == 201
    with nothing_written():
        response = save(pat, document(flow, aging_seconds=60), html)
    assert response.status_code == 409 and response.json()["code"] == "REVISION_CONFLICT"


def test_another_groups_title_never_appears_in_the_editor(
    flow: Flow, pat: Person, nick: Person, other_mission: dict[str, str]
) -> None:
    nick.key.send("ext.mwportal.scheduling.priority_policy_set", admin_group(),
                  {"policy": {**document(flow), "groups": {other_mission["group"]: {"class": "gold"}}}})  # fmt: skip
    html = pat.page("/policy/")
    assert "secret" not in html
    assert f'data-group="{other_mission["group"]}"' in html  # listed by its id, as the policy document names it


def test_shares_follow_the_class_weights() -> None:
    policy = {"classes": {"high": 3, "low": 1}, "default_class": "low"}
    rows = [GroupRow("a", "A", "high", None), GroupRow("b", "B", "", None), GroupRow("c", "C", "low", 2)]
    assert [(s.klass, s.percent) for s in shares(policy, rows)] == [("high", 60.0), ("low", 20.0), ("low", 20.0)]
