from tests.conftest import AgentKey


def test_it_builds_a_mission_with_personas(mission: dict[str, str], owner: AgentKey) -> None:
    from missions.models import Membership

    roles = {str(m.agent_id): m.roles for m in Membership.objects.filter(group_id=mission["group"])}
    assert roles[owner.id] == ["owner"]
    assert len(roles) == 4
