"""The WorkItem lifecycle mix of ``bench/commands.py`` (``--part lifecycle``).

Each thread drives WorkItems through ``work.authorize``, ``work.offer``,
``work.accept_offer``, ``work.start``, then 5 x (``work.checkpoint``,
``work.start``) (a checkpoint returns the WorkItem to ``queued``, §10.2, so
every checkpoint needs a new start and its new Execution Lease),
``artifact.publish`` (a manifest signed by the Worker, of bytes the Group
holds), ``work.submit`` (that Artifact and Evidence for both acceptance
criteria, signed by the Worker) and ``work.accept_result`` (Evidence signed
by the Coordinator): 17 Commands per lifecycle, the payloads of
``tests/workitems/flow.py`` (the normative Work Contract, selection basis,
checkpoints, Evidence and manifests; rebuilt here, the benchmark does not
import the test suite). Two layouts: **spread**, each thread its own
Mission Group with its own Coordinator and Worker Agents (no Group lock
shared between threads), and **shared**, all threads in one Mission Group
(each thread still its own Coordinator/Worker pair), at concurrency 1 and 8
(shared: 8 only, and on PostgreSQL only: SQLite serialises every writer).

Only ``work.authorize`` and ``work.offer`` are pre-signed (the offer's
expected revision is every new WorkItem's first); the other 15 Commands
depend on the previous receipt (``aggregateRevision`` for compare-and-set,
``executionLeaseId`` from ``work.start``'s ``grants``) and are built and
signed inside the timed loop, as a client would; that client cost is
measured and shown. The project side sends each through
``accept_document(bytes)``. The raw baseline issues the same 17 minimal
signed acceptance transactions per lifecycle (``bench/_commands_raw.py``;
the first INSERTs the aggregate row at revision 1 instead of the
compare-and-set UPDATE), each Command a signed document built and signed in
the loop too, with the Event kinds and payloads a project lifecycle wrote
(copied from a probe lifecycle driven at set-up), from the same number of
threads on the same layout. Lifecycles/s = accepted Commands / 17 / window;
the ratio at concurrency 8, spread layout, is informational.
"""

from __future__ import annotations

import io
import json
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bench._commands_common import (
    LIFECYCLE_CELLS,
    LIFECYCLE_CHECKPOINTS,
    SQLITE_LIFECYCLE_CELLS,
    WARMUP_SECONDS,
    fmt,
    log,
)
from bench._commands_project import (
    BASIS,
    CAPABILITY,
    COORDINATE,
    COORDINATOR_EPOCH,
    Fixtures,
    Persona,
    make_principal,
    new_mission,
    project_runner,
    stamp,
    with_card,
    work_contract,
)

LIFECYCLE_STEPS = (
    "work.authorize",
    "work.offer",
    "work.accept_offer",
    "work.start",
    *(("work.checkpoint", "work.start") * LIFECYCLE_CHECKPOINTS),
    "artifact.publish",
    "work.submit",
    "work.accept_result",
)
COMMANDS_PER_LIFECYCLE = len(LIFECYCLE_STEPS)  # 17
PRESIGNED_STEPS = ("work.authorize", "work.offer")
DELIVERABLE = b"# Summary\n\nEvery response, summarised.\n"


def progress() -> dict[str, Any]:
    """Structured progress (§11.4; the WorkItem schema's ``progress``)."""
    return {
        "currentPhase": "drafting",
        "completedMilestones": ["read inputs"],
        "nextCheckpoint": "outline",
        "blockers": [],
        "updatedCompletionEstimate": stamp(datetime.now(UTC) + timedelta(hours=1)),
        "evidenceIds": [],
    }


@dataclass
class Lane:
    """What one thread drives: a Mission Group, its Coordinator/Worker pair, and
    the deliverable's bytes the Group holds (hex SHA-256, size)."""

    group: str
    mission: str
    coordinator: Persona
    worker: Persona
    sha: str
    size: int


@dataclass
class LifecycleFixtures:
    spread: list[Lane]  # one Mission Group per thread
    shared: list[Lane]  # one Mission Group for every thread
    # The Event kinds and payloads of one project lifecycle, per Command: the raw side's.
    steps: list[list[tuple[str, dict[str, Any]]]]

    def lanes(self, layout: str) -> list[Lane]:
        return self.spread if layout == "spread" else self.shared


