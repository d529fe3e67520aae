"""Playwright (Python) driving Debian's Chromium against a real daphne.

The server is the delivery suite's daphne subprocess on a free port, reading
the test database (transactional tests, so the browser sees committed rows)
and the test's Artifact store. Screenshots go to ``var/test-output/browser/``.
The suite skips, saying why, only when ``/usr/bin/chromium`` is absent
(``.ci/run`` installs it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from tests.delivery.conftest import ROOT, Daphne, database_url
from tests.portal.conftest import _artifact_root, flow, obi, owner, pat, pat_client  # noqa: F401  (fixtures)

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = ROOT / "var" / "test-output" / "browser"

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is absent: install Debian's chromium (apt-get install -y chromium)",
                allow_module_level=True)  # fmt: skip

from playwright.sync_api import Browser, Page, sync_playwright  # noqa: E402


@pytest.fixture
def server(transactional_db: None, settings: Any) -> Iterator[Daphne]:
    # The autouse ``_artifact_root`` has pointed MWP_ARTIFACT_ROOT at this test's directory.
    # MWP_DEBUG dropped: the portal as ./mw serve runs it, debug off (issue 16 item 3).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST") and k != "MWP_DEBUG"}
    env.update({
        "MWP_DATABASE_URL": database_url(),
        "MWP_HEAD_POLL_SECONDS": "0.2",
        "MWP_SERVICE_KEY_DIR": str(settings.MWP_SERVICE_KEY_DIR),
        "MWP_ARTIFACT_ROOT": str(settings.MWP_ARTIFACT_ROOT),
        "DJANGO_SETTINGS_MODULE": "mwportal.settings",
    })  # fmt: skip
    daphne = Daphne(env)
    daphne.start()
    yield daphne
    daphne.kill()


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Browser]:
    # Playwright's sync API runs an event loop under the test; the test's own
    # ORM calls stay synchronous, so Django's async-context guard is lifted.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        yield chromium
        # The test's ORM calls ran while Playwright's loop was current, so
        # Django kept their connections in that context: close them here, in
        # the same context, before the test database is dropped.
        connections.close_all()
        chromium.close()


def base_url(server: Daphne) -> str:
    return f"http://127.0.0.1:{server.port}"


def sign_in(browser: Browser, server: Daphne, username: str) -> Page:
    """A new browser context signed in as ``username`` through the login form."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.goto(base_url(server) + "/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "pw-" + username)
    page.click("button[type=submit]")
    page.wait_for_url(base_url(server) + "/")
    return page


def shot(page: Page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
