"""Real threads against PostgreSQL: a bounded candidate set has one winner (PROTOCOL §10.3, §15.3)."""

from __future__ import annotations

from collections import Counter

import pytest

from missions.models import GroupEvent
from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.ids import urn
from tests.conftest import ON_POSTGRES, AgentKey, add_member, make_agent
from tests.core.test_races import run_threads
from tests.workitems.flow import Flow
from workitems.models import Offer

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="races need PostgreSQL row locks (MWP_DATABASE_URL=postgres://...)"),
    pytest.mark.django_db(transaction=True),
]


def test_eight_workers_accept_one_bounded_offer_exactly_one_epoch_spec_10_3(flow: Flow, owner: AgentKey) -> None:
    workers = [make_agent("acme", f"racer-{i}", ["worker"]) for i in range(8)]
    for w in workers:
        add_member(owner, flow.group, w, ["worker"])
    item = flow.authorize()
    flow.offer(item, agents=workers)
    revision = flow.revision(item)
    documents = [
        w.command("work.accept_offer", flow.group, {"workItemId": urn(item)}, expected_revision=revision,
                  work_item_id=item)
        for w in workers
    ]  # fmt: skip
    results = run_threads(8, lambda i: workers[i].send_document(documents[i]))
    winners = [r for r in results if isinstance(r, dict)]
    assert len(winners) == 1, results
    losers = [r for r in results if not isinstance(r, dict)]
    assert all(isinstance(r, ProtocolError) for r in losers), losers
    # A loser's stale expectedRevision (§15.3), or the winner already owns it (§19).
    assert {r.code for r in losers} <= {ErrorCode.REVISION_CONFLICT, ErrorCode.WORK_ALREADY_OWNED}, losers
    it = flow.item(item)
    assert (it.state, it.ownership_epoch) == ("queued", 1)
    statuses = Counter(Offer.objects.filter(workitem_id=item).values_list("status", flat=True))
    assert statuses == Counter({"accepted": 1, "withdrawn": 7})
    assert GroupEvent.objects.filter(aggregate_id=item, type="work.offer.accepted").count() == 1
