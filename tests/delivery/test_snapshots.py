"""Signed snapshots and CURSOR_TOO_OLD, end to end (spec 16; MWP-MSN-009)."""

from __future__ import annotations

import asyncio
import copy
import uuid
from typing import Any

import pytest
from rest_framework.test import APIClient

from missions.models import Group, GroupSnapshot
from missions.server_key import server_keypair
from missions.snapshots import snapshot_now
from missions.tasks import snapshot_groups
from mwportal.protocol.snapshot import SnapshotInvalid, verify_snapshot
from tests.conftest import AgentKey, group_revision
from tests.delivery.conftest import Client, Daphne, in_db_thread
from tests.delivery.test_agent_socket import churn, head


def _verify(doc: dict[str, Any], org: str, group: str, **kw: Any) -> dict[str, Any]:
    return verify_snapshot(doc, server_public_key=server_keypair()[1], organization=org, group=group, **kw)


def test_snapshot_is_signed_and_verifies(mission: dict[str, str], org: dict[str, str]) -> None:
    snap = snapshot_now(mission["group"])
    state = _verify(snap.document, org["id"], mission["group"], sequence=snap.sequence)
    assert state["mission"]["id"] == mission["mission"]
    assert {m["agent"] for m in state["memberships"]} == {m["agent"] for m in snap.document["state"]["memberships"]}
    assert snap.head_hash == snap.document["head_hash"]


@pytest.mark.parametrize(
    ("tamper", "check"),
    [
        (lambda d: d["state"]["memberships"].append({"agent": "x"}), "hash"),
        (lambda d: d.update(sequence=d["sequence"] + 1), "signature"),
        (lambda d: d.update(schema="mwp.group-snapshot/0"), "schema"),
        (lambda d: d.update(signature=("B" if d["signature"][0] != "B" else "C") + d["signature"][1:]), "signature"),
        (lambda d: d.pop("head_hash"), "schema"),
    ],
)
def test_a_tampered_snapshot_is_refused_by_the_worker_helper(
    mission: dict[str, str], org: dict[str, str], tamper: Any, check: str
) -> None:
    doc = copy.deepcopy(snapshot_now(mission["group"]).document)
    tamper(doc)
    with pytest.raises(SnapshotInvalid) as info:
        _verify(doc, org["id"], mission["group"])
    assert info.value.check == check


def test_a_snapshot_of_another_group_or_org_is_refused(mission: dict[str, str], org: dict[str, str]) -> None:
    doc = snapshot_now(mission["group"]).document
    with pytest.raises(SnapshotInvalid) as info:
        _verify(doc, org["id"], str(uuid.uuid4()))
    assert info.value.check == "group"
    with pytest.raises(SnapshotInvalid) as info:
        _verify(doc, str(uuid.uuid4()), mission["group"])
    assert info.value.check == "organization"
    with pytest.raises(SnapshotInvalid) as info:
        _verify(doc, org["id"], mission["group"], min_sequence=doc["sequence"] + 1)
    assert info.value.check == "sequence"


def test_snapshot_cadence_task_snapshots_busy_groups(
    mission: dict[str, str], owner: AgentKey, worker: AgentKey, settings: Any
) -> None:
    settings.MWP_SNAPSHOT_EVERY_EVENTS = 5
    churn(owner, mission["group"], worker, 6)
    assert snapshot_groups() >= 1
    assert GroupSnapshot.objects.filter(group_id=mission["group"]).exists()
    assert snapshot_groups() == 0  # nothing moved far enough since


def test_archival_takes_a_signed_final_snapshot_MWP_MSN_009(
    mission: dict[str, str], owner: AgentKey, org: dict[str, str]
) -> None:
    g = mission["group"]
    owner.send(
        "mission.cancel", g, {"reason": "done"}, target={"kind": "group", "id": g, "revision": group_revision(g)}
    )
    owner.send("mission.archive", g, {}, target={"kind": "group", "id": g, "revision": group_revision(g)})
    final = GroupSnapshot.objects.get(group_id=g, final=True)
    state = _verify(final.document, org["id"], g)
    assert state["mission"]["status"] == "archived"
    from missions.verify import verify_group_log

    assert verify_group_log(Group.objects.get(id=g))[1] is None


