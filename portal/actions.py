"""Issuing Commands from the portal and the admin: build, ``accept()``, report.

The one way a page changes anything: ``issue()`` builds a session-authenticated
Command for the person's Agent (``missions.commands.portal_command``) and hands
it to ``missions.authority.accept()``. A refusal comes back as an ``Outcome``
with the protocol error and its plain words; nothing was written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from missions.authority import accept
from missions.commands import portal_command
from missions.models import Agent
from mwportal.protocol import ProtocolError, format_time

from .errors import explain


@dataclass(frozen=True, slots=True)
class Outcome:
    receipt: dict[str, Any] | None
    error: ProtocolError | None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def message(self) -> str:
        """What to tell the person: the receipt in short, or the refusal in plain words."""
        if self.error is not None:
            return explain(self.error)
        assert self.receipt is not None
        events = ", ".join(f"{e['type']} (#{e['sequence']})" for e in self.receipt["events"])
        replayed = " (already recorded earlier)" if self.receipt.get("replayed") else ""
        return f"Accepted{replayed}: {events}; action {self.receipt['action_id'][:8]}"

    @property
    def status(self) -> int:
        return 200 if self.error is None else self.error.http_status


def issue(
    agent: Agent, type_: str, group: str, body: dict[str, Any], *, target: dict[str, Any] | None = None
) -> Outcome:
    """Accept one Command by ``agent``; never raises ``ProtocolError``."""
    try:
        receipt = accept(portal_command(agent, type_, str(group), body, target=target))
    except ProtocolError as error:
        return Outcome(None, error)
    return Outcome(receipt, None)


def workitem_target(workitem_id: Any, revision: int) -> dict[str, Any]:
    return {"kind": "workitem", "id": str(workitem_id), "revision": revision}


def group_target(group_id: Any, revision: int) -> dict[str, Any]:
    return {"kind": "group", "id": str(group_id), "revision": revision}


def human_evidence(
    subject: str, criteria: list[str], producer: str, result: str, summary: str, artifacts: list[str] | None = None
) -> dict[str, Any]:
    """An Evidence record of a person's decision (spec 13.2): no free-form members."""
    return {
        "subject": subject,
        "criteria": criteria,
        "method": "human",
        "result": result,
        "producer": producer,
        "timestamp": format_time(datetime.now(UTC)),
        "artifacts": artifacts or [],
        "summary": summary[:2000],
    }