def _stored(group: str, worker: Persona) -> tuple[str, int]:
    """The deliverable's bytes, held by ``group`` (``ext.mwportal.artifact.content_store``)."""
    from artifacts.store import store_stream
    from missions.models import Agent, Group

    blob = store_stream(
        io.BytesIO(DELIVERABLE), "text/markdown", Group.objects.get(id=group), Agent.objects.get(id=worker.id), 10**6
    )
    return blob.sha256, len(DELIVERABLE)


def _mission_id(group: str) -> str:
    from missions.models import Mission

    return str(Mission.objects.values_list("id", flat=True).get(group_id=group))


def build_lifecycle_fixtures(fx: Fixtures, threads: int | None = None) -> LifecycleFixtures:
    n = threads or max(c for _, c in LIFECYCLE_CELLS)
    cap = (CAPABILITY["id"], CAPABILITY["version"])
    coordinators = [
        with_card(make_principal("bench", f"Coordinator {i}", ["coordinator"]), COORDINATE) for i in range(n)
    ]
    workers = [with_card(make_principal("bench", f"Worker {i}", ["worker"]), cap) for i in range(n)]
    spread = []
    for c, w in zip(coordinators, workers, strict=True):
        group = new_mission(fx.owner, c, [(w, ["worker"])], "Lifecycle bench")
        spread.append(Lane(group, _mission_id(group), c, w, *_stored(group, w)))
    # One shared Group: the first pair's Coordinator holds the Mission's lease, every
    # other Coordinator Agent is a coordinator member.
    # One shared Group: a Mission has one Coordinator (its lease, §7.2), so there
    # every thread's Worker works for the first pair's Coordinator.
    shared_group = new_mission(fx.owner, coordinators[0], [(w, ["worker"]) for w in workers], "Lifecycle (shared)")
    mission = _mission_id(shared_group)
    shared = [Lane(shared_group, mission, coordinators[0], w, *_stored(shared_group, w)) for w in workers]
    steps = probe(spread[0])
    return LifecycleFixtures(spread, shared, steps)


def probe(lane: Lane) -> list[list[tuple[str, dict[str, Any]]]]:
    """Drive one lifecycle (it must reach ``verified``); its Events' kinds and payloads per Command."""
    from missions.models import GroupEvent
    from workitems.models import WorkItem

    actions: list[str] = []
    item, authorize, offer = lifecycle_pools([lane], 1, 1)[0][0]
    for _ in project_lifecycle(lane, [(item, authorize, offer)], [0.0], actions):
        pass
    state = WorkItem.objects.values_list("state", flat=True).get(id=item)
    if state != "verified":
        raise RuntimeError(f"the probe lifecycle ended {state}, not verified")
    rows = GroupEvent.objects.filter(group_id=lane.group, action_id__in=actions).order_by("sequence")
    by_action: dict[str, list[tuple[str, dict[str, Any]]]] = {a: [] for a in actions}
    for action, kind, body in rows.values_list("action_id", "type", "body"):
        by_action[str(action)].append((kind, body if isinstance(body, dict) else json.loads(body)))
    steps = [by_action[a] for a in actions]
    if len(steps) != COMMANDS_PER_LIFECYCLE:
        raise RuntimeError(
            f"the probe lifecycle appended Events for {len(steps)} Commands, not {COMMANDS_PER_LIFECYCLE}"
        )
    return steps


def lifecycle_pools(lanes: list[Lane], threads: int, per_thread: int) -> list[list[tuple[str, bytes, bytes]]]:
    """Per thread, ``per_thread`` lifecycles' pre-signed ``work.authorize`` and
    ``work.offer`` (the only two Commands that need no earlier receipt)."""
    contract = work_contract()
    pools = []
    for t in range(threads):
        lane = lanes[t]
        pool = []
        for _ in range(per_thread):
            item = str(uuid.uuid4())
            wid = f"urn:uuid:{item}"
            authorize = lane.coordinator.document(
                "work.authorize",
                lane.group,
                {"workItemId": wid, "contract": contract},
                work_item_id=item,
                coordinator_epoch=COORDINATOR_EPOCH,
            )
            offer = {"workItemId": wid, "candidateAgentIds": [lane.worker.urn], "offerExpiresInSeconds": 3600,
                     "selectionBasis": BASIS}  # fmt: skip
            # Every new WorkItem is at revision 1 once authorized.
            pool.append((item, authorize, lane.coordinator.document(
                "work.offer", lane.group, offer, work_item_id=item, expected_revision=1,
                coordinator_epoch=COORDINATOR_EPOCH)))  # fmt: skip
        pools.append(pool)
    return pools


