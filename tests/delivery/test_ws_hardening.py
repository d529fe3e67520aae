"""The WebSocket surface under attack, against a real daphne (issue 16 items 8 and 10, on MWP 0.1's §17).

Each test is an attack the security review made: relaying another Agent's
Command, switching identity with a second HELLO, a cross-origin browser,
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

from missions.models import ActionReceipt, AgentPresence
from mwportal.protocol import frames
from mwportal.protocol.handshake import ClientHandshake
from tests.conftest import AgentKey
from tests.delivery.conftest import AGENT_PATH, Client, Daphne, handshake, in_db_thread, set_roles_command
from tests.delivery.test_agent_socket import POLICY, head, policy_payload

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


def _no_receipt(action_id: str) -> bool:
    return not ActionReceipt.objects.filter(action_id=action_id.removeprefix("urn:uuid:")).exists()


def test_it_refuses_a_command_whose_actor_is_not_the_connections_agent(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey
) -> None:
    """issue 16 item 8: the worker's connection relayed the owner's signed Command."""
    g = mission["group"]
    relayed = set_roles_command(owner, g, worker, ["worker", "reviewer"])

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        client = await Client.open(daphne, worker)
        sent = await client.command(relayed)
        refusal = await client.error()
        # The connection stays up: its own frames are still answered.
        ping = frames.ping()
        await client.send(ping)
        after = await client.recv()
        await client.close()
        return sent, refusal, {"ping": ping, "pong": after}

    sent, refusal, liveness = asyncio.run(scenario())
    assert (refusal["code"], refusal["relatedActionId"]) == ("AUTH_FORBIDDEN", relayed["actionId"])
    assert refusal["relatedFrameId"] == sent["frameId"]
    assert refusal["retryable"] is False
    assert worker.urn in refusal["message"]
    assert liveness["pong"]["replyToNonce"] == liveness["ping"]["nonce"]
    assert _no_receipt(relayed["actionId"])


def test_it_refuses_a_second_hello_and_closes_the_connection(
    daphne: Daphne, mission: dict[str, str], owner: AgentKey, worker: AgentKey, worker2: AgentKey
) -> None:
    """issue 16 item 8: a second hello switched the connection to another Principal."""
    as_other = set_roles_command(owner, mission["group"], worker, ["worker", "reviewer"])

    async def scenario() -> tuple[list[dict[str, Any]], int | None]:
        client = await Client.open(daphne, worker)
        await client.send(ClientHandshake(worker2.urn, worker2.key).start())
        await client.command(as_other)
        return await client.until_closed()

    got, code = asyncio.run(scenario())
    assert [f["error"]["code"] for f in got] == ["AUTH_FORBIDDEN"]
    assert got[0]["error"]["details"]["reason"] == "second-hello"
    assert got[0]["error"]["fatal"] is True
    assert code == 4008
    assert _no_receipt(as_other["actionId"])


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
    url = f"{daphne.url}/ws/ui/groups/{mission['group']}"
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
    assert asyncio.run(handshake(f"{daphne.url}{AGENT_PATH}", headers)) == status


# --- connections that never authenticate ------------------------------------


@pytest.mark.parametrize("stops_at", ["nothing", "client_init"])
def test_it_closes_a_connection_that_never_completes_hello_spec_6_3(
    daphne: Daphne, worker: AgentKey, worker2: AgentKey, stops_at: str
) -> None:
    """issue 16 item 8: 1,000 connections stayed open for 20 s without a hello;
    one that sends client_init and never answers the challenge is no better."""

    async def scenario() -> tuple[list[dict[str, Any]], int | None, float, dict[str, Any]]:
        started = time.monotonic()
        silent = await Client.open(daphne)
        if stops_at == "client_init":
            await silent.send(ClientHandshake(worker2.urn, worker2.key).start())
        greeted = await Client.open(daphne, worker)
        got, code = await silent.until_closed(timeout=HELLO_TIMEOUT + 10)
        elapsed = time.monotonic() - started
        # The Agent that completed HELLO is still served after the deadline.
        await greeted.send(frames.ping())
        still = await greeted.recv()
        await greeted.close()
        return got, code, elapsed, still

    got, code, elapsed, still = asyncio.run(scenario())
    errors = [f["error"] for f in got if f["frameType"] == "ERROR"]
    assert [e["code"] for e in errors] == ["AUTH_REQUIRED"]
    assert "no completed HELLO" in errors[0]["message"]
    assert code == 4003
    assert HELLO_TIMEOUT - 0.2 <= elapsed < HELLO_TIMEOUT + 3
    assert still["frameType"] == "PING"


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
        # A completed HELLO frees its slot for the next connection.
        await waiting[0].hello(worker)
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

    got, code, admitted_quiet, another_quiet = asyncio.run(scenario())
    assert [(f["error"]["code"], f["error"]["retryable"]) for f in got] == [("RATE_LIMITED", True)]
    assert got[0]["error"]["retryAfterMs"] == int(HELLO_TIMEOUT * 1000)
    assert code == 4008
    assert admitted_quiet and another_quiet


# --- unrouted paths ---------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/", "/ws/v1/agent", "/ws/v1/ui/groups/a", "/mwp/0.1/extra", "/mwp/0.2", "/ws/ui/groups/a/b", "/ws/nothing"],
)
def test_it_refuses_an_unrouted_path_at_the_handshake(daphne: Daphne, path: str) -> None:
    """issue 16 item 8: unrouted WebSocket paths answered 500 at the handshake;
    the version-1 routes are gone with no compatibility layer (issue 18 item 8)."""
    assert asyncio.run(handshake(daphne.url + path)) == 403
    assert asyncio.run(handshake(f"{daphne.url}{AGENT_PATH}")) == 101


# --- subscribe and presence bounds ------------------------------------------


def test_it_rate_limits_subscribes_with_retry_after(daphne: Daphne, worker: AgentKey) -> None:
    """issue 16 item 8: subscribes had no rate limit."""

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        client = await Client.open(daphne, worker)
        # Each SUBSCRIBE draws on the bucket, whatever it is answered (here
        # GROUP_NOT_FOUND); past the burst, RATE_LIMITED.
        for _ in range(SUBSCRIBE_BURST + 2):
            await client.subscribe(str(uuid.uuid4()), 0)
        answers = [await client.error() for _ in range(SUBSCRIBE_BURST + 2)]
        limited = [a for a in answers if a["code"] == "RATE_LIMITED"]
        await asyncio.sleep(limited[-1]["retryAfterMs"] / 1000)
        await client.subscribe(str(uuid.uuid4()), 0)
        after_wait = [await client.error()]
        await client.close()
        return answers, after_wait

    answers, after_wait = asyncio.run(scenario())
    assert [a["code"] for a in answers] == ["GROUP_NOT_FOUND"] * SUBSCRIBE_BURST + ["RATE_LIMITED"] * 2
    limited = answers[SUBSCRIBE_BURST:]
    assert all(a["retryable"] is True and 0 < a["retryAfterMs"] <= 1000 for a in limited)
    # Past the wait the frame is taken again (and refused for its own reason).
    assert after_wait[0]["code"] == "GROUP_NOT_FOUND"


def test_it_caps_the_groups_one_connection_follows(daphne: Daphne, mission: dict[str, str], worker: AgentKey) -> None:
    """issue 16 item 8: no quota on subscribed Groups (here MWP_WS_MAX_SUBSCRIPTIONS=1)."""
    g = mission["group"]
    last = head(g)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        client = await Client.open(daphne, worker)
        await client.subscribe(g, last - 1)
        first = await client.recv()
        await client.subscribe(str(uuid.uuid4()), 0)
        over = await client.recv()
        # The Group already followed may be subscribed again (a resume).
        await client.subscribe(g, last - 1)
        again = await client.recv()
        await client.close()
        return first, over, again

    first, over, again = asyncio.run(scenario())
    assert (first["frameType"], first["event"]["sequence"]) == ("EVENT", last)
    assert (over["error"]["code"], over["error"]["retryable"]) == ("RATE_LIMITED", True)
    assert "follows 1 Groups" in over["error"]["message"]
    assert (again["frameType"], again["event"]["sequence"]) == ("EVENT", last)


def _presence(agent: AgentKey, available: int) -> dict[str, Any]:
    return {
        "agentId": agent.urn,
        "sessionEpoch": agent.session_epoch,
        "status": "online",
        "capacity": {"maxSlots": 8, "activeSlots": 8 - available, "availableSlots": available, "queuedItems": 0},
        "capabilityAvailability": [],
        "lastHeartbeat": "2026-01-01T00:00:00Z",
        "expiresAt": "2026-01-01T00:01:00Z",
    }


def test_it_rate_limits_pings_with_presence(daphne: Daphne, worker: AgentKey) -> None:
    """issue 16 item 8: presence frames had no rate limit (each is a database write)."""

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        client = await Client.open(daphne, worker)
        for available in range(PRESENCE_BURST + 2):
            await client.send(frames.ping(presence=_presence(worker, available)))
        got = [await client.recv() for _ in range(PRESENCE_BURST + 2)]
        # Read before closing: a disconnect stores the Agent as gone.
        stored = await in_db_thread(lambda: AgentPresence.objects.get(agent_id=worker.id).capacity)
        await client.close()
        return got, stored

    got, stored = asyncio.run(scenario())
    assert [f["frameType"] for f in got] == ["PING"] * PRESENCE_BURST + ["ERROR"] * 2
    limited = [f["error"] for f in got[PRESENCE_BURST:]]
    assert [e["code"] for e in limited] == ["RATE_LIMITED"] * 2
    assert all(0 < e["retryAfterMs"] <= 1000 for e in limited)
    # What was refused was not written: the last stored capacity is the burst's last.
    assert stored["availableSlots"] == PRESENCE_BURST - 1


def test_it_closes_a_connection_that_floods_past_the_limits(daphne: Daphne, worker: AgentKey) -> None:
    """issue 16 item 8: a flood beyond the bad-frame bound closes the connection."""

    async def scenario() -> tuple[list[dict[str, Any]], int | None]:
        client = await Client.open(daphne, worker)
        for _ in range(200):
            await client.send(frames.ping())
        return await client.until_closed()

    got, code = asyncio.run(scenario())
    assert code == 4008
    errors = [f["error"] for f in got if f["frameType"] == "ERROR"]
    assert {e["code"] for e in errors[:-1]} == {"RATE_LIMITED"}
    assert "more than 20 bad frames" in errors[-1]["message"]


def test_it_answers_within_the_limits_as_before(daphne: Daphne, org: dict[str, str], planner: AgentKey) -> None:
    """The bounds do not touch an Agent that stays within them: HELLO,
    PING with presence, SUBSCRIBE and its own Command go through on one connection."""
    admin = org["admin_group"]
    top = head(admin)

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
        client = await Client.open(daphne, planner)
        own = await in_db_thread(lambda: planner.command(POLICY, admin, policy_payload()))
        await client.send(frames.ping(presence=_presence(planner, 2)))
        await client.subscribe(admin, top)
        await client.command(own)
        got = [await client.recv(), await client.recv()]
        # Frames are handled in order, so the presence is stored by now; a
        # disconnect would store the Agent as gone.
        stored = await in_db_thread(lambda: AgentPresence.objects.get(agent_id=planner.id).capacity)
        await client.close()
        return got, stored, own

    got, stored, own = asyncio.run(scenario())
    by_type = {f["frameType"]: f for f in got}
    event = by_type["EVENT"]["event"]
    assert (event["cause"]["id"], event["sequence"]) == (own["actionId"], top + 1)
    assert stored["availableSlots"] == 2
