"""``python -m mwworker.sim``: replay a workload, write the plots and a summary."""

from __future__ import annotations

import json
from pathlib import Path

from mwworker import sim

EXAMPLE = Path(sim.__file__).parent / "sim_examples" / "four_groups.json"


def test_the_example_workload_replays_into_plots_and_a_summary(tmp_path: Path) -> None:
    assert sim.main([str(EXAMPLE), "--out", str(tmp_path), "--bins", "30"]) == 0
    for name in ("share.png", "waits.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 10_000
    summary = json.loads((tmp_path / "summary.json").read_text())
    groups = summary["groups"]
    assert set(groups) == {"payments", "research", "support", "incident"}
    for row in groups.values():
        assert row["worst_gap_dispatches"] <= row["bound_for_that_gap"]
    # The critical flood of the low-class Group did not starve the others.
    assert groups["incident"]["deadline_misses"] == 0
    assert groups["support"]["dispatched"] > 0


def test_the_replay_is_deterministic_and_honours_gates_and_quotas() -> None:
    workload = {
        "slots": 3,
        "policy": {"classes": {"a": 1, "b": 3}, "default_class": "a", "groups": {"B": {"class": "b", "quota": 1}}},
        "capabilities": [["py", "3"]],
        "groups": {
            "A": {"arrivals": [{"at": 0, "count": 30, "duration": 10}]},
            "B": {"arrivals": [
                {"at": 0, "count": 30, "duration": 10},
                {"at": 0, "count": 2, "duration": 10, "capabilities": [["gpu", "1"]]},
                {"at": 0, "count": 1, "duration": 10, "requires_approval": True, "approved_after": 55},
            ]},
        },
    }  # fmt: skip
    first, second = sim.simulate(workload), sim.simulate(workload)
    assert sim.summary(first) == sim.summary(second)
    b_starts = sorted(t for t, g, _, _ in first.dispatch_log if g == "B")
    # Quota 1: "B" never runs two items at once (each takes 10 s).
    assert all(later - earlier >= 10 for earlier, later in zip(b_starts, b_starts[1:], strict=False))
    # 30 plain items + the approved one; the gpu items never start.
    assert first.groups["B"].dispatched == 31
    assert first.groups["A"].dispatched == 30
