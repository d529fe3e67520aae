"""The portal in a real browser (issue 7): live Approval, Evidence review, roles."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser

from artifacts.review import run_review
from tests.browser.conftest import SHOTS, base_url, shot, sign_in
from tests.delivery.conftest import Daphne
from tests.portal.conftest import Person, approval_contract
from tests.workitems.flow import Flow

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_granted_approval_arrives_live_on_the_mission_page(
    server: Daphne, browser: Browser, flow: Flow, pat: Person, cora: Person
) -> None:
    item = flow.authorize(approval_contract())
    flow.offer(item)
    flow.accept(item)

    watcher = sign_in(browser, server, "cora")
    watcher.goto(f"{base_url(server)}/missions/{flow.group}/")
    watcher.wait_for_selector("#live.on", timeout=15_000)
    watcher.evaluate("window.__notReloaded = true")
    assert watcher.locator('#timeline li[data-type="approval.execution_granted"]').count() == 0

    owner = sign_in(browser, server, "pat")
    owner.goto(f"{base_url(server)}/approvals/")
    card = owner.locator(f"#approval-{item}")
    assert "risk high" in card.inner_text()
    shot(owner, "owner-approvals")
    card.locator("input[name=note]").fill("cleared with security")
    card.locator("button[name=grant]").click()
    owner.wait_for_selector(".msg-success")
    assert "Accepted: approval.execution_granted" in owner.inner_text(".msg-success")
    shot(owner, "owner-approvals-granted")

    live = watcher.locator('#timeline li[data-type="approval.execution_granted"]')
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


def test_a_coordinator_reviews_evidence_and_accepts_the_result(
    server: Daphne, browser: Browser, flow: Flow, cora: Person
) -> None:
    item = flow.drive_to("submitted")
    run_review(item)  # the review pipeline (spec 13.2), synchronously
    page = sign_in(browser, server, "cora")
    page.goto(f"{base_url(server)}/missions/{flow.group}/")
    page.click("text=Review Evidence")
    page.wait_for_selector('[data-criterion="complete"]')
    assert "checked" in page.inner_text('[data-criterion="complete"]')
    # The pipeline's stages beside the Evidence: integrity ran; an Artifact
    # without a signed manifest leaves it inconclusive; the reviewer is awaited.
    integrity = page.locator('[data-criterion="complete"] [data-stage="integrity"]')
    assert integrity.get_attribute("data-result") == "inconclusive"
    assert page.get_attribute('[data-criterion="accurate"]', "data-outcome") == "pending"
    assert "hash verified" in (page.text_content(".artifact") or "")
    assert "text/markdown" in page.inner_text(".artifact")
    with page.expect_download() as download:
        page.click(".artifact >> text=Download")
    assert download.value.path().read_bytes() == b"# summary\n"
    shot(page, "coordinator-review")
    page.fill("textarea[name=note]", "every criterion has passing Evidence")
    page.click("#accept-result")
    page.wait_for_selector(".msg-success")
    assert "Accepted: work.result_accepted" in page.inner_text(".msg-success")
    assert page.inner_text("#item-state") == "verified"
    shot(page, "coordinator-review-accepted")
    assert flow.item(item).state == "verified"


def test_a_coordinator_does_not_see_the_policy_editor_MWP_WRK_009(
    server: Daphne, browser: Browser, flow: Flow, pat: Person, cora: Person
) -> None:
    page = sign_in(browser, server, "cora")
    assert page.locator("#nav-policy").count() == 0
    response = page.goto(f"{base_url(server)}/policy/")
    assert response is not None and response.status == 403
    assert "AUTH_FORBIDDEN" in page.inner_text("main")
    shot(page, "coordinator-policy-forbidden")

    owner = sign_in(browser, server, "pat")
    owner.click("#nav-policy")
    owner.wait_for_selector("#policy-form")
    share = owner.locator(f'.share[data-group="{flow.group}"] .pct')
    assert share.inner_text() == "100.0%"
    shot(owner, "owner-policy")
    assert SHOTS.exists()
