"""The MissionOwner's execution Approval queue: Grant and Deny issue Commands."""

from __future__ import annotations

import re

from tests.conftest import nothing_written
from tests.portal.conftest import Person, approval_contract, events_of
from tests.workitems.flow import Flow


def queued_for_approval(flow: Flow) -> str:
    item = flow.authorize(approval_contract())
    flow.offer(item)
    flow.accept(item)
    return item


def test_it_lists_waiting_workitems_with_risk_budgets_and_capabilities(flow: Flow, pat: Person) -> None:
    item = queued_for_approval(flow)
    page = pat.client.get("/approvals/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-workitem="{item}"' in html
    assert "Deploy to production" in html
    assert "risk high" in html
    assert "<code>deploy</code> v2.1" in html
    assert "tool_calls" in html and "<dd>50</dd>" in html


def test_grant_issues_approval_grant_execution(flow: Flow, pat: Person) -> None:
    item = queued_for_approval(flow)
    revision = flow.item(item).revision
    response = pat.client.post(
        f"/missions/{flow.group}/workitems/{item}/grant", {"revision": revision, "note": "go"}, follow=True
    )
    assert response.status_code == 200
    assert "Accepted: approval.execution_granted" in response.content.decode()
    (event,) = events_of(flow.group, "approval.execution_granted")
    assert event.actor == str(pat.agent.id)
    assert event.body["note"] == "go"
    assert flow.item(item).approved_contract_revision == flow.item(item).contract_revision


def form_revision(html: str, item: str) -> int:
    """The revision the page's form for ``item`` carries."""
    block = html[html.index(f'data-workitem="{item}"') :]
    return int(re.search(r'name="revision" value="(\d+)"', block).group(1))  # type: ignore[union-attr]


def test_a_stale_grant_form_shows_the_refusal_and_changes_nothing_MWP_EVT_007(flow: Flow, pat: Person) -> None:
    item = queued_for_approval(flow)
    revision = form_revision(pat.client.get("/approvals/").content.decode(), item)
    flow.approve(item)  # another owner decided first: the item's revision moved on
    with nothing_written():
        response = pat.client.post(f"/missions/{flow.group}/workitems/{item}/grant", {"revision": revision})
    assert response.status_code == 409
    assert "REVISION_CONFLICT: someone changed this item; reload" in response.content.decode()
    assert len(events_of(flow.group, "approval.execution_granted")) == 1


def test_a_coordinator_cannot_grant(flow: Flow, cora: Person) -> None:
    item = queued_for_approval(flow)
    with nothing_written():
        response = cora.client.post(
            f"/missions/{flow.group}/workitems/{item}/grant", {"revision": flow.item(item).revision}
        )
    assert response.status_code == 403
    assert "AUTH_FORBIDDEN: your role does not allow this" in response.content.decode()


def test_deny_fails_the_workitem_with_the_owners_evidence(flow: Flow, pat: Person) -> None:
    item = queued_for_approval(flow)
    response = pat.client.post(
        f"/missions/{flow.group}/workitems/{item}/deny",
        {"revision": flow.item(item).revision, "reason": "too risky this week"},
        follow=True,
    )
    assert "Accepted: work.failed" in response.content.decode()
    assert flow.item(item).state == "failed"
    (event,) = events_of(flow.group, "work.failed")
    (evidence,) = event.body["evidence"]
    assert evidence["method"] == "human" and evidence["result"] == "fail"
    assert evidence["summary"] == "execution Approval denied: too risky this week"
    assert evidence["producer"] == str(pat.agent.id)


def test_deny_needs_a_reason(flow: Flow, pat: Person) -> None:
    item = queued_for_approval(flow)
    with nothing_written():
        response = pat.client.post(
            f"/missions/{flow.group}/workitems/{item}/deny", {"revision": flow.item(item).revision, "reason": " "}
        )
    assert response.status_code == 400
    assert flow.item(item).state == "queued"


def test_a_coordinator_has_no_approval_queue(flow: Flow, cora: Person) -> None:
    queued_for_approval(flow)
    home = cora.client.get("/").content.decode()
    assert 'href="/approvals/"' not in home
    assert "Deploy to production" not in cora.client.get("/approvals/").content.decode()
