"""Real threads against PostgreSQL: a bounded candidate set has one winner (spec 10.3)."""

from __future__ import annotations

from collections import Counter

import pytest

from missions.models import GroupEvent
from mwportal.protocol import ProtocolError
from tests.conftest import ON_POSTGRES, AgentKey, group_revision, make_agent
from tests.core.test_races import run_threads
from tests.workitems.flow import Flow
from workitems.models import Offer

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="races need PostgreSQL row locks (MWP_DATABASE_URL=postgres://...)"),
    pytest.mark.django_db(transaction=True),
]


def test_eight_workers_accept_one_bounded_offer_exactly_one_epoch(flow: Flow, owner: AgentKey) -> None:
    workers = [make_agent("acme", f"racer-{i}", ["worker"]) for i in range(8)]
    for w in workers:
        owner.send(
            "membership.add",
            flow.group,
            {"agent": w.id, "roles": ["worker"]},
            target={"kind": "group", "id": flow.group, "revision": group_revision(flow.group)},
        )
    item = flow.authorize()
    flow.offer(item, agents=workers)
    revision = flow.item(item).revision
    target = {"kind": "workitem", "id": item, "revision": revision}
    results = run_threads(8, lambda i: workers[i].send("work.accept_offer", flow.group, {}, target=target))
    winners = [r for r in results if isinstance(r, dict)]
    assert len(winners) == 1, results
    assert all(isinstance(r, ProtocolError) for r in results if not isinstance(r, dict))
    it = flow.item(item)
    assert (it.state, it.ownership_epoch) == ("queued", 1)
    statuses = Counter(Offer.objects.filter(workitem_id=item).values_list("status", flat=True))
    assert statuses == Counter({"accepted": 1, "withdrawn": 7})
    assert GroupEvent.objects.filter(aggregate_id=item, type="work.offer_accepted").count() == 1
