"""What a Group snapshot carries of its WorkItems (spec 16): enough for a
Worker restored from it alone to renew the lease it holds, see the offers
made to it and resume from the latest checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from missions.server_key import server_keypair
from missions.snapshots import snapshot_now
from mwportal.protocol.snapshot import verify_snapshot
from mwworker import Store
from tests.workitems.flow import PROGRESS, Flow


def _items(flow: Flow) -> dict[str, Any]:
    snap = snapshot_now(flow.group)
    doc = snap.document
    _, public = server_keypair()
    state = verify_snapshot(doc, server_public_key=public, organization=doc["organization"], group=flow.group)
    return {item["id"]: item for item in state["workitems"]}


def test_snapshot_carries_active_lease_open_offers_and_latest_checkpoint(flow: Flow) -> None:
    active = flow.drive_to("active")
    offered = flow.drive_to("offered")
    resumed = flow.drive_to("active")
    flow.checkpoint(resumed)
    flow.start(resumed)
    flow.lease_command(
        "work.checkpoint", resumed, {"checkpoint": {"step": 2}, "progress": {**PROGRESS, "phase": "two"}}
    )

    items = _items(flow)

    lease = items[active]["lease"]
    assert lease is not None and lease["lease_id"] == flow.leases[active]
    assert lease["agent"] == flow.worker.id and lease["expires_at"]
    assert "token" not in str(lease)  # the capability token never enters the log or a snapshot
    assert items[offered]["offers"] == [
        {"agent": flow.worker.id, "expires_at": items[offered]["offers"][0]["expires_at"]}
    ]
    assert items[offered]["lease"] is None and items[offered]["latest_checkpoint"] is None
    latest = items[resumed]["latest_checkpoint"]
    assert latest["number"] == 2 and latest["state"] == {"step": 2} and latest["progress"]["phase"] == "two"
    assert items[resumed]["lease"] is None  # a checkpoint releases the lease
    assert items[resumed]["start_by"] and items[resumed]["owner_expires_at"]


def test_a_worker_restored_from_the_snapshot_alone_knows_its_lease_offer_and_checkpoint(
    flow: Flow, tmp_path: Path
) -> None:
    """Spec 16: a Worker whose cursor fell out of the replay window restores
    from the signed snapshot and can go on: renew the lease it holds, accept
    the offer made to it, resume from the latest checkpoint."""
    active = flow.drive_to("active")
    offered = flow.drive_to("offered")
    resumed = flow.drive_to("active")
    flow.checkpoint(resumed)
    snap = snapshot_now(flow.group)
    _, public = server_keypair()
    with Store(tmp_path / "w.sqlite3", agent=flow.worker.id) as store:
        store.restore_snapshot(snap.document, public, snap.document["organization"], flow.group)
        rows = {row.workitem: row for row in store.queue(flow.group)}
        assert rows[active].lease_id == flow.leases[active] and rows[active].lease_expires_at
        assert json.loads(rows[offered].offered_to or "null") == [flow.worker.id]
        assert rows[offered].offer_expires_at
        (cp,) = store.checkpoints(flow.group, resumed)
        assert cp.number == 1 and json.loads(cp.state or "null") == {"step": 1}
