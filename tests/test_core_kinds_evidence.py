"""docs/core-kinds.md names positive and negative evidence for every core kind and transition row (PROTOCOL §22).

§22: a reference implementation may call itself fully conformant only if
automated tests, positive and negative, reach every core Command kind (§15.1), every
core Event kind (§15.2) and every transition row of §7.1 and §10.2, and
otherwise reports the narrower verified subset. The four lists below are
written out from the specification's text (never read from the catalogue or
from code); the document must have exactly one row for each, each row must
cite at least one positive and one negative test, and every cited test must
exist (resolved by ``tests.test_docs.problem``). Its summary table must count
what the rows show. Where the bundle is present, the two kind lists are
checked against the code blocks of §15.1 and §15.2 of PROTOCOL.md.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.protocol.bundle import bundle_root
from tests.test_docs import problem

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = ROOT / "docs" / "core-kinds.md"

# PROTOCOL §15.1, "Core Command kinds are:", in the order of its code block.
COMMAND_KINDS = (
    "mission.create", "mission.assign_coordinator",
    "mission.renew_coordinator", "mission.submit_for_approval",
    "mission.approve", "mission.request_changes",
    "mission.cancel", "mission.terminate",
    "mission.create_child", "mission.create_follow_up",
    "membership.change", "membership.end",
    "membership.grant_delegation",
    "message.post", "message.correct",
    "message.retract", "message.redact",
    "work.propose", "work.authorize",
    "work.offer", "work.accept_offer",
    "work.start", "work.checkpoint",
    "work.block", "work.unblock",
    "work.submit", "work.accept_result",
    "work.fail", "work.cancel",
    "artifact.publish", "approval.grant_execution",
    "policy.grant_cooperation_override",
)  # fmt: skip

# PROTOCOL §15.2, "Core Event kinds are ...", in the order of its code block.
EVENT_KINDS = (
    "mission.created", "mission.coordinator.assigned",
    "mission.coordinator.renewed", "mission.submitted_for_approval",
    "mission.approved", "mission.changes_requested",
    "mission.cancelled", "mission.terminated",
    "mission.child.created", "mission.follow_up.created",
    "membership.changed", "membership.ended",
    "membership.delegation.granted",
    "message.posted", "message.corrected",
    "message.retracted", "message.redacted",
    "work.proposed", "work.authorized",
    "work.offer.created", "work.offer.accepted",
    "work.contract.revised", "work.started",
    "work.progressed", "work.checkpointed",
    "work.blocked", "work.unblocked",
    "work.submitted", "work.result.accepted",
    "work.failed", "work.cancelled",
    "artifact.published", "approval.execution.granted",
    "policy.cooperation_override.granted",
    "group.snapshot.created", "group.archived",
)  # fmt: skip

# PROTOCOL §7.1's table: (current state, Command or cause, next state).
ROWS_7_1 = (
    ("none", "mission.create", "active"),
    ("none", "mission.create_follow_up", "active"),
    ("none", "mission.create_child", "active"),
    ("active", "mission.submit_for_approval", "awaiting_approval"),
    ("awaiting_approval", "mission.request_changes", "active"),
    ("awaiting_approval", "mission.approve", "approved"),
    ("non-terminal", "mission.cancel", "cancelled"),
    ("non-terminal", "mission.terminate", "failed"),
)

# PROTOCOL §10.2's table: (current state, transition, next state), its code spans unquoted.
UNFINISHED = "open, offered, queued, active, blocked, or submitted"
ROWS_10_2 = (
    ("none", "work.propose", "open Work Proposal"),
    ("none or open Work Proposal", "work.authorize", "open"),
    ("open, offered, queued, active, blocked, or failed, with no live owner", "work.offer", "offered"),
    ("offered", "work.accept_offer", "queued"),
    ("offered", "offer expiry", "offered"),
    ("queued", "approval.grant_execution", "queued"),
    ("queued", "work.start", "active"),
    ("active", "work.checkpoint", "queued"),
    ("active", "work.block", "blocked"),
    ("blocked", "work.unblock", "queued or open"),
    ("active", "work.submit", "submitted"),
    ("submitted", "work.accept_result", "verified"),
    (UNFINISHED, "work.fail", "failed"),
    (UNFINISHED, "work.cancel", "cancelled"),
    ("open, offered, queued, active, or blocked", "mission.create_child", "blocked"),
    ("blocked", "linked child Mission approval", "verified"),
    ("blocked", "linked child Mission failure", "blocked or failed"),
    (UNFINISHED, "parent Mission failure or cancellation", "failed or cancelled"),
)

# Each table of the document: its heading's start, the spec's keys, how many leading cells form a key,
# and which cells hold the positive and negative citations.
TABLES = {
    "Core Command kinds": (tuple((k,) for k in COMMAND_KINDS), 1, 1, 2),
    "Core Event kinds": (tuple((k,) for k in EVENT_KINDS), 1, 2, 3),
    "§7.1": (ROWS_7_1, 3, 3, 4),
    "§10.2": (ROWS_10_2, 3, 3, 4),
}
SUMMARY = {
    "Core Command kinds": "Core Command kinds (§15.1)",
    "Core Event kinds": "Core Event kinds (§15.2)",
    "§7.1": "§7.1 Mission lifecycle rows",
    "§10.2": "§10.2 WorkItem rows",
}
CITATION = re.compile(r"tests/(?:[\w.-]+/)*[\w.-]+\.py::\w+(?:::\w+)*(?:\[[^\]\s`]*\])?")


def sections(text: str) -> dict[str, str]:
    """The text under each ``## `` heading, by heading."""
    parts = re.split(r"^## +(.+)$", text, flags=re.M)
    return {heading.strip(): body for heading, body in zip(parts[1::2], parts[2::2], strict=True)}


