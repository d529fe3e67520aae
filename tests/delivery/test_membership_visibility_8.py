"""Membership on the WebSocket binding ``/mwp/0.1`` (PROTOCOL §8): a late joiner's replay starts at its
``visibilityStartSequence`` whatever ``afterSequence`` it asks for, and a Worker's attention filter
sends it its WorkItem's Events and the announcements (its own Membership, offers naming it) live."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from missions.models import Group
from mwportal.protocol.ids import urn
from tests.artifacts.conftest import BASIS
from tests.conftest import AgentKey, group_revision
from tests.delivery.conftest import Client, Daphne, in_db_thread
from tests.protocol.normative import require_bundle
from tests.workitems.flow import COORDINATOR_EPOCH, contract
from workitems.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _bundle() -> None:
    require_bundle()


def head(group: str) -> int:
    return int(Group.objects.get(id=group).last_sequence)


def change(owner: AgentKey, group: str, member: AgentKey, roles: list[str], **payload: Any) -> int:
    owner.send("membership.change", group, {"principal": member.actor, "roles": roles, **payload},
               expected_revision=group_revision(group))  # fmt: skip
    return head(group)


def authorize(coordinator: AgentKey, group: str) -> str:
    item = str(uuid.uuid4())
    coordinator.send("work.authorize", group, {"workItemId": urn(item), "contract": contract()}, work_item_id=item,
                     coordinator_epoch=COORDINATOR_EPOCH)  # fmt: skip
    return item


def offer(coordinator: AgentKey, group: str, item: str, to: AgentKey) -> int:
    payload = {"workItemId": urn(item), "candidateAgentIds": [to.urn], "selectionBasis": BASIS,
               "offerExpiresInSeconds": 600}  # fmt: skip
    coordinator.send("work.offer", group, payload, expected_revision=WorkItem.objects.get(id=item).revision,
                     coordinator_epoch=COORDINATOR_EPOCH)  # fmt: skip
    return head(group)


def test_a_late_joiners_replay_starts_at_its_visibility_start_8(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey, worker2: AgentKey
) -> None:
    g = mission["group"]
    cut = head(g)
    change(owner, g, worker2, ["worker"], visibilityAfterSequence=cut)  # Walt reads from cut + 1 on
    top = change(owner, g, worker, ["worker", "reviewer"])

    async def scenario() -> tuple[list[int], list[int], list[int]]:
        late = await Client.open(daphne, worker2)
        await late.subscribe(g, 0)  # asks for everything
        restricted = [e["sequence"] for e in await late.events(g, top)]
        await late.close()
        late = await Client.open(daphne, worker2)
        await late.subscribe(g, cut + 1)  # at or past the start, the cursor is the client's
        later = [e["sequence"] for e in await late.events(g, top)]
        await late.close()
        full = await Client.open(daphne, worker)
        await full.subscribe(g, 0)
        everything = [e["sequence"] for e in await full.events(g, top)]
        await full.close()
        return restricted, later, everything

    restricted, later, everything = asyncio.run(scenario())
    assert restricted == list(range(cut + 1, top + 1))
    assert later == list(range(cut + 2, top + 1))
    assert everything == list(range(1, top + 1))  # an unrestricted Worker replays the whole history


def test_a_workers_attention_filter_sends_its_workitem_and_its_announcements_live_8(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey,
    worker2: AgentKey,
) -> None:  # fmt: skip
    """With ``announcements``, Wanda is sent what is addressed to her (her own Membership change, an offer
    naming her) beside her WorkItem's Events; Walt, filtering on the same WorkItem without announcements,
    is sent only that WorkItem's Events. Neither is sent another member's Membership change."""
    g = mission["group"]
    mine = authorize(coordinator, g)
    other, third = authorize(coordinator, g), authorize(coordinator, g)

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
        wanda = await Client.open(daphne, worker)
        walt = await Client.open(daphne, worker2)
        start = await in_db_thread(head, g)
        await wanda.subscribe(g, start, {"workItemIds": [urn(mine)], "announcements": True})
        await walt.subscribe(g, start, {"workItemIds": [urn(mine)]})
        await in_db_thread(change, owner, g, worker2, ["worker", "reviewer"])  # Walt's: no announcement for Wanda
        await in_db_thread(change, owner, g, worker, ["worker", "reviewer"])  # Wanda's own Membership
        await in_db_thread(offer, coordinator, g, other, worker)  # an offer naming Wanda
        await in_db_thread(offer, coordinator, g, third, worker2)  # an offer naming Walt only
        top = await in_db_thread(offer, coordinator, g, mine, worker2)  # the WorkItem both follow
        got_wanda = await wanda.events(g, top)
        got_walt = await walt.events(g, top)
        await wanda.close()
        await walt.close()
        return got_wanda, got_walt, start

    got_wanda, got_walt, start = asyncio.run(scenario())
    kinds = ["membership.changed", "membership.changed", "work.offer.created", "work.offer.created"]
    assert [e["kind"] for e in got_wanda] == kinds and got_wanda[0]["sequence"] > start
    assert all(e["payload"]["membership"]["member"]["id"] == worker.urn for e in got_wanda[:2])
    assert [e["payload"]["candidateAgentIds"] for e in got_wanda[2:]] == [[worker.urn], [worker2.urn]]
    assert got_wanda[-1]["workItemId"] == urn(mine)
    assert [(e["kind"], e["workItemId"]) for e in got_walt] == [("work.offer.created", urn(mine))]


def test_a_late_joining_persons_portal_stream_starts_at_its_visibility_start_8(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey
) -> None:
    """The portal's read-only stream (``/ws/ui/groups/...``) replays a person's history from its
    visibility start too; an unrestricted observer replays it all."""
    from tests.delivery.test_ui_socket import person, stream

    g = mission["group"]
    late_cookie, late_id = person("lena")
    full_cookie, full_id = person("fred")
    cut = head(g)
    for who, after in ((late_id, cut), (full_id, 0)):
        owner.send("membership.change", g, {"principal": {"type": "human", "id": urn(who)}, "roles": ["observer"],
                   "visibilityAfterSequence": after}, expected_revision=group_revision(g))  # fmt: skip
    top = head(g)
    late, _ = asyncio.run(stream(daphne, g, late_cookie, top))
    full, _ = asyncio.run(stream(daphne, g, full_cookie, top))
    assert [f["event"]["sequence"] for f in late if f["frameType"] == "EVENT"] == list(range(cut + 1, top + 1))
    assert [f["event"]["sequence"] for f in full if f["frameType"] == "EVENT"] == list(range(1, top + 1))
