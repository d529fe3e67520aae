"""The command registry after the split of ``workitems/handlers.py`` into rooms:
every kind is still registered, by the same app, and the hooks are in place."""

from __future__ import annotations

from missions import registry
from workitems import handlers
from workitems.content import content

# Written down from the registry before the split (issue 18 item 10): a room
# that is not imported any more drops its kinds, and this list notices.
KINDS_BY_APP = {
    "missions": {
        "agent.enroll", "agent.open_session", "agent.register", "agent_card.publish", "event.redact",
        "group.snapshot", "membership.add", "membership.remove", "membership.set_roles", "mission.archive",
        "mission.create", "org.create", "org.set_priority_policy",
    },
    "workitems": {
        "approval.grant_execution", "mission.approve", "mission.cancel", "mission.create_child", "mission.fail",
        "work.accept_offer", "work.accept_result", "work.authorize", "work.block", "work.cancel", "work.checkpoint",
        "work.decline_offer", "work.expire_blocked_lease", "work.expire_lease", "work.expire_start_by", "work.fail",
        "work.offer", "work.propose", "work.raise_ambiguity", "work.record_late_result", "work.renew_lease",
        "work.start", "work.submit", "work.unblock",
    },
    "artifacts": {"artifact.publish", "artifact.upload", "context.forward", "context.publish", "review.record"},
}  # fmt: skip


def test_it_registers_every_command_kind_it_did_before_the_split() -> None:
    assert set(registry.command_types()) == set().union(*KINDS_BY_APP.values())


def test_it_keeps_each_kind_in_its_app() -> None:
    for app, kinds in KINDS_BY_APP.items():
        for kind in kinds:
            spec = registry.spec_for(kind)
            assert spec is not None
            assert spec.handler.__module__.split(".")[0] == app, f"{kind} is handled in {spec.handler.__module__}"


def test_it_keeps_the_workitem_hooks_registered() -> None:
    assert handlers.expiry.revoke_leases_of_replaced_session in registry.session_replaced_hooks
    assert handlers.expiry.fence_removed_member in registry.membership_removed_hooks
    assert handlers.outcomes.snapshot_workitems in registry.snapshot_contributors


def test_it_installs_the_artifacts_content_layer_under_workitems() -> None:
    from artifacts import handlers as artifact_handlers

    seam = content()
    assert seam.record_evidence is artifact_handlers.record_evidence
    assert seam.absent_from_group is artifact_handlers.absent_from_group
