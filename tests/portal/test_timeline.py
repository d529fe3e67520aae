"""The portal reads Events by their catalogue kinds and payloads (PROTOCOL §15.2, DESIGN §2).

``portal/visuals.py`` names Event kinds twice: the words of the timeline and
the state each WorkItem Event leaves its WorkItem in (the queue-depth chart).
Both tables name only kinds the catalogue defines, and ``describe`` reads every
catalogue example payload, so a renamed kind or payload member fails here
instead of silently drawing nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from mwportal.protocol import catalogue
from portal import visuals

WORKITEM = "00000000-0000-4000-8000-000000000009"  # the catalogue examples' WorkItem (examples.WORK_ITEM)


def test_every_kind_the_portal_names_is_a_catalogue_event_kind_spec_15_2() -> None:
    named = set(visuals.EVENT_WORDS) | set(visuals._STATE_AFTER)
    unknown = sorted(kind for kind in named if not catalogue.is_event(kind))
    assert unknown == [], f"kinds the catalogue does not define: {unknown}"


def test_the_chart_folds_every_work_item_kind_that_moves_a_state_spec_15_2() -> None:
    """Each kind the chart folds is about a WorkItem in the catalogue (the aggregate it changes)."""
    work_item_kinds = set(catalogue.event_kinds(aggregate="work_item"))
    assert set(visuals._STATE_AFTER) <= work_item_kinds
    for kind in ("work.offer.created", "work.offer.accepted", "work.result.accepted", "work.started"):
        assert kind in visuals._STATE_AFTER


def _examples() -> list[tuple[str, dict[str, Any]]]:
    return [(kind, example) for kind in catalogue.event_kinds() for example in catalogue.event(kind).examples]


@pytest.mark.parametrize(("kind", "payload"), _examples(), ids=[k for k, _ in _examples()])
def test_describe_reads_each_catalogue_example_payload_spec_15_2(kind: str, payload: dict[str, Any]) -> None:
    event = {"kind": kind, "payload": payload, "sequence": 1, "workItemId": payload.get("workItemId")}
    line = visuals.describe(event, {WORKITEM: "Summarize the report"}, {})
    assert isinstance(line, str) and line
    if visuals.item_of(payload, event["workItemId"]) == WORKITEM:
        assert line.startswith("Summarize the report"), line


def test_describe_names_the_member_of_a_membership_event_and_the_reason_spec_15_2() -> None:
    member = "00000000-0000-4000-8000-000000000007"
    changed = {"kind": "membership.changed", "payload": catalogue.event("membership.changed").examples[0]}
    assert visuals.describe(changed, {}, {member: "Wes"}) == "Wes — now worker"
    failed = {"kind": "work.failed", "payload": {"workItemId": "urn:uuid:" + WORKITEM, "reason": "source unreadable"}}
    assert visuals.describe(failed, {WORKITEM: "Collect"}, {}) == "Collect — failed: source unreadable"


def test_the_state_an_event_names_wins_over_the_table_spec_15_2() -> None:
    assert visuals._STATE_AFTER["work.unblocked"] == "queued"
    assert "work.unblocked" in visuals._STATUS_SAYS  # its payload's status (queued or open) is the state
    assert visuals.item_of({"workItem": {"workItemId": "urn:uuid:" + WORKITEM}}) == WORKITEM
    assert visuals.needs_execution_approval({"executionApproval": "human_required"})
    assert not visuals.needs_execution_approval({"executionApproval": "not_required"})
