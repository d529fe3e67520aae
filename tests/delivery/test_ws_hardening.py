"""The WebSocket surface under attack, against a real daphne (issue 16 items 8 and 10).

Each test is an attack the security review made: relaying another Agent's
Command, switching identity with a second hello, a cross-origin browser,
connections that never authenticate, unrouted paths, subscribe and presence
floods. The daphne under test runs with short timeouts and small limits
(``daphne_env`` below) so each bound is reached in a second or two.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from missions.models import AgentPresence
from tests.conftest import AgentKey, nothing_written
from tests.delivery.conftest import Client, Daphne, handshake, in_db_thread, set_roles_envelope
from tests.delivery.test_agent_socket import head

pytestmark = pytest.mark.django_db(transaction=True)

HELLO_TIMEOUT = 1.5
MAX_UNAUTHENTICATED = 4
SUBSCRIBE_BURST = 4
PRESENCE_BURST = 3
EXTRA_ORIGIN = "https://portal.example"


@pytest.fixture
def daphne_env() -> dict[str, str | None]:
    return {
        "MWP_WS_HELLO_TIMEOUT_SECONDS": str(HELLO_TIMEOUT),
        "MWP_WS_MAX_UNAUTHENTICATED_PER_ADDRESS": str(MAX_UNAUTHENTICATED),
        "MWP_WS_MAX_SUBSCRIPTIONS": "1",
        "MWP_WS_SUBSCRIBE_PER_SECOND": "1",
        "MWP_WS_SUBSCRIBE_BURST": str(SUBSCRIBE_BURST),
        "MWP_WS_PRESENCE_PER_MINUTE": "60",
        "MWP_WS_PRESENCE_BURST": str(PRESENCE_BURST),
        "MWP_WS_ALLOWED_ORIGINS": EXTRA_ORIGIN,
    }


# --- one connection is one Agent --------------------------------------------


def test_it_refuses_a_command_whose_actor_is_not_the_connections_agent(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    """issue 16 item 8: the worker's connection relayed the owner's signed Command."""
    g = mission["group"]
    relayed = set_roles_envelope(owner, g, worker, ["worker", "reviewer"])

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        client = await Client.open(daphne, worker.extra["token"])
        await client.send({"op": "command", "envelope": relayed})
        refusal = await client.recv()
        # The connection stays up: its own frames are still answered.
        await client.send({"op": "ack", "cursors": []})
        after = await client.recv()
        await client.close()
        return refusal, after

    with nothing_written():
        refusal, after = asyncio.run(scenario())
    assert (refusal["op"], refusal["code"], refusal["ref"]) == ("error", "AUTH_FORBIDDEN", relayed["action_id"])
    assert refusal["retryable"] is False
    assert worker.id in refusal["message"]
    assert (after["op"], after["code"]) == ("error", "SCHEMA_VALIDATION_FAILED")


def test_it_refuses_a_second_hello_and_closes_the_connection(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    """issue 16 item 8: a second hello switched the connection to the owner."""
    g = mission["group"]
    as_owner = set_roles_envelope(owner, g, worker, ["worker", "reviewer"])

    async def scenario() -> tuple[list[dict[str, Any]], int | None]:
        client = await Client.open(daphne, worker.extra["token"])
        await client.send({"op": "hello", "token": owner.extra["token"]})
        await client.send({"op": "command", "envelope": as_owner})
        return await client.until_closed()

    with nothing_written():
        frames, code = asyncio.run(scenario())
    assert [(f["op"], f["code"]) for f in frames] == [("error", "AUTH_FORBIDDEN")]
    assert "already said hello" in frames[0]["message"]
    assert code == 4008


# --- Origin -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("origin", "status"),
    [
        ("own", 101),
        (EXTRA_ORIGIN, 101),
        (None, 403),
        ("http://127.0.0.1:1", 403),  # another port of the same host
        ("https://127.0.0.1:{port}", 403),  # another scheme
        ("http://localhost:{port}", 403),  # an allowed host, but not this request's
        ("http://evil.example", 403),
        ("null", 403),
        ("http://127.0.0.1:{port}/path", 403),
    ],
    ids=["own", "extra", "missing", "other-port", "other-scheme", "other-host", "foreign", "null", "path"],
)
def test_it_admits_a_browser_only_from_the_portals_own_origin(
    daphne: Daphne, mission: dict[str, str], origin: str | None, status: int
) -> None:
    """issue 16 item 8: the Origin check matched the host only, ignoring scheme and port."""
    headers = {}
    if origin is not None:
        own = f"http://127.0.0.1:{daphne.port}"
        headers["Origin"] = own if origin == "own" else origin.format(port=daphne.port)
    url = f"{daphne.url}/ws/v1/ui/groups/{mission['group']}"
    assert asyncio.run(handshake(url, headers)) == status


@pytest.mark.parametrize(
    ("origin", "status"),
    [(None, 101), ("own", 101), ("http://evil.example", 403), ("http://127.0.0.1:1", 403)],
    ids=["none", "own", "foreign", "other-port"],
)
def test_it_refuses_a_foreign_origin_on_the_agents_route(daphne: Daphne, origin: str | None, status: int) -> None:
    """issue 16 item 8: a page holding a bearer token must not reach the Agents' route cross-site."""
    headers = {}
    if origin is not None:
        headers["Origin"] = f"http://127.0.0.1:{daphne.port}" if origin == "own" else origin
    assert asyncio.run(handshake(f"{daphne.url}/ws/v1/agent", headers)) == status


