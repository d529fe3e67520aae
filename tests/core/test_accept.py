"""The acceptance transaction of DESIGN §3, through ``accept()`` with signed envelopes.

Every refusal test checks that nothing was written: no Event, no receipt, no
change of the Group head.
"""

from __future__ import annotations

import uuid

from missions.authority import Auth, Command, accept
from missions.models import AgentCard, Group, GroupEvent, Membership, Organization
from missions.verify import verify_group_log
from mwportal.protocol import ErrorCode, parse_envelope, signed
from tests.conftest import AgentKey, group_revision, nothing_written, refused


def target(group_id: str) -> dict[str, object]:
    return {"kind": "group", "id": group_id, "revision": group_revision(group_id)}


def submit(raw: dict[str, object]) -> dict[str, object]:
    return accept(Command(parse_envelope(raw), Auth.SIGNED))


# --- Idempotency (MWP-EVT-003) ----------------------------------------------


def test_same_action_and_content_returns_original_receipt_MWP_EVT_003(
    mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]
    raw = owner.envelope(
        "membership.set_roles", g, {"agent": worker.id, "roles": ["reviewer", "worker"]}, target=target(g)
    )
    first = submit(raw)
    assert first["replayed"] is False
    with nothing_written():
        again = submit(raw)
    assert again["replayed"] is True
    assert {k: v for k, v in again.items() if k != "replayed"} == {k: v for k, v in first.items() if k != "replayed"}


def test_changed_content_under_same_action_id_is_collision_MWP_EVT_003(
    mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]
    action_id = str(uuid.uuid4())
    owner.send(
        "membership.set_roles", g, {"agent": worker.id, "roles": ["worker"]}, target=target(g), action_id=action_id
    )
    refused(
        ErrorCode.ACTION_ID_COLLISION,
        owner.send,
        "membership.set_roles",
        g,
        {"agent": worker.id, "roles": ["reviewer"]},
        target=target(g),
        action_id=action_id,
    )


def test_replay_is_checked_before_the_current_state(mission: dict[str, str], owner: AgentKey, worker: AgentKey) -> None:
    """A retried Command whose revision is now stale still gets its receipt, not a mismatch."""
    g = mission["group"]
    raw = owner.envelope("membership.set_roles", g, {"agent": worker.id, "roles": ["reviewer"]}, target=target(g))
    submit(raw)
    owner.send("membership.set_roles", g, {"agent": worker.id, "roles": ["worker"]}, target=target(g))
    assert submit(raw)["replayed"] is True


# --- Optimistic concurrency (MWP-EVT-007) -----------------------------------


def test_revision_mismatch_rejects_whole_command_MWP_EVT_007(
    mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]
    stale = {"kind": "group", "id": g, "revision": group_revision(g) - 1}
    err = refused(
        ErrorCode.REVISION_CONFLICT,
        owner.send,
        "membership.set_roles",
        g,
        {"agent": worker.id, "roles": ["reviewer"]},
        target=stale,
    )
    assert err.details == {"expected": stale["revision"], "current": group_revision(g)}
    assert Membership.objects.get(group_id=g, agent_id=worker.id).roles == ["worker"]


def test_membership_change_without_revision_is_refused_MWP_EVT_007(
    mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]
    refused(
        ErrorCode.SCHEMA_VALIDATION_FAILED,
        owner.send,
        "membership.set_roles",
        g,
        {"agent": worker.id, "roles": ["worker"]},
        target={"kind": "group", "id": g},
    )


def test_group_revision_moves_on_membership_change_not_on_other_events(
    mission: dict[str, str], owner: AgentKey, worker: AgentKey, org: dict[str, str]
) -> None:
    g = mission["group"]
    before = group_revision(g)
    receipt = owner.send("membership.set_roles", g, {"agent": worker.id, "roles": ["reviewer"]}, target=target(g))
    assert receipt["aggregate"] == {"kind": "group", "id": g, "revision": before + 1}
    admin_rev = group_revision(org["admin_group"])
    worker.send("agent_card.publish", org["admin_group"], {"capabilities": [], "max_concurrency": 1})
    assert group_revision(org["admin_group"]) == admin_rev


