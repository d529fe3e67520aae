"""``/ws/v1/ui/groups/{id}``: the browser's stream, by Django session and Membership."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client as DjangoClient
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from missions.commands import register_agent
from tests.conftest import AgentKey, group_revision
from tests.delivery.conftest import Daphne, in_db_thread
from tests.delivery.test_agent_socket import churn, head

pytestmark = pytest.mark.django_db(transaction=True)


def person(name: str) -> tuple[str, str]:
    """A portal user with a person Agent; their session cookie."""
    user = get_user_model().objects.create_user(name, password="pw-" + name)
    agent_id = register_agent("acme", name.title(), "person", ["coordinator"], "", user=user.username)
    client = DjangoClient()
    assert client.login(username=name, password="pw-" + name)
    return f"sessionid={client.cookies['sessionid'].value}", agent_id


async def stream(server: Daphne, group: str, cookie: str, until: int | None) -> tuple[list[dict[str, Any]], Any]:
    frames: list[dict[str, Any]] = []
    # The portal's own origin: the scheme, host and port the page was served from.
    headers = {"Cookie": cookie, "Origin": f"http://127.0.0.1:{server.port}"}
    async with connect(f"{server.url}/ws/v1/ui/groups/{group}?after=0", additional_headers=headers) as ws:
        try:
            while until is None or not frames or frames[-1].get("event", {}).get("sequence", 0) < until:
                frames.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
                if frames[-1]["op"] == "error":
                    await asyncio.wait_for(ws.recv(), 10)
        except ConnectionClosed as closed:
            return frames, closed.rcvd.code if closed.rcvd else None
    return frames, None


def test_a_member_watches_the_group_live(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    cookie, agent_id = person("carla")
    g = mission["group"]
    owner.send(
        "membership.add",
        g,
        {"agent": agent_id, "roles": ["coordinator"]},
        target={"kind": "group", "id": g, "revision": group_revision(g)},
    )
    top = churn(owner, g, worker, 3)
    frames, _ = asyncio.run(stream(daphne, g, cookie, top))
    assert [f["event"]["sequence"] for f in frames] == list(range(1, head(g) + 1))


def test_a_non_member_sees_nothing(daphne: Daphne, mission: dict[str, str]) -> None:
    cookie, _ = person("nora")
    frames, code = asyncio.run(stream(daphne, mission["group"], cookie, None))
    assert [(f["op"], f["code"]) for f in frames] == [("error", "GROUP_NOT_FOUND")]  # as if absent (issue 16 item 8)
    assert code == 4008


def test_an_anonymous_browser_is_refused(daphne: Daphne, mission: dict[str, str]) -> None:
    frames, code = asyncio.run(stream(daphne, mission["group"], "", None))
    assert frames[0]["code"] == "AUTH_REQUIRED"
    assert code == 4003


def test_a_foreign_origin_is_refused(daphne: Daphne, mission: dict[str, str]) -> None:
    cookie, _ = person("eve")

    async def scenario() -> int:
        try:
            async with connect(
                f"{daphne.url}/ws/v1/ui/groups/{mission['group']}",
                additional_headers={"Cookie": cookie, "Origin": "http://evil.example"},
            ):
                return 101
        except Exception as exc:
            return int(getattr(getattr(exc, "response", None), "status_code", 0))

    assert asyncio.run(scenario()) == 403


def test_the_agent_hears_of_new_memberships(daphne: Daphne, owner: AgentKey, worker: AgentKey) -> None:
    from tests.delivery.conftest import Client

    g = str(uuid.uuid4())

    async def scenario() -> dict[str, Any]:
        client = await Client.open(daphne, worker.extra["token"])
        await in_db_thread(
            lambda: owner.send("mission.create", g, {"mission": str(uuid.uuid4()), "title": "New", "objective": "x"})
        )
        await in_db_thread(
            lambda: owner.send(
                "membership.add",
                g,
                {"agent": worker.id, "roles": ["worker"]},
                target={"kind": "group", "id": g, "revision": 1},
            )
        )
        frame = await client.recv(timeout=10)
        await client.close()
        return frame

    frame = asyncio.run(scenario())
    assert frame == {"op": "membership", "group": g, "roles": ["worker"], "membership_epoch": 1, "active": True}