# --- connections that never authenticate ------------------------------------


def test_it_closes_a_connection_that_never_says_hello(daphne: Daphne, worker: AgentKey) -> None:
    """issue 16 item 8: 1,000 connections stayed open for 20 s without a hello."""

    async def scenario() -> tuple[list[dict[str, Any]], int | None, float, dict[str, Any]]:
        started = time.monotonic()
        silent = await Client.open(daphne)
        greeted = await Client.open(daphne, worker.extra["token"])
        frames, code = await silent.until_closed(timeout=HELLO_TIMEOUT + 10)
        elapsed = time.monotonic() - started
        # The Agent that said hello is still served after the deadline.
        await greeted.send({"op": "ack", "cursors": []})
        still = await greeted.recv()
        await greeted.close()
        return frames, code, elapsed, still

    frames, code, elapsed, still = asyncio.run(scenario())
    assert [(f["op"], f["code"]) for f in frames] == [("error", "AUTH_REQUIRED")]
    assert "no hello" in frames[0]["message"]
    assert code == 4003
    assert HELLO_TIMEOUT - 0.2 <= elapsed < HELLO_TIMEOUT + 3
    assert (still["op"], still["code"]) == ("error", "SCHEMA_VALIDATION_FAILED")


def test_it_caps_unauthenticated_connections_per_address(daphne: Daphne, worker: AgentKey) -> None:
    """issue 16 item 8: no bound on connections waiting for their hello."""

    async def quiet_for(client: Client, seconds: float) -> bool:
        try:
            await client.recv(timeout=seconds)
        except TimeoutError:
            return True
        return False

    async def scenario() -> tuple[list[dict[str, Any]], int | None, bool, bool]:
        waiting = [await Client.open(daphne) for _ in range(MAX_UNAUTHENTICATED)]
        refused_frames, refused_code = await (await Client.open(daphne)).until_closed()
        # A hello frees its slot for the next connection.
        await waiting[0].send({"op": "hello", "token": worker.extra["token"]})
        assert (await waiting[0].recv())["op"] == "welcome"
        admitted = await Client.open(daphne)
        admitted_quiet = await quiet_for(admitted, 0.5)
        # And a closed connection frees its slot too.
        await waiting[1].close()
        await asyncio.sleep(0.3)  # the server's side of the close must have run
        another = await Client.open(daphne)
        another_quiet = await quiet_for(another, 0.5)
        for client in [*waiting, admitted, another]:
            await client.close()
        return refused_frames, refused_code, admitted_quiet, another_quiet

    frames, code, admitted_quiet, another_quiet = asyncio.run(scenario())
    assert [(f["op"], f["code"], f["retryable"]) for f in frames] == [("error", "RATE_LIMITED", True)]
    assert frames[0]["retryAfterMs"] == int(HELLO_TIMEOUT * 1000)
    assert code == 4008
    assert admitted_quiet and another_quiet


# --- unrouted paths ---------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/ws/v1/nothing", "/ws/v1/ui/groups/a/b", "/ws/v1/agent/extra"])
def test_it_refuses_an_unrouted_path_at_the_handshake(daphne: Daphne, path: str) -> None:
    """issue 16 item 8: unrouted WebSocket paths answered 500 at the handshake."""
    assert asyncio.run(handshake(daphne.url + path)) == 403
    assert asyncio.run(handshake(f"{daphne.url}/ws/v1/agent")) == 101


# --- subscribe and presence bounds ------------------------------------------