# --- Authentication and authorisation: refused with nothing written ----------


def test_tampered_signature_is_refused(mission: dict[str, str], owner: AgentKey, worker: AgentKey) -> None:
    g = mission["group"]
    raw = owner.envelope("membership.set_roles", g, {"agent": worker.id, "roles": ["reviewer"]}, target=target(g))
    raw["body"] = {"agent": worker.id, "roles": ["owner"]}  # changed after signing
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, submit, raw)


def test_signature_by_another_agents_key_is_refused(mission: dict[str, str], owner: AgentKey, worker: AgentKey) -> None:
    g = mission["group"]
    raw = owner.envelope("membership.set_roles", g, {"agent": worker.id, "roles": ["reviewer"]}, target=target(g))
    forged = signed(worker.private_key, {k: v for k, v in raw.items() if k != "signature"})
    refused(ErrorCode.AUTH_INVALID_SIGNATURE, submit, forged)


def test_stale_session_epoch_after_new_session_is_refused_MWP_WRK_014(
    mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]
    old_epoch = owner.session_epoch
    owner.open_session()
    assert owner.session_epoch == old_epoch + 1
    refused(
        ErrorCode.AUTH_STALE_SESSION,
        owner.send,
        "membership.set_roles",
        g,
        {"agent": worker.id, "roles": ["reviewer"]},
        target=target(g),
        session_epoch=old_epoch,
    )
    owner.send("membership.set_roles", g, {"agent": worker.id, "roles": ["reviewer"]}, target=target(g))


def test_non_member_is_refused(mission: dict[str, str], outsider: AgentKey, worker: AgentKey) -> None:
    # Issue 16 item 8: answered as an absent Group would be (no existence oracle).
    g = mission["group"]
    refused(
        ErrorCode.GROUP_NOT_FOUND,
        outsider.send,
        "membership.set_roles",
        g,
        {"agent": worker.id, "roles": ["reviewer"]},
        target=target(g),
    )


def test_removed_member_is_refused(
    mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]
    owner.send(
        "membership.set_roles", g, {"agent": coordinator.id, "roles": ["coordinator", "owner"]}, target=target(g)
    )
    owner.send("membership.remove", g, {"agent": coordinator.id}, target=target(g))
    refused(
        ErrorCode.GROUP_NOT_FOUND,
        coordinator.send,
        "membership.set_roles",
        g,
        {"agent": worker.id, "roles": ["reviewer"]},
        target=target(g),
    )


def test_wrong_role_is_refused(mission: dict[str, str], coordinator: AgentKey, worker: AgentKey) -> None:
    g = mission["group"]
    refused(
        ErrorCode.AUTH_FORBIDDEN,
        coordinator.send,
        "membership.set_roles",
        g,
        {"agent": worker.id, "roles": ["owner"]},
        target=target(g),
    )


def test_stale_membership_epoch_is_refused(
    mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey
) -> None:
    g = mission["group"]
    owner.send(
        "membership.set_roles", g, {"agent": coordinator.id, "roles": ["coordinator", "owner"]}, target=target(g)
    )
    current = Membership.objects.get(group_id=g, agent_id=coordinator.id).epoch
    refused(
        ErrorCode.MEMBERSHIP_STALE,
        coordinator.send,
        "membership.set_roles",
        g,
        {"agent": worker.id, "roles": ["reviewer"]},
        target=target(g),
        membership_epoch=current - 1,
    )
    coordinator.send(
        "membership.set_roles",
        g,
        {"agent": worker.id, "roles": ["reviewer"]},
        target=target(g),
        membership_epoch=current,
    )


