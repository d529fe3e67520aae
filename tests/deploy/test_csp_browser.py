"""The portal under its Content-Security-Policy in Chromium (issue 16 item 2).

Every page a person visits loads with zero policy violations, the live
timeline still connects (``connect-src``), and colours drawn through classes
instead of style attributes still show.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser import conftest as browser_kit  # skips this module without Chromium
from tests.browser.conftest import base_url, shot, sign_in
from tests.delivery.conftest import Daphne
from tests.portal.conftest import Person, approval_contract
from tests.workitems.flow import Flow

pytestmark = pytest.mark.django_db(transaction=True)
browser, server = browser_kit.browser, browser_kit.server  # the fixtures: Chromium, the portal as served

# Records every violation the page reports, before any of its own scripts run.
WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", e => window.__csp.push(e.violatedDirective + " " + e.blockedURI));
"""


def test_it_runs_every_portal_page_without_a_policy_violation(
    server: Daphne, browser: Any, flow: Flow, pat: Person, obi: Person
) -> None:
    item = flow.authorize(approval_contract())
    flow.offer(item)
    flow.accept(item)
    done = flow.drive_to("submitted")
    page = sign_in(browser, server, "pat")
    page.add_init_script(WATCH)
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text) if "Content Security Policy" in m.text else None)
    root = base_url(server)

    for url in ("/", "/approvals/", "/policy/", f"/missions/{flow.group}/workitems/{item}/",
                f"/missions/{flow.group}/workitems/{done}/", f"/missions/{flow.group}/final/", "/admin/",
                "/no/such/page", f"/missions/{flow.group}/"):  # fmt: skip
        response = page.goto(root + url)
        assert response is not None and "Content-Security-Policy" in {k.title(): v for k, v in response.headers.items()}
        page.wait_for_load_state("load")
        assert page.evaluate("window.__csp") == [], url

    # The last page is the Mission: its live timeline connects under connect-src.
    page.wait_for_selector("#live.on", timeout=15_000)
    # A state's colour arrives through the class c-<hex>, not a style attribute.
    chip_colour = page.evaluate("getComputedStyle(document.querySelector('.count.c-a78bfa, .count')).borderBottomColor")
    assert chip_colour not in ("", "rgba(0, 0, 0, 0)")
    page.goto(root + "/")
    assert (
        page.evaluate("getComputedStyle(document.querySelector('.mission-card')).borderTopColor") == "rgb(37, 99, 235)"
    )
    shot(page, "csp-home")
    assert page.evaluate("window.__csp") == [] and console == [], console
    # The watcher does see a violation: an injected style attribute is refused.
    page.evaluate("document.body.insertAdjacentHTML('beforeend', '<b style=\"color: red\">x</b>')")
    page.wait_for_function("() => window.__csp.length > 0", timeout=5_000)  # a function: no eval() under the CSP
    assert page.evaluate("window.__csp")[0].startswith("style-src")
