"""The demo reaches the end in the browser (issue 19 item 13; §7.3, DESIGN §4).

``mwp demo``'s Agents alone take the Website refresh Mission to
``awaiting_approval`` (``tests/portal/test_demo_end_to_end.py`` shows how);
then a new user, the demo's MissionOwner, signs in for the first time in
Chromium: the page enrols a key of this browser, and the owner approves the
submitted revision with an Approval signed in the page. The Mission page
shows ``approved``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from playwright.sync_api import Browser

from missions.models import Agent, GroupEvent, SigningKey
from mwportal.protocol.ids import urn
from mwportal.protocol.signing import verify
from mwportal.supervise import demo_coordinator_key, demo_reviewer_key, demo_worker_keys
from tests.browser.conftest import shot
from tests.browser.test_signing_in_the_browser import Browsing
from tests.portal.test_demo_end_to_end import Agents, agents, demo, portal_env, wait_for, web_mission  # noqa: F401
from tests.worker.conftest import portal  # noqa: F401 (the daphne fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_new_user_takes_the_demo_from_first_sign_in_to_mission_approved_in_the_browser_issue_19_13(
    agents: Agents,  # noqa: F811
    demo: dict[str, str],  # noqa: F811
    portal: Any,  # noqa: F811
    browser: Browser,
) -> None:
    var = Path(settings.VAR_DIR)
    reviewer_key, coordinator_key = demo_reviewer_key(var), demo_coordinator_key(var)
    assert reviewer_key is not None and coordinator_key is not None
    for key in [*demo_worker_keys(var), reviewer_key]:
        agents.worker(key)
    agents.coordinator(coordinator_key)
    wait_for(lambda: web_mission().status == "awaiting_approval", agents)
    mission = web_mission()
    owner = Agent.objects.get(user__username="owner")

    # First sign-in in this browser: the page makes its key and enrols it.
    known = set(SigningKey.objects.filter(principal_id=urn(owner.id)).values_list("key_id", flat=True))
    you = Browsing(browser, portal.url, "owner", demo["owner"])
    key = you.key()
    assert key["keyId"] not in known
    assert SigningKey.objects.get(key_id=key["keyId"]).principal_id == urn(owner.id)

    you.page.goto(f"{portal.url}/missions/{mission.group_id}/")
    assert you.page.inner_text("h1 .chip") == "awaiting_approval"
    you.page.click("text=Final Approval…")
    you.page.fill("textarea[name=note]", "Looks good.")
    shot(you.page, "demo-final-approval")
    you.page.click("#approve-mission")
    assert "Accepted: mission.approved" in you.outcome()

    you.page.goto(f"{portal.url}/missions/{mission.group_id}/")
    assert you.page.inner_text("h1 .chip") == "approved"
    shot(you.page, "demo-mission-approved")
    assert web_mission().status == "approved"
    (approved,) = [e.as_wire() for e in GroupEvent.objects.filter(group_id=mission.group_id, type="mission.approved")]
    assert approved["actor"] == {"type": "human", "id": urn(owner.id)}
    (command,) = you.commands()
    assert command["signature"]["keyId"] == key["keyId"] and verify(key["publicKey"], command,
                                                                      command["signature"]["value"])  # fmt: skip
    approval = command["payload"]["approval"]
    assert approval["signature"]["keyId"] == key["keyId"]
    assert verify(key["publicKey"], approval, approval["signature"]["value"])
