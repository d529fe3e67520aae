"""The portal in a real browser (issue 7): live Approval, Evidence review, roles.

The live timeline is ``static/portal/portal.js`` on the UI socket
``/ws/ui/groups/{id}``, rendering the signed Event documents (§15.2) that
arrive in EVENT frames (§17)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser

from artifacts.review import run_review
from tests.browser.conftest import SHOTS, base_url, shot, sign_in
from tests.delivery.conftest import Daphne
from tests.portal.conftest import Person, approval_contract
from tests.portal.test_final import submit_for_approval
from tests.workitems.flow import Flow

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_granted_approval_arrives_live_on_the_mission_page(
    server: Daphne, browser: Browser, flow: Flow, pat: Person, obi: Person
) -> None:
    item = flow.authorize(approval_contract())
    flow.offer(item)
    flow.accept(item)

    watcher = sign_in(browser, server, "obi")
    watcher.goto(f"{base_url(server)}/missions/{flow.group}/")
    watcher.wait_for_selector("#live.on", timeout=15_000)
    watcher.evaluate("window.__notReloaded = true")
    assert watcher.locator('#timeline li[data-kind="approval.execution.granted"]').count() == 0

    owner = sign_in(browser, server, "pat")
    owner.goto(f"{base_url(server)}/approvals/")
    card = owner.locator(f"#approval-{item}")
    assert "risk high_risk" in card.inner_text()
    shot(owner, "owner-approvals")
    card.locator("input[name=note]").fill("cleared with security")
    card.locator("button[name=grant]").click()
    owner.wait_for_selector(".msg-success")
    assert "Accepted: approval.execution.granted" in owner.inner_text(".msg-success")
    shot(owner, "owner-approvals-granted")

    live = watcher.locator('#timeline li[data-kind="approval.execution.granted"]')
    live.wait_for(timeout=15_000)
    assert "cleared with security" in live.inner_text()
    assert watcher.evaluate("window.__notReloaded") is True  # arrived without a reload
    # The refreshed graph no longer marks the item as needing Approval.
    watcher.wait_for_function(
        # A function, not an expression: Playwright polls an expression with
        # eval(), which the portal's Content-Security-Policy refuses.
        f"() => !document.querySelector('[data-workitem=\"{item}\"]').textContent.includes('⚑ Approval')",
        timeout=10_000,
    )
    shot(watcher, "mission-live-approval")


def test_an_observer_reviews_evidence_and_sees_the_coordinators_decision_arrive_live_spec_13_2(
    server: Daphne, browser: Browser, flow: Flow, obi: Person
) -> None:
    item = flow.drive_to("submitted")
    run_review(item)  # the review pipeline (spec 13.2), synchronously
    page = sign_in(browser, server, "obi")
    page.goto(f"{base_url(server)}/missions/{flow.group}/")
    page.wait_for_selector("#live.on", timeout=15_000)
    page.evaluate("window.__notReloaded = true")
    flow.accept_result(item)  # the Coordinator Agent decides over the wire (§7.2)
    accepted = page.locator('#timeline li[data-kind="work.result.accepted"]')
    accepted.wait_for(timeout=15_000)
    assert flow.item(item).contract["goal"] in accepted.inner_text()
    assert page.evaluate("window.__notReloaded") is True
    shot(page, "observer-mission-live-result")
    page.goto(f"{base_url(server)}/missions/{flow.group}/workitems/{item}/")
    page.wait_for_selector("[data-criterion]")
    assert page.inner_text("#item-state") == "verified"
    assert page.locator("#accept-result").count() == 0  # people decide nothing here
    assert "hash verified" in (page.text_content(".artifact") or "")
    with page.expect_download() as download:
        page.click(".artifact >> text=Download")
    assert download.value.path().read_bytes()
    shot(page, "observer-review")


def test_an_observer_does_not_see_the_policy_editor_MWP_WRK_009(
    server: Daphne, browser: Browser, flow: Flow, pat: Person, obi: Person
) -> None:
    page = sign_in(browser, server, "obi")
    assert page.locator("#nav-policy").count() == 0
    response = page.goto(f"{base_url(server)}/policy/")
    assert response is not None and response.status == 403
    assert "AUTH_FORBIDDEN" in page.inner_text("main")
    shot(page, "observer-policy-forbidden")

    owner = sign_in(browser, server, "pat")
    owner.click("#nav-policy")
    owner.wait_for_selector("#policy-form")
    share = owner.locator(f'.share[data-group="{flow.group}"] .pct')
    assert share.inner_text() == "100.0%"
    shot(owner, "owner-policy")
    assert SHOTS.exists()


def test_the_mission_owner_approves_the_submitted_revision_in_the_browser_spec_7_3(
    server: Daphne, browser: Browser, flow: Flow, pat: Person
) -> None:
    artifacts = submit_for_approval(flow)
    page = sign_in(browser, server, "pat")
    page.goto(f"{base_url(server)}/missions/{flow.group}/final/")
    listed = page.inner_text("#submitted-artifacts")
    assert all(h[:19] in listed for h in artifacts)
    page.fill("textarea[name=note]", "ship it")
    page.click("#approve-mission")
    page.wait_for_selector(".msg-success")
    assert "Accepted: mission.approved" in page.inner_text(".msg-success")
    assert page.locator("#approve-mission").count() == 0  # decided: nothing waits any more
    shot(page, "owner-final-approval")