def test_unknown_group_is_not_found(owner: AgentKey, worker: AgentKey) -> None:
    g = str(uuid.uuid4())
    refused(
        ErrorCode.GROUP_NOT_FOUND,
        owner.send,
        "membership.set_roles",
        g,
        {"agent": worker.id, "roles": ["worker"]},
        target={"kind": "group", "id": g, "revision": 1},
    )


def test_agents_cannot_act_as_system(org: dict[str, str], owner: AgentKey) -> None:
    raw = owner.envelope("agent.register", org["admin_group"], {})
    raw["actor"] = "system"
    refused(ErrorCode.AUTH_FORBIDDEN, submit, raw)


# --- Commands of this issue -------------------------------------------------


def test_mission_create_makes_group_with_owner_membership(owner: AgentKey) -> None:
    g, m = str(uuid.uuid4()), str(uuid.uuid4())
    receipt = owner.send("mission.create", g, {"mission": m, "title": "T", "objective": "O"})
    assert receipt["aggregate"] == {"kind": "group", "id": g, "revision": 1}
    assert [e["type"] for e in receipt["events"]] == ["mission.created", "membership.added"]
    assert [e["sequence"] for e in receipt["events"]] == [1, 2]
    membership = Membership.objects.get(group_id=g, agent_id=owner.id)
    assert (membership.roles, membership.epoch, membership.active) == (["owner"], 1, True)
    added = GroupEvent.objects.get(group_id=g, sequence=2)
    assert added.body == {"agent": owner.id, "roles": ["owner"], "membership_epoch": 1}


def test_mission_create_needs_mission_owner(coordinator: AgentKey) -> None:
    refused(
        ErrorCode.AUTH_FORBIDDEN,
        coordinator.send,
        "mission.create",
        str(uuid.uuid4()),
        {"mission": str(uuid.uuid4()), "title": "T", "objective": "O"},
    )


def test_mission_create_on_existing_group_is_refused(mission: dict[str, str], owner: AgentKey) -> None:
    refused(
        ErrorCode.REVISION_CONFLICT,
        owner.send,
        "mission.create",
        mission["group"],
        {"mission": str(uuid.uuid4()), "title": "T", "objective": "O"},
    )


def test_membership_lifecycle_bumps_epochs(mission: dict[str, str], owner: AgentKey, worker: AgentKey) -> None:
    g = mission["group"]
    epoch = Membership.objects.get(group_id=g, agent_id=worker.id).epoch
    r = owner.send("membership.set_roles", g, {"agent": worker.id, "roles": ["worker", "reviewer"]}, target=target(g))
    assert GroupEvent.objects.get(event_id=r["events"][0]["event_id"]).body == {
        "agent": worker.id,
        "roles": ["reviewer", "worker"],
        "membership_epoch": epoch + 1,
    }
    owner.send("membership.remove", g, {"agent": worker.id}, target=target(g))
    m = Membership.objects.get(group_id=g, agent_id=worker.id)
    assert (m.active, m.epoch) == (False, epoch + 2)
    owner.send("membership.add", g, {"agent": worker.id, "roles": ["worker"]}, target=target(g))
    m.refresh_from_db()
    assert (m.active, m.epoch, m.roles) == (True, epoch + 3, ["worker"])


def test_adding_an_existing_member_is_invalid(mission: dict[str, str], owner: AgentKey, worker: AgentKey) -> None:
    g = mission["group"]
    refused(
        ErrorCode.INVALID_STATE_TRANSITION,
        owner.send,
        "membership.add",
        g,
        {"agent": worker.id, "roles": ["worker"]},
        target=target(g),
    )


def test_a_group_keeps_an_owner(mission: dict[str, str], owner: AgentKey) -> None:
    g = mission["group"]
    refused(
        ErrorCode.INVALID_STATE_TRANSITION, owner.send, "membership.remove", g, {"agent": owner.id}, target=target(g)
    )
    refused(
        ErrorCode.INVALID_STATE_TRANSITION,
        owner.send,
        "membership.set_roles",
        g,
        {"agent": owner.id, "roles": ["worker"]},
        target=target(g),
    )