def _signed_document(document: dict[str, Any], agent: Persona, profile: str) -> dict[str, Any]:
    from mwportal.protocol.verification import sign_document

    return sign_document(document, key_id=agent.key.key_id, seed=agent.key.seed, profile=profile)


def evidence(lane: Lane, item: str, producer: Persona, artifacts: list[str]) -> list[dict[str, Any]]:
    """One Evidence document (§13.2) for both criteria, signed by its producer."""
    document = {
        "evidenceId": f"urn:uuid:{uuid.uuid4()}",
        "missionId": f"urn:uuid:{lane.mission}",
        "groupId": f"urn:uuid:{lane.group}",
        "workItemId": f"urn:uuid:{item}",
        "type": "deterministic_test",
        "subject": {"type": "work_item", "id": f"urn:uuid:{item}"},
        "criterionIds": ["complete", "accurate"],
        "method": "ran the survey coverage check",
        "result": "passed",
        "artifactHashes": ["sha256:" + a for a in artifacts],
        "generatedBy": producer.actor,
        "createdAt": stamp(),
    }
    return [_signed_document(document, producer, "evidence")]


def manifest(lane: Lane, item: str) -> dict[str, Any]:
    """The deliverable's Artifact manifest (§13.1), signed by the Worker."""
    document = {
        "artifactId": f"urn:uuid:{uuid.uuid4()}",
        "contentHash": "sha256:" + lane.sha,
        "uri": f"https://portal.example.org/artifacts/{lane.sha}",
        "sizeBytes": lane.size,
        "mediaType": "text/markdown",
        "schemaUri": "https://schemas.example.org/summary",
        "producer": {"agentId": lane.worker.urn, "agentCardVersion": 1, "capabilities": [CAPABILITY]},
        "missionId": f"urn:uuid:{lane.mission}",
        "groupId": f"urn:uuid:{lane.group}",
        "workItemId": f"urn:uuid:{item}",
        "sourceArtifactHashes": [],
        "toolVersions": [],
        "modelVersions": [],
        "classification": "internal",
        "createdAt": stamp(),
    }
    return _signed_document(document, lane.worker, "artifact")


def project_lifecycle(
    lane: Lane, pool: list[tuple[str, bytes, bytes]], build: list[float], actions: list[str] | None = None
) -> Any:
    """A generator that accepts one Command per ``next()``, lifecycle after
    lifecycle from ``pool``. Commands after the offer are built and signed here,
    from the previous receipt; ``build[0]`` accumulates that client-side time.
    ``actions`` collects the accepted action IDs (bare)."""
    from missions.authority import accept_document
    from mwportal.protocol import catalogue

    group, coordinator, worker = lane.group, lane.coordinator, lane.worker
    cas = {kind: catalogue.command(kind).compare_and_set for kind in set(LIFECYCLE_STEPS)}
    progressed = progress()

    def send(data: bytes) -> dict[str, Any]:
        receipt: dict[str, Any] = accept_document(data)
        if actions is not None:
            actions.append(str(receipt["actionId"]).removeprefix("urn:uuid:"))
        return receipt

    def signed(agent: Persona, kind: str, item: str, payload: dict[str, Any], revision: int) -> bytes:
        t = time.perf_counter()
        kw: dict[str, Any] = {"expected_revision": revision} if cas[kind] else {}
        if agent is coordinator:
            kw["coordinator_epoch"] = COORDINATOR_EPOCH
        data = agent.document(kind, group, {"workItemId": f"urn:uuid:{item}", **payload}, work_item_id=item, **kw)
        build[0] += time.perf_counter() - t
        return data

    for item, authorize_doc, offer_doc in pool:
        send(authorize_doc)
        yield
        revision = send(offer_doc)["aggregateRevision"]
        yield
        revision = send(signed(worker, "work.accept_offer", item, {}, revision))["aggregateRevision"]
        # The first acceptance of a new WorkItem gives Ownership Epoch 1 (the
        # Worker reads it from the work.offer.accepted Event).
        fences: dict[str, Any] = {"ownershipEpoch": 1}
        yield
        for k in range(LIFECYCLE_CHECKPOINTS + 1):
            receipt = send(signed(worker, "work.start", item, {"ownershipEpoch": 1}, revision))
            fences["executionLeaseId"] = receipt["grants"]["executionLeaseId"]
            revision = receipt["aggregateRevision"]
            yield
            if k == LIFECYCLE_CHECKPOINTS:
                break
            point = {"phase": f"step {k + 1}", "createdAt": stamp(), "completedMilestones": ["read inputs"],
                     "nextStep": "outline"}  # fmt: skip
            payload = {**fences, "checkpoint": point, "progress": progressed}
            revision = send(signed(worker, "work.checkpoint", item, payload, revision))["aggregateRevision"]
            yield
        t = time.perf_counter()
        artifact = manifest(lane, item)
        build[0] += time.perf_counter() - t
        revision = send(signed(worker, "artifact.publish", item, {**fences, "artifact": artifact}, revision))[
            "aggregateRevision"
        ]
        yield
        t = time.perf_counter()
        submitted = {
            **fences,
            "artifactIds": [artifact["artifactId"]],
            "evidence": evidence(lane, item, worker, [lane.sha]),
        }
        build[0] += time.perf_counter() - t
        revision = send(signed(worker, "work.submit", item, submitted, revision))["aggregateRevision"]
        yield
        t = time.perf_counter()
        accepted = {"evidence": evidence(lane, item, coordinator, [])}
        build[0] += time.perf_counter() - t
        send(signed(coordinator, "work.accept_result", item, accepted, revision))
        yield