def test_it_rate_limits_subscribes_with_retry_after(daphne: Daphne, worker: AgentKey) -> None:
    """issue 16 item 8: subscribes and unsubscribes had no rate limit."""

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        client = await Client.open(daphne, worker.extra["token"])
        # Unsubscribing from a Group not followed answers nothing, and still
        # draws on the bucket: the burst goes through silently.
        for _ in range(SUBSCRIBE_BURST + 2):
            await client.send({"op": "unsubscribe", "group": str(uuid.uuid4())})
        limited = [await client.recv(), await client.recv()]
        await asyncio.sleep(limited[-1]["retryAfterMs"] / 1000)
        await client.send({"op": "subscribe", "group": str(uuid.uuid4()), "after": 0})
        after_wait = [await client.recv()]
        await client.close()
        return limited, after_wait

    limited, after_wait = asyncio.run(scenario())
    assert [(f["code"], f["retryable"]) for f in limited] == [("RATE_LIMITED", True)] * 2
    assert all(0 < f["retryAfterMs"] <= 1000 for f in limited)
    # Past the wait the frame is taken again (and refused for its own reason).
    assert after_wait[0]["code"] != "RATE_LIMITED"


def test_it_caps_the_groups_one_connection_follows(daphne: Daphne, mission: dict[str, str], worker: AgentKey) -> None:
    """issue 16 item 8: no quota on subscribed Groups (here MWP_WS_MAX_SUBSCRIPTIONS=1)."""
    g = mission["group"]
    last = head(g)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        client = await Client.open(daphne, worker.extra["token"])
        await client.send({"op": "subscribe", "group": g, "after": last - 1})
        first = await client.recv()
        await client.send({"op": "subscribe", "group": str(uuid.uuid4()), "after": 0})
        over = await client.recv()
        # The Group already followed may be subscribed again (a resume).
        await client.send({"op": "subscribe", "group": g, "after": last - 1})
        again = await client.recv()
        await client.close()
        return first, over, again

    first, over, again = asyncio.run(scenario())
    assert first["op"] == "event"
    assert (over["code"], over["retryable"]) == ("RATE_LIMITED", True)
    assert "follows 1 Groups" in over["message"]
    assert again["op"] == "event"


def test_it_rate_limits_presence_frames(daphne: Daphne, worker: AgentKey) -> None:
    """issue 16 item 8: presence frames had no rate limit (each is a database write)."""

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        client = await Client.open(daphne, worker.extra["token"])
        for free in range(PRESENCE_BURST + 2):
            await client.send({"op": "presence", "capacity": {"free": free}})
        limited = [await client.recv(), await client.recv()]
        # Read before closing: a disconnect stores the Agent as gone.
        stored = await in_db_thread(lambda: AgentPresence.objects.get(agent_id=worker.id).capacity)
        await client.close()
        return limited, stored

    limited, stored = asyncio.run(scenario())
    assert [f["code"] for f in limited] == ["RATE_LIMITED"] * 2
    assert all(0 < f["retryAfterMs"] <= 1000 for f in limited)
    # What was refused was not written: the last stored capacity is the burst's last.
    assert stored == {"free": PRESENCE_BURST - 1}


def test_it_closes_a_connection_that_floods_past_the_limits(daphne: Daphne, worker: AgentKey) -> None:
    """issue 16 item 8: a flood beyond the bad-frame bound closes the connection."""

    async def scenario() -> tuple[list[dict[str, Any]], int | None]:
        client = await Client.open(daphne, worker.extra["token"])
        for _ in range(200):
            await client.send({"op": "presence", "capacity": {"free": 1}})
        return await client.until_closed()

    frames, code = asyncio.run(scenario())
    assert code == 4008
    assert {f["code"] for f in frames[:-1]} == {"RATE_LIMITED"}
    assert "more than 20 bad frames" in frames[-1]["message"]


def test_it_answers_within_the_limits_as_before(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    """The bounds do not touch an Agent that stays within them: hello,
    subscribe, presence and its own Command go through on one connection."""
    g = mission["group"]
    own = set_roles_envelope(owner, g, worker, ["worker", "reviewer"])

    top = head(g)

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        client = await Client.open(daphne, owner.extra["token"])
        await client.send({"op": "presence", "capacity": {"free": 2}})
        await client.send({"op": "subscribe", "group": g, "after": top})
        await client.send({"op": "command", "envelope": own})
        frames = [await client.recv(), await client.recv()]
        # Frames are handled in order, so the presence is stored by now; a
        # disconnect would store the Agent as gone.
        stored = await in_db_thread(lambda: AgentPresence.objects.get(agent_id=owner.id).capacity)
        await client.close()
        return frames, stored

    frames, stored = asyncio.run(scenario())
    by_op = {f["op"]: f for f in frames}
    assert by_op["receipt"]["receipt"]["action_id"] == own["action_id"]
    assert (by_op["event"]["event"]["type"], by_op["event"]["event"]["sequence"]) == ("membership.roles_set", top + 1)
    assert stored == {"free": 2}
