"""The MissionOwner's execution Approval queue (§12): Grant and Cancel issue catalogue Commands."""

from __future__ import annotations

import re

from mwportal.protocol import catalogue
from mwportal.protocol.ids import urn
from tests.conftest import nothing_written
from tests.portal.conftest import Person, approval_contract, documents_of
from tests.workitems.flow import Flow


def queued_for_approval(flow: Flow) -> str:
    item = flow.authorize(approval_contract())
    flow.offer(item)
    flow.accept(item)
    return item


def test_it_lists_waiting_workitems_with_risk_budget_and_capabilities_spec_12(flow: Flow, pat: Person) -> None:
    item = queued_for_approval(flow)
    page = pat.client.get("/approvals/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-workitem="{item}"' in html
    assert "Deploy to production" in html
    assert "risk high_risk" in html and "approval human_required" in html
    capability = flow.item(item).contract["requiredCapabilities"][0]
    assert f"<code>{capability['id']}</code> v{capability['version']}" in html
    assert "deploy.run" in html


def test_grant_issues_approval_grant_execution(flow: Flow, pat: Person) -> None:
    """§12: the grant is the catalogue's ``approval.grant_execution``, for the current Ownership Epoch."""
    item = queued_for_approval(flow)
    revision = flow.item(item).revision
    response = pat.client.post(
        f"/missions/{flow.group}/workitems/{item}/grant", {"revision": revision, "note": "go"}, follow=True
    )
    assert response.status_code == 200
    assert "Accepted: approval.execution.granted" in response.content.decode()
    (event,) = documents_of(flow.group, "approval.execution.granted")
    assert event["actor"] == pat.actor
    assert event["payload"]["operations"] == ["deploy.run"]
    assert event["payload"]["approval"]["workItemId"] == urn(item)
    assert event["payload"]["approval"]["comments"] == "go"
    assert flow.item(item).approved_contract_revision == flow.item(item).contract_revision


def form_revision(html: str, item: str) -> int:
    """The revision the page's form for ``item`` carries."""
    block = html[html.index(f'data-workitem="{item}"') :]
    return int(re.search(r'name="revision" value="(\d+)"', block).group(1))  # type: ignore[union-attr]


def test_a_stale_grant_form_shows_the_refusal_and_changes_nothing_spec_15_3(flow: Flow, pat: Person) -> None:
    item = queued_for_approval(flow)
    revision = form_revision(pat.client.get("/approvals/").content.decode(), item)
    assert pat.client.post(f"/missions/{flow.group}/workitems/{item}/grant", {"revision": revision}).status_code == 302
    with nothing_written():
        response = pat.client.post(f"/missions/{flow.group}/workitems/{item}/grant", {"revision": revision})
    assert response.status_code == 409
    assert "REVISION_CONFLICT: someone changed this item; reload" in response.content.decode()
    assert len(documents_of(flow.group, "approval.execution.granted")) == 1


def test_an_observer_cannot_grant_and_has_no_approval_queue_spec_12(flow: Flow, obi: Person) -> None:
    item = queued_for_approval(flow)
    home = obi.client.get("/").content.decode()
    assert 'href="/approvals/"' not in home
    assert "Deploy to production" not in obi.client.get("/approvals/").content.decode()
    with nothing_written():
        response = obi.client.post(
            f"/missions/{flow.group}/workitems/{item}/grant", {"revision": flow.item(item).revision}
        )
    assert response.status_code == 403
    assert "AUTH_FORBIDDEN: your role does not allow this" in response.content.decode()


def test_cancel_issues_work_cancel_with_the_reason_spec_10_2(flow: Flow, pat: Person) -> None:
    item = queued_for_approval(flow)
    response = pat.client.post(
        f"/missions/{flow.group}/workitems/{item}/cancel",
        {"revision": flow.item(item).revision, "reason": "too risky this week"},
        follow=True,
    )
    assert "Accepted: work.cancelled" in response.content.decode()
    assert flow.item(item).state == "cancelled"
    (event,) = documents_of(flow.group, "work.cancelled")
    assert event["payload"] == {"workItemId": urn(item), "reason": "too risky this week"}
    assert event["actor"] == pat.actor


def test_cancel_needs_a_reason(flow: Flow, pat: Person) -> None:
    item = queued_for_approval(flow)
    with nothing_written():
        response = pat.client.post(
            f"/missions/{flow.group}/workitems/{item}/cancel", {"revision": flow.item(item).revision, "reason": " "}
        )
    assert response.status_code == 400
    assert flow.item(item).state == "queued"


def test_the_payloads_the_portal_builds_are_what_the_catalogue_admits_spec_15_1(flow: Flow, pat: Person) -> None:
    from portal import actions

    item = flow.item(queued_for_approval(flow))
    catalogue.validate_payload("approval.grant_execution", actions.grant_execution(item, "ok"))
    catalogue.validate_payload("work.cancel", actions.cancel_work(item, "no"))
    catalogue.validate_payload("mission.approve", actions.approve_mission(2, ["sha256:" + "ab" * 32], ""))
    catalogue.validate_payload("mission.request_changes", actions.request_changes(2, "the appendix"))
    catalogue.validate_payload("mission.cancel", actions.cancel_mission("moved"))
