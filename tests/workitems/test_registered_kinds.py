"""The handler registry speaks only the catalogue's Command kinds (DESIGN §2, PROTOCOL §15.1),
and every catalogue Command about a WorkItem or a Work Proposal has a handler."""

from __future__ import annotations

from missions import registry
from mwportal.protocol import catalogue
from workitems import handlers, snapshot
from workitems.content import content

WORK_AGGREGATES = ("work_item", "work_proposal")


def test_every_registered_kind_is_a_catalogue_command_kind_spec_15_1() -> None:
    registered = set(registry.command_types())
    assert registered, "no handler is registered"
    assert registered - set(catalogue.COMMAND_KINDS) == set()


def test_every_catalogue_command_about_work_has_a_handler_spec_10() -> None:
    wanted = {kind for aggregate in WORK_AGGREGATES for kind in catalogue.command_kinds(aggregate=aggregate)}
    assert "work.offer" in wanted and "work.propose" in wanted
    assert wanted - set(registry.command_types()) == set()


def test_the_workitem_handlers_are_the_workitems_apps_own() -> None:
    for kind in registry.command_types():
        if catalogue.command(kind).aggregate in WORK_AGGREGATES and not kind.startswith("ext.mwportal.review."):
            spec = registry.spec_for(kind)
            assert spec is not None
            assert spec.handler.__module__.split(".")[0] == "workitems", (
                f"{kind} is handled in {spec.handler.__module__}"
            )


def test_compare_and_set_follows_the_catalogue_spec_15_3() -> None:
    for kind in registry.command_types():
        spec = registry.spec_for(kind)
        assert spec is not None
        if catalogue.command(kind).compare_and_set:
            assert spec.cas, kind


def test_it_keeps_the_workitem_hooks_registered() -> None:
    assert handlers.expiry.revoke_leases_of_replaced_session in registry.session_replaced_hooks
    assert handlers.expiry.fence_removed_member in registry.membership_removed_hooks
    assert snapshot.snapshot_workitems in registry.snapshot_contributors
    assert snapshot.snapshot_execution_leases in registry.snapshot_contributors


def test_it_installs_the_artifacts_content_layer_under_workitems() -> None:
    from artifacts import handlers as artifact_handlers

    seam = content()
    assert seam.record_evidence is artifact_handlers.record_evidence
    assert seam.absent_from_group is artifact_handlers.absent_from_group
