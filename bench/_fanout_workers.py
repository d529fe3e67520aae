"""The processes and fixtures of ``bench/fanout.py``: the committer (signed Commands
through ``accept_document``), the bare and floor publishers, the bare broadcast
server, and the fixtures they share (a JSON file written by the parent).

Not a benchmark itself (``bench/all.py`` runs only the ``bench/*.py`` whose
name does not start with ``_``); ``bench/fanout.py --role ...`` runs these.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SUBSCRIBERS = 100
MAX_WS_BYTES = 16 * 1024 * 1024
PROTOCOL_PREFIX = "@@ "  # worker processes answer on stdout with lines starting with this


def conninfo(url: str) -> str:
    """psycopg wants ``postgresql://``; dj-database-url also takes ``postgres://``."""
    scheme, rest = url.split("://", 1)
    return "postgresql://" + rest if scheme in ("postgres", "pgsql", "postgresql") else url


def setup_django(migrate: bool) -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    if migrate:
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)


# --------------------------------------------------------------------------
# Fixtures, built through accept_document() as a client would
# --------------------------------------------------------------------------


def persona_data(p: Any) -> dict[str, Any]:
    """What a worker process needs to sign as ``p``: id, key ID, seed, Membership Epochs."""
    from mwportal.protocol.values import b64url_encode

    return {"id": p.id, "kind": p.kind, "key_id": p.key.key_id, "seed": b64url_encode(p.key.seed),
            "session_epoch": p.session_epoch, "epochs": p.epochs}  # fmt: skip


def persona(data: dict[str, Any]) -> Any:
    from bench._commands_project import Persona
    from mwportal.protocol.command import Key
    from mwportal.protocol.values import b64url_decode

    key = Key(data["key_id"], b64url_decode(data["seed"]))
    return Persona(data["id"], key, data["kind"], data["session_epoch"], dict(data["epochs"]))


def build_fixtures() -> dict[str, Any]:
    """The owner (Olivia, a person: the committer's actor), a Coordinator, one toggled
    member and 100 subscribing Agents; the one Group with all of them and 100 Groups
    with one subscriber each. Each subscriber opens its own session with HELLO."""
    from bench._commands_project import COORDINATE, make_principal, new_mission, with_card
    from missions.commands import create_organization
    from missions.models import GroupEvent

    create_organization("fanout", "Fan-out bench")
    owner = make_principal("fanout", "Olivia Owner", ["mission_owner"], kind="person")
    coordinator = with_card(make_principal("fanout", "Carl Coordinator", ["coordinator"]), COORDINATE)
    toggle = make_principal("fanout", "Toggled member", ["worker"])
    subs = [make_principal("fanout", f"Subscriber {i}", ["worker"]) for i in range(SUBSCRIBERS)]
    one = new_mission(owner, coordinator, [(toggle, ["worker"])] + [(s, ["worker"]) for s in subs], "Fan-out")
    many = [new_mission(owner, coordinator, [(toggle, ["worker"]), (s, ["worker"])], "Fan-out") for s in subs]
    # One real membership.change: its Events are the template of the baseline's frames.
    receipt = owner.send("membership.change", one, {"principal": toggle.actor, "roles": ["reviewer", "worker"]},
                         expected_revision=_revision(one))  # fmt: skip
    owner.send("membership.change", one, {"principal": toggle.actor, "roles": ["worker"]},
               expected_revision=_revision(one))  # fmt: skip
    last = GroupEvent.objects.filter(group_id=one).order_by("-sequence").first()
    assert last is not None and last.type == "membership.changed", last
    from mwportal.protocol import frames

    return {
        "owner": persona_data(owner),
        "toggle": toggle.actor,
        "subscribers": [persona_data(s) for s in subs],
        "one_group": one,
        "many_groups": many,
        "template": frames.event(last.as_wire()),
        "events_per_commit": len(receipt["events"]),
    }


def _revision(group_id: str) -> int:
    from missions.models import Group

    return int(Group.objects.values_list("revision", flat=True).get(id=group_id))


def heads(group_ids: list[str]) -> dict[str, int]:
    from missions.models import Group

    return {str(g): int(s) for g, s in Group.objects.filter(id__in=group_ids).values_list("id", "last_sequence")}


# --------------------------------------------------------------------------
# Worker processes: committer (accept()), publisher (bare), bare server
# --------------------------------------------------------------------------