def table_rows(body: str) -> list[list[str]]:
    """The body rows of the first Markdown table in ``body``, as cells."""
    lines = [line for line in body.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:]]


def citations(cell: str) -> list[str]:
    return CITATION.findall(cell)


def gaps(text: str) -> list[str]:
    """Every way ``text`` falls short of §22's evidence: a kind or row without exactly one row, a row
    without a positive or a negative citation, a citation naming no test, a summary count that is wrong."""
    found: list[str] = []
    by_heading = sections(text)
    summary = {row[0]: row[1:] for row in table_rows(by_heading.get("Verified subset (§22)", ""))}
    for title, (keys, width, positive, negative) in TABLES.items():
        heading = next((h for h in by_heading if h.startswith(title)), None)
        if heading is None:
            found.append(f"no section {title}")
            continue
        rows: dict[tuple[str, ...], list[list[str]]] = {}
        for cells in table_rows(by_heading[heading]):
            rows.setdefault(tuple(cell.replace("`", "") for cell in cells[:width]), []).append(cells)
        complete = 0
        for key in keys:
            listed = rows.pop(key, [])
            if len(listed) != 1:
                found.append(f"{title}: {' | '.join(key)} has {len(listed)} rows")
                continue
            cells = listed[0]
            both = True
            for side, index in (("positive", positive), ("negative", negative)):
                cited = citations(cells[index]) if index < len(cells) else []
                both &= bool(cited)
                if not cited:
                    found.append(f"{title}: {' | '.join(key)} cites no {side} test")
                for reference in cited:
                    why = problem(re.sub(r"\[[^\]]*\]$", "", reference))
                    if why is not None:
                        found.append(f"{title}: {' | '.join(key)}: {reference}: {why}")
            complete += both
        found.extend(f"{title}: {' | '.join(key)} is not in the specification's list" for key in rows)
        counts = [f"{len(keys)}", f"{complete}"]
        if summary.get(SUMMARY[title]) != counts:
            found.append(f"the summary of {SUMMARY[title]} is {summary.get(SUMMARY[title])}, the rows show {counts}")
    return found


def test_every_core_kind_and_transition_row_has_positive_and_negative_evidence_22() -> None:
    assert gaps(DOCUMENT.read_text()) == []


def test_the_lists_are_the_specifications_sizes_22() -> None:
    # Guards against a row dropped in the copy: §15.1 lists 32 Command kinds, §15.2 36 Event kinds,
    # §7.1 has 8 rows and §10.2 18.
    sizes = (len(set(COMMAND_KINDS)), len(set(EVENT_KINDS)), len(set(ROWS_7_1)), len(set(ROWS_10_2)))
    assert sizes == (32, 36, 8, 18)


def test_a_missing_row_a_missing_side_or_a_stale_citation_is_caught_22() -> None:
    text = DOCUMENT.read_text()
    start = next(line for line in text.splitlines() if line.startswith("| `work.start` |"))
    assert any("work.start has 0 rows" in gap for gap in gaps(text.replace(start + "\n", "")))
    cells = start.split(" | ")
    one_sided = " | ".join([*cells[:2], "none yet |"])
    assert "Core Command kinds: work.start cites no negative test" in gaps(text.replace(start, one_sided))
    stale = text.replace(
        "tests/core/test_mission_lifecycle.py::test_a_follow_up_links_to_the_approved_mission_which_is_never_rewritten_7_1",
        "tests/core/test_mission_lifecycle.py::test_a_follow_up_that_is_not_there",
    )
    assert any("defines no test_a_follow_up_that_is_not_there" in gap for gap in gaps(stale))
    twice = text.replace(start, f"{start}\n{start}")
    assert any("work.start has 2 rows" in gap for gap in gaps(twice))
    row = next(line for line in text.splitlines() if line.startswith("| blocked | linked child Mission approval |"))
    assert any(
        "blocked | linked child Mission approval | verified has 0 rows" in gap
        for gap in gaps(text.replace(row + "\n", ""))
    )
    summary = "| Core Event kinds (§15.2) | 36 | 36 |"
    assert summary in text
    assert any("the summary of Core Event kinds" in gap for gap in gaps(text.replace(summary, summary[:-4] + "35 |")))


def code_block_kinds(protocol: str, heading: str, nxt: str) -> list[str]:
    """The names in the first ``text`` code block between ``heading`` and ``nxt`` of PROTOCOL.md."""
    body = protocol[protocol.index(heading) : protocol.index(nxt)]
    block = re.search(r"```text\n(.*?)```", body, re.S)
    assert block is not None, heading
    return block.group(1).split()


def test_the_written_out_kinds_are_the_code_blocks_of_15_1_and_15_2() -> None:
    protocol = (bundle_root() / "spec" / "PROTOCOL.md").read_text()
    assert code_block_kinds(protocol, "### 15.1 Commands", "### 15.2") == list(COMMAND_KINDS)
    assert code_block_kinds(protocol, "### 15.2 Events and Group order", "### 15.3") == list(EVENT_KINDS)