def test_bad_roles_are_malformed_naming_the_field(mission: dict[str, str], owner: AgentKey, worker: AgentKey) -> None:
    g = mission["group"]
    for roles in ([], ["admiral"], ["worker", "worker"], "worker"):
        err = refused(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            owner.send,
            "membership.set_roles",
            g,
            {"agent": worker.id, "roles": roles},
            target=target(g),
        )
        assert err.details["field"] == "body.roles"


def test_agent_card_publish_versions_with_compare_and_set(org: dict[str, str], worker: AgentKey) -> None:
    a = org["admin_group"]
    caps = [{"id": "summarize", "version": "1.2.0"}]
    r1 = worker.send("agent_card.publish", a, {"capabilities": caps, "max_concurrency": 2})
    assert r1["aggregate"] == {"kind": "agent_card", "id": worker.id, "revision": 1}
    refused(
        ErrorCode.REVISION_CONFLICT,
        worker.send,
        "agent_card.publish",
        a,
        {"capabilities": caps, "max_concurrency": 3},
        target={"kind": "agent_card", "id": worker.id, "revision": 0},
    )
    worker.send(
        "agent_card.publish",
        a,
        {"capabilities": caps, "max_concurrency": 3},
        target={"kind": "agent_card", "id": worker.id, "revision": 1},
    )
    assert list(AgentCard.objects.filter(agent_id=worker.id).values_list("version", "max_concurrency")) == [
        (1, 2),
        (2, 3),
    ]


POLICY = {"classes": {"high": 4, "normal": 1}, "default_class": "normal", "groups": {}, "aging_seconds": 60}


def test_owner_sets_priority_policy(org: dict[str, str], owner: AgentKey) -> None:
    r = owner.send("org.set_priority_policy", org["admin_group"], {"policy": POLICY})
    assert r["events"][0]["type"] == "org.priority_policy_set"
    assert Organization.objects.get(id=org["id"]).priority_policy == POLICY


def test_coordinator_cannot_set_priority_policy_MWP_WRK_009(org: dict[str, str], coordinator: AgentKey) -> None:
    refused(
        ErrorCode.AUTH_FORBIDDEN, coordinator.send, "org.set_priority_policy", org["admin_group"], {"policy": POLICY}
    )


def test_invalid_priority_policy_names_the_field(org: dict[str, str], owner: AgentKey) -> None:
    bad = {**POLICY, "default_class": "urgent"}
    err = refused(
        ErrorCode.SCHEMA_VALIDATION_FAILED, owner.send, "org.set_priority_policy", org["admin_group"], {"policy": bad}
    )
    assert err.details["field"] == "body.policy.default_class"
    bad = {**POLICY, "classes": {"high": -1}}
    err = refused(
        ErrorCode.SCHEMA_VALIDATION_FAILED, owner.send, "org.set_priority_policy", org["admin_group"], {"policy": bad}
    )
    assert err.details["field"] == "body.policy.classes.high"


def test_other_organizations_agents_are_not_members_of_admin_group(org: dict[str, str]) -> None:
    from missions.commands import create_organization
    from tests.conftest import make_agent

    create_organization("globex", "Globex")
    stranger = make_agent("globex", "Stan", ["mission_owner"])
    # Issue 16 item 8: another Organization's administrative Group is as absent.
    refused(ErrorCode.GROUP_NOT_FOUND, stranger.send, "org.set_priority_policy", org["admin_group"], {"policy": POLICY})


def test_every_accepted_command_keeps_the_log_verifiable(mission: dict[str, str], org: dict[str, str]) -> None:
    for gid in (mission["group"], org["admin_group"]):
        group = Group.objects.get(id=gid)
        count, broken = verify_group_log(group)
        assert broken is None
        assert count == group.last_sequence > 0