def test_redaction_is_a_tombstone_that_rewrites_nothing_MWP_MSN_009(mission: dict[str, str], owner: AgentKey) -> None:
    from missions.models import GroupEvent

    g = mission["group"]
    before = list(GroupEvent.objects.filter(group_id=g).order_by("sequence").values_list("sequence", "hash"))
    owner.send("event.redact", g, {"sequence": 1, "reason": "legal request 42"})
    after = list(GroupEvent.objects.filter(group_id=g).order_by("sequence").values_list("sequence", "hash"))
    assert after[: len(before)] == before
    tomb = GroupEvent.objects.get(group_id=g, type="event.redacted")
    assert tomb.body["sequence"] == 1


def test_rest_answers_410_with_a_snapshot_reference(
    mission: dict[str, str], owner: AgentKey, worker: AgentKey, org: dict[str, str], settings: Any
) -> None:
    settings.MWP_ONLINE_REPLAY_EVENTS = 5
    g = mission["group"]
    churn(owner, g, worker, 10)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {worker.extra['token']}")
    response = client.get(f"/api/v1/groups/{g}/events?after=0")
    assert response.status_code == 410
    body = response.json()
    assert body["code"] == "CURSOR_TOO_OLD"
    ref = body["details"]["snapshot"]
    assert set(ref) == {"group", "sequence", "hash", "signature", "url"}
    doc = client.get(ref["url"]).json()
    state = _verify(doc, org["id"], g, sequence=ref["sequence"])
    assert state["memberships"]
    page = client.get(f"/api/v1/groups/{g}/events?after={ref['sequence']}").json()
    assert [e["sequence"] for e in page["events"]] == list(range(ref["sequence"] + 1, page["head"] + 1))


@pytest.fixture
def small_window(settings: Any) -> None:
    settings.MWP_ONLINE_REPLAY_EVENTS = 5


@pytest.mark.django_db(transaction=True)
def test_socket_cursor_too_old_then_restore_and_resume(
    small_window: None,
    daphne: Daphne,
    mission: dict[str, str],
    owner: AgentKey,
    worker: AgentKey,
    org: dict[str, str],
) -> None:
    g = mission["group"]
    churn(owner, g, worker, 10)

    async def scenario() -> tuple[dict[str, Any], list[int]]:
        client = await Client.open(daphne, worker.extra["token"])
        await client.send({"op": "subscribe", "group": g, "after": 0})
        frame = await client.recv()
        assert frame["op"] == "cursor_too_old", frame
        await client.send({"op": "subscribe", "group": g, "after": frame["snapshot"]["sequence"]})
        top = await in_db_thread(head, g)
        got = [e["sequence"] for e in await client.events(g, top)]
        await client.close()
        return frame, got

    frame, got = asyncio.run(scenario())
    ref = frame["snapshot"]
    doc = GroupSnapshot.objects.get(group_id=g, sequence=ref["sequence"]).document
    _verify(doc, org["id"], g, sequence=ref["sequence"])
    assert got == list(range(ref["sequence"] + 1, head(g) + 1))


def test_memberships_endpoint_lists_groups_with_roles(
    mission: dict[str, str], worker: AgentKey, org: dict[str, str]
) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {worker.extra['token']}")
    body = client.get("/api/v1/memberships").json()
    assert body["admin_group"] == org["admin_group"]
    assert [(m["group"], m["roles"]) for m in body["memberships"]] == [(mission["group"], ["worker"])]
    assert client.get("/api/v1/server-key").json()["public_key"] == server_keypair()[1]
