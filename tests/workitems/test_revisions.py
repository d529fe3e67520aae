"""A stale ``expectedRevision`` on any WorkItem Command (PROTOCOL §10.2, §15.3).

§10.2: a transition the table does not allow, or one at another than the
current aggregate revision, is refused; §15.3: a Command whose ``expectedRevision`` is
not the current revision is REVISION_CONFLICT and MUST NOT be partially applied.
For every Command kind about a WorkItem, the same Command in a state where the
table permits it is refused with a stale revision (nothing written, the state
unchanged) and accepted with the current one, through the REST binding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.ids import urn
from tests.api.support import nothing_written
from tests.conftest import AgentKey
from tests.workitems.flow import DECLINE, RENEW, Flow, contract, give_card

pytestmark = pytest.mark.usefixtures("rest")

USAGE = "ext.missionweaveprotocol.core.resource_usage_record"
DEPENDENCY_ADD = "ext.missionweaveprotocol.core.work_dependency_add"
APPROVAL = contract(sideEffectRisk="external", executionApproval="human_required")


DEPENDS: dict[str, str] = {}  # WorkItem -> the WorkItem it comes to depend on


def _dependency(f: Flow, i: str) -> Any:
    return f.send(f.coordinator, DEPENDENCY_ADD, i, {"dependencyId": urn(DEPENDS[i])})


def _worker_fail(f: Flow, i: str) -> Any:
    evidence = f.evidence(i, f.worker, result="failed")
    return f.lease_command("work.fail", i, {"reason": "timed out", "evidence": evidence})


PUBLISHED: dict[str, tuple[str, str]] = {}  # WorkItem -> its published deliverable (Artifact ID, hex hash)


def _submit(f: Flow, i: str) -> Any:
    artifact, sha = PUBLISHED[i]
    payload = {"artifactIds": [artifact], "evidence": f.evidence(i, f.worker, artifacts=[sha])}
    return f.lease_command("work.submit", i, payload)


# kind -> (the state the table permits it in, the contract, the Command)
CASES: dict[str, tuple[str, dict[str, Any] | None, Callable[[Flow, str], Any]]] = {
    "work.offer": ("open", None, lambda f, i: f.offer(i)),
    "work.accept_offer": ("offered", None, lambda f, i: f.accept(i)),
    DECLINE: ("offered", None, lambda f, i: f.send(f.worker, DECLINE, i, {"reason": "capacity"})),
    "approval.grant_execution": ("queued", APPROVAL, lambda f, i: f.approve(i)),
    "work.start": ("queued", None, lambda f, i: f.start(i)),
    RENEW: ("active", None, lambda f, i: f.renew(i)),
    USAGE: ("active", None, lambda f, i: f.lease_command(USAGE, i, {"usageDelta": {"computeSeconds": 3}})),
    "work.checkpoint": ("active", None, lambda f, i: f.checkpoint(i)),
    "work.block": ("active", None, lambda f, i: f.block(i)),
    "work.unblock": ("blocked", None, lambda f, i: f.unblock(i)),
    "work.submit": ("active", None, _submit),
    "work.accept_result": ("submitted", None, lambda f, i: f.accept_result(i)),
    "work.fail": ("open", None, lambda f, i: f.fail(i)),
    "work.fail (lease holder)": ("active", None, _worker_fail),
    "work.cancel": ("queued", None, lambda f, i: f.cancel(i)),
    DEPENDENCY_ADD: ("open", None, _dependency),
    "mission.create_child": ("open", None, lambda f, i: f.create_child(i)),
}


def _drive(flow: Flow, state: str, terms: dict[str, Any] | None) -> str:
    if terms is None:
        return flow.drive_to(state)
    item = flow.authorize(terms)
    flow.offer(item)
    flow.accept(item)
    return item


@contextmanager
def stale(flow: Flow, item: str, kind: str) -> Iterator[int]:
    """Every ``kind`` Command about ``item`` signed within carries a stale ``expectedRevision``."""
    current = flow.revision(item)
    wrong = current - 1 if current > 0 else current + 1
    original = AgentKey.command

    def command(self: AgentKey, k: str, group: str | None, payload: dict[str, Any], **kw: Any) -> dict[str, Any]:
        if k == kind and payload.get("workItemId", payload.get("parentWorkItemId")) == urn(item):
            kw["expected_revision"] = wrong
        return original(self, k, group, payload, **kw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AgentKey, "command", command)
        yield wrong


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_stale_revision_is_a_revision_conflict_and_writes_nothing_spec_10_2_spec_15_3(flow: Flow, case: str) -> None:
    state, terms, send = CASES[case]
    kind = case.split(" ")[0]
    item = _drive(flow, state, terms)
    if kind == "mission.create_child":
        give_card(flow.worker2)  # the child's Coordinator, carded before the count
    if kind == DEPENDENCY_ADD:
        DEPENDS[item] = flow.authorize(contract(goal="Collect the responses"))
    if kind == "work.submit":
        sha = flow.blob()
        PUBLISHED[item] = (flow.publish(item, sha), sha)  # the deliverable, published before the count
    with stale(flow, item, kind) as wrong, nothing_written(), pytest.raises(ProtocolError) as info:
        send(flow, item)
    assert info.value.code == ErrorCode.REVISION_CONFLICT, info.value
    assert wrong != flow.revision(item)
    assert flow.item(item).state == state
    send(flow, item)  # the same Command at the current revision is accepted
    assert flow.revision(item) > wrong


def test_every_workitem_command_kind_is_covered_spec_15_3() -> None:
    from mwportal.protocol import catalogue

    clients = {
        kind
        for kind in catalogue.COMMAND_KINDS
        if catalogue.command(kind).aggregate == "work_item"
        and catalogue.command(kind).issuers != ("service",)
        and kind != "work.authorize"  # creates the WorkItem: there is no revision yet
    }
    assert clients <= {case.split(" ")[0] for case in CASES}, clients - {c.split(" ")[0] for c in CASES}


def test_the_retry_policys_offer_with_a_stale_revision_is_a_revision_conflict_spec_15_3(flow: Flow) -> None:
    """The control plane's Command too (§11.4's re-offer): compare-and-set, nothing written."""
    from missions.authority import accept
    from missions.commands import group_service_command

    item = flow.drive_to("active")
    evidence = flow.evidence(item, flow.worker, result="failed")
    flow.lease_command("work.fail", item, {"reason": "timed out", "retryable": True, "evidence": evidence})
    payload = {
        "workItemId": urn(item),
        "candidateAgentIds": [flow.worker.urn],
        "selectionBasis": flow.item(item).selection_basis,
        "offerExpiresInSeconds": 600,
    }
    current = flow.revision(item)
    with nothing_written(), pytest.raises(ProtocolError) as info:
        accept(group_service_command("work.offer", flow.group, payload, expected_revision=current - 1))
    assert info.value.code == ErrorCode.REVISION_CONFLICT
    accept(group_service_command("work.offer", flow.group, payload, expected_revision=current))
    assert flow.item(item).state == "offered"