def raw_lifecycle(state: Any, layout: Any, group: uuid.UUID, steps: list[list[tuple[str, dict[str, Any]]]]) -> Any:
    """The raw baseline's lifecycle: 17 minimal signed acceptance transactions on a new
    aggregate, created by the first; each Command built and signed in the loop
    (its payload: the step's last Event payload, of the size the project's carry)."""
    from bench._commands_raw import RawCommand, raw_accept, raw_document

    conn, cur = state
    while True:
        item = uuid.uuid4()
        for expected, (kind, events) in enumerate(zip(LIFECYCLE_STEPS, steps, strict=True)):
            data = raw_document(layout, kind, group, events[-1][1], work_item_id=str(item), session_epoch=1)
            raw_accept(conn, cur, layout, RawCommand(group, item, "work_item", expected, data, events))
            yield


@dataclass
class LifecycleMeasurement:
    lps: float  # lifecycles per second: accepted Commands / 17 / window
    cps: float
    commands: int
    complete: int  # lifecycles completed inside the window
    seconds: float
    errors: int
    exhausted: bool
    build_seconds: float  # client-side build + sign + parse inside the loop, all threads
    process_cpu: float  # CPU seconds of this whole process (every thread) per second of window

    @property
    def build_ms_per_lifecycle(self) -> float:
        lifecycles = self.commands / COMMANDS_PER_LIFECYCLE
        return self.build_seconds / lifecycles * 1000 if lifecycles else 0.0


