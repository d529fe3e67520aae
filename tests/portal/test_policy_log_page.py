"""The Policy Log page (PROTOCOL §20; DESIGN §1): auditors read it, nobody else."""

from __future__ import annotations

from django.test import Client

from tests.conftest import AgentKey
from tests.portal.conftest import Person, admin_group, make_person

POLICY_SET = "ext.mwportal.governance.cooperation_policy_set"


def test_an_auditor_reads_the_policy_log_page(pat: Person, owner: AgentKey) -> None:
    owner.send(POLICY_SET, admin_group(), {"policy": {"queued_work_items": {"hard": 9}}}, expected_revision=0)
    audrey = make_person("audrey", ["auditor"])
    html = audrey.page("/policy-log/")
    assert 'data-kind="policy_set"' in html and POLICY_SET in html and owner.urn in html
    assert 'id="nav-policy-log"' in html


def test_the_policy_log_page_is_for_auditors_only(pat: Person, nick: Person) -> None:
    for person in (pat, nick):
        assert person.client.get("/policy-log/").status_code == 403
        assert 'id="nav-policy-log"' not in person.page("/")
    assert Client().get("/policy-log/").status_code == 302  # to the sign-in page
