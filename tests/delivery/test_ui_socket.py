"""``/ws/ui/groups/{id}``: the browser's live view, by Django session and Membership (DESIGN §5).

It carries the same signed Event documents as ``/mwp/0.1``, in EVENT frames,
and refuses with one ERROR frame (PROTOCOL §17.1, §19).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client as DjangoClient
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from missions.commands import register_principal
from missions.models import GroupEvent
from mwportal.protocol.ids import urn
from tests.conftest import AgentKey, group_revision
from tests.delivery.conftest import Daphne, check_frame
from tests.delivery.test_agent_socket import churn, head
from tests.protocol.normative import require_bundle

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _bundle() -> None:
    require_bundle()


def person(name: str) -> tuple[str, str]:
    """A portal user with a person Principal; their session cookie and id."""
    user = get_user_model().objects.create_user(name, password="pw-" + name)
    agent_id, _ = register_principal("acme", name.title(), "person", ["mission_owner"], None, user=user.username)
    client = DjangoClient()
    assert client.login(username=name, password="pw-" + name)
    return f"sessionid={client.cookies['sessionid'].value}", agent_id


async def stream(
    server: Daphne, group: str, cookie: str, until: int | None, query: str = "?afterSequence=0"
) -> tuple[list[dict[str, Any]], Any]:
    """Every frame of the view until sequence ``until`` (or the close), and the close code."""
    got: list[dict[str, Any]] = []
    # The portal's own origin: the scheme, host and port the page was served from.
    headers = {"Cookie": cookie, "Origin": f"http://127.0.0.1:{server.port}"}
    async with connect(f"{server.url}/ws/ui/groups/{group}{query}", additional_headers=headers) as ws:
        try:
            while until is None or not got or got[-1].get("event", {}).get("sequence", 0) < until:
                text = await asyncio.wait_for(ws.recv(), 10)
                assert isinstance(text, str)
                got.append(json.loads(text))
                check_frame(got[-1])
                if got[-1]["frameType"] == "ERROR":
                    await asyncio.wait_for(ws.recv(), 10)
        except ConnectionClosed as closed:
            return got, closed.rcvd.code if closed.rcvd else None
    return got, None


def test_a_member_watches_the_group_live_in_signed_event_documents(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    cookie, person_id = person("carla")
    g = mission["group"]
    owner.send(
        "membership.change",
        g,
        {"principal": {"type": "human", "id": urn(person_id)}, "roles": ["observer"]},
        expected_revision=group_revision(g),
    )
    top = churn(owner, g, worker, 3)
    got, _ = asyncio.run(stream(daphne, g, cookie, top))
    assert [f["frameType"] for f in got] == ["EVENT"] * top
    stored = [e.as_wire() for e in GroupEvent.objects.filter(group_id=g).order_by("sequence")]
    assert [f["event"] for f in got] == stored  # exactly what /mwp/0.1 carries


def test_the_view_starts_after_the_position_it_names(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    cookie, person_id = person("cleo")
    g = mission["group"]
    owner.send(
        "membership.change",
        g,
        {"principal": {"type": "human", "id": urn(person_id)}, "roles": ["observer"]},
        expected_revision=group_revision(g),
    )
    top = head(g)
    got, _ = asyncio.run(stream(daphne, urn(g), cookie, top, query=f"?afterSequence={top - 1}"))
    assert [f["event"]["sequence"] for f in got] == [top]


def test_a_non_member_sees_nothing(daphne: Daphne, mission: dict[str, str]) -> None:
    cookie, _ = person("nora")
    got, code = asyncio.run(stream(daphne, mission["group"], cookie, None))
    assert [f["error"]["code"] for f in got] == ["GROUP_NOT_FOUND"]  # as if absent (spec 17.2)
    assert code == 4008


def test_an_anonymous_browser_is_refused(daphne: Daphne, mission: dict[str, str]) -> None:
    got, code = asyncio.run(stream(daphne, mission["group"], "", None))
    assert got[0]["error"]["code"] == "AUTH_REQUIRED"
    assert code == 4003


def test_a_position_that_is_not_a_sequence_is_refused(daphne: Daphne, mission: dict[str, str]) -> None:
    cookie, _ = person("pia")
    got, code = asyncio.run(stream(daphne, mission["group"], cookie, None, query="?afterSequence=-1"))
    assert got[0]["error"]["code"] == "SCHEMA_VALIDATION_FAILED"
    assert code == 4008


def test_a_foreign_origin_is_refused(daphne: Daphne, mission: dict[str, str]) -> None:
    cookie, _ = person("eve")

    async def scenario() -> int:
        try:
            async with connect(
                f"{daphne.url}/ws/ui/groups/{mission['group']}",
                additional_headers={"Cookie": cookie, "Origin": "http://evil.example"},
            ):
                return 101
        except Exception as exc:
            return int(getattr(getattr(exc, "response", None), "status_code", 0))

    assert asyncio.run(scenario()) == 403