def answer(obj: dict[str, Any]) -> None:
    sys.stdout.write(PROTOCOL_PREFIX + json.dumps(obj) + "\n")
    sys.stdout.flush()


# The committer and the publishers build each command or frame this long
# before its paced time: not right after the previous one, when that one is
# still being delivered and the build would compete for this machine's two
# cores with the subscribers it is measured on.
PREPARE_LEAD = 0.005


def paced(rate: float, duration: float) -> list[float]:
    """The wall-clock due times of a steady schedule starting shortly from now."""
    start = time.time() + 0.2
    return [start + k / rate for k in range(max(1, int(rate * duration)))]


def requests() -> Iterator[dict[str, Any]]:
    """The parent's measurement requests, a JSON line each on stdin, until it says quit."""
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("cmd") == "quit":
            return
        yield req


def sleep_until(due: float) -> None:
    delay = due - time.time()
    if delay > 0:
        time.sleep(delay)


def committer_main(fixtures_path: str) -> int:
    """The project's committer: Olivia's signed ``membership.change`` documents through
    ``accept_document`` at the paced times; each Event of a receipt is one record."""
    setup_django(migrate=False)
    import missions.authority as authority
    from missions.authority import accept_document
    from missions.models import Group

    fx = json.loads(Path(fixtures_path).read_text())
    owner, toggle = persona(fx["owner"]), fx["toggle"]
    roles_now: dict[str, list[str]] = defaultdict(lambda: ["worker"])
    committed_at: list[float] = []
    original_notify = authority.notify_commit

    def timed_notify(*args: Any) -> None:  # on_commit: the moment the transaction committed
        committed_at.append(time.time())
        original_notify(*args)

    authority.notify_commit = timed_notify  # type: ignore[assignment]  # this process only
    answer({"ready": True})
    for req in requests():
        groups: list[str] = req["groups"]
        revisions = {str(g): int(r) for g, r in Group.objects.filter(id__in=groups).values_list("id", "revision")}
        records: list[list[Any]] = []
        errors = accepted = 0
        for k, due in enumerate(paced(req["rate"], req["duration"])):
            sleep_until(due - PREPARE_LEAD)
            group = groups[k % len(groups)]
            roles = ["reviewer", "worker"] if roles_now[group] == ["worker"] else ["worker"]
            # Built and signed here, before the clock: signing is the client's cost.
            data = owner.document("membership.change", group, {"principal": toggle, "roles": roles},
                                  expected_revision=revisions[group])  # fmt: skip
            sleep_until(due)
            committed_at.clear()
            t0 = time.time()
            try:
                receipt = accept_document(data)
            except Exception as exc:  # count it and carry on; the report shows it
                errors += 1
                print(f"committer: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                revisions[group] = int(Group.objects.values_list("revision", flat=True).get(id=group))
                continue
            t1 = time.time()
            roles_now[group] = roles
            accepted += 1
            revisions[group] = int(receipt["aggregateRevision"])
            tc = committed_at[0] if committed_at else t1
            records += [[f"urn:uuid:{group}", int(e["sequence"]), t1, tc, t0] for e in receipt["events"]]
        answer({"records": records, "errors": errors, "commands": accepted})
    return 0


def publish_frames(fixtures_path: str, publish: Callable[[str, int, str], float]) -> None:
    """The publishers' loop (bare and floor): say ready, then for each request, at
    each paced time, build as many EVENT frames as the project's Command appends
    Events (the template's, with the next sequences of the Group in turn) and hand
    each to ``publish(group, sequence, frame)``, which returns the moment the frame
    counts as committed. Records ``[group, sequence, returned, committed, started]``
    like the committer."""
    fx = json.loads(Path(fixtures_path).read_text())
    template, per_commit = fx["template"], int(fx["events_per_commit"])
    sequence: dict[str, int] = defaultdict(int)
    answer({"ready": True})
    for req in requests():
        groups: list[str] = [f"urn:uuid:{g}" for g in req["groups"]]
        records: list[list[Any]] = []
        ticks = 0
        for k, due in enumerate(paced(req["rate"], req["duration"])):
            sleep_until(due - PREPARE_LEAD)
            group = groups[k % len(groups)]
            ticks += 1
            built = []
            for _ in range(per_commit):
                sequence[group] += 1
                seq = sequence[group]
                event = {**template["event"], "groupId": group, "sequence": seq}
                built.append((seq, json.dumps({**template, "frameId": f"urn:uuid:{uuid.uuid4()}", "event": event},
                                              separators=(",", ":"))))  # fmt: skip
            sleep_until(due)
            t0 = time.time()
            for seq, frame in built:
                committed = publish(group, seq, frame)
                records.append([group, seq, time.time(), committed, t0])
        answer({"records": records, "errors": 0, "commands": ticks})


def publisher_main(url: str, fixtures_path: str) -> int:
    """The bare side's publisher: one connection to the bare server; a frame
    counts as committed when ``send()`` returns."""
    from websockets.sync.client import connect

    with connect(url, max_size=MAX_WS_BYTES, compression=None, open_timeout=30) as ws:
        ws.send(json.dumps({"frameType": "PUBLISHER"}))
        ws.recv(timeout=30)

        def publish(group: str, seq: int, frame: str) -> float:
            ws.send(frame)
            return time.time()

        publish_frames(fixtures_path, publish)
    return 0


FLOOR_CHANNEL = "mwp-fanout-floor"
FLOOR_TABLE = "fanout_floor"


def floor_publisher_main(fixtures_path: str, floor_db: str, floor_redis: str) -> int:
    """The cross-machine floor's committer: INSERT the Event's frame (autocommit: the
    commit), then PUBLISH the head notice with the frame on Redis from the
    same thread."""
    import psycopg
    import redis

    client = redis.Redis.from_url(floor_redis)
    with psycopg.connect(conninfo(floor_db), autocommit=True, prepare_threshold=0) as db:

        def publish(group: str, seq: int, frame: str) -> float:
            db.execute(f"INSERT INTO {FLOOR_TABLE} (group_id, sequence, frame) VALUES (%s, %s, %s)",
                       (group, seq, frame))  # fmt: skip
            committed = time.time()
            client.publish(FLOOR_CHANNEL, json.dumps({"group": group, "sequence": seq, "frame": frame}))
            return committed

        publish_frames(fixtures_path, publish)
    return 0


def bare_server_main(port: int, floor_db: str | None = None, floor_redis: str | None = None) -> int:
    """A bare broadcast server: hello -> welcome, subscribe -> subscribed; a
    ``publisher`` connection's frames go unchanged to their Group's subscribers.

    With ``floor_redis`` it is the **cross-machine floor** instead: frames come from
    no connection but from head notices on the Redis channel
    ``FLOOR_CHANNEL``, each carrying the committed Event's frame, which it
    broadcasts: the hop between a commit and a subscriber with nothing else
    around it.
    """
    from websockets.asyncio.server import ServerConnection, broadcast, serve

    subscribers: dict[str, set[ServerConnection]] = defaultdict(set)

    async def follow_floor() -> None:
        import redis.asyncio as aioredis

        assert floor_redis is not None
        client = aioredis.Redis.from_url(floor_redis)
        pubsub = client.pubsub()
        await pubsub.subscribe(FLOOR_CHANNEL)
        async for message in pubsub.listen():
            if message.get("type") != "message":
                continue
            head = json.loads(message["data"])
            targets = subscribers.get(head["group"])
            if targets:
                broadcast(targets, head["frame"])

    async def handler(ws: ServerConnection) -> None:
        joined: list[str] = []
        publisher = False
        try:
            async for message in ws:
                if publisher:
                    group = json.loads(message)["event"]["groupId"]
                    targets = subscribers.get(group)
                    if targets:
                        broadcast(targets, message)
                    continue
                frame = json.loads(message)
                kind = frame.get("frameType")
                if kind == "HELLO":  # no handshake: the bare server trusts every client
                    await ws.send(json.dumps({"frameType": "HELLO", "phase": "server_accept"}))
                elif kind == "SUBSCRIBE":
                    group = frame["groups"][0]["groupId"]
                    subscribers[group].add(ws)
                    joined.append(group)
                    await ws.send(json.dumps({"frameType": "SUBSCRIBED", "groupId": group}))
                elif kind == "PUBLISHER":
                    publisher = True
                    await ws.send(json.dumps({"frameType": "OK"}))
        finally:
            for group in joined:
                subscribers[group].discard(ws)

    async def run() -> None:
        async with serve(handler, "127.0.0.1", port, max_size=MAX_WS_BYTES, compression=None, ping_interval=None):
            if floor_redis:
                await follow_floor()
            await asyncio.Future()

    asyncio.run(run())
    return 0
