"""The shared personas build a Mission as a client would (STYLE §5; PROTOCOL §7.1, §8)."""

from tests.conftest import AgentKey


def test_it_builds_a_mission_with_personas_PROTOCOL_7_1(
    mission: dict[str, str], owner: AgentKey, coordinator: AgentKey, worker: AgentKey, worker2: AgentKey
) -> None:
    from missions.models import Membership

    roles = {str(m.agent_id): m.roles for m in Membership.objects.filter(group_id=mission["group"], active=True)}
    assert roles == {
        owner.id: ["mission_owner"],
        coordinator.id: ["coordinator"],
        worker.id: ["worker"],
        worker2.id: ["worker"],
    }
    assert owner.kind == "person"
