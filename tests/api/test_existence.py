"""Existence oracles (issue 16 item 8, PROTOCOL §17.2): what the REST binding answers about something
the caller may not see does not depend on whether it exists. A removed member reads a Group exactly as
an absent one, and a read reached through another object (a WorkItem's review) does not hand out the
Group's ID. (Non-members and other Organizations: ``test_events.py``; Commands: ``test_commands.py``.)"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.api.support import API, bearer, error_of, events_url, http, snapshot_url, wire
from tests.conftest import AgentKey, group_revision


def answer(response: Any, group: str) -> tuple[int, dict[str, Any]]:
    document = json.loads(response.content.decode().replace(group, "<group>"))
    assert isinstance(document.pop("occurredAt", None), str), document
    return response.status_code, document


READS = {"events": events_url, "snapshot": lambda g: snapshot_url(g, 1)}


@pytest.mark.parametrize("route", sorted(READS))
def test_a_removed_member_reads_a_group_exactly_as_an_absent_one_spec_17_2(
    route: str, mission: dict[str, str], owner: AgentKey, worker2: AgentKey
) -> None:
    g, url = mission["group"], READS[route]
    token = bearer(worker2.extra["token"])
    assert http().get(events_url(g), **token).status_code == 200  # a member before
    owner.send("membership.end", g, {"principal": worker2.actor}, expected_revision=group_revision(g))
    absent = wire(str(uuid.uuid4()))
    assert answer(http().get(url(g), **token), wire(g)) == answer(http().get(url(absent), **token), absent)


def test_a_review_of_an_unknown_workitem_names_no_group(mission: dict[str, str], outsider: AgentKey) -> None:
    response = http().get(f"{API}/work-items/{wire(str(uuid.uuid4()))}/review", **bearer(outsider.extra["token"]))
    error_of(response, 404, "GROUP_NOT_FOUND")
    assert mission["group"] not in response.content.decode()
