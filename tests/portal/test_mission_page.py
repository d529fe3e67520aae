"""The Mission page: the DAG with states coloured, active leases, queue depth, the timeline."""

from __future__ import annotations

import json
import re

from missions.models import Group, GroupEvent
from mwportal.protocol import catalogue
from mwportal.protocol.ids import urn
from portal.visuals import STATE_COLOURS, dag_layout, queue_depth
from tests.portal.conftest import Person
from tests.protocol.normative import normative_problems, require_bundle
from tests.workitems.flow import Flow, contract


def test_the_page_draws_every_workitem_in_its_state_colour(flow: Flow, obi: Person) -> None:
    states = {state: flow.drive_to(state) for state in ("open", "queued", "active", "submitted", "verified")}
    html = obi.client.get(f"/missions/{flow.group}/").content.decode()
    for state, item in states.items():
        node = html[html.index(f'data-workitem="{item}"') :][:600]
        assert f'data-state="{state}"' in node
        assert STATE_COLOURS[state] in node
    assert '<svg class="dag"' in html and '<svg class="chart"' in html


def test_active_leases_show_time_to_expiry(flow: Flow, obi: Person) -> None:
    flow.drive_to("active")
    html = obi.client.get(f"/missions/{flow.group}/").content.decode()
    assert 'class="countdown" data-expires="' in html
    assert "Wanda Worker" in html


def test_the_timeline_and_the_live_client_start_at_the_head_spec_15_2(flow: Flow, obi: Person) -> None:
    item = flow.drive_to("queued")
    html = obi.client.get(f"/missions/{flow.group}/").content.decode()
    client = json.loads(html.split('<script id="mission-client" type="application/json">')[1].split("</script>")[0])
    head = Group.objects.get(id=flow.group).last_sequence
    assert client["after"] == head and client["group"] == flow.group
    assert client["socket_path"] == f"/ws/ui/groups/{flow.group}"
    assert client["goals"][item] == flow.item(item).contract["goal"]
    # The timeline draws the stored signed Event documents: each line names its kind and Event ID.
    newest = GroupEvent.objects.get(group_id=flow.group, sequence=head).as_wire()
    assert newest["kind"] == "work.offer.accepted"
    assert f'data-seq="{head}" data-kind="work.offer.accepted" data-event-id="{newest["eventId"]}"' in html


def test_the_timeline_reads_documents_that_are_normative_events_spec_15_2(flow: Flow, obi: Person) -> None:
    require_bundle()
    flow.drive_to("active")
    for event in GroupEvent.objects.filter(group_id=flow.group):
        document = event.as_wire()
        assert normative_problems("event", document) == [], document["kind"]
        catalogue.validate_payload(document["kind"], document["payload"])


def test_the_live_parts_are_rendered_for_members(flow: Flow, obi: Person) -> None:
    flow.drive_to("active")
    parts = obi.client.get(f"/missions/{flow.group}/live").json()
    assert set(parts) == {"dag", "leases", "chart", "counts", "actions"}
    assert "countdown" in parts["leases"]


def test_the_dag_puts_a_dependent_after_its_dependency(flow: Flow) -> None:
    first = flow.authorize()
    second = flow.authorize(contract(dependencyWorkItemIds=[urn(first)]))
    dag = dag_layout(flow.group)
    x = {n.id: n.x for n in dag.nodes}
    assert x[second] > x[first]
    assert len(dag.edges) == 1


def test_queue_depth_follows_the_logs_catalogue_kinds_spec_15_2(flow: Flow) -> None:
    item = flow.drive_to("queued")
    flow.start(item)
    queued, active = queue_depth(flow.group, "q", "#000")
    assert [v for _, v in queued.points] == [0, 0, 1, 0]
    assert [v for _, v in active.points] == [0, 0, 0, 1]


def test_all_assets_are_local(flow: Flow, obi: Person) -> None:
    from django.contrib.staticfiles import finders

    html = obi.client.get(f"/missions/{flow.group}/").content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', html)
    assert assets == ["/static/portal/portal.css", "/static/portal/portal.js", "/static/portal/sign.js"]
    assert all(finders.find(a.removeprefix("/static/")) for a in assets)
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html
