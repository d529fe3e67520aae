"""The MissionOwner's execution Approval queue (§12): the page renders Grant and Cancel with
their Commands' context; the person's browser builds, signs and sends catalogue Commands."""

from __future__ import annotations

from mwportal.protocol import catalogue
from mwportal.protocol.ids import urn
from tests.conftest import nothing_written
from tests.portal.conftest import Person, approval_contract, documents_of, from_page, page_spec, post_command
from tests.workitems.flow import Flow


def queued_for_approval(flow: Flow) -> str:
    item = flow.authorize(approval_contract())
    flow.offer(item)
    flow.accept(item)
    return item


def test_it_lists_waiting_workitems_with_risk_budget_and_capabilities_spec_12(flow: Flow, pat: Person) -> None:
    item = queued_for_approval(flow)
    html = pat.page("/approvals/")
    assert f'data-workitem="{item}"' in html
    assert "Deploy to production" in html
    assert "risk high_risk" in html and "approval human_required" in html
    capability = flow.item(item).contract["requiredCapabilities"][0]
    assert f"<code>{capability['id']}</code> v{capability['version']}" in html
    assert "deploy.run" in html


def test_the_grant_form_carries_the_commands_context_a_human_signs_spec_15_1(flow: Flow, pat: Person) -> None:
    """§15.1: a human's Command carries its Membership Epoch and never a Session Epoch; the form's
    context names the Group, the WorkItem and the revision the page showed (compare-and-set, §15.3)."""
    item = queued_for_approval(flow)
    spec = page_spec(pat.page("/approvals/"), f"cmd-grant-{item}")
    current = flow.item(item)
    assert spec["kind"] == "approval.grant_execution" and spec["actor"] == pat.actor
    assert spec["groupId"] == urn(flow.group) and spec["workItemId"] == urn(item)
    assert spec["membershipEpoch"] >= 1 and "sessionEpoch" not in spec
    assert spec["expectedRevision"] == current.revision
    assert spec["payload"] == {"workItemId": urn(item), "ownershipEpoch": current.ownership_epoch,
                               "operations": ["deploy.run"]}  # fmt: skip
    assert spec["fresh"] == ["approvalId"] and spec["fields"] == {"note": "comments"}


def test_grant_issues_approval_grant_execution(flow: Flow, pat: Person) -> None:
    """§12: the grant is the catalogue's ``approval.grant_execution``, for the current Ownership Epoch."""
    item = queued_for_approval(flow)
    response = pat.submit("/approvals/", f"cmd-grant-{item}", {"note": "go"})
    assert response.status_code == 201, response.json()
    assert [e["kind"] for e in response.json()["events"]] == ["approval.execution.granted"]
    (event,) = documents_of(flow.group, "approval.execution.granted")
    assert event["actor"] == pat.actor
    assert event["payload"]["operations"] == ["deploy.run"]
    assert event["payload"]["approval"]["workItemId"] == urn(item)
    assert event["payload"]["approval"]["comments"] == "go"
    assert flow.item(item).approved_contract_revision == flow.item(item).contract_revision


def test_a_stale_grant_form_is_refused_and_changes_nothing_spec_15_3(flow: Flow, pat: Person) -> None:
    item = queued_for_approval(flow)
    html = pat.page("/approvals/")
    first = from_page(pat.key, html, f"cmd-grant-{item}", {})
    second = from_page(pat.key, html, f"cmd-grant-{item}", {})
    assert post_command(first).status_code == 201
    with nothing_written():
        response = post_command(second)
    assert response.status_code == 409
    assert response.json()["code"] == "REVISION_CONFLICT"
    assert len(documents_of(flow.group, "approval.execution.granted")) == 1


def test_an_observer_has_no_approval_queue_and_its_signed_grant_is_refused_spec_12(
    flow: Flow, pat: Person, obi: Person
) -> None:
    item = queued_for_approval(flow)
    assert 'href="/approvals/"' not in obi.page("/")
    assert "Deploy to production" not in obi.page("/approvals/")
    # The same Command, signed by the observer with her own key: refused by the Authority.
    html = pat.page("/approvals/").replace(urn(pat.agent.id), urn(obi.agent.id))
    with nothing_written():
        response = post_command(from_page(obi.key, html, f"cmd-grant-{item}", {}))
    assert response.status_code == 403 and response.json()["code"] == "AUTH_FORBIDDEN"


def test_cancel_issues_work_cancel_with_the_reason_spec_10_2(flow: Flow, pat: Person) -> None:
    item = queued_for_approval(flow)
    response = pat.submit("/approvals/", f"cmd-cancel-{item}", {"reason": "too risky this week"})
    assert response.status_code == 201, response.json()
    assert flow.item(item).state == "cancelled"
    (event,) = documents_of(flow.group, "work.cancelled")
    assert event["payload"] == {"workItemId": urn(item), "reason": "too risky this week"}
    assert event["actor"] == pat.actor


def test_cancel_without_a_reason_is_refused_spec_10_2(flow: Flow, pat: Person) -> None:
    item = queued_for_approval(flow)
    with nothing_written():
        response = pat.submit("/approvals/", f"cmd-cancel-{item}", {"reason": " "})
    assert response.status_code == 400 and response.json()["code"] == "SCHEMA_VALIDATION_FAILED"
    assert flow.item(item).state == "queued"


def test_the_payloads_the_portal_builds_are_what_the_catalogue_admits_spec_15_1(flow: Flow, pat: Person) -> None:
    from portal import actions

    item = flow.item(queued_for_approval(flow))
    uid = urn("00000000-0000-4000-8000-000000000001")
    catalogue.validate_payload("approval.grant_execution", {**actions.grant_execution(item), "approvalId": uid})
    catalogue.validate_payload("work.cancel", {**actions.cancel_work(item), "reason": "no"})
    approve = {**actions.approve_mission(2, ["sha256:" + "ab" * 32]), "approvalId": uid}
    catalogue.validate_payload("mission.approve", approve)
    catalogue.validate_payload("mission.request_changes", {**actions.request_changes(2), "feedback": "the appendix"})