def measure_lifecycles(
    threads: int,
    duration: float,
    open_conn: Callable[[], Any],
    steps: Callable[[int, Any, list[float]], Any],
    close_conn: Callable[[Any], None],
) -> LifecycleMeasurement:
    """Like ``measure``: ``threads`` threads from a barrier for ``duration``
    seconds, each advancing its own generator one Command at a time; the
    window ends when the last in-flight Command finishes."""
    barrier = threading.Barrier(threads + 1)
    stop = threading.Event()
    exhausted = threading.Event()
    counts = [0] * threads
    ends = [0.0] * threads
    builds = [0.0] * threads
    errors: list[str] = []

    def worker(i: int) -> None:
        state = gen = None
        build = [0.0]
        try:
            state = open_conn()
            gen = steps(i, state, build)
        except Exception as exc:
            errors.append(f"connect: {exc!r}")
        barrier.wait()
        done = 0
        try:
            while gen is not None and not stop.is_set():
                try:
                    next(gen)
                except StopIteration:
                    exhausted.set()
                    stop.set()
                    break
                done += 1
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            stop.set()
        finally:
            ends[i] = time.perf_counter()
            counts[i] = done
            builds[i] = build[0]
            if gen is not None:
                gen.close()
            if state is not None:
                close_conn(state)

    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in workers:
        t.start()
    barrier.wait()
    start, cpu0 = time.perf_counter(), time.process_time()
    stop.wait(duration)
    stop.set()
    for t in workers:
        t.join()
    seconds = max(ends) - start
    cpu = time.process_time() - cpu0
    for e in errors[:3]:
        log(f"    error: {e}")
    commands = sum(counts)
    return LifecycleMeasurement(
        process_cpu=cpu / seconds if seconds > 0 else 0.0,
        lps=commands / COMMANDS_PER_LIFECYCLE / seconds if seconds > 0 else 0.0,
        cps=commands / seconds if seconds > 0 else 0.0,
        commands=commands,
        complete=sum(c // COMMANDS_PER_LIFECYCLE for c in counts),
        seconds=seconds,
        errors=len(errors),
        exhausted=exhausted.is_set(),
        build_seconds=sum(builds),
    )


def run_lifecycles(
    backend: str, fx: Fixtures, layout: Any, duration: float, repeats: int
) -> tuple[dict[str, Any], int]:
    """Every lifecycle cell, project and raw interleaved; the cells and the error count."""
    from django.db import connection

    from bench._commands_raw import raw_runner

    t0 = time.monotonic()
    lfx = build_lifecycle_fixtures(fx)
    log(f"  lifecycle fixtures: {len(lfx.spread)} Mission Groups + 1 shared, {2 * len(lfx.spread)} Agents "
        f"in {time.monotonic() - t0:.1f} s")  # fmt: skip
    impls = ["raw", "project"] if layout is not None else ["project"]
    open_project, _, close_project = project_runner()
    best: dict[tuple[str, str, int], float] = {}

    def one(impl: str, lay: str, c: int, seconds: float) -> LifecycleMeasurement:
        if impl == "project":
            rate = best.get((impl, lay, c)) or max((v for (i, _, _), v in best.items() if i == impl), default=60.0)
            # Generous: one thread may outpace the others (up to 4x its share);
            # only authorize and offer are pre-signed, so a pool is cheap.
            per_thread = int(rate * 1.5 * seconds * min(c, 4) / c) + 5
            pools = lifecycle_pools(lfx.lanes(lay), c, per_thread)
            lanes = lfx.lanes(lay)
            connection.close()

            def project_steps(i: int, _state: Any, build: list[float]) -> Any:
                return project_lifecycle(lanes[i], pools[i], build)

            m = measure_lifecycles(c, seconds, open_project, project_steps, close_project)
        else:
            assert layout is not None
            open_raw, _, close_raw = raw_runner(layout)
            groups = layout.lifecycle_groups if lay == "spread" else [layout.lifecycle_shared] * c

            def raw_steps(i: int, state: Any, _build: list[float]) -> Any:
                assert layout is not None
                return raw_lifecycle(state, layout, groups[i], lfx.steps)

            m = measure_lifecycles(c, seconds, open_raw, raw_steps, close_raw)
        best[(impl, lay, c)] = max(best.get((impl, lay, c), 0.0), m.lps)
        return m

    cells: dict[str, Any] = {}
    errors = 0
    for impl in impls:  # warm up and calibrate the pool size
        one(impl, "spread", max(c for _, c in LIFECYCLE_CELLS), WARMUP_SECONDS)
    for lay, c in lifecycle_cells(backend):
        runs: dict[str, list[LifecycleMeasurement]] = {impl: [] for impl in impls}
        for rep in range(repeats):
            order = impls if rep % 2 == 0 else impls[::-1]
            for impl in order:
                m = one(impl, lay, c, duration)
                errors += m.errors
                runs[impl].append(m)
                note = " (pool ran dry: shorter window)" if m.exhausted else ""
                build = f"; client build+sign {m.build_ms_per_lifecycle:.1f} ms/lifecycle" if impl == "project" else ""
                build += f"; process CPU {m.process_cpu:.2f} cores"
                log(
                    f"  {backend:8} lifecycle {lay} c{c} {impl:7} run {rep + 1}: {m.lps:7.1f} lifecycles/s "
                    f"({m.cps:.0f} cmd/s; {m.commands} Commands, {m.complete} complete lifecycles in "
                    f"{m.seconds:.2f} s{build}){note}"
                )
        project = runs["project"]
        cell: dict[str, Any] = {
            "project": statistics.median(m.lps for m in project),
            "project_runs": [m.lps for m in project],
            "project_cps": statistics.median(m.cps for m in project),
            "project_complete": sum(m.complete for m in project),
            "build_ms": statistics.median(m.build_ms_per_lifecycle for m in project),
            # Client build+sign seconds (all threads) per second of window.
            "build_share": statistics.median(m.build_seconds / m.seconds if m.seconds else 0.0 for m in project),
            # CPU-seconds of the benchmark process per second of window: near
            # 1.0 with Python threads means the GIL is the ceiling.
            "project_cpu": statistics.median(m.process_cpu for m in project),
        }
        if "raw" in runs:
            cell["raw"] = statistics.median(m.lps for m in runs["raw"])
            cell["raw_runs"] = [m.lps for m in runs["raw"]]
            cell["raw_cps"] = statistics.median(m.cps for m in runs["raw"])
            cell["raw_cpu"] = statistics.median(m.process_cpu for m in runs["raw"])
            cell["ratio"] = cell["project"] / cell["raw"] if cell["raw"] else None
            log(
                f"  {backend:8} lifecycle {lay} c{c} median project {cell['project']:.1f} / raw {cell['raw']:.1f}"
                f" lifecycles/s = {cell['ratio']:.2f}"
            )
        cells[f"{lay}_c{c}"] = cell
    check_lifecycle_state(lfx)
    return cells, errors


def lifecycle_cells(backend: str) -> tuple[tuple[str, int], ...]:
    return SQLITE_LIFECYCLE_CELLS if backend == "sqlite" else LIFECYCLE_CELLS


def check_lifecycle_state(lfx: LifecycleFixtures) -> None:
    """Sanity: lifecycles reached ``verified``, and the shared Group's chain is gap-free."""
    from missions.models import Group, GroupEvent
    from workitems.models import WorkItem

    verified = WorkItem.objects.filter(group_id__in=[lfx.spread[0].group, lfx.shared[0].group], state="verified")
    if not verified.exists():
        raise RuntimeError("no WorkItem reached verified during the lifecycle measurements")
    shared = lfx.shared[0].group
    head = Group.objects.values_list("last_sequence", flat=True).get(id=shared)
    count = GroupEvent.objects.filter(group_id=shared).count()
    if head != count:
        raise RuntimeError(f"shared lifecycle Group head {head} but {count} Events")


def print_lifecycle_table(
    postgres: dict[str, Any] | None,
    sqlite: dict[str, Any] | None,
    pg_url: str | None,
    pg_why: str,
    print_table: Callable[[tuple[str, ...], list[tuple[str, ...]]], None],
) -> None:
    print()
    print(
        f"WorkItem lifecycles per second ({COMMANDS_PER_LIFECYCLE} Commands each: authorize, offer, accept_offer, "
        f"start, {LIFECYCLE_CHECKPOINTS} x (checkpoint, start), artifact.publish, submit, accept_result)"
    )
    print("  median of runs; ratio = median project / median raw; lifecycles/s = accepted Commands / 17 / window")
    print(
        "  spread = one Mission Group (own coordinator + worker) per thread; shared = one Mission Group for all threads"
    )
    print(
        f"  project: only {' and '.join(PRESIGNED_STEPS)} are pre-signed; the other "
        f"{COMMANDS_PER_LIFECYCLE - len(PRESIGNED_STEPS)} Commands depend on the previous receipt (revision for"
    )
    print(
        "  compare-and-set, executionLeaseId from work.start) and are built and signed INSIDE the timed loop;"
        " that client cost"
    )
    print("  is included in the project's rate and shown as 'client ms/lc'")
    print("  CPU = CPU-seconds of the benchmark process (all its threads) per second of window: the threads share one")
    print("  interpreter, so near 1.0 the GIL, not PostgreSQL, is the ceiling")
    header = (
        "backend", "layout", "threads", "project lc/s", "raw lc/s", "ratio", "project cmd/s", "raw cmd/s",
        "client ms/lc", "CPU project/raw", "project runs",
    )  # fmt: skip
    rows: list[tuple[str, ...]] = []
    for part in (postgres, sqlite):
        if part is None:
            continue
        for lay, c in LIFECYCLE_CELLS:
            if f"{lay}_c{c}" not in part["lifecycle"]:
                continue
            cell = part["lifecycle"][f"{lay}_c{c}"]
            rows.append(
                (
                    part["backend"],
                    lay,
                    str(c),
                    fmt(cell["project"], 1),
                    fmt(cell.get("raw"), 1),
                    fmt(cell.get("ratio"), 2),
                    fmt(cell["project_cps"]),
                    fmt(cell.get("raw_cps")),
                    f"{cell['build_ms']:.1f}",
                    f"{cell['project_cpu']:.2f}/{fmt(cell.get('raw_cpu'), 2)}",
                    " ".join(fmt(x, 1) for x in cell["project_runs"]),
                )
            )
    if pg_url is None:
        print(f"  PostgreSQL part SKIPPED: {pg_why}; set MWP_DATABASE_URL=postgres://... to measure it")
        rows.append(("postgresql", "(skipped)", "", "", "", "", "", "", "", "", pg_why))
    print_table(header, rows)
